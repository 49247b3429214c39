/* The inference model (dit_model_create_inference) against the training model, which
 * tests/unit/test_dit_reference.c holds to PyTorch: from the same weights the forward outputs
 * are equal byte for byte at 32, 64 and 128 pixels, batch 1 and more, through the sampler with
 * and without guidance, and through dit_sp_forward on one rank, within the workspace and beyond;
 * the tiled attention equals the one that keeps every probability; and the activation memory is
 * one block's, bounded by hand from the configuration: it does not grow with the depth nor with
 * the heads, and only linearly with the tokens. */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit_internal.h"
#include "tap.h"
#include "randn.h"

/* The first index where a and b differ as bytes, or -1. */
static long first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return (long)i;
    return -1;
}

static int same_bytes(const float *a, const float *b, size_t n, const char *what)
{
    long i = first_diff(a, b, n);
    if (!ok(i < 0, "%s: equal byte for byte (%zu values)", what, n))
        printf("#   first difference at %ld: %.9g vs %.9g\n", i, a[i], b[i]);
    return i < 0;
}

/* Every parameter random (the reference's initialization zeroes adaLN and the output layer,
 * which would hide most of the network), the same in both models. */
static void same_random_weights(dit_model_t *train, dit_model_t *inf, uint64_t seed)
{
    tdl_rng_init(&rng, seed, 1);
    for (size_t i = 0; i < train->num_params; i++)
        train->params[i] = 0.08f * tdl_rng_normal(&rng);
    memcpy(inf->params, train->params, train->num_params * sizeof(float));
    dit_model_params_changed(train);
    dit_model_params_changed(inf);
}

/* ---- the layer: tiled attention against the attention that keeps att ---------------------- */

/* The attention of one whole product per head, written here: S = Q K^T / sqrt(hd) for all T
 * rows, the softmax of each row (max subtracted, in float), Y = P V. */
static void attention_whole(float *y, const float *qkv, int b, int t, int d, int heads)
{
    int hd = d / heads;
    float scale = 1.0f / sqrtf((float)hd);
    float *p = tensor_alloc((size_t)t * t);
    for (int s = 0; s < b; s++)
        for (int h = 0; h < heads; h++) {
            const float *base = qkv + (size_t)s * t * 3 * d;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, hd, scale, base + h * hd,
                        3 * d, base + d + h * hd, 3 * d, 0.0f, p, t);
            for (int i = 0; i < t; i++) {
                float *row = p + (size_t)i * t, mx = row[0], sum = 0;
                for (int j = 1; j < t; j++)
                    mx = fmaxf(mx, row[j]);
                for (int j = 0; j < t; j++)
                    sum += row[j] = expf(row[j] - mx);
                for (int j = 0; j < t; j++)
                    row[j] *= 1.0f / sum;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, hd, t, 1.0f, p, t,
                        base + 2 * d + h * hd, 3 * d, 0.0f, y + (size_t)s * t * d + h * hd, d);
        }
    free(p);
}

static void attention_case(int b, int t, int d, int heads)
{
    size_t n = (size_t)b * t * 3 * d, ny = (size_t)b * t * d;
    float *qkv = randn(n, 1.0f);
    float *y1 = tensor_alloc(ny), *y2 = tensor_alloc(ny), *y3 = tensor_alloc(ny);
    float *att = tensor_alloc((size_t)b * heads * t * t);
    float *scratch = tensor_alloc((size_t)DIT_ATTN_TILE_ROWS * t);
    dit_attention_forward(y1, att, qkv, b, t, d, heads);
    dit_attention_forward_tiled(y2, scratch, qkv, b, t, d, heads);
    attention_whole(y3, qkv, b, t, d, heads);
    char what[96];
    snprintf(what, sizeof(what), "attention of %d x %d tokens, %d heads of %d", b, t, heads,
             d / heads);
    same_bytes(y2, y1, ny, what);
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < ny; i++) {
        diff = fmax(diff, fabs((double)y2[i] - y3[i]));
        scale = fmax(scale, fabs((double)y3[i]));
    }
    ok(diff <= 1e-6 * scale, "%s: tiles of %d rows agree with one whole product (%.2g)", what,
       DIT_ATTN_TILE_ROWS, diff / scale);
    /* what the tiles cost in bits on this BLAS: none where its kernels unroll by a divisor of
     * the tile (OpenBLAS's Haswell kernels: 12 rows) */
    printf("# %s: the tiles are %s\n", what,
           first_diff(y2, y3, ny) < 0 ? "byte for byte one whole product's"
                                      : "not byte for byte one whole product's on this BLAS");
    free(qkv), free(y1), free(y2), free(y3), free(att), free(scratch);
}

/* ---- the model: forward, sampler, dit_sp_forward ------------------------------------------ */

/* dit_model_forward of both models on the same input, batch b of h x w. */
static void forward_case(dit_model_t *train, dit_model_t *inf, int b, int h, int w)
{
    const dit_config_t *c = &train->config;
    size_t per = (size_t)c->in_channels * h * w;
    float *x = randn((size_t)b * per, 1.0f), *t = tensor_alloc((size_t)b);
    float *o1 = tensor_alloc((size_t)b * per), *o2 = tensor_alloc((size_t)b * per);
    int *y = calloc((size_t)b, sizeof(int));
    for (int i = 0; i < b; i++) {
        t[i] = (float)(i + 1) / (float)(b + 1);
        y[i] = i % (c->num_classes + 1); /* the null class too */
    }
    char what[96];
    snprintf(what, sizeof(what), "%s %dx%d, batch %d: forward", c->name, h, w, b);
    if (ok(dit_model_forward(train, x, t, y, b, h, w, o1) == TDL_OK &&
               dit_model_forward(inf, x, t, y, b, h, w, o2) == TDL_OK,
           "%s runs on both models", what)) {
        same_bytes(o2, o1, (size_t)b * per, what);
        double mx = 0;
        for (size_t i = 0; i < (size_t)b * per; i++)
            mx = fmax(mx, fabs(o1[i]));
        ok(mx > 1e-3, "%s: the output is not trivial (max |out| %.3g)", what, mx);
    }
    free(x), free(t), free(o1), free(o2), free(y);
}

/* dit_sample on both models: guided (the conditional and unconditional halves in one batch)
 * and not. */
static void sample_case(dit_model_t *train, dit_model_t *inf, int n, int res, float cfg)
{
    const dit_config_t *c = &train->config;
    size_t total = (size_t)n * c->in_channels * res * res;
    float *a = tensor_alloc(total), *b = tensor_alloc(total);
    int *labels = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        labels[i] = i == n - 1 ? -1 : i % c->num_classes;
    dit_sample_opts_t o = {.kind = DIT_SAMPLER_HEUN, .steps = 3, .cfg_scale = cfg, .seed = 42};
    char what[96];
    snprintf(what, sizeof(what), "%s: %d images of %d sampled, cfg %.1f", c->name, n, res, cfg);
    if (ok(dit_sample(train, labels, n, res, res, &o, a) == TDL_OK &&
               dit_sample(inf, labels, n, res, res, &o, b) == TDL_OK,
           "%s on both models", what))
        same_bytes(b, a, total, what);
    free(a), free(b), free(labels);
}

static void model_cases(const char *name, int max_batch, int max_res, const int *sides, int nsides)
{
    dit_config_t cfg;
    dit_model_t *train = NULL, *inf = NULL;
    if (!ok(dit_config_named(name, &cfg) == TDL_OK &&
                dit_model_create(&cfg, max_batch, max_res, &train) == TDL_OK &&
                dit_model_create_inference(&cfg, max_batch, max_res, NULL, &inf) == TDL_OK,
            "%s: a training and an inference model for %d images of %d", name, max_batch, max_res))
        goto out;
    ok(inf->inference && !inf->grads && train->grads, "%s: the inference model has no gradients",
       name);
    same_random_weights(train, inf, 7);
    for (int i = 0; i < nsides; i++) {
        forward_case(train, inf, 1, sides[i], sides[i]);
        forward_case(train, inf, max_batch, sides[i], sides[i]);
    }
    /* rectangles whose tokens are not a multiple of the attention tile */
    int p = cfg.patch_size;
    forward_case(train, inf, TDL_MIN(2, max_batch), 9 * p, 8 * p);
    forward_case(train, inf, 1, 5 * p, 3 * p);
    float dout = 0;
    ok(dit_model_backward(inf, &dout) == TDL_ERR_INVALID_ARG,
       "%s: the inference model refuses a backward pass", name);
out:
    dit_model_free(train);
    dit_model_free(inf);
}

/* The sampler (guided or not), and dit_sp_forward on one rank, also with more images than the
 * inference model's max_batch (a pass in buffers of its own), against the training model. */
static void sampler_and_sp_cases(void)
{
    dit_config_t cfg;
    dit_model_t *train = NULL, *inf = NULL;
    if (!ok(dit_config_named("fmnist", &cfg) == TDL_OK &&
                dit_model_create(&cfg, 6, 64, &train) == TDL_OK &&
                dit_model_create_inference(&cfg, 6, 64, NULL, &inf) == TDL_OK,
            "fmnist: models for 6 images of 64"))
        goto out;
    same_random_weights(train, inf, 9);
    sample_case(train, inf, 5, 32, 4.0f);
    sample_case(train, inf, 5, 64, 1.0f);
    sample_case(train, inf, 3, 64, 2.5f);
    dit_model_free(inf);
    inf = NULL;
    /* a model of 2 images given 5: one pass of 5 all the same (a BLAS may round a row
     * otherwise in a product of other rows) */
    if (!ok(dit_model_create_inference(&cfg, 2, 64, NULL, &inf) == TDL_OK,
            "fmnist: an inference model for 2 images"))
        goto out;
    memcpy(inf->params, train->params, train->num_params * sizeof(float));
    int b = 5, res = 64;
    size_t per = (size_t)cfg.in_channels * res * res;
    float *x = randn(b * per, 1.0f), t[5] = {0.9f, 0.7f, 0.5f, 0.3f, 0.1f};
    int y[5] = {0, 3, 10, 7, 9};
    float *ref = tensor_alloc(b * per), *o1 = tensor_alloc(b * per), *o2 = tensor_alloc(b * per);
    ok(dit_model_forward(train, x, t, y, b, res, res, ref) == TDL_OK &&
           dit_sp_forward(train, NULL, x, t, y, b, res, res, o1) == TDL_OK &&
           dit_sp_forward(inf, NULL, x, t, y, b, res, res, o2) == TDL_OK,
       "dit_sp_forward runs on one rank, on both models");
    same_bytes(o1, ref, b * per, "dit_sp_forward of the training model (its own buffers)");
    same_bytes(o2, ref, b * per, "dit_sp_forward of a 2-image inference model, 5 images");
    ok(dit_model_forward(inf, x, t, y, b, res, res, o2) == TDL_ERR_INVALID_ARG,
       "dit_model_forward refuses more images than max_batch, as the training model does");
    ok(dit_sp_forward(inf, NULL, x, t, y, 1, 128, 128, o2) == TDL_ERR_INVALID_ARG,
       "dit_sp_forward refuses images larger than the model was sized for");
    free(x), free(ref), free(o1), free(o2);
out:
    dit_model_free(train);
    dit_model_free(inf);
}

/* The CUDA backend's code under emulation: its inference model shares one block's activations
 * among the blocks, and gives the training model's output byte for byte. */
static void device_case(void)
{
    dit_config_t cfg;
    dit_backend_t *b1 = NULL, *b2 = NULL;
    dit_model_t *train = NULL, *inf = NULL;
    if (dit_backend_open("cuda-emulated", -1, &b1) != TDL_OK ||
        dit_backend_open("cuda-emulated", -1, &b2) != TDL_OK) {
        printf("ok %d # SKIP no emulated CUDA backend: %s\n", ++tap_count, tdl_error_get());
        dit_backend_close(b1);
        return;
    }
    if (!ok(dit_config_named("fmnist", &cfg) == TDL_OK &&
                dit_model_create_on(&cfg, 2, 32, b1, &train) == TDL_OK &&
                dit_model_create_inference(&cfg, 2, 32, b2, &inf) == TDL_OK,
            "fmnist on cuda-emulated: a training and an inference model"))
        goto out;
    ok(!inf->ws && !inf->dgrads &&
           dit_model_activation_bytes(inf) * 2 < dit_model_activation_bytes(train),
       "cuda-emulated: the inference model keeps one block's activations (%.2f MiB against "
       "%.2f)",
       dit_model_activation_bytes(inf) / 1048576.0, dit_model_activation_bytes(train) / 1048576.0);
    same_random_weights(train, inf, 11);
    forward_case(train, inf, 2, 32, 32);
out:
    dit_model_free(train);
    dit_model_free(inf);
}

/* ---- the memory ---------------------------------------------------------------------------- */

static size_t inference_bytes(dit_config_t cfg, int batch, int res)
{
    dit_model_t *m = NULL;
    size_t bytes = 0;
    if (dit_model_create_inference(&cfg, batch, res, NULL, &m) == TDL_OK)
        bytes = dit_model_activation_bytes(m);
    dit_model_free(m);
    return bytes;
}

/* By hand: one block's forward for B images of T tokens needs the residual stream twice (x and
 * x1), the LayerNorm output, the attention output and the wider of qkv and the MLP's hidden
 * layer, each B T rows; the patches and the output tokens (2 rows of p*p*C); on two ranks the
 * exchanges add at most the q, k, v sent and received and the head-sharded q, k, v and output
 * (5 D per token, shared between the ranks' halves); attention a tile of DIT_ATTN_TILE_ROWS
 * query rows of T scores. With the position table (T x D), the conditioning (B x (256 + 12 D)) and
 * 64 bytes of alignment for each of 40 buffers, in floats: */
static size_t hand_bound(const dit_config_t *c, int batch, int res)
{
    size_t d = (size_t)c->hidden_size, mh = (size_t)dit_config_mlp_hidden(c);
    size_t pd = (size_t)c->patch_size * c->patch_size * c->in_channels;
    size_t t = (size_t)(res / c->patch_size) * (res / c->patch_size), bt = (size_t)batch * t;
    size_t block = bt * (4 * d + (3 * d > mh ? 3 * d : mh) + 2 * pd);
    size_t exchange = bt * (5 * d + pd);
    size_t floats =
        block + exchange + t * d + (size_t)DIT_ATTN_TILE_ROWS * t + (size_t)batch * (256 + 12 * d);
    return floats * sizeof(float) + 40 * 64;
}

static void memory_cases(void)
{
    dit_config_t f;
    dit_config_named("fmnist", &f);
    /* tidal serve's default: 8 images of 128 */
    size_t inf = inference_bytes(f, 8, 128), bound = hand_bound(&f, 8, 128);
    dit_model_t *train = NULL;
    size_t train_bytes = 0;
    if (dit_model_create(&f, 8, 128, &train) == TDL_OK)
        train_bytes = dit_model_activation_bytes(train);
    dit_model_free(train);
    ok(inf > 0 && inf <= bound,
       "fmnist, 8 images of 128: %.1f MiB of activations, within the hand bound of %.1f MiB",
       inf / 1048576.0, bound / 1048576.0);
    ok(inf * 20 < train_bytes,
       "fmnist, 8 images of 128: under a twentieth of the training model's %.0f MiB",
       train_bytes / 1048576.0);
    dit_config_t t;
    dit_config_named("tiny", &t); /* patch 2: 4096 tokens at 128 */
    size_t tiny = inference_bytes(t, 8, 128);
    ok(tiny > 0 && tiny <= hand_bound(&t, 8, 128),
       "tiny, 8 images of 128 (4096 tokens): %.1f MiB, within the hand bound of %.1f MiB",
       tiny / 1048576.0, hand_bound(&t, 8, 128) / 1048576.0);
    /* what is not kept: nothing per block, nothing per head, no T x T matrix */
    dit_config_t deep = f, heads = f;
    deep.depth = 3 * f.depth;
    heads.num_heads = 2 * f.num_heads;
    is_int(inference_bytes(deep, 8, 128), inf, "three times the depth: the same activations");
    is_int(inference_bytes(heads, 8, 128), inf, "twice the heads: the same activations");
    size_t at64 = inference_bytes(f, 8, 64);
    ok(at64 > 0 && (double)inf / (double)at64 < 4.2,
       "4 times the tokens (64 -> 128): %.2f times the activations, not 16",
       (double)inf / (double)at64);
    size_t one = inference_bytes(f, 1, 128);
    ok(one > 0 && (double)inf / (double)one > 6.0 && (double)inf / (double)one <= 8.0,
       "8 images against 1: %.2f times the activations", (double)inf / (double)one);
}

int main(void)
{
    tdl_rng_init(&rng, 5, 0);
    attention_case(2, 64, 32, 4);
    attention_case(1, 100, 16, 2); /* a tile of 96 and one of 4 */
    attention_case(1, 1024, 128, 4);
    attention_case(1, 4096, 8, 1);
    int sides[] = {32, 64, 128};
    model_cases("fmnist", 3, 128, sides, 3);
    /* patch 2: 1024 tokens at 64, 4096 at 128 (the training model keeps 537 MB of them) */
    model_cases("tiny", 3, 64, sides, 2);
    model_cases("tiny", 1, 128, sides + 2, 1);
    sampler_and_sp_cases();
    device_case();
    memory_cases();
    /* OpenBLAS on 2 threads splits the products otherwise: still the same bytes */
    openblas_set_num_threads(2);
    attention_case(1, 1024, 128, 4);
    model_cases("fmnist", 2, 128, sides + 2, 1);
    return done_testing();
}
