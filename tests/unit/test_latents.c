/* What tidal encode is built from, without PyTorch or PIL (tests/cli/test_encode.sh holds them to
 * both): PIL's resampling on images whose result is known by hand (a constant stays constant,
 * BOX halving averages 2x2 blocks and rounds, a same-size crop is the identity, the crop takes
 * the centre); a latent data set written in pieces and read back by the HDF5 loader, served
 * only at its own resolution; VAE weights saved and loaded by half, refused when the file
 * lacks the half asked for; and each of those with its allocations failing in turn. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "train/train.h"

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[4][160];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
    return p;
}

static void test_resize(void)
{
    /* a constant image stays constant through BICUBIC up and down and BOX */
    uint8_t px[3 * 7 * 5];
    memset(px, 77, sizeof(px));
    train_image_t img = {.channels = 3, .height = 7, .width = 5, .pixels = px}, r;
    int sizes[3][2] = {{13, 11}, {2, 3}, {5, 7}};
    int constant = 1;
    for (int t = 0; t < 3; t++)
        for (int bic = 0; bic < 2; bic++) {
            if (train_image_resize(&img, sizes[t][0], sizes[t][1], bic, &r) != TDL_OK) {
                constant = 0;
                continue;
            }
            for (int i = 0; i < 3 * sizes[t][0] * sizes[t][1]; i++)
                constant &= r.pixels[i] == 77;
            train_image_free(&r);
        }
    ok(constant, "a constant image stays constant, BICUBIC and BOX, up and down");

    /* BOX halving of 4x2 averages each 2x2 block and rounds half up: (0+1+2+4)/4 = 1.75 -> 2,
     * (10+11+13+13)/4 = 11.75 -> 12 */
    uint8_t g[8] = {0, 1, 10, 11, 2, 4, 13, 13};
    train_image_t gray = {.channels = 1, .height = 2, .width = 4, .pixels = g};
    uint8_t box[2] = {0, 0};
    if (train_image_resize(&gray, 2, 1, false, &r) == TDL_OK)
        memcpy(box, r.pixels, 2);
    ok(box[0] == 2 && box[1] == 12, "BOX halving 4x2 -> 2x1 averages the blocks: 2 12 (got %d %d)",
       box[0], box[1]);
    train_image_free(&r);

    /* the center crop of a 6x4 image to 4 is columns 1..4, nothing resampled */
    uint8_t w[24];
    for (int i = 0; i < 24; i++)
        w[i] = (uint8_t)(i * 10);
    train_image_t wide = {.channels = 1, .height = 4, .width = 6, .pixels = w};
    uint8_t c[16];
    int same = train_image_center_crop(&wide, 4, c) == TDL_OK;
    for (int y = 0; same && y < 4; y++)
        for (int x = 0; x < 4; x++)
            same &= c[y * 4 + x] == w[y * 6 + x + 1];
    ok(same, "center crop of 6x4 to 4: columns 1 to 4, unresampled");
    /* 16x16 to 4: BOX halving twice (16 -> 8 -> 4), then nothing: 4x4 block means */
    uint8_t big[256], want[16], got[16];
    for (int i = 0; i < 256; i++)
        big[i] = (uint8_t)((i / 16 / 4) * 40 + (i % 16 / 4) * 7); /* constant 4x4 blocks */
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            want[y * 4 + x] = (uint8_t)(y * 40 + x * 7);
    train_image_t sq = {.channels = 1, .height = 16, .width = 16, .pixels = big};
    ok(train_image_center_crop(&sq, 4, got) == TDL_OK && memcmp(got, want, 16) == 0,
       "16x16 to 4: BOX halved twice, the 4x4 blocks' values");
}

static void test_latent_set(void)
{
    const char *path = tmp_path("lat.h5");
    train_latent_info_t info = {.channels = 4,
                                .height = 2,
                                .width = 2,
                                .scaling_factor = 0.18215,
                                .sample = "mean",
                                .seed = 5,
                                .resolution = 16,
                                .source = "test"};
    float z[3 * 16];
    int32_t lab[3] = {2, 0, 1};
    for (int i = 0; i < 48; i++)
        z[i] = 0.25f * (float)i - 3.0f;
    train_latent_writer_t *w;
    if (!ok(train_latent_writer_open(path, 3, &info, &w) == TDL_OK, "a latent writer opens"))
        return;
    ok(access(path, F_OK) != 0, "nothing is at the path before close");
    ok(train_latent_writer_put(w, 0, 2, z, lab) == TDL_OK &&
           train_latent_writer_put(w, 2, 1, z + 32, lab + 2) == TDL_OK,
       "3 latents written in two pieces");
    ok(train_latent_writer_put(w, 2, 2, z, lab) == TDL_ERR_INVALID_ARG,
       "a piece past the end is refused");
    ok(train_latent_writer_close(w, 3) == TDL_OK && access(path, F_OK) == 0,
       "close puts the file in place");
    train_dataset_t *ds;
    if (!ok(train_dataset_open_hdf5(path, &ds) == TDL_OK, "the HDF5 loader reads it: %s",
            tdl_error_get()))
        return;
    ok(train_dataset_is_latent(ds) && train_dataset_count(ds) == 3 &&
           train_dataset_channels(ds) == 4 && train_dataset_num_classes(ds) == 3 &&
           train_dataset_resolution(ds) == 2 && !train_dataset_pixels(ds, 0),
       "3 latents of 4 channels, 2x2, 3 classes, no pixels");
    float got[16];
    int label, same = 1;
    for (int i = 0; i < 3; i++) {
        same &= train_dataset_get(ds, (size_t)i, 2, got, &label) == TDL_OK && label == lab[i] &&
                memcmp(got, z + 16 * i, sizeof(got)) == 0;
    }
    ok(same, "each latent and label comes back as written");
    ok(train_dataset_get(ds, 0, 4, got, NULL) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "served only at 2"),
       "a latent is not upsampled: %s", tdl_error_get());
    train_dataset_free(ds);

    /* abort leaves nothing */
    const char *gone = tmp_path("gone.h5");
    if (train_latent_writer_open(gone, 1, &info, &w) == TDL_OK)
        train_latent_writer_abort(w);
    char tmp[200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", gone, (long)getpid());
    ok(access(gone, F_OK) != 0 && access(tmp, F_OK) != 0, "abort removes the temporary file");
}

static void test_vae_file(void)
{
    dit_vae_config_t c;
    dit_vae_config_sd(&c);
    c.num_blocks = 2;
    c.block_out_channels[0] = 32;
    c.block_out_channels[1] = 64;
    c.norm_num_groups = 8;
    c.layers_per_block = 1;
    dit_vae_t *both, *dec, *enc = NULL;
    if (dit_vae_create_parts(&c, DIT_VAE_BOTH, &both) != TDL_OK ||
        dit_vae_create(&c, &dec) != TDL_OK)
        return;
    dit_vae_init_weights(both, 3);
    dit_vae_init_weights(dec, 4);
    const char *pb = tmp_path("both.h5"), *pd = tmp_path("dec.h5");
    ok(train_vae_save(pb, both) == TDL_OK && train_vae_save(pd, dec) == TDL_OK,
       "VAE files with both halves and the decoder alone are written");
    dit_vae_config_t rc;
    int parts = 0;
    ok(train_vae_read_config(pb, &rc, &parts) == TDL_OK && parts == DIT_VAE_BOTH &&
           rc.num_blocks == 2 && rc.block_out_channels[1] == 64 && rc.layers_per_block == 1 &&
           rc.norm_num_groups == 8 && fabsf(rc.scaling_factor - 0.18215f) < 1e-7f,
       "the configuration comes back from the attributes");
    int same = train_vae_load(pb, DIT_VAE_ENCODER, &enc) == TDL_OK;
    for (int i = 0; same && i < enc->ninfos; i++) {
        const dit_param_info_t *p = &enc->infos[i], *q = dit_vae_param(both, p->name);
        same = q && memcmp(enc->params + p->offset, both->params + q->offset,
                           p->numel * sizeof(float)) == 0;
    }
    ok(same, "the encoder loaded alone from both halves has their weights, by name");
    dit_vae_free(enc);
    enc = NULL;
    ok(train_vae_load(pd, DIT_VAE_ENCODER, &enc) == TDL_ERR_NOT_FOUND && !enc &&
           strstr(tdl_error_get(), "the encoder is needed"),
       "the decoder's file refuses an encoder load: %s", tdl_error_get());
    dit_vae_free(dec);
    dit_vae_free(both);
}

/* ---- allocations failing in turn (SQLite's test_malloc habit, as test_faults) -----------------
 */

static int bad; /* failures that were not a clean out-of-memory */

static void clean(tdl_status_t st, const char *what, long n)
{
    if (st != TDL_OK && st != TDL_ERR_NOMEM) {
        bad++;
        diag("allocation %ld: %s: status %d: %s", n, what, st, tdl_error_get());
    }
}

/* 40x30 RGB to 16: BOX halving once, BICUBIC, crop */
static tdl_status_t crop_run(long n)
{
    uint8_t px[3 * 30 * 40], out[3 * 16 * 16];
    for (size_t i = 0; i < sizeof(px); i++)
        px[i] = (uint8_t)(i * 7);
    train_image_t img = {.channels = 3, .height = 30, .width = 40, .pixels = px};
    tdl_status_t st = train_image_center_crop(&img, 16, out);
    clean(st, "center crop", n);
    return st;
}

/* the encoder and its weights from the file test_vae_file wrote */
static tdl_status_t vae_run(long n)
{
    dit_vae_t *vae = NULL;
    tdl_status_t st = train_vae_load(tmp_path("both.h5"), DIT_VAE_ENCODER, &vae);
    clean(st, "VAE load", n);
    if (st == TDL_OK && vae->ninfos < 10) {
        bad++;
        diag("allocation %ld: a VAE of %d tensors", n, vae->ninfos);
    }
    dit_vae_free(vae);
    return st;
}

static tdl_status_t writer_run(long n)
{
    train_latent_info_t info = {.channels = 2, .height = 1, .width = 1, .sample = "mean"};
    train_latent_writer_t *w = NULL;
    float z[4] = {1, 2, 3, 4};
    int32_t lab[2] = {0, 1};
    tdl_status_t st = train_latent_writer_open(tmp_path("walk.h5"), 2, &info, &w);
    clean(st, "writer open", n);
    if (st != TDL_OK)
        return st;
    if ((st = train_latent_writer_put(w, 0, 2, z, lab)) != TDL_OK) {
        clean(st, "writer put", n);
        train_latent_writer_abort(w);
        return st;
    }
    st = train_latent_writer_close(w, 2);
    clean(st, "writer close", n);
    if (st != TDL_OK)
        return st;
    train_dataset_t *ds = NULL;
    st = train_dataset_open_hdf5(tmp_path("walk.h5"), &ds);
    clean(st, "read back", n);
    train_dataset_free(ds);
    return st;
}

static void walk(const char *what, tdl_status_t (*run)(long))
{
    bad = 0;
    long n;
    tdl_status_t st = TDL_ERR_NOMEM;
    for (n = 0; n < 10000 && st != TDL_OK; n++) {
        tdl_alloc_fail_after(n);
        st = run(n);
    }
    tdl_alloc_fail_after(-1);
    ok(st == TDL_OK && n > 1, "%s: goes through once %ld allocations succeed", what, n - 1);
    ok(bad == 0, "%s: each of the %ld failures before that was a clean out-of-memory", what, n - 1);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/tidal-latents-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    test_resize();
    test_latent_set();
    test_vae_file();
    walk("the center crop", crop_run);
    walk("a VAE file's encoder loaded", vae_run);
    walk("a latent data set written and read back", writer_run);
    const char *names[] = {"lat.h5", "both.h5", "dec.h5", "walk.h5"};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(names); i++)
        unlink(tmp_path(names[i]));
    rmdir(tmpdir);
    return done_testing();
}
