/* dynamiq: a super-group worked by hand from the layout in src/codec/dynamiq.c, the level
 * tables' invariants, round-trip error bounds with zeros, subnormals, huge values, NaN and Inf,
 * the budget in bits per value, the fused pass equal to its two steps byte for byte,
 * unbiasedness of the stochastic and correlated rounding over seeds, correlated rounding's
 * lower variance of a sum, and malformed data refused with outputs untouched. */
#include "config.h"

#include <float.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"
#include "codec/dynamiq_levels.h"
#include "core/core.h"
#include "tap.h"

static const codec_ops_t *ops;
static const codec_config_t cfg_rne = {.round = CODEC_ROUND_NEAREST};

static codec_where_t where_of(uint64_t seed, int rank, int hop, int group_size)
{
    codec_where_t w = {.seed = seed,
                       .rank = rank,
                       .hop = hop,
                       .contributions = hop + 1,
                       .group_size = group_size,
                       .stream = codec_stream_make(3, seed, 0),
                       .collective = codec_stream_make(3, seed, 0),
                       .offset = 0};
    return w;
}

static unsigned char *enc_new(const codec_config_t *cfg, const codec_where_t *w, const float *x,
                              size_t n, size_t *bytes)
{
    unsigned char *e = malloc(ops->max_encoded_bytes(cfg, n) + 1);
    if (ops->encode(cfg, w, x, n, e, bytes) != TDL_OK) {
        diag("encode: %s", tdl_error_get());
        free(e);
        return NULL;
    }
    return e;
}

static void fill_heavy(float *x, size_t n, uint64_t seed)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 1);
    float scale = 1;
    for (size_t i = 0; i < n; i++) {
        if (i % 512 == 0)
            scale = expf(2.0f * tdl_rng_normal(&rng));
        x[i] = scale * tdl_rng_normal(&rng) / (0.1f + fabsf(tdl_rng_normal(&rng)));
    }
}

static void test_tables(void)
{
    int good = 1;
    for (int w = 1; w <= DQ_MAX_WIDTH; w++) {
        int top = (1 << w) - 1;
        good &= dq_levels[w][0] == -1.0f && dq_levels[w][top] == 1.0f;
        for (int k = 0; k < top; k++) {
            good &= dq_levels[w][k] < dq_levels[w][k + 1];
            good &= dq_levels[w][k] == -dq_levels[w][top - k];
            good &= fabsf(dq_inv_gap[w][k] * (dq_levels[w][k + 1] - dq_levels[w][k]) - 1) < 1e-6f;
        }
    }
    ok(good, "level tables: 2^w strictly increasing symmetric levels from -1 to 1, inverse gaps");
}

/* One group of 32 at the default 5 bits: the budget is 32 * 1280 / 2048 = 20 bytes after the
 * 4-byte header; the units table (1 byte), the bf16 scale (2) and the meta byte (1) leave
 * 16 value bytes, 4 units, so the group is 4 bits wide, S = 1 (bf16 0x3f80), e = 0. Values on
 * levels of width 4 come back exactly with nearest rounding. */
static void test_worked_example(void)
{
    float x[32], y[32];
    for (int i = 0; i < 32; i++)
        x[i] = dq_levels[4][(i * 7) % 16];
    x[5] = 1.0f; /* the group's largest magnitude is 1 */
    size_t bytes;
    unsigned char *e = enc_new(&cfg_rne, NULL, x, 32, &bytes);
    int good = e && bytes == 24;
    good = good && e[0] == 3 && e[1] == 0 && e[2] == (1280 & 0xff) && e[3] == (1280 >> 8);
    good = good && e[4] == 4 && e[5] == 0x80 && e[6] == 0x3f && e[7] == (0 << 4 | 3);
    /* plane j, bit i = bit j of value i's level index */
    for (int j = 0; good && j < 4; j++) {
        uint32_t plane = (uint32_t)e[8 + 4 * j] | (uint32_t)e[9 + 4 * j] << 8 |
                         (uint32_t)e[10 + 4 * j] << 16 | (uint32_t)e[11 + 4 * j] << 24;
        for (int i = 0; i < 32; i++) {
            int k = i == 5 ? 15 : (i * 7) % 16;
            good &= ((plane >> i) & 1u) == (uint32_t)((k >> j) & 1);
        }
    }
    good = good && ops->decode(NULL, e, bytes, y, 32) == TDL_OK && memcmp(x, y, sizeof(x)) == 0;
    ok(good, "a group of 32 worked by hand: header, bf16 scale, meta byte, 4 bit planes, exact");
    free(e);

    /* two groups: the second, 1/4 of the first, is two octaves down: e = 4 */
    float z[64];
    for (int i = 0; i < 32; i++)
        z[i] = 4.0f * x[i], z[32 + i] = x[i];
    z[0] = 4.01f; /* S: 4.01 rounded up to bf16 is 0x4081 (4.03125) */
    e = enc_new(&cfg_rne, NULL, z, 64, &bytes);
    ok(e && e[5] == 0x81 && e[6] == 0x40 && (e[7] >> 4) == 0 && (e[8] >> 4) == 4,
       "the super-group scale is its largest magnitude rounded up to bf16; a group with maximum 1 "
       "is 4 half octaves below it (4.03 / 2^2 = 1.008 >= 1 > 4.03 / 2^2.5)");
    free(e);
}

static double vnmse(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}

static void test_round_trip(void)
{
    const size_t sizes[] = {1, 31, 32, 33, 255, 256, 257, 1000, 4096, 20000};
    int good = 1;
    double worst = 0;
    for (size_t s = 0; s < TDL_ARRAY_SIZE(sizes); s++) {
        size_t n = sizes[s], bytes;
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        fill_heavy(x, n, 40 + s);
        codec_where_t w = where_of(9, 1, 0, 0);
        unsigned char *e = enc_new(NULL, &w, x, n, &bytes);
        good &= e && ops->decode(NULL, e, bytes, y, n) == TDL_OK;
        /* each value stays within its group's scale: |y| <= sqrt(2) * group max, sign kept */
        for (size_t g = 0; good && g < n; g += 32) {
            float gmax = 0;
            for (size_t i = g; i < TDL_MIN(n, g + 32); i++)
                gmax = fmaxf(gmax, fabsf(x[i]));
            for (size_t i = g; i < TDL_MIN(n, g + 32); i++)
                good &= fabsf(y[i]) <= 1.4143f * gmax && fabsf(y[i] - x[i]) <= 2.83f * gmax;
        }
        double v = vnmse(y, x, n);
        if (n >= 1000)
            worst = fmax(worst, v);
        /* a few groups cannot share a budget: one alone gets 4 bits, a short tail less */
        good &= v < (n >= 4096 ? 1e-3 : n >= 1000 ? 5e-3 : 0.25);
        if (!good)
            diag("n = %zu: vNMSE %.3g", n, v);
        good &= bytes <= 4 + (n * 1280 + 2047) / 2048 + 3 + 32 + 4; /* 5 bits, a tail's floor */
        if (n >= 256)
            good &= bytes == 4 + (n * 1280 + 2047) / 2048;
        free(e), free(x), free(y);
    }
    ok(good, "heavy-tailed vectors of 1 to 20000 values: values within their group's scale, "
             "vNMSE below 5e-3 from 1000 values on (worst %.2e) at exactly 5 bits per value",
       worst);

    /* zeros, subnormals, huge values */
    float x[300], y[300];
    for (int i = 0; i < 300; i++)
        x[i] = 0.0f;
    x[40] = 1e-40f, x[41] = -3e-42f;                /* subnormals, a group of their own */
    x[260] = 3.0e38f, x[261] = -FLT_MAX, x[262] = 1; /* huge, in the second super-group */
    size_t bytes;
    codec_where_t w = where_of(1, 0, 0, 0);
    unsigned char *e = enc_new(NULL, &w, x, 300, &bytes);
    good = e && ops->decode(NULL, e, bytes, y, 300) == TDL_OK;
    for (int i = 0; good && i < 300; i++)
        if (i < 32 || (i >= 64 && i < 256) || i >= 288)
            good &= y[i] == 0.0f; /* groups of zeros decode to exact zeros */
    good = good && isfinite(y[260]) && isfinite(y[261]) && y[261] < -1e38f && y[260] > 1e38f;
    if (!good)
        diag("zeros or huge values wrong");
    good = good && y[40] > 0 && fabsf(y[40]) <= 1.415e-40f && fabsf(y[41]) <= 1.415e-40f;
    if (!good)
        diag("subnormals: %g %g", (double)y[40], (double)y[41]);
    ok(good, "zero groups decode to exact zeros; subnormals keep their scale; values near "
             "FLT_MAX stay finite (%g, %g)",
       (double)y[260], (double)y[261]);
    free(e);

    /* NaN and Inf poison their own super-group only */
    for (int i = 0; i < 300; i++)
        x[i] = (float)(i % 7) - 3.0f;
    x[10] = NAN, x[270] = INFINITY;
    e = enc_new(NULL, &w, x, 300, &bytes);
    good = e && ops->decode(NULL, e, bytes, y, 300) == TDL_OK;
    for (int i = 0; good && i < 300; i++)
        good &= isnan(y[i]) != 0;
    ok(good, "a NaN or Inf makes its whole super-group NaN, never a finite wrong sum");
    x[270] = 1;
    free(e);
    e = enc_new(NULL, &w, x, 300, &bytes);
    good = e && ops->decode(NULL, e, bytes, y, 300) == TDL_OK && isnan(y[0]) && isnan(y[255]);
    for (int i = 256; good && i < 300; i++)
        good &= isfinite(y[i]) && fabsf(y[i] - x[i]) <= 1.5f;
    ok(good, "the other super-groups decode normally");
    free(e);
}

static void test_budget(void)
{
    size_t n = 1 << 16;
    float *x = malloc(n * sizeof(float));
    fill_heavy(x, n, 3);
    int good = 1;
    const double bits[] = {2.0, 3.5, 5.0, 6.0, 8.0};
    for (size_t k = 0; k < TDL_ARRAY_SIZE(bits); k++) {
        codec_config_t cfg = {.bits = bits[k], .flags = CODEC_DQ_FLAT_HOPS};
        codec_where_t w = where_of(2, 0, 0, 8);
        size_t bytes;
        unsigned char *e = enc_new(&cfg, &w, x, n, &bytes);
        good &= e && fabs(8.0 * (double)bytes / (double)n - bits[k]) < 0.01;
        free(e);
    }
    ok(good, "the encoded size is the budget: 2, 3.5, 5, 6 and 8 bits per value, metadata "
             "included");
    codec_config_t cfg = {0};
    double avg = ops->bits_per_coord(&cfg, 0);
    ok(avg <= 5.0 + 1e-9 && avg > 4.95, "over a ring all-reduce the hop budgets average %.4f bits",
       avg);
    /* the hop budget grows with the partial sum's contributions and the final is under it */
    size_t b1, b4, b7, b8;
    codec_where_t w1 = where_of(2, 0, 0, 8), w4 = where_of(2, 0, 3, 8), w7 = where_of(2, 0, 6, 8);
    codec_where_t w8 = where_of(2, 0, 7, 8);
    unsigned char *e1 = enc_new(NULL, &w1, x, n, &b1), *e4 = enc_new(NULL, &w4, x, n, &b4);
    unsigned char *e7 = enc_new(NULL, &w7, x, n, &b7), *e8 = enc_new(NULL, &w8, x, n, &b8);
    ok(b1 < b4 && b4 < b7 && b8 < b7,
       "hop budgets on 8 ranks: first %zu, fourth %zu, seventh %zu, final %zu bytes", b1, b4, b7,
       b8);
    free(e1), free(e4), free(e7), free(e8);
    codec_t *c;
    codec_config_t bad = {.bits = 9};
    ok(codec_create("dynamiq", &bad, &c) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "9 bits"),
       "an impossible budget is refused: %s", tdl_error_get());
    free(x);
}

static void test_fused(void)
{
    const size_t sizes[] = {1000, 33, 1, 0, 257, 4096};
    int good = 1;
    for (size_t s = 0; s < TDL_ARRAY_SIZE(sizes); s++)
        for (int mode = 0; mode < 2; mode++) {
            size_t n = sizes[s], b_in, b_f, b_p;
            const codec_config_t *cfg = mode ? &cfg_rne : NULL;
            float *x = malloc((n + 1) * 4), *local = malloc((n + 1) * 4);
            float *dec = malloc((n + 1) * 4), *acc = malloc((n + 1) * 4);
            fill_heavy(x, n, 5 + s);
            fill_heavy(local, n, 50 + s);
            if (n > 300)
                x[290] = NAN;
            codec_where_t w0 = where_of(s, 2, 0, 4), w1 = where_of(s, 3, 1, 4);
            unsigned char *in = enc_new(cfg, &w0, x, n, &b_in);
            unsigned char *fused = malloc(ops->max_encoded_bytes(cfg, n) + 1), *plain = NULL;
            good &= in && ops->decode(cfg, in, b_in, dec, n) == TDL_OK;
            for (size_t i = 0; i < n; i++)
                acc[i] = local[i] + dec[i];
            good &= ops->decode_accumulate_encode(cfg, &w1, in, b_in, local, n, fused, &b_f) ==
                    TDL_OK;
            plain = enc_new(cfg, &w1, acc, n, &b_p);
            good &= plain && b_p == b_f && memcmp(plain, fused, b_f) == 0;
            memcpy(dec, local, n * 4);
            good &= ops->decode_accumulate(cfg, in, b_in, dec, n) == TDL_OK;
            for (size_t i = 0; i < n; i++)
                good &= memcmp(&dec[i], &acc[i], 4) == 0 || (isnan(dec[i]) && isnan(acc[i]));
            free(x), free(local), free(dec), free(acc), free(in), free(fused), free(plain);
        }
    ok(good, "fused decode-accumulate-encode equals encode(local + decode) byte for byte, and "
             "decode_accumulate equals decode then add (stochastic and nearest)");
}

static void test_unbiased(void)
{
    enum { N = 256, SEEDS = 2000, P = 4 };
    float x[N], y[N];
    fill_heavy(x, N, 77);
    double mean_err[N] = {0}, sq_err[N] = {0}, var_corr = 0, var_ind = 0;
    int same = 1;
    for (int s = 0; s < SEEDS; s++) {
        /* P ranks encode the same values at hop 0 (as the butterfly's first round does); the
         * sum of their decodings estimates P x */
        for (int mode = 0; mode < 2; mode++) {
            codec_config_t cfg = {.flags = mode ? CODEC_DQ_INDEPENDENT : 0};
            double sum_sq = 0;
            double tot[N] = {0};
            for (int r = 0; r < P; r++) {
                codec_where_t w = where_of((uint64_t)s, r, 0, P);
                size_t bytes;
                unsigned char *e = enc_new(&cfg, &w, x, N, &bytes);
                ops->decode(NULL, e, bytes, y, N);
                if (s == 0 && r == 0 && mode == 0) { /* the same where gives the same bytes */
                    unsigned char *e2 = enc_new(&cfg, &w, x, N, &bytes);
                    same = memcmp(e, e2, bytes) == 0;
                    free(e2);
                }
                for (int i = 0; i < N; i++) {
                    tot[i] += y[i];
                    if (mode == 0 && r == 0) {
                        mean_err[i] += (double)y[i] - x[i];
                        sq_err[i] += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
                    }
                }
                free(e);
            }
            for (int i = 0; i < N; i++)
                sum_sq += (tot[i] - P * (double)x[i]) * (tot[i] - P * (double)x[i]);
            if (mode)
                var_ind += sum_sq;
            else
                var_corr += sum_sq;
        }
    }
    ok(same, "the same (seed, rank, hop, collective) gives the same bytes");
    /* the mean error over seeds, against the spread of one rounding: within 5 standard errors */
    int unbiased = 1, worst_i = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double m = mean_err[i] / SEEDS, se = sqrt(fmax(sq_err[i] / SEEDS - m * m, 0) / SEEDS);
        if (fabs(m) / (se + 1e-30) > worst)
            worst = fabs(m) / (se + 1e-30), worst_i = i;
        unbiased &= fabs(m) <= 5 * se + 1e-30;
    }
    ok(unbiased, "stochastic rounding is unbiased: mean error over %d seeds within 5 standard "
                 "errors for all %d values (worst %.2f at %d)",
       SEEDS, N, worst, worst_i);
    ok(var_corr < 0.8 * var_ind,
       "correlated rounding: the sum of %d ranks' roundings has %.2fx the squared error of "
       "independent rounding",
       P, var_corr / var_ind);
}

/* Each set of AVX-512 loops the CPU can run (group by group; super-group by super-group with
 * VBMI and GFNI) gives the portable loops' bytes. */
static void test_isa(void)
{
    int initial = codec_dynamiq_isa(-1);
    static const char *names[] = {"portable", "AVX-512", "AVX-512 VBMI/GFNI"};
    static const codec_config_t cfgs[] = {
        {0}, {.round = CODEC_ROUND_NEAREST}, {.flags = CODEC_DQ_UNIFORM}, {.bits = 3.0},
        {.bits = 9.0}, {.bits = 14.0}, {.flags = CODEC_DQ_FIXED_WIDTH},
    };
    const size_t sizes[] = {1, 17, 33, 256, 1000, 40009};
    for (int level = 1; level <= 2; level++) {
        codec_dynamiq_isa(level);
        if (codec_dynamiq_isa(-1) != level) {
            ok(1, "# SKIP the %s loops: not on this CPU", names[level]);
            continue;
        }
        int isas[2] = {0, level}, same = 1;
        for (size_t c = 0; c < TDL_ARRAY_SIZE(cfgs); c++)
            for (size_t z = 0; z < TDL_ARRAY_SIZE(sizes); z++) {
                size_t n = sizes[z], b[2], f[2];
                float *x = malloc(n * 4), *l = malloc(n * 4);
                float *d[2] = {malloc(n * 4), malloc(n * 4)};
                unsigned char *e[2], *u[2];
                fill_heavy(x, n, 60 + z);
                fill_heavy(l, n, 70 + z);
                codec_where_t w0 = where_of(z, 1, 0, 4), w1 = where_of(z, 2, 1, 4);
                for (int i = 0; i < 2; i++) {
                    codec_dynamiq_isa(isas[i]);
                    e[i] = enc_new(&cfgs[c], &w0, x, n, &b[i]);
                    u[i] = malloc(ops->max_encoded_bytes(&cfgs[c], n));
                    ops->decode_accumulate_encode(&cfgs[c], &w1, e[0], b[0], l, n, u[i], &f[i]);
                    ops->decode(NULL, u[i], f[i], d[i], n);
                }
                same &= b[0] == b[1] && !memcmp(e[0], e[1], b[0]) && f[0] == f[1] &&
                        !memcmp(u[0], u[1], f[0]) && !memcmp(d[0], d[1], n * 4);
                if (!same) {
                    diag("%s: config %zu, %zu values differ", names[level], c, n);
                    c = TDL_ARRAY_SIZE(cfgs) - 1, z = TDL_ARRAY_SIZE(sizes) - 1;
                }
                free(x), free(l), free(d[0]), free(d[1]), free(e[0]), free(e[1]), free(u[0]),
                    free(u[1]);
            }
        ok(same, "the %s loops give the portable loops' bytes: encode, fused pass and decode, "
                 "7 configurations x 6 sizes",
           names[level]);
    }
    codec_dynamiq_isa(initial);
}

/* Vectors of values far below FLT_MIN, where 1 / scale overflows (or loses bits for subnormal
 * scales): each decodes within a fraction of its largest magnitude, with every set of loops the
 * CPU has, and all of them give the same bytes. (Each its own encoding: in one vector the budget
 * split would rightly give such super-groups a bit a value.) */
static void test_tiny(void)
{
    enum { N = 512 };
    const float mags[] = {1e-30f, 1e-37f, 1e-39f, 3e-42f};
    int initial = codec_dynamiq_isa(-1), good = 1;
    double worst = 0;
    for (size_t t = 0; t < TDL_ARRAY_SIZE(mags); t++) {
        float x[N], y[N];
        tdl_rng_t rng;
        tdl_rng_init(&rng, 77, t);
        for (int i = 0; i < N; i++)
            x[i] = mags[t] * (float)tdl_rng_normal(&rng) * 0.3f;
        unsigned char *first = NULL;
        size_t first_bytes = 0;
        for (int isa = 0; isa <= 2; isa++) {
            codec_dynamiq_isa(isa);
            if (codec_dynamiq_isa(-1) != isa)
                continue;
            codec_where_t w = where_of(5, 1, 0, 4);
            size_t bytes;
            unsigned char *e = enc_new(NULL, &w, x, N, &bytes);
            good &= e && ops->decode(NULL, e, bytes, y, N) == TDL_OK;
            for (int i = 0; good && i < N; i++)
                worst = fmax(worst, fabs((double)y[i] - x[i]) / mags[t]);
            if (!first) {
                first = e, first_bytes = bytes;
            } else {
                good &= bytes == first_bytes && !memcmp(e, first, bytes);
                free(e);
            }
        }
        free(first);
    }
    codec_dynamiq_isa(initial);
    ok(good && worst < 0.25,
       "vectors of 1e-30 down to 3e-42 decode within %.3f of their magnitude (< 0.25), the same "
       "bytes from every set of loops",
       worst);
}

static void test_malformed(void)
{
    enum { N = 600 };
    float x[N], out[N], local[N];
    fill_heavy(x, N, 8);
    fill_heavy(local, N, 9);
    codec_where_t w = where_of(4, 0, 0, 0);
    size_t bytes;
    unsigned char *good_enc = enc_new(NULL, &w, x, N, &bytes);
    int refused = good_enc != NULL;
    for (int k = 0; k < 7; k++) {
        size_t len = k == 0 ? bytes - 1 : k == 1 ? bytes + 1 : k == 2 ? 2 : bytes;
        unsigned char *in = malloc(len + 1);
        memcpy(in, good_enc, TDL_MIN(len, bytes));
        if (len > bytes)
            in[bytes] = 0;
        if (k == 3)
            in[0] = 9; /* version */
        if (k == 4)
            in[4] = (unsigned char)(in[4] + 1); /* units of the first super-group */
        if (k == 5)
            in[4 + 3 + 2] = 0xf1; /* after the units table (3 super-groups) and S */ /* a zero group with a width */
        if (k == 6)
            in[2] = 0, in[3] = 0; /* budget */
        for (int j = 0; j < N; j++)
            out[j] = -7.0f;
        unsigned char enc[4096];
        size_t ob = 12345;
        tdl_error_clear();
        refused &= ops->decode(NULL, in, len, out, N) == TDL_ERR_CORRUPT;
        refused &= strstr(tdl_error_get(), "dynamiq") != NULL;
        refused &= ops->decode_accumulate(NULL, in, len, out, N) == TDL_ERR_CORRUPT;
        refused &= ops->decode_accumulate_encode(NULL, &w, in, len, local, N, enc, &ob) ==
                   TDL_ERR_CORRUPT;
        refused &= ob == 12345;
        for (int j = 0; j < N; j++)
            refused &= out[j] == -7.0f;
        if (!refused)
            diag("case %d not refused", k);
        free(in);
    }
    ok(refused, "wrong sizes, version, budget and metadata give TDL_ERR_CORRUPT naming the codec, "
                "outputs untouched");
    diag("for example: %s", tdl_error_get());
    ok(ops->encode(NULL, NULL, x, 4, out, &bytes) == TDL_ERR_INVALID_ARG &&
           ops->encode(&cfg_rne, NULL, x, 4, (unsigned char[64]){0}, &bytes) == TDL_OK,
       "stochastic rounding (the default) needs where the encoding happens; nearest does not");
    free(good_enc);
}

int main(void)
{
    ops = codec_find("dynamiq");
    if (!ops) {
        printf("Bail out! dynamiq is not in the codec table\n");
        return 1;
    }
    test_tables();
    test_worked_example();
    test_round_trip();
    test_budget();
    test_fused();
    test_unbiased();
    test_isa();
    test_tiny();
    test_malformed();
    return done_testing();
}
