/* The VAE driven from files, for tests/cli/test_vae_torch.sh (its PyTorch reference) and for
 * timing (bench/vae-decode.sh); not a test by itself. PARTS (after GROUPS, where given) is dec
 * (the default), enc or both: the tensors the VAE holds and the weights file carries.
 *   vae_ref names BLOCKS LAYERS GROUPS [PARTS]
 *       one line a tensor: its diffusers name and shape, in the order of the weights file
 *   vae_ref decode BLOCKS LAYERS GROUPS WEIGHTS LATENTS N H W OUT
 *       WEIGHTS: every decoder tensor as raw float32 in that order; LATENTS: N x 4 x H x W
 *       float32 (scaled by 0.18215); OUT gets N x 3 x sH x sW float32
 *   vae_ref encode BLOCKS LAYERS GROUPS WEIGHTS IMAGES N H W OUT
 *       WEIGHTS: the encoder's tensors; IMAGES: N x 3 x H x W float32 in [-1, 1]; OUT gets the
 *       moments, N x 8 x H/s x W/s float32 (mean, then logvar)
 *   vae_ref roundtrip BLOCKS LAYERS GROUPS WEIGHTS IMAGES N H W OUT
 *       WEIGHTS: both halves; OUT gets decode(encode mean), N x 3 x H x W float32
 *   vae_ref save BLOCKS LAYERS GROUPS PARTS WEIGHTS FILE.h5
 *       the tensors as a tidal VAE weights file (doc/vae.md); WEIGHTS "random": seed 1
 *   vae_ref crop IN.png RES OUT
 *       the reference DiT's center crop of a PNG to RES x RES, uint8 [3, RES, RES] raw
 *   vae_ref time BLOCKS LAYERS GROUPS H W REPEATS [WEIGHTS]
 *       random weights (or WEIGHTS, the decoder's); the median time of one decode of one latent,
 *       in ms
 * BLOCKS is block_out_channels, "32,64" or "sd" for the whole Stable Diffusion configuration. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit/vae.h"
#include "train/train.h"

/* OpenBLAS's name of the kernels it chose for this CPU, where the BLAS is OpenBLAS. */
extern char *openblas_get_corename(void) __attribute__((weak));

static int fail(const char *what)
{
    fprintf(stderr, "vae_ref: %s: %s\n", what, tdl_error_get());
    return 1;
}

static int parse_config(char **argv, dit_vae_config_t *c)
{
    dit_vae_config_sd(c);
    if (strcmp(argv[0], "sd") == 0)
        return 0;
    c->num_blocks = 0;
    for (char *s = argv[0]; *s && c->num_blocks < DIT_VAE_MAX_BLOCKS; s++) {
        c->block_out_channels[c->num_blocks++] = (int)strtol(s, &s, 10);
        if (*s != ',')
            break;
    }
    c->layers_per_block = atoi(argv[1]);
    c->norm_num_groups = atoi(argv[2]);
    return 0;
}

static int read_floats(const char *path, float *dst, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "vae_ref: cannot open %s\n", path);
        return 1;
    }
    size_t got = fread(dst, sizeof(float), n, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != n || extra) {
        fprintf(stderr, "vae_ref: %s holds %s than the %zu floats expected\n", path,
                got != n ? "fewer" : "more", n);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "crop")) { /* crop IN.png RES OUT: the center crop, raw */
        train_image_t img;
        int res = atoi(argv[3]);
        uint8_t *out = malloc((size_t)3 * res * res);
        if (!out || train_image_read_png(argv[2], &img) != TDL_OK)
            return fail("crop");
        tdl_status_t st = train_image_center_crop(&img, res, out);
        train_image_free(&img);
        FILE *f = st == TDL_OK ? fopen(argv[4], "wb") : NULL;
        int rc = !f || fwrite(out, 1, (size_t)3 * res * res, f) != (size_t)3 * res * res;
        if (f)
            rc |= fclose(f) != 0;
        free(out);
        return rc ? fail("crop") : 0;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: vae_ref names|decode|time BLOCKS LAYERS GROUPS ...\n");
        return 2;
    }
    dit_vae_config_t c;
    parse_config(argv + 2, &c);
    const char *cmd = argv[1], *pn = "dec";
    if (!strcmp(cmd, "names") && argc == 6)
        pn = argv[5];
    else if (!strcmp(cmd, "encode"))
        pn = "enc";
    else if (!strcmp(cmd, "roundtrip"))
        pn = "both";
    else if (!strcmp(cmd, "save") && argc == 8)
        pn = argv[5];
    int parts = !strcmp(pn, "enc")    ? DIT_VAE_ENCODER
                : !strcmp(pn, "both") ? DIT_VAE_BOTH
                : !strcmp(pn, "dec")  ? DIT_VAE_DECODER
                                      : 0;
    dit_vae_t *vae;
    if (dit_vae_create_parts(&c, parts, &vae) != TDL_OK)
        return fail("create");
    int rc = 0;
    if ((!strcmp(cmd, "encode") || !strcmp(cmd, "roundtrip")) && argc == 11) {
        int n = atoi(argv[7]), h = atoi(argv[8]), w = atoi(argv[9]), s = dit_vae_upscale(&c);
        bool rt = !strcmp(cmd, "roundtrip");
        size_t in = (size_t)n * c.in_channels * h * w;
        size_t lat = (size_t)n * c.latent_channels * (h / s) * (w / s);
        size_t out = rt ? (size_t)n * c.out_channels * h * w : 2 * lat;
        float *img = malloc(in * sizeof(float)), *res = malloc(out * sizeof(float));
        float *z = malloc(lat * sizeof(float));
        rc = !img || !res || !z || read_floats(argv[5], vae->params, vae->num_params) ||
             read_floats(argv[6], img, in);
        if (!rc && !rt && dit_vae_encode_moments(vae, img, n, h, w, res) != TDL_OK)
            rc = fail("encode");
        if (!rc && rt &&
            (dit_vae_encode(vae, img, n, h, w, NULL, z) != TDL_OK ||
             dit_vae_decode(vae, z, n, h / s, w / s, res) != TDL_OK))
            rc = fail("roundtrip");
        FILE *f = rc ? NULL : fopen(argv[10], "wb");
        if (!rc && (!f || fwrite(res, sizeof(float), out, f) != out))
            rc = 1, fprintf(stderr, "vae_ref: cannot write %s\n", argv[10]);
        if (f && fclose(f) != 0)
            rc = 1;
        free(z);
        free(res);
        free(img);
    } else if (!strcmp(cmd, "save") && argc == 8) {
        if (!strcmp(argv[6], "random"))
            dit_vae_init_weights(vae, 1);
        else
            rc = read_floats(argv[6], vae->params, vae->num_params);
        if (!rc && train_vae_save(argv[7], vae) != TDL_OK)
            rc = fail("save");
    } else if (strcmp(argv[1], "names") == 0) {
        for (int i = 0; i < vae->ninfos; i++) {
            printf("%s", vae->infos[i].name);
            for (int d = 0; d < vae->infos[i].ndim; d++)
                printf(" %d", vae->infos[i].shape[d]);
            printf("\n");
        }
    } else if (strcmp(argv[1], "decode") == 0 && argc == 11) {
        int n = atoi(argv[7]), h = atoi(argv[8]), w = atoi(argv[9]), s = dit_vae_upscale(&c);
        size_t in = (size_t)n * c.latent_channels * h * w;
        size_t out = (size_t)n * c.out_channels * h * s * w * s;
        float *lat = malloc(in * sizeof(float)), *rgb = malloc(out * sizeof(float));
        rc = !lat || !rgb || read_floats(argv[5], vae->params, vae->num_params) ||
             read_floats(argv[6], lat, in);
        if (!rc && dit_vae_decode(vae, lat, n, h, w, rgb) != TDL_OK)
            rc = fail("decode");
        FILE *f = rc ? NULL : fopen(argv[10], "wb");
        if (!rc && (!f || fwrite(rgb, sizeof(float), out, f) != out))
            rc = 1, fprintf(stderr, "vae_ref: cannot write %s\n", argv[10]);
        if (f && fclose(f) != 0)
            rc = 1;
        free(rgb);
        free(lat);
    } else if (strcmp(argv[1], "time") == 0 && (argc == 8 || argc == 9)) {
        int h = atoi(argv[5]), w = atoi(argv[6]), reps = atoi(argv[7]), s = dit_vae_upscale(&c);
        dit_vae_init_weights(vae, 1);
        if (argc == 9 && read_floats(argv[8], vae->params, vae->num_params))
            reps = 0, rc = 1;
        float *lat = malloc((size_t)c.latent_channels * h * w * sizeof(float));
        float *rgb = malloc((size_t)c.out_channels * h * s * w * s * sizeof(float));
        double *ms = calloc((size_t)reps, sizeof(double));
        tdl_rng_t rng;
        tdl_rng_init(&rng, 7, 0);
        for (int i = 0; lat && i < c.latent_channels * h * w; i++)
            lat[i] = 0.18215f * tdl_rng_normal(&rng);
        for (int r = 0; lat && rgb && ms && r < reps && !rc; r++) {
            double t0 = tdl_clock_s();
            if (dit_vae_decode(vae, lat, 1, h, w, rgb) != TDL_OK)
                rc = fail("decode");
            ms[r] = 1e3 * (tdl_clock_s() - t0);
        }
        if (!rc)
            printf("decode %dx%d -> %dx%d: %.1f ms (median of %d), %zu parameters, %.1f MiB of "
                   "buffers\n",
                   h, w, h * s, w * s, tdl_median(ms, (size_t)reps), reps, vae->num_params,
                   (double)dit_vae_decode_bytes(&c, h, w) / (1 << 20));
        double best = ms && reps > 0 ? ms[0] : 0;
        for (int r = 1; r < reps; r++)
            best = ms[r] < best ? ms[r] : best;
        if (!rc)
            printf("best: %.1f ms\nblas core: %s\n", best,
                   openblas_get_corename ? openblas_get_corename() : "unknown");
        free(ms);
        free(rgb);
        free(lat);
    } else {
        fprintf(stderr, "vae_ref: unknown command or wrong count of arguments\n");
        rc = 2;
    }
    dit_vae_free(vae);
    return rc;
}
