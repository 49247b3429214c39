/* The compressed all-reduce through gfc's ring and butterfly: for every codec, every rank ends
 * with the same bits (the final encodings are forwarded unchanged), and the result is within a
 * recorded vNMSE, |sum^ - sum|^2 / |sum|^2, of the exact sum, which each rank computes in double
 * from every rank's vector (each one a pure function of the seed and its rank).
 *
 * The thresholds are about 3x the largest vNMSE measured at 2 to 8 ranks when they were set
 * (tests/mpi/test_codec_allreduce.sh runs 2, 3, 4, 5 and 8 ranks). A NaN in one rank's
 * vector is reported by the codecs as NaN in its block of the sum, never a finite value. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "gfc/harness.h"
#include "train/train.h"

typedef struct fmt {
    const char *name;
    bool stochastic;
    double max_vnmse;
} fmt_t;

static const fmt_t formats[] = {
    {"bf16", false, 3e-5},         {"fp16", false, 3e-6},        {"mxfp8_e4m3", false, 2e-2},
    {"mxfp8_e5m2", false, 6e-2},   {"mxfp6_e3m2", false, 6e-2},  {"mxfp6_e2m3", false, 1e-2},
    {"mxfp4_e2m1", false, 2e-1},   {"int8", true, 1e-2},         {"int8_rht", true, 1e-2},
    {"dynamiq", false, 1.5e-2},
};

/* Rank r's values: harness_fill_grad's, a pure function of the seed and the rank. */
static void fill(float *x, size_t n, uint64_t seed, int rank)
{
    tdl_rng_t shared, own;
    tdl_rng_init(&shared, seed, 1000);
    tdl_rng_init(&own, seed, (uint64_t)rank);
    harness_fill_grad(x, n, &shared, &own);
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 60000) != TDL_OK)
        return 1;
    const size_t n = 40009; /* odd: uneven blocks and a short last super-group */
    int *ranks = malloc((size_t)h.size * sizeof(int));
    for (int r = 0; r < h.size; r++)
        ranks[r] = r;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *tmp = malloc(n * 4);
    double *exact = calloc(n, sizeof(double)), norm = 0;
    for (int r = 0; r < h.size; r++) {
        fill(tmp, n, h.seed, r);
        for (size_t i = 0; i < n; i++)
            exact[i] += tmp[i];
    }
    for (size_t i = 0; i < n; i++)
        norm += exact[i] * exact[i];
    fill(x, n, h.seed, h.rank);
    static const gfc_allreduce_algo_t algos[] = {GFC_ALLREDUCE_RING, GFC_ALLREDUCE_BUTTERFLY};
    for (size_t f = 0; f < TDL_ARRAY_SIZE(formats); f++)
        for (size_t a = 0; a < TDL_ARRAY_SIZE(algos); a++) {
            train_codec_t *tc = NULL;
            harness_expect_status(&h, train_codec_create(formats[f].name, formats[f].stochastic,
                                                         h.seed + f, &tc),
                                  TDL_OK, "codec");
            gfc_group_t g;
            harness_expect_status(&h, gfc_group_init(&g, h.rt, ranks, h.size, 10 + 2 * f + a),
                                  TDL_OK, "group");
            gfc_allreduce_opts_t opts = {.algo = algos[a], .codec = tc ? train_codec_hook(tc) : NULL};
            double vn = -1;
            if (tc &&
                harness_expect_status(&h, gfc_allreduce(&g, x, y, n, GFC_DT_F32, GFC_OP_SUM,
                                                           &opts),
                                      TDL_OK, "all-reduce")) {
                uint64_t mine = harness_hash(y, n * sizeof(float)), all[64];
                gfc_allgather(&g, &mine, all, 1, GFC_DT_I64);
                for (int r = 0; r < h.size; r++)
                    harness_expect(&h, all[r] == mine, "%s: rank %d holds other bits",
                                   formats[f].name, r);
                double err = 0;
                for (size_t i = 0; i < n; i++)
                    err += ((double)y[i] - exact[i]) * ((double)y[i] - exact[i]);
                vn = err / norm;
                harness_expect(&h, vn <= formats[f].max_vnmse, "%s: vNMSE %.3g above %.3g",
                               formats[f].name, vn, formats[f].max_vnmse);
            }
            harness_diag(&h, "%s %s on %d ranks: vNMSE %.3e (%.2f bits per value)",
                         formats[f].name, gfc_allreduce_algo_name(algos[a]), h.size, vn,
                         tc ? train_codec_bits_per_coord(tc, n) : 0.0);
            harness_point(&h, "%d ranks, %s, %s: bit-identical on every rank, vNMSE <= %.2g",
                          h.size, gfc_allreduce_algo_name(algos[a]), formats[f].name,
                          formats[f].max_vnmse);
            train_codec_free(tc);
        }

    /* error feedback: the same vector all-reduced K times with nearest rounding at 3 bits; each
     * rank re-adds its encoding errors, so the mean of the K results approaches the exact sum
     * (error ~ 1/K) while without feedback the bias of nearest rounding stays */
    {
        enum { K = 16 };
        double vn_ef = 0, vn_plain = 0, first = 0;
        for (int ef = 0; ef < 2; ef++) {
            train_codec_t *tc = NULL;
            codec_config_t cc = {.round = CODEC_ROUND_NEAREST, .bits = 3.0};
            harness_expect_status(&h, train_codec_create_config("dynamiq", &cc, h.seed, &tc),
                                  TDL_OK, "codec");
            if (ef && tc)
                harness_expect_status(&h, train_codec_error_feedback(tc, n), TDL_OK, "feedback");
            double *mean = calloc(n, sizeof(double));
            float *g = malloc(n * sizeof(float));
            for (int k = 0; k < K && tc; k++) {
                gfc_group_t g2;
                harness_expect_status(&h, gfc_group_init(&g2, h.rt, ranks, h.size, 200 + ef * K + k),
                                      TDL_OK, "group");
                memcpy(g, x, n * sizeof(float));
                train_codec_apply_residual(tc, g, n);
                gfc_allreduce_opts_t o2 = {.algo = GFC_ALLREDUCE_RING, .codec = train_codec_hook(tc)};
                if (!harness_expect_status(&h, gfc_allreduce(&g2, g, y, n, GFC_DT_F32, GFC_OP_SUM,
                                                             &o2),
                                           TDL_OK, "all-reduce"))
                    break;
                for (size_t i = 0; i < n; i++)
                    mean[i] += y[i] / (double)K;
                if (k == 0 && ef) {
                    double err = 0;
                    for (size_t i = 0; i < n; i++)
                        err += ((double)y[i] - exact[i]) * ((double)y[i] - exact[i]);
                    first = err / norm;
                }
            }
            double err = 0;
            for (size_t i = 0; i < n; i++)
                err += (mean[i] - exact[i]) * (mean[i] - exact[i]);
            *(ef ? &vn_ef : &vn_plain) = err / norm;
            free(mean), free(g);
            train_codec_free(tc);
        }
        /* the mean's error falls 30-80x at 8 ranks on most data (seeds 1-10), 7x on data whose
         * one-shot error is already small (vNMSE 4e-3, seed 7857683167421948879); without
         * feedback it does not fall at all (nearest rounding repeats itself) */
        harness_expect(&h, vn_ef < 0.25 * first && vn_ef < 0.25 * vn_plain,
                       "error feedback: mean of %d all-reduces has vNMSE %.3g (one: %.3g, without "
                       "feedback: %.3g)",
                       K, vn_ef, first, vn_plain);
        harness_diag(&h, "error feedback over %d all-reduces at 3 bits: vNMSE of the mean %.3g, of "
                         "one %.3g, of the mean without feedback %.3g",
                     K, vn_ef, first, vn_plain);
        harness_point(&h, "%d ranks, dynamiq with error feedback: the mean of repeated all-reduces "
                          "converges to the exact sum",
                      h.size);
    }

    /* a NaN in one rank's gradient: NaN where it lands in the sum, every rank alike */
    x[12345] = NAN;
    train_codec_t *tc = NULL;
    harness_expect_status(&h, train_codec_create("dynamiq", false, h.seed, &tc), TDL_OK, "codec");
    gfc_group_t g;
    harness_expect_status(&h, gfc_group_init(&g, h.rt, ranks, h.size, 99), TDL_OK, "group");
    gfc_allreduce_opts_t opts = {.algo = GFC_ALLREDUCE_RING, .codec = train_codec_hook(tc)};
    if (harness_expect_status(&h, gfc_allreduce(&g, x, y, n, GFC_DT_F32, GFC_OP_SUM, &opts),
                              TDL_OK, "all-reduce")) {
        harness_expect(&h, isnan(y[12345]), "the NaN's coordinate is %g", (double)y[12345]);
        size_t finite = 0;
        for (size_t i = 0; i < n; i++)
            finite += isfinite(y[i]) != 0;
        harness_expect(&h, finite >= n - 256, "%zu values of %zu finite", finite, n);
    }
    harness_point(&h, "%d ranks, dynamiq: a NaN poisons its super-group of the sum only", h.size);
    train_codec_free(tc);
    free(ranks), free(x), free(y), free(tmp), free(exact);
    return harness_finish(&h);
}
