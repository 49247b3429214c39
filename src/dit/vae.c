/* The Stable Diffusion VAE (diffusers' AutoencoderKL: Encoder with DownEncoderBlock2D and
 * Downsample2D, Decoder with UpDecoderBlock2D and Upsample2D, both with UNetMidBlock2D,
 * ResnetBlock2D and Attention; quant_conv and post_quant_conv), one image at a time through a
 * dit_backend_t (the CPU's layers are vae_layers.c, the GPU's cuda/dit.cu). The tensors are listed
 * once (vae_list_build) in the order the forwards run them; the forwards find each by its
 * diffusers name. */
#include "config.h"

#include <math.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dit/backend.h"
#include "dit/vae.h"

/* The convolutions' column buffer, in floats (16 MiB): a band of output rows at a time keeps a
 * 256x256 image's 3x3 convolutions of 256 channels from needing 600 MB of columns. */
#define VAE_COLS_FLOATS ((size_t)4 << 20)

void dit_vae_config_sd(dit_vae_config_t *config_out)
{
    dit_vae_config_t c = {.latent_channels = 4,
                          .in_channels = 3,
                          .out_channels = 3,
                          .num_blocks = 4,
                          .block_out_channels = {128, 256, 512, 512},
                          .layers_per_block = 2,
                          .norm_num_groups = 32,
                          .scaling_factor = 0.18215f};
    *config_out = c;
}

tdl_status_t dit_vae_config_check(const dit_vae_config_t *c)
{
    if (c->latent_channels < 1 || c->latent_channels > 64)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "VAE: latent_channels = %d is outside 1 to 64",
                               c->latent_channels);
    if (c->in_channels < 1 || c->in_channels > 64)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "VAE: in_channels = %d is outside 1 to 64",
                               c->in_channels);
    if (c->out_channels < 1 || c->out_channels > 64)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "VAE: out_channels = %d is outside 1 to 64",
                               c->out_channels);
    if (c->num_blocks < 1 || c->num_blocks > DIT_VAE_MAX_BLOCKS)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "VAE: num_blocks = %d is outside 1 to %d",
                               c->num_blocks, DIT_VAE_MAX_BLOCKS);
    if (c->layers_per_block < 1 || c->layers_per_block > 8)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "VAE: layers_per_block = %d is outside 1 to 8",
                               c->layers_per_block);
    if (c->norm_num_groups < 1 || c->norm_num_groups > 1024)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "VAE: norm_num_groups = %d is outside 1 to 1024",
                               c->norm_num_groups);
    for (int i = 0; i < c->num_blocks; i++) {
        int ch = c->block_out_channels[i];
        if (ch < 1 || ch > 4096 || ch % c->norm_num_groups != 0)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "VAE: block_out_channels[%d] = %d is not a multiple of "
                                   "norm_num_groups (%d) from 1 to 4096",
                                   i, ch, c->norm_num_groups);
    }
    if (!(c->scaling_factor > 0.0f) || !isfinite(c->scaling_factor))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "VAE: scaling_factor = %g is not positive",
                               (double)c->scaling_factor);
    return TDL_OK;
}

int dit_vae_upscale(const dit_vae_config_t *config)
{
    return 1 << (config->num_blocks - 1);
}

/* dst = a "." b, in VAE_NAME bytes (dit_param_info_t's name); every name here fits (the longest,
 * "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", has 50 characters). */
#define VAE_NAME 64
static void name_join(char *dst, const char *a, const char *b)
{
    size_t la = TDL_MIN(strlen(a), (size_t)VAE_NAME - 2);
    size_t lb = TDL_MIN(strlen(b), (size_t)VAE_NAME - 2 - la);
    memcpy(dst, a, la);
    dst[la] = '.';
    memcpy(dst + la + 1, b, lb);
    dst[la + 1 + lb] = '\0';
}

/* ---- the tensors, by diffusers' names ------------------------------------------------------ */

/* Counts the tensors (infos NULL) or fills them, with their offsets in the flat array. */
typedef struct vae_list {
    dit_param_info_t *infos;
    int n;
    size_t offset;
} vae_list_t;

static void list_add(vae_list_t *l, const char *prefix, const char *suffix, int ndim,
                     const int *shape)
{
    size_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= (size_t)shape[d];
    if (l->infos) {
        dit_param_info_t *p = &l->infos[l->n];
        name_join(p->name, prefix, suffix);
        p->ndim = ndim;
        memset(p->shape, 0, sizeof(p->shape));
        memcpy(p->shape, shape, (size_t)ndim * sizeof(int));
        p->offset = l->offset;
        p->numel = numel;
    }
    l->n++;
    l->offset += numel;
}

static void list_conv(vae_list_t *l, const char *prefix, int cin, int cout, int k)
{
    list_add(l, prefix, "weight", 4, (const int[]){cout, cin, k, k});
    list_add(l, prefix, "bias", 1, (const int[]){cout});
}

static void list_linear(vae_list_t *l, const char *prefix, int in, int out)
{
    list_add(l, prefix, "weight", 2, (const int[]){out, in});
    list_add(l, prefix, "bias", 1, (const int[]){out});
}

static void list_norm(vae_list_t *l, const char *prefix, int c)
{
    list_add(l, prefix, "weight", 1, (const int[]){c});
    list_add(l, prefix, "bias", 1, (const int[]){c});
}

static void list_resnet(vae_list_t *l, const char *prefix, int cin, int cout)
{
    char name[VAE_NAME];
    name_join(name, prefix, "norm1");
    list_norm(l, name, cin);
    name_join(name, prefix, "conv1");
    list_conv(l, name, cin, cout, 3);
    name_join(name, prefix, "norm2");
    list_norm(l, name, cout);
    name_join(name, prefix, "conv2");
    list_conv(l, name, cout, cout, 3);
    if (cin != cout) {
        name_join(name, prefix, "conv_shortcut");
        list_conv(l, name, cin, cout, 1);
    }
}

/* UNetMidBlock2D: resnets.0, attentions.0, resnets.1, under prefix ("decoder.mid_block"). */
static void list_mid(vae_list_t *l, const char *prefix, int top)
{
    char name[VAE_NAME];
    const char *attn[] = {"to_q", "to_k", "to_v", "to_out.0"};
    snprintf(name, sizeof(name), "%s.resnets.0", prefix);
    list_resnet(l, name, top, top);
    snprintf(name, sizeof(name), "%s.attentions.0.group_norm", prefix);
    list_norm(l, name, top);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "%s.attentions.0.%s", prefix, attn[i]);
        list_linear(l, name, top, top);
    }
    snprintf(name, sizeof(name), "%s.resnets.1", prefix);
    list_resnet(l, name, top, top);
}

/* The encoder and quant_conv, in the order the forward runs them. */
static void vae_list_encoder(const dit_vae_config_t *c, vae_list_t *l)
{
    int top = c->block_out_channels[c->num_blocks - 1];
    char name[VAE_NAME];
    list_conv(l, "encoder.conv_in", c->in_channels, c->block_out_channels[0], 3);
    int out_ch = c->block_out_channels[0];
    for (int i = 0; i < c->num_blocks; i++) {
        int in_ch = out_ch;
        out_ch = c->block_out_channels[i];
        for (int j = 0; j < c->layers_per_block; j++) {
            snprintf(name, sizeof(name), "encoder.down_blocks.%d.resnets.%d", i, j);
            list_resnet(l, name, j == 0 ? in_ch : out_ch, out_ch);
        }
        if (i != c->num_blocks - 1) {
            snprintf(name, sizeof(name), "encoder.down_blocks.%d.downsamplers.0.conv", i);
            list_conv(l, name, out_ch, out_ch, 3);
        }
    }
    list_mid(l, "encoder.mid_block", top);
    list_norm(l, "encoder.conv_norm_out", top);
    list_conv(l, "encoder.conv_out", top, 2 * c->latent_channels, 3); /* double_z */
    list_conv(l, "quant_conv", 2 * c->latent_channels, 2 * c->latent_channels, 1);
}

/* In the order the forward runs them (diffusers' state_dict has up_blocks before mid_block;
 * an importer goes by name). */
static void vae_list_decoder(const dit_vae_config_t *c, vae_list_t *l)
{
    int top = c->block_out_channels[c->num_blocks - 1];
    char name[VAE_NAME];
    list_conv(l, "post_quant_conv", c->latent_channels, c->latent_channels, 1);
    list_conv(l, "decoder.conv_in", c->latent_channels, top, 3);
    list_mid(l, "decoder.mid_block", top);
    int out_ch = top;
    for (int i = 0; i < c->num_blocks; i++) {
        int in_ch = out_ch;
        out_ch = c->block_out_channels[c->num_blocks - 1 - i];
        for (int j = 0; j < c->layers_per_block + 1; j++) {
            snprintf(name, sizeof(name), "decoder.up_blocks.%d.resnets.%d", i, j);
            list_resnet(l, name, j == 0 ? in_ch : out_ch, out_ch);
        }
        if (i != c->num_blocks - 1) {
            snprintf(name, sizeof(name), "decoder.up_blocks.%d.upsamplers.0.conv", i);
            list_conv(l, name, out_ch, out_ch, 3);
        }
    }
    list_norm(l, "decoder.conv_norm_out", c->block_out_channels[0]);
    list_conv(l, "decoder.conv_out", c->block_out_channels[0], c->out_channels, 3);
}

static void vae_list_build(const dit_vae_config_t *c, int parts, vae_list_t *l)
{
    if (parts & DIT_VAE_ENCODER)
        vae_list_encoder(c, l);
    if (parts & DIT_VAE_DECODER)
        vae_list_decoder(c, l);
}

tdl_status_t dit_vae_create(const dit_vae_config_t *config, dit_vae_t **vae_out)
{
    return dit_vae_create_parts(config, DIT_VAE_DECODER, vae_out);
}

tdl_status_t dit_vae_create_parts(const dit_vae_config_t *config, int parts, dit_vae_t **vae_out)
{
    if (parts < DIT_VAE_DECODER || parts > DIT_VAE_BOTH)
        return tdl_error_raise(
            TDL_ERR_INVALID_ARG,
            "VAE: parts = %d is not the decoder (1), the encoder (2) or both (3)", parts);
    tdl_status_t st = dit_vae_config_check(config);
    if (st != TDL_OK)
        return st;
    vae_list_t count = {0};
    vae_list_build(config, parts, &count);
    dit_vae_t *v = tdl_calloc(1, sizeof(*v));
    if (!v)
        goto err_nomem;
    v->config = *config;
    v->parts = parts;
    v->infos = tdl_calloc((size_t)count.n, sizeof(*v->infos));
    v->params = tensor_alloc(count.offset);
    if (!v->infos || !v->params)
        goto err_free;
    vae_list_t fill = {.infos = v->infos};
    vae_list_build(config, parts, &fill);
    v->ninfos = fill.n;
    v->num_params = fill.offset;
    *vae_out = v;
    return TDL_OK;

err_free:
    dit_vae_free(v);
err_nomem:
    return tdl_error_raise(TDL_ERR_NOMEM, "VAE: out of memory for %zu parameters", count.offset);
}

void dit_vae_free(dit_vae_t *vae)
{
    if (!vae)
        return;
    if (vae->backend_params)
        vae->backend->release(vae->backend->ctx, vae->backend_params);
    dit_backend_close(vae->backend);
    free(vae->params);
    free(vae->infos);
    free(vae);
}

const dit_param_info_t *dit_vae_param(const dit_vae_t *vae, const char *name)
{
    for (int i = 0; i < vae->ninfos; i++)
        if (strcmp(vae->infos[i].name, name) == 0)
            return &vae->infos[i];
    return NULL;
}

void dit_vae_init_weights(dit_vae_t *vae, uint64_t seed)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 0);
    /* A bias follows its weight in the list: it takes that weight's fan-in, or is a norm's. */
    int fan_in = 1;
    bool norm = false;
    for (int i = 0; i < vae->ninfos; i++) {
        const dit_param_info_t *p = &vae->infos[i];
        float *x = vae->params + p->offset;
        bool is_weight = strcmp(p->name + strlen(p->name) - 7, ".weight") == 0;
        if (is_weight) {
            norm = p->ndim == 1;
            fan_in = p->ndim == 4 ? p->shape[1] * p->shape[2] * p->shape[3] : p->shape[1];
        }
        if (norm) {
            for (size_t j = 0; j < p->numel; j++)
                x[j] = is_weight ? 1.0f : 0.0f;
            continue;
        }
        float bound = 1.0f / sqrtf((float)fan_in);
        for (size_t j = 0; j < p->numel; j++)
            x[j] = bound * (2.0f * tdl_rng_uniform(&rng) - 1.0f);
    }
}

/* ---- the backend ---------------------------------------------------------------------------- */

tdl_status_t dit_vae_set_backend(dit_vae_t *vae, struct dit_backend *backend)
{
    if (vae->backend_params)
        vae->backend->release(vae->backend->ctx, vae->backend_params);
    vae->backend_params = NULL;
    if (vae->backend != backend)
        dit_backend_close(vae->backend);
    vae->backend = backend;
    if (!backend || backend->host_memory)
        return TDL_OK;
    if (!(vae->backend_params = backend->alloc(backend->ctx, vae->num_params)))
        return tdl_error_raise(TDL_ERR_NOMEM, "VAE: no %s memory for %zu parameters: %s",
                               backend->name, vae->num_params, tdl_error_get());
    return dit_vae_params_changed(vae);
}

tdl_status_t dit_vae_params_changed(dit_vae_t *vae)
{
    dit_backend_t *be = vae->backend;
    if (!vae->backend_params)
        return TDL_OK;
    be->upload(be->ctx, vae->backend_params, vae->params, vae->num_params);
    return be->finish(be->ctx);
}

/* ---- the forwards --------------------------------------------------------------------------- */

/* One call's buffers, in the backend's memory: x the activation, t1 and t2 free for a layer's
 * outputs. */
typedef struct vae_ws {
    const dit_vae_t *vae;
    const dit_backend_t *be;
    void *ctx;
    const float *params; /* vae->params, or the backend's copy */
    float *x, *t1, *t2;
    float *cols; /* the convolutions' columns, GroupNorm's scratch */
    size_t cols_floats;
    float *attn; /* the mid-block attention's rows and scores */
    int groups;
} vae_ws_t;

static const float *param(const vae_ws_t *ws, const char *prefix, const char *suffix)
{
    char name[VAE_NAME];
    name_join(name, prefix, suffix);
    const dit_param_info_t *p = dit_vae_param(ws->vae, name);
    return p ? ws->params + p->offset : NULL; /* NULL only for a bug in the names */
}

static void swap(float **a, float **b)
{
    float *t = *a;
    *a = *b;
    *b = t;
}

static void conv(vae_ws_t *ws, const char *prefix, float *out, const float *in, int cin, int cout,
                 int h, int w, int k, bool accumulate)
{
    ws->be->vae_conv2d_forward(ws->ctx, out, in, param(ws, prefix, "weight"),
                               param(ws, prefix, "bias"), cin, cout, h, w, k, 1, accumulate,
                               ws->cols, ws->cols_floats);
}

static void norm(vae_ws_t *ws, const char *prefix, float *out, const float *in, int c, int hw,
                 bool silu)
{
    ws->be->vae_groupnorm_forward(ws->ctx, out, in, param(ws, prefix, "weight"),
                                  param(ws, prefix, "bias"), c, hw, ws->groups, silu, ws->cols);
}

/* ResnetBlock2D, x[Cin, H, W] -> x[Cout, H, W]: shortcut(x) + conv2(silu(norm2(conv1(silu(
 * norm1(x)))))), the shortcut a 1x1 convolution where the channels change. */
static void resnet_forward(vae_ws_t *ws, const char *prefix, int cin, int cout, int h, int w)
{
    char name[VAE_NAME];
    size_t hw = (size_t)h * w;
    name_join(name, prefix, "norm1");
    norm(ws, name, ws->t1, ws->x, cin, (int)hw, true);
    name_join(name, prefix, "conv1");
    conv(ws, name, ws->t2, ws->t1, cin, cout, h, w, 3, false);
    name_join(name, prefix, "norm2");
    norm(ws, name, ws->t2, ws->t2, cout, (int)hw, true);
    name_join(name, prefix, "conv2");
    conv(ws, name, ws->t1, ws->t2, cout, cout, h, w, 3, false);
    if (cin != cout) {
        name_join(name, prefix, "conv_shortcut");
        conv(ws, name, ws->t1, ws->x, cin, cout, h, w, 1, true);
    } else {
        ws->be->vae_add(ws->ctx, ws->t1, ws->x, (size_t)cout * hw);
    }
    swap(&ws->x, &ws->t1);
}

/* The mid block's Attention, one head over the h*w positions, in place on x[C, T]:
 * x += to_out(softmax(q k^T / sqrt(C)) v), with q, k, v linears of group_norm(x) as rows [T, C]. */
static void attention_forward(vae_ws_t *ws, const char *prefix, int c, int t)
{
    size_t tc = (size_t)t * c;
    float *buf = ws->attn;
    float *xt = buf, *q = buf + tc, *k = buf + 2 * tc, *v = buf + 3 * tc, *s = buf + 4 * tc;
    char name[VAE_NAME];
    name_join(name, prefix, "group_norm");
    norm(ws, name, ws->t1, ws->x, c, t, false);
    ws->be->vae_transpose(ws->ctx, xt, ws->t1, c, t, false);
    const char *proj[3] = {"to_q", "to_k", "to_v"};
    float *dst[3] = {q, k, v};
    for (int p = 0; p < 3; p++) {
        name_join(name, prefix, proj[p]);
        ws->be->linear_forward(ws->ctx, dst[p], xt, param(ws, name, "weight"),
                               param(ws, name, "bias"), t, c, c, 0);
    }
    float *o = xt; /* xt is spent */
    ws->be->vae_attention_forward(ws->ctx, o, q, k, v, s, t, c);
    name_join(name, prefix, "to_out.0");
    ws->be->linear_forward(ws->ctx, q, o, param(ws, name, "weight"), param(ws, name, "bias"), t,
                           c, c, 0);
    ws->be->vae_transpose(ws->ctx, ws->x, q, t, c, true);
}

/* UNetMidBlock2D on x[top, h, w]: resnet, attention, resnet. */
static void mid_forward(vae_ws_t *ws, const char *prefix, int top, int h, int w)
{
    char name[VAE_NAME];
    snprintf(name, sizeof(name), "%s.resnets.0", prefix);
    resnet_forward(ws, name, top, top, h, w);
    snprintf(name, sizeof(name), "%s.attentions.0", prefix);
    attention_forward(ws, name, top, h * w);
    snprintf(name, sizeof(name), "%s.resnets.1", prefix);
    resnet_forward(ws, name, top, top, h, w);
}

static size_t vae_attn_floats(const dit_vae_config_t *c, int h, int w)
{
    size_t t = (size_t)h * w;
    return 4 * t * (size_t)c->block_out_channels[c->num_blocks - 1] +
           TDL_MIN(t, (size_t)DIT_VAE_ATTN_TILE) * t;
}

/* The largest activation of one image, in floats: what each of x, t1, t2 must hold (t2 also the
 * output image on a device). */
static size_t vae_max_activation(const dit_vae_config_t *c, int h, int w)
{
    int top = c->block_out_channels[c->num_blocks - 1];
    size_t best = (size_t)TDL_MAX(top, c->latent_channels) * h * w;
    int out_ch = top;
    for (int i = 0; i < c->num_blocks; i++) {
        int in_ch = out_ch;
        out_ch = c->block_out_channels[c->num_blocks - 1 - i];
        size_t hw = ((size_t)h << i) * ((size_t)w << i);
        best = TDL_MAX(best, (size_t)TDL_MAX(in_ch, out_ch) * hw);
        if (i != c->num_blocks - 1)
            best = TDL_MAX(best, (size_t)out_ch * 4 * hw);
    }
    size_t s = (size_t)dit_vae_upscale(c);
    return TDL_MAX(best, (size_t)c->out_channels * h * s * w * s);
}

/* What the backend asks for the widest convolution at the full width (every other one needs
 * less), and no less than VAE_COLS_FLOATS. */
static size_t vae_cols_floats(const dit_backend_t *be, const dit_vae_config_t *c, int w)
{
    int widest = c->latent_channels;
    for (int i = 0; i < c->num_blocks; i++)
        widest = TDL_MAX(widest, c->block_out_channels[i]);
    int full = (int)TDL_MIN((size_t)w << (c->num_blocks - 1), (size_t)INT_MAX);
    return TDL_MAX(VAE_COLS_FLOATS, be->vae_conv2d_scratch(widest, full));
}

static const dit_backend_t *vae_backend(const dit_vae_t *vae)
{
    return vae->backend ? vae->backend : dit_backend_cpu();
}

size_t dit_vae_decode_bytes(const dit_vae_config_t *config, int h, int w)
{
    return (3 * vae_max_activation(config, h, w) + vae_cols_floats(dit_backend_cpu(), config, w) +
            vae_attn_floats(config, h, w)) *
           sizeof(float);
}

/* One image: t1 holds latents[latent_channels, h, w] / scaling_factor -> rgb[out_channels, s*h,
 * s*w], in the backend's memory (t2 may be rgb). */
static void decode_one(vae_ws_t *ws, int h, int w, float *rgb)
{
    const dit_vae_config_t *c = &ws->vae->config;
    int top = c->block_out_channels[c->num_blocks - 1];
    conv(ws, "post_quant_conv", ws->x, ws->t1, c->latent_channels, c->latent_channels, h, w, 1,
         false);
    conv(ws, "decoder.conv_in", ws->t1, ws->x, c->latent_channels, top, h, w, 3, false);
    swap(&ws->x, &ws->t1);

    mid_forward(ws, "decoder.mid_block", top, h, w);

    char name[VAE_NAME];
    int out_ch = top;
    for (int i = 0; i < c->num_blocks; i++) {
        int in_ch = out_ch;
        out_ch = c->block_out_channels[c->num_blocks - 1 - i];
        for (int j = 0; j < c->layers_per_block + 1; j++) {
            snprintf(name, sizeof(name), "decoder.up_blocks.%d.resnets.%d", i, j);
            resnet_forward(ws, name, j == 0 ? in_ch : out_ch, out_ch, h, w);
        }
        if (i != c->num_blocks - 1) {
            ws->be->vae_upsample2x_forward(ws->ctx, ws->t1, ws->x, out_ch, h, w);
            h *= 2;
            w *= 2;
            snprintf(name, sizeof(name), "decoder.up_blocks.%d.upsamplers.0.conv", i);
            conv(ws, name, ws->x, ws->t1, out_ch, out_ch, h, w, 3, false);
        }
    }
    norm(ws, "decoder.conv_norm_out", ws->t1, ws->x, out_ch, h * w, true);
    conv(ws, "decoder.conv_out", rgb, ws->t1, out_ch, c->out_channels, h, w, 3, false);
}

/* The call's buffers in the backend's memory: x, t1, t2 of act floats each, the columns (also
 * GroupNorm's scratch), the attention's rows. */
static tdl_status_t ws_alloc(vae_ws_t *ws, const dit_vae_t *vae, size_t act, size_t cols_floats,
                             size_t attn_floats, const char *what)
{
    const dit_backend_t *be = vae_backend(vae);
    int groups = vae->config.norm_num_groups;
    *ws = (vae_ws_t){.vae = vae, .be = be, .ctx = be->ctx, .groups = groups};
    ws->params = vae->backend_params ? vae->backend_params : vae->params;
    /* any layer's groups hold at most act / groups values each */
    cols_floats = TDL_MAX(cols_floats, be->vae_groupnorm_scratch(act / groups + 1, groups));
    ws->cols_floats = cols_floats;
    ws->x = be->alloc(be->ctx, act);
    ws->t1 = be->alloc(be->ctx, act);
    ws->t2 = be->alloc(be->ctx, act);
    ws->cols = be->alloc(be->ctx, cols_floats);
    ws->attn = be->alloc(be->ctx, attn_floats);
    if (ws->x && ws->t1 && ws->t2 && ws->cols && ws->attn)
        return TDL_OK;
    return tdl_error_raise(TDL_ERR_NOMEM, "VAE %s: out of %s memory for %zu bytes", what, be->name,
                           (3 * act + cols_floats + attn_floats) * sizeof(float));
}

static void ws_free(vae_ws_t *ws)
{
    float *bufs[] = {ws->attn, ws->cols, ws->t2, ws->t1, ws->x};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i])
            ws->be->release(ws->ctx, bufs[i]);
}

tdl_status_t dit_vae_decode(const dit_vae_t *vae, const float *latents, int n, int h, int w,
                            float *rgb)
{
    const dit_vae_config_t *c = &vae->config;
    int s = dit_vae_upscale(c);
    if (!(vae->parts & DIT_VAE_DECODER))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "VAE decode: this VAE was created without its decoder");
    if (n < 0 || h < 1 || w < 1 || (int64_t)h * s > 8192 || (int64_t)w * s > 8192)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "VAE decode: %d latents of %dx%d (images up to 8192 a side)", n, h,
                               w);
    size_t in_per = (size_t)c->latent_channels * h * w;
    size_t out_per = (size_t)c->out_channels * h * s * w * s;
    bool host = !vae->backend || vae->backend->host_memory;
    /* A device's images and scaled latents wait in host memory until the whole batch ran. */
    float *stage = NULL, *scaled = NULL;
    vae_ws_t ws;
    tdl_status_t st = ws_alloc(&ws, vae, vae_max_activation(c, h, w),
                               vae_cols_floats(vae_backend(vae), c, w),
                               vae_attn_floats(c, h, w), "decode");
    if (st == TDL_OK && !host &&
        (!(stage = malloc((size_t)n * out_per * sizeof(float) + 1)) ||
         !(scaled = malloc(in_per * sizeof(float)))))
        st = tdl_error_raise(TDL_ERR_NOMEM, "VAE decode: out of memory for %d images", n);
    if (st != TDL_OK)
        goto out;
    for (int i = 0; i < n; i++) {
        const float *lat = latents + i * in_per;
        float *dst = host ? ws.t1 : scaled;
        for (size_t j = 0; j < in_per; j++)
            dst[j] = lat[j] / c->scaling_factor;
        if (host) {
            decode_one(&ws, h, w, rgb + i * out_per);
            continue;
        }
        ws.be->upload(ws.ctx, ws.t1, scaled, in_per);
        decode_one(&ws, h, w, ws.t2);
        ws.be->download(ws.ctx, stage + i * out_per, ws.t2, out_per);
    }
    /* rgb is written only when the whole batch decoded */
    if ((st = ws.be->finish(ws.ctx)) == TDL_OK && !host && n > 0)
        memcpy(rgb, stage, (size_t)n * out_per * sizeof(float));
out:
    free(scaled);
    free(stage);
    ws_free(&ws);
    return st;
}

/* ---- the encoder ------------------------------------------------------------------------------
 */

/* The encoder's largest activation for images of h x w, in floats. */
static size_t enc_max_activation(const dit_vae_config_t *c, int h, int w)
{
    int top = c->block_out_channels[c->num_blocks - 1];
    size_t best = (size_t)TDL_MAX(c->in_channels, c->block_out_channels[0]) * h * w;
    int out_ch = c->block_out_channels[0];
    for (int i = 0; i < c->num_blocks; i++) {
        int in_ch = out_ch;
        out_ch = c->block_out_channels[i];
        size_t hw = ((size_t)h >> i) * ((size_t)w >> i);
        best = TDL_MAX(best, (size_t)TDL_MAX(in_ch, out_ch) * hw);
    }
    int s = dit_vae_upscale(c);
    return TDL_MAX(best, (size_t)TDL_MAX(top, 2 * c->latent_channels) * (h / s) * (w / s));
}

static size_t enc_cols_floats(const dit_backend_t *be, const dit_vae_config_t *c, int w)
{
    int widest = TDL_MAX(c->in_channels, 2 * c->latent_channels);
    for (int i = 0; i < c->num_blocks; i++)
        widest = TDL_MAX(widest, c->block_out_channels[i]);
    return TDL_MAX(VAE_COLS_FLOATS, be->vae_conv2d_scratch(widest, w));
}

size_t dit_vae_encode_bytes(const dit_vae_config_t *config, int h, int w)
{
    int s = dit_vae_upscale(config);
    return (3 * enc_max_activation(config, h, w) + enc_cols_floats(dit_backend_cpu(), config, w) +
            vae_attn_floats(config, h / s, w / s)) *
           sizeof(float);
}

/* One image: rgb[in_channels, h, w] -> moments[2 * latent_channels, h/s, w/s], in the backend's
 * memory (rgb may be t2, moments t1). */
static void encode_one(vae_ws_t *ws, const float *rgb, int h, int w, float *moments)
{
    const dit_vae_config_t *c = &ws->vae->config;
    int top = c->block_out_channels[c->num_blocks - 1], z = 2 * c->latent_channels;
    conv(ws, "encoder.conv_in", ws->x, rgb, c->in_channels, c->block_out_channels[0], h, w, 3,
         false);
    char name[VAE_NAME];
    int out_ch = c->block_out_channels[0];
    for (int i = 0; i < c->num_blocks; i++) {
        int in_ch = out_ch;
        out_ch = c->block_out_channels[i];
        for (int j = 0; j < c->layers_per_block; j++) {
            snprintf(name, sizeof(name), "encoder.down_blocks.%d.resnets.%d", i, j);
            resnet_forward(ws, name, j == 0 ? in_ch : out_ch, out_ch, h, w);
        }
        if (i != c->num_blocks - 1) {
            snprintf(name, sizeof(name), "encoder.down_blocks.%d.downsamplers.0.conv", i);
            ws->be->vae_conv2d_forward(ws->ctx, ws->t1, ws->x, param(ws, name, "weight"),
                                       param(ws, name, "bias"), out_ch, out_ch, h, w, 3, 2, false,
                                       ws->cols, ws->cols_floats);
            swap(&ws->x, &ws->t1);
            h /= 2;
            w /= 2;
        }
    }
    mid_forward(ws, "encoder.mid_block", top, h, w);
    norm(ws, "encoder.conv_norm_out", ws->t1, ws->x, top, h * w, true);
    conv(ws, "encoder.conv_out", ws->t2, ws->t1, top, z, h, w, 3, false);
    conv(ws, "quant_conv", moments, ws->t2, z, z, h, w, 1, false);
}

/* dst[lat] = scaling_factor * (the mean, or a sample of image `index` of the call) of m[2 * lat],
 * the mean then logvar. */
static void moments_to_latents(const dit_vae_config_t *c, const float *m, size_t lat,
                               const dit_vae_sample_t *sample, int index, float *dst)
{
    tdl_rng_t rng;
    if (sample)
        tdl_rng_init(&rng, sample->seed, sample->first + (uint64_t)index);
    for (size_t j = 0; j < lat; j++) {
        float z = m[j];
        if (sample) {
            float logvar = fminf(fmaxf(m[lat + j], -30.0f), 20.0f);
            z += expf(0.5f * logvar) * tdl_rng_normal(&rng);
        }
        dst[j] = c->scaling_factor * z;
    }
}

/* The encoder over the batch: each image's moments into out (moments_only), or its latents, the
 * mean or a sample, scaled. */
static tdl_status_t encode_batch(const dit_vae_t *vae, const float *rgb, int n, int h, int w,
                                 const dit_vae_sample_t *sample, float *out, bool moments_only)
{
    const dit_vae_config_t *c = &vae->config;
    int s = dit_vae_upscale(c);
    if (!(vae->parts & DIT_VAE_ENCODER))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "VAE encode: this VAE was created without its encoder");
    if (n < 0 || h < s || w < s || h % s || w % s || h > 8192 || w > 8192)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "VAE encode: %d images of %dx%d: each side must be a multiple of "
                               "%d, up to 8192",
                               n, h, w, s);
    size_t lat = (size_t)c->latent_channels * (h / s) * (w / s);
    size_t in_per = (size_t)c->in_channels * h * w;
    bool host = !vae->backend || vae->backend->host_memory;
    float *stage = NULL; /* a device's moments of every image, until the whole batch ran */
    vae_ws_t ws;
    tdl_status_t st = ws_alloc(&ws, vae, enc_max_activation(c, h, w),
                               enc_cols_floats(vae_backend(vae), c, w),
                               vae_attn_floats(c, h / s, w / s), "encode");
    if (st == TDL_OK && !host && !(stage = malloc((size_t)n * 2 * lat * sizeof(float) + 1)))
        st = tdl_error_raise(TDL_ERR_NOMEM, "VAE encode: out of memory for %d images", n);
    if (st != TDL_OK)
        goto out;
    for (int i = 0; i < n; i++) {
        float *m = ws.t1; /* free once conv_out has read it (encode_one swaps ws.t1) */
        if (!host) {
            ws.be->upload(ws.ctx, ws.t2, rgb + i * in_per, in_per);
            encode_one(&ws, ws.t2, h, w, m);
            ws.be->download(ws.ctx, stage + i * 2 * lat, m, 2 * lat);
        } else if (moments_only) {
            encode_one(&ws, rgb + i * in_per, h, w, out + i * 2 * lat);
        } else {
            encode_one(&ws, rgb + i * in_per, h, w, m);
            moments_to_latents(c, m, lat, sample, i, out + i * lat);
        }
    }
    /* out is written only when the whole batch encoded */
    if ((st = ws.be->finish(ws.ctx)) != TDL_OK || host)
        goto out;
    for (int i = 0; i < n; i++)
        if (moments_only)
            memcpy(out + i * 2 * lat, stage + i * 2 * lat, 2 * lat * sizeof(float));
        else
            moments_to_latents(c, stage + i * 2 * lat, lat, sample, i, out + i * lat);
out:
    free(stage);
    ws_free(&ws);
    return st;
}

tdl_status_t dit_vae_encode_moments(const dit_vae_t *vae, const float *rgb, int n, int h, int w,
                                    float *moments)
{
    return encode_batch(vae, rgb, n, h, w, NULL, moments, true);
}

tdl_status_t dit_vae_encode(const dit_vae_t *vae, const float *rgb, int n, int h, int w,
                            const dit_vae_sample_t *sample, float *latents)
{
    return encode_batch(vae, rgb, n, h, w, sample, latents, false);
}
