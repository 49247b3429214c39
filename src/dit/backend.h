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
} dit_backend_t;

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
