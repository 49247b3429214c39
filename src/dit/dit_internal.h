/* dit internals: the layer pairs the model is made of. Shapes are in the comments. */
#ifndef TIDAL_DIT_INTERNAL_H
#define TIDAL_DIT_INTERNAL_H

#include "dit/backend.h"
#include "dit/dit.h"

/* out[N,D], mean[N], rstd[N] = LayerNorm(in[N,D]) without affine, eps 1e-6 */
void dit_layernorm_forward(float *out, float *mean, float *rstd, const float *in, int n, int d);
/* din[N,D] += d(LayerNorm)^T dout */
void dit_layernorm_backward(float *din, const float *dout, const float *in, const float *mean,
                            const float *rstd, int n, int d);

/* out[B,T,D] = in * (1 + scale[b]) + shift[b]; shift and scale rows are `stride` apart */
void dit_modulate_forward(float *out, const float *in, const float *shift, const float *scale,
                          int stride, int b, int t, int d);
/* din += dout * (1 + scale); dshift[b] += sum_t dout; dscale[b] += sum_t dout * in */
void dit_modulate_backward(float *din, float *dshift, float *dscale, const float *dout,
                           const float *in, const float *scale, int stride, int b, int t, int d);

/* out[B,T,D] = x + gate[b] * y */
void dit_gate_residual_forward(float *out, const float *x, const float *gate, const float *y,
                               int stride, int b, int t, int d);
/* dx += dout; dy += gate * dout; dgate[b] += sum_t dout * y */
void dit_gate_residual_backward(float *dx, float *dy, float *dgate, const float *dout,
                                const float *gate, const float *y, int stride, int b, int t,
                                int d);

/* out[N] = x * sigmoid(x) */
void dit_silu_forward(float *out, const float *in, size_t n);
void dit_silu_backward(float *din, const float *dout, const float *in, size_t n);
/* out[N] = GELU(x), tanh approximation */
void dit_gelu_forward(float *out, const float *in, size_t n);
void dit_gelu_backward(float *din, const float *dout, const float *in, size_t n);

/* p[rows, t] = softmax of each row of scores, in place (the DiT's attention and the VAE's) */
void dit_softmax_rows(float *p, int rows, int t);
/* Multi-head self-attention core: qkv[B,T,3D] (q | k | v, heads contiguous within each) ->
 * y[B,T,D], keeping softmax probabilities att[B,H,T,T]. */
void dit_attention_forward(float *y, float *att, const float *qkv, int b, int t, int d,
                           int heads);
/* The same y without keeping att: per sample and head, DIT_ATTN_TILE_ROWS query rows at a time
 * into scratch[DIT_ATTN_TILE_ROWS, T]. Both forwards make the same BLAS calls (attention.c), so
 * they agree byte for byte. 96 rows: a multiple of every BLAS kernel's row unrolling we know of
 * (4, 6, 8, 12, 16, 24, 48), so that on those the tiles sum as one whole product would. */
#define DIT_ATTN_TILE_ROWS 96
void dit_attention_forward_tiled(float *y, float *scratch, const float *qkv, int b, int t, int d,
                                 int heads);
/* dqkv[B,T,3D] += from dy[B,T,D]; scratch holds T*T floats */
void dit_attention_backward(float *dqkv, const float *dy, const float *qkv, const float *att,
                            float *scratch, int b, int t, int d, int heads);

/* patches[B,T,C*p*p] from x[B,C,H,W], each patch in (c, i, j) order like the Conv2d weight */
void dit_patchify(float *patches, const float *x, int b, int c, int h, int w, int p);
/* out[B,C,H,W] from tokens[B,T,p*p*C] in (i, j, c) order, as the reference's unpatchify */
void dit_unpatchify(float *out, const float *tokens, int b, int c, int h, int w, int p);
void dit_unpatchify_backward(float *dtokens, const float *dout, int b, int c, int h, int w, int p);
/* freq[B,256] = [cos(t*1000*f), sin(t*1000*f)] */
void dit_timestep_embedding(float *freq, const float *t, int b);

/* The inference workspace of sp.c: sized for max_batch images of max_tokens tokens on any
 * sequence-parallel degree up to DIT_SP_MAX_RANKS; its memory is not touched until a forward
 * uses it. */
#define DIT_SP_MAX_RANKS 8
tdl_status_t dit_infer_ws_create(const dit_model_t *m, int max_batch, int max_tokens,
                                 dit_infer_ws_t **ws_out);
void dit_infer_ws_free(dit_infer_ws_t *ws);
size_t dit_infer_ws_bytes(const dit_infer_ws_t *ws);

#endif /* TIDAL_DIT_INTERNAL_H */
