/* VAE weights in HDF5 (through src/ckpt, doc/vae.md): /model/<diffusers name> float32 with
 * Fletcher32, as model.h5 stores the DiT's, and the configuration as root attributes. A file
 * holds the encoder, the decoder or both; loading takes the halves asked for, every name and
 * shape checked, and refuses a tensor that maps to no part of the VAE. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "train/train.h"
#include "train/train_internal.h"

#define VAE_KIND "vae"
#define VAE_HINT "see doc/vae.md for the VAE weights file"

static const char *parts_name(int parts)
{
    return parts == DIT_VAE_BOTH      ? "encoder+decoder"
           : parts == DIT_VAE_ENCODER ? "encoder"
                                      : "decoder";
}

static ckpt_tensor_t *tensors_of(const dit_vae_t *vae)
{
    return train_tensors_of_infos(vae->infos, vae->ninfos, vae->params);
}

tdl_status_t train_vae_save(const char *path, const dit_vae_t *vae)
{
    const dit_vae_config_t *c = &vae->config;
    char blocks[8 * DIT_VAE_MAX_BLOCKS] = "";
    for (int i = 0; i < c->num_blocks; i++)
        snprintf(blocks + strlen(blocks), sizeof(blocks) - strlen(blocks), "%s%d", i ? "," : "",
                 c->block_out_channels[i]);
    ckpt_tensor_t *t = tensors_of(vae);
    if (!t)
        return tdl_error_raise(TDL_ERR_NOMEM, "saving %s: out of memory", path);
    const ckpt_attr_t attrs[] = {
        {.key = "kind", .type = CKPT_ATTR_STRING, .s = VAE_KIND},
        {.key = "vae_class", .type = CKPT_ATTR_STRING, .s = "AutoencoderKL"},
        {.key = "parts", .type = CKPT_ATTR_STRING, .s = parts_name(vae->parts)},
        {.key = "latent_channels", .type = CKPT_ATTR_INT, .i = c->latent_channels},
        {.key = "in_channels", .type = CKPT_ATTR_INT, .i = c->in_channels},
        {.key = "out_channels", .type = CKPT_ATTR_INT, .i = c->out_channels},
        {.key = "block_out_channels", .type = CKPT_ATTR_STRING, .s = blocks},
        {.key = "layers_per_block", .type = CKPT_ATTR_INT, .i = c->layers_per_block},
        {.key = "norm_num_groups", .type = CKPT_ATTR_INT, .i = c->norm_num_groups},
        {.key = "scaling_factor", .type = CKPT_ATTR_DOUBLE, .d = c->scaling_factor},
    };
    tdl_status_t st =
        ckpt_weights_write(path, t, NULL, vae->ninfos, attrs, (int)TDL_ARRAY_SIZE(attrs));
    free(t);
    return st;
}

static tdl_status_t read_int(const char *path, const char *key, int *out)
{
    int64_t v;
    tdl_status_t st = ckpt_attr_read_int(path, key, &v);
    if (st != TDL_OK)
        return st;
    if (v < -1000000 || v > 1000000)
        return tdl_error_raise(TDL_ERR_MISMATCH, "%s: the attribute %s is %lld: %s", path, key,
                               (long long)v, VAE_HINT);
    *out = (int)v;
    return TDL_OK;
}

tdl_status_t train_vae_read_config(const char *path, dit_vae_config_t *config_out, int *parts_out)
{
    char *kind = NULL, *blocks = NULL, *parts = NULL;
    tdl_status_t st = ckpt_attr_read_string(path, "kind", &kind);
    if (st == TDL_ERR_NOT_FOUND || (st == TDL_OK && strcmp(kind, VAE_KIND) != 0)) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s is not a VAE weights file (its root attribute kind is %s, not "
                             "\"vae\"): %s",
                             path, kind ? kind : "missing", VAE_HINT);
        goto out;
    }
    if (st != TDL_OK)
        goto out;
    dit_vae_config_t c;
    dit_vae_config_sd(&c);
    double scale;
    if ((st = read_int(path, "latent_channels", &c.latent_channels)) != TDL_OK ||
        (st = read_int(path, "in_channels", &c.in_channels)) != TDL_OK ||
        (st = read_int(path, "out_channels", &c.out_channels)) != TDL_OK ||
        (st = read_int(path, "layers_per_block", &c.layers_per_block)) != TDL_OK ||
        (st = read_int(path, "norm_num_groups", &c.norm_num_groups)) != TDL_OK ||
        (st = ckpt_attr_read_double(path, "scaling_factor", &scale)) != TDL_OK ||
        (st = ckpt_attr_read_string(path, "block_out_channels", &blocks)) != TDL_OK ||
        (st = ckpt_attr_read_string(path, "parts", &parts)) != TDL_OK)
        goto out;
    c.scaling_factor = (float)scale;
    c.num_blocks = 0;
    char *s = blocks, *end;
    while (*s && c.num_blocks < DIT_VAE_MAX_BLOCKS) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || (*end && *end != ','))
            break;
        c.block_out_channels[c.num_blocks++] = (int)v;
        s = *end ? end + 1 : end;
    }
    if (*s || c.num_blocks == 0) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s: block_out_channels \"%s\" is not up to %d widths separated by "
                             "commas: %s",
                             path, blocks, DIT_VAE_MAX_BLOCKS, VAE_HINT);
        goto out;
    }
    int p = !strcmp(parts, "encoder+decoder") ? DIT_VAE_BOTH
            : !strcmp(parts, "encoder")       ? DIT_VAE_ENCODER
            : !strcmp(parts, "decoder")       ? DIT_VAE_DECODER
                                              : 0;
    if (!p) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s: parts \"%s\" is not encoder, decoder or encoder+decoder: %s",
                             path, parts, VAE_HINT);
        goto out;
    }
    if ((st = dit_vae_config_check(&c)) != TDL_OK) {
        char why[400];
        snprintf(why, sizeof(why), "%s", tdl_error_get());
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: %s", path, why);
        goto out;
    }
    *config_out = c;
    *parts_out = p;
out:
    free(parts);
    free(blocks);
    free(kind);
    return st;
}

tdl_status_t train_vae_load(const char *path, int parts, dit_vae_t **vae_out)
{
    dit_vae_config_t c;
    int has;
    tdl_status_t st = train_vae_read_config(path, &c, &has);
    if (st != TDL_OK)
        return st;
    if ((has & parts) != parts)
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "%s holds the VAE's %s; the %s is needed", path,
                               parts_name(has), parts_name(parts & ~has));
    dit_vae_t *vae = NULL, *all = NULL;
    ckpt_tensor_t *t = NULL;
    char **names = NULL;
    int nnames = 0;
    if ((st = dit_vae_create_parts(&c, parts, &vae)) != TDL_OK ||
        (st = dit_vae_create_parts(&c, DIT_VAE_BOTH, &all)) != TDL_OK ||
        (st = ckpt_group_names(path, "model", &names, &nnames)) != TDL_OK)
        goto err;
    /* a tensor that is neither half's under this configuration was meant for another model */
    for (int i = 0; i < nnames; i++)
        if (!dit_vae_param(all, names[i])) {
            st = tdl_error_raise(TDL_ERR_MISMATCH,
                                 "%s: /model/%s is no tensor of the VAE (%s, blocks %d, %d "
                                 "layers a block): it does not map; %s",
                                 path, names[i], parts_name(has), c.num_blocks, c.layers_per_block,
                                 VAE_HINT);
            goto err;
        }
    if (!(t = tensors_of(vae))) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "loading %s: out of memory", path);
        goto err;
    }
    if ((st = ckpt_weights_read(path, "model", t, vae->ninfos)) != TDL_OK)
        goto err;
    for (size_t i = 0; i < vae->num_params; i++)
        if (!isfinite(vae->params[i])) {
            st = tdl_error_raise(TDL_ERR_CORRUPT, "%s: the VAE's weights hold NaN or Inf", path);
            goto err;
        }
    free(t);
    ckpt_names_free(names);
    dit_vae_free(all);
    *vae_out = vae;
    return TDL_OK;

err:
    free(t);
    ckpt_names_free(names);
    dit_vae_free(all);
    dit_vae_free(vae);
    return st;
}
