/* Sequence-parallel (Ulysses) forward of the DiT over P ranks, for serving: each rank holds T/P
 * of the tokens; every token-wise layer (patch embedding, LayerNorm, adaLN modulation, the qkv,
 * projection and MLP linears, the final layer) runs on the local tokens; attention switches to
 * heads-sharded (all T tokens, H/P heads) through one all-to-all of q, k and v, and back through
 * a second all-to-all of its output; the output tokens are all-gathered at the end. The
 * conditioning (timestep and label embeddings, adaLN inputs) is computed on every rank. With
 * P = 1 it is the plain forward. The exchanges come from the caller (dit_sp_comm_t), so this
 * file needs no MPI or UCX; src/serve gives it gfc's. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "dit/dit_internal.h"
#include "tensor/tensor.h"

/* Scratch for one call, freed at its end. */
typedef struct sp_bufs {
    float *patches, *xa, *xb, *pos, *freq, *t_h, *t_act, *t_emb, *c, *c_silu, *mod;
    float *ln, *mean, *rstd, *m, *qkv, *send, *recv, *qkv_h, *att, *y_h, *y, *proj, *fc1, *gelu;
    float *fc2, *tok, *tok_all;
} sp_bufs_t;

static void sp_free(sp_bufs_t *s)
{
    float **f = (float **)s;
    for (size_t i = 0; i < sizeof(*s) / sizeof(float *); i++)
        free(f[i]);
}

/* qkv rows of b samples x tl local tokens x 3D -> for rank j, [b, tl, 3, D/P] of its heads. */
static void sp_pack_qkv(float *send, const float *qkv, int b, int tl, int d, int P)
{
    int dp = d / P;
    for (int j = 0; j < P; j++)
        for (int s = 0; s < b; s++)
            for (int i = 0; i < tl; i++) {
                const float *row = qkv + ((size_t)s * tl + i) * 3 * d;
                float *o = send + ((((size_t)j * b + s) * tl + i) * 3) * dp;
                for (int part = 0; part < 3; part++)
                    memcpy(o + (size_t)part * dp, row + (size_t)part * d + (size_t)j * dp,
                           (size_t)dp * sizeof(float));
            }
}

/* From rank i: [b, tl, 3, D/P] of its tokens -> qkv_h[b, T, 3 D/P], tokens in global order. */
static void sp_unpack_qkv(float *qkv_h, const float *recv, int b, int tl, int d, int P)
{
    int dp = d / P, t = tl * P;
    for (int i = 0; i < P; i++)
        for (int s = 0; s < b; s++)
            for (int k = 0; k < tl; k++)
                memcpy(qkv_h + ((size_t)s * t + (size_t)i * tl + k) * 3 * dp,
                       recv + (((size_t)i * b + s) * tl + k) * 3 * dp, (size_t)3 * dp * sizeof(float));
}

/* y_h[b, T, D/P] -> for rank i, its tokens: [b, tl, D/P]. */
static void sp_pack_y(float *send, const float *y_h, int b, int tl, int d, int P)
{
    int dp = d / P, t = tl * P;
    for (int i = 0; i < P; i++)
        for (int s = 0; s < b; s++)
            memcpy(send + (((size_t)i * b + s) * tl) * dp, y_h + ((size_t)s * t + (size_t)i * tl) * dp,
                   (size_t)tl * dp * sizeof(float));
}

/* From rank j: [b, tl, D/P] of heads group j -> y[b, tl, D], head groups side by side. */
static void sp_unpack_y(float *y, const float *recv, int b, int tl, int d, int P)
{
    int dp = d / P;
    for (int j = 0; j < P; j++)
        for (int s = 0; s < b; s++)
            for (int k = 0; k < tl; k++)
                memcpy(y + ((size_t)s * tl + k) * d + (size_t)j * dp,
                       recv + (((size_t)j * b + s) * tl + k) * dp, (size_t)dp * sizeof(float));
}

tdl_status_t dit_sp_check(const dit_model_t *m, int h, int w, int P)
{
    const dit_config_t *c = &m->config;
    int p = c->patch_size;
    if (P < 1 || h % p || w % p || h < p || w < p)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sequence-parallel forward: %dx%d images on %d ranks (sides must be "
                               "multiples of the patch size %d)",
                               h, w, P, p);
    int t = (h / p) * (w / p);
    if (t % P || c->num_heads % P || c->hidden_size % P)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sequence-parallel forward: %d ranks must divide the %d tokens and "
                               "the %d heads of %s at %dx%d",
                               P, t, c->num_heads, c->name, h, w);
    return TDL_OK;
}

tdl_status_t dit_sp_forward(const dit_model_t *m, const dit_sp_comm_t *comm, const float *x,
                            const float *t, const int *y, int b, int h, int w, float *out)
{
    const dit_config_t *c = &m->config;
    int P = comm ? comm->size : 1, me = comm ? comm->rank : 0;
    tdl_status_t st = dit_sp_check(m, h, w, P);
    if (st != TDL_OK)
        return st;
    if (b < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "sequence-parallel forward: batch %d", b);
    for (int s = 0; s < b; s++)
        if (y[s] < 0 || y[s] > c->num_classes)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "sequence-parallel forward: label %d of sample %d is outside "
                                   "[0, %d]",
                                   y[s], s, c->num_classes);
    if (!m->be->host_memory) {
        /* On a device, one rank's whole forward: the model's own pass, on its activations (a
         * device model serves one task at a time). */
        if (P > 1)
            return tdl_error_raise(TDL_ERR_UNSUPPORTED,
                                   "sequence parallelism across GPUs is not built yet (degree %d "
                                   "asked): serve with a degree-1 policy (static_sp1) on --device "
                                   "%s, or on the CPU",
                                   P, m->be->name);
        return dit_model_forward((dit_model_t *)m, x, t, y, b, h, w, out);
    }
    int p = c->patch_size, d = c->hidden_size, mh = dit_config_mlp_hidden(c);
    int pd = p * p * c->in_channels, nh = c->num_heads;
    int gh = h / p, gw = w / p, T = gh * gw, tl = T / P, t0 = me * tl, dp = d / P;
    size_t bl = (size_t)b * tl, bT = (size_t)b * T;
    const dit_view_t *v = &m->p;
    sp_bufs_t s = {0};
    size_t xch = bl * 3 * d; /* the largest exchange: every local token's q, k and v */
    s.patches = malloc(bT * pd * sizeof(float));
    s.xa = malloc(bl * d * sizeof(float)), s.xb = malloc(bl * d * sizeof(float));
    s.pos = malloc((size_t)T * d * sizeof(float));
    s.freq = malloc((size_t)b * DIT_FREQ_DIM * sizeof(float));
    s.t_h = malloc((size_t)b * d * sizeof(float)), s.t_act = malloc((size_t)b * d * sizeof(float));
    s.t_emb = malloc((size_t)b * d * sizeof(float)), s.c = malloc((size_t)b * d * sizeof(float));
    s.c_silu = malloc((size_t)b * d * sizeof(float));
    s.mod = malloc((size_t)b * 6 * d * sizeof(float));
    s.ln = malloc(bl * d * sizeof(float)), s.mean = malloc(bl * sizeof(float));
    s.rstd = malloc(bl * sizeof(float)), s.m = malloc(bl * d * sizeof(float));
    s.qkv = malloc(xch * sizeof(float)), s.send = malloc(xch * sizeof(float));
    s.recv = malloc(TDL_MAX(xch, (size_t)P * bl * pd) * sizeof(float)), s.qkv_h = malloc(bT * 3 * dp * sizeof(float));
    s.att = malloc((size_t)b * (nh / P) * T * T * sizeof(float));
    s.y_h = malloc(bT * dp * sizeof(float)), s.y = malloc(bl * d * sizeof(float));
    s.proj = malloc(bl * d * sizeof(float)), s.fc1 = malloc(bl * mh * sizeof(float));
    s.gelu = malloc(bl * mh * sizeof(float)), s.fc2 = malloc(bl * d * sizeof(float));
    s.tok = malloc(bl * pd * sizeof(float)), s.tok_all = malloc(bT * pd * sizeof(float));
    float **all = (float **)&s;
    for (size_t i = 0; i < sizeof(s) / sizeof(float *); i++)
        if (!all[i]) {
            sp_free(&s);
            return tdl_error_raise(TDL_ERR_NOMEM,
                                   "sequence-parallel forward: no memory for %d images of %dx%d",
                                   b, h, w);
        }

    /* this rank's tokens: patch embedding and position */
    dit_patchify(s.patches, x, b, c->in_channels, h, w, p);
    dit_pos_embed(s.pos, gh, gw, d);
    for (int k = 0; k < b; k++) {
        tensor_linear_forward(s.xa + (size_t)k * tl * d,
                              s.patches + ((size_t)k * T + t0) * pd, v->patch_w, v->patch_b, tl,
                              pd, d);
        for (size_t i = 0; i < (size_t)tl * d; i++)
            s.xa[(size_t)k * tl * d + i] += s.pos[(size_t)t0 * d + i];
    }
    /* conditioning, on every rank */
    dit_timestep_embedding(s.freq, t, b);
    tensor_linear_forward(s.t_h, s.freq, v->t0_w, v->t0_b, b, DIT_FREQ_DIM, d);
    dit_silu_forward(s.t_act, s.t_h, (size_t)b * d);
    tensor_linear_forward(s.t_emb, s.t_act, v->t2_w, v->t2_b, b, d, d);
    for (int k = 0; k < b; k++)
        for (int j = 0; j < d; j++)
            s.c[(size_t)k * d + j] = s.t_emb[(size_t)k * d + j] + v->label_table[(size_t)y[k] * d + j];
    dit_silu_forward(s.c_silu, s.c, (size_t)b * d);

    float *xin = s.xa, *xout = s.xb;
    for (int l = 0; l < c->depth && st == TDL_OK; l++) {
        const dit_block_view_t *bv = &v->blocks[l];
        tensor_linear_forward(s.mod, s.c_silu, bv->ada_w, bv->ada_b, b, d, 6 * d);
        dit_layernorm_forward(s.ln, s.mean, s.rstd, xin, (int)bl, d);
        dit_modulate_forward(s.m, s.ln, s.mod, s.mod + d, 6 * d, b, tl, d);
        tensor_linear_forward(s.qkv, s.m, bv->qkv_w, bv->qkv_b, (int)bl, d, 3 * d);
        if (P == 1) {
            dit_attention_forward(s.y, s.att, s.qkv, b, T, d, nh);
        } else {
            /* tokens -> heads: every rank gets all tokens of its H/P heads */
            sp_pack_qkv(s.send, s.qkv, b, tl, d, P);
            if ((st = comm->alltoall(comm->ctx, s.send, s.recv, bl * 3 * dp)) != TDL_OK)
                break;
            sp_unpack_qkv(s.qkv_h, s.recv, b, tl, d, P);
            dit_attention_forward(s.y_h, s.att, s.qkv_h, b, T, dp, nh / P);
            /* heads -> tokens */
            sp_pack_y(s.send, s.y_h, b, tl, d, P);
            if ((st = comm->alltoall(comm->ctx, s.send, s.recv, bl * dp)) != TDL_OK)
                break;
            sp_unpack_y(s.y, s.recv, b, tl, d, P);
        }
        tensor_linear_forward(s.proj, s.y, bv->proj_w, bv->proj_b, (int)bl, d, d);
        dit_gate_residual_forward(xout, xin, s.mod + 2 * d, s.proj, 6 * d, b, tl, d);
        dit_layernorm_forward(s.ln, s.mean, s.rstd, xout, (int)bl, d);
        dit_modulate_forward(s.m, s.ln, s.mod + 3 * d, s.mod + 4 * d, 6 * d, b, tl, d);
        tensor_linear_forward(s.fc1, s.m, bv->fc1_w, bv->fc1_b, (int)bl, d, mh);
        dit_gelu_forward(s.gelu, s.fc1, bl * mh);
        tensor_linear_forward(s.fc2, s.gelu, bv->fc2_w, bv->fc2_b, (int)bl, mh, d);
        dit_gate_residual_forward(xin, xout, s.mod + 5 * d, s.fc2, 6 * d, b, tl, d);
        /* the block's output is back in xin */
    }
    if (st == TDL_OK) {
        tensor_linear_forward(s.mod, s.c_silu, v->final_ada_w, v->final_ada_b, b, d, 2 * d);
        dit_layernorm_forward(s.ln, s.mean, s.rstd, xin, (int)bl, d);
        dit_modulate_forward(s.m, s.ln, s.mod, s.mod + d, 2 * d, b, tl, d);
        tensor_linear_forward(s.tok, s.m, v->final_w, v->final_b, (int)bl, d, pd);
        /* every rank gets every token: [rank][b, tl, pd] -> [b, T, pd] */
        if (P > 1 && (st = comm->allgather(comm->ctx, s.tok, s.recv, bl * pd)) == TDL_OK) {
            for (int i = 0; i < P; i++)
                for (int k = 0; k < b; k++)
                    memcpy(s.tok_all + ((size_t)k * T + (size_t)i * tl) * pd,
                           s.recv + (((size_t)i * b + k) * tl) * pd, (size_t)tl * pd * sizeof(float));
        } else if (P == 1) {
            memcpy(s.tok_all, s.tok, bT * pd * sizeof(float));
        }
    }
    if (st == TDL_OK)
        dit_unpatchify(out, s.tok_all, b, c->in_channels, h, w, p);
    sp_free(&s);
    return st;
}
