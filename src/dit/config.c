/* Named DiT configurations: the reference's S, B, L, XL with patch 2, 4, 8, a tiny one for tests
 * and the Fashion-MNIST default. */
#include "config.h"

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
    }
    *config_out = c;
    return TDL_OK;
}

tdl_status_t dit_config_check(const dit_config_t *c)
{
    if (c->patch_size < 1 || c->in_channels < 1 || c->depth < 1 || c->num_heads < 1 ||
        c->num_classes < 1 || c->input_size < c->patch_size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': sizes must be positive (patch %d, channels %d, "
                               "depth %d, heads %d, classes %d, input %d)",
                               c->name, c->patch_size, c->in_channels, c->depth, c->num_heads,
                               c->num_classes, c->input_size);
    if (c->hidden_size % c->num_heads != 0 || c->hidden_size % 4 != 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': hidden size %d must be a multiple of 4 and of "
                               "the %d heads",
                               c->name, c->hidden_size, c->num_heads);
    if (c->input_size % c->patch_size != 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': input size %d is not a multiple of patch %d",
                               c->name, c->input_size, c->patch_size);
    if (c->mlp_ratio <= 0 || c->class_dropout_prob < 0 || c->class_dropout_prob >= 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "DiT config '%s': mlp_ratio %g or class dropout %g out of range",
                               c->name, c->mlp_ratio, c->class_dropout_prob);
    return TDL_OK;
}
