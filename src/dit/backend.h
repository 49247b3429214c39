/* dit backends: where the model's layers run. The forward and backward passes of model.c are one
 * list of calls through this table; the CPU backend (backend_cpu.c) runs them on host memory,
 * the CUDA backend (cuda/dit.cu) on device memory. Every pointer a layer call receives belongs to
 * the backend's memory; upload and download cross the boundary. Layer calls are queued (a GPU
 * runs them in order on one stream) and return nothing; finish waits and reports the first
 * failure. Shapes and semantics are those of dit_internal.h. */
#ifndef TIDAL_DIT_BACKEND_H
#define TIDAL_DIT_BACKEND_H

#include <stddef.h>

#include "core/core.h"

typedef struct dit_backend {
    const char *name;  /* "cpu", "cuda" */
    bool host_memory;  /* its pointers are host memory: no copies needed */
    int gpu;           /* the device index, -1 on the CPU */
    void *ctx;
    void (*close)(struct dit_backend *be);

    /* memory, in floats; alloc zeroes and returns NULL with the error raised */
    float *(*alloc)(void *ctx, size_t n);
    void (*release)(void *ctx, float *p);
    void (*upload)(void *ctx, float *dst, const float *host_src, size_t n);
    void (*download)(void *ctx, float *host_dst, const float *src, size_t n);
    void (*zero)(void *ctx, float *p, size_t n);
    tdl_status_t (*finish)(void *ctx);

    /* layers */
    /* in products of `group` rows (tensor_linear_forward's; a device may make one of all) */
    void (*linear_forward)(void *ctx, float *out, const float *in, const float *w, const float *b,
                           int n, int in_dim, int out_dim, int group);
    void (*linear_backward)(void *ctx, float *din, float *dw, float *db, const float *dout,
                            const float *in, const float *w, int n, int in_dim, int out_dim);
    void (*layernorm_forward)(void *ctx, float *out, float *mean, float *rstd, const float *in,
                              int n, int d);
    void (*layernorm_backward)(void *ctx, float *din, const float *dout, const float *in,
                               const float *mean, const float *rstd, int n, int d);
    void (*modulate_forward)(void *ctx, float *out, const float *in, const float *shift,
                             const float *scale, int stride, int b, int t, int d);
    void (*modulate_backward)(void *ctx, float *din, float *dshift, float *dscale,
                              const float *dout, const float *in, const float *scale, int stride,
                              int b, int t, int d);
    void (*gate_residual_forward)(void *ctx, float *out, const float *x, const float *gate,
                                  const float *y, int stride, int b, int t, int d);
    void (*gate_residual_backward)(void *ctx, float *dx, float *dy, float *dgate,
                                   const float *dout, const float *gate, const float *y,
                                   int stride, int b, int t, int d);
    void (*silu_forward)(void *ctx, float *out, const float *in, size_t n);
    void (*silu_backward)(void *ctx, float *din, const float *dout, const float *in, size_t n);
    void (*gelu_forward)(void *ctx, float *out, const float *in, size_t n);
    void (*gelu_backward)(void *ctx, float *din, const float *dout, const float *in, size_t n);
    /* scratch: attention_scratch(b, t, heads) floats */
    void (*attention_forward)(void *ctx, float *y, float *att, const float *qkv, int b, int t,
                              int d, int heads);
    void (*attention_backward)(void *ctx, float *dqkv, const float *dy, const float *qkv,
                               const float *att, float *scratch, int b, int t, int d, int heads);
    size_t (*attention_scratch)(int b, int t, int heads);
    void (*patchify)(void *ctx, float *patches, const float *x, int b, int c, int h, int w,
                     int p);
    void (*unpatchify)(void *ctx, float *out, const float *tokens, int b, int c, int h, int w,
                       int p);
    void (*unpatchify_backward)(void *ctx, float *dtokens, const float *dout, int b, int c,
                                int h, int w, int p);
    /* x[s, i] += pos[i] for each of b samples of n values */
    void (*add_rows)(void *ctx, float *x, const float *pos, int b, size_t n);
    /* c[s] = t_emb[s] + table[y[s]]; y holds b ints (in the backend's memory) */
    void (*embed_labels)(void *ctx, float *c, const float *t_emb, const float *table,
                         const int *y, int b, int d);
    /* dtable[y[s]] += dc[s] */
    void (*embed_labels_backward)(void *ctx, float *dtable, const float *dc, const int *y, int b,
                                  int d);

    /* ---- the VAE's layers (dit/vae.h), on one image x[C, H, W] at a time ---- */
    /* out[C, HW] = GroupNorm(in) * weight[c] + bias[c] over `groups` groups, eps 1e-6, then SiLU
     * when silu; out may be in. scratch: vae_groupnorm_scratch((c / groups) * hw, groups)
     * floats. */
    void (*vae_groupnorm_forward)(void *ctx, float *out, const float *in, const float *weight,
                                  const float *bias, int c, int hw, int groups, bool silu,
                                  float *scratch);
    /* scratch for `groups` groups of up to group_values values each */
    size_t (*vae_groupnorm_scratch)(size_t group_values, int groups);
    /* out[Cout, Ho, Wo] (+)= conv(in[Cin, H, W]) + bias (NULL: none), weight[Cout, Cin, k, k]:
     * k 1, or k 3 with stride 1 (padding 1, Ho = H) or stride 2 (Downsample2D's bottom and right
     * padding, Ho = H / 2); accumulate adds to out. cols: a column buffer of cols_floats, at
     * least Cin * 9 * Wo. */
    void (*vae_conv2d_forward)(void *ctx, float *out, const float *in, const float *weight,
                               const float *bias, int cin, int cout, int h, int w, int k,
                               int stride, bool accumulate, float *cols, size_t cols_floats);
    /* cols_floats with which vae_conv2d_forward runs every convolution of up to `channels`
     * channels in and out and up to w output columns its fastest way (the CPU's Winograd, a
     * whole band of tiles); any at least Cin * 9 * Wo works */
    size_t (*vae_conv2d_scratch)(int channels, int w);
    /* out[C, 2H, 2W] = in[C, H, W], each value repeated 2x2 (nearest) */
    void (*vae_upsample2x_forward)(void *ctx, float *out, const float *in, int c, int h, int w);
    /* y[i] += x[i] */
    void (*vae_add)(void *ctx, float *y, const float *x, size_t n);
    /* out[cols, rows] = in[rows, cols]^T, or += when accumulate */
    void (*vae_transpose)(void *ctx, float *out, const float *in, int rows, int cols,
                          bool accumulate);
    /* o[T, C] = softmax(q k^T / sqrt(C)) v, one head over rows [T, C]; s: scratch of
     * DIT_VAE_ATTN_TILE rows of T scores (fewer when T is smaller) */
    void (*vae_attention_forward)(void *ctx, float *o, const float *q, const float *k,
                                  const float *v, float *s, int t, int c);
} dit_backend_t;

/* Query rows of the VAE's mid-block attention whose scores are held at once. */
#define DIT_VAE_ATTN_TILE 256

/* The CPU backend (static, nothing to close). */
const dit_backend_t *dit_backend_cpu(void);

/* The CUDA backend (cuda/dit.cu, built where CUDA is) and the same code emulated on the CPU
 * (built everywhere, for tests); gpu < 0: the node-local rank's GPU modulo the visible ones. */
#ifdef __cplusplus
extern "C" {
#endif
tdl_status_t dit_backend_cuda_open(int gpu, int local_rank, dit_backend_t **be_out);
tdl_status_t dit_backend_cuda_emu_open(int gpu, int local_rank, dit_backend_t **be_out);
#ifdef __cplusplus
}
#endif

#endif /* TIDAL_DIT_BACKEND_H */
