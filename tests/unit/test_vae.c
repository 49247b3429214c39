/* The VAE without PyTorch (tests/cli/test_vae_torch.sh holds it to a PyTorch reference): the
 * Stable Diffusion configuration's tensors, decoder and encoder, by diffusers' names and shapes,
 * and their counts of parameters worked out by hand from the architecture; GroupNorm and the
 * convolutions (the encoder's stride-2 one with its one-sided padding too) against small examples
 * computed by hand or by a direct loop; a batch decodes and encodes to each image's bytes alone;
 * and bad configurations and calls are refused, naming what is wrong. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/vae.h"
#include "tap.h"

static void is_shape(const dit_vae_t *vae, const char *name, int ndim, const int *shape)
{
    const dit_param_info_t *p = dit_vae_param(vae, name);
    int same = p && p->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = p->shape[d] == shape[d];
    if (!ok(same, "%s has shape [%d%s%s]", name, shape[0], ndim > 1 ? ", ..." : "",
            p ? "" : " (missing)") &&
        p) {
        printf("#   got ndim %d:", p->ndim);
        for (int d = 0; d < p->ndim; d++)
            printf(" %d", p->shape[d]);
        printf("\n");
    }
}

/* The SD decoder by hand: a k x k convolution has cin*cout*k*k + cout, a GroupNorm 2c, a
 * ResnetBlock2D two norms, two 3x3 convolutions and a 1x1 shortcut where cin != cout; the mid
 * block's attention a norm and four c x c linears. */
static size_t sd_count_by_hand(void)
{
    size_t conv_in = 4 * 512 * 9 + 512, post_quant = 4 * 4 + 4;
    size_t res512 = 2 * (2 * 512) + 2 * (512 * 512 * 9 + 512);
    size_t attn = 2 * 512 + 4 * (512 * 512 + 512);
    size_t mid = 2 * res512 + attn;
    size_t up512 = 3 * res512 + (512 * 512 * 9 + 512); /* up_blocks.0 and .1 */
    size_t res512_256 =
        2 * 512 + (512 * 256 * 9 + 256) + 2 * 256 + (256 * 256 * 9 + 256) + (512 * 256 + 256);
    size_t res256 = 2 * (2 * 256) + 2 * (256 * 256 * 9 + 256);
    size_t up2 = res512_256 + 2 * res256 + (256 * 256 * 9 + 256);
    size_t res256_128 =
        2 * 256 + (256 * 128 * 9 + 128) + 2 * 128 + (128 * 128 * 9 + 128) + (256 * 128 + 128);
    size_t res128 = 2 * (2 * 128) + 2 * (128 * 128 * 9 + 128);
    size_t up3 = res256_128 + 2 * res128; /* the last block has no upsampler */
    size_t out = 2 * 128 + (128 * 3 * 9 + 3);
    return post_quant + conv_in + mid + 2 * up512 + up2 + up3 + out;
}

static void test_sd_names(void)
{
    dit_vae_config_t c;
    dit_vae_config_sd(&c);
    dit_vae_t *vae = NULL;
    if (!ok(dit_vae_create(&c, &vae) == TDL_OK, "the SD decoder is created")) {
        diag("%s", tdl_error_get());
        return;
    }
    is_int(sd_count_by_hand(), 49490199, "the count by hand is 49,490,199");
    is_int(vae->num_params, 49490199,
           "the SD decoder, post_quant_conv included, has 49,490,199 "
           "parameters");
    is_int(vae->ninfos, 140, "in 140 tensors");
    is_int(dit_vae_upscale(&c), 8, "8x upsampling");
    size_t next = 0;
    int contiguous = 1, unique = 1;
    for (int i = 0; i < vae->ninfos; i++) {
        contiguous &= vae->infos[i].offset == next;
        next += vae->infos[i].numel;
        for (int j = 0; j < i; j++)
            unique &= strcmp(vae->infos[i].name, vae->infos[j].name) != 0;
    }
    ok(contiguous && next == vae->num_params, "the tensors tile the flat array in order");
    ok(unique, "every name is unique");
    is_shape(vae, "post_quant_conv.weight", 4, (const int[]){4, 4, 1, 1});
    is_shape(vae, "decoder.conv_in.weight", 4, (const int[]){512, 4, 3, 3});
    is_shape(vae, "decoder.mid_block.resnets.0.norm1.weight", 1, (const int[]){512});
    is_shape(vae, "decoder.mid_block.attentions.0.group_norm.bias", 1, (const int[]){512});
    is_shape(vae, "decoder.mid_block.attentions.0.to_q.weight", 2, (const int[]){512, 512});
    is_shape(vae, "decoder.mid_block.attentions.0.to_out.0.bias", 1, (const int[]){512});
    is_shape(vae, "decoder.mid_block.resnets.1.conv2.weight", 4, (const int[]){512, 512, 3, 3});
    is_shape(vae, "decoder.up_blocks.0.resnets.2.conv1.weight", 4, (const int[]){512, 512, 3, 3});
    is_shape(vae, "decoder.up_blocks.1.upsamplers.0.conv.weight", 4, (const int[]){512, 512, 3, 3});
    is_shape(vae, "decoder.up_blocks.2.resnets.0.conv1.weight", 4, (const int[]){256, 512, 3, 3});
    is_shape(vae, "decoder.up_blocks.2.resnets.0.conv_shortcut.weight", 4,
             (const int[]){256, 512, 1, 1});
    is_shape(vae, "decoder.up_blocks.3.resnets.0.conv_shortcut.bias", 1, (const int[]){128});
    is_shape(vae, "decoder.conv_norm_out.weight", 1, (const int[]){128});
    is_shape(vae, "decoder.conv_out.weight", 4, (const int[]){3, 128, 3, 3});
    ok(!dit_vae_param(vae, "decoder.up_blocks.0.resnets.0.conv_shortcut.weight") &&
           !dit_vae_param(vae, "decoder.up_blocks.2.resnets.1.conv_shortcut.weight"),
       "no shortcut convolution where the channels stay");
    ok(!dit_vae_param(vae, "decoder.up_blocks.3.upsamplers.0.conv.weight"),
       "no upsampler on the last up block");
    ok(!dit_vae_param(vae, "encoder.conv_in.weight") && !dit_vae_param(vae, "quant_conv.weight"),
       "no encoder tensors");
    /* 256x256 from 32x32: three 256 x 256 x 256 activations and the bands, not 600 MB */
    size_t bytes = dit_vae_decode_bytes(&c, 32, 32);
    diag("decode buffers for 32x32 -> 256x256: %.1f MiB", (double)bytes / (1 << 20));
    ok(bytes < (size_t)260 << 20, "its decode buffers for a 256x256 image are under 260 MiB");
    dit_vae_free(vae);
}

/* The SD encoder by hand: conv_in 3 -> 128; down blocks of two resnets each, 128, 128 -> 256,
 * 256 -> 512, 512, a stride-2 3x3 downsampler on all but the last; the mid block as the
 * decoder's; conv_norm_out, conv_out 512 -> 8 (mean and logvar), quant_conv 8 -> 8. */
static size_t sd_encoder_count_by_hand(void)
{
    size_t conv_in = 3 * 128 * 9 + 128;
    size_t res128 = 2 * (2 * 128) + 2 * (128 * 128 * 9 + 128);
    size_t res256 = 2 * (2 * 256) + 2 * (256 * 256 * 9 + 256);
    size_t res512 = 2 * (2 * 512) + 2 * (512 * 512 * 9 + 512);
    size_t res128_256 =
        2 * 128 + (128 * 256 * 9 + 256) + 2 * 256 + (256 * 256 * 9 + 256) + (128 * 256 + 256);
    size_t res256_512 =
        2 * 256 + (256 * 512 * 9 + 512) + 2 * 512 + (512 * 512 * 9 + 512) + (256 * 512 + 512);
    size_t down0 = 2 * res128 + (128 * 128 * 9 + 128);
    size_t down1 = res128_256 + res256 + (256 * 256 * 9 + 256);
    size_t down2 = res256_512 + res512 + (512 * 512 * 9 + 512);
    size_t down3 = 2 * res512;
    size_t mid = 2 * res512 + 2 * 512 + 4 * (512 * 512 + 512);
    size_t out = 2 * 512 + (512 * 8 * 9 + 8) + (8 * 8 + 8);
    return conv_in + down0 + down1 + down2 + down3 + mid + out;
}

static void test_sd_encoder_names(void)
{
    dit_vae_config_t c;
    dit_vae_config_sd(&c);
    dit_vae_t *enc = NULL, *both = NULL, *dec = NULL;
    if (!ok(dit_vae_create_parts(&c, DIT_VAE_ENCODER, &enc) == TDL_OK &&
                dit_vae_create_parts(&c, DIT_VAE_BOTH, &both) == TDL_OK &&
                dit_vae_create(&c, &dec) == TDL_OK,
            "the SD encoder, both halves and the decoder are created")) {
        diag("%s", tdl_error_get());
        return;
    }
    /* the encoder module alone has 34,163,592 (tests/cli/test_vae_torch.sh counts it in
     * PyTorch); quant_conv adds 8 * 8 + 8 */
    is_int(sd_encoder_count_by_hand(), 34163592 + 72,
           "the count by hand is 34,163,592 for the encoder and 72 for quant_conv");
    is_int(enc->num_params, 34163664, "the SD encoder and quant_conv have 34,163,664 parameters");
    is_int(enc->ninfos, 108, "in 108 tensors");
    is_int(both->num_params, enc->num_params + dec->num_params,
           "both halves hold the encoder's and the decoder's");
    is_int(both->ninfos, enc->ninfos + dec->ninfos, "and their tensors");
    int same_order = 1;
    for (int i = 0; i < dec->ninfos; i++)
        same_order &= strcmp(both->infos[enc->ninfos + i].name, dec->infos[i].name) == 0;
    ok(same_order, "the decoder's tensors follow the encoder's, in the decoder's order");
    is_shape(enc, "encoder.conv_in.weight", 4, (const int[]){128, 3, 3, 3});
    is_shape(enc, "encoder.down_blocks.0.resnets.0.norm1.weight", 1, (const int[]){128});
    is_shape(enc, "encoder.down_blocks.0.downsamplers.0.conv.weight", 4,
             (const int[]){128, 128, 3, 3});
    is_shape(enc, "encoder.down_blocks.1.resnets.0.conv_shortcut.weight", 4,
             (const int[]){256, 128, 1, 1});
    is_shape(enc, "encoder.down_blocks.2.resnets.0.conv1.weight", 4, (const int[]){512, 256, 3, 3});
    is_shape(enc, "encoder.down_blocks.3.resnets.1.conv2.bias", 1, (const int[]){512});
    is_shape(enc, "encoder.mid_block.attentions.0.to_q.weight", 2, (const int[]){512, 512});
    is_shape(enc, "encoder.mid_block.attentions.0.to_out.0.bias", 1, (const int[]){512});
    is_shape(enc, "encoder.conv_norm_out.bias", 1, (const int[]){512});
    is_shape(enc, "encoder.conv_out.weight", 4, (const int[]){8, 512, 3, 3});
    is_shape(enc, "quant_conv.weight", 4, (const int[]){8, 8, 1, 1});
    ok(!dit_vae_param(enc, "encoder.down_blocks.3.downsamplers.0.conv.weight"),
       "no downsampler on the last down block");
    ok(!dit_vae_param(enc, "encoder.down_blocks.0.resnets.0.conv_shortcut.weight") &&
           !dit_vae_param(enc, "encoder.down_blocks.0.resnets.2.norm1.weight"),
       "no shortcut where the channels stay, layers_per_block (not + 1) resnets a block");
    ok(!dit_vae_param(enc, "decoder.conv_in.weight") && !dit_vae_param(enc, "post_quant_conv.bias"),
       "the encoder alone holds no decoder tensors");
    size_t bytes = dit_vae_encode_bytes(&c, 256, 256);
    diag("encode buffers for 256x256 -> 32x32: %.1f MiB", (double)bytes / (1 << 20));
    ok(bytes < (size_t)200 << 20, "its encode buffers for a 256x256 image are under 200 MiB");
    ok(dit_vae_create_parts(&c, 0, &dec) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "parts = 0"),
       "parts 0 is refused, naming it: %s", tdl_error_get());
    dit_vae_free(both);
    dit_vae_free(enc);
    dit_vae_free(dec);
}

static void test_config_check(void)
{
    dit_vae_config_t c;
    dit_vae_config_sd(&c);
    c.block_out_channels[1] = 100;
    ok(dit_vae_config_check(&c) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "block_out_channels[1] = 100"),
       "a width not a multiple of the groups is refused, naming it: %s", tdl_error_get());
    dit_vae_config_sd(&c);
    c.num_blocks = 0;
    ok(dit_vae_config_check(&c) == TDL_ERR_INVALID_ARG && strstr(tdl_error_get(), "num_blocks"),
       "no blocks is refused: %s", tdl_error_get());
    dit_vae_config_sd(&c);
    c.scaling_factor = 0;
    dit_vae_t *vae = NULL;
    ok(dit_vae_create(&c, &vae) == TDL_ERR_INVALID_ARG && !vae,
       "dit_vae_create refuses a zero scaling_factor and writes nothing");
}

static void test_groupnorm(void)
{
    /* 4 channels of 2 values in 2 groups: group 0 is {1, 3, 5, 7} (mean 4, variance 5), group 1
     * is {-2, -2, 2, 2} (mean 0, variance 4) */
    const float in[8] = {1, 3, 5, 7, -2, -2, 2, 2};
    const float w[4] = {2, 1, 0.5f, -1}, b[4] = {0.5f, 0, 1, -0.25f};
    float out[8], act[8];
    dit_vae_groupnorm_forward(out, in, w, b, 4, 2, 2, false);
    double r0 = 1 / sqrt(5 + 1e-6), r1 = 1 / sqrt(4 + 1e-6);
    const double want[8] = {
        -3 * r0 * 2 + 0.5,  -1 * r0 * 2 + 0.5, 1 * r0, 3 * r0, -2 * r1 * 0.5 + 1, -2 * r1 * 0.5 + 1,
        2 * r1 * -1 - 0.25, 2 * r1 * -1 - 0.25};
    double err = 0, serr = 0;
    for (int i = 0; i < 8; i++)
        err = fmax(err, fabs(out[i] - want[i]));
    ok(err < 1e-6, "GroupNorm of 2 groups with weight and bias: by hand within 1e-6 (%.2g)", err);
    memcpy(act, in, sizeof(act));
    dit_vae_groupnorm_forward(act, act, w, b, 4, 2, 2, true);
    for (int i = 0; i < 8; i++)
        serr = fmax(serr, fabs(act[i] - want[i] / (1 + exp(-want[i]))));
    ok(serr < 1e-6, "with SiLU, in place: y * sigmoid(y) within 1e-6 (%.2g)", serr);
}

/* The 3x3 convolution as PyTorch defines it (cross-correlation, padding 1), one loop. */
static void conv3_direct(double *out, const float *in, const float *w, const float *b, int cin,
                         int cout, int h, int wd)
{
    for (int o = 0; o < cout; o++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < wd; x++) {
                double s = b[o];
                for (int c = 0; c < cin; c++)
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int sy = y + ky - 1, sx = x + kx - 1;
                            if (sy >= 0 && sy < h && sx >= 0 && sx < wd)
                                s += (double)w[((o * cin + c) * 3 + ky) * 3 + kx] *
                                     in[(c * h + sy) * wd + sx];
                        }
                out[(o * h + y) * wd + x] = s;
            }
}

/* Downsample2D with padding 0: F.pad(x, (0, 1, 0, 1)) then a 3x3 convolution, stride 2,
 * padding 0, one loop. */
static void conv3_down_direct(double *out, const float *in, const float *w, const float *b, int cin,
                              int cout, int h, int wd)
{
    int ho = (h + 1 - 3) / 2 + 1, wo = (wd + 1 - 3) / 2 + 1;
    for (int o = 0; o < cout; o++)
        for (int y = 0; y < ho; y++)
            for (int x = 0; x < wo; x++) {
                double s = b[o];
                for (int c = 0; c < cin; c++)
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int sy = 2 * y + ky, sx = 2 * x + kx; /* in the padded image */
                            if (sy < h && sx < wd)
                                s += (double)w[((o * cin + c) * 3 + ky) * 3 + kx] *
                                     in[(c * h + sy) * wd + sx];
                        }
                out[(o * ho + y) * wo + x] = s;
            }
}

static void test_conv_down(void)
{
    /* one channel 1..16 on 4x4, a kernel of ones: out (0, 0) sums rows 0-2, columns 0-2; out
     * (1, 1) rows 2-3, columns 2-3 and the zero pad: 11 + 12 + 15 + 16 */
    float in[16], ones[9], zero = 0, out[4], cols[9 * 4];
    for (int i = 0; i < 16; i++)
        in[i] = (float)(i + 1);
    for (int i = 0; i < 9; i++)
        ones[i] = 1;
    dit_vae_conv2d_down_forward(out, in, ones, &zero, 1, 1, 4, 4, cols, 9 * 4);
    const float want[4] = {1 + 2 + 3 + 5 + 6 + 7 + 9 + 10 + 11, 3 + 4 + 7 + 8 + 11 + 12,
                           9 + 10 + 11 + 13 + 14 + 15, 11 + 12 + 15 + 16};
    ok(memcmp(out, want, sizeof(want)) == 0,
       "stride-2 3x3 of ones on 1..16 (4x4): 54 45 / 90 54, the zero row and column at the "
       "bottom and right only (got %g %g / %g %g)",
       out[0], out[1], out[2], out[3]);
    /* a single tap (0, 0) reads in[2y][2x]: the top-left is not padded */
    float tap[9] = {1, 0, 0, 0, 0, 0, 0, 0, 0};
    dit_vae_conv2d_down_forward(out, in, tap, &zero, 1, 1, 4, 4, cols, 9 * 4);
    ok(out[0] == 1 && out[1] == 3 && out[2] == 9 && out[3] == 11,
       "tap (0, 0) reads in[2y][2x]: 1 3 / 9 11");

    /* random 5 -> 3 channels on even and odd sizes, one band and a row a band */
    tdl_rng_t rng;
    tdl_rng_init(&rng, 13, 0);
    int cin = 5, cout = 3;
    float x[5 * 8 * 9], wt[3 * 5 * 9], bs[3], y[3 * 4 * 4], big[5 * 9 * 16];
    double ref[3 * 4 * 4];
    for (int i = 0; i < 5 * 8 * 9; i++)
        x[i] = tdl_rng_normal(&rng);
    for (int i = 0; i < 3 * 5 * 9; i++)
        wt[i] = tdl_rng_normal(&rng);
    for (int i = 0; i < 3; i++)
        bs[i] = tdl_rng_normal(&rng);
    const int sizes[4][2] = {{8, 8}, {7, 9}, {2, 2}, {3, 6}};
    for (int t = 0; t < 4; t++) {
        int h = sizes[t][0], w = sizes[t][1], ho = h / 2, wo = w / 2;
        conv3_down_direct(ref, x, wt, bs, cin, cout, h, w);
        double e1 = 0, e2 = 0;
        dit_vae_conv2d_down_forward(y, x, wt, bs, cin, cout, h, w, big, 5 * 9 * 16);
        for (int i = 0; i < cout * ho * wo; i++)
            e1 = fmax(e1, fabs(y[i] - ref[i]));
        dit_vae_conv2d_down_forward(y, x, wt, bs, cin, cout, h, w, big, 5 * 9 * wo);
        for (int i = 0; i < cout * ho * wo; i++)
            e2 = fmax(e2, fabs(y[i] - ref[i]));
        ok(e1 < 1e-5 && e2 < 1e-5,
           "stride-2 5 -> 3 channels on %dx%d -> %dx%d: a direct loop within 1e-5, one band "
           "(%.2g) and a row a band (%.2g)",
           h, w, ho, wo, e1, e2);
    }
}

static void test_conv(void)
{
    /* one channel 1..9, a kernel of ones: each output the sum of its (padded) neighbourhood */
    const float in[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float ones[9], bias = 0.5f, out[9], cols[81];
    for (int i = 0; i < 9; i++)
        ones[i] = 1;
    dit_vae_conv2d_forward(out, in, ones, &bias, 1, 1, 3, 3, 3, false, cols, 81);
    const float want[9] = {12.5f, 21.5f, 16.5f, 27.5f, 45.5f, 33.5f, 24.5f, 39.5f, 28.5f};
    ok(memcmp(out, want, sizeof(want)) == 0, "3x3 convolution of ones on 1..9, padding 1: "
                                             "12.5 21.5 16.5 / 27.5 45.5 33.5 / 24.5 39.5 28.5");
    /* a single tap at (ky, kx) = (0, 2): out[y][x] = in[y - 1][x + 1], not flipped */
    float tap[9] = {0, 0, 1, 0, 0, 0, 0, 0, 0}, zero = 0;
    dit_vae_conv2d_forward(out, in, tap, &zero, 1, 1, 3, 3, 3, false, cols, 81);
    const float shifted[9] = {0, 0, 0, 2, 3, 0, 5, 6, 0};
    ok(memcmp(out, shifted, sizeof(shifted)) == 0,
       "the weight's tap (0, 2) reads the input up and to the right, as PyTorch's Conv2d");

    /* random 5 -> 3 channels on 7 x 6, all rows in one band and one row a band */
    tdl_rng_t rng;
    tdl_rng_init(&rng, 11, 0);
    int cin = 5, cout = 3, h = 7, w = 6;
    float x[5 * 42], wt[3 * 5 * 9], bs[3], y1[3 * 42], y2[3 * 42], big[5 * 9 * 42];
    double ref[3 * 42];
    for (int i = 0; i < 5 * 42; i++)
        x[i] = tdl_rng_normal(&rng);
    for (int i = 0; i < 3 * 5 * 9; i++)
        wt[i] = tdl_rng_normal(&rng);
    for (int i = 0; i < 3; i++)
        bs[i] = tdl_rng_normal(&rng);
    conv3_direct(ref, x, wt, bs, cin, cout, h, w);
    dit_vae_conv2d_forward(y1, x, wt, bs, cin, cout, h, w, 3, false, big, 5 * 9 * 42);
    dit_vae_conv2d_forward(y2, x, wt, bs, cin, cout, h, w, 3, false, big, 5 * 9 * 6);
    double e1 = 0, e2 = 0;
    for (int i = 0; i < 3 * 42; i++) {
        e1 = fmax(e1, fabs(y1[i] - ref[i]));
        e2 = fmax(e2, fabs(y2[i] - ref[i]));
    }
    ok(e1 < 1e-5, "5 -> 3 channels on 7x6, one band: a direct loop within 1e-5 (%.2g)", e1);
    ok(e2 < 1e-5, "the same a row at a time: within 1e-5 (%.2g)", e2);

    /* images one pixel wide and one pixel high: every tap but the middle one reads padding */
    int shapes[2][2] = {{4, 1}, {1, 4}};
    double e4 = 0;
    for (int t = 0; t < 2; t++) {
        int hh = shapes[t][0], ww = shapes[t][1];
        double r4[3 * 4];
        float y4[3 * 4];
        conv3_direct(r4, x, wt, bs, cin, cout, hh, ww);
        dit_vae_conv2d_forward(y4, x, wt, bs, cin, cout, hh, ww, 3, false, big, 5 * 9 * 42);
        for (int i = 0; i < cout * hh * ww; i++)
            e4 = fmax(e4, fabs(y4[i] - r4[i]));
    }
    ok(e4 < 1e-5, "on 4x1 and 1x4 images: a direct loop within 1e-5 (%.2g)", e4);

    /* 1x1 added to what out holds (the resnet's shortcut) */
    float acc[3 * 42];
    for (int i = 0; i < 3 * 42; i++)
        acc[i] = (float)i;
    dit_vae_conv2d_forward(acc, x, wt, bs, cin, cout, h, w, 1, true, NULL, 0);
    double e3 = 0;
    for (int o = 0; o < cout; o++)
        for (int p = 0; p < h * w; p++) {
            double s = o * h * w + p + bs[o];
            for (int c = 0; c < cin; c++)
                s += (double)wt[o * cin + c] * x[c * h * w + p];
            e3 = fmax(e3, fabs(acc[o * h * w + p] - s));
        }
    ok(e3 < 1e-5, "1x1 convolution accumulated onto out: within 1e-5 (%.2g)", e3);
}

/* Winograd's F(2x2, 3x3) (vae_winograd.c) against a direct loop in double: channels at and past
 * the threshold, even and odd sides (tiles past the bottom and right edges), one pixel wide and
 * high, the whole image in one band and one tile row a band, with a bias, without one, and added
 * to what out holds; and the same result as im2col, which a scratch too small for Winograd's
 * smallest band selects. */
static void test_conv_winograd(void)
{
    int cin = DIT_VAE_WINOGRAD_MIN_CHANNELS, cout = DIT_VAE_WINOGRAD_MIN_CHANNELS + 3;
    ok(!dit_vae_winograd_fits(cin - 1, cout, 8, (size_t)1 << 30) &&
           !dit_vae_winograd_fits(cin, cin - 1, 8, (size_t)1 << 30) &&
           dit_vae_winograd_fits(cin, cout, 8, dit_vae_winograd_scratch(cin, cout, 8)),
       "Winograd runs from %d channels on both sides, with its scratch", cin);
    const int sizes[][2] = {{8, 8}, {7, 9}, {1, 5}, {6, 1}, {2, 2}, {13, 4}};
    int nsizes = (int)(sizeof(sizes) / sizeof(sizes[0]));
    tdl_rng_t rng;
    tdl_rng_init(&rng, 17, 0);
    size_t nx = (size_t)cin * 13 * 9, ny = (size_t)cout * 13 * 9, nw = (size_t)cout * cin * 9;
    float *x = malloc(nx * sizeof(float)), *wt = malloc(nw * sizeof(float));
    float *bs = malloc((size_t)cout * sizeof(float)), *zero = calloc((size_t)cout, sizeof(float));
    float *y = malloc(ny * sizeof(float)), *y2 = malloc(ny * sizeof(float));
    double *ref = malloc(ny * sizeof(double));
    size_t big_floats = dit_vae_winograd_scratch(cin, cout, 9) + (size_t)cin * 9 * 13 * 9;
    float *big = malloc(big_floats * sizeof(float));
    for (size_t i = 0; i < nx; i++)
        x[i] = tdl_rng_normal(&rng);
    for (size_t i = 0; i < nw; i++)
        wt[i] = 0.3f * tdl_rng_normal(&rng);
    for (int i = 0; i < cout; i++)
        bs[i] = tdl_rng_normal(&rng);
    double worst[4] = {0};
    for (int t = 0; t < nsizes; t++) {
        int h = sizes[t][0], w = sizes[t][1];
        size_t n = (size_t)cout * h * w;
        size_t one_row = 0; /* the smallest scratch Winograd takes: one tile row a band */
        while (!dit_vae_winograd_fits(cin, cout, w, one_row))
            one_row += 16;
        conv3_direct(ref, x, wt, bs, cin, cout, h, w);
        size_t scratch[2] = {big_floats, one_row};
        for (int b = 0; b < 2; b++) {
            dit_vae_conv2d_forward(y, x, wt, bs, cin, cout, h, w, 3, false, big, scratch[b]);
            for (size_t i = 0; i < n; i++)
                worst[b] = fmax(worst[b], fabs(y[i] - ref[i]) / (1.0 + fabs(ref[i])));
        }
        /* no bias, added to 0.5 * i */
        for (size_t i = 0; i < n; i++)
            y[i] = 0.5f * (float)i;
        dit_vae_conv2d_forward(y, x, wt, NULL, cin, cout, h, w, 3, true, big, one_row);
        conv3_direct(ref, x, wt, zero, cin, cout, h, w);
        for (size_t i = 0; i < n; i++)
            worst[2] = fmax(worst[2], fabs(y[i] - (ref[i] + 0.5 * (double)i)) /
                                          (1.0 + fabs(ref[i] + 0.5 * (double)i)));
        /* im2col: a scratch of one output row, too small for a tile row of Winograd */
        dit_vae_conv2d_forward(y, x, wt, bs, cin, cout, h, w, 3, false, big, big_floats);
        dit_vae_conv2d_forward(y2, x, wt, bs, cin, cout, h, w, 3, false, big,
                               (size_t)cin * 9 * w);
        for (size_t i = 0; i < n; i++)
            worst[3] = fmax(worst[3], fabs((double)y[i] - y2[i]) / (1.0 + fabs((double)y2[i])));
    }
    ok(worst[0] < 1e-5, "Winograd %d -> %d channels on %d shapes, one band: a direct loop within "
                        "1e-5 relative (%.2g)", cin, cout, nsizes, worst[0]);
    ok(worst[1] < 1e-5, "the same a tile row a band (%.2g)", worst[1]);
    ok(worst[2] < 1e-5, "without a bias, added to what out holds (%.2g)", worst[2]);
    ok(worst[3] < 1e-5, "Winograd and im2col (the scratch too small for Winograd) agree (%.2g)",
       worst[3]);
    ok(!dit_vae_winograd_fits(cin, cout, 9, (size_t)cin * 9 * 9),
       "a scratch of one output row of columns is too small for Winograd (so im2col ran)");
    free(x), free(wt), free(bs), free(zero), free(y), free(y2), free(ref), free(big);
}

/* A small decoder: every image of a batch comes out with its bytes alone, finite and of its
 * shape; the weights are reproducible from the seed. */
static void test_batch(void)
{
    dit_vae_config_t c;
    dit_vae_config_sd(&c);
    c.num_blocks = 2;
    c.block_out_channels[0] = 32;
    c.block_out_channels[1] = 64;
    c.norm_num_groups = 8;
    dit_vae_t *vae = NULL, *again = NULL;
    if (!ok(dit_vae_create(&c, &vae) == TDL_OK && dit_vae_create(&c, &again) == TDL_OK,
            "a {32, 64} decoder is created"))
        return;
    dit_vae_init_weights(vae, 5);
    dit_vae_init_weights(again, 5);
    ok(memcmp(vae->params, again->params, vae->num_params * sizeof(float)) == 0,
       "the weights are reproducible from the seed");
    const dit_param_info_t *g = dit_vae_param(vae, "decoder.conv_norm_out.weight");
    const dit_param_info_t *k = dit_vae_param(vae, "decoder.conv_in.weight");
    float bound = 1 / sqrtf(4 * 9), kmax = 0;
    for (size_t i = 0; i < k->numel; i++)
        kmax = fmaxf(kmax, fabsf(vae->params[k->offset + i]));
    ok(vae->params[g->offset] == 1 && kmax <= bound && kmax > 0.9f * bound,
       "norms start at 1, convolutions uniform within 1/sqrt(fan_in)");

    int n = 3, h = 6, w = 5, s = dit_vae_upscale(&c);
    size_t in_per = 4 * h * w, out_per = 3 * (size_t)h * s * w * s;
    float *lat = malloc(n * in_per * sizeof(float));
    float *all = malloc(n * out_per * sizeof(float)), *one = malloc(out_per * sizeof(float));
    tdl_rng_t rng;
    tdl_rng_init(&rng, 3, 0);
    for (size_t i = 0; i < n * in_per; i++)
        lat[i] = 0.18215f * tdl_rng_normal(&rng);
    ok(dit_vae_decode(vae, lat, n, h, w, all) == TDL_OK, "3 latents of 4x6x5 decode to 3x12x10");
    int finite = 1, same = 1;
    for (size_t i = 0; i < n * out_per; i++)
        finite &= isfinite(all[i]);
    for (int i = 0; i < n; i++) {
        dit_vae_decode(vae, lat + i * in_per, 1, h, w, one);
        same &= memcmp(one, all + i * out_per, out_per * sizeof(float)) == 0;
    }
    ok(finite, "every output is finite");
    ok(same, "each image of the batch has the bytes it has decoded alone");
    float keep = all[0];
    ok(dit_vae_decode(vae, lat, 1, 0, w, all) == TDL_ERR_INVALID_ARG && all[0] == keep,
       "latents of height 0 are refused, the output untouched");
    free(one);
    free(all);
    free(lat);
    dit_vae_free(again);
    dit_vae_free(vae);
}

/* A small encoder: every image of a batch has its bytes alone, mean and sample; the mean is the
 * moments' first half scaled; a sample's eps depends on the image's index in the data set, not
 * on the batch; the decoder takes the latents back to the images' shape. */
static void test_encode(void)
{
    dit_vae_config_t c;
    dit_vae_config_sd(&c);
    c.num_blocks = 2;
    c.block_out_channels[0] = 32;
    c.block_out_channels[1] = 64;
    c.norm_num_groups = 8;
    dit_vae_t *vae = NULL, *dec = NULL;
    if (!ok(dit_vae_create_parts(&c, DIT_VAE_BOTH, &vae) == TDL_OK &&
                dit_vae_create(&c, &dec) == TDL_OK,
            "a {32, 64} VAE with both halves is created"))
        return;
    dit_vae_init_weights(vae, 9);
    int n = 3, h = 12, w = 10, s = dit_vae_upscale(&c), lh = h / s, lw = w / s;
    size_t in_per = 3 * (size_t)h * w, lat = 4 * (size_t)lh * lw;
    float *rgb = malloc(n * in_per * sizeof(float)), *mom = malloc(n * 2 * lat * sizeof(float));
    float *mean = malloc(n * lat * sizeof(float)), *smp = malloc(n * lat * sizeof(float));
    float *one = malloc(2 * lat * sizeof(float)), *back = malloc(n * in_per * sizeof(float));
    tdl_rng_t rng;
    tdl_rng_init(&rng, 4, 0);
    for (size_t i = 0; i < n * in_per; i++)
        rgb[i] = 2 * tdl_rng_uniform(&rng) - 1;
    ok(dit_vae_encode_moments(vae, rgb, n, h, w, mom) == TDL_OK,
       "3 images of 3x12x10 encode to moments 8x6x5");
    ok(dit_vae_encode(vae, rgb, n, h, w, NULL, mean) == TDL_OK, "and to mean latents");
    dit_vae_sample_t sp = {.seed = 77, .first = 0};
    ok(dit_vae_encode(vae, rgb, n, h, w, &sp, smp) == TDL_OK, "and to sampled latents");
    double em = 0, es = 0, dmax = 0;
    int same = 1, finite = 1;
    for (int i = 0; i < n; i++) {
        dit_vae_encode_moments(vae, rgb + i * in_per, 1, h, w, one);
        same &= memcmp(one, mom + i * 2 * lat, 2 * lat * sizeof(float)) == 0;
        for (size_t j = 0; j < lat; j++) {
            float m = one[j], sd = expf(0.5f * fminf(fmaxf(one[lat + j], -30), 20));
            em = fmax(em, fabs(mean[i * lat + j] - 0.18215 * m));
            /* sample - mean is scaling_factor * std * eps: eps within a few std */
            double eps = (smp[i * lat + j] / 0.18215 - m) / sd;
            es = fmax(es, fabs(eps));
            dmax = fmax(dmax, fabs(smp[i * lat + j] - mean[i * lat + j]));
            finite &= isfinite(m) && isfinite(one[lat + j]);
        }
    }
    ok(same, "each image's moments have the bytes it has alone");
    ok(finite, "every moment is finite");
    ok(em < 1e-6, "the mean latents are 0.18215 * the moments' first half (%.2g)", em);
    ok(es < 6 && dmax > 0, "a sample differs from the mean by std * eps, |eps| < 6 (%.2g)", es);
    float *smp2 = malloc(lat * sizeof(float));
    dit_vae_sample_t sp2 = {.seed = 77, .first = 2};
    dit_vae_encode(vae, rgb + 2 * in_per, 1, h, w, &sp2, smp2);
    ok(memcmp(smp2, smp + 2 * lat, lat * sizeof(float)) == 0,
       "image 2 sampled alone with first = 2 has the bytes it had in the batch");
    sp2.seed = 78;
    dit_vae_encode(vae, rgb + 2 * in_per, 1, h, w, &sp2, smp2);
    ok(memcmp(smp2, smp + 2 * lat, lat * sizeof(float)) != 0, "another seed, another sample");
    memcpy(dec->params, vae->params + (vae->num_params - dec->num_params),
           dec->num_params * sizeof(float));
    ok(dit_vae_decode(dec, smp, n, lh, lw, back) == TDL_OK,
       "the latents decode back to 3 images of 3x12x10");
    ok(dit_vae_decode(vae, smp, n, lh, lw, back) == TDL_OK, "through the VAE with both halves too");
    float keep = mean[0];
    ok(dit_vae_encode(vae, rgb, 1, 12, 9, NULL, mean) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "multiple of 2") && mean[0] == keep,
       "a width not a multiple of 2 is refused, the output untouched: %s", tdl_error_get());
    ok(dit_vae_encode(dec, rgb, 1, h, w, NULL, mean) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "without its encoder"),
       "the decoder alone refuses to encode: %s", tdl_error_get());
    free(smp2);
    free(back);
    free(one);
    free(smp);
    free(mean);
    free(mom);
    free(rgb);
    dit_vae_free(dec);
    dit_vae_free(vae);
}

int main(void)
{
    test_sd_names();
    test_sd_encoder_names();
    test_config_check();
    test_groupnorm();
    test_conv();
    test_conv_winograd();
    test_conv_down();
    test_batch();
    test_encode();
    return done_testing();
}
