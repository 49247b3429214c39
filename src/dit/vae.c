/* The Stable Diffusion VAE (diffusers' AutoencoderKL: Encoder with DownEncoderBlock2D and
 * Downsample2D, Decoder with UpDecoderBlock2D and Upsample2D, both with UNetMidBlock2D,
 * ResnetBlock2D and Attention; quant_conv and post_quant_conv), one image at a time on the CPU.
 * The tensors are listed once (vae_list_build) in the order the forwards run them; the forwards
 * find each by its diffusers name. */
#include "config.h"

/* Without trapping math GCC turns SiLU's clamps (dit/activation.h) into min and max and
 * vectorizes the element-wise loops; they were scalar, 11% of a decode. Before the includes, so
 * that dit_silu is compiled with the same options and inlines into the loops. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/activation.h"
#include "dit/vae.h"

#define VAE_EPS 1e-6
/* The convolutions' column buffer, in floats (16 MiB): a band of output rows at a time keeps a
 * 256x256 image's 3x3 convolutions of 256 channels from needing 600 MB of columns. */
#define VAE_COLS_FLOATS ((size_t)4 << 20)
/* Query rows of the mid-block attention whose scores are held at once. */
#define VAE_ATTN_TILE 256
/* The element-wise loops (GroupNorm, SiLU, sums, bias, residual) in the widest vectors this CPU
 * has. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define VAE_VEC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VAE_VEC
#endif

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

/* ---- layers -------------------------------------------------------------------------------- */

/* The sum of x[i] - m (squared when sq) over n values: in float lanes over chunks of 256, so
 * that it vectorizes, the chunks added in double, so that a group of 65536 values sums as
 * accurately as one of 256. */
VAE_VEC static double sum_chunked(const float *x, size_t n, float m, bool sq)
{
    double total = 0;
    for (size_t c0 = 0; c0 < n; c0 += 256) {
        size_t c1 = TDL_MIN(n, c0 + 256);
        float lane[8] = {0};
        size_t i = c0;
        for (; i + 8 <= c1; i += 8)
            for (int l = 0; l < 8; l++) {
                float d = x[i + l] - m;
                lane[l] += sq ? d * d : d;
            }
        for (; i < c1; i++) {
            float d = x[i] - m;
            lane[0] += sq ? d * d : d;
        }
        for (int l = 0; l < 8; l++)
            total += lane[l];
    }
    return total;
}

/* y = x * a + b, then SiLU when silu. */
VAE_VEC static void norm_apply(float *y, const float *x, float a, float b, int n, bool silu)
{
    if (silu)
        for (int i = 0; i < n; i++)
            y[i] = dit_silu(x[i] * a + b);
    else
        for (int i = 0; i < n; i++)
            y[i] = x[i] * a + b;
}

void dit_vae_groupnorm_forward(float *out, const float *in, const float *weight, const float *bias,
                               int c, int hw, int groups, bool silu)
{
    int per = c / groups;
    size_t n = (size_t)per * hw;
    for (int g = 0; g < groups; g++) {
        const float *x = in + (size_t)g * n;
        float m = (float)(sum_chunked(x, n, 0.0f, false) / (double)n);
        double var = sum_chunked(x, n, m, true) / (double)n;
        float rstd = (float)(1.0 / sqrt(var + VAE_EPS));
        for (int ch = g * per; ch < (g + 1) * per; ch++) {
            const float *xc = in + (size_t)ch * hw;
            float *yc = out + (size_t)ch * hw;
            float a = rstd * weight[ch], b = bias[ch] - m * a;
            norm_apply(yc, xc, a, b, hw, silu);
        }
    }
}

/* cols[Cin*9, (r1-r0)*W] of output rows r0 to r1, zero beyond the edges (padding 1); the
 * columns x0 to x1 of a tap read inside the row, and are copied whole. */
static void im2col3(float *cols, const float *in, int cin, int h, int w, int r0, int r1)
{
    size_t ncol = (size_t)(r1 - r0) * w;
    for (int ci = 0; ci < cin; ci++)
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                float *row = cols + ((size_t)ci * 9 + ky * 3 + kx) * ncol;
                int x0 = TDL_MAX(0, 1 - kx), x1 = TDL_MIN(w, w + 1 - kx);
                for (int y = r0; y < r1; y++) {
                    float *dst = row + (size_t)(y - r0) * w;
                    int sy = y + ky - 1;
                    if (sy < 0 || sy >= h || x1 <= x0) {
                        memset(dst, 0, (size_t)w * sizeof(float));
                        continue;
                    }
                    const float *src = in + ((size_t)ci * h + sy) * w + (kx - 1);
                    if (x0 > 0)
                        dst[0] = 0.0f;
                    memcpy(dst + x0, src + x0, (size_t)(x1 - x0) * sizeof(float));
                    if (x1 < w)
                        dst[w - 1] = 0.0f;
                }
            }
}

/* cols[Cin*9, (r1-r0)*Wo] of output rows r0 to r1 of the stride-2 convolution of Downsample2D:
 * output (y, x) tap (ky, kx) reads in[2y + ky][2x + kx], zero past the bottom and right edges
 * (its padding (0, 1, 0, 1)); nothing is padded at the top or left. */
static void im2col3_down(float *cols, const float *in, int cin, int h, int w, int wo, int r0,
                         int r1)
{
    size_t ncol = (size_t)(r1 - r0) * wo;
    for (int ci = 0; ci < cin; ci++)
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                float *row = cols + ((size_t)ci * 9 + ky * 3 + kx) * ncol;
                for (int y = r0; y < r1; y++) {
                    float *dst = row + (size_t)(y - r0) * wo;
                    int sy = 2 * y + ky;
                    if (sy >= h) {
                        memset(dst, 0, (size_t)wo * sizeof(float));
                        continue;
                    }
                    const float *src = in + ((size_t)ci * h + sy) * w + kx;
                    for (int x = 0; x < wo; x++)
                        dst[x] = 2 * x + kx < w ? src[2 * x] : 0.0f;
                }
            }
}

/* out[Cout, Ho*Wo] holds the bias (or what to add to) already, beta 1, or nothing, beta 0. */
static void conv3_banded(float *out, const float *in, const float *weight, int cin, int cout, int h,
                         int w, int stride, float beta, float *cols, size_t cols_floats)
{
    int ho = stride == 1 ? h : h / 2, wo = stride == 1 ? w : w / 2;
    size_t per_row = (size_t)cin * 9 * wo;
    int band = (int)TDL_MIN((size_t)ho, TDL_MAX((size_t)1, cols_floats / per_row));
    for (int r0 = 0; r0 < ho; r0 += band) {
        int r1 = TDL_MIN(ho, r0 + band), ncol = (r1 - r0) * wo;
        if (stride == 1)
            im2col3(cols, in, cin, h, w, r0, r1);
        else
            im2col3_down(cols, in, cin, h, w, wo, r0, r1);
        tensor_gemm(false, false, cout, ncol, cin * 9, 1.0f, weight, cin * 9, cols, ncol, beta,
                    out + (size_t)r0 * wo, ho * wo);
    }
}

VAE_VEC static void bias_fill(float *out, const float *bias, int cout, size_t hw, bool accumulate)
{
    for (int o = 0; o < cout; o++) {
        float *y = out + (size_t)o * hw;
        for (size_t i = 0; i < hw; i++)
            y[i] = accumulate ? y[i] + bias[o] : bias[o];
    }
}

void dit_vae_conv2d_forward(float *out, const float *in, const float *weight, const float *bias,
                            int cin, int cout, int h, int w, int k, bool accumulate, float *cols,
                            size_t cols_floats)
{
    size_t hw = (size_t)h * w;
    if (bias)
        bias_fill(out, bias, cout, hw, accumulate);
    float beta = bias || accumulate ? 1.0f : 0.0f;
    if (k == 1) {
        tensor_gemm(false, false, cout, (int)hw, cin, 1.0f, weight, cin, in, (int)hw, beta, out,
                    (int)hw);
        return;
    }
    conv3_banded(out, in, weight, cin, cout, h, w, 1, beta, cols, cols_floats);
}

void dit_vae_conv2d_down_forward(float *out, const float *in, const float *weight,
                                 const float *bias, int cin, int cout, int h, int w, float *cols,
                                 size_t cols_floats)
{
    if (bias)
        bias_fill(out, bias, cout, (size_t)(h / 2) * (w / 2), false);
    conv3_banded(out, in, weight, cin, cout, h, w, 2, bias ? 1.0f : 0.0f, cols, cols_floats);
}

/* ---- the forwards --------------------------------------------------------------------------- */

/* One image's buffers: x the activation, t1 and t2 free for a layer's outputs. */
typedef struct vae_ws {
    const dit_vae_t *vae;
    float *x, *t1, *t2;
    float *cols;
    size_t cols_floats;
    float *attn; /* the mid-block attention's rows and scores */
    int groups;
} vae_ws_t;

static const float *param(const dit_vae_t *vae, const char *prefix, const char *suffix)
{
    char name[VAE_NAME];
    name_join(name, prefix, suffix);
    const dit_param_info_t *p = dit_vae_param(vae, name);
    return p ? vae->params + p->offset : NULL; /* NULL only for a bug in the names */
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
    dit_vae_conv2d_forward(out, in, param(ws->vae, prefix, "weight"),
                           param(ws->vae, prefix, "bias"), cin, cout, h, w, k, accumulate, ws->cols,
                           ws->cols_floats);
}

static void norm(vae_ws_t *ws, const char *prefix, float *out, const float *in, int c, int hw,
                 bool silu)
{
    dit_vae_groupnorm_forward(out, in, param(ws->vae, prefix, "weight"),
                              param(ws->vae, prefix, "bias"), c, hw, ws->groups, silu);
}

VAE_VEC static void add_to(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
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
        add_to(ws->t1, ws->x, (size_t)cout * hw);
    }
    swap(&ws->x, &ws->t1);
}

/* The mid block's Attention, one head over the h*w positions, in place on x[C, T]:
 * x += to_out(softmax(q k^T / sqrt(C)) v), with q, k, v linears of group_norm(x) as rows [T, C]. */
static void attention_forward(vae_ws_t *ws, const char *prefix, int c, int t)
{
    size_t tc = (size_t)t * c;
    int tile = TDL_MIN(t, VAE_ATTN_TILE);
    float *buf = ws->attn;
    float *xt = buf, *q = buf + tc, *k = buf + 2 * tc, *v = buf + 3 * tc, *s = buf + 4 * tc;
    char name[VAE_NAME];
    name_join(name, prefix, "group_norm");
    norm(ws, name, ws->t1, ws->x, c, t, false);
    for (int ch = 0; ch < c; ch++)
        for (int i = 0; i < t; i++)
            xt[(size_t)i * c + ch] = ws->t1[(size_t)ch * t + i];
    const char *proj[3] = {"to_q", "to_k", "to_v"};
    float *dst[3] = {q, k, v};
    for (int p = 0; p < 3; p++) {
        name_join(name, prefix, proj[p]);
        tensor_linear_forward(dst[p], xt, param(ws->vae, name, "weight"),
                              param(ws->vae, name, "bias"), t, c, c, 0);
    }
    float *o = xt; /* xt is spent */
    float scale = 1.0f / sqrtf((float)c);
    for (int r0 = 0; r0 < t; r0 += tile) {
        int rows = TDL_MIN(tile, t - r0);
        tensor_gemm(false, true, rows, t, c, scale, q + (size_t)r0 * c, c, k, c, 0.0f, s, t);
        for (int i = 0; i < rows; i++) {
            float *row = s + (size_t)i * t, mx = row[0], sum = 0.0f;
            for (int j = 1; j < t; j++)
                mx = fmaxf(mx, row[j]);
            for (int j = 0; j < t; j++)
                sum += row[j] = expf(row[j] - mx);
            for (int j = 0; j < t; j++)
                row[j] /= sum;
        }
        tensor_gemm(false, false, rows, c, t, 1.0f, s, t, v, c, 0.0f, o + (size_t)r0 * c, c);
    }
    name_join(name, prefix, "to_out.0");
    tensor_linear_forward(q, o, param(ws->vae, name, "weight"), param(ws->vae, name, "bias"), t, c,
                          c, 0);
    for (int ch = 0; ch < c; ch++)
        for (int i = 0; i < t; i++)
            ws->x[(size_t)ch * t + i] += q[(size_t)i * c + ch];
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
           TDL_MIN(t, (size_t)VAE_ATTN_TILE) * t;
}

/* out[C, 2H, 2W] = in[C, H, W], each value repeated 2x2 (nearest) */
static void upsample2x(float *out, const float *in, int c, int h, int w)
{
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < 2 * h; y++) {
            const float *src = in + ((size_t)ch * h + y / 2) * w;
            float *dst = out + ((size_t)ch * 2 * h + y) * 2 * w;
            for (int x = 0; x < 2 * w; x++)
                dst[x] = src[x / 2];
        }
}

/* The largest activation of one image, in floats: what each of x, t1, t2 must hold. */
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
    return best;
}

static size_t vae_cols_floats(const dit_vae_config_t *c, int w)
{
    int widest = c->latent_channels;
    for (int i = 0; i < c->num_blocks; i++)
        widest = TDL_MAX(widest, c->block_out_channels[i]);
    /* at least one output row of the widest convolution at the full width */
    size_t row = (size_t)widest * 9 * ((size_t)w << (c->num_blocks - 1));
    return TDL_MAX(VAE_COLS_FLOATS, row);
}

size_t dit_vae_decode_bytes(const dit_vae_config_t *config, int h, int w)
{
    return (3 * vae_max_activation(config, h, w) + vae_cols_floats(config, w) +
            vae_attn_floats(config, h, w)) *
           sizeof(float);
}

/* One image: latents[latent_channels, h, w] -> rgb[out_channels, s*h, s*w]. */
static void decode_one(vae_ws_t *ws, const float *latents, int h, int w, float *rgb)
{
    const dit_vae_config_t *c = &ws->vae->config;
    int top = c->block_out_channels[c->num_blocks - 1];
    size_t hw = (size_t)h * w;
    for (size_t i = 0; i < (size_t)c->latent_channels * hw; i++)
        ws->t1[i] = latents[i] / c->scaling_factor;
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
            upsample2x(ws->t1, ws->x, out_ch, h, w);
            h *= 2;
            w *= 2;
            snprintf(name, sizeof(name), "decoder.up_blocks.%d.upsamplers.0.conv", i);
            conv(ws, name, ws->x, ws->t1, out_ch, out_ch, h, w, 3, false);
        }
    }
    norm(ws, "decoder.conv_norm_out", ws->t1, ws->x, out_ch, h * w, true);
    conv(ws, "decoder.conv_out", rgb, ws->t1, out_ch, c->out_channels, h, w, 3, false);
}

/* The call's buffers: x, t1, t2 of act floats each, the columns, the attention's rows. */
static tdl_status_t ws_alloc(vae_ws_t *ws, const dit_vae_t *vae, size_t act, size_t cols_floats,
                             size_t attn_floats, const char *what)
{
    *ws = (vae_ws_t){.vae = vae, .groups = vae->config.norm_num_groups};
    ws->cols_floats = cols_floats;
    ws->x = tensor_alloc(act);
    ws->t1 = tensor_alloc(act);
    ws->t2 = tensor_alloc(act);
    ws->cols = tensor_alloc(cols_floats);
    ws->attn = tensor_alloc(attn_floats);
    if (ws->x && ws->t1 && ws->t2 && ws->cols && ws->attn)
        return TDL_OK;
    return tdl_error_raise(TDL_ERR_NOMEM, "VAE %s: out of memory for %zu bytes", what,
                           (3 * act + cols_floats + attn_floats) * sizeof(float));
}

static void ws_free(vae_ws_t *ws)
{
    free(ws->attn);
    free(ws->cols);
    free(ws->t2);
    free(ws->t1);
    free(ws->x);
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
    vae_ws_t ws;
    tdl_status_t st = ws_alloc(&ws, vae, vae_max_activation(c, h, w), vae_cols_floats(c, w),
                               vae_attn_floats(c, h, w), "decode");
    if (st != TDL_OK)
        goto out;
    /* Nothing fails past here: rgb is written only when the whole batch decodes. */
    size_t in_per = (size_t)c->latent_channels * h * w;
    size_t out_per = (size_t)c->out_channels * h * s * w * s;
    for (int i = 0; i < n; i++)
        decode_one(&ws, latents + i * in_per, h, w, rgb + i * out_per);
out:
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

static size_t enc_cols_floats(const dit_vae_config_t *c, int w)
{
    int widest = TDL_MAX(c->in_channels, 2 * c->latent_channels);
    for (int i = 0; i < c->num_blocks; i++)
        widest = TDL_MAX(widest, c->block_out_channels[i]);
    return TDL_MAX(VAE_COLS_FLOATS, (size_t)widest * 9 * w);
}

size_t dit_vae_encode_bytes(const dit_vae_config_t *config, int h, int w)
{
    int s = dit_vae_upscale(config);
    return (3 * enc_max_activation(config, h, w) + enc_cols_floats(config, w) +
            vae_attn_floats(config, h / s, w / s)) *
           sizeof(float);
}

/* One image: rgb[in_channels, h, w] -> moments[2 * latent_channels, h/s, w/s] (t1 may be it). */
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
            dit_vae_conv2d_down_forward(ws->t1, ws->x, param(ws->vae, name, "weight"),
                                        param(ws->vae, name, "bias"), out_ch, out_ch, h, w,
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
    vae_ws_t ws;
    tdl_status_t st = ws_alloc(&ws, vae, enc_max_activation(c, h, w), enc_cols_floats(c, w),
                               vae_attn_floats(c, h / s, w / s), "encode");
    if (st != TDL_OK)
        goto out;
    /* Nothing fails past here: out is written only when the whole batch encodes. */
    size_t lat = (size_t)c->latent_channels * (h / s) * (w / s);
    size_t in_per = (size_t)c->in_channels * h * w;
    for (int i = 0; i < n; i++) {
        if (moments_only) {
            encode_one(&ws, rgb + i * in_per, h, w, out + i * 2 * lat);
            continue;
        }
        float *m = ws.t1; /* free once conv_out has read it */
        encode_one(&ws, rgb + i * in_per, h, w, m);
        float *dst = out + i * lat;
        tdl_rng_t rng;
        if (sample)
            tdl_rng_init(&rng, sample->seed, sample->first + (uint64_t)i);
        for (size_t j = 0; j < lat; j++) {
            float z = m[j];
            if (sample) {
                float logvar = fminf(fmaxf(m[lat + j], -30.0f), 20.0f);
                z += expf(0.5f * logvar) * tdl_rng_normal(&rng);
            }
            dst[j] = c->scaling_factor * z;
        }
    }
out:
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
