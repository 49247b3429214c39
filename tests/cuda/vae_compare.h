/* The VAE on a device backend against the CPU backend: each of the backend's VAE layers on small
 * random inputs, then a reduced-width VAE's decode and encode, relative to the CPU's (the
 * device's summation order differs). Included by tests/unit/test_vae_emu.c (cuda/dit.cu under
 * emulation, on any machine) and tests/cuda/vae_gpu.c (the real one, on a GPU); each defines
 * open_device_backend(). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dit/backend.h"
#include "dit/vae.h"
#include "randn.h"
#include "tap.h"

static tdl_status_t open_device_backend(dit_backend_t **be_out);

/* max |a - b| / max(max |b|, tiny) */
static double rel_err(const float *a, const float *b, size_t n)
{
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, isfinite(a[i]) ? fabs((double)a[i] - b[i]) : INFINITY);
        scale = fmax(scale, fabs((double)b[i]));
    }
    return diff / scale;
}

/* A copy of host[n] in the device's memory. */
static float *to_dev(dit_backend_t *be, const float *host, size_t n)
{
    float *p = be->alloc(be->ctx, n);
    if (p)
        be->upload(be->ctx, p, host, n);
    return p;
}

/* Downloads dev[n], compares it with want and frees it. */
static void check_dev(dit_backend_t *be, float *dev, const float *want, size_t n, double tol,
                      const char *what)
{
    float *got = tensor_alloc(n);
    be->download(be->ctx, got, dev, n);
    tdl_status_t st = be->finish(be->ctx);
    double e = rel_err(got, want, n);
    ok(st == TDL_OK && e <= tol, "%s %s: within %g of the CPU (%.2e)", be->name, what, tol, e);
    be->release(be->ctx, dev);
    free(got);
}

/* Every VAE layer of the backend against the CPU backend's, on one random image. */
static void compare_ops(dit_backend_t *be, double tol)
{
    const dit_backend_t *cpu = dit_backend_cpu();
    char what[96];
    /* GroupNorm: 48 channels in 16 groups, of 37 values (chunks end inside a group), in place */
    for (int silu = 0; silu < 2; silu++) {
        int c = 48, hw = 37 * 11, groups = 16;
        size_t n = (size_t)c * hw;
        float *x = randn(n, 2.0f), *wt = randn((size_t)c, 1.0f), *b = randn((size_t)c, 1.0f);
        for (size_t i = 0; i < n; i++)
            x[i] += 0.5f;
        float *want = tensor_alloc(n);
        cpu->vae_groupnorm_forward(NULL, want, x, wt, b, c, hw, groups, silu, NULL);
        float *dx = to_dev(be, x, n), *dw = to_dev(be, wt, c), *db = to_dev(be, b, c);
        size_t sf = be->vae_groupnorm_scratch((size_t)(c / groups) * hw, groups);
        float *scratch = be->alloc(be->ctx, sf + 1);
        be->vae_groupnorm_forward(be->ctx, dx, dx, dw, db, c, hw, groups, silu, scratch);
        snprintf(what, sizeof(what), "GroupNorm%s, in place", silu ? " + SiLU" : "");
        check_dev(be, dx, want, n, tol, what);
        be->release(be->ctx, dw), be->release(be->ctx, db), be->release(be->ctx, scratch);
        free(x), free(wt), free(b), free(want);
    }
    /* convolutions: 1x1, 3x3 (with bias, without, accumulating, in bands of 2 rows), stride 2 on
     * odd sides; and 3x3 of 16 -> 17 channels, which the CPU runs by Winograd (with its scratch) */
    struct {
        int k, stride, h, w;
        bool bias, accumulate;
        int band_rows; /* 0: all rows at once; -1: the backends' own scratch */
        int cin, cout;
    } convs[] = {{1, 1, 7, 9, true, false, 0, 5, 6},   {1, 1, 7, 9, true, true, 0, 5, 6},
                 {3, 1, 7, 9, true, false, 0, 5, 6},   {3, 1, 7, 9, false, false, 2, 5, 6},
                 {3, 1, 7, 9, true, true, 3, 5, 6},    {3, 2, 9, 11, true, false, 0, 5, 6},
                 {3, 2, 8, 6, true, false, 1, 5, 6},   {3, 1, 7, 9, true, false, -1, 16, 17},
                 {3, 1, 7, 9, false, true, -1, 16, 17}};
    for (size_t t = 0; t < sizeof(convs) / sizeof(convs[0]); t++) {
        int cin = convs[t].cin, cout = convs[t].cout, k = convs[t].k, s = convs[t].stride;
        int h = convs[t].h, w = convs[t].w;
        int ho = s == 1 ? h : h / 2, wo = s == 1 ? w : w / 2;
        size_t nin = (size_t)cin * h * w, nout = (size_t)cout * ho * wo;
        size_t nw = (size_t)cout * cin * k * k;
        int cmax = cin > cout ? cin : cout;
        size_t cols_floats =
            convs[t].band_rows < 0
                ? TDL_MAX(cpu->vae_conv2d_scratch(cmax, w), be->vae_conv2d_scratch(cmax, w))
            : convs[t].band_rows ? (size_t)cin * 9 * wo * convs[t].band_rows
                                 : (size_t)cin * 9 * ho * wo;
        float *x = randn(nin, 1.0f), *wt = randn(nw, 0.3f), *b = randn((size_t)cout, 1.0f);
        float *want = randn(nout, 1.0f), *cols = tensor_alloc(cols_floats);
        float *dout = to_dev(be, want, nout); /* what accumulate adds to */
        float *bias = convs[t].bias ? b : NULL;
        cpu->vae_conv2d_forward(NULL, want, x, wt, bias, cin, cout, h, w, k, s,
                                convs[t].accumulate, cols, cols_floats);
        float *dx = to_dev(be, x, nin), *dw = to_dev(be, wt, nw), *db = to_dev(be, b, cout);
        float *dcols = be->alloc(be->ctx, cols_floats);
        be->vae_conv2d_forward(be->ctx, dout, dx, dw, bias ? db : NULL, cin, cout, h, w, k, s,
                               convs[t].accumulate, dcols, cols_floats);
        snprintf(what, sizeof(what), "convolution %dx%d stride %d of %dx%d, %d -> %d%s%s%s", k, k,
                 s, h, w, cin, cout, bias ? ", bias" : "",
                 convs[t].accumulate ? ", accumulating" : "",
                 convs[t].band_rows > 0 ? ", in bands" : "");
        check_dev(be, dout, want, nout, tol, what);
        be->release(be->ctx, dx), be->release(be->ctx, dw), be->release(be->ctx, db);
        be->release(be->ctx, dcols);
        free(x), free(wt), free(b), free(want), free(cols);
    }
    /* upsampling, the residual, the transposes */
    {
        int c = 3, h = 5, w = 7;
        size_t n = (size_t)c * h * w;
        float *x = randn(n, 1.0f), *y = randn(n, 1.0f), *want = tensor_alloc(4 * n);
        cpu->vae_upsample2x_forward(NULL, want, x, c, h, w);
        float *dx = to_dev(be, x, n), *dout = be->alloc(be->ctx, 4 * n);
        be->vae_upsample2x_forward(be->ctx, dout, dx, c, h, w);
        check_dev(be, dout, want, 4 * n, 0.0, "nearest 2x upsampling");
        float *dy = to_dev(be, y, n);
        be->vae_add(be->ctx, dy, dx, n);
        cpu->vae_add(NULL, y, x, n);
        check_dev(be, dy, y, n, 0.0, "residual");
        for (int acc = 0; acc < 2; acc++) {
            float *dt = to_dev(be, y, n);
            be->vae_transpose(be->ctx, dt, dx, c, h * w, acc);
            cpu->vae_transpose(NULL, y, x, c, h * w, acc);
            check_dev(be, dt, y, n, 0.0, acc ? "transpose, accumulating" : "transpose");
        }
        be->release(be->ctx, dx);
        free(x), free(y), free(want);
    }
    /* attention over more rows than one tile of scores */
    {
        int t = DIT_VAE_ATTN_TILE + 45, c = 8;
        size_t n = (size_t)t * c, ns = (size_t)DIT_VAE_ATTN_TILE * t;
        float *q = randn(n, 1.0f), *k = randn(n, 1.0f), *v = randn(n, 1.0f);
        float *want = tensor_alloc(n), *s = tensor_alloc(ns);
        cpu->vae_attention_forward(NULL, want, q, k, v, s, t, c);
        float *dq = to_dev(be, q, n), *dk = to_dev(be, k, n), *dv = to_dev(be, v, n);
        float *ds = be->alloc(be->ctx, ns), *dout = be->alloc(be->ctx, n);
        be->vae_attention_forward(be->ctx, dout, dq, dk, dv, ds, t, c);
        check_dev(be, dout, want, n, tol, "attention, one head over 301 rows");
        be->release(be->ctx, dq), be->release(be->ctx, dk), be->release(be->ctx, dv);
        be->release(be->ctx, ds);
        free(q), free(k), free(v), free(want), free(s);
    }
}

/* A reduced-width VAE (the SD layout at 32 and 64 channels), random weights perturbed so that
 * GroupNorm's scales and shifts are not 1 and 0: decode, encode (mean, sample, moments) on the
 * device against the CPU; then changed weights. */
static void compare_vae(double tol)
{
    dit_vae_config_t cfg;
    dit_vae_config_sd(&cfg);
    cfg.num_blocks = 3;
    cfg.block_out_channels[0] = 32, cfg.block_out_channels[1] = 32;
    cfg.block_out_channels[2] = 64;
    cfg.layers_per_block = 1;
    cfg.norm_num_groups = 16;
    dit_vae_t *cpu = NULL, *dev = NULL;
    dit_backend_t *be;
    tdl_status_t st = open_device_backend(&be);
    if (!ok(st == TDL_OK, "the device backend opens%s%s", st ? ": " : "",
            st ? tdl_error_get() : ""))
        return;
    if (!ok(dit_vae_create_parts(&cfg, DIT_VAE_BOTH, &cpu) == TDL_OK &&
                dit_vae_create_parts(&cfg, DIT_VAE_BOTH, &dev) == TDL_OK,
            "reduced VAE: created")) {
        dit_backend_close(be);
        goto out;
    }
    dit_vae_init_weights(cpu, 5);
    for (size_t i = 0; i < cpu->num_params; i++)
        cpu->params[i] += 0.05f * tdl_rng_normal(&rng);
    memcpy(dev->params, cpu->params, cpu->num_params * sizeof(float));
    const char *name = be->name;
    st = dit_vae_set_backend(dev, be);
    if (!ok(st == TDL_OK, "reduced VAE: weights on %s%s%s", name, st ? ": " : "",
            st ? tdl_error_get() : ""))
        goto out;

    int n = 2, h = 6, w = 5, s = dit_vae_upscale(&cfg);
    size_t nlat = (size_t)n * cfg.latent_channels * h * w;
    size_t nrgb = (size_t)n * cfg.out_channels * h * s * w * s;
    float *lat = randn(nlat, 1.0f), *want = tensor_alloc(nrgb), *got = tensor_alloc(nrgb);
    ok(dit_vae_decode(cpu, lat, n, h, w, want) == TDL_OK, "reduced VAE: CPU decode");
    st = dit_vae_decode(dev, lat, n, h, w, got);
    double e = rel_err(got, want, nrgb);
    ok(st == TDL_OK && e <= tol, "%s decode of %d latents of %dx%d: within %g of the CPU (%.2e)",
       name, n, h, w, tol, e);
    diag("decode: max relative difference %.3e", e);

    int H = 16, W = 12;
    size_t nimg = (size_t)n * cfg.in_channels * H * W;
    size_t nz = (size_t)n * cfg.latent_channels * (H / s) * (W / s);
    float *img = randn(nimg, 0.5f), *zc = tensor_alloc(2 * nz), *zd = tensor_alloc(2 * nz);
    dit_vae_sample_t sp = {.seed = 9, .first = 3};
    const dit_vae_sample_t *samples[2] = {NULL, &sp};
    for (int k = 0; k < 2; k++) {
        ok(dit_vae_encode(cpu, img, n, H, W, samples[k], zc) == TDL_OK, "CPU encode");
        st = dit_vae_encode(dev, img, n, H, W, samples[k], zd);
        e = rel_err(zd, zc, nz);
        ok(st == TDL_OK && e <= tol, "%s encode of %d images of %dx%d (%s): within %g (%.2e)",
           name, n, H, W, k ? "a sample" : "the mean", tol, e);
        diag("encode (%s): max relative difference %.3e", k ? "sample" : "mean", e);
    }
    ok(dit_vae_encode_moments(cpu, img, n, H, W, zc) == TDL_OK, "CPU moments");
    st = dit_vae_encode_moments(dev, img, n, H, W, zd);
    e = rel_err(zd, zc, 2 * nz);
    ok(st == TDL_OK && e <= tol, "%s moments: within %g (%.2e)", name, tol, e);

    /* new weights reach the device only through dit_vae_params_changed */
    for (size_t i = 0; i < cpu->num_params; i++)
        cpu->params[i] *= 0.9f;
    memcpy(dev->params, cpu->params, cpu->num_params * sizeof(float));
    ok(dit_vae_params_changed(dev) == TDL_OK, "changed weights copied");
    dit_vae_decode(cpu, lat, n, h, w, want);
    st = dit_vae_decode(dev, lat, n, h, w, got);
    e = rel_err(got, want, nrgb);
    ok(st == TDL_OK && e <= tol, "%s: changed weights decode within %g (%.2e)", name, tol, e);
    /* bad input is refused before anything runs, the output untouched */
    memset(got, 0, nrgb * sizeof(float));
    ok(dit_vae_decode(dev, lat, n, 0, w, got) == TDL_ERR_INVALID_ARG && got[0] == 0.0f,
       "%s: a latent of 0 rows is refused", name);
    free(lat), free(want), free(got), free(img), free(zc), free(zd);
out:
    dit_vae_free(cpu);
    dit_vae_free(dev); /* closes be */
}


/* The whole check on open_device_backend()'s backend, named `device`: each layer within 1e-5,
 * then the reduced-width VAE within 1e-4. */
static int compare_all(const char *device)
{
    tdl_rng_init(&rng, 13, 0);
    dit_backend_t *be;
    tdl_status_t st = open_device_backend(&be);
    if (ok(st == TDL_OK, "%s opens%s%s", device, st ? ": " : "", st ? tdl_error_get() : "")) {
        compare_ops(be, 1e-5);
        dit_backend_close(be);
    }
    compare_vae(1e-4);
    return done_testing();
}
