/* The DiT model: its parameter table, its activations, and forward and backward as short lists
 * of layer calls. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit_internal.h"

/* ---- parameters ---------------------------------------------------------------------------- */

static void param_add(dit_model_t *m, size_t *offset, const char *name, int ndim, int s0, int s1,
                      int s2, int s3)
{
    dit_param_info_t *p = &m->infos[m->ninfos++];
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->ndim = ndim;
    int s[4] = {s0, s1, s2, s3};
    p->numel = 1;
    for (int i = 0; i < 4; i++) {
        p->shape[i] = i < ndim ? s[i] : 1;
        p->numel *= (size_t)p->shape[i];
    }
    p->offset = *offset;
    *offset += p->numel;
}

/* The reference's state_dict, in its order. */
static void params_layout(dit_model_t *m)
{
    const dit_config_t *c = &m->config;
    int d = c->hidden_size, mh = dit_config_mlp_hidden(c), p = c->patch_size;
    int pd = p * p * dit_config_out_channels(c); /* the output layer's rows */
    size_t off = 0;
    char n[64];
    m->ninfos = 0;
    param_add(m, &off, "x_embedder.proj.weight", 4, d, c->in_channels, p, p);
    param_add(m, &off, "x_embedder.proj.bias", 1, d, 0, 0, 0);
    param_add(m, &off, "t_embedder.mlp.0.weight", 2, d, DIT_FREQ_DIM, 0, 0);
    param_add(m, &off, "t_embedder.mlp.0.bias", 1, d, 0, 0, 0);
    param_add(m, &off, "t_embedder.mlp.2.weight", 2, d, d, 0, 0);
    param_add(m, &off, "t_embedder.mlp.2.bias", 1, d, 0, 0, 0);
    param_add(m, &off, "y_embedder.embedding_table.weight", 2, c->num_classes + 1, d, 0, 0);
    for (int l = 0; l < c->depth; l++) {
        static const char *const names[] = {
            "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
            "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias",
            "adaLN_modulation.1.weight", "adaLN_modulation.1.bias"};
        const int shapes[][2] = {{3 * d, d}, {3 * d, 0}, {d, d}, {d, 0}, {mh, d},
                                 {mh, 0},    {d, mh},    {d, 0}, {6 * d, d}, {6 * d, 0}};
        for (int i = 0; i < 10; i++) {
            snprintf(n, sizeof(n), "blocks.%d.%s", l, names[i]);
            param_add(m, &off, n, shapes[i][1] ? 2 : 1, shapes[i][0], shapes[i][1], 0, 0);
        }
    }
    param_add(m, &off, "final_layer.linear.weight", 2, pd, d, 0, 0);
    param_add(m, &off, "final_layer.linear.bias", 1, pd, 0, 0, 0);
    param_add(m, &off, "final_layer.adaLN_modulation.1.weight", 2, 2 * d, d, 0, 0);
    param_add(m, &off, "final_layer.adaLN_modulation.1.bias", 1, 2 * d, 0, 0, 0);
    m->num_params = off;
}

/* Points a view's fields at base + offset of each tensor, in params_layout's order. */
static void view_bind(dit_model_t *m, dit_view_t *v, float *base)
{
    int k = 0;
#define NEXT() (base + m->infos[k++].offset)
    v->patch_w = NEXT(), v->patch_b = NEXT();
    v->t0_w = NEXT(), v->t0_b = NEXT(), v->t2_w = NEXT(), v->t2_b = NEXT();
    v->label_table = NEXT();
    for (int l = 0; l < m->config.depth; l++) {
        dit_block_view_t *b = &v->blocks[l];
        b->qkv_w = NEXT(), b->qkv_b = NEXT(), b->proj_w = NEXT(), b->proj_b = NEXT();
        b->fc1_w = NEXT(), b->fc1_b = NEXT(), b->fc2_w = NEXT(), b->fc2_b = NEXT();
        b->ada_w = NEXT(), b->ada_b = NEXT();
    }
    v->final_w = NEXT(), v->final_b = NEXT(), v->final_ada_w = NEXT(), v->final_ada_b = NEXT();
#undef NEXT
}

const dit_param_info_t *dit_model_param(const dit_model_t *m, const char *name)
{
    for (int i = 0; i < m->ninfos; i++)
        if (strcmp(m->infos[i].name, name) == 0)
            return &m->infos[i];
    return NULL;
}

void dit_model_zero_grad(dit_model_t *m)
{
    if (m->grads) /* an inference model has none */
        memset(m->grads, 0, m->num_params * sizeof(float));
}

/* ---- activations --------------------------------------------------------------------------- */

typedef struct block_acts {
    float *mod;                    /* [B,6D] shift, scale, gate (msa), shift, scale, gate (mlp) */
    float *ln1, *ln1_mean, *ln1_rstd, *m1, *qkv, *att, *atty, *attn_out, *x1;
    float *ln2, *ln2_mean, *ln2_rstd, *m2, *fc1, *gelu, *fc2, *out;
} block_acts_t;

struct dit_acts {
    float *patches, *pos, *x0, *freq, *t_h, *t_act, *t_emb, *c, *c_silu;
    block_acts_t *blocks;
    float *modf, *lnf, *lnf_mean, *lnf_rstd, *mf, *tok;
    int *y;
    /* backward */
    float *dtok, *dmf, *dlnf, *dx, *dx_in, *dmodf, *dc_silu, *dc, *dt_act, *dt_h;
    float *dfc2, *dgelu, *dfc1, *dm2, *dln2, *dx1, *dattn, *datty, *dqkv, *dm1, *dln1, *dmod;
    float *att_scratch;
    /* on a device: the input, output and output gradient images, and the labels */
    float *x_dev, *out_dev, *dout_dev;
    int *y_dev;
};

typedef struct {
    tensor_arena_t *arena; /* NULL: only count */
    size_t count;
    bool ok;
} acts_alloc_t;

static float *take(acts_alloc_t *a, size_t n)
{
    if (!a->arena) {
        a->count = ((a->count + 15) & ~(size_t)15) + n;
        return NULL;
    }
    float *p = tensor_arena_alloc(a->arena, n);
    a->ok &= p != NULL;
    return p;
}

/* Lays out every activation for batch b and t tokens; with a NULL arena, just counts floats. An
 * inference model (on a device: on the CPU it runs sp.c's forward) gets only the forward's, and
 * one block's for all blocks: block l reads block l - 1's `out` only before it writes its own. */
static void acts_plan(const dit_model_t *m, dit_acts_t *s, acts_alloc_t *a, int b, int t)
{
    const dit_config_t *c = &m->config;
    size_t d = (size_t)c->hidden_size, mh = (size_t)dit_config_mlp_hidden(c);
    size_t bt = (size_t)b * t, pd = (size_t)c->patch_size * c->patch_size * c->in_channels;
    size_t po = (size_t)c->patch_size * c->patch_size * dit_config_out_channels(c);
    s->patches = take(a, bt * pd);
    s->pos = take(a, (size_t)t * d);
    s->x0 = take(a, bt * d);
    s->freq = take(a, (size_t)b * DIT_FREQ_DIM);
    s->t_h = take(a, b * d), s->t_act = take(a, b * d), s->t_emb = take(a, b * d);
    s->c = take(a, b * d), s->c_silu = take(a, b * d);
    for (int l = 0; l < c->depth; l++) {
        block_acts_t *k = &s->blocks[l];
        if (m->inference && l > 0) {
            *k = s->blocks[0];
            continue;
        }
        k->mod = take(a, b * 6 * d);
        k->ln1 = take(a, bt * d), k->ln1_mean = take(a, bt), k->ln1_rstd = take(a, bt);
        k->m1 = take(a, bt * d), k->qkv = take(a, bt * 3 * d);
        k->att = take(a, (size_t)b * c->num_heads * t * t);
        k->atty = take(a, bt * d), k->attn_out = take(a, bt * d), k->x1 = take(a, bt * d);
        k->ln2 = take(a, bt * d), k->ln2_mean = take(a, bt), k->ln2_rstd = take(a, bt);
        k->m2 = take(a, bt * d), k->fc1 = take(a, bt * mh), k->gelu = take(a, bt * mh);
        k->fc2 = take(a, bt * d), k->out = take(a, bt * d);
    }
    s->modf = take(a, b * 2 * d);
    s->lnf = take(a, bt * d), s->lnf_mean = take(a, bt), s->lnf_rstd = take(a, bt);
    s->mf = take(a, bt * d), s->tok = take(a, bt * po);
    if (!m->be->host_memory) {
        s->x_dev = take(a, bt * pd), s->out_dev = take(a, bt * po);
        s->y_dev = (int *)take(a, (size_t)b); /* an int is a float's size */
    }
    if (m->inference)
        return;
    s->dtok = take(a, bt * po), s->dmf = take(a, bt * d), s->dlnf = take(a, bt * d);
    s->dx = take(a, bt * d), s->dx_in = take(a, bt * d), s->dmodf = take(a, b * 2 * d);
    s->dc_silu = take(a, b * d), s->dc = take(a, b * d), s->dt_act = take(a, b * d);
    s->dt_h = take(a, b * d);
    s->dfc2 = take(a, bt * d), s->dgelu = take(a, bt * mh), s->dfc1 = take(a, bt * mh);
    s->dm2 = take(a, bt * d), s->dln2 = take(a, bt * d), s->dx1 = take(a, bt * d);
    s->dattn = take(a, bt * d), s->datty = take(a, bt * d), s->dqkv = take(a, bt * 3 * d);
    s->dm1 = take(a, bt * d), s->dln1 = take(a, bt * d), s->dmod = take(a, b * 6 * d);
    s->att_scratch = take(a, m->be->attention_scratch(b, t, c->num_heads));
    if (!m->be->host_memory)
        s->dout_dev = take(a, bt * po);
}

tdl_status_t dit_model_create(const dit_config_t *config, int max_batch, int max_resolution,
                              dit_model_t **model_out)
{
    return dit_model_create_on(config, max_batch, max_resolution, NULL, model_out);
}

/* The device's copies of params and grads, its activation arena and the host staging. On the
 * CPU an inference model has no arena: its workspace (sp.c) is made apart. */
static tdl_status_t model_device_init(dit_model_t *m, size_t arena_floats)
{
    dit_backend_t *be = m->be;
    if (be->host_memory) {
        m->dparams = m->params, m->dgrads = m->grads;
        m->dp = m->p, m->dg = m->g;
        return m->inference ? TDL_OK : tensor_arena_init(&m->arena, arena_floats);
    }
    const dit_config_t *c = &m->config;
    size_t pos = (size_t)m->max_tokens * c->hidden_size;
    size_t stage = pos + (size_t)m->max_batch * DIT_FREQ_DIM; /* and the gradient's download */
    if (!m->inference)
        stage = TDL_MAX(m->num_params, stage);
    m->dparams = be->alloc(be->ctx, m->num_params);
    if (m->dparams && !m->inference)
        m->dgrads = be->alloc(be->ctx, m->num_params);
    m->arena.base = m->dparams && (m->dgrads || m->inference) ? be->alloc(be->ctx, arena_floats)
                                                              : NULL;
    m->hstage = tensor_alloc(stage);
    if (!m->arena.base)
        return TDL_ERR_NOMEM; /* the backend said what failed */
    if (!m->hstage)
        return tdl_error_raise(TDL_ERR_NOMEM, "DiT: no host staging for the %s backend",
                               be->name);
    m->arena.capacity = arena_floats, m->arena.used = 0;
    m->hpos = m->hstage, m->hfreq = m->hstage + pos;
    view_bind(m, &m->dp, m->dparams);
    if (m->dgrads)
        view_bind(m, &m->dg, m->dgrads);
    m->params_stale = true;
    return TDL_OK;
}

static tdl_status_t model_create(const dit_config_t *config, int max_batch, int max_resolution,
                                 dit_backend_t *be, bool inference, dit_model_t **model_out)
{
    tdl_status_t st = dit_config_check(config);
    if (st != TDL_OK) {
        dit_backend_close(be);
        return st;
    }
    if (max_batch < 1 || max_resolution < config->patch_size ||
        max_resolution % config->patch_size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT: batch %d and resolution %d must be positive, the resolution a "
                               "multiple of patch %d",
                               max_batch, max_resolution, config->patch_size);
    dit_model_t *m = calloc(1, sizeof(*m));
    if (!m) {
        dit_backend_close(be);
        return tdl_error_raise(TDL_ERR_NOMEM, "DiT: out of memory");
    }
    m->be = be ? be : (dit_backend_t *)dit_backend_cpu();
    m->inference = inference;
    m->config = *config;
    m->max_batch = max_batch;
    int g = max_resolution / config->patch_size;
    m->max_tokens = g * g;
    m->infos = calloc((size_t)(11 + 10 * config->depth), sizeof(*m->infos));
    m->p.blocks = calloc((size_t)config->depth, sizeof(dit_block_view_t));
    m->g.blocks = calloc((size_t)config->depth, sizeof(dit_block_view_t));
    if (!m->be->host_memory) {
        m->dp.blocks = calloc((size_t)config->depth, sizeof(dit_block_view_t));
        m->dg.blocks = calloc((size_t)config->depth, sizeof(dit_block_view_t));
        if (!m->dp.blocks || !m->dg.blocks)
            goto err_nomem;
    }
    m->acts = calloc(1, sizeof(dit_acts_t));
    if (m->acts)
        m->acts->blocks = calloc((size_t)config->depth, sizeof(block_acts_t));
    if (!m->infos || !m->p.blocks || !m->g.blocks || !m->acts || !m->acts->blocks)
        goto err_nomem;
    params_layout(m);
    m->params = tensor_alloc(m->num_params);
    if (!inference)
        m->grads = tensor_alloc(m->num_params);
    m->acts->y = calloc((size_t)max_batch, sizeof(int));
    if (!m->params || (!inference && !m->grads) || !m->acts->y)
        goto err_nomem;
    view_bind(m, &m->p, m->params);
    if (m->grads)
        view_bind(m, &m->g, m->grads);
    acts_alloc_t count = {.arena = NULL};
    acts_plan(m, m->acts, &count, max_batch, m->max_tokens);
    if ((st = model_device_init(m, count.count + 64)) != TDL_OK ||
        (inference && m->be->host_memory &&
         (st = dit_infer_ws_create(m, max_batch, m->max_tokens, &m->ws)) != TDL_OK)) {
        dit_model_free(m);
        return st;
    }
    *model_out = m;
    return TDL_OK;
err_nomem:
    dit_model_free(m);
    return tdl_error_raise(TDL_ERR_NOMEM, "DiT %s: out of memory", config->name);
}

tdl_status_t dit_model_create_on(const dit_config_t *config, int max_batch, int max_resolution,
                                 dit_backend_t *be, dit_model_t **model_out)
{
    return model_create(config, max_batch, max_resolution, be, false, model_out);
}

tdl_status_t dit_model_create_inference(const dit_config_t *config, int max_batch,
                                        int max_resolution, dit_backend_t *be,
                                        dit_model_t **model_out)
{
    return model_create(config, max_batch, max_resolution, be, true, model_out);
}

size_t dit_model_activation_bytes(const dit_model_t *m)
{
    return m->ws ? dit_infer_ws_bytes(m->ws) : m->arena.capacity * sizeof(float);
}

void dit_model_free(dit_model_t *m)
{
    if (!m)
        return;
    dit_infer_ws_free(m->ws);
    if (m->be && !m->be->host_memory) {
        m->be->release(m->be->ctx, m->arena.base);
        if (m->dgrads)
            m->be->release(m->be->ctx, m->dgrads);
        m->be->release(m->be->ctx, m->dparams);
        free(m->hstage);
        free(m->dp.blocks);
        free(m->dg.blocks);
    } else {
        tensor_arena_free(&m->arena);
    }
    if (m->acts) {
        free(m->acts->y);
        free(m->acts->blocks);
        free(m->acts);
    }
    free(m->grads);
    free(m->params);
    free(m->g.blocks);
    free(m->p.blocks);
    free(m->infos);
    dit_backend_close(m->be);
    free(m);
}

void dit_model_params_changed(dit_model_t *m)
{
    m->params_stale = true;
}

/* ---- initialization ------------------------------------------------------------------------ */

static void init_xavier(float *w, int fan_out, int fan_in, tdl_rng_t *rng)
{
    float a = sqrtf(6.0f / (float)(fan_in + fan_out));
    for (size_t i = 0; i < (size_t)fan_out * fan_in; i++)
        w[i] = (2.0f * tdl_rng_uniform(rng) - 1.0f) * a;
}

static void init_normal(float *w, size_t n, float std, tdl_rng_t *rng)
{
    for (size_t i = 0; i < n; i++)
        w[i] = std * tdl_rng_normal(rng);
}

void dit_model_init_weights(dit_model_t *m, uint64_t seed)
{
    const dit_config_t *c = &m->config;
    int d = c->hidden_size, mh = dit_config_mlp_hidden(c);
    int pdim = c->in_channels * c->patch_size * c->patch_size;
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 0x646974696e6974ull /* "ditinit" */);
    memset(m->params, 0, m->num_params * sizeof(float)); /* biases, adaLN and output: zero */
    dit_view_t *v = &m->p;
    init_xavier(v->patch_w, d, pdim, &rng); /* on the weight viewed as [D, C*p*p] */
    init_normal(v->label_table, (size_t)(c->num_classes + 1) * d, 0.02f, &rng);
    init_normal(v->t0_w, (size_t)d * DIT_FREQ_DIM, 0.02f, &rng);
    init_normal(v->t2_w, (size_t)d * d, 0.02f, &rng);
    for (int l = 0; l < c->depth; l++) {
        dit_block_view_t *b = &v->blocks[l];
        init_xavier(b->qkv_w, 3 * d, d, &rng);
        init_xavier(b->proj_w, d, d, &rng);
        init_xavier(b->fc1_w, mh, d, &rng);
        init_xavier(b->fc2_w, d, mh, &rng);
    }
    dit_model_params_changed(m);
}

/* ---- forward ------------------------------------------------------------------------------- */

tdl_status_t dit_model_forward(dit_model_t *m, const float *x, const float *t, const int *y,
                               int b, int h, int w, float *out)
{
    const dit_config_t *c = &m->config;
    int p = c->patch_size, d = c->hidden_size, mh = dit_config_mlp_hidden(c);
    int pd = p * p * c->in_channels, nh = c->num_heads, co = dit_config_out_channels(c);
    int po = p * p * co;
    if (b < 1 || b > m->max_batch || h % p || w % p || h < p || w < p ||
        (h / p) * (w / p) > m->max_tokens)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT forward: batch %d of %dx%d does not fit (batch <= %d, sides "
                               "multiples of %d, at most %d tokens)",
                               b, h, w, m->max_batch, p, m->max_tokens);
    for (int s = 0; s < b; s++)
        if (y[s] < 0 || y[s] > c->num_classes)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "DiT forward: label %d of sample %d is outside [0, %d]", y[s],
                                   s, c->num_classes);
    if (m->ws) /* an inference model on the CPU: the same arithmetic, in its workspace */
        return dit_sp_forward(m, NULL, x, t, y, b, h, w, out);
    int gh = h / p, gw = w / p, t_ = gh * gw, bt = b * t_;
    dit_acts_t *a = m->acts;
    dit_backend_t *be = m->be;
    void *X = be->ctx;
    bool host = be->host_memory;
    acts_alloc_t al = {.arena = &m->arena, .ok = true};
    tensor_arena_reset(&m->arena);
    acts_plan(m, a, &al, b, t_);
    if (!al.ok)
        return tdl_error_raise(TDL_ERR_INTERNAL, "DiT forward: activation arena too small");
    m->batch = b, m->grid_h = gh, m->grid_w = gw;
    memcpy(a->y, y, (size_t)b * sizeof(int));
    if (!host && m->params_stale) {
        be->upload(X, m->dparams, m->params, m->num_params);
        m->params_stale = false;
    }
    const dit_view_t *v = &m->dp;
    const int *labels = a->y;
    const float *image = x;
    if (!host) {
        be->upload(X, (float *)a->y_dev, (const float *)y, (size_t)b);
        be->upload(X, a->x_dev, x, (size_t)bt * pd);
        labels = a->y_dev, image = a->x_dev;
    }

    /* tokens: patch embedding + position (the embedding tables are computed on the host) */
    be->patchify(X, a->patches, image, b, c->in_channels, h, w, p);
    be->linear_forward(X, a->x0, a->patches, v->patch_w, v->patch_b, bt, pd, d, t_);
    dit_pos_embed(host ? a->pos : m->hpos, gh, gw, d);
    if (!host)
        be->upload(X, a->pos, m->hpos, (size_t)t_ * d);
    be->add_rows(X, a->x0, a->pos, b, (size_t)t_ * d);

    /* conditioning: c = MLP(freq(t)) + table[y] */
    dit_timestep_embedding(host ? a->freq : m->hfreq, t, b);
    if (!host)
        be->upload(X, a->freq, m->hfreq, (size_t)b * DIT_FREQ_DIM);
    be->linear_forward(X, a->t_h, a->freq, v->t0_w, v->t0_b, b, DIT_FREQ_DIM, d, 1);
    be->silu_forward(X, a->t_act, a->t_h, (size_t)b * d);
    be->linear_forward(X, a->t_emb, a->t_act, v->t2_w, v->t2_b, b, d, d, 1);
    be->embed_labels(X, a->c, a->t_emb, v->label_table, labels, b, d);
    be->silu_forward(X, a->c_silu, a->c, (size_t)b * d);

    /* blocks */
    const float *xin = a->x0;
    for (int l = 0; l < c->depth; l++) {
        const dit_block_view_t *bv = &v->blocks[l];
        block_acts_t *k = &a->blocks[l];
        float *mod = k->mod;
        be->linear_forward(X, mod, a->c_silu, bv->ada_w, bv->ada_b, b, d, 6 * d, 1);
        be->layernorm_forward(X, k->ln1, k->ln1_mean, k->ln1_rstd, xin, bt, d);
        be->modulate_forward(X, k->m1, k->ln1, mod, mod + d, 6 * d, b, t_, d);
        be->linear_forward(X, k->qkv, k->m1, bv->qkv_w, bv->qkv_b, bt, d, 3 * d, t_);
        be->attention_forward(X, k->atty, k->att, k->qkv, b, t_, d, nh);
        be->linear_forward(X, k->attn_out, k->atty, bv->proj_w, bv->proj_b, bt, d, d, t_);
        be->gate_residual_forward(X, k->x1, xin, mod + 2 * d, k->attn_out, 6 * d, b, t_, d);
        be->layernorm_forward(X, k->ln2, k->ln2_mean, k->ln2_rstd, k->x1, bt, d);
        be->modulate_forward(X, k->m2, k->ln2, mod + 3 * d, mod + 4 * d, 6 * d, b, t_, d);
        be->linear_forward(X, k->fc1, k->m2, bv->fc1_w, bv->fc1_b, bt, d, mh, t_);
        be->gelu_forward(X, k->gelu, k->fc1, (size_t)bt * mh);
        be->linear_forward(X, k->fc2, k->gelu, bv->fc2_w, bv->fc2_b, bt, mh, d, t_);
        be->gate_residual_forward(X, k->out, k->x1, mod + 5 * d, k->fc2, 6 * d, b, t_, d);
        xin = k->out;
    }

    /* final layer and unpatchify */
    be->linear_forward(X, a->modf, a->c_silu, v->final_ada_w, v->final_ada_b, b, d, 2 * d, 1);
    be->layernorm_forward(X, a->lnf, a->lnf_mean, a->lnf_rstd, xin, bt, d);
    be->modulate_forward(X, a->mf, a->lnf, a->modf, a->modf + d, 2 * d, b, t_, d);
    be->linear_forward(X, a->tok, a->mf, v->final_w, v->final_b, bt, d, po, t_);
    be->unpatchify(X, host ? out : a->out_dev, a->tok, b, co, h, w, p);
    if (!host)
        be->download(X, out, a->out_dev, (size_t)bt * po);
    return be->finish(X);
}

/* ---- backward ------------------------------------------------------------------------------ */

tdl_status_t dit_model_backward(dit_model_t *m, const float *dout)
{
    const dit_config_t *c = &m->config;
    int b = m->batch;
    if (m->inference)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT backward: a model made for inference has no backward pass");
    if (b < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "DiT backward: no forward pass to go back on");
    int p = c->patch_size, d = c->hidden_size, mh = dit_config_mlp_hidden(c);
    int pd = p * p * c->in_channels, nh = c->num_heads, co = dit_config_out_channels(c);
    int po = p * p * co;
    int t_ = m->grid_h * m->grid_w, bt = b * t_;
    int h = m->grid_h * p, w = m->grid_w * p;
    dit_acts_t *a = m->acts;
    dit_backend_t *be = m->be;
    void *X = be->ctx;
    bool host = be->host_memory;
    const dit_view_t *v = &m->dp;
    dit_view_t *gv = &m->dg;
    size_t btd = (size_t)bt * d;
    const float *grad_out = dout;
    if (!host) {
        /* the device's gradient of this pass alone; added into the host's at the end */
        be->zero(X, m->dgrads, m->num_params);
        be->upload(X, a->dout_dev, dout, (size_t)bt * po);
        grad_out = a->dout_dev;
    }

    /* final layer */
    be->zero(X, a->dtok, (size_t)bt * po);
    be->unpatchify_backward(X, a->dtok, grad_out, b, co, h, w, p);
    be->zero(X, a->dmf, btd);
    be->linear_backward(X, a->dmf, gv->final_w, gv->final_b, a->dtok, a->mf, v->final_w, bt, d, po);
    be->zero(X, a->dlnf, btd);
    be->zero(X, a->dmodf, (size_t)b * 2 * d);
    be->modulate_backward(X, a->dlnf, a->dmodf, a->dmodf + d, a->dmf, a->lnf, a->modf + d, 2 * d,
                          b, t_, d);
    const float *xlast = c->depth ? a->blocks[c->depth - 1].out : a->x0;
    be->zero(X, a->dx, btd);
    be->layernorm_backward(X, a->dx, a->dlnf, xlast, a->lnf_mean, a->lnf_rstd, bt, d);
    be->zero(X, a->dc_silu, (size_t)b * d);
    be->linear_backward(X, a->dc_silu, gv->final_ada_w, gv->final_ada_b, a->dmodf, a->c_silu,
                        v->final_ada_w, b, d, 2 * d);

    /* blocks, last first; a->dx holds d(loss)/d(block output) */
    for (int l = c->depth - 1; l >= 0; l--) {
        const dit_block_view_t *bv = &v->blocks[l];
        dit_block_view_t *gb = &gv->blocks[l];
        block_acts_t *k = &a->blocks[l];
        const float *xin = l ? a->blocks[l - 1].out : a->x0;
        float *mod = k->mod;
        be->zero(X, a->dmod, (size_t)b * 6 * d);
        /* x_out = x1 + gate_mlp * mlp(modulate(LN(x1))) */
        be->zero(X, a->dx1, btd);
        be->zero(X, a->dfc2, btd);
        be->gate_residual_backward(X, a->dx1, a->dfc2, a->dmod + 5 * d, a->dx, mod + 5 * d,
                                   k->fc2, 6 * d, b, t_, d);
        be->zero(X, a->dgelu, (size_t)bt * mh);
        be->linear_backward(X, a->dgelu, gb->fc2_w, gb->fc2_b, a->dfc2, k->gelu, bv->fc2_w, bt,
                            mh, d);
        be->zero(X, a->dfc1, (size_t)bt * mh);
        be->gelu_backward(X, a->dfc1, a->dgelu, k->fc1, (size_t)bt * mh);
        be->zero(X, a->dm2, btd);
        be->linear_backward(X, a->dm2, gb->fc1_w, gb->fc1_b, a->dfc1, k->m2, bv->fc1_w, bt, d,
                            mh);
        be->zero(X, a->dln2, btd);
        be->modulate_backward(X, a->dln2, a->dmod + 3 * d, a->dmod + 4 * d, a->dm2, k->ln2,
                              mod + 4 * d, 6 * d, b, t_, d);
        be->layernorm_backward(X, a->dx1, a->dln2, k->x1, k->ln2_mean, k->ln2_rstd, bt, d);
        /* x1 = x + gate_msa * attn(modulate(LN(x))) */
        be->zero(X, a->dx_in, btd);
        be->zero(X, a->dattn, btd);
        be->gate_residual_backward(X, a->dx_in, a->dattn, a->dmod + 2 * d, a->dx1, mod + 2 * d,
                                   k->attn_out, 6 * d, b, t_, d);
        be->zero(X, a->datty, btd);
        be->linear_backward(X, a->datty, gb->proj_w, gb->proj_b, a->dattn, k->atty, bv->proj_w,
                            bt, d, d);
        be->zero(X, a->dqkv, btd * 3);
        be->attention_backward(X, a->dqkv, a->datty, k->qkv, k->att, a->att_scratch, b, t_, d,
                               nh);
        be->zero(X, a->dm1, btd);
        be->linear_backward(X, a->dm1, gb->qkv_w, gb->qkv_b, a->dqkv, k->m1, bv->qkv_w, bt, d,
                            3 * d);
        be->zero(X, a->dln1, btd);
        be->modulate_backward(X, a->dln1, a->dmod, a->dmod + d, a->dm1, k->ln1, mod + d, 6 * d, b,
                              t_, d);
        be->layernorm_backward(X, a->dx_in, a->dln1, xin, k->ln1_mean, k->ln1_rstd, bt, d);
        /* modulation parameters from c */
        be->linear_backward(X, a->dc_silu, gb->ada_w, gb->ada_b, a->dmod, a->c_silu, bv->ada_w, b,
                            d, 6 * d);
        float *tmp = a->dx;
        a->dx = a->dx_in;
        a->dx_in = tmp;
    }

    /* tokens: the patch embedding (the image itself needs no gradient) */
    be->linear_backward(X, NULL, gv->patch_w, gv->patch_b, a->dx, a->patches, v->patch_w, bt, pd,
                        d);

    /* conditioning */
    be->zero(X, a->dc, (size_t)b * d);
    be->silu_backward(X, a->dc, a->dc_silu, a->c, (size_t)b * d);
    be->zero(X, a->dt_act, (size_t)b * d);
    be->linear_backward(X, a->dt_act, gv->t2_w, gv->t2_b, a->dc, a->t_act, v->t2_w, b, d, d);
    be->zero(X, a->dt_h, (size_t)b * d);
    be->silu_backward(X, a->dt_h, a->dt_act, a->t_h, (size_t)b * d);
    be->linear_backward(X, NULL, gv->t0_w, gv->t0_b, a->dt_h, a->freq, v->t0_w, b, DIT_FREQ_DIM,
                        d);
    be->embed_labels_backward(X, gv->label_table, a->dc, host ? a->y : a->y_dev, b, d);
    if (host)
        return be->finish(X);
    be->download(X, m->hstage, m->dgrads, m->num_params);
    tdl_status_t st = be->finish(X);
    if (st != TDL_OK)
        return st;
    for (size_t i = 0; i < m->num_params; i++)
        m->grads[i] += m->hstage[i];
    return TDL_OK;
}

/* ---- objective ----------------------------------------------------------------------------- */

void dit_rf_interpolate(const float *x0, const float *noise, const float *t, int batch,
                        size_t per_sample, float *x_t, float *target)
{
    for (int s = 0; s < batch; s++)
        for (size_t i = 0; i < per_sample; i++) {
            size_t k = (size_t)s * per_sample + i;
            x_t[k] = (1.0f - t[s]) * x0[k] + t[s] * noise[k];
            target[k] = noise[k] - x0[k];
        }
}

double dit_mse_loss_strided(const float *out, const float *target, int batch, size_t per,
                            size_t stride, float *dout)
{
    double sum = 0, n = (double)batch * (double)per;
    for (int s = 0; s < batch; s++)
        for (size_t i = 0; i < stride; i++) {
            size_t k = (size_t)s * stride + i;
            if (i >= per) {
                if (dout)
                    dout[k] = 0.0f;
                continue;
            }
            double e = (double)out[k] - target[(size_t)s * per + i];
            sum += e * e;
            if (dout)
                dout[k] = (float)(2.0 * e / n);
        }
    return sum / n;
}

double dit_mse_loss(const float *out, const float *target, size_t n, float *dout)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)out[i] - target[i];
        sum += e * e;
        if (dout)
            dout[i] = (float)(2.0 * e / (double)n);
    }
    return sum / (double)n;
}
