/* int8 and int8_rht (THC-like): error bounds, what the rotation buys on heavy tails, fused equals
 * unfused, unbiased stochastic rounding, and malformed input. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "tap.h"

static double vnmse(const float *x, const float *y, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        den += (double)x[i] * x[i];
    }
    return num / den;
}

int main(void)
{
    enum { N = 1000 }; /* three full groups of 256 and a partial one */
    float x[N], heavy[N], y[N], local[N], acc[N];
    unsigned char enc[2 * N], a[2 * N], b[2 * N];
    tdl_rng_t rng;
    tdl_rng_init(&rng, 5, 5);
    for (int i = 0; i < N; i++) {
        x[i] = tdl_rng_normal(&rng);
        local[i] = tdl_rng_normal(&rng);
        /* mostly small values with rare large outliers */
        heavy[i] = tdl_rng_normal(&rng) * (tdl_rng_uniform(&rng) < 0.01f ? 100.0f : 1.0f);
    }
    codec_where_t w = {.seed = 9, .rank = 1, .hop = 0, .contributions = 1, .stream = 3};
    const char *names[] = {"int8", "int8_rht"};
    double heavy_err[2];
    for (int k = 0; k < 2; k++) {
        codec_t *c;
        if (!ok(codec_create(names[k], NULL, &c) == TDL_OK, "%s exists", names[k]))
            continue;
        size_t len, len2;
        ok(c->ops->encode(c->cfg, &w, x, N, enc, &len) == TDL_OK &&
               len == c->ops->max_encoded_bytes(c->cfg, N),
           "%s: encodes %d values into %zu bytes", names[k], N, len);
        ok(c->ops->decode(c->cfg, enc, len, y, N) == TDL_OK, "%s: decodes", names[k]);
        if (k == 0) {
            int within = 1;
            for (int g = 0; g < N; g += 256) {
                float mx = 0;
                int m = g + 256 <= N ? 256 : N - g;
                for (int i = 0; i < m; i++)
                    mx = fmaxf(mx, fabsf(x[g + i]));
                for (int i = 0; i < m; i++)
                    within &= fabsf(y[g + i] - x[g + i]) <= mx / 127 / 2 * 1.0001f;
            }
            ok(within, "int8: every value within half a step (max / 254) of its group");
        }
        ok(vnmse(x, y, N) < 2e-4, "%s: vNMSE on normal data %.2e", names[k], vnmse(x, y, N));
        c->ops->encode(c->cfg, &w, heavy, N, enc, &len);
        c->ops->decode(c->cfg, enc, len, y, N);
        heavy_err[k] = vnmse(heavy, y, N);
        diag("%s: vNMSE on heavy-tailed data %.3e, %.3f bits per value", names[k], heavy_err[k],
             c->ops->bits_per_coord(c->cfg, N));

        /* fused == decode, add, encode: nearest and stochastic */
        for (int sr = 0; sr < 2; sr++) {
            codec_config_t cfg = {.round = sr ? CODEC_ROUND_STOCHASTIC : CODEC_ROUND_NEAREST};
            codec_t *cs;
            codec_create(names[k], &cfg, &cs);
            cs->ops->encode(cs->cfg, &w, x, N, enc, &len);
            codec_where_t w2 = w;
            w2.hop = 1, w2.contributions = 2;
            cs->ops->decode_accumulate_encode(cs->cfg, &w2, enc, len, local, N, a, &len2);
            memcpy(acc, local, sizeof(acc));
            cs->ops->decode_accumulate(cs->cfg, enc, len, acc, N);
            cs->ops->encode(cs->cfg, &w2, acc, N, b, &len);
            ok(len == len2 && memcmp(a, b, len) == 0,
               "%s (%s): fused decode-accumulate-encode equals the steps byte for byte", names[k],
               sr ? "stochastic" : "nearest");
            cs->ops->encode(cs->cfg, &w2, acc, N, a, &len);
            ok(memcmp(a, b, len) == 0, "%s (%s): the same place gives the same bytes", names[k],
               sr ? "stochastic" : "nearest");
            codec_destroy(cs);
        }
        ok(c->ops->decode(c->cfg, enc, len - 1, y, N) == TDL_ERR_CORRUPT,
           "%s: a short buffer is refused: %s", names[k], tdl_error_get());
        codec_destroy(c);
    }
    ok(heavy_err[1] < heavy_err[0],
       "the rotation lowers the error on heavy-tailed data (%.3e < %.3e)", heavy_err[1],
       heavy_err[0]);

    /* stochastic rounding is unbiased: the mean over seeds tends to the value */
    codec_config_t scfg = {.round = CODEC_ROUND_STOCHASTIC};
    codec_t *cs;
    codec_create("int8", &scfg, &cs);
    float v[256];
    for (int i = 0; i < 256; i++)
        v[i] = (i == 0) ? 127.0f : 0.3f + 0.001f * (float)i; /* scale 1: values between codes */
    double mean[256] = {0};
    const int seeds = 2000;
    for (int s = 0; s < seeds; s++) {
        codec_where_t ws = {.seed = (uint64_t)s, .rank = 0, .hop = 0, .stream = 1};
        size_t len;
        cs->ops->encode(cs->cfg, &ws, v, 256, enc, &len);
        cs->ops->decode(cs->cfg, enc, len, y, 256);
        for (int i = 0; i < 256; i++)
            mean[i] += y[i] / seeds;
    }
    double worst = 0;
    for (int i = 1; i < 256; i++)
        worst = fmax(worst, fabs(mean[i] - v[i]) / (0.5 / sqrt((double)seeds)));
    ok(worst < 5, "int8 stochastic rounding is unbiased (worst deviation %.2f standard errors)",
       worst);
    codec_destroy(cs);

    /* NaN (quiet or signalling) or Inf in a group: that group decodes to NaN, the others as
     * usual. (A signalling NaN first in a group once made fmaxf's maximum restart after it, and
     * the group encoded as finite values.) */
    for (int k = 0; k < 2; k++) {
        for (int rd = CODEC_ROUND_NEAREST; rd <= CODEC_ROUND_STOCHASTIC; rd++) {
            codec_config_t cfg = {.round = (codec_round_t)rd};
            codec_t *c;
            codec_create(names[k], &cfg, &c);
            float z[N];
            memcpy(z, x, sizeof(z));
            uint32_t snan = 0x7f800001u, qnan = 0xffc01234u;
            memcpy(&z[256], &snan, 4); /* group 1: first value */
            memcpy(&z[700], &qnan, 4); /* group 2 */
            z[900] = -INFINITY;        /* the partial group 3 */
            z[300] = 40.0f;            /* larger than the rest, after group 1's NaN */
            z[5] = 50.0f;              /* group 0 stays finite, scale 50 / 127 */
            size_t len;
            int good = c->ops->encode(c->cfg, &w, z, N, enc, &len) == TDL_OK &&
                       c->ops->decode(c->cfg, enc, len, y, N) == TDL_OK;
            float worst0 = 0;
            for (int i = 0; i < 256; i++)
                worst0 = fmaxf(worst0, fabsf(y[i] - z[i]));
            good &= worst0 <= 50.0f / 127.0f; /* within a step of group 0's scale */
            for (int i = 256; i < N; i++)
                good &= isnan(y[i]) != 0;
            ok(good,
               "%s (%s): NaN or Inf in a group makes that group NaN, group 0 exact to a "
               "step (%.3g)",
               names[k], rd == CODEC_ROUND_NEAREST ? "nearest" : "stochastic", worst0);
            codec_destroy(c);
        }
    }

    /* Groups of tiny values (a scale below 2^-128, where 1 / scale overflows; subnormals): codes
     * relative to the stored scale, zeros stay zero, signs kept, error within a step plus the
     * scale's own rounding. */
    const float mags[] = {1e-39f, 3e-42f, 1e-36f};
    for (int k = 0; k < 2; k++) {
        for (int rd = CODEC_ROUND_NEAREST; rd <= CODEC_ROUND_STOCHASTIC; rd++) {
            codec_config_t cfg = {.round = (codec_round_t)rd};
            codec_t *c;
            codec_create(names[k], &cfg, &c);
            int good = 1;
            double worst = 0;
            for (int t = 0; t < 3; t++) {
                float z[512];
                for (int i = 0; i < 512; i++)
                    z[i] = i % 5 == 0 ? 0.0f : mags[t] * (float)tdl_rng_normal(&rng) * 0.3f;
                z[7] = mags[t], z[300] = -mags[t];
                size_t len;
                good &= c->ops->encode(c->cfg, &w, z, 512, enc, &len) == TDL_OK &&
                        c->ops->decode(c->cfg, enc, len, y, 512) == TDL_OK;
                for (int i = 0; i < 512; i++) {
                    double e = fabs((double)y[i] - z[i]) / mags[t];
                    worst = fmax(worst, e);
                    good &= isfinite(y[i]) && (k || z[i] != 0.0f || y[i] == 0.0f) &&
                            (k || z[i] * y[i] >= 0);
                }
            }
            double bound = rd == CODEC_ROUND_NEAREST ? 0.5 / 127 : 1.0 / 127;
            ok(good && worst <= bound * 1.5 + 0.02, /* + the scale's rounding at 3e-42 */
               "%s (%s): tiny and subnormal groups round-trip (worst %.4f of the group's max)",
               names[k], rd == CODEC_ROUND_NEAREST ? "nearest" : "stochastic", worst);
            codec_destroy(c);
        }
    }
    return done_testing();
}
