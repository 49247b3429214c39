/* Sequence-parallel (Ulysses) forward of the DiT over P ranks, for serving: each rank holds T/P
 * of the tokens; every token-wise layer (patch embedding, LayerNorm, adaLN modulation, the qkv,
 * projection and MLP linears, the final layer) runs on the local tokens; attention switches to
 * heads-sharded (all T tokens, H/P heads) through one all-to-all of q, k and v, and back through
 * a second all-to-all of its output; the output tokens are all-gathered at the end. The
 * conditioning (timestep and label embeddings, adaLN inputs) is computed on every rank. With
 * P = 1 it is the plain forward, and the forward of an inference model (model.c): the same
 * layer calls as dit_model_forward, but only what the next layer needs is kept, one block's
 * buffers serve every block, and attention runs a tile of query rows at a time, so that the
 * memory is linear in the tokens and does not depend on the depth or the heads. The exchanges
 * come from the caller (dit_sp_comm_t), so this file needs no MPI or UCX; src/serve gives it
 * gfc's. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "dit/dit_internal.h"
#include "tensor/tensor.h"

/* The buffers of one pass over b images of T tokens on P ranks, tl = T / P of them here. Only
 * what the next layer needs is kept, and one block's buffers serve every block. */
typedef struct sp_bufs {
    float *patches, *pos, *freq, *t_h, *t_act, *t_emb, *c, *c_silu, *mod;
    float *xa, *xb;        /* the residual stream: a block's input (and output), and its x1 */
    float *h, *mean, *rstd; /* LayerNorm, modulated in place; the attention's projection */
    float *y;              /* the attention's output; the MLP's output */
    float *wide;           /* qkv [bl, 3D]; the MLP's hidden layer [bl, mlp], GELU in place */
    float *tile;           /* one head's probabilities for DIT_ATTN_TILE_ROWS query rows */
    float *tok;
    float *send, *recv, *qkv_h, *y_h, *tok_all; /* the exchanges, P > 1 */
} sp_bufs_t;

/* Where a pass's buffers come from: base, or with base NULL only the count of floats. */
typedef struct sp_carve {
    float *base;
    size_t used;
} sp_carve_t;

static float *sp_take(sp_carve_t *cv, size_t n)
{
    size_t start = (cv->used + 15) & ~(size_t)15; /* 64-byte aligned */
    cv->used = start + n;
    return cv->base ? cv->base + start : NULL;
}

static void sp_plan(const dit_config_t *c, sp_bufs_t *s, sp_carve_t *cv, int b, int T, int P)
{
    size_t d = (size_t)c->hidden_size, mh = (size_t)dit_config_mlp_hidden(c);
    size_t pd = (size_t)c->patch_size * c->patch_size * c->in_channels;
    size_t po = (size_t)c->patch_size * c->patch_size * dit_config_out_channels(c);
    size_t bl = (size_t)b * (T / P), bT = (size_t)b * T;
    memset(s, 0, sizeof(*s));
    s->patches = sp_take(cv, bT * pd);
    s->pos = sp_take(cv, (size_t)T * d);
    s->freq = sp_take(cv, (size_t)b * DIT_FREQ_DIM);
    s->t_h = sp_take(cv, b * d), s->t_act = sp_take(cv, b * d), s->t_emb = sp_take(cv, b * d);
    s->c = sp_take(cv, b * d), s->c_silu = sp_take(cv, b * d);
    s->mod = sp_take(cv, (size_t)b * 6 * d);
    s->xa = sp_take(cv, bl * d), s->xb = sp_take(cv, bl * d);
    s->h = sp_take(cv, bl * d), s->mean = sp_take(cv, bl), s->rstd = sp_take(cv, bl);
    s->y = sp_take(cv, bl * d);
    s->wide = sp_take(cv, bl * TDL_MAX(3 * d, mh));
    s->tile = sp_take(cv, (size_t)TDL_MIN(DIT_ATTN_TILE_ROWS, T) * T);
    s->tok = sp_take(cv, bl * po);
    if (P > 1) {
        s->send = sp_take(cv, bl * 3 * d);
        s->recv = sp_take(cv, TDL_MAX(bl * 3 * d, bT * po));
        s->qkv_h = sp_take(cv, bT * 3 * (d / P)), s->y_h = sp_take(cv, bT * (d / P));
        s->tok_all = sp_take(cv, bT * po);
    }
}

static size_t sp_count(const dit_config_t *c, int b, int T, int P)
{
    sp_bufs_t s;
    sp_carve_t cv = {.base = NULL};
    sp_plan(c, &s, &cv, b, T, P);
    return cv.used;
}

/* Allocated, not written: the pages are the kernel's until a forward touches them. */
static float *sp_alloc(size_t floats)
{
    size_t bytes = ((floats ? floats : 1) * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes);
}

struct dit_infer_ws {
    int max_batch, max_tokens;
    size_t floats;
    float *base;
};

tdl_status_t dit_infer_ws_create(const dit_model_t *m, int max_batch, int max_tokens,
                                 dit_infer_ws_t **ws_out)
{
    const dit_config_t *c = &m->config;
    dit_infer_ws_t *ws = calloc(1, sizeof(*ws));
    if (!ws)
        return tdl_error_raise(TDL_ERR_NOMEM, "DiT %s: out of memory", c->name);
    ws->max_batch = max_batch, ws->max_tokens = max_tokens;
    /* the largest pass of any degree that may run it; a larger one allocates its own */
    for (int P = 1; P <= DIT_SP_MAX_RANKS; P *= 2)
        if (max_tokens % P == 0 && c->num_heads % P == 0 && c->hidden_size % P == 0)
            ws->floats = TDL_MAX(ws->floats, sp_count(c, max_batch, max_tokens, P));
    ws->base = sp_alloc(ws->floats);
    if (!ws->base) {
        size_t mib = ws->floats * sizeof(float) >> 20;
        free(ws);
        return tdl_error_raise(TDL_ERR_NOMEM,
                               "DiT %s: no memory for the inference workspace (%zu MiB for %d "
                               "images of %d tokens)",
                               c->name, mib, max_batch, max_tokens);
    }
    *ws_out = ws;
    return TDL_OK;
}

void dit_infer_ws_free(dit_infer_ws_t *ws)
{
    if (!ws)
        return;
    free(ws->base);
    free(ws);
}

size_t dit_infer_ws_bytes(const dit_infer_ws_t *ws)
{
    return ws->floats * sizeof(float);
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

/* One pass over b images: in an inference model's workspace when they fit, else in buffers of
 * its own, freed at its end. */
static tdl_status_t sp_pass(const dit_model_t *m, const dit_sp_comm_t *comm, const float *x,
                            const float *t, const int *y, int b, int h, int w, float *out)
{
    const dit_config_t *c = &m->config;
    int P = comm ? comm->size : 1, me = comm ? comm->rank : 0;
    int p = c->patch_size, d = c->hidden_size, mh = dit_config_mlp_hidden(c);
    int pd = p * p * c->in_channels, nh = c->num_heads, co = dit_config_out_channels(c);
    int po = p * p * co;
    int gh = h / p, gw = w / p, T = gh * gw, tl = T / P, t0 = me * tl, dp = d / P;
    size_t bl = (size_t)b * tl, bT = (size_t)b * T;
    const dit_view_t *v = &m->p;
    size_t need = sp_count(c, b, T, P);
    bool own = !m->ws || need > m->ws->floats;
    sp_carve_t cv = {.base = own ? sp_alloc(need) : m->ws->base};
    if (!cv.base)
        return tdl_error_raise(TDL_ERR_NOMEM,
                               "sequence-parallel forward: no memory (%zu MiB) for %d images of "
                               "%dx%d",
                               need * sizeof(float) >> 20, b, h, w);
    sp_bufs_t s;
    sp_plan(c, &s, &cv, b, T, P);
    tdl_status_t st = TDL_OK;

    /* this rank's tokens: patch embedding and position (a product an image, as
     * dit_model_forward) */
    dit_patchify(s.patches, x, b, c->in_channels, h, w, p);
    dit_pos_embed(s.pos, gh, gw, d);
    if (P == 1)
        tensor_linear_forward(s.xa, s.patches, v->patch_w, v->patch_b, (int)bT, pd, d, T);
    for (int k = 0; k < b; k++) {
        if (P > 1)
            tensor_linear_forward(s.xa + (size_t)k * tl * d,
                                  s.patches + ((size_t)k * T + t0) * pd, v->patch_w, v->patch_b,
                                  tl, pd, d, tl);
        for (size_t i = 0; i < (size_t)tl * d; i++)
            s.xa[(size_t)k * tl * d + i] += s.pos[(size_t)t0 * d + i];
    }
    /* conditioning, on every rank */
    dit_timestep_embedding(s.freq, t, b);
    tensor_linear_forward(s.t_h, s.freq, v->t0_w, v->t0_b, b, DIT_FREQ_DIM, d, 1);
    dit_silu_forward(s.t_act, s.t_h, (size_t)b * d);
    tensor_linear_forward(s.t_emb, s.t_act, v->t2_w, v->t2_b, b, d, d, 1);
    for (int k = 0; k < b; k++)
        for (int j = 0; j < d; j++)
            s.c[(size_t)k * d + j] =
                s.t_emb[(size_t)k * d + j] + v->label_table[(size_t)y[k] * d + j];
    dit_silu_forward(s.c_silu, s.c, (size_t)b * d);

    /* blocks: x1 = x + gate * attn(modulate(LN(x))); x = x1 + gate * mlp(modulate(LN(x1))) */
    float *xin = s.xa, *x1 = s.xb;
    for (int l = 0; l < c->depth && st == TDL_OK; l++) {
        const dit_block_view_t *bv = &v->blocks[l];
        tensor_linear_forward(s.mod, s.c_silu, bv->ada_w, bv->ada_b, b, d, 6 * d, 1);
        dit_layernorm_forward(s.h, s.mean, s.rstd, xin, (int)bl, d);
        dit_modulate_forward(s.h, s.h, s.mod, s.mod + d, 6 * d, b, tl, d);
        float *qkv = s.wide;
        tensor_linear_forward(qkv, s.h, bv->qkv_w, bv->qkv_b, (int)bl, d, 3 * d, tl);
        if (P == 1) {
            dit_attention_forward_tiled(s.y, s.tile, qkv, b, T, d, nh);
        } else {
            /* tokens -> heads: every rank gets all tokens of its H/P heads */
            sp_pack_qkv(s.send, qkv, b, tl, d, P);
            if ((st = comm->alltoall(comm->ctx, s.send, s.recv, bl * 3 * dp)) != TDL_OK)
                break;
            sp_unpack_qkv(s.qkv_h, s.recv, b, tl, d, P);
            dit_attention_forward_tiled(s.y_h, s.tile, s.qkv_h, b, T, dp, nh / P);
            /* heads -> tokens */
            sp_pack_y(s.send, s.y_h, b, tl, d, P);
            if ((st = comm->alltoall(comm->ctx, s.send, s.recv, bl * dp)) != TDL_OK)
                break;
            sp_unpack_y(s.y, s.recv, b, tl, d, P);
        }
        float *proj = s.h;
        tensor_linear_forward(proj, s.y, bv->proj_w, bv->proj_b, (int)bl, d, d, tl);
        dit_gate_residual_forward(x1, xin, s.mod + 2 * d, proj, 6 * d, b, tl, d);
        dit_layernorm_forward(s.h, s.mean, s.rstd, x1, (int)bl, d);
        dit_modulate_forward(s.h, s.h, s.mod + 3 * d, s.mod + 4 * d, 6 * d, b, tl, d);
        float *fc1 = s.wide, *fc2 = s.y;
        tensor_linear_forward(fc1, s.h, bv->fc1_w, bv->fc1_b, (int)bl, d, mh, tl);
        dit_gelu_forward(fc1, fc1, bl * mh);
        tensor_linear_forward(fc2, fc1, bv->fc2_w, bv->fc2_b, (int)bl, mh, d, tl);
        dit_gate_residual_forward(xin, x1, s.mod + 5 * d, fc2, 6 * d, b, tl, d);
        /* the block's output is back in xin */
    }
    const float *tok = s.tok;
    if (st == TDL_OK) {
        tensor_linear_forward(s.mod, s.c_silu, v->final_ada_w, v->final_ada_b, b, d, 2 * d, 1);
        dit_layernorm_forward(s.h, s.mean, s.rstd, xin, (int)bl, d);
        dit_modulate_forward(s.h, s.h, s.mod, s.mod + d, 2 * d, b, tl, d);
        tensor_linear_forward(s.tok, s.h, v->final_w, v->final_b, (int)bl, d, po, tl);
        /* every rank gets every token: [rank][b, tl, po] -> [b, T, po] */
        if (P > 1 && (st = comm->allgather(comm->ctx, s.tok, s.recv, bl * po)) == TDL_OK) {
            for (int i = 0; i < P; i++)
                for (int k = 0; k < b; k++)
                    memcpy(s.tok_all + ((size_t)k * T + (size_t)i * tl) * po,
                           s.recv + (((size_t)i * b + k) * tl) * po,
                           (size_t)tl * po * sizeof(float));
            tok = s.tok_all;
        }
    }
    if (st == TDL_OK)
        dit_unpatchify(out, tok, b, co, h, w, p);
    if (own)
        free(cv.base);
    return st;
}

tdl_status_t dit_sp_forward(const dit_model_t *m, const dit_sp_comm_t *comm, const float *x,
                            const float *t, const int *y, int b, int h, int w, float *out)
{
    const dit_config_t *c = &m->config;
    int P = comm ? comm->size : 1;
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
    int tokens = (h / c->patch_size) * (w / c->patch_size);
    if (m->ws && tokens > m->ws->max_tokens)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sequence-parallel forward: %dx%d images have %d tokens; the model "
                               "was sized for %d",
                               h, w, tokens, m->ws->max_tokens);
    /* All b images in one pass, as many as they are: a BLAS may round an image's rows otherwise
     * when the product has another number of rows, so passes of other sizes would change it. */
    return sp_pass(m, comm, x, t, y, b, h, w, out);
}
