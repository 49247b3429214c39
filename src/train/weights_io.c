/* DiT weights in HDF5 (through src/ckpt): the model and EMA parameters under their PyTorch
 * names, and the configuration as attributes, one per field and the whole as JSON. */
#include "config.h"

#include <math.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ckpt/ckpt.h"
#include "tensor/tensor.h"
#include "train/train.h"
#include "train/train_internal.h"

ckpt_tensor_t *train_tensors_of(const dit_model_t *m, float *base)
{
    return train_tensors_of_infos(m->infos, m->ninfos, base);
}

ckpt_tensor_t *train_tensors_of_infos(const dit_param_info_t *infos, int n, float *base)
{
    ckpt_tensor_t *t = calloc((size_t)n, sizeof(*t));
    for (int i = 0; t && i < n; i++) {
        const dit_param_info_t *p = &infos[i];
        t[i].name = p->name;
        t[i].ndim = p->ndim;
        memcpy(t[i].shape, p->shape, sizeof(t[i].shape));
        t[i].data = base + p->offset;
    }
    return t;
}

char *train_config_json(const dit_config_t *c)
{
    json_t *j =
        json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:f, s:b, s:f, s:s}", "name",
                  c->name, "input_size", c->input_size, "patch_size", c->patch_size, "in_channels",
                  c->in_channels, "hidden_size", c->hidden_size, "depth", c->depth, "num_heads",
                  c->num_heads, "mlp_ratio", c->mlp_ratio, "num_classes", c->num_classes,
                  "class_dropout_prob", c->class_dropout_prob, "learn_sigma", c->learn_sigma != 0,
                  "t_scale", (double)DIT_T_SCALE, "objective", dit_objective_name(c->objective));
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
        {.key = "learn_sigma", .type = CKPT_ATTR_INT, .i = c->learn_sigma},
        {.key = "t_scale", .type = CKPT_ATTR_DOUBLE, .d = DIT_T_SCALE},
        {.key = "objective", .type = CKPT_ATTR_STRING, .s = dit_objective_name(c->objective)},
    };
    memcpy(attrs, a, sizeof(a));
    return TRAIN_CONFIG_ATTRS;
}

tdl_status_t train_weights_save(const char *path, const dit_model_t *m, const float *ema,
                                int64_t step, const char *const *class_names)
{
    const dit_config_t *c = &m->config;
    ckpt_tensor_t *model = train_tensors_of(m, m->params);
    ckpt_tensor_t *emat = ema ? train_tensors_of(m, (float *)ema) : NULL;
    char *json = train_config_json(c);
    char *names = class_names ? train_class_names_json(class_names, c->num_classes) : NULL;
    tdl_status_t st;
    if (!model || (ema && !emat) || !json || (class_names && !names)) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "saving %s: out of memory", path);
        goto out;
    }
    ckpt_attr_t attrs[TRAIN_CONFIG_ATTRS + 3];
    int na = train_config_attrs(c, attrs);
    attrs[na++] = (ckpt_attr_t){.key = "step", .type = CKPT_ATTR_INT, .i = step};
    attrs[na++] = (ckpt_attr_t){.key = "config_json", .type = CKPT_ATTR_STRING, .s = json};
    if (names)
        attrs[na++] =
            (ckpt_attr_t){.key = TRAIN_CLASS_NAMES_ATTR, .type = CKPT_ATTR_STRING, .s = names};
    st = ckpt_weights_write(path, model, emat, m->ninfos, attrs, na);
out:
    free(names);
    free(json);
    free(emat);
    free(model);
    return st;
}

/* ---- class names ---------------------------------------------------------------------------- */

char *train_class_names_json(const char *const *names, int num_classes)
{
    json_t *a = json_array();
    for (int i = 0; a && i < num_classes; i++)
        if (json_array_append_new(a, json_string(names[i])) != 0)
            json_decref(a), a = NULL;
    char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return s;
}

/* The next code point of valid UTF-8 (jansson has checked it) at *p, which moves past it. */
static unsigned utf8_next(const unsigned char **p)
{
    const unsigned char *s = *p;
    unsigned c = s[0];
    int more = c < 0x80 ? 0 : c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;
    if (more)
        c &= 0x3fu >> more;
    for (int k = 1; k <= more; k++)
        c = (c << 6) | (s[k] & 0x3fu);
    *p = s + 1 + more;
    return c;
}

/* Whether a name reads as a class number to the prompt of the images API (src/serve/openai.c):
 * digits, or "class" and digits, which always name a class by its number. */
static bool names_a_number(const char *s)
{
    if (strncasecmp(s, "class", 5) == 0)
        s += 5 + strspn(s + 5, " ");
    size_t digits = strspn(s, "0123456789");
    return digits > 0 && s[digits] == '\0';
}

static int name_cmp(const void *a, const void *b)
{
    return strcasecmp(*(char *const *)a, *(char *const *)b);
}

#define CLASS_NAME_MAX_TEXT "64"
_Static_assert(TRAIN_CLASS_NAME_MAX == 64, "CLASS_NAME_MAX_TEXT says the limit in words");

/* What is wrong with a name of len bytes (NULL: nothing). */
static const char *name_fault(const char *name, size_t len)
{
    if (len == 0)
        return "is empty";
    if (len > TRAIN_CLASS_NAME_MAX)
        return "is longer than " CLASS_NAME_MAX_TEXT " bytes";
    if (strlen(name) != len)
        return "holds a NUL";
    for (const unsigned char *p = (const unsigned char *)name; *p;) {
        unsigned c = utf8_next(&p);
        if (c < 0x20 || (c >= 0x7f && c < 0xa0))
            return "holds a control character";
    }
    if (name[0] == ' ' || name[len - 1] == ' ')
        return "begins or ends with a space";
    if (names_a_number(name))
        return "is a number or 'class N', which name classes by number";
    return NULL;
}

tdl_status_t train_class_names_parse(const char *path, const char *json, int num_classes,
                                     char ***names_out)
{
    static const char what[] = "the file is damaged or was not written by tidal; use another "
                               "checkpoint, or write the attribute again (doc/checkpoint.md)";
    const char *key = TRAIN_CLASS_NAMES_ATTR;
    if (num_classes < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s: class names for %d classes", path,
                               num_classes);
    /* no attribute of valid names is longer: every byte of a name escaped as \u00XX */
    size_t longest = 2 + (size_t)num_classes * (6 * TRAIN_CLASS_NAME_MAX + 3);
    size_t len = strlen(json);
    if (len > longest)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "%s: the attribute %s is %zu bytes, longer than %d names of at "
                               "most %d bytes can be: %s",
                               path, key, len, num_classes, TRAIN_CLASS_NAME_MAX, what);
    json_error_t je;
    json_t *a = json_loadb(json, len, JSON_DECODE_ANY, &je);
    if (!a)
        return tdl_error_raise(json_error_code(&je) == json_error_out_of_memory ? TDL_ERR_NOMEM
                                                                                : TDL_ERR_CORRUPT,
                               "%s: the attribute %s is not JSON (%s, at character %d): %s", path,
                               key, je.text, je.position, what);
    tdl_status_t st = TDL_OK;
    char **names = NULL;
    if (!json_is_array(a) || json_array_size(a) != (size_t)num_classes) {
        char got[48];
        snprintf(got, sizeof(got), "%s", json_is_object(a) ? "an object" : "a single value");
        if (json_is_array(a))
            snprintf(got, sizeof(got), "an array of %zu", json_array_size(a));
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: the attribute %s must be a JSON array of %d strings, one per "
                             "class, not %s: %s",
                             path, key, num_classes, got, what);
        goto out;
    }
    size_t bytes = (size_t)num_classes * sizeof(char *);
    for (int i = 0; i < num_classes; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        const char *fault = !json_is_string(v)
                                ? "is not a string"
                                : name_fault(json_string_value(v), json_string_length(v));
        if (fault) {
            st = tdl_error_raise(TDL_ERR_CORRUPT,
                                 "%s: the attribute %s: the name of class %d %s: %s", path, key, i,
                                 fault, what);
            goto out;
        }
        bytes += json_string_length(v) + 1;
    }
    if (!(names = malloc(bytes))) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "%s: no memory for the attribute %s", path, key);
        goto out;
    }
    char *text = (char *)(names + num_classes);
    for (int i = 0; i < num_classes; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        names[i] = memcpy(text, json_string_value(v), json_string_length(v) + 1);
        text += json_string_length(v) + 1;
    }
    /* sorted copies side by side show a name given twice */
    char **sorted = malloc((size_t)num_classes * sizeof(char *));
    if (!sorted) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "%s: no memory for the attribute %s", path, key);
        goto out;
    }
    memcpy(sorted, names, (size_t)num_classes * sizeof(char *));
    qsort(sorted, (size_t)num_classes, sizeof(char *), name_cmp);
    for (int i = 1; i < num_classes && st == TDL_OK; i++)
        if (strcasecmp(sorted[i - 1], sorted[i]) == 0)
            st = tdl_error_raise(TDL_ERR_CORRUPT,
                                 "%s: the attribute %s names two classes '%s' (ignoring case): "
                                 "%s",
                                 path, key, sorted[i], what);
    free(sorted);
out:
    json_decref(a);
    if (st == TDL_OK)
        *names_out = names;
    else
        free(names);
    return st;
}

tdl_status_t train_weights_class_names(const char *path, int num_classes, char ***names_out)
{
    char *json = NULL;
    tdl_status_t st = ckpt_attr_read_string(path, TRAIN_CLASS_NAMES_ATTR, &json);
    if (st == TDL_ERR_NOT_FOUND) { /* older files, and data sets without names */
        *names_out = NULL;
        return TDL_OK;
    }
    if (st == TDL_ERR_MISMATCH) /* not a string: ckpt's message names the file and the key */
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: it must be a JSON array of strings",
                               tdl_error_get());
    if (st != TDL_OK)
        return st;
    st = train_class_names_parse(path, json, num_classes, names_out);
    free(json);
    return st;
}

/* What a refusal of the configuration tells the user to do. */
#define CONFIG_ADVICE "the file is damaged or was not written by tidal; use another checkpoint"

/* A configuration attribute missing or of another type: ckpt's message names the file and the
 * attribute. An error of the system (I/O, memory) stays what it is. */
static tdl_status_t config_refuse(tdl_status_t st)
{
    return tdl_error_raise(st == TDL_ERR_IO || st == TDL_ERR_NOMEM ? st : TDL_ERR_CORRUPT, "%s: %s",
                           tdl_error_get(), CONFIG_ADVICE);
}

tdl_status_t train_weights_config(const char *path, dit_config_t *config_out)
{
    if (!path || !*path)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "no checkpoint file given (the path is empty): give a weights file "
                               "or checkpoint written by tidal train");
    /* the file itself first (missing, not HDF5, truncated), so that a missing attribute below is
     * one the file lacks */
    bool has_model;
    tdl_status_t st = ckpt_weights_has_group(path, "model", &has_model);
    if (st != TDL_OK)
        return st;
    /* a file from a newer tidal may mean something else by the same names: refuse it, and a file
     * without a version is none of tidal's */
    int64_t version = 0;
    if ((st = ckpt_attr_read_int(path, "format_version", &version)) != TDL_OK)
        return config_refuse(st);
    if (version < 1 || version > CKPT_FORMAT_VERSION)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s has format_version %lld; this tidal reads version %d (a newer "
                               "tidal wrote it, or it is damaged): read it with the tidal that "
                               "wrote it",
                               path, (long long)version, CKPT_FORMAT_VERSION);
    dit_config_t c;
    memset(&c, 0, sizeof(c));
    char *name = NULL;
    if ((st = ckpt_attr_read_string(path, "model", &name)) != TDL_OK)
        return config_refuse(st);
    if (!*name || strlen(name) >= sizeof(c.name)) {
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: the attribute model is '%.40s', not a model name of 1 to %zu "
                             "characters: %s",
                             path, name, sizeof(c.name) - 1, CONFIG_ADVICE);
        free(name);
        return st;
    }
    snprintf(c.name, sizeof(c.name), "%s", name);
    free(name);
    /* as stored (int64, double), judged against the DiT's limits before they are narrowed:
     * nothing is allocated for a size no file of tidal's holds */
    static const char *const ints[] = {"input_size", "patch_size", "in_channels", "hidden_size",
                                       "depth",      "num_heads",  "num_classes"};
    static const char *const reals[] = {"mlp_ratio", "class_dropout_prob"};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(ints); i++) {
        int64_t v;
        if ((st = ckpt_attr_read_int(path, ints[i], &v)) != TDL_OK)
            return config_refuse(st);
        if ((st = dit_config_set_int(&c, ints[i], v)) != TDL_OK)
            return tdl_error_raise(TDL_ERR_CORRUPT, "%s: the attribute %s: %s", path,
                                   tdl_error_get(), CONFIG_ADVICE);
    }
    for (size_t i = 0; i < TDL_ARRAY_SIZE(reals); i++) {
        double v;
        if ((st = ckpt_attr_read_double(path, reals[i], &v)) != TDL_OK)
            return config_refuse(st);
        if ((st = dit_config_set_double(&c, reals[i], v)) != TDL_OK)
            return tdl_error_raise(TDL_ERR_CORRUPT, "%s: the attribute %s: %s", path,
                                   tdl_error_get(), CONFIG_ADVICE);
    }
    if ((st = dit_config_check(&c)) != TDL_OK)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: %s: %s", path, tdl_error_get(), CONFIG_ADVICE);
    /* optional (a file made by hand, or before learn_sigma and the objective were stored, may
     * leave them out: then off, and rectified flow), but present they must be tidal's DiT */
    int64_t sigma = 0;
    double t_scale = DIT_T_SCALE;
    if ((st = ckpt_attr_read_int(path, "learn_sigma", &sigma)) != TDL_OK && st != TDL_ERR_NOT_FOUND)
        return config_refuse(st);
    if ((st = dit_config_set_int(&c, "learn_sigma", sigma)) != TDL_OK)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: the attribute %s: %s", path, tdl_error_get(),
                               CONFIG_ADVICE);
    char *objective = NULL;
    if ((st = ckpt_attr_read_string(path, "objective", &objective)) == TDL_OK) {
        st = dit_objective_parse(objective, &c.objective);
        free(objective);
        if (st != TDL_OK)
            return tdl_error_raise(TDL_ERR_MISMATCH,
                                   "%s: the attribute objective: %s; this tidal cannot sample "
                                   "such a model",
                                   path, tdl_error_get());
    } else if (st != TDL_ERR_NOT_FOUND) {
        return config_refuse(st);
    }
    if ((st = ckpt_attr_read_double(path, "t_scale", &t_scale)) != TDL_OK &&
        st != TDL_ERR_NOT_FOUND)
        return config_refuse(st);
    if (t_scale != DIT_T_SCALE)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: the attribute t_scale is %g: tidal's DiT embeds t * %g and "
                               "would misread this model's time steps",
                               path, t_scale, (double)DIT_T_SCALE);
    /* optional too; a forged one is refused here, by every loader, not where it is used */
    char **names = NULL;
    if ((st = train_weights_class_names(path, c.num_classes, &names)) != TDL_OK)
        return st;
    free(names);
    *config_out = c;
    return TDL_OK;
}

/* Whether any of n floats is NaN or Inf (all exponent bits set): integer operations without an
 * early exit, which the compiler vectorizes, so the scan costs little next to the read. */
static bool any_nonfinite(const float *x, size_t n)
{
    uint32_t bad = 0;
    for (size_t j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &x[j], sizeof(u));
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad != 0;
}

tdl_status_t train_tensors_read(const char *path, const char *group, const dit_model_t *m,
                                float *base)
{
    ckpt_tensor_t *t = train_tensors_of(m, base);
    if (!t)
        return tdl_error_raise(TDL_ERR_NOMEM, "reading %s: out of memory", path);
    tdl_status_t st = ckpt_weights_read(path, group, t, m->ninfos);
    free(t);
    /* No good checkpoint holds NaN or Inf: a model that diverged, or data damaged before its
     * checksum was computed. Every loader refuses it, as verify does. */
    for (int k = 0; k < m->ninfos && st == TDL_OK; k++) {
        const dit_param_info_t *info = &m->infos[k];
        const float *x = base + info->offset;
        if (!any_nonfinite(x, info->numel))
            continue;
        size_t j = 0;
        while (isfinite(x[j]))
            j++;
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: /%s/%s holds %s at element %zu: the weights are not usable "
                             "(training diverged, or the file was edited); use an earlier "
                             "checkpoint",
                             path, group, info->name, isnan(x[j]) ? "NaN" : "Inf", j);
    }
    return st;
}

tdl_status_t train_config_servable(const dit_config_t *c)
{
    if (c->objective != DIT_OBJECTIVE_RF && c->objective != DIT_OBJECTIVE_DDPM)
        return tdl_error_raise(TDL_ERR_UNSUPPORTED, "model %s: objective %d is not one tidal serves",
                               c->name, (int)c->objective);
    return TDL_OK;
}

/* *be passes to the model once it is made (then *be = NULL). */
static tdl_status_t weights_load(const char *path, const char *group, int max_batch,
                                 int max_resolution, bool inference, struct dit_backend **be,
                                 dit_model_t **model_out)
{
    dit_config_t c;
    tdl_status_t st = train_weights_config(path, &c);
    if (st != TDL_OK)
        return st;
    dit_model_t *m;
    int res = max_resolution ? max_resolution : c.input_size;
    st = inference ? dit_model_create_inference(&c, max_batch, res, *be, &m)
                   : dit_model_create_on(&c, max_batch, res, *be, &m);
    if (st != TDL_OK) {
        *be = NULL; /* closed by dit_model_create_on */
        /* a size within the limits may still not fit this machine: say which file asked */
        if (st == TDL_ERR_NOMEM)
            st = tdl_error_raise(st,
                                 "%s describes a model (%s: hidden_size %d, depth %d, num_classes "
                                 "%d) that does not fit in memory here: %s",
                                 path, c.name, c.hidden_size, c.depth, c.num_classes,
                                 tdl_error_get());
        return st;
    }
    *be = NULL;
    st = train_tensors_read(path, group, m, m->params);
    dit_model_params_changed(m);
    if (st != TDL_OK) {
        dit_model_free(m);
        return st;
    }
    *model_out = m;
    return TDL_OK;
}

tdl_status_t train_weights_load_on(const char *path, const char *group, int max_batch,
                                   int max_resolution, struct dit_backend *be,
                                   dit_model_t **model_out)
{
    tdl_status_t st = weights_load(path, group, max_batch, max_resolution, false, &be, model_out);
    dit_backend_close(be);
    return st;
}

tdl_status_t train_weights_load_inference(const char *path, const char *group, int max_batch,
                                          int max_resolution, struct dit_backend *be,
                                          dit_model_t **model_out)
{
    /* src/serve steps rectified flow on outputs of C channels */
    dit_config_t c;
    tdl_status_t sc = train_weights_config(path, &c);
    if (sc == TDL_OK && (sc = train_config_servable(&c)) != TDL_OK)
        sc = tdl_error_raise(sc, "%s: %s", path, tdl_error_get());
    if (sc != TDL_OK) {
        dit_backend_close(be);
        return sc;
    }
    tdl_status_t st = weights_load(path, group, max_batch, max_resolution, true, &be, model_out);
    dit_backend_close(be);
    return st;
}

tdl_status_t train_weights_load(const char *path, const char *group, int max_batch,
                                int max_resolution, dit_model_t **model_out)
{
    return train_weights_load_on(path, group, max_batch, max_resolution, NULL, model_out);
}

/* The groups of tensors a file may hold besides /model: (group looked for, group read). */
static const char *const train_groups[][2] = {{"ema", "ema"},
                                              {"optim", "optim/adamw/m"},
                                              {"optim", "optim/adamw/v"},
                                              {"codec", "codec/residual"}};

tdl_status_t train_checkpoint_verify(const char *path, char *summary, size_t size)
{
    dit_model_t *m;
    tdl_status_t st = train_weights_load(path, "model", 1, 0, &m);
    if (st != TDL_OK)
        return st;
    /* Every group present is read in full with the loaders' own checks (storage, checksums,
     * NaN and Inf), and the training state with the resume's. */
    float *scratch = tensor_alloc(m->num_params);
    char found[160] = "model";
    if (!scratch)
        st = tdl_error_raise(TDL_ERR_NOMEM, "verifying %s: out of memory", path);
    for (size_t i = 0; st == TDL_OK && i < TDL_ARRAY_SIZE(train_groups); i++) {
        bool has = true;
        if ((st = ckpt_weights_has_group(path, train_groups[i][0], &has)) != TDL_OK || !has)
            continue;
        if ((st = train_tensors_read(path, train_groups[i][1], m, scratch)) == TDL_OK) {
            size_t len = strlen(found);
            snprintf(found + len, sizeof(found) - len, ", %s", train_groups[i][1]);
        }
    }
    bool train = false;
    if (st == TDL_OK && (st = ckpt_weights_has_group(path, "train", &train)) == TDL_OK && train) {
        train_ckpt_attrs_t a;
        float hist[TRAIN_LOSS_HISTORY][2];
        if ((st = train_checkpoint_attrs_read(path, &a)) == TDL_OK) {
            ckpt_tensor_t lh = {.name = "loss_history",
                                .ndim = 2,
                                .shape = {(int)TDL_MAX(a.rows, 1), 2},
                                .data = &hist[0][0]};
            st = ckpt_weights_read(path, "train", &lh, 1);
        }
        if (st == TDL_OK) {
            size_t len = strlen(found);
            snprintf(found + len, sizeof(found) - len, ", train");
        }
    }
    int64_t step = -1;
    if (st == TDL_OK && ckpt_attr_read_int(path, "step", &step) != TDL_OK)
        step = -1;
    if (st == TDL_OK)
        snprintf(summary, size, "%s: %s, %zu parameters, step %lld, groups %s: ok", path,
                 m->config.name, m->num_params, (long long)step, found);
    free(scratch);
    dit_model_free(m);
    return st;
}

tdl_status_t train_checkpoint_info(const char *path, FILE *out)
{
    char summary[512];
    tdl_status_t st = train_checkpoint_verify(path, summary, sizeof(summary));
    if (st != TDL_OK)
        return st;
    dit_model_t *m;
    if ((st = train_weights_load(path, "model", 1, 0, &m)) != TDL_OK)
        return st;
    const dit_config_t *c = &m->config;
    char *created = NULL, *version = NULL;
    ckpt_attr_read_string(path, "created", &created);
    ckpt_attr_read_string(path, "tidal_version", &version);
    fprintf(out, "%s\n", path);
    fprintf(out, "  model        %s: depth %d, hidden %d, heads %d, patch %d, %d channels, %d "
                 "classes, input %d; %zu parameters (%.1f MiB a copy)\n",
            c->name, c->depth, c->hidden_size, c->num_heads, c->patch_size, c->in_channels,
            c->num_classes, c->input_size, m->num_params,
            (double)m->num_params * 4 / (1 << 20));
    fprintf(out, "  objective    %s, learn_sigma %s (%d output channels)\n",
            dit_objective_name(c->objective), c->learn_sigma ? "on" : "off",
            dit_config_out_channels(c));
    fprintf(out, "  written      %s by tidal %s\n", created ? created : "?",
            version ? version : "?");
    char **names = NULL;
    if (train_weights_class_names(path, c->num_classes, &names) == TDL_OK && names) {
        fprintf(out, "  classes     ");
        for (int i = 0; i < c->num_classes; i++)
            fprintf(out, "%s %d %s", i ? "," : "", i, names[i]);
        fprintf(out, "\n");
    }
    free(names);
    int64_t v;
    if (ckpt_attr_read_int(path, "step", &v) == TDL_OK)
        fprintf(out, "  step         %lld\n", (long long)v);
    if (ckpt_attr_read_int(path, "world_size", &v) == TDL_OK)
        fprintf(out, "  world size   %lld ranks when saved\n", (long long)v);
    int64_t batch = 0, seed = 0, epoch = 0, pos = 0, warm = 0, rows = 0;
    double lr = 0, lr_now = 0;
    if (ckpt_attr_read_int(path, "batch", &batch) == TDL_OK &&
        ckpt_attr_read_int(path, "seed", &seed) == TDL_OK)
        fprintf(out, "  run          global batch %lld, seed %lld\n", (long long)batch,
                (long long)seed);
    if (ckpt_attr_read_int(path, "train/data_epoch", &epoch) == TDL_OK &&
        ckpt_attr_read_int(path, "train/data_position", &pos) == TDL_OK)
        fprintf(out, "  data         epoch %lld, next image %lld of the shuffled order\n",
                (long long)epoch, (long long)pos);
    if (ckpt_attr_read_double(path, "train/lr", &lr) == TDL_OK &&
        ckpt_attr_read_double(path, "train/lr_at_step", &lr_now) == TDL_OK &&
        ckpt_attr_read_int(path, "train/lr_warmup_steps", &warm) == TDL_OK)
        fprintf(out, "  lr           %.3g now (peak %.3g after %lld warm-up steps)\n", lr_now, lr,
                (long long)warm);
    if (ckpt_attr_read_int(path, "train/loss_history_rows", &rows) == TDL_OK && rows > 0 &&
        rows <= TRAIN_LOSS_HISTORY) {
        float hist[TRAIN_LOSS_HISTORY][2];
        ckpt_tensor_t lh = {.name = "loss_history", .ndim = 2, .shape = {(int)rows, 2},
                            .data = &hist[0][0]};
        if (ckpt_weights_read(path, "train", &lh, 1) == TDL_OK) {
            double tail = 0;
            int k = (int)TDL_MIN(rows, 50);
            for (int i = (int)rows - k; i < rows; i++)
                tail += hist[i][1];
            fprintf(out, "  loss         %.4f at step %.0f; mean of the last %d steps %.4f (%lld "
                         "steps kept)\n",
                    hist[rows - 1][1], hist[rows - 1][0], k, tail / k, (long long)rows);
        }
    }
    const char *groups = strstr(summary, "groups ");
    fprintf(out, "  contents     %.*s\n", groups ? (int)(strstr(groups, ": ok") - groups - 7) : 0,
            groups ? groups + 7 : "");
    fprintf(out, "  verified     checksums, shapes, no NaN or Inf\n");
    free(created), free(version);
    dit_model_free(m);
    return TDL_OK;
}

tdl_status_t train_checkpoint_diff(const char *a, const char *b, FILE *out, double *largest_out)
{
    dit_model_t *ma, *mb;
    tdl_status_t st = train_weights_load(a, "model", 1, 0, &ma);
    if (st != TDL_OK)
        return st;
    if ((st = train_weights_load(b, "model", 1, 0, &mb)) != TDL_OK) {
        dit_model_free(ma);
        return st;
    }
    if (ma->num_params != mb->num_params || ma->ninfos != mb->ninfos ||
        ma->config.hidden_size != mb->config.hidden_size || ma->config.depth != mb->config.depth) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s (%s, %zu parameters) and %s (%s, %zu "
                                               "parameters) hold different models",
                             a, ma->config.name, ma->num_params, b, mb->config.name,
                             mb->num_params);
        dit_model_free(ma), dit_model_free(mb);
        return st;
    }
    size_t np = ma->num_params;
    float *x = tensor_alloc(np), *y = tensor_alloc(np);
    double largest = 0;
    if (!x || !y)
        st = tdl_error_raise(TDL_ERR_NOMEM, "ckpt diff: out of memory");
    fprintf(out, "%-10s %-40s %12s %12s\n", "group", "tensor", "max |a - b|", "max |a|");
    for (size_t gi = 0; st == TDL_OK && gi <= TDL_ARRAY_SIZE(train_groups); gi++) {
        const char *g = gi ? train_groups[gi - 1][1] : "model";
        bool ha = true, hb = true;
        if (gi && (ckpt_weights_has_group(a, train_groups[gi - 1][0], &ha) != TDL_OK ||
                   ckpt_weights_has_group(b, train_groups[gi - 1][0], &hb) != TDL_OK))
            ha = hb = false;
        if (!ha || !hb) {
            if (ha != hb)
                fprintf(out, "%-10s only in %s\n", g, ha ? a : b);
            continue;
        }
        if ((st = train_tensors_read(a, g, ma, x)) != TDL_OK ||
            (st = train_tensors_read(b, g, ma, y)) != TDL_OK)
            break;
        for (int k = 0; k < ma->ninfos; k++) {
            const dit_param_info_t *info = &ma->infos[k];
            double d = 0, mag = 0;
            for (size_t j = 0; j < info->numel; j++) {
                double u = x[info->offset + j], w = y[info->offset + j];
                d = fmax(d, fabs(u - w));
                mag = fmax(mag, fabs(u));
            }
            largest = fmax(largest, d);
            fprintf(out, "%-10s %-40s %12.4g %12.4g\n", g, info->name, d, mag);
        }
    }
    if (st == TDL_OK)
        fprintf(out, "largest difference %.6g%s\n", largest, largest == 0 ? " (identical)" : "");
    free(x), free(y);
    dit_model_free(ma), dit_model_free(mb);
    if (st == TDL_OK && largest_out)
        *largest_out = largest;
    return st;
}
