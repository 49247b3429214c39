/* Importing a reference DiT (facebookresearch/DiT models.py) state_dict, stored as safetensors,
 * into a tidal weights file: the configuration read from the tensors' shapes, every name and
 * shape checked against tidal's DiT of that configuration before any data is read. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "tensor/tensor.h"
#include "train/train.h"

#define POS_EMBED       "pos_embed"
#define POS_EMBED_BOUND 1e-6

static void shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && len < size; d++)
        len +=
            (size_t)snprintf(buf + len, size - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
}

/* The entry `name` of ndim dimensions, or a refusal naming what the file holds instead. */
static tdl_status_t need(const ckpt_st_t *st, const char *src, const char *name, int ndim,
                         const ckpt_st_entry_t **out)
{
    const ckpt_st_entry_t *e = ckpt_st_find(st, name);
    if (!e)
        return tdl_error_raise(TDL_ERR_NOT_FOUND,
                               "%s has no tensor %s: not a state_dict of the reference DiT "
                               "(facebookresearch/DiT models.py)",
                               src, name);
    if (e->ndim != ndim) {
        char s[96];
        shape_text(s, sizeof(s), e->ndim, e->shape);
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: %s has shape %s; the reference DiT's has %d dimensions", src,
                               name, s, ndim);
    }
    *out = e;
    return TDL_OK;
}

static tdl_status_t fits_int(const char *src, const ckpt_st_entry_t *e)
{
    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] < 1 || e->shape[d] > (1 << 24))
            return tdl_error_raise(TDL_ERR_MISMATCH,
                                   "%s: %s has a dimension of %lld, outside what tidal's DiT "
                                   "supports",
                                   src, e->name, (long long)e->shape[d]);
    return TDL_OK;
}

/* The configuration the tensors describe; heads from opts or the reference's sizes. */
static tdl_status_t infer_config(const ckpt_st_t *st, const char *src, const train_import_opts_t *o,
                                 dit_config_t *c, bool *null_row)
{
    const ckpt_st_entry_t *x, *fc1, *y, *fin, *pos;
    tdl_status_t s;
    if ((s = need(st, src, "x_embedder.proj.weight", 4, &x)) != TDL_OK ||
        (s = need(st, src, "blocks.0.mlp.fc1.weight", 2, &fc1)) != TDL_OK ||
        (s = need(st, src, "y_embedder.embedding_table.weight", 2, &y)) != TDL_OK ||
        (s = need(st, src, "final_layer.linear.weight", 2, &fin)) != TDL_OK ||
        (s = need(st, src, POS_EMBED, 3, &pos)) != TDL_OK)
        return s;
    const ckpt_st_entry_t *all[] = {x, fc1, y, fin, pos};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(all); i++)
        if ((s = fits_int(src, all[i])) != TDL_OK)
            return s;
    int d = (int)x->shape[0], ch = (int)x->shape[1], p = (int)x->shape[2];
    char sh[96];
    if (x->shape[3] != p) {
        shape_text(sh, sizeof(sh), 4, x->shape);
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: x_embedder.proj.weight has shape %s: the patches are not "
                               "square",
                               src, sh);
    }
    /* depth: one more than the highest N of blocks.N. */
    long depth = 0;
    for (int i = 0; i < ckpt_st_count(st); i++) {
        const char *n = ckpt_st_entry(st, i)->name;
        if (strncmp(n, "blocks.", 7) != 0)
            continue;
        char *end;
        long k = strtol(n + 7, &end, 10);
        if (end != n + 7 && *end == '.' && k >= 0 && k < 100000 && k + 1 > depth)
            depth = k + 1;
    }
    if (fc1->shape[1] != d) {
        shape_text(sh, sizeof(sh), 2, fc1->shape);
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: blocks.0.mlp.fc1.weight has shape %s; the hidden size of "
                               "x_embedder.proj.weight is %d",
                               src, sh, d);
    }
    double mlp_ratio = (double)fc1->shape[0] / d;
    /* the DiT's MLP is int(d * mlp_ratio) wide: a ratio that rounds below it is raised by one ulp
     */
    if ((int64_t)(d * mlp_ratio) < fc1->shape[0])
        mlp_ratio = nextafter(mlp_ratio, INFINITY);
    /* the reference adds the null class row only when class_dropout_prob > 0 */
    int rows = (int)y->shape[0];
    int classes = o->num_classes ? o->num_classes : rows - 1;
    if (rows != classes + 1 && rows != classes) {
        shape_text(sh, sizeof(sh), 2, y->shape);
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: y_embedder.embedding_table.weight has shape %s: neither %d "
                               "classes and the null class, nor %d classes alone",
                               src, sh, classes, classes);
    }
    *null_row = rows == classes + 1;
    if (classes < 1)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: y_embedder.embedding_table.weight has %d rows: no class "
                               "(pass --classes N if the table has no null-class row)",
                               src, rows);
    int pp = p * p, learn_sigma;
    if (fin->shape[0] == (int64_t)pp * ch)
        learn_sigma = 0;
    else if (fin->shape[0] == (int64_t)pp * 2 * ch)
        learn_sigma = 1;
    else {
        shape_text(sh, sizeof(sh), 2, fin->shape);
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: final_layer.linear.weight has shape %s: its rows are neither "
                               "%d (patch %d x %d x %d channels) nor %d (learn_sigma: twice the "
                               "channels)",
                               src, sh, pp * ch, p, p, ch, 2 * pp * ch);
    }
    int64_t tokens = pos->shape[1];
    int grid = (int)llround(sqrt((double)tokens));
    if (pos->shape[0] != 1 || pos->shape[2] != d || (int64_t)grid * grid != tokens) {
        shape_text(sh, sizeof(sh), 3, pos->shape);
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: pos_embed has shape %s, not [1, T, %d] of a square grid of T "
                               "tokens",
                               src, sh, d);
    }

    /* the heads are not in any shape */
    dit_config_t ref;
    int heads = o->heads;
    char name[32];
    snprintf(name, sizeof(name), "DiT-custom/%d", p);
    if (o->model) {
        if ((s = dit_config_named(o->model, &ref)) != TDL_OK)
            return s;
        if (ref.hidden_size != d || ref.depth != depth || ref.patch_size != p)
            return tdl_error_raise(TDL_ERR_MISMATCH,
                                   "%s holds a DiT of hidden size %d, depth %ld, patch %d; %s has "
                                   "hidden size %d, depth %d, patch %d",
                                   src, d, depth, p, ref.name, ref.hidden_size, ref.depth,
                                   ref.patch_size);
        snprintf(name, sizeof(name), "%s", ref.name);
        if (!heads)
            heads = ref.num_heads;
    } else {
        static const char *const sizes[] = {"S", "B", "L", "XL"};
        for (size_t i = 0; i < TDL_ARRAY_SIZE(sizes); i++) {
            char n[16];
            snprintf(n, sizeof(n), "DiT-%s/%d", sizes[i], p);
            if (dit_config_named(n, &ref) == TDL_OK && ref.hidden_size == d && ref.depth == depth) {
                snprintf(name, sizeof(name), "%s", ref.name);
                if (!heads)
                    heads = ref.num_heads;
            }
        }
    }
    if (!heads)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "%s holds a DiT of hidden size %d and depth %ld, none of the "
                               "reference's (DiT-S, B, L, XL), and the number of attention heads "
                               "is in no tensor's shape: pass --heads H (or --model NAME)",
                               src, d, depth);

    dit_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.name, sizeof(cfg.name), "%s", name);
    cfg.input_size = grid * p;
    cfg.patch_size = p;
    cfg.in_channels = ch;
    cfg.hidden_size = d;
    cfg.depth = (int)TDL_MIN(depth, 1 << 20);
    cfg.num_heads = heads;
    cfg.mlp_ratio = mlp_ratio;
    cfg.num_classes = classes;
    cfg.class_dropout_prob = *null_row ? 0.1 : 0;
    cfg.learn_sigma = learn_sigma;
    cfg.objective = o->objective;
    if ((s = dit_config_check(&cfg)) != TDL_OK)
        return tdl_error_raise(s == TDL_ERR_INVALID_ARG && !o->heads ? TDL_ERR_MISMATCH : s,
                               "%s: %s", src, tdl_error_get());
    *c = cfg;
    return TDL_OK;
}

/* Every tensor of the file is one of the model's, of its shape, or pos_embed; every one of the
 * model's is there. */
static tdl_status_t check_names(const ckpt_st_t *st, const char *src, const dit_model_t *m,
                                bool null_row)
{
    char a[96], b[96];
    for (int i = 0; i < m->ninfos; i++) {
        const dit_param_info_t *info = &m->infos[i];
        const ckpt_st_entry_t *e = ckpt_st_find(st, info->name);
        int64_t want[4];
        for (int k = 0; k < info->ndim; k++)
            want[k] = info->shape[k];
        bool table = !strcmp(info->name, "y_embedder.embedding_table.weight");
        if (table && !null_row)
            want[0]--;
        shape_text(b, sizeof(b), info->ndim, want);
        if (!e)
            return tdl_error_raise(
                TDL_ERR_NOT_FOUND,
                "%s has no tensor %s (shape %s), which the DiT its other tensors "
                "describe (%s, hidden size %d, depth %d) has",
                src, info->name, b, m->config.name, m->config.hidden_size, m->config.depth);
        bool same = e->ndim == info->ndim;
        for (int k = 0; same && k < info->ndim; k++)
            same = e->shape[k] == want[k];
        if (!same) {
            shape_text(a, sizeof(a), e->ndim, e->shape);
            return tdl_error_raise(TDL_ERR_MISMATCH,
                                   "%s: %s has shape %s; the DiT its other tensors describe "
                                   "(%s) needs %s",
                                   src, info->name, a, m->config.name, b);
        }
    }
    for (int i = 0; i < ckpt_st_count(st); i++) {
        const ckpt_st_entry_t *e = ckpt_st_entry(st, i);
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16") &&
            strcmp(e->dtype, "F64"))
            return tdl_error_raise(TDL_ERR_MISMATCH,
                                   "%s: %s is of dtype %s; DiT weights are F32, F16 or BF16", src,
                                   e->name, e->dtype);
        if (strcmp(e->name, POS_EMBED) != 0 && !dit_model_param(m, e->name))
            return tdl_error_raise(TDL_ERR_MISMATCH,
                                   "%s holds a tensor %s that the reference DiT (%s, depth %d) "
                                   "has no place for: not a DiT state_dict, or another model's",
                                   src, e->name, m->config.name, m->config.depth);
    }
    return TDL_OK;
}

tdl_status_t train_import_safetensors(const char *src, const char *dst,
                                      const train_import_opts_t *o, char *summary, size_t size)
{
    ckpt_st_t *st;
    tdl_status_t s = ckpt_st_open(src, &st);
    if (s != TDL_OK)
        return s;
    dit_config_t c;
    dit_model_t *m = NULL;
    float *pos = NULL, *want = NULL;
    bool null_row = true;
    if ((s = infer_config(st, src, o, &c, &null_row)) != TDL_OK)
        goto out;
    if ((s = dit_model_create_inference(&c, 1, c.input_size, NULL, &m)) != TDL_OK)
        goto out;
    if ((s = check_names(st, src, m, null_row)) != TDL_OK)
        goto out;
    /* pos_embed is the frozen sin-cos buffer tidal computes per grid: it must be that one */
    int grid = c.input_size / c.patch_size, d = c.hidden_size;
    size_t npos = (size_t)grid * grid * d;
    if (!(pos = malloc(npos * sizeof(float))) || !(want = malloc(npos * sizeof(float)))) {
        s = tdl_error_raise(TDL_ERR_NOMEM, "importing %s: out of memory", src);
        goto out;
    }
    if ((s = ckpt_st_read_f32(st, ckpt_st_find(st, POS_EMBED), pos, npos)) != TDL_OK)
        goto out;
    dit_pos_embed(want, grid, grid, d);
    /* stored in 16 bits, it is tidal's rounded: within the dtype's relative rounding error */
    const char *pdt = ckpt_st_find(st, POS_EMBED)->dtype;
    double u = !strcmp(pdt, "BF16") ? 0x1p-8 : !strcmp(pdt, "F16") ? 0x1p-11 : 0;
    double worst = 0, excess = 0, largest = 0;
    size_t at = 0;
    for (size_t j = 0; j < npos; j++) {
        double e = fabs((double)pos[j] - want[j]);
        double over = e - u * fabs((double)want[j]);
        largest = fmax(largest, e);
        if (!(over <= excess)) /* NaN too */
            excess = over, worst = e, at = j;
    }
    if (!(excess <= POS_EMBED_BOUND)) {
        s = tdl_error_raise(TDL_ERR_MISMATCH,
                            "%s: pos_embed differs from the reference's sin-cos embedding of a "
                            "%dx%d grid by %g at token %zu, channel %zu (more than %g beyond %s's "
                            "rounding): tidal computes that embedding and cannot use another",
                            src, grid, grid, worst, at / d, at % d, POS_EMBED_BOUND, pdt);
        goto out;
    }
    const char *dtype = "";
    for (int i = 0; i < m->ninfos; i++) {
        const dit_param_info_t *info = &m->infos[i];
        const ckpt_st_entry_t *e = ckpt_st_find(st, info->name);
        size_t n = e->numel;
        float *dst_p = m->params + info->offset;
        if ((s = ckpt_st_read_f32(st, e, dst_p, n)) != TDL_OK)
            goto out;
        if (n < info->numel) /* the table without its null-class row: that row zero */
            memset(dst_p + n, 0, (info->numel - n) * sizeof(float));
        if (!*dtype)
            dtype = e->dtype;
        else if (strcmp(dtype, e->dtype) != 0)
            dtype = "mixed";
    }
    for (size_t j = 0; j < m->num_params; j++)
        if (!isfinite(m->params[j])) {
            s = tdl_error_raise(TDL_ERR_CORRUPT,
                                "%s: the weights hold NaN or Inf: not usable (the model diverged, "
                                "or the file is damaged)",
                                src);
            goto out;
        }
    /* the weights taken are /model and /ema both: what generate (ema) and a resume read */
    if ((s = train_weights_save(dst, m, m->params, 0, NULL)) != TDL_OK)
        goto out;
    if (summary)
        snprintf(summary, size,
                 "%s -> %s: %s (input %d, patch %d, %d channels, hidden %d, depth %d, heads %d, "
                 "mlp ratio %g, %d classes%s, learn_sigma %s, objective %s), %d tensors of %s, "
                 "%zu parameters; pos_embed matches tidal's to %.2g",
                 src, dst, c.name, c.input_size, c.patch_size, c.in_channels, c.hidden_size,
                 c.depth, c.num_heads, c.mlp_ratio, c.num_classes,
                 null_row ? ""
                          : " (the table has no null-class row: the model was trained without "
                            "label dropout, so guidance has no unconditional model; the null row "
                            "is written as zeros)",
                 c.learn_sigma ? "on" : "off", dit_objective_name(c.objective), m->ninfos, dtype,
                 m->num_params, largest);
out:
    free(want);
    free(pos);
    dit_model_free(m);
    ckpt_st_close(st);
    return s;
}
