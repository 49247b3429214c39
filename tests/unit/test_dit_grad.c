/* Finite-difference checks of every DiT layer pair and of the whole model (tiny configuration):
 * for a random projection R, L = sum(forward(x) * R), and the backward pass must agree with
 * central differences of L in every input it gives a gradient for. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit_internal.h"
#include "tap.h"
#include "randn.h"

typedef double (*loss_fn)(void *ctx);

/* Compares analytic[i] with (L(x + e) - L(x - e)) / 2e on up to `samples` entries of x. */
static int fd_check(const char *what, float *x, size_t n, const float *analytic, loss_fn loss,
                    void *ctx, int samples, double tol)
{
    double worst = 0;
    size_t worst_i = 0;
    double worst_fd = 0;
    for (int k = 0; k < samples && (size_t)k < n; k++) {
        size_t i = n <= (size_t)samples ? (size_t)k : tdl_rng_below(&rng, n);
        float save = x[i];
        float eps = 1e-2f * fmaxf(1.0f, fabsf(save));
        x[i] = save + eps;
        double lp = loss(ctx);
        x[i] = save - eps;
        double lm = loss(ctx);
        x[i] = save;
        double fd = (lp - lm) / (2.0 * eps);
        double err = fabs(fd - analytic[i]) / fmax(fmax(fabs(fd), fabs(analytic[i])), 1e-2);
        if (err > worst) {
            worst = err;
            worst_i = i;
            worst_fd = fd;
        }
    }
    int good = ok(worst <= tol, "%s: backward matches finite differences (worst rel. error %.2e)",
                  what, worst);
    if (!good)
        diag("  at %zu: analytic %.6g, finite difference %.6g", worst_i, analytic[worst_i],
             worst_fd);
    return good;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* ---- layer pairs ----------------------------------------------------------------------------- */

enum { B = 2, T = 5, D = 8, H = 2, M = 12 };

typedef struct {
    float *in, *in2, *shift, *scale, *w, *bias, *out, *r, *mean, *rstd, *att;
    int kind;
} layer_ctx_t;

enum { K_LN, K_MOD, K_GATE, K_SILU, K_GELU, K_LINEAR, K_ATTN };

static double layer_loss(void *vctx)
{
    layer_ctx_t *c = vctx;
    size_t n = (size_t)B * T * D;
    switch (c->kind) {
    case K_LN:
        dit_layernorm_forward(c->out, c->mean, c->rstd, c->in, B * T, D);
        break;
    case K_MOD:
        dit_modulate_forward(c->out, c->in, c->shift, c->scale, 3 * D, B, T, D);
        break;
    case K_GATE:
        dit_gate_residual_forward(c->out, c->in, c->scale, c->in2, 3 * D, B, T, D);
        break;
    case K_SILU:
        dit_silu_forward(c->out, c->in, n);
        break;
    case K_GELU:
        dit_gelu_forward(c->out, c->in, n);
        break;
    case K_LINEAR:
        tensor_linear_forward(c->out, c->in, c->w, c->bias, B * T, D, M, 0);
        n = (size_t)B * T * M;
        break;
    case K_ATTN:
        dit_attention_forward(c->out, c->att, c->in, B, T, D, H);
        break;
    }
    return dot(c->out, c->r, n);
}

static void test_layers(void)
{
    size_t n = (size_t)B * T * D;
    layer_ctx_t c = {.in = randn(3 * n, 1.0f), .in2 = randn(n, 1.0f), .shift = randn(B * 3 * D, 0.5f),
                     .scale = randn(B * 3 * D, 0.5f), .w = randn((size_t)M * D, 0.3f),
                     .bias = randn(M, 0.3f), .out = tensor_alloc((size_t)B * T * M + 3 * n),
                     .r = randn((size_t)B * T * M + 3 * n, 1.0f), .mean = tensor_alloc(B * T),
                     .rstd = tensor_alloc(B * T), .att = tensor_alloc((size_t)B * H * T * T)};
    float *g1 = tensor_alloc(3 * n), *g2 = tensor_alloc(n), *g3 = tensor_alloc(B * 3 * D);
    float *g4 = tensor_alloc(B * 3 * D), *gw = tensor_alloc((size_t)M * D), *gb = tensor_alloc(M);
    float *scratch = tensor_alloc((size_t)T * T);

    c.kind = K_LN;
    layer_loss(&c);
    dit_layernorm_backward(g1, c.r, c.in, c.mean, c.rstd, B * T, D);
    fd_check("layernorm d/dx", c.in, n, g1, layer_loss, &c, 40, 2e-2);

    c.kind = K_MOD;
    memset(g1, 0, 3 * n * 4);
    dit_modulate_backward(g1, g3, g4, c.r, c.in, c.scale, 3 * D, B, T, D);
    fd_check("modulate d/dx", c.in, n, g1, layer_loss, &c, 40, 2e-2);
    fd_check("modulate d/dshift", c.shift, B * 3 * D, g3, layer_loss, &c, 40, 2e-2);
    fd_check("modulate d/dscale", c.scale, B * 3 * D, g4, layer_loss, &c, 40, 2e-2);

    c.kind = K_GATE;
    memset(g1, 0, 3 * n * 4);
    memset(g4, 0, B * 3 * D * 4);
    dit_gate_residual_backward(g1, g2, g4, c.r, c.scale, c.in2, 3 * D, B, T, D);
    fd_check("gated residual d/dx", c.in, n, g1, layer_loss, &c, 40, 2e-2);
    fd_check("gated residual d/dy", c.in2, n, g2, layer_loss, &c, 40, 2e-2);
    fd_check("gated residual d/dgate", c.scale, B * 3 * D, g4, layer_loss, &c, 40, 2e-2);

    c.kind = K_SILU;
    memset(g1, 0, 3 * n * 4);
    dit_silu_backward(g1, c.r, c.in, n);
    fd_check("silu d/dx", c.in, n, g1, layer_loss, &c, 40, 2e-2);

    c.kind = K_GELU;
    memset(g1, 0, 3 * n * 4);
    dit_gelu_backward(g1, c.r, c.in, n);
    fd_check("gelu (tanh) d/dx", c.in, n, g1, layer_loss, &c, 40, 2e-2);

    c.kind = K_LINEAR;
    memset(g1, 0, 3 * n * 4);
    tensor_linear_backward(g1, gw, gb, c.r, c.in, c.w, B * T, D, M);
    fd_check("linear d/dx", c.in, n, g1, layer_loss, &c, 40, 2e-2);
    fd_check("linear d/dW", c.w, (size_t)M * D, gw, layer_loss, &c, 40, 2e-2);
    fd_check("linear d/db", c.bias, M, gb, layer_loss, &c, 40, 2e-2);

    c.kind = K_ATTN;
    memset(g1, 0, 3 * n * 4);
    layer_loss(&c);
    dit_attention_backward(g1, c.r, c.in, c.att, scratch, B, T, D, H);
    fd_check("attention d/dqkv", c.in, 3 * n, g1, layer_loss, &c, 60, 2e-2);

    free(c.in), free(c.in2), free(c.shift), free(c.scale), free(c.w), free(c.bias), free(c.out);
    free(c.r), free(c.mean), free(c.rstd), free(c.att), free(g1), free(g2), free(g3), free(g4);
    free(gw), free(gb), free(scratch);
}

/* ---- image <-> tokens: exact maps --------------------------------------------------------- */

static void test_patches(void)
{
    enum { PB = 2, C = 3, HH = 4, WW = 6, P = 2 };
    size_t n = (size_t)PB * C * HH * WW;
    float *x = randn(n, 1.0f), *tok = tensor_alloc(n), *back = tensor_alloc(n);
    dit_patchify(tok, x, PB, C, HH, WW, P);
    /* token (0, 1) is patch row 0, column 1: its first entry is channel 0, pixel (0, 2) */
    ok(tok[1 * C * P * P] == x[2], "patchify orders patches row-major, entries (c, i, j)");
    dit_unpatchify(back, tok, PB, C, HH, WW, P);
    /* unpatchify reads entries (i, j, c): patchify's (c, i, j) order is not its inverse ... */
    float *tok2 = tensor_alloc(n);
    memset(back, 0, n * 4);
    dit_unpatchify_backward(tok2, x, PB, C, HH, WW, P);
    dit_unpatchify(back, tok2, PB, C, HH, WW, P);
    ok(memcmp(back, x, n * 4) == 0, "unpatchify(unpatchify_backward(x)) == x (a permutation)");
    /* token (1, 2) entry (i=1, j=0, c=2) is pixel (c=2, y=3, x=4) */
    dit_unpatchify(back, tok, PB, C, HH, WW, P);
    size_t ti = (size_t)(1 * (WW / P) + 2) * P * P * C + (1 * P + 0) * C + 2;
    ok(back[(2 * HH + 3) * WW + 4] == tok[ti], "unpatchify follows the reference's nhwpqc layout");
    free(x), free(tok), free(back), free(tok2);
}

static void test_pos_embed(void)
{
    enum { G = 4, PD = 16 };
    float pos[G * G * PD];
    dit_pos_embed(pos, G, G, PD);
    /* token (row 2, col 3), channel 1 of the first quarter: sin(3 * 10000^(-1/4)) */
    size_t tok = 2 * G + 3;
    is_near(pos[tok * PD + 1], sin(3.0 * pow(10000.0, -0.25)), 1e-6,
            "first quarter is sin(column * omega)");
    is_near(pos[tok * PD + 4 + 1], cos(3.0 * pow(10000.0, -0.25)), 1e-6,
            "second quarter is cos(column * omega)");
    is_near(pos[tok * PD + 8 + 2], sin(2.0 * pow(10000.0, -0.5)), 1e-6,
            "third quarter is sin(row * omega)");
    is_near(pos[tok * PD + 12], cos(2.0), 1e-6, "fourth quarter is cos(row * omega), omega_0 = 1");
    float freq[DIT_FREQ_DIM];
    float t = 0.5f;
    dit_timestep_embedding(freq, &t, 1);
    is_near(freq[0], cos(500.0), 1e-5, "timestep embedding starts with cos(t * 1000)");
    is_near(freq[128 + 1], sin(500.0 * exp(-log(10000.0) / 128)), 1e-5,
            "then sin(t * 1000 * f_k)");
}

/* ---- the whole model ---------------------------------------------------------------------- */

typedef struct {
    dit_model_t *m;
    float *x, *t, *out, *r;
    int *y, b, h, w;
} model_ctx_t;

static double model_loss(void *vctx)
{
    model_ctx_t *c = vctx;
    dit_model_forward(c->m, c->x, c->t, c->y, c->b, c->h, c->w, c->out);
    return dot(c->out, c->r, (size_t)c->b * c->m->config.in_channels * c->h * c->w);
}

static void test_model(void)
{
    dit_config_t cfg;
    dit_config_named("tiny", &cfg);
    dit_model_t *m;
    if (!ok(dit_model_create(&cfg, 3, 16, &m) == TDL_OK, "create the tiny model"))
        return;
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] = 0.1f * tdl_rng_normal(&rng);
    model_ctx_t c = {.m = m, .b = 3, .h = 8, .w = 8};
    size_t n = (size_t)3 * cfg.in_channels * 8 * 8;
    c.x = randn(n, 1.0f);
    c.out = tensor_alloc(n);
    c.r = randn(n, 1.0f);
    float tt[3] = {0.1f, 0.5f, 0.9f};
    int yy[3] = {3, 7, cfg.num_classes};
    c.t = tt;
    c.y = yy;
    model_loss(&c);
    dit_model_zero_grad(m);
    ok(dit_model_backward(m, c.r) == TDL_OK, "backward runs");
    float *grads = tensor_alloc(m->num_params);
    memcpy(grads, m->grads, m->num_params * 4);
    int all = 1;
    for (int i = 0; i < m->ninfos; i++) {
        const dit_param_info_t *pi = &m->infos[i];
        char what[96];
        snprintf(what, sizeof(what), "model d/d %s", pi->name);
        all &= fd_check(what, m->params + pi->offset, pi->numel, grads + pi->offset, model_loss,
                        &c, 12, 3e-2);
    }
    ok(all, "every parameter's gradient matches finite differences");
    /* a different grid (16x16) runs with the same parameters */
    float *x16 = randn(2 * 16 * 16, 1.0f), *o16 = tensor_alloc(2 * 16 * 16);
    ok(dit_model_forward(m, x16, tt, yy, 2, 16, 16, o16) == TDL_OK, "forward on a 16x16 grid");
    ok(dit_model_forward(m, x16, tt, yy, 2, 32, 32, o16) == TDL_ERR_INVALID_ARG,
       "a grid larger than the arena was sized for is refused");
    int bad_label[1] = {cfg.num_classes + 1};
    ok(dit_model_forward(m, x16, tt, bad_label, 1, 8, 8, o16) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "label"),
       "a label outside the table is refused: %s", tdl_error_get());
    free(x16), free(o16), free(grads), free(c.x), free(c.out), free(c.r);
    dit_model_free(m);
}

static void test_configs(void)
{
    dit_config_t c;
    ok(dit_config_named("DiT-XL/2", &c) == TDL_OK && c.hidden_size == 1152 && c.depth == 28 &&
           c.num_heads == 16 && c.patch_size == 2,
       "DiT-XL/2 is the reference's");
    ok(dit_config_named("S/8", &c) == TDL_OK && c.hidden_size == 384 && c.patch_size == 8,
       "S/8 short name");
    ok(dit_config_named("DiT-M/2", &c) == TDL_ERR_INVALID_ARG && strstr(tdl_error_get(), "DiT-M/2"),
       "unknown configuration refused, named");
    dit_config_named("tiny", &c);
    c.num_heads = 3;
    ok(dit_config_check(&c) == TDL_ERR_INVALID_ARG, "hidden size not divisible by heads refused");
    dit_config_named("DiT-S/2", &c);
    ok(c.learn_sigma == 1 && dit_config_out_channels(&c) == 8,
       "DiT-S/2 learns sigma as the reference's: 8 output channels");
    ok(dit_config_set_int(&c, "learn_sigma", 2) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "learn_sigma = 2") && c.learn_sigma == 1,
       "learn_sigma 2 refused, named: %s", tdl_error_get());
    dit_model_t *m;
    c.learn_sigma = 0; /* the count below; learn_sigma's final layer is checked after it */
    if (dit_model_create(&c, 1, 32, &m) == TDL_OK) {
        /* DiT-S/2 on 32x32x4 latents, 1000 classes, learn_sigma off, counted by hand:
         * patch 384*4*2*2 + 384 = 6,528; timestep MLP 256*384 + 384 + 384*384 + 384 = 246,528;
         * labels 1001*384 = 384,384; per block qkv 443,520 + proj 147,840 + fc1 591,360 +
         * fc2 590,208 + adaLN 887,040 = 2,659,968, times 12; final 16*384 + 16 + 768*384 + 768
         * = 301,840. (The reference's 33.0M adds pos_embed and learn_sigma's extra channels.) */
        is_int(m->num_params, 6528 + 246528 + 384384 + 12 * 2659968 + 301840,
               "DiT-S/2 has the reference's parameter count");
        dit_model_t *ls;
        c.learn_sigma = 1; /* final layer 32*384 + 32: twice the rows */
        if (ok(dit_model_create(&c, 1, 32, &ls) == TDL_OK, "DiT-S/2 with learn_sigma")) {
            is_int(ls->num_params, m->num_params + 16 * 384 + 16,
                   "learn_sigma adds p*p*C rows to final_layer.linear");
            const dit_param_info_t *fw = dit_model_param(ls, "final_layer.linear.weight");
            ok(fw && fw->shape[0] == 32 && fw->shape[1] == 384,
               "final_layer.linear.weight is [p*p*2C, D] = [32, 384]");
            dit_model_free(ls);
        }
        dit_model_init_weights(m, 1);
        const dit_param_info_t *ada = dit_model_param(m, "blocks.5.adaLN_modulation.1.weight");
        int zeros = 1;
        for (size_t i = 0; ada && i < ada->numel; i++)
            zeros &= m->params[ada->offset + i] == 0.0f;
        ok(ada && ada->shape[0] == 6 * 384 && ada->shape[1] == 384 && zeros,
           "adaLN modulation is [6D, D] and zero-initialized");
        dit_model_free(m);
    }
}

/* With every parameter zero but the output bias b, the velocity is b everywhere: both samplers
 * must land exactly on noise - b, and runs must repeat bit for bit. */
static void test_sampler(void)
{
    dit_config_t cfg;
    dit_config_named("tiny", &cfg);
    dit_model_t *m;
    if (dit_model_create(&cfg, 4, 8, &m) != TDL_OK)
        return;
    memset(m->params, 0, m->num_params * 4);
    int pd = cfg.patch_size * cfg.patch_size * cfg.in_channels;
    for (int k = 0; k < pd; k++)
        m->p.final_b[k] = 0.25f * (float)(k + 1);
    int labels[2] = {1, -1};
    size_t per = (size_t)cfg.in_channels * 8 * 8;
    float *noise = tensor_alloc(2 * per), *a = tensor_alloc(2 * per), *b = tensor_alloc(2 * per);
    dit_sampler_noise(noise, 2, per, 77, 0);
    for (int kind = 0; kind < 2; kind++) {
        dit_sample_opts_t o = {.kind = kind, .steps = 7, .cfg_scale = 4.0f, .seed = 77};
        ok(dit_sample(m, labels, 2, 8, 8, &o, a) == TDL_OK, "%s sampling runs",
           kind ? "heun" : "euler");
        double worst = 0;
        for (size_t i = 0; i < 2 * per; i++) {
            size_t pix = i % 64, yy = pix / 8, xx = pix % 8;
            /* pixel (y, x) is entry (y % p, x % p) of its token */
            float v = m->p.final_b[(yy % 2) * 2 + xx % 2];
            worst = fmax(worst, fabs(a[i] - (noise[i] - v)));
        }
        ok(worst < 1e-5, "%s with constant velocity lands on noise - v (error %.1e)",
           kind ? "heun" : "euler", worst);
        dit_sample(m, labels, 2, 8, 8, &o, b);
        ok(memcmp(a, b, 2 * per * 4) == 0, "%s sampling repeats bit for bit",
           kind ? "heun" : "euler");
    }
    dit_sample_opts_t o = {.kind = DIT_SAMPLER_EULER, .steps = 0, .cfg_scale = 1, .seed = 1};
    ok(dit_sample(m, labels, 2, 8, 8, &o, a) == TDL_ERR_INVALID_ARG, "zero steps refused");
    free(noise), free(a), free(b);
    dit_model_free(m);
}

/* tensor_linear_forward against a double loop: one product of all rows, a product of T rows an
 * image, and products of one row (matrix-vector), with a bias and without; and each image's rows
 * the same bytes whether it is alone or beside another. */
static void test_linear_products(void)
{
    int n = B * T;
    float *x = randn((size_t)n * D, 1.0f), *w = randn((size_t)M * D, 0.3f), *bias = randn(M, 0.3f);
    float *y = tensor_alloc((size_t)n * M), *alone = tensor_alloc((size_t)T * M);
    const int groups[3] = {0, T, 1};
    for (int gi = 0; gi < 3; gi++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *bb = with_bias ? bias : NULL;
            tensor_linear_forward(y, x, w, bb, n, D, M, groups[gi]);
            double worst = 0;
            for (int r = 0; r < n; r++)
                for (int o = 0; o < M; o++) {
                    double ref = bb ? bb[o] : 0.0;
                    for (int i = 0; i < D; i++)
                        ref += (double)x[(size_t)r * D + i] * w[(size_t)o * D + i];
                    worst = fmax(worst, fabs(y[(size_t)r * M + o] - ref));
                }
            ok(worst < 1e-5, "linear in products of %d row(s)%s: a double loop within 1e-5 (%.2g)",
               groups[gi] ? groups[gi] : n, bb ? ", bias" : "", worst);
        }
    for (int gi = 1; gi < 3; gi++) {
        int g = groups[gi], rows = g == 1 ? 1 : T;
        tensor_linear_forward(y, x, w, bias, n, D, M, g);
        tensor_linear_forward(alone, x + (size_t)(n - rows) * D, w, bias, rows, D, M, g);
        ok(memcmp(alone, y + (size_t)(n - rows) * M, (size_t)rows * M * sizeof(float)) == 0,
           "products of %d row(s): the last %d row(s) alone give the same bytes as in the batch",
           g, rows);
    }
    free(x), free(w), free(bias), free(y), free(alone);
}

/* Images of 256 tokens at DiT-S's widths (D 384 -> 1152, 1536 -> 384), three to a product:
 * each image the bytes of its own product, whether the BLAS lets them share one (OpenBLAS's
 * AVX-512 kernels) or not (its Haswell kernels, which tile rows in 12s: tests/unit/
 * test_blas_cores.sh runs this under both). */
static void test_linear_shared_products(void)
{
    const int T256 = 256, NI = 3, dims[2][2] = {{384, 1152}, {1536, 384}};
    const char *core = tensor_blas_core();
    for (int s = 0; s < 2; s++) {
        int in = dims[s][0], out = dims[s][1], n = NI * T256;
        float *x = randn((size_t)n * in, 1.0f), *w = randn((size_t)out * in, 0.05f);
        float *bias = randn(out, 0.3f), *y = tensor_alloc((size_t)n * out);
        float *alone = tensor_alloc((size_t)T256 * out);
        bool shared = tensor_rows_invariant(n, in, out, T256);
        diag("%s, %d -> %d, %d images of %d rows: one product %s", core, in, out, NI, T256,
             shared ? "for all" : "an image");
        tensor_linear_forward(y, x, w, bias, n, in, out, T256);
        int differ = 0;
        for (int i = 0; i < NI; i++) {
            tensor_linear_forward(alone, x + (size_t)i * T256 * in, w, bias, T256, in, out, T256);
            differ += memcmp(alone, y + (size_t)i * T256 * out, (size_t)T256 * out * 4) != 0;
        }
        ok(differ == 0, "%s, %d -> %d: each of %d images the bytes of its own product (%d differ)",
           core, in, out, NI, differ);
        if (!strcmp(core, "SkylakeX") || !strcmp(core, "Cooperlake"))
            ok(shared, "%s, %d -> %d: the AVX-512 kernels let the images share one product",
               core, in, out);
        else if (!strcmp(core, "Haswell"))
            ok(!shared, "%s, %d -> %d: the Haswell kernels (tiles of 12 rows) do not", core, in,
               out);
        free(x), free(w), free(bias), free(y), free(alone);
    }
}

/* dit_softmax_rows against exp in double on rows of every length from 1 to 40 (past the 16 lanes
 * of its blocks), large and negative scores included; and a row the same bytes wherever it is. */
static void test_softmax(void)
{
    double worst = 0, sum_err = 0;
    bool same = true;
    for (int t = 1; t <= 40; t++) {
        float *p = randn((size_t)3 * t, 8.0f), *copy = tensor_alloc((size_t)t + 1);
        p[0] = 80.0f; /* exp(80) overflows a float: the row's max is taken out first */
        memcpy(copy + 1, p + t, (size_t)t * sizeof(float)); /* another alignment */
        double ref[40];
        for (int r = 0; r < 3; r++) {
            const float *row = p + (size_t)r * t;
            double mx = row[0], z = 0;
            for (int j = 1; j < t; j++)
                mx = fmax(mx, row[j]);
            for (int j = 0; j < t; j++)
                z += ref[j] = exp((double)row[j] - mx);
            dit_softmax_rows(p + (size_t)r * t, 1, t);
            double s = 0;
            for (int j = 0; j < t; j++) {
                worst = fmax(worst, fabs(p[(size_t)r * t + j] - ref[j] / z));
                s += p[(size_t)r * t + j];
            }
            sum_err = fmax(sum_err, fabs(s - 1.0));
        }
        dit_softmax_rows(copy + 1, 1, t);
        same = same && memcmp(copy + 1, p + t, (size_t)t * sizeof(float)) == 0;
        free(p), free(copy);
    }
    ok(worst < 1e-6, "softmax of rows of 1 to 40 scores: exp in double within 1e-6 (%.2g)", worst);
    ok(sum_err < 1e-5, "each row sums to 1 within 1e-5 (%.2g)", sum_err);
    ok(same, "a row gives the same bytes at another address");
}

int main(void)
{
    tdl_rng_init(&rng, 2024, 1);
    test_layers();
    test_linear_products();
    test_linear_shared_products();
    test_softmax();
    test_patches();
    test_pos_embed();
    test_configs();
    test_model();
    test_sampler();
    return done_testing();
}
