/* Multi-head self-attention core (timm's Attention between qkv and proj). Per sample and head,
 * S = Q K^T / sqrt(hd), P = softmax(S), Y = P V, with Q, K, V read in place from the qkv rows
 * (row stride 3D) so no permutation is copied. */
#include "config.h"

#include <math.h>

#include "dit/dit_internal.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
/* glibc's vector expf (libmvec, at most 4 ulp), declared as its <math.h> declares it under
 * -ffast-math: with -fno-math-errno (configure's VEC_CFLAGS) the softmax's loop calls it on 8 or
 * 16 lanes. The scalar expf and its loop were 4% of a DiT-XL forward. */
__attribute__((simd("notinbranch"))) float expf(float);
#define SOFTMAX_VEC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SOFTMAX_VEC
#endif

/* Scores go through expf in blocks of this many, lanes past a row's end at -inf (exp 0), so
 * that every score takes the same (vector) expf whatever the row's length or address: a loop
 * with a scalar tail would give a score other bits in another row. */
#define SOFTMAX_LANES 16

SOFTMAX_VEC void dit_softmax_rows(float *p, int rows, int t)
{
    for (int i = 0; i < rows; i++) {
        float *row = p + (size_t)i * t, sum = 0, lane[SOFTMAX_LANES];
        /* the max in lanes (exact in any order), so that it vectorizes */
        for (int l = 0; l < SOFTMAX_LANES; l++)
            lane[l] = row[0];
        int full = t / SOFTMAX_LANES * SOFTMAX_LANES;
        for (int j0 = 0; j0 < full; j0 += SOFTMAX_LANES)
            for (int l = 0; l < SOFTMAX_LANES; l++)
                lane[l] = row[j0 + l] > lane[l] ? row[j0 + l] : lane[l];
        float mx = row[0];
        for (int j = full; j < t; j++)
            mx = row[j] > mx ? row[j] : mx;
        for (int l = 0; l < SOFTMAX_LANES; l++)
            mx = lane[l] > mx ? lane[l] : mx;
        for (int j0 = 0; j0 < t; j0 += SOFTMAX_LANES) {
            int n = TDL_MIN(SOFTMAX_LANES, t - j0);
            float e[SOFTMAX_LANES];
            for (int l = 0; l < SOFTMAX_LANES; l++)
                e[l] = l < n ? row[j0 + l] - mx : -INFINITY;
            for (int l = 0; l < SOFTMAX_LANES; l++)
                e[l] = expf(e[l]);
            for (int l = 0; l < n; l++) {
                row[j0 + l] = e[l];
                sum += e[l];
            }
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < t; j++)
            row[j] *= inv;
    }
}

/* Query rows [i0, i0 + rows) of one sample and head: p[rows, t] = softmax(Q K^T / sqrt(hd)),
 * then those rows of y = P V. */
static void attention_rows(float *y, float *p, const float *base, int i0, int rows, int t, int d,
                           int hd, int h, float scale)
{
    const float *q = base + (size_t)i0 * 3 * d + h * hd, *k = base + d + h * hd;
    const float *v = base + 2 * d + h * hd;
    tensor_gemm(false, true, rows, t, hd, scale, q, 3 * d, k, 3 * d, 0.0f, p, t);
    dit_softmax_rows(p, rows, t);
    tensor_gemm(false, false, rows, hd, t, 1.0f, p, t, v, 3 * d, 0.0f,
                y + (size_t)i0 * d + h * hd, d);
}

/* Both forwards run the same products, DIT_ATTN_TILE_ROWS query rows at a time: a BLAS may sum
 * a row's elements in another order when the product has another number of rows (OpenBLAS's
 * Haswell kernels do for the rows past the last multiple of 12, and for products of 1 to 3
 * rows), so the two make the same calls and are equal byte for byte on any BLAS. The training
 * one writes each tile's probabilities into att, for the backward pass. */
void dit_attention_forward(float *y, float *att, const float *qkv, int b, int t, int d, int heads)
{
    int hd = d / heads;
    float scale = 1.0f / sqrtf((float)hd);
    for (int s = 0; s < b; s++)
        for (int h = 0; h < heads; h++) {
            float *p = att + ((size_t)s * heads + h) * t * t;
            for (int i0 = 0; i0 < t; i0 += DIT_ATTN_TILE_ROWS)
                attention_rows(y + (size_t)s * t * d, p + (size_t)i0 * t,
                               qkv + (size_t)s * t * 3 * d, i0,
                               TDL_MIN(DIT_ATTN_TILE_ROWS, t - i0), t, d, hd, h, scale);
        }
}

void dit_attention_forward_tiled(float *y, float *scratch, const float *qkv, int b, int t, int d,
                                 int heads)
{
    int hd = d / heads;
    float scale = 1.0f / sqrtf((float)hd);
    for (int s = 0; s < b; s++)
        for (int h = 0; h < heads; h++)
            for (int i0 = 0; i0 < t; i0 += DIT_ATTN_TILE_ROWS)
                attention_rows(y + (size_t)s * t * d, scratch, qkv + (size_t)s * t * 3 * d, i0,
                               TDL_MIN(DIT_ATTN_TILE_ROWS, t - i0), t, d, hd, h, scale);
}

/* dP = dY V^T; dS = P * (dP - rowsum(dP * P)); dQ = dS K / sqrt(hd); dK = dS^T Q / sqrt(hd);
 * dV = P^T dY */
void dit_attention_backward(float *dqkv, const float *dy, const float *qkv, const float *att,
                            float *scratch, int b, int t, int d, int heads)
{
    int hd = d / heads;
    float scale = 1.0f / sqrtf((float)hd);
    for (int s = 0; s < b; s++) {
        const float *base = qkv + (size_t)s * t * 3 * d;
        float *dbase = dqkv + (size_t)s * t * 3 * d;
        const float *dys = dy + (size_t)s * t * d;
        for (int h = 0; h < heads; h++) {
            const float *q = base + h * hd, *k = base + d + h * hd, *v = base + 2 * d + h * hd;
            float *dq = dbase + h * hd, *dk = dbase + d + h * hd, *dv = dbase + 2 * d + h * hd;
            const float *p = att + ((size_t)s * heads + h) * t * t;
            float *dp = scratch;
            tensor_gemm(false, true, t, t, hd, 1.0f, dys + h * hd, d, v, 3 * d, 0.0f, dp, t);
            tensor_gemm(true, false, t, hd, t, 1.0f, p, t, dys + h * hd, d, 1.0f, dv, 3 * d);
            for (int i = 0; i < t; i++) {
                const float *pr = p + (size_t)i * t;
                float *dr = dp + (size_t)i * t, dot = 0;
                for (int j = 0; j < t; j++)
                    dot += pr[j] * dr[j];
                for (int j = 0; j < t; j++)
                    dr[j] = pr[j] * (dr[j] - dot);
            }
            tensor_gemm(false, false, t, hd, t, scale, dp, t, k, 3 * d, 1.0f, dq, 3 * d);
            tensor_gemm(true, false, t, hd, t, scale, dp, t, q, 3 * d, 1.0f, dk, 3 * d);
        }
    }
}
