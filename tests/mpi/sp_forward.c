/* Sequence-parallel forward (Ulysses over gfc) at 1, 2 and 4 ranks equals the single-rank
 * forward within 1e-5 (largest difference over the largest magnitude), at 32x32, 64x64 and
 * 128x128 (64 to 1024 tokens), on groups in order and reversed; every member gets the whole
 * output, bit-identical across members. The fmnist model with random weights everywhere (the
 * reference initialization zeroes adaLN and the output layer, which would hide errors), and at
 * 32x32 the same with learn_sigma (2C output channels). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "gfc/harness.h"
#include "model_fixture.h"
#include "serve/serve.h"

/* The sequence-parallel forward of m at each side on 1, 2 and 4 ranks against its single-rank
 * forward; tag keeps the groups' keys apart. */
static void sp_compare(harness_t *h, dit_model_t *m, const int *sides, int nsides, const char *what,
                       uint64_t tag)
{
    tdl_rng_t rng;
    int ranks[64];
    const dit_config_t cfg = m->config;
    int co = dit_config_out_channels(&cfg);
    for (int si = 0; si < nsides; si++) {
        int side = sides[si], b = 2;
        size_t nx = (size_t)b * cfg.in_channels * side * side;
        size_t n = (size_t)b * co * side * side; /* the output's: 2C channels with learn_sigma */
        float *x = malloc(nx * sizeof(float)), *ref = malloc(n * sizeof(float));
        float *out = malloc(n * sizeof(float));
        float t[2] = {0.3f, 0.8f};
        int y[2] = {3, cfg.num_classes}; /* a class and the null label */
        tdl_rng_init(&rng, 7, (uint64_t)side);
        tdl_rng_fill_normal(&rng, x, nx);
        harness_expect_status(h, dit_model_forward(m, x, t, y, b, side, side, ref), TDL_OK,
                              "single-rank forward");
        double scale = 0;
        for (size_t i = 0; i < n; i++)
            scale = fmax(scale, fabs(ref[i]));
        for (int P = 1; P <= 4 && P <= h->size; P *= 2)
            for (int rev = 0; rev < 2; rev++) {
                for (int i = 0; i < P; i++)
                    ranks[i] = rev ? P - 1 - i : i;
                if (h->rank < P) {
                    gfc_group_t g;
                    harness_expect_status(
                        h,
                        gfc_group_init(&g, h->rt, ranks, P,
                                       tag + (uint64_t)si * 10 + (uint64_t)P * 2 + rev),
                        TDL_OK, "group");
                    dit_sp_comm_t comm;
                    serve_sp_comm(&comm, &g);
                    memset(out, 0, n * sizeof(float));
                    if (harness_expect_status(h,
                                              dit_sp_forward(m, &comm, x, t, y, b, side, side, out),
                                              TDL_OK, "sequence-parallel forward")) {
                        double worst = 0;
                        for (size_t i = 0; i < n; i++)
                            worst = fmax(worst, fabs((double)out[i] - ref[i]));
                        harness_expect(h, worst <= 1e-5 * scale,
                                       "%dx%d on %d ranks: largest difference %.3g (scale %.3g)",
                                       side, side, P, worst, scale);
                        uint64_t mine = harness_hash(out, n * sizeof(float)), all[64];
                        gfc_allgather(&g, &mine, all, 1, GFC_DT_I64);
                        for (int r = 0; r < P; r++)
                            harness_expect(h, all[r] == mine, "member %d holds other bits", r);
                        if (h->rank == ranks[0])
                            harness_diag(h,
                                         "%dx%d (%d tokens) on %d ranks%s: largest difference "
                                         "%.2e of %.2e",
                                         side, side,
                                         (side / cfg.patch_size) * (side / cfg.patch_size), P,
                                         rev ? ", reversed" : "", worst, scale);
                    }
                }
                harness_point(h, "%s%dx%d on %d ranks%s: the single-rank forward within 1e-5", what,
                              side, side, P, rev ? " (reversed order)" : "");
            }
        free(x), free(ref), free(out);
    }
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 120000) != TDL_OK)
        return 1;
    dit_model_t *m = fixture_model(&h, 2, 128);
    if (!m)
        return harness_finish(&h);
    static const int sides[] = {32, 64, 128};
    sp_compare(&h, m, sides, 3, "", 1000);
    /* learn_sigma: the output layer's 2C channels go through the all-gather */
    dit_config_t sc = m->config;
    sc.learn_sigma = 1;
    dit_model_t *ms = NULL;
    harness_expect_status(&h, dit_model_create(&sc, 2, 32, &ms), TDL_OK, "learn_sigma model");
    if (ms) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, 42, 2);
        for (size_t i = 0; i < ms->num_params; i++)
            ms->params[i] = 0.05f * tdl_rng_normal(&rng);
        sp_compare(&h, ms, sides, 1, "learn_sigma, ", 5000);
        dit_model_free(ms);
    }
    /* what cannot be split is refused, not miscomputed */
    dit_sp_comm_t three = {.size = 3, .rank = 0};
    float dummy[4] = {0};
    int lab = 0;
    harness_expect(&h, dit_sp_forward(m, &three, dummy, dummy, &lab, 1, 32, 32, dummy) ==
                           TDL_ERR_INVALID_ARG,
                   "3 ranks for 64 tokens and 4 heads is refused");
    harness_point(&h, "a degree that divides neither the tokens nor the heads is refused");
    dit_model_free(m);
    return harness_finish(&h);
}
