/* vae: the Stable Diffusion VAE (diffusers' AutoencoderKL, as the reference DiT uses it:
 * sd-vae-ft-ema / sd-vae-ft-mse), its encoder and its decoder, on the CPU. Parameters are named
 * exactly as in diffusers' state_dict (>= 0.15: attention's to_q, to_k, to_v, to_out.0) and held
 * in one contiguous array, so an importer maps a state_dict by name and shape. A VAE object holds
 * the decoder, the encoder or both (dit_vae_create_parts): serving loads only the decoder
 * (doc/vae.md). */
#ifndef TIDAL_DIT_VAE_H
#define TIDAL_DIT_VAE_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "dit/dit.h"

#define DIT_VAE_MAX_BLOCKS 8

typedef struct dit_vae_config {
    int latent_channels;                        /* 4 */
    int in_channels;                            /* 3: the encoder's input */
    int out_channels;                           /* 3: the decoder's output */
    int num_blocks;                             /* entries of block_out_channels */
    int block_out_channels[DIT_VAE_MAX_BLOCKS]; /* {128, 256, 512, 512}: 8x upsampling */
    int layers_per_block;                       /* 2: the decoder has one more per block */
    int norm_num_groups;                        /* 32 */
    float scaling_factor;                       /* 0.18215: latents are z * scaling_factor */
} dit_vae_config_t;

/* The configuration of sd-vae-ft-ema and sd-vae-ft-mse. */
void dit_vae_config_sd(dit_vae_config_t *config_out);
/* Every width a positive multiple of norm_num_groups, the counts in range; the error names the
 * field. */
tdl_status_t dit_vae_config_check(const dit_vae_config_t *config);
/* Each image's pixels are 2^(num_blocks - 1) times its latent's a side. */
int dit_vae_upscale(const dit_vae_config_t *config);

/* Which halves a VAE object holds (dit_vae_create_parts), as bits. */
enum { DIT_VAE_DECODER = 1, DIT_VAE_ENCODER = 2, DIT_VAE_BOTH = 3 };

typedef struct dit_vae {
    dit_vae_config_t config;
    int parts; /* DIT_VAE_DECODER, DIT_VAE_ENCODER or both */
    size_t num_params;
    float *params;           /* every tensor, in the order of infos */
    dit_param_info_t *infos; /* name, shape and offset of each tensor */
    int ninfos;
    struct dit_backend *backend; /* where decode and encode run (dit_vae_set_backend); NULL: CPU */
    float *backend_params;       /* params in the backend's memory; NULL on host memory */
} dit_vae_t;

/* The decoder alone (post_quant_conv and decoder.*), as serving needs it. */
tdl_status_t dit_vae_create(const dit_vae_config_t *config, dit_vae_t **vae_out);
/* The halves in parts: the encoder's tensors (encoder.*, quant_conv) come first, in the order
 * its forward runs them, then the decoder's, exactly as dit_vae_create lists them. */
tdl_status_t dit_vae_create_parts(const dit_vae_config_t *config, int parts, dit_vae_t **vae_out);
void dit_vae_free(dit_vae_t *vae);
/* PyTorch's default initialization (convolutions and linears uniform in +-1/sqrt(fan_in),
 * weight and bias alike; GroupNorm's weight 1 and bias 0), reproducible from seed. */
void dit_vae_init_weights(dit_vae_t *vae, uint64_t seed);
/* The tensor of that diffusers name ("decoder.conv_in.weight"), or NULL. */
const dit_param_info_t *dit_vae_param(const dit_vae_t *vae, const char *name);

/* Decode and encode run on backend (dit_backend_open; NULL: the CPU, the default) from now on,
 * with the parameters as they are now copied once to its memory (none copied where the backend
 * works on host memory). The VAE owns backend from then on, also when this fails, and closes it
 * in dit_vae_free; a backend set before is closed. */
tdl_status_t dit_vae_set_backend(dit_vae_t *vae, struct dit_backend *backend);
/* After params changed: copies them to the backend's memory again (nothing to do on the CPU). */
tdl_status_t dit_vae_params_changed(dit_vae_t *vae);

/* rgb[n, out_channels, s*h, s*w] = decoder(post_quant_conv(latents / scaling_factor)), with
 * latents[n, latent_channels, h, w] as the DiT samples them (already scaled) and s =
 * dit_vae_upscale. The output is nominally in [-1, 1] and not clamped (diffusers does not
 * clamp either). One image at a time, each exactly as it would be alone; the buffers are the
 * call's (dit_vae_decode_bytes): three of one image's largest activation, a band of the
 * convolutions' columns, the mid-block attention's rows. rgb is written only on success. */
tdl_status_t dit_vae_decode(const dit_vae_t *vae, const float *latents, int n, int h, int w,
                            float *rgb);
/* Bytes dit_vae_decode allocates for latents of h x w on the CPU backend. */
size_t dit_vae_decode_bytes(const dit_vae_config_t *config, int h, int w);

/* How dit_vae_encode turns the diagonal Gaussian into latents: its mean (deterministic), or a
 * sample mean + exp(logvar / 2) * eps as diffusers' latent_dist.sample(), which the reference
 * DiT's feature extraction uses. eps of image i of the call is N(0, 1) from the counter-based
 * stream tdl_rng(seed, first + i): an image's latent does not depend on the batch it is in. */
typedef struct dit_vae_sample {
    uint64_t seed;
    uint64_t first; /* the index of the call's first image in the whole data set */
} dit_vae_sample_t;

/* moments[n, 2 * latent_channels, H/s, W/s] = quant_conv(encoder(rgb)): the mean, then logvar
 * as diffusers' DiagonalGaussianDistribution splits them (not clamped here), of rgb[n,
 * in_channels, H, W] in [-1, 1]; H and W multiples of s = dit_vae_upscale. Needs the encoder.
 * Written only on success. */
tdl_status_t dit_vae_encode_moments(const dit_vae_t *vae, const float *rgb, int n, int h, int w,
                                    float *moments);
/* latents[n, latent_channels, H/s, W/s] = scaling_factor * (mean, or mean + std * eps when
 * sample is not NULL), logvar clamped to [-30, 20] as diffusers does: what the DiT trains on
 * (vae.encode(x).latent_dist.sample() * 0.18215). Written only on success. */
tdl_status_t dit_vae_encode(const dit_vae_t *vae, const float *rgb, int n, int h, int w,
                            const dit_vae_sample_t *sample, float *latents);
/* Bytes dit_vae_encode allocates for images of h x w on the CPU backend. */
size_t dit_vae_encode_bytes(const dit_vae_config_t *config, int h, int w);

/* ---- layers (vae_layers.c: the CPU backend's), exposed for the tests; x is one image [C, H, W] */

/* out[C, HW] = GroupNorm(in) * weight[c] + bias[c] over `groups` groups of C / groups channels,
 * eps 1e-6, then SiLU when silu; out may be in. Statistics accumulate in double, by chunks. */
void dit_vae_groupnorm_forward(float *out, const float *in, const float *weight, const float *bias,
                               int c, int hw, int groups, bool silu);
/* out[Cout, H, W] (+)= conv(in[Cin, H, W]) + bias, k 1 (no padding) or 3 (padding 1), stride 1,
 * weight[Cout, Cin, k, k] as PyTorch's Conv2d. k 3 runs by Winograd's F(2x2, 3x3) where
 * dit_vae_winograd_fits (both sides at least DIT_VAE_WINOGRAD_MIN_CHANNELS channels and cols
 * holding its smallest band), otherwise as im2col of a band of output rows at a time into cols
 * (cols_floats of them, at least Cin * 9 * W), then one GEMM a band. accumulate: out already
 * holds values to add to. */
void dit_vae_conv2d_forward(float *out, const float *in, const float *weight, const float *bias,
                            int cin, int cout, int h, int w, int k, bool accumulate, float *cols,
                            size_t cols_floats);
/* Winograd's F(2x2, 3x3) (vae_winograd.c): out[Cout, H, W] (+)= conv(in) + bias (NULL: none),
 * 3x3, padding 1, in bands of as many tile rows as cols_floats holds, which must be enough for
 * dit_vae_winograd_fits. dit_vae_winograd_scratch: the floats with which a
 * band has its full width in GEMM columns. Below DIT_VAE_WINOGRAD_MIN_CHANNELS on either side the
 * transforms cost more than the multiplications they save. */
#define DIT_VAE_WINOGRAD_MIN_CHANNELS 16
void dit_vae_conv2d_winograd(float *out, const float *in, const float *weight, const float *bias,
                             int cin, int cout, int h, int w, bool accumulate, float *cols,
                             size_t cols_floats);
bool dit_vae_winograd_fits(int cin, int cout, int w, size_t cols_floats);
size_t dit_vae_winograd_scratch(int cin, int cout, int w);
/* out[Cout, Ho, Wo] = conv(pad(in[Cin, H, W])) + bias, 3x3, stride 2, as diffusers' Downsample2D
 * with padding 0: one zero row and column added at the bottom and right only (F.pad (0, 1, 0,
 * 1)), so Ho = H / 2 and Wo = W / 2 rounded down (H, W >= 2). cols as above, at least
 * Cin * 9 * Wo floats. */
void dit_vae_conv2d_down_forward(float *out, const float *in, const float *weight,
                                 const float *bias, int cin, int cout, int h, int w, float *cols,
                                 size_t cols_floats);

/* y[i] += x[i] */
void dit_vae_add_forward(float *y, const float *x, size_t n);
/* out[cols, rows] = in[rows, cols]^T, or += when accumulate */
void dit_vae_transpose(float *out, const float *in, int rows, int cols, bool accumulate);
/* o[T, C] = softmax(q k^T / sqrt(C)) v over rows [T, C], one head: the scores of up to
 * DIT_VAE_ATTN_TILE (dit/backend.h) query rows at a time in s. */
void dit_vae_attention_forward(float *o, const float *q, const float *k, const float *v, float *s,
                               int t, int c);
/* out[C, 2H, 2W] = in[C, H, W], each value repeated 2x2 (nearest) */
void dit_vae_upsample2x_forward(float *out, const float *in, int c, int h, int w);

#endif /* TIDAL_DIT_VAE_H */
