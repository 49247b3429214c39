/* Element-wise and normalization layers of the DiT, each a forward/backward pair. Gradients are
 * accumulated (+=) so that branches that meet simply add. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "dit/activation.h"
#include "dit/dit_internal.h"

/* ---- LayerNorm without affine: y = (x - mean) * rstd ------------------------------------- */

void dit_layernorm_forward(float *out, float *mean, float *rstd, const float *in, int n, int d)
{
    for (int i = 0; i < n; i++)
        dit_layernorm_row(out + (size_t)i * d, &mean[i], &rstd[i], in + (size_t)i * d, d);
}

void dit_layernorm_backward(float *din, const float *dout, const float *in, const float *mean,
                            const float *rstd, int n, int d)
{
    for (int i = 0; i < n; i++)
        dit_layernorm_row_backward(din + (size_t)i * d, dout + (size_t)i * d,
                                   in + (size_t)i * d, mean[i], rstd[i], d);
}

/* ---- adaLN modulation: y = x * (1 + scale) + shift, per sample --------------------------- */

void dit_modulate_forward(float *out, const float *in, const float *shift, const float *scale,
                          int stride, int b, int t, int d)
{
    for (int s = 0; s < b; s++) {
        const float *sh = shift + (size_t)s * stride, *sc = scale + (size_t)s * stride;
        for (int k = 0; k < t; k++) {
            size_t row = ((size_t)s * t + k) * d;
            for (int j = 0; j < d; j++)
                out[row + j] = in[row + j] * (1.0f + sc[j]) + sh[j];
        }
    }
}

void dit_modulate_backward(float *din, float *dshift, float *dscale, const float *dout,
                           const float *in, const float *scale, int stride, int b, int t, int d)
{
    for (int s = 0; s < b; s++) {
        const float *sc = scale + (size_t)s * stride;
        float *dsh = dshift + (size_t)s * stride, *dsc = dscale + (size_t)s * stride;
        for (int k = 0; k < t; k++) {
            size_t row = ((size_t)s * t + k) * d;
            for (int j = 0; j < d; j++) {
                float g = dout[row + j];
                din[row + j] += g * (1.0f + sc[j]);
                dsh[j] += g;
                dsc[j] += g * in[row + j];
            }
        }
    }
}

/* ---- gated residual: y = x + gate * f(x) --------------------------------------------------- */

void dit_gate_residual_forward(float *out, const float *x, const float *gate, const float *y,
                               int stride, int b, int t, int d)
{
    for (int s = 0; s < b; s++) {
        const float *g = gate + (size_t)s * stride;
        for (int k = 0; k < t; k++) {
            size_t row = ((size_t)s * t + k) * d;
            for (int j = 0; j < d; j++)
                out[row + j] = x[row + j] + g[j] * y[row + j];
        }
    }
}

void dit_gate_residual_backward(float *dx, float *dy, float *dgate, const float *dout,
                                const float *gate, const float *y, int stride, int b, int t, int d)
{
    for (int s = 0; s < b; s++) {
        const float *g = gate + (size_t)s * stride;
        float *dg = dgate + (size_t)s * stride;
        for (int k = 0; k < t; k++) {
            size_t row = ((size_t)s * t + k) * d;
            for (int j = 0; j < d; j++) {
                float go = dout[row + j];
                dx[row + j] += go;
                dy[row + j] += g[j] * go;
                dg[j] += go * y[row + j];
            }
        }
    }
}

/* ---- activations ---------------------------------------------------------------------------- */

/* The element-wise loops are compiled for AVX-512 and AVX2 too, chosen at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DIT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DIT_VECTOR_CLONES
#endif

DIT_VECTOR_CLONES
void dit_silu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = dit_silu(in[i]);
}

DIT_VECTOR_CLONES
void dit_silu_backward(float *din, const float *dout, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        din[i] += dout[i] * dit_silu_grad(in[i]);
}

DIT_VECTOR_CLONES
void dit_gelu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = dit_gelu(in[i]);
}

DIT_VECTOR_CLONES
void dit_gelu_backward(float *din, const float *dout, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        din[i] += dout[i] * dit_gelu_grad(in[i]);
}
