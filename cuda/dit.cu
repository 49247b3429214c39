// The DiT's layers on the GPU: the CUDA backend of src/dit/backend.h. Matrix products (the
// linears and the two products of attention per head) go through cuBLAS in fp32; everything else
// is a kernel of this file, written under cuda/kernel.h's rules so that the same code also runs,
// emulated, in the CPU test tests/unit/test_dit_emu.c against src/dit's CPU layers. Reductions
// are one thread per row or per column (LayerNorm, softmax, bias and modulation gradients), with
// the CPU's double accumulators; element-wise kernels are grid-stride loops. The VAE's
// convolutions are im2col kernels and cuBLAS products; its GroupNorm sums chunks of 256 values a
// thread, then each group's chunks in double, as src/dit/vae_layers.c does.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernel.h"
#include "dit/activation.h"
#include "dit/backend.h"

typedef struct dit_cuda {
    tdl_gpu_t *gpu;
    tdl_stream_t stream;
} dit_cuda_t;

#define S(ctx) (((dit_cuda_t *)(ctx))->stream)
#define G(ctx) (((dit_cuda_t *)(ctx))->gpu)
#define GRID(n) tdl_blocks_for((size_t)(n), 65535u)
#define LAUNCHED(ctx, what) tdl_gpu_check_launch(G(ctx), what)

// ---- kernels ---------------------------------------------------------------------------------

TDL_KERNEL void k_bias_rows(float *out, const float *bias, size_t n, int dim)
{
    for (size_t i = tdl_tid(); i < n * (size_t)dim; i += tdl_nthreads())
        out[i] = bias[i % (size_t)dim];
}

// db[o] += sum over rows of dout[., o]
TDL_KERNEL void k_bias_grad(float *db, const float *dout, int n, int dim)
{
    for (size_t o = tdl_tid(); o < (size_t)dim; o += tdl_nthreads()) {
        float acc = 0;
        for (int i = 0; i < n; i++)
            acc += dout[(size_t)i * dim + o];
        db[o] += acc;
    }
}

TDL_KERNEL void k_layernorm_forward(float *out, float *mean, float *rstd, const float *in, int n,
                                    int d)
{
    for (size_t i = tdl_tid(); i < (size_t)n; i += tdl_nthreads())
        dit_layernorm_row(out + i * d, &mean[i], &rstd[i], in + i * d, d);
}

TDL_KERNEL void k_layernorm_backward(float *din, const float *dout, const float *in,
                                     const float *mean, const float *rstd, int n, int d)
{
    for (size_t i = tdl_tid(); i < (size_t)n; i += tdl_nthreads())
        dit_layernorm_row_backward(din + i * d, dout + i * d, in + i * d, mean[i], rstd[i], d);
}

// out[s,k,j] = in * (1 + scale[s,j]) + shift[s,j]
TDL_KERNEL void k_modulate_forward(float *out, const float *in, const float *shift,
                                   const float *scale, int stride, int b, int t, int d)
{
    size_t total = (size_t)b * t * d;
    for (size_t i = tdl_tid(); i < total; i += tdl_nthreads()) {
        size_t s = i / ((size_t)t * d), j = i % (size_t)d;
        out[i] = in[i] * (1.0f + scale[s * stride + j]) + shift[s * stride + j];
    }
}

TDL_KERNEL void k_modulate_backward_in(float *din, const float *dout, const float *scale,
                                       int stride, int b, int t, int d)
{
    size_t total = (size_t)b * t * d;
    for (size_t i = tdl_tid(); i < total; i += tdl_nthreads()) {
        size_t s = i / ((size_t)t * d), j = i % (size_t)d;
        din[i] += dout[i] * (1.0f + scale[s * stride + j]);
    }
}

// one thread per (sample, channel): dshift += sum_k dout, dscale += sum_k dout * in
TDL_KERNEL void k_modulate_backward_params(float *dshift, float *dscale, const float *dout,
                                           const float *in, int stride, int b, int t, int d)
{
    for (size_t i = tdl_tid(); i < (size_t)b * d; i += tdl_nthreads()) {
        size_t s = i / (size_t)d, j = i % (size_t)d;
        float sh = 0, sc = 0;
        for (int k = 0; k < t; k++) {
            size_t at = (s * t + k) * d + j;
            sh += dout[at];
            sc += dout[at] * in[at];
        }
        dshift[s * stride + j] += sh;
        dscale[s * stride + j] += sc;
    }
}

TDL_KERNEL void k_gate_residual_forward(float *out, const float *x, const float *gate,
                                        const float *y, int stride, int b, int t, int d)
{
    size_t total = (size_t)b * t * d;
    for (size_t i = tdl_tid(); i < total; i += tdl_nthreads()) {
        size_t s = i / ((size_t)t * d), j = i % (size_t)d;
        out[i] = x[i] + gate[s * stride + j] * y[i];
    }
}

TDL_KERNEL void k_gate_residual_backward_xy(float *dx, float *dy, const float *dout,
                                            const float *gate, int stride, int b, int t, int d)
{
    size_t total = (size_t)b * t * d;
    for (size_t i = tdl_tid(); i < total; i += tdl_nthreads()) {
        size_t s = i / ((size_t)t * d), j = i % (size_t)d;
        float go = dout[i];
        dx[i] += go;
        dy[i] += gate[s * stride + j] * go;
    }
}

TDL_KERNEL void k_gate_residual_backward_gate(float *dgate, const float *dout, const float *y,
                                              int stride, int b, int t, int d)
{
    for (size_t i = tdl_tid(); i < (size_t)b * d; i += tdl_nthreads()) {
        size_t s = i / (size_t)d, j = i % (size_t)d;
        float acc = 0;
        for (int k = 0; k < t; k++) {
            size_t at = (s * t + k) * d + j;
            acc += dout[at] * y[at];
        }
        dgate[s * stride + j] += acc;
    }
}

TDL_KERNEL void k_silu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = tdl_tid(); i < n; i += tdl_nthreads())
        out[i] = dit_silu(in[i]);
}

TDL_KERNEL void k_silu_backward(float *din, const float *dout, const float *in, size_t n)
{
    for (size_t i = tdl_tid(); i < n; i += tdl_nthreads())
        din[i] += dout[i] * dit_silu_grad(in[i]);
}

TDL_KERNEL void k_gelu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = tdl_tid(); i < n; i += tdl_nthreads())
        out[i] = dit_gelu(in[i]);
}

TDL_KERNEL void k_gelu_backward(float *din, const float *dout, const float *in, size_t n)
{
    for (size_t i = tdl_tid(); i < n; i += tdl_nthreads())
        din[i] += dout[i] * dit_gelu_grad(in[i]);
}

// rows of length t, in place: p = softmax(p)
TDL_KERNEL void k_softmax_rows(float *p, size_t rows, int t)
{
    for (size_t r = tdl_tid(); r < rows; r += tdl_nthreads()) {
        float *row = p + r * t, mx = row[0], sum = 0;
        for (int j = 1; j < t; j++)
            mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < t; j++) {
            row[j] = tdl_expf(row[j] - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < t; j++)
            row[j] *= inv;
    }
}

// dp = p * (dp - rowsum(dp * p)), row by row
TDL_KERNEL void k_softmax_backward_rows(float *dp, const float *p, size_t rows, int t)
{
    for (size_t r = tdl_tid(); r < rows; r += tdl_nthreads()) {
        const float *pr = p + r * t;
        float *dr = dp + r * t, dot = 0;
        for (int j = 0; j < t; j++)
            dot += pr[j] * dr[j];
        for (int j = 0; j < t; j++)
            dr[j] = pr[j] * (dr[j] - dot);
    }
}

// patches[s, ti, tj, (ch, i, j)] = x[s, ch, ti*p + i, tj*p + j]
TDL_KERNEL void k_patchify(float *patches, const float *x, int b, int c, int h, int w, int p)
{
    int gw = w / p, pd = c * p * p;
    size_t total = (size_t)b * (h / p) * gw * pd;
    for (size_t o = tdl_tid(); o < total; o += tdl_nthreads()) {
        size_t e = o % pd, tok = o / pd;
        int j = (int)(e % p), i = (int)((e / p) % p), ch = (int)(e / ((size_t)p * p));
        int tj = (int)(tok % gw);
        size_t rest = tok / gw;
        int ti = (int)(rest % (h / p));
        size_t s = rest / (h / p);
        patches[o] = x[((s * c + ch) * h + (size_t)ti * p + i) * w + (size_t)tj * p + j];
    }
}

// tokens[s, ti, tj, (i, j, ch)] <-> out[s, ch, ti*p + i, tj*p + j]; add: tokens += out's values
TDL_KERNEL void k_unpatchify(float *img, float *tokens, int b, int c, int h, int w, int p,
                             int backward)
{
    int gw = w / p, pd = c * p * p;
    size_t total = (size_t)b * (h / p) * gw * pd;
    for (size_t o = tdl_tid(); o < total; o += tdl_nthreads()) {
        size_t e = o % pd, tok = o / pd;
        int ch = (int)(e % c), j = (int)((e / c) % p), i = (int)(e / ((size_t)c * p));
        int tj = (int)(tok % gw);
        size_t rest = tok / gw;
        int ti = (int)(rest % (h / p));
        size_t s = rest / (h / p);
        size_t at = ((s * c + ch) * h + (size_t)ti * p + i) * w + (size_t)tj * p + j;
        if (backward)
            tokens[o] += img[at];
        else
            img[at] = tokens[o];
    }
}

TDL_KERNEL void k_add_rows(float *x, const float *pos, int b, size_t n)
{
    for (size_t i = tdl_tid(); i < (size_t)b * n; i += tdl_nthreads())
        x[i] += pos[i % n];
}

TDL_KERNEL void k_embed_labels(float *c, const float *t_emb, const float *table, const int *y,
                               int b, int d)
{
    for (size_t i = tdl_tid(); i < (size_t)b * d; i += tdl_nthreads()) {
        size_t s = i / (size_t)d, j = i % (size_t)d;
        c[i] = t_emb[i] + table[(size_t)y[s] * d + j];
    }
}

// one thread per channel, samples in order: two samples of one label never race
TDL_KERNEL void k_embed_labels_backward(float *dtable, const float *dc, const int *y, int b, int d)
{
    for (size_t j = tdl_tid(); j < (size_t)d; j += tdl_nthreads())
        for (int s = 0; s < b; s++)
            dtable[(size_t)y[s] * d + j] += dc[(size_t)s * d + j];
}

// ---- the VAE's layers (one image x[C, H, W]) -----------------------------------------------

// out[o, i] = bias[o], or += it when accumulate, over cout channels of hw values
TDL_KERNEL void k_vae_bias(float *out, const float *bias, int cout, size_t hw, int accumulate)
{
    for (size_t i = tdl_tid(); i < (size_t)cout * hw; i += tdl_nthreads()) {
        float b = bias[i / hw];
        out[i] = accumulate ? out[i] + b : b;
    }
}

// cols[ci*9 + ky*3 + kx, (y - r0)*wo + x] of output rows r0 to r1: stride 1 reads
// in[y + ky - 1][x + kx - 1] (padding 1), stride 2 in[2y + ky][2x + kx] (zero past the bottom and
// right edges, Downsample2D's padding)
TDL_KERNEL void k_vae_im2col3(float *cols, const float *in, int cin, int h, int w, int wo, int r0,
                              int r1, int stride)
{
    size_t ncol = (size_t)(r1 - r0) * wo, total = (size_t)cin * 9 * ncol;
    for (size_t i = tdl_tid(); i < total; i += tdl_nthreads()) {
        size_t row = i / ncol, col = i % ncol;
        int ci = (int)(row / 9), ky = (int)(row % 9) / 3, kx = (int)(row % 9) % 3;
        int y = r0 + (int)(col / wo), x = (int)(col % wo);
        int sy = stride == 1 ? y + ky - 1 : 2 * y + ky, sx = stride == 1 ? x + kx - 1 : 2 * x + kx;
        bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        cols[i] = inside ? in[((size_t)ci * h + sy) * w + sx] : 0.0f;
    }
}

#define VAE_GN_CHUNK 256

// part[g, j] = the sum of x - mean[g] (squared when sq; mean NULL: 0) over chunk j of group g's
// n values: the CPU's chunks of 256, one thread each
TDL_KERNEL void k_vae_gn_partial(float *part, const float *in, const float *mean, size_t n,
                                 int nchunk, int groups, int sq)
{
    for (size_t i = tdl_tid(); i < (size_t)groups * nchunk; i += tdl_nthreads()) {
        size_t g = i / (size_t)nchunk, c0 = (i % (size_t)nchunk) * VAE_GN_CHUNK;
        size_t c1 = c0 + VAE_GN_CHUNK < n ? c0 + VAE_GN_CHUNK : n;
        const float *x = in + g * n;
        float m = mean ? mean[g] : 0.0f, acc = 0.0f;
        for (size_t j = c0; j < c1; j++) {
            float d = x[j] - m;
            acc += sq ? d * d : d;
        }
        part[i] = acc;
    }
}

// stat[g] = group g's mean (rstd 0) or 1 / sqrt(variance + 1e-6) (rstd 1), its chunks added in
// double as on the CPU
TDL_KERNEL void k_vae_gn_stat(float *stat, const float *part, size_t n, int nchunk, int groups,
                              int rstd)
{
    for (size_t g = tdl_tid(); g < (size_t)groups; g += tdl_nthreads()) {
        double sum = 0;
        for (int j = 0; j < nchunk; j++)
            sum += part[g * nchunk + j];
        stat[g] = rstd ? (float)(1.0 / sqrt(sum / (double)n + 1e-6)) : (float)(sum / (double)n);
    }
}

TDL_KERNEL void k_vae_gn_apply(float *out, const float *in, const float *weight, const float *bias,
                               const float *mean, const float *rstd, int c, size_t hw, int per,
                               int silu)
{
    for (size_t i = tdl_tid(); i < (size_t)c * hw; i += tdl_nthreads()) {
        size_t ch = i / hw, g = ch / (size_t)per;
        float a = rstd[g] * weight[ch], b = bias[ch] - mean[g] * a;
        float y = in[i] * a + b;
        out[i] = silu ? dit_silu(y) : y;
    }
}

TDL_KERNEL void k_vae_upsample2x(float *out, const float *in, int c, int h, int w)
{
    size_t total = (size_t)c * 4 * h * w;
    for (size_t i = tdl_tid(); i < total; i += tdl_nthreads()) {
        size_t ch = i / ((size_t)4 * h * w), rest = i % ((size_t)4 * h * w);
        size_t y = rest / (2 * (size_t)w), x = rest % (2 * (size_t)w);
        out[i] = in[(ch * h + y / 2) * w + x / 2];
    }
}

TDL_KERNEL void k_vae_add(float *y, const float *x, size_t n)
{
    for (size_t i = tdl_tid(); i < n; i += tdl_nthreads())
        y[i] += x[i];
}

// out[cols, rows] (+)= in[rows, cols]^T, one thread per output value
TDL_KERNEL void k_vae_transpose(float *out, const float *in, int rows, int cols, int accumulate)
{
    for (size_t i = tdl_tid(); i < (size_t)rows * cols; i += tdl_nthreads()) {
        size_t c = i / (size_t)rows, r = i % (size_t)rows;
        float v = in[r * cols + c];
        out[i] = accumulate ? out[i] + v : v;
    }
}

// ---- the backend ------------------------------------------------------------------------------

static float *cu_alloc(void *ctx, size_t n)
{
    return (float *)tdl_gpu_alloc(G(ctx), n * sizeof(float));
}

static void cu_release(void *ctx, float *p)
{
    tdl_gpu_free(G(ctx), p);
}

static void cu_upload(void *ctx, float *dst, const float *src, size_t n)
{
    tdl_gpu_upload(G(ctx), dst, src, n * sizeof(float));
}

static void cu_download(void *ctx, float *dst, const float *src, size_t n)
{
    tdl_gpu_download(G(ctx), dst, src, n * sizeof(float));
}

static void cu_zero(void *ctx, float *p, size_t n)
{
    tdl_gpu_zero(G(ctx), p, n * sizeof(float));
}

static tdl_status_t cu_finish(void *ctx)
{
    return tdl_gpu_finish(G(ctx));
}

/* One product of all n rows: cuBLAS picks its kernels by shape too, so on a device an image's
 * bits may depend on its batch (group, the CPU's products an image, is not honoured here). */
static void cu_linear_forward(void *ctx, float *out, const float *in, const float *w,
                              const float *bias, int n, int in_dim, int out_dim, int group)
{
    (void)group;
    if (bias) {
        TDL_LAUNCH(k_bias_rows, GRID((size_t)n * out_dim), TDL_BLOCK, S(ctx), out, bias,
                   (size_t)n, out_dim);
        LAUNCHED(ctx, "bias");
    }
    tdl_gpu_gemm(G(ctx), false, true, n, out_dim, in_dim, 1.0f, in, in_dim, w, in_dim,
                 bias ? 1.0f : 0.0f, out, out_dim);
}

static void cu_linear_backward(void *ctx, float *din, float *dw, float *db, const float *dout,
                               const float *in, const float *w, int n, int in_dim, int out_dim)
{
    if (din)
        tdl_gpu_gemm(G(ctx), false, false, n, in_dim, out_dim, 1.0f, dout, out_dim, w, in_dim,
                     1.0f, din, in_dim);
    if (dw)
        tdl_gpu_gemm(G(ctx), true, false, out_dim, in_dim, n, 1.0f, dout, out_dim, in, in_dim,
                     1.0f, dw, in_dim);
    if (db) {
        TDL_LAUNCH(k_bias_grad, GRID(out_dim), TDL_BLOCK, S(ctx), db, dout, n, out_dim);
        LAUNCHED(ctx, "bias gradient");
    }
}

static void cu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *in,
                                 int n, int d)
{
    TDL_LAUNCH(k_layernorm_forward, GRID(n), TDL_BLOCK, S(ctx), out, mean, rstd, in, n, d);
    LAUNCHED(ctx, "LayerNorm");
}

static void cu_layernorm_backward(void *ctx, float *din, const float *dout, const float *in,
                                  const float *mean, const float *rstd, int n, int d)
{
    TDL_LAUNCH(k_layernorm_backward, GRID(n), TDL_BLOCK, S(ctx), din, dout, in, mean, rstd, n, d);
    LAUNCHED(ctx, "LayerNorm backward");
}

static void cu_modulate_forward(void *ctx, float *out, const float *in, const float *shift,
                                const float *scale, int stride, int b, int t, int d)
{
    TDL_LAUNCH(k_modulate_forward, GRID((size_t)b * t * d), TDL_BLOCK, S(ctx), out, in, shift,
               scale, stride, b, t, d);
    LAUNCHED(ctx, "adaLN modulation");
}

static void cu_modulate_backward(void *ctx, float *din, float *dshift, float *dscale,
                                 const float *dout, const float *in, const float *scale,
                                 int stride, int b, int t, int d)
{
    TDL_LAUNCH(k_modulate_backward_in, GRID((size_t)b * t * d), TDL_BLOCK, S(ctx), din, dout,
               scale, stride, b, t, d);
    TDL_LAUNCH(k_modulate_backward_params, GRID((size_t)b * d), TDL_BLOCK, S(ctx), dshift, dscale,
               dout, in, stride, b, t, d);
    LAUNCHED(ctx, "adaLN modulation backward");
}

static void cu_gate_residual_forward(void *ctx, float *out, const float *x, const float *gate,
                                     const float *y, int stride, int b, int t, int d)
{
    TDL_LAUNCH(k_gate_residual_forward, GRID((size_t)b * t * d), TDL_BLOCK, S(ctx), out, x, gate,
               y, stride, b, t, d);
    LAUNCHED(ctx, "gated residual");
}

static void cu_gate_residual_backward(void *ctx, float *dx, float *dy, float *dgate,
                                      const float *dout, const float *gate, const float *y,
                                      int stride, int b, int t, int d)
{
    TDL_LAUNCH(k_gate_residual_backward_xy, GRID((size_t)b * t * d), TDL_BLOCK, S(ctx), dx, dy,
               dout, gate, stride, b, t, d);
    TDL_LAUNCH(k_gate_residual_backward_gate, GRID((size_t)b * d), TDL_BLOCK, S(ctx), dgate, dout,
               y, stride, b, t, d);
    LAUNCHED(ctx, "gated residual backward");
}

static void cu_silu_forward(void *ctx, float *out, const float *in, size_t n)
{
    TDL_LAUNCH(k_silu_forward, GRID(n), TDL_BLOCK, S(ctx), out, in, n);
    LAUNCHED(ctx, "SiLU");
}

static void cu_silu_backward(void *ctx, float *din, const float *dout, const float *in, size_t n)
{
    TDL_LAUNCH(k_silu_backward, GRID(n), TDL_BLOCK, S(ctx), din, dout, in, n);
    LAUNCHED(ctx, "SiLU backward");
}

static void cu_gelu_forward(void *ctx, float *out, const float *in, size_t n)
{
    TDL_LAUNCH(k_gelu_forward, GRID(n), TDL_BLOCK, S(ctx), out, in, n);
    LAUNCHED(ctx, "GELU");
}

static void cu_gelu_backward(void *ctx, float *din, const float *dout, const float *in, size_t n)
{
    TDL_LAUNCH(k_gelu_backward, GRID(n), TDL_BLOCK, S(ctx), din, dout, in, n);
    LAUNCHED(ctx, "GELU backward");
}

// Per sample, the heads as one strided batch: head h's q, k, v start h*hd into the qkv rows
// (row stride 3D), its probabilities h*t*t into att, its output h*hd into the y rows.
static void cu_attention_forward(void *ctx, float *y, float *att, const float *qkv, int b, int t,
                                 int d, int heads)
{
    int hd = d / heads;
    float scale = 1.0f / sqrtf((float)hd);
    long long tt = (long long)t * t;
    for (int s = 0; s < b; s++) {
        const float *base = qkv + (size_t)s * t * 3 * d;
        tdl_gpu_gemm_strided(G(ctx), false, true, t, t, hd, scale, base, 3 * d, hd, base + d,
                             3 * d, hd, 0.0f, att + (size_t)s * heads * tt, t, tt, heads);
    }
    size_t rows = (size_t)b * heads * t;
    TDL_LAUNCH(k_softmax_rows, GRID(rows), TDL_BLOCK, S(ctx), att, rows, t);
    LAUNCHED(ctx, "softmax");
    for (int s = 0; s < b; s++)
        tdl_gpu_gemm_strided(G(ctx), false, false, t, hd, t, 1.0f, att + (size_t)s * heads * tt,
                             t, tt, qkv + (size_t)s * t * 3 * d + 2 * d, 3 * d, hd, 0.0f,
                             y + (size_t)s * t * d, d, hd, heads);
}

// scratch: heads*t*t floats (dP of one sample's heads)
static void cu_attention_backward(void *ctx, float *dqkv, const float *dy, const float *qkv,
                                  const float *att, float *scratch, int b, int t, int d,
                                  int heads)
{
    int hd = d / heads;
    float scale = 1.0f / sqrtf((float)hd);
    long long tt = (long long)t * t;
    for (int s = 0; s < b; s++) {
        const float *base = qkv + (size_t)s * t * 3 * d;
        float *dbase = dqkv + (size_t)s * t * 3 * d;
        const float *dys = dy + (size_t)s * t * d;
        const float *p = att + (size_t)s * heads * tt;
        // dP = dY V^T; dV += P^T dY
        tdl_gpu_gemm_strided(G(ctx), false, true, t, t, hd, 1.0f, dys, d, hd, base + 2 * d, 3 * d,
                             hd, 0.0f, scratch, t, tt, heads);
        tdl_gpu_gemm_strided(G(ctx), true, false, t, hd, t, 1.0f, p, t, tt, dys, d, hd, 1.0f,
                             dbase + 2 * d, 3 * d, hd, heads);
        size_t rows = (size_t)heads * t;
        TDL_LAUNCH(k_softmax_backward_rows, GRID(rows), TDL_BLOCK, S(ctx), scratch, p, rows, t);
        LAUNCHED(ctx, "softmax backward");
        // dQ += dS K / sqrt(hd); dK += dS^T Q / sqrt(hd)
        tdl_gpu_gemm_strided(G(ctx), false, false, t, hd, t, scale, scratch, t, tt, base + d,
                             3 * d, hd, 1.0f, dbase, 3 * d, hd, heads);
        tdl_gpu_gemm_strided(G(ctx), true, false, t, hd, t, scale, scratch, t, tt, base, 3 * d,
                             hd, 1.0f, dbase + d, 3 * d, hd, heads);
    }
}

static size_t cu_attention_scratch(int b, int t, int heads)
{
    (void)b;
    return (size_t)heads * t * t;
}

static void cu_patchify(void *ctx, float *patches, const float *x, int b, int c, int h, int w,
                        int p)
{
    TDL_LAUNCH(k_patchify, GRID((size_t)b * c * h * w), TDL_BLOCK, S(ctx), patches, x, b, c, h,
               w, p);
    LAUNCHED(ctx, "patchify");
}

static void cu_unpatchify(void *ctx, float *out, const float *tokens, int b, int c, int h, int w,
                          int p)
{
    TDL_LAUNCH(k_unpatchify, GRID((size_t)b * c * h * w), TDL_BLOCK, S(ctx), out,
               (float *)tokens, b, c, h, w, p, 0);
    LAUNCHED(ctx, "unpatchify");
}

static void cu_unpatchify_backward(void *ctx, float *dtokens, const float *dout, int b, int c,
                                   int h, int w, int p)
{
    TDL_LAUNCH(k_unpatchify, GRID((size_t)b * c * h * w), TDL_BLOCK, S(ctx), (float *)dout,
               dtokens, b, c, h, w, p, 1);
    LAUNCHED(ctx, "unpatchify backward");
}

static void cu_add_rows(void *ctx, float *x, const float *pos, int b, size_t n)
{
    TDL_LAUNCH(k_add_rows, GRID((size_t)b * n), TDL_BLOCK, S(ctx), x, pos, b, n);
    LAUNCHED(ctx, "position embedding");
}

static void cu_embed_labels(void *ctx, float *c, const float *t_emb, const float *table,
                            const int *y, int b, int d)
{
    TDL_LAUNCH(k_embed_labels, GRID((size_t)b * d), TDL_BLOCK, S(ctx), c, t_emb, table, y, b, d);
    LAUNCHED(ctx, "label embedding");
}

static void cu_embed_labels_backward(void *ctx, float *dtable, const float *dc, const int *y,
                                     int b, int d)
{
    TDL_LAUNCH(k_embed_labels_backward, GRID(d), TDL_BLOCK, S(ctx), dtable, dc, y, b, d);
    LAUNCHED(ctx, "label embedding backward");
}

// The columns of a band of output rows at a time (cols_floats of them), one cuBLAS product a band,
// as the CPU does.
static void cu_vae_conv2d_forward(void *ctx, float *out, const float *in, const float *weight,
                                  const float *bias, int cin, int cout, int h, int w, int k,
                                  int stride, bool accumulate, float *cols, size_t cols_floats)
{
    int ho = stride == 1 ? h : h / 2, wo = stride == 1 ? w : w / 2;
    int hw = ho * wo;
    if (bias) {
        TDL_LAUNCH(k_vae_bias, GRID((size_t)cout * hw), TDL_BLOCK, S(ctx), out, bias, cout,
                   (size_t)hw, accumulate ? 1 : 0);
        LAUNCHED(ctx, "VAE convolution bias");
    }
    float beta = bias || accumulate ? 1.0f : 0.0f;
    if (k == 1) {
        tdl_gpu_gemm(G(ctx), false, false, cout, hw, cin, 1.0f, weight, cin, in, hw, beta, out, hw);
        return;
    }
    size_t per_row = (size_t)cin * 9 * wo;
    size_t fit = cols_floats / per_row;
    int band = fit < 1 ? 1 : (fit > (size_t)ho ? ho : (int)fit);
    for (int r0 = 0; r0 < ho; r0 += band) {
        int r1 = r0 + band < ho ? r0 + band : ho, ncol = (r1 - r0) * wo;
        TDL_LAUNCH(k_vae_im2col3, GRID((size_t)cin * 9 * ncol), TDL_BLOCK, S(ctx), cols, in, cin,
                   h, w, wo, r0, r1, stride);
        LAUNCHED(ctx, "VAE im2col");
        tdl_gpu_gemm(G(ctx), false, false, cout, ncol, cin * 9, 1.0f, weight, cin * 9, cols, ncol,
                     beta, out + (size_t)r0 * wo, hw);
    }
}

static size_t cu_vae_conv2d_scratch(int channels, int w)
{
    return (size_t)channels * 9 * w; // im2col, a row a band at least
}

static size_t cu_vae_groupnorm_scratch(size_t group_values, int groups)
{
    return (size_t)groups * ((group_values + VAE_GN_CHUNK - 1) / VAE_GN_CHUNK) +
           2 * (size_t)groups;
}

// Partial sums of chunks of 256, then each group's in double: the mean, then the variance about it
// (two passes, as the CPU), then one element-wise pass.
static void cu_vae_groupnorm_forward(void *ctx, float *out, const float *in, const float *weight,
                                     const float *bias, int c, int hw, int groups, bool silu,
                                     float *scratch)
{
    int per = c / groups;
    size_t n = (size_t)per * hw;
    int nchunk = (int)((n + VAE_GN_CHUNK - 1) / VAE_GN_CHUNK);
    float *part = scratch, *mean = scratch + (size_t)groups * nchunk, *rstd = mean + groups;
    size_t nparts = (size_t)groups * nchunk;
    TDL_LAUNCH(k_vae_gn_partial, GRID(nparts), TDL_BLOCK, S(ctx), part, in, (const float *)NULL,
               n, nchunk, groups, 0);
    TDL_LAUNCH(k_vae_gn_stat, GRID(groups), TDL_BLOCK, S(ctx), mean, part, n, nchunk, groups, 0);
    TDL_LAUNCH(k_vae_gn_partial, GRID(nparts), TDL_BLOCK, S(ctx), part, in, (const float *)mean,
               n, nchunk, groups, 1);
    TDL_LAUNCH(k_vae_gn_stat, GRID(groups), TDL_BLOCK, S(ctx), rstd, part, n, nchunk, groups, 1);
    TDL_LAUNCH(k_vae_gn_apply, GRID((size_t)c * hw), TDL_BLOCK, S(ctx), out, in, weight, bias,
               (const float *)mean, (const float *)rstd, c, (size_t)hw, per, silu ? 1 : 0);
    LAUNCHED(ctx, "VAE GroupNorm");
}

static void cu_vae_upsample2x_forward(void *ctx, float *out, const float *in, int c, int h, int w)
{
    TDL_LAUNCH(k_vae_upsample2x, GRID((size_t)c * 4 * h * w), TDL_BLOCK, S(ctx), out, in, c, h, w);
    LAUNCHED(ctx, "VAE upsampling");
}

static void cu_vae_add(void *ctx, float *y, const float *x, size_t n)
{
    TDL_LAUNCH(k_vae_add, GRID(n), TDL_BLOCK, S(ctx), y, x, n);
    LAUNCHED(ctx, "VAE residual");
}

static void cu_vae_transpose(void *ctx, float *out, const float *in, int rows, int cols,
                             bool accumulate)
{
    TDL_LAUNCH(k_vae_transpose, GRID((size_t)rows * cols), TDL_BLOCK, S(ctx), out, in, rows, cols,
               accumulate ? 1 : 0);
    LAUNCHED(ctx, "VAE transpose");
}

// DIT_VAE_ATTN_TILE query rows at a time, as the CPU: s holds that many rows of scores.
static void cu_vae_attention_forward(void *ctx, float *o, const float *q, const float *k,
                                     const float *v, float *s, int t, int c)
{
    int tile = t < DIT_VAE_ATTN_TILE ? t : DIT_VAE_ATTN_TILE;
    float scale = 1.0f / sqrtf((float)c);
    for (int r0 = 0; r0 < t; r0 += tile) {
        int rows = t - r0 < tile ? t - r0 : tile;
        tdl_gpu_gemm(G(ctx), false, true, rows, t, c, scale, q + (size_t)r0 * c, c, k, c, 0.0f, s,
                     t);
        TDL_LAUNCH(k_softmax_rows, GRID(rows), TDL_BLOCK, S(ctx), s, (size_t)rows, t);
        LAUNCHED(ctx, "VAE softmax");
        tdl_gpu_gemm(G(ctx), false, false, rows, c, t, 1.0f, s, t, v, c, 0.0f, o + (size_t)r0 * c,
                     c);
    }
}

static void cu_close(dit_backend_t *be)
{
    dit_cuda_t *c = (dit_cuda_t *)be->ctx;
    tdl_gpu_close(c->gpu);
    free(c);
    free(be);
}

#ifdef TDL_CUDA_EMULATE
#define DIT_BACKEND_CUDA_OPEN dit_backend_cuda_emu_open
#define DIT_BACKEND_NAME "cuda-emulated"
#else
#define DIT_BACKEND_CUDA_OPEN dit_backend_cuda_open
#define DIT_BACKEND_NAME "cuda"
#endif

// gpu < 0: the node-local rank's GPU modulo the visible ones (0 when not launched by MPI/Slurm).
extern "C" tdl_status_t DIT_BACKEND_CUDA_OPEN(int gpu, int local_rank, dit_backend_t **be_out)
{
    *be_out = NULL;
    if (gpu < 0) {
        int count = 1;
#ifndef TDL_CUDA_EMULATE
        if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
            cudaGetLastError();
            count = 1; // tdl_gpu_open says what is wrong
        }
#endif
        gpu = local_rank > 0 ? local_rank % count : 0;
    }
    dit_cuda_t *c = (dit_cuda_t *)calloc(1, sizeof(*c));
    dit_backend_t *be = (dit_backend_t *)calloc(1, sizeof(*be));
    if (!c || !be) {
        free(c);
        free(be);
        return tdl_error_raise(TDL_ERR_NOMEM, "CUDA backend: out of memory");
    }
    tdl_status_t st = tdl_gpu_open(gpu, &c->gpu);
    if (st != TDL_OK) {
        free(c);
        free(be);
        return st;
    }
    c->stream = tdl_gpu_stream(c->gpu);
    be->name = DIT_BACKEND_NAME;
    be->host_memory = false;
    be->gpu = gpu;
    be->ctx = c;
    be->close = cu_close;
    be->alloc = cu_alloc;
    be->release = cu_release;
    be->upload = cu_upload;
    be->download = cu_download;
    be->zero = cu_zero;
    be->finish = cu_finish;
    be->linear_forward = cu_linear_forward;
    be->linear_backward = cu_linear_backward;
    be->layernorm_forward = cu_layernorm_forward;
    be->layernorm_backward = cu_layernorm_backward;
    be->modulate_forward = cu_modulate_forward;
    be->modulate_backward = cu_modulate_backward;
    be->gate_residual_forward = cu_gate_residual_forward;
    be->gate_residual_backward = cu_gate_residual_backward;
    be->silu_forward = cu_silu_forward;
    be->silu_backward = cu_silu_backward;
    be->gelu_forward = cu_gelu_forward;
    be->gelu_backward = cu_gelu_backward;
    be->attention_forward = cu_attention_forward;
    be->attention_backward = cu_attention_backward;
    be->attention_scratch = cu_attention_scratch;
    be->patchify = cu_patchify;
    be->unpatchify = cu_unpatchify;
    be->unpatchify_backward = cu_unpatchify_backward;
    be->add_rows = cu_add_rows;
    be->embed_labels = cu_embed_labels;
    be->embed_labels_backward = cu_embed_labels_backward;
    be->vae_groupnorm_forward = cu_vae_groupnorm_forward;
    be->vae_groupnorm_scratch = cu_vae_groupnorm_scratch;
    be->vae_conv2d_scratch = cu_vae_conv2d_scratch;
    be->vae_conv2d_forward = cu_vae_conv2d_forward;
    be->vae_upsample2x_forward = cu_vae_upsample2x_forward;
    be->vae_add = cu_vae_add;
    be->vae_transpose = cu_vae_transpose;
    be->vae_attention_forward = cu_vae_attention_forward;
    *be_out = be;
    return TDL_OK;
}
