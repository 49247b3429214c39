/* The VAE's 3x3 stride-1 convolutions by Winograd's minimal filtering, F(2x2, 3x3) (Lavin and
 * Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016): each 2x2 block of
 * outputs comes from the 4x4 tile of input around it as Y = A^T [(G g G^T) . (B^T d B)] A,
 * 16 multiplications where the direct form takes 36. Summed over the input channels, the
 * element-wise products are 16 GEMMs, U[xi][Cout, Cin] V[xi][Cin, tiles], one for each of the
 * 4x4 transformed positions xi: 2.25 times fewer flops than im2col's one GEMM, for two cheap
 * passes (the input's transform and the output's). The transforms' entries are 0, +-1 and
 * +-1/2, so the float rounding stays that of a direct sum (a decoder within 2e-6 of PyTorch's
 * float64 reference, tests/cli/test_vae_torch.sh). */
#include "config.h"

#include <string.h>

#include "dit/vae.h"
#include "tensor/tensor.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define WINO_VEC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WINO_VEC
#endif

/* Tiles a band's GEMMs get at least (where the scratch holds them): OpenBLAS reaches its speed on
 * K x N operands of a few hundred columns; SD's 32x32 images are 256 tiles. */
#define WINO_BAND_TILES 256

static int tiles_across(int w)
{
    return (w + 1) / 2;
}

/* floats of scratch: U, then V and M for `rows` tile rows, then the row buffers (the input's 4
 * padded rows and their transforms, each split into even and odd columns of tw + 1) */
static size_t wino_floats(int cin, int cout, int w, int rows)
{
    size_t tw = (size_t)tiles_across(w);
    return 16 * ((size_t)cin * cout + (size_t)(cin + cout) * tw * rows) + 16 * (tw + 1);
}

size_t dit_vae_winograd_scratch(int cin, int cout, int w)
{
    int tw = tiles_across(w);
    return wino_floats(cin, cout, w, (WINO_BAND_TILES + tw - 1) / tw);
}

bool dit_vae_winograd_fits(int cin, int cout, int w, size_t cols_floats)
{
    return cin >= DIT_VAE_WINOGRAD_MIN_CHANNELS && cout >= DIT_VAE_WINOGRAD_MIN_CHANNELS &&
           cols_floats >= wino_floats(cin, cout, w, 1);
}

/* u[16][Cout, Cin] = G g G^T of each 3x3 kernel, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
 * WINO_KBLOCK kernels at a time, so that the 16 planes are written a run at a time. */
#define WINO_KBLOCK 64
static void transform_weights(float *u, const float *weight, int cin, int cout)
{
    size_t plane = (size_t)cout * cin;
    float blk[16][WINO_KBLOCK];
    for (size_t k0 = 0; k0 < plane; k0 += WINO_KBLOCK) {
        size_t nk = TDL_MIN((size_t)WINO_KBLOCK, plane - k0);
        for (size_t k = 0; k < nk; k++) {
            const float *g = weight + (k0 + k) * 9;
            float t[4][3];
            for (int c = 0; c < 3; c++) {
                t[0][c] = g[c];
                t[1][c] = 0.5f * (g[c] + g[3 + c] + g[6 + c]);
                t[2][c] = 0.5f * (g[c] - g[3 + c] + g[6 + c]);
                t[3][c] = g[6 + c];
            }
            for (int r = 0; r < 4; r++) {
                blk[4 * r][k] = t[r][0];
                blk[4 * r + 1][k] = 0.5f * (t[r][0] + t[r][1] + t[r][2]);
                blk[4 * r + 2][k] = 0.5f * (t[r][0] - t[r][1] + t[r][2]);
                blk[4 * r + 3][k] = t[r][2];
            }
        }
        for (int xi = 0; xi < 16; xi++)
            memcpy(u + xi * plane + k0, blk[xi], nk * sizeof(float));
    }
}

/* B^T d (B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]) on the rows of one tile row: d holds
 * the 4 input rows, e gets the 4 transformed ones, each n long. */
WINO_VEC static void transform_rows(float *restrict e, const float *restrict d, int n)
{
    const float *d0 = d, *d1 = d + n, *d2 = d + 2 * n, *d3 = d + 3 * n;
    for (int j = 0; j < n; j++) {
        e[j] = d0[j] - d2[j];
        e[n + j] = d1[j] + d2[j];
        e[2 * n + j] = d2[j] - d1[j];
        e[3 * n + j] = d1[j] - d3[j];
    }
}

/* d B of the transformed rows e (even columns) and o (odd ones) into one row of each of 4
 * planes: tile tx's columns are e[tx], o[tx], e[tx + 1], o[tx + 1]. */
WINO_VEC static void transform_cols(float *restrict v0, float *restrict v1, float *restrict v2,
                                    float *restrict v3, const float *restrict e,
                                    const float *restrict o, int tw)
{
    for (int tx = 0; tx < tw; tx++) {
        v0[tx] = e[tx] - e[tx + 1];
        v1[tx] = o[tx] + e[tx + 1];
        v2[tx] = e[tx + 1] - o[tx];
        v3[tx] = o[tx] - o[tx + 1];
    }
}

/* row[k] = src[2k + first] for k < n, zero where that is outside [0, w) */
static void split_row(float *restrict row, const float *restrict src, int w, int n, int first)
{
    int k = 0;
    for (; k < n && 2 * k + first < 0; k++)
        row[k] = 0.0f;
    for (; k < n && 2 * k + first < w; k++)
        row[k] = src[2 * k + first];
    for (; k < n; k++)
        row[k] = 0.0f;
}

/* V[16][Cin, nt] = B^T d B of each tile of tile rows t0 to t1 (tile (ty, tx) reads input rows
 * 2ty - 1 to 2ty + 2 and columns 2tx - 1 to 2tx + 2, zero outside). The padded rows are kept
 * split into even and odd columns (even[k] = in[2k - 1], odd[k] = in[2k]), so that every loop
 * runs at unit stride. */
static void transform_input(float *v, const float *in, int cin, int h, int w, int t0, int t1,
                            float *rowbuf)
{
    int tw = tiles_across(w), n = tw + 1;
    size_t nt = (size_t)(t1 - t0) * tw, plane = (size_t)cin * nt;
    /* the 4 rows, even then odd columns, then their transforms */
    float *ev = rowbuf, *od = ev + 4 * (size_t)n, *ee = od + 4 * (size_t)n, *eo = ee + 4 * (size_t)n;
    for (int ci = 0; ci < cin; ci++)
        for (int ty = t0; ty < t1; ty++) {
            for (int r = 0; r < 4; r++) {
                float *er = ev + (size_t)r * n, *orow = od + (size_t)r * n;
                int y = 2 * ty - 1 + r;
                if (y < 0 || y >= h) {
                    memset(er, 0, (size_t)n * sizeof(float));
                    memset(orow, 0, (size_t)n * sizeof(float));
                    continue;
                }
                const float *src = in + ((size_t)ci * h + y) * w;
                split_row(er, src, w, n, -1);
                split_row(orow, src, w, n, 0);
            }
            transform_rows(ee, ev, n);
            transform_rows(eo, od, n);
            float *dst = v + (size_t)ci * nt + (size_t)(ty - t0) * tw;
            for (int q = 0; q < 4; q++) {
                float *v0 = dst + (size_t)(4 * q) * plane;
                transform_cols(v0, v0 + plane, v0 + 2 * plane, v0 + 3 * plane, ee + (size_t)q * n,
                               eo + (size_t)q * n, tw);
            }
        }
}

/* A^T m A (A^T = [1 1 1 0; 0 1 -1 -1]) of one tile row of one output channel: m[xi] the 16
 * planes' rows, y00 to y11 the 2x2 outputs of each tile. */
WINO_VEC static void transform_tiles_out(float *restrict y00, float *restrict y01,
                                         float *restrict y10, float *restrict y11,
                                         const float *restrict m, size_t plane, int tw)
{
    /* the planes' rows by xi = 4r + c: r the row of the 4x4 tile, c its column */
    const float *m0 = m, *m1 = m0 + plane, *m2 = m1 + plane, *m3 = m2 + plane;
    const float *m4 = m3 + plane, *m5 = m4 + plane, *m6 = m5 + plane, *m7 = m6 + plane;
    const float *m8 = m7 + plane, *m9 = m8 + plane, *m10 = m9 + plane, *m11 = m10 + plane;
    const float *m12 = m11 + plane, *m13 = m12 + plane, *m14 = m13 + plane, *m15 = m14 + plane;
    for (int tx = 0; tx < tw; tx++) {
        /* A^T m: rows 0 + 1 + 2 and 1 - 2 - 3, for each of the 4 columns */
        float a0 = m0[tx] + m4[tx] + m8[tx], b0 = m4[tx] - m8[tx] - m12[tx];
        float a1 = m1[tx] + m5[tx] + m9[tx], b1 = m5[tx] - m9[tx] - m13[tx];
        float a2 = m2[tx] + m6[tx] + m10[tx], b2 = m6[tx] - m10[tx] - m14[tx];
        float a3 = m3[tx] + m7[tx] + m11[tx], b3 = m7[tx] - m11[tx] - m15[tx];
        /* then A on the right: columns 0 + 1 + 2 and 1 - 2 - 3 */
        y00[tx] = a0 + a1 + a2;
        y01[tx] = a1 - a2 - a3;
        y10[tx] = b0 + b1 + b2;
        y11[tx] = b1 - b2 - b3;
    }
}

/* dst[2k] = base + a[k], dst[2k + 1] = base + b[k] over w columns, base the bias and, when
 * accumulate, what dst holds */
WINO_VEC static void interleave_row(float *restrict dst, const float *restrict a,
                                    const float *restrict b, int w, float bias, bool accumulate)
{
    int pairs = w / 2;
    if (accumulate)
        for (int k = 0; k < pairs; k++) {
            dst[2 * k] += a[k] + bias;
            dst[2 * k + 1] += b[k] + bias;
        }
    else
        for (int k = 0; k < pairs; k++) {
            dst[2 * k] = a[k] + bias;
            dst[2 * k + 1] = b[k] + bias;
        }
    if (w & 1)
        dst[w - 1] = (accumulate ? dst[w - 1] : 0.0f) + a[pairs] + bias;
}

/* out[o] (+)= A^T m A + bias[o] of each tile of tile rows t0 to t1, from M[16][Cout, nt].
 * rowbuf: 4 * tw floats. */
static void transform_output(float *out, const float *m, const float *bias, int cout, int h,
                             int w, int t0, int t1, bool accumulate, float *rowbuf)
{
    int tw = tiles_across(w);
    size_t nt = (size_t)(t1 - t0) * tw, plane = (size_t)cout * nt;
    float *y00 = rowbuf, *y01 = y00 + tw, *y10 = y01 + tw, *y11 = y10 + tw;
    for (int o = 0; o < cout; o++) {
        float b = bias ? bias[o] : 0.0f;
        for (int ty = t0; ty < t1; ty++) {
            transform_tiles_out(y00, y01, y10, y11, m + (size_t)o * nt + (size_t)(ty - t0) * tw,
                                plane, tw);
            float *dst = out + ((size_t)o * h + 2 * ty) * w;
            interleave_row(dst, y00, y01, w, b, accumulate);
            if (2 * ty + 1 < h)
                interleave_row(dst + w, y10, y11, w, b, accumulate);
        }
    }
}

void dit_vae_conv2d_winograd(float *out, const float *in, const float *weight, const float *bias,
                             int cin, int cout, int h, int w, bool accumulate, float *cols,
                             size_t cols_floats)
{
    int tw = tiles_across(w), th = (h + 1) / 2;
    size_t fixed = wino_floats(cin, cout, w, 0), per_row = wino_floats(cin, cout, w, 1) - fixed;
    int band = (int)TDL_MIN((size_t)th, (cols_floats - fixed) / per_row);
    float *u = cols, *v = u + 16 * (size_t)cin * cout;
    float *m = v + 16 * (size_t)cin * tw * band, *rowbuf = m + 16 * (size_t)cout * tw * band;
    transform_weights(u, weight, cin, cout);
    for (int t0 = 0; t0 < th; t0 += band) {
        int t1 = TDL_MIN(th, t0 + band), nt = (t1 - t0) * tw;
        transform_input(v, in, cin, h, w, t0, t1, rowbuf);
        for (int xi = 0; xi < 16; xi++)
            tensor_gemm(false, false, cout, nt, cin, 1.0f, u + (size_t)xi * cout * cin, cin,
                        v + (size_t)xi * cin * nt, nt, 0.0f, m + (size_t)xi * cout * nt, nt);
        transform_output(out, m, bias, cout, h, w, t0, t1, accumulate, rowbuf);
    }
}
