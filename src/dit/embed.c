/* Embeddings and the image <-> token maps of the DiT. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "dit/dit_internal.h"

/* The patch embedding is a Conv2d with kernel = stride = p, i.e. a linear map of each patch
 * flattened in the weight's (c, i, j) order. */
void dit_patchify(float *patches, const float *x, int b, int c, int h, int w, int p)
{
    int gh = h / p, gw = w / p, pd = c * p * p;
    for (int s = 0; s < b; s++)
        for (int ti = 0; ti < gh; ti++)
            for (int tj = 0; tj < gw; tj++) {
                float *dst = patches + (((size_t)s * gh + ti) * gw + tj) * pd;
                for (int ch = 0; ch < c; ch++)
                    for (int i = 0; i < p; i++)
                        for (int j = 0; j < p; j++)
                            *dst++ = x[(((size_t)s * c + ch) * h + ti * p + i) * w + tj * p + j];
            }
}

/* The reference's unpatchify: tokens [B, h, w, p, q, C] -> [B, C, h*p, w*q]. */
void dit_unpatchify(float *out, const float *tokens, int b, int c, int h, int w, int p)
{
    int gh = h / p, gw = w / p;
    for (int s = 0; s < b; s++)
        for (int ti = 0; ti < gh; ti++)
            for (int tj = 0; tj < gw; tj++) {
                const float *src = tokens + (((size_t)s * gh + ti) * gw + tj) * p * p * c;
                for (int i = 0; i < p; i++)
                    for (int j = 0; j < p; j++)
                        for (int ch = 0; ch < c; ch++)
                            out[(((size_t)s * c + ch) * h + ti * p + i) * w + tj * p + j] =
                                *src++;
            }
}

void dit_unpatchify_backward(float *dtokens, const float *dout, int b, int c, int h, int w, int p)
{
    int gh = h / p, gw = w / p;
    for (int s = 0; s < b; s++)
        for (int ti = 0; ti < gh; ti++)
            for (int tj = 0; tj < gw; tj++) {
                float *dst = dtokens + (((size_t)s * gh + ti) * gw + tj) * p * p * c;
                for (int i = 0; i < p; i++)
                    for (int j = 0; j < p; j++)
                        for (int ch = 0; ch < c; ch++)
                            *dst++ +=
                                dout[(((size_t)s * c + ch) * h + ti * p + i) * w + tj * p + j];
            }
}

/* DiT's get_2d_sincos_pos_embed generalized to grid_h x grid_w: the first D/2 channels embed the
 * column (the reference's meshgrid puts w first), the last D/2 the row; each half is
 * [sin(pos * omega), cos(pos * omega)] with omega_k = 10000^(-k / (D/4)). */
void dit_pos_embed(float *pos, int grid_h, int grid_w, int d)
{
    int quarter = d / 4;
    for (int i = 0; i < grid_h; i++)
        for (int j = 0; j < grid_w; j++) {
            float *e = pos + ((size_t)i * grid_w + j) * d;
            for (int k = 0; k < quarter; k++) {
                double omega = 1.0 / pow(10000.0, (double)k / quarter);
                e[k] = (float)sin(j * omega);
                e[quarter + k] = (float)cos(j * omega);
                e[2 * quarter + k] = (float)sin(i * omega);
                e[3 * quarter + k] = (float)cos(i * omega);
            }
        }
}

/* DiT's TimestepEmbedder.timestep_embedding with max_period 10000, of t * 1000. */
void dit_timestep_embedding(float *freq, const float *t, int b)
{
    int half = DIT_FREQ_DIM / 2;
    for (int s = 0; s < b; s++) {
        double ts = (double)t[s] * DIT_T_SCALE;
        for (int k = 0; k < half; k++) {
            double f = exp(-log(10000.0) * k / half);
            freq[(size_t)s * DIT_FREQ_DIM + k] = (float)cos(ts * f);
            freq[(size_t)s * DIT_FREQ_DIM + half + k] = (float)sin(ts * f);
        }
    }
}
