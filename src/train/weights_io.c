/* DiT weights in HDF5 (through src/ckpt): the model and EMA parameters under their PyTorch
 * names, and the configuration as attributes, one per field and the whole as JSON. */
#include "config.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "tensor/tensor.h"
#include "train/train.h"
#include "train/train_internal.h"

ckpt_tensor_t *train_tensors_of(const dit_model_t *m, float *base)
{
    ckpt_tensor_t *t = calloc((size_t)m->ninfos, sizeof(*t));
    for (int i = 0; t && i < m->ninfos; i++) {
        const dit_param_info_t *p = &m->infos[i];
        t[i].name = p->name;
        t[i].ndim = p->ndim;
        memcpy(t[i].shape, p->shape, sizeof(t[i].shape));
        t[i].data = base + p->offset;
    }
    return t;
}

static char *config_json(const dit_config_t *c)
{
    json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:f, s:b, s:f}", "name",
                          c->name, "input_size", c->input_size, "patch_size", c->patch_size,
                          "in_channels", c->in_channels, "hidden_size", c->hidden_size, "depth",
                          c->depth, "num_heads", c->num_heads, "mlp_ratio", c->mlp_ratio,
                          "num_classes", c->num_classes, "class_dropout_prob",
                          c->class_dropout_prob, "learn_sigma", 0, "t_scale", (double)DIT_T_SCALE);
    char *s = j ? json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

int train_config_attrs(const dit_config_t *c, ckpt_attr_t *attrs)
{
    const ckpt_attr_t a[TRAIN_CONFIG_ATTRS] = {
        {.key = "model", .type = CKPT_ATTR_STRING, .s = c->name},
        {.key = "input_size", .type = CKPT_ATTR_INT, .i = c->input_size},
        {.key = "patch_size", .type = CKPT_ATTR_INT, .i = c->patch_size},
        {.key = "in_channels", .type = CKPT_ATTR_INT, .i = c->in_channels},
        {.key = "hidden_size", .type = CKPT_ATTR_INT, .i = c->hidden_size},
        {.key = "depth", .type = CKPT_ATTR_INT, .i = c->depth},
        {.key = "num_heads", .type = CKPT_ATTR_INT, .i = c->num_heads},
        {.key = "mlp_ratio", .type = CKPT_ATTR_DOUBLE, .d = c->mlp_ratio},
        {.key = "num_classes", .type = CKPT_ATTR_INT, .i = c->num_classes},
        {.key = "class_dropout_prob", .type = CKPT_ATTR_DOUBLE, .d = c->class_dropout_prob},
        {.key = "learn_sigma", .type = CKPT_ATTR_INT, .i = 0},
        {.key = "t_scale", .type = CKPT_ATTR_DOUBLE, .d = DIT_T_SCALE},
    };
    memcpy(attrs, a, sizeof(a));
    return TRAIN_CONFIG_ATTRS;
}

tdl_status_t train_weights_save(const char *path, const dit_model_t *m, const float *ema,
                                int64_t step)
{
    const dit_config_t *c = &m->config;
    ckpt_tensor_t *model = train_tensors_of(m, m->params);
    ckpt_tensor_t *emat = ema ? train_tensors_of(m, (float *)ema) : NULL;
    char *json = config_json(c);
    tdl_status_t st;
    if (!model || (ema && !emat) || !json) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "saving %s: out of memory", path);
        goto out;
    }
    ckpt_attr_t attrs[TRAIN_CONFIG_ATTRS + 2];
    int na = train_config_attrs(c, attrs);
    attrs[na++] = (ckpt_attr_t){.key = "step", .type = CKPT_ATTR_INT, .i = step};
    attrs[na++] = (ckpt_attr_t){.key = "config_json", .type = CKPT_ATTR_STRING, .s = json};
    st = ckpt_weights_write(path, model, emat, m->ninfos, attrs, na);
out:
    free(json);
    free(emat);
    free(model);
    return st;
}

tdl_status_t train_weights_load(const char *path, const char *group, int max_batch,
                                int max_resolution, dit_model_t **model_out)
{
    dit_config_t c;
    memset(&c, 0, sizeof(c));
    char *name = NULL;
    int64_t v[8];
    double mlp, drop;
    static const char *const keys[] = {"input_size", "patch_size", "in_channels", "hidden_size",
                                       "depth",      "num_heads",  "num_classes"};
    tdl_status_t st = ckpt_attr_read_string(path, "model", &name);
    for (size_t i = 0; st == TDL_OK && i < TDL_ARRAY_SIZE(keys); i++)
        st = ckpt_attr_read_int(path, keys[i], &v[i]);
    if (st == TDL_OK)
        st = ckpt_attr_read_double(path, "mlp_ratio", &mlp);
    if (st == TDL_OK)
        st = ckpt_attr_read_double(path, "class_dropout_prob", &drop);
    if (st != TDL_OK) {
        free(name);
        return st;
    }
    snprintf(c.name, sizeof(c.name), "%s", name);
    free(name);
    c.input_size = (int)v[0], c.patch_size = (int)v[1], c.in_channels = (int)v[2];
    c.hidden_size = (int)v[3], c.depth = (int)v[4], c.num_heads = (int)v[5];
    c.num_classes = (int)v[6], c.mlp_ratio = mlp, c.class_dropout_prob = drop;
    if ((st = dit_config_check(&c)) != TDL_OK)
        return tdl_error_raise(st, "%s: %s", path, tdl_error_get());
    dit_model_t *m;
    if ((st = dit_model_create(&c, max_batch, max_resolution ? max_resolution : c.input_size,
                               &m)) != TDL_OK)
        return st;
    ckpt_tensor_t *t = train_tensors_of(m, m->params);
    st = t ? ckpt_weights_read(path, group, t, m->ninfos)
           : tdl_error_raise(TDL_ERR_NOMEM, "loading %s: out of memory", path);
    free(t);
    if (st != TDL_OK) {
        dit_model_free(m);
        return st;
    }
    *model_out = m;
    return TDL_OK;
}

tdl_status_t train_checkpoint_verify(const char *path, char *summary, size_t size)
{
    dit_model_t *m;
    tdl_status_t st = train_weights_load(path, "model", 1, 0, &m);
    if (st != TDL_OK)
        return st;
    /* Every further group present is read in full too: that is what checks its checksums. */
    /* (group to look for, group to read): nested groups are looked for by their top name */
    static const char *const groups[][2] = {
        {"ema", "ema"}, {"optim", "optim/adamw/m"}, {"optim", "optim/adamw/v"}};
    float *scratch = tensor_alloc(m->num_params);
    ckpt_tensor_t *t = scratch ? train_tensors_of(m, scratch) : NULL;
    char found[128] = "model";
    if (!t)
        st = tdl_error_raise(TDL_ERR_NOMEM, "verifying %s: out of memory", path);
    for (size_t i = 0; st == TDL_OK && i < TDL_ARRAY_SIZE(groups); i++) {
        bool has = false;
        if ((st = ckpt_weights_has_group(path, groups[i][0], &has)) != TDL_OK || !has)
            continue;
        if ((st = ckpt_weights_read(path, groups[i][1], t, m->ninfos)) == TDL_OK) {
            size_t len = strlen(found);
            snprintf(found + len, sizeof(found) - len, ", %s", groups[i][1]);
        }
    }
    int64_t step = -1;
    if (st == TDL_OK && ckpt_attr_read_int(path, "step", &step) != TDL_OK)
        step = -1;
    if (st == TDL_OK)
        snprintf(summary, size, "%s: %s, %zu parameters, step %lld, groups %s: ok", path,
                 m->config.name, m->num_params, (long long)step, found);
    free(t);
    free(scratch);
    dit_model_free(m);
    return st;
}
