/* Data-parallel training gives the same weights as one rank with the same global batch: every
 * rank trains K steps alone (group NULL) and K steps in the world group, from the same seed, and
 * the two weight vectors must agree within 1e-5 (relative, largest element), on every rank, and
 * bit-identically across ranks. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gfc/harness.h"
#include "train/train.h"

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 60000) != TDL_OK)
        return 1;
    /* Synthetic 8x8 data: enough for the tiny model, independent of the Fashion-MNIST files. */
    enum { N = 96, S = 8 };
    uint8_t *pix = malloc(N * S * S);
    int32_t labels[N];
    tdl_rng_t rng;
    tdl_rng_init(&rng, 7, 7);
    for (int i = 0; i < N * S * S; i++)
        pix[i] = (uint8_t)(tdl_rng_u32(&rng) & 0xff);
    for (int i = 0; i < N; i++)
        labels[i] = i % 10;
    train_opts_t o = {.model = "tiny", .data = "(memory)", .steps = 4, .batch = 12,
                      .micro_batch = 2, .lr = 1e-3f, .clip = 1.0f, .ema_decay = 0.9f,
                      .warmup = 2, .seed = 11};
    train_dataset_t *ds_a, *ds_b;
    train_trainer_t *alone = NULL, *group = NULL;
    harness_expect_status(&h, train_dataset_create(N, 1, S, S, 10, pix, labels, &ds_a), TDL_OK,
                          "dataset");
    harness_expect_status(&h, train_dataset_create(N, 1, S, S, 10, pix, labels, &ds_b), TDL_OK,
                          "dataset");
    harness_expect_status(&h, train_trainer_create_with_data(&o, ds_a, &alone), TDL_OK,
                          "trainer alone");
    harness_expect_status(&h, train_trainer_create_with_data(&o, ds_b, &group), TDL_OK,
                          "trainer in the group");
    int *ranks = malloc((size_t)h.size * sizeof(int));
    for (int r = 0; r < h.size; r++)
        ranks[r] = r;
    gfc_group_t g;
    harness_expect_status(&h, gfc_group_init(&g, h.rt, ranks, h.size, 99), TDL_OK, "group");
    double la = 0, lg = 0;
    for (int s = 0; s < o.steps && alone && group; s++) {
        harness_expect_status(&h, train_trainer_step(alone, NULL, &la, NULL), TDL_OK, "step alone");
        harness_expect_status(&h, train_trainer_step(group, &g, &lg, NULL), TDL_OK, "step group");
    }
    if (alone && group) {
        dit_model_t *ma = train_trainer_model(alone), *mg = train_trainer_model(group);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < ma->num_params; i++) {
            worst = fmax(worst, fabs((double)ma->params[i] - mg->params[i]));
            scale = fmax(scale, fabs((double)ma->params[i]));
        }
        harness_expect(&h, worst <= 1e-5 * scale, "weights differ by %.3g (scale %.3g)", worst,
                       scale);
        harness_expect(&h, fabs(la - lg) <= 1e-5 * fabs(la), "loss %.9f alone, %.9f in group", la,
                       lg);
        uint64_t mine = harness_hash(mg->params, ma->num_params * sizeof(float)), all[64];
        gfc_allgather(&g, &mine, all, 1, GFC_DT_I64);
        for (int r = 0; r < h.size; r++)
            harness_expect(&h, all[r] == mine, "rank %d holds other weights", r);
        harness_diag(&h, "after %d steps: largest weight difference %.3g, loss %.6f", (int)o.steps,
                     worst, lg);
    }
    harness_point(&h, "%d ranks: same weights as one rank with the same global batch", h.size);

    /* Compressed all-reduce: every member still ends with the same bits, and the weights stay
     * close to the exact run's. */
    static const char *const formats[] = {"bf16", "mxfp8_e4m3", "mxfp4_e2m1", "int8_rht", "dynamiq"};
    for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
        train_opts_t oc = o;
        oc.allreduce = formats[f];
        train_dataset_t *ds_c;
        train_trainer_t *tc = NULL;
        harness_expect_status(&h, train_dataset_create(N, 1, S, S, 10, pix, labels, &ds_c),
                              TDL_OK, "dataset");
        harness_expect_status(&h, train_trainer_create_with_data(&oc, ds_c, &tc), TDL_OK,
                              "trainer with a codec");
        gfc_group_t gc;
        harness_expect_status(&h, gfc_group_init(&gc, h.rt, ranks, h.size, 100 + f), TDL_OK,
                              "group");
        for (int s = 0; s < o.steps && tc; s++)
            harness_expect_status(&h, train_trainer_step(tc, &gc, &lg, NULL), TDL_OK, "step");
        if (tc && group) {
            dit_model_t *mc = train_trainer_model(tc), *mg = train_trainer_model(group);
            uint64_t mine = harness_hash(mc->params, mc->num_params * sizeof(float)), all[64];
            gfc_allgather(&gc, &mine, all, 1, GFC_DT_I64);
            for (int r = 0; r < h.size; r++)
                harness_expect(&h, all[r] == mine, "%s: rank %d holds other weights", formats[f],
                               r);
            double num = 0, den = 0;
            for (size_t i = 0; i < mc->num_params; i++) {
                double d = (double)mc->params[i] - mg->params[i];
                num += d * d;
                den += (double)mg->params[i] * mg->params[i];
            }
            harness_expect(&h, sqrt(num / den) < 0.05, "%s: weights drift %.3g from exact",
                           formats[f], sqrt(num / den));
            harness_diag(&h, "%s all-reduce: relative weight difference to f32 %.2e", formats[f],
                         sqrt(num / den));
        }
        harness_point(&h, "%d ranks, %s all-reduce: bit-identical weights on every rank",
                      h.size, formats[f]);
        train_trainer_free(tc);
    }
    train_trainer_free(alone);
    train_trainer_free(group);
    free(ranks);
    free(pix);
    return harness_finish(&h);
}
