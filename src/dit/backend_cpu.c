/* The CPU backend: the layer functions of layers.c, attention.c, embed.c and vae_layers.c on host
 * memory, matrix products through OpenBLAS. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit_internal.h"
#include "dit/vae.h"

static float *cpu_alloc(void *ctx, size_t n)
{
    (void)ctx;
    float *p = tensor_alloc(n);
    if (!p)
        tdl_error_raise(TDL_ERR_NOMEM, "cannot allocate %.1f MiB", (double)n * 4 / (1 << 20));
    return p;
}

static void cpu_release(void *ctx, float *p)
{
    (void)ctx;
    free(p);
}

static void cpu_copy(void *ctx, float *dst, const float *src, size_t n)
{
    (void)ctx;
    if (n && dst != src)
        memcpy(dst, src, n * sizeof(float));
}

static void cpu_zero(void *ctx, float *p, size_t n)
{
    (void)ctx;
    memset(p, 0, n * sizeof(float));
}

static tdl_status_t cpu_finish(void *ctx)
{
    (void)ctx;
    return TDL_OK;
}

static void cpu_linear_forward(void *ctx, float *out, const float *in, const float *w,
                               const float *b, int n, int in_dim, int out_dim, int group)
{
    (void)ctx;
    tensor_linear_forward(out, in, w, b, n, in_dim, out_dim, group);
}

static void cpu_linear_backward(void *ctx, float *din, float *dw, float *db, const float *dout,
                                const float *in, const float *w, int n, int in_dim, int out_dim)
{
    (void)ctx;
    tensor_linear_backward(din, dw, db, dout, in, w, n, in_dim, out_dim);
}

static void cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *in,
                                  int n, int d)
{
    (void)ctx;
    dit_layernorm_forward(out, mean, rstd, in, n, d);
}

static void cpu_layernorm_backward(void *ctx, float *din, const float *dout, const float *in,
                                   const float *mean, const float *rstd, int n, int d)
{
    (void)ctx;
    dit_layernorm_backward(din, dout, in, mean, rstd, n, d);
}

static void cpu_modulate_forward(void *ctx, float *out, const float *in, const float *shift,
                                 const float *scale, int stride, int b, int t, int d)
{
    (void)ctx;
    dit_modulate_forward(out, in, shift, scale, stride, b, t, d);
}

static void cpu_modulate_backward(void *ctx, float *din, float *dshift, float *dscale,
                                  const float *dout, const float *in, const float *scale,
                                  int stride, int b, int t, int d)
{
    (void)ctx;
    dit_modulate_backward(din, dshift, dscale, dout, in, scale, stride, b, t, d);
}

static void cpu_gate_residual_forward(void *ctx, float *out, const float *x, const float *gate,
                                      const float *y, int stride, int b, int t, int d)
{
    (void)ctx;
    dit_gate_residual_forward(out, x, gate, y, stride, b, t, d);
}

static void cpu_gate_residual_backward(void *ctx, float *dx, float *dy, float *dgate,
                                       const float *dout, const float *gate, const float *y,
                                       int stride, int b, int t, int d)
{
    (void)ctx;
    dit_gate_residual_backward(dx, dy, dgate, dout, gate, y, stride, b, t, d);
}

static void cpu_silu_forward(void *ctx, float *out, const float *in, size_t n)
{
    (void)ctx;
    dit_silu_forward(out, in, n);
}

static void cpu_silu_backward(void *ctx, float *din, const float *dout, const float *in, size_t n)
{
    (void)ctx;
    dit_silu_backward(din, dout, in, n);
}

static void cpu_gelu_forward(void *ctx, float *out, const float *in, size_t n)
{
    (void)ctx;
    dit_gelu_forward(out, in, n);
}

static void cpu_gelu_backward(void *ctx, float *din, const float *dout, const float *in, size_t n)
{
    (void)ctx;
    dit_gelu_backward(din, dout, in, n);
}

static void cpu_attention_forward(void *ctx, float *y, float *att, const float *qkv, int b, int t,
                                  int d, int heads)
{
    (void)ctx;
    dit_attention_forward(y, att, qkv, b, t, d, heads);
}

static void cpu_attention_backward(void *ctx, float *dqkv, const float *dy, const float *qkv,
                                   const float *att, float *scratch, int b, int t, int d,
                                   int heads)
{
    (void)ctx;
    dit_attention_backward(dqkv, dy, qkv, att, scratch, b, t, d, heads);
}

static size_t cpu_attention_scratch(int b, int t, int heads)
{
    (void)b, (void)heads;
    return (size_t)t * t;
}

static void cpu_patchify(void *ctx, float *patches, const float *x, int b, int c, int h, int w,
                         int p)
{
    (void)ctx;
    dit_patchify(patches, x, b, c, h, w, p);
}

static void cpu_unpatchify(void *ctx, float *out, const float *tokens, int b, int c, int h, int w,
                           int p)
{
    (void)ctx;
    dit_unpatchify(out, tokens, b, c, h, w, p);
}

static void cpu_unpatchify_backward(void *ctx, float *dtokens, const float *dout, int b, int c,
                                    int h, int w, int p)
{
    (void)ctx;
    dit_unpatchify_backward(dtokens, dout, b, c, h, w, p);
}

static void cpu_add_rows(void *ctx, float *x, const float *pos, int b, size_t n)
{
    (void)ctx;
    for (int s = 0; s < b; s++)
        for (size_t i = 0; i < n; i++)
            x[(size_t)s * n + i] += pos[i];
}

static void cpu_embed_labels(void *ctx, float *c, const float *t_emb, const float *table,
                             const int *y, int b, int d)
{
    (void)ctx;
    for (int s = 0; s < b; s++)
        for (int j = 0; j < d; j++)
            c[(size_t)s * d + j] = t_emb[(size_t)s * d + j] + table[(size_t)y[s] * d + j];
}

static void cpu_embed_labels_backward(void *ctx, float *dtable, const float *dc, const int *y,
                                      int b, int d)
{
    (void)ctx;
    for (int s = 0; s < b; s++)
        for (int j = 0; j < d; j++)
            dtable[(size_t)y[s] * d + j] += dc[(size_t)s * d + j];
}

static void cpu_vae_groupnorm_forward(void *ctx, float *out, const float *in, const float *weight,
                                      const float *bias, int c, int hw, int groups, bool silu,
                                      float *scratch)
{
    (void)ctx, (void)scratch;
    dit_vae_groupnorm_forward(out, in, weight, bias, c, hw, groups, silu);
}

static size_t cpu_vae_groupnorm_scratch(size_t group_values, int groups)
{
    (void)group_values, (void)groups;
    return 0;
}

static void cpu_vae_conv2d_forward(void *ctx, float *out, const float *in, const float *weight,
                                   const float *bias, int cin, int cout, int h, int w, int k,
                                   int stride, bool accumulate, float *cols, size_t cols_floats)
{
    (void)ctx;
    if (stride == 2)
        dit_vae_conv2d_down_forward(out, in, weight, bias, cin, cout, h, w, cols, cols_floats);
    else
        dit_vae_conv2d_forward(out, in, weight, bias, cin, cout, h, w, k, accumulate, cols,
                               cols_floats);
}

static size_t cpu_vae_conv2d_scratch(int channels, int w)
{
    return TDL_MAX((size_t)channels * 9 * w, dit_vae_winograd_scratch(channels, channels, w));
}

static void cpu_vae_upsample2x_forward(void *ctx, float *out, const float *in, int c, int h,
                                       int w)
{
    (void)ctx;
    dit_vae_upsample2x_forward(out, in, c, h, w);
}

static void cpu_vae_add(void *ctx, float *y, const float *x, size_t n)
{
    (void)ctx;
    dit_vae_add_forward(y, x, n);
}

static void cpu_vae_transpose(void *ctx, float *out, const float *in, int rows, int cols,
                              bool accumulate)
{
    (void)ctx;
    dit_vae_transpose(out, in, rows, cols, accumulate);
}

static void cpu_vae_attention_forward(void *ctx, float *o, const float *q, const float *k,
                                      const float *v, float *s, int t, int c)
{
    (void)ctx;
    dit_vae_attention_forward(o, q, k, v, s, t, c);
}

static const dit_backend_t cpu_backend = {
    .name = "cpu",
    .host_memory = true,
    .gpu = -1,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .finish = cpu_finish,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .modulate_forward = cpu_modulate_forward,
    .modulate_backward = cpu_modulate_backward,
    .gate_residual_forward = cpu_gate_residual_forward,
    .gate_residual_backward = cpu_gate_residual_backward,
    .silu_forward = cpu_silu_forward,
    .silu_backward = cpu_silu_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_scratch = cpu_attention_scratch,
    .patchify = cpu_patchify,
    .unpatchify = cpu_unpatchify,
    .unpatchify_backward = cpu_unpatchify_backward,
    .add_rows = cpu_add_rows,
    .embed_labels = cpu_embed_labels,
    .embed_labels_backward = cpu_embed_labels_backward,
    .vae_groupnorm_forward = cpu_vae_groupnorm_forward,
    .vae_groupnorm_scratch = cpu_vae_groupnorm_scratch,
    .vae_conv2d_forward = cpu_vae_conv2d_forward,
    .vae_conv2d_scratch = cpu_vae_conv2d_scratch,
    .vae_upsample2x_forward = cpu_vae_upsample2x_forward,
    .vae_add = cpu_vae_add,
    .vae_transpose = cpu_vae_transpose,
    .vae_attention_forward = cpu_vae_attention_forward,
};

const dit_backend_t *dit_backend_cpu(void)
{
    return &cpu_backend;
}
