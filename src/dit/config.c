/* Named DiT configurations: the reference's S, B, L, XL with patch 2, 4, 8, a tiny one for tests
 * and the Fashion-MNIST default. */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "dit/dit.h"

typedef struct {
    const char *name;
    int hidden, depth, heads;
} dit_size_t;

static const dit_size_t reference_sizes[] = {
    {"S", 384, 12, 6}, {"B", 768, 12, 12}, {"L", 1024, 24, 16}, {"XL", 1152, 28, 16}};

const char *dit_config_names(void)
{
    return "tiny|fmnist|DiT-S/2|DiT-S/4|DiT-S/8|DiT-B/2|DiT-B/4|DiT-B/8|DiT-L/2|DiT-L/4|DiT-L/8|"
           "DiT-XL/2|DiT-XL/4|DiT-XL/8";
}

int dit_config_mlp_hidden(const dit_config_t *config)
{
    return (int)(config->hidden_size * config->mlp_ratio);
}

int dit_config_out_channels(const dit_config_t *config)
{
    return config->learn_sigma ? 2 * config->in_channels : config->in_channels;
}

const char *dit_objective_name(dit_objective_t objective)
{
    return objective == DIT_OBJECTIVE_DDPM ? "ddpm" : "rf";
}

tdl_status_t dit_objective_parse(const char *name, dit_objective_t *objective_out)
{
    if (!strcmp(name, "rf") || !strcmp(name, "ddpm")) {
        *objective_out = !strcmp(name, "rf") ? DIT_OBJECTIVE_RF : DIT_OBJECTIVE_DDPM;
        return TDL_OK;
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG,
                           "unknown objective '%s': use rf (rectified flow) or ddpm (Gaussian "
                           "diffusion)",
                           name);
}

static void config_set(dit_config_t *c, const char *name, int input, int patch, int channels,
                       int hidden, int depth, int heads, int classes)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->input_size = input;
    c->patch_size = patch;
    c->in_channels = channels;
    c->hidden_size = hidden;
    c->depth = depth;
    c->num_heads = heads;
    c->mlp_ratio = 4.0;
    c->num_classes = classes;
    c->class_dropout_prob = 0.1;
}

tdl_status_t dit_config_named(const char *name, dit_config_t *config_out)
{
    dit_config_t c;
    if (!strcmp(name, "tiny")) {
        config_set(&c, "tiny", 8, 2, 1, 32, 2, 4, 10);
    } else if (!strcmp(name, "fmnist")) {
        /* 32x32 Fashion-MNIST in 64 tokens: small enough to train to recognizable samples on a
         * few CPU cores in minutes. */
        config_set(&c, "fmnist", 32, 4, 1, 128, 4, 4, 10);
    } else {
        const char *n = strncmp(name, "DiT-", 4) == 0 ? name + 4 : name;
        const char *slash = strchr(n, '/');
        int patch = slash ? slash[1] - '0' : 0;
        const dit_size_t *size = NULL;
        for (size_t i = 0; slash && i < TDL_ARRAY_SIZE(reference_sizes); i++)
            if (strlen(reference_sizes[i].name) == (size_t)(slash - n) &&
                strncmp(n, reference_sizes[i].name, (size_t)(slash - n)) == 0)
                size = &reference_sizes[i];
        if (!size || slash[2] != '\0' || (patch != 2 && patch != 4 && patch != 8))
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "unknown DiT configuration '%s': use %s",
                                   name, dit_config_names());
        char full[32];
        snprintf(full, sizeof(full), "DiT-%s/%d", size->name, patch);
        /* The reference's latent-space defaults: 32x32x4 latents, 1000 classes. */
        config_set(&c, full, 32, patch, 4, size->hidden, size->depth, size->heads, 1000);
        c.learn_sigma = 1; /* the reference's default: the output's second half is the variance */
    }
    *config_out = c;
    return TDL_OK;
}

/* The sizes tidal's DiT supports. They lie far beyond any real DiT (DiT-XL: hidden 1152, depth
 * 28, 1000 classes) and keep every tensor dimension, and the count of parameters, far from
 * overflowing an int or memory: a configuration read from a file is held to them before anything
 * is allocated. */
typedef struct {
    const char *field;
    size_t offset;
    int min, max;
} dit_int_field_t;

static const dit_int_field_t int_fields[] = {
    {"input_size", offsetof(dit_config_t, input_size), 1, 4096},
    {"patch_size", offsetof(dit_config_t, patch_size), 1, 64},
    {"in_channels", offsetof(dit_config_t, in_channels), 1, 1024},
    {"hidden_size", offsetof(dit_config_t, hidden_size), 4, 16384},
    {"depth", offsetof(dit_config_t, depth), 1, 1024},
    {"num_heads", offsetof(dit_config_t, num_heads), 1, 1024},
    {"num_classes", offsetof(dit_config_t, num_classes), 1, 1000000},
    {"learn_sigma", offsetof(dit_config_t, learn_sigma), 0, 1},
};

#define DIT_MLP_RATIO_MAX 64.0
/* 16 GiB a copy in float32; DiT-XL/2 has 675 M */
#define DIT_PARAMS_MAX 4294967296.0

static const dit_int_field_t *int_field(const char *field)
{
    for (size_t i = 0; i < TDL_ARRAY_SIZE(int_fields); i++)
        if (!strcmp(int_fields[i].field, field))
            return &int_fields[i];
    return NULL;
}

tdl_status_t dit_config_set_int(dit_config_t *c, const char *field, int64_t value)
{
    const dit_int_field_t *f = int_field(field);
    if (!f)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "DiT config: no size field '%s'", field);
    if (value < f->min || value > f->max)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "%s = %lld is outside %d to %d, the sizes tidal's DiT supports",
                               field, (long long)value, f->min, f->max);
    *(int *)((char *)c + f->offset) = (int)value;
    return TDL_OK;
}

tdl_status_t dit_config_set_double(dit_config_t *c, const char *field, double value)
{
    bool mlp = !strcmp(field, "mlp_ratio");
    if (!mlp && strcmp(field, "class_dropout_prob") != 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "DiT config: no real-valued field '%s'", field);
    /* written as !(inside) so that NaN is outside too */
    if (mlp ? !(value > 0 && value <= DIT_MLP_RATIO_MAX) : !(value >= 0 && value < 1))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s = %g is outside %s", field, value,
                               mlp ? "(0, 64]" : "[0, 1)");
    *(mlp ? &c->mlp_ratio : &c->class_dropout_prob) = value;
    return TDL_OK;
}

/* What params_layout (model.c) allocates, in double: it must not overflow to be compared. */
static double config_params(const dit_config_t *c)
{
    double d = c->hidden_size, mh = dit_config_mlp_hidden(c);
    double pd = (double)c->patch_size * c->patch_size * c->in_channels;
    double po = (double)c->patch_size * c->patch_size * dit_config_out_channels(c);
    double embed = d * pd + d + d * DIT_FREQ_DIM + d + d * d + d + (c->num_classes + 1.0) * d;
    double block = 3 * d * d + 3 * d + d * d + d + 2 * mh * d + mh + d + 6 * d * d + 6 * d;
    return embed + c->depth * block + po * d + po + 2 * d * d + 2 * d;
}

tdl_status_t dit_config_check(const dit_config_t *c)
{
    for (size_t i = 0; i < TDL_ARRAY_SIZE(int_fields); i++) {
        const dit_int_field_t *f = &int_fields[i];
        int v = *(const int *)((const char *)c + f->offset);
        if (v < f->min || v > f->max)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "DiT config '%s': %s = %d is outside %d to %d, the sizes "
                                   "tidal's DiT supports",
                                   c->name, f->field, v, f->min, f->max);
    }
    if (c->objective != DIT_OBJECTIVE_RF && c->objective != DIT_OBJECTIVE_DDPM)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': objective %d is neither rf "
                               "nor ddpm",
                               c->name, (int)c->objective);
    dit_config_t copy = *c;
    tdl_status_t st = dit_config_set_double(&copy, "mlp_ratio", c->mlp_ratio);
    if (st == TDL_OK)
        st = dit_config_set_double(&copy, "class_dropout_prob", c->class_dropout_prob);
    if (st != TDL_OK)
        return tdl_error_raise(st, "DiT config '%s': %s", c->name, tdl_error_get());
    if (c->hidden_size % c->num_heads != 0 || c->hidden_size % 4 != 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': hidden_size %d must be a multiple of 4 and of "
                               "num_heads %d",
                               c->name, c->hidden_size, c->num_heads);
    if (c->input_size < c->patch_size || c->input_size % c->patch_size != 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': input_size %d is not a multiple of patch_size %d",
                               c->name, c->input_size, c->patch_size);
    if (dit_config_mlp_hidden(c) < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': hidden_size %d times mlp_ratio %g leaves the MLP "
                               "no width",
                               c->name, c->hidden_size, c->mlp_ratio);
    double np = config_params(c);
    if (np > DIT_PARAMS_MAX)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': %.3g parameters (hidden_size %d, depth %d, "
                               "mlp_ratio %g, num_classes %d) are more than the %.3g tidal's DiT "
                               "supports",
                               c->name, np, c->hidden_size, c->depth, c->mlp_ratio, c->num_classes,
                               DIT_PARAMS_MAX);
    return TDL_OK;
}
