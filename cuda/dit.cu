// The DiT's layers on the GPU: the CUDA backend of src/dit/backend.h. Matrix products (the
// linears and the two products of attention per head) go through cuBLAS in fp32; everything else
// is a kernel of this file, written under cuda/kernel.h's rules so that the same code also runs,
// emulated, in the CPU test tests/unit/test_dit_emu.c against src/dit's CPU layers. Reductions
// are one thread per row or per column (LayerNorm, softmax, bias and modulation gradients), with
// the CPU's double accumulators; element-wise kernels are grid-stride loops.
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
    *be_out = be;
    return TDL_OK;
}
