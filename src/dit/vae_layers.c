/* The VAE's layers on the CPU, one image x[C, H, W] at a time: what the CPU backend
 * (backend_cpu.c) runs for dit/vae.c's forwards. Wide 3x3 convolutions run by Winograd
 * (vae_winograd.c), the others as im2col of a band of output rows and one OpenBLAS GEMM a band;
 * the element-wise loops are vectorized. */
#include "config.h"

/* Without trapping math GCC turns SiLU's clamps (dit/activation.h) into min and max and
 * vectorizes the element-wise loops; they were scalar, 11% of a decode. Before the includes, so
 * that dit_silu is compiled with the same options and inlines into the loops. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/activation.h"
#include "dit/backend.h"
#include "dit/dit_internal.h"
#include "dit/vae.h"

#define VAE_EPS 1e-6
/* The element-wise loops (GroupNorm, SiLU, sums, bias, residual) in the widest vectors this CPU
 * has. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define VAE_VEC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VAE_VEC
#endif


/* The sum of x[i] - m (squared when sq) over n values: in float lanes over chunks of 256, so
 * that it vectorizes, the chunks added in double, so that a group of 65536 values sums as
 * accurately as one of 256. */
VAE_VEC static double sum_chunked(const float *x, size_t n, float m, bool sq)
{
    double total = 0;
    for (size_t c0 = 0; c0 < n; c0 += 256) {
        size_t c1 = TDL_MIN(n, c0 + 256);
        float lane[8] = {0};
        size_t i = c0;
        for (; i + 8 <= c1; i += 8)
            for (int l = 0; l < 8; l++) {
                float d = x[i + l] - m;
                lane[l] += sq ? d * d : d;
            }
        for (; i < c1; i++) {
            float d = x[i] - m;
            lane[0] += sq ? d * d : d;
        }
        for (int l = 0; l < 8; l++)
            total += lane[l];
    }
    return total;
}

/* y = x * a + b, then SiLU when silu. */
VAE_VEC static void norm_apply(float *y, const float *x, float a, float b, int n, bool silu)
{
    if (silu)
        for (int i = 0; i < n; i++)
            y[i] = dit_silu(x[i] * a + b);
    else
        for (int i = 0; i < n; i++)
            y[i] = x[i] * a + b;
}

void dit_vae_groupnorm_forward(float *out, const float *in, const float *weight, const float *bias,
                               int c, int hw, int groups, bool silu)
{
    int per = c / groups;
    size_t n = (size_t)per * hw;
    for (int g = 0; g < groups; g++) {
        const float *x = in + (size_t)g * n;
        float m = (float)(sum_chunked(x, n, 0.0f, false) / (double)n);
        double var = sum_chunked(x, n, m, true) / (double)n;
        float rstd = (float)(1.0 / sqrt(var + VAE_EPS));
        for (int ch = g * per; ch < (g + 1) * per; ch++) {
            const float *xc = in + (size_t)ch * hw;
            float *yc = out + (size_t)ch * hw;
            float a = rstd * weight[ch], b = bias[ch] - m * a;
            norm_apply(yc, xc, a, b, hw, silu);
        }
    }
}

/* cols[Cin*9, (r1-r0)*W] of output rows r0 to r1, zero beyond the edges (padding 1); the
 * columns x0 to x1 of a tap read inside the row, and are copied whole. */
static void im2col3(float *cols, const float *in, int cin, int h, int w, int r0, int r1)
{
    size_t ncol = (size_t)(r1 - r0) * w;
    for (int ci = 0; ci < cin; ci++)
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                float *row = cols + ((size_t)ci * 9 + ky * 3 + kx) * ncol;
                int x0 = TDL_MAX(0, 1 - kx), x1 = TDL_MIN(w, w + 1 - kx);
                for (int y = r0; y < r1; y++) {
                    float *dst = row + (size_t)(y - r0) * w;
                    int sy = y + ky - 1;
                    if (sy < 0 || sy >= h || x1 <= x0) {
                        memset(dst, 0, (size_t)w * sizeof(float));
                        continue;
                    }
                    const float *src = in + ((size_t)ci * h + sy) * w + (kx - 1);
                    if (x0 > 0)
                        dst[0] = 0.0f;
                    memcpy(dst + x0, src + x0, (size_t)(x1 - x0) * sizeof(float));
                    if (x1 < w)
                        dst[w - 1] = 0.0f;
                }
            }
}

/* cols[Cin*9, (r1-r0)*Wo] of output rows r0 to r1 of the stride-2 convolution of Downsample2D:
 * output (y, x) tap (ky, kx) reads in[2y + ky][2x + kx], zero past the bottom and right edges
 * (its padding (0, 1, 0, 1)); nothing is padded at the top or left. */
static void im2col3_down(float *cols, const float *in, int cin, int h, int w, int wo, int r0,
                         int r1)
{
    size_t ncol = (size_t)(r1 - r0) * wo;
    for (int ci = 0; ci < cin; ci++)
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                float *row = cols + ((size_t)ci * 9 + ky * 3 + kx) * ncol;
                for (int y = r0; y < r1; y++) {
                    float *dst = row + (size_t)(y - r0) * wo;
                    int sy = 2 * y + ky;
                    if (sy >= h) {
                        memset(dst, 0, (size_t)wo * sizeof(float));
                        continue;
                    }
                    const float *src = in + ((size_t)ci * h + sy) * w + kx;
                    for (int x = 0; x < wo; x++)
                        dst[x] = 2 * x + kx < w ? src[2 * x] : 0.0f;
                }
            }
}

/* out[Cout, Ho*Wo] holds the bias (or what to add to) already, beta 1, or nothing, beta 0. */
static void conv3_banded(float *out, const float *in, const float *weight, int cin, int cout, int h,
                         int w, int stride, float beta, float *cols, size_t cols_floats)
{
    int ho = stride == 1 ? h : h / 2, wo = stride == 1 ? w : w / 2;
    size_t per_row = (size_t)cin * 9 * wo;
    int band = (int)TDL_MIN((size_t)ho, TDL_MAX((size_t)1, cols_floats / per_row));
    for (int r0 = 0; r0 < ho; r0 += band) {
        int r1 = TDL_MIN(ho, r0 + band), ncol = (r1 - r0) * wo;
        if (stride == 1)
            im2col3(cols, in, cin, h, w, r0, r1);
        else
            im2col3_down(cols, in, cin, h, w, wo, r0, r1);
        tensor_gemm(false, false, cout, ncol, cin * 9, 1.0f, weight, cin * 9, cols, ncol, beta,
                    out + (size_t)r0 * wo, ho * wo);
    }
}

VAE_VEC static void bias_fill(float *out, const float *bias, int cout, size_t hw, bool accumulate)
{
    for (int o = 0; o < cout; o++) {
        float *y = out + (size_t)o * hw;
        for (size_t i = 0; i < hw; i++)
            y[i] = accumulate ? y[i] + bias[o] : bias[o];
    }
}

void dit_vae_conv2d_forward(float *out, const float *in, const float *weight, const float *bias,
                            int cin, int cout, int h, int w, int k, bool accumulate, float *cols,
                            size_t cols_floats)
{
    size_t hw = (size_t)h * w;
    if (k == 3 && dit_vae_winograd_fits(cin, cout, w, cols_floats)) {
        dit_vae_conv2d_winograd(out, in, weight, bias, cin, cout, h, w, accumulate, cols,
                                cols_floats);
        return;
    }
    if (bias)
        bias_fill(out, bias, cout, hw, accumulate);
    float beta = bias || accumulate ? 1.0f : 0.0f;
    if (k == 1) {
        tensor_gemm(false, false, cout, (int)hw, cin, 1.0f, weight, cin, in, (int)hw, beta, out,
                    (int)hw);
        return;
    }
    conv3_banded(out, in, weight, cin, cout, h, w, 1, beta, cols, cols_floats);
}

void dit_vae_conv2d_down_forward(float *out, const float *in, const float *weight,
                                 const float *bias, int cin, int cout, int h, int w, float *cols,
                                 size_t cols_floats)
{
    if (bias)
        bias_fill(out, bias, cout, (size_t)(h / 2) * (w / 2), false);
    conv3_banded(out, in, weight, cin, cout, h, w, 2, bias ? 1.0f : 0.0f, cols, cols_floats);
}

VAE_VEC void dit_vae_add_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void dit_vae_transpose(float *out, const float *in, int rows, int cols, bool accumulate)
{
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) {
            float v = in[(size_t)r * cols + c];
            out[(size_t)c * rows + r] = accumulate ? out[(size_t)c * rows + r] + v : v;
        }
}

void dit_vae_attention_forward(float *o, const float *q, const float *k, const float *v, float *s,
                               int t, int c)
{
    int tile = TDL_MIN(t, DIT_VAE_ATTN_TILE);
    float scale = 1.0f / sqrtf((float)c);
    for (int r0 = 0; r0 < t; r0 += tile) {
        int rows = TDL_MIN(tile, t - r0);
        tensor_gemm(false, true, rows, t, c, scale, q + (size_t)r0 * c, c, k, c, 0.0f, s, t);
        dit_softmax_rows(s, rows, t);
        tensor_gemm(false, false, rows, c, t, 1.0f, s, t, v, c, 0.0f, o + (size_t)r0 * c, c);
    }
}

void dit_vae_upsample2x_forward(float *out, const float *in, int c, int h, int w)
{
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < 2 * h; y++) {
            const float *src = in + ((size_t)ch * h + y / 2) * w;
            float *dst = out + ((size_t)ch * 2 * h + y) * 2 * w;
            for (int x = 0; x < 2 * w; x++)
                dst[x] = src[x / 2];
        }
}
