/* dit_sampler_step_batch: trajectories of different requests (labels, guidance, image counts,
 * times along their schedules) stepped together give, each, the bytes dit_sampler_step gives it
 * alone: for Euler and Heun, at 32 and 64 pixels, with rows that fill several passes, on the
 * training model and on the inference model. The weights are random (the DiT's own
 * initialization zeroes the output layers, which would make every velocity zero). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dit/dit.h"
#include "tap.h"

static void random_weights(dit_model_t *m, uint64_t seed)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 0);
    tdl_rng_fill_normal(&rng, m->params, m->num_params);
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] *= 0.05f;
    dit_model_params_changed(m);
}

typedef struct traj {
    int n, label;
    float cfg, t_from, t_to;
} traj_t;

/* The trajectories of one case: three requests at different points of their schedules. */
static const traj_t trajs[] = {
    {.n = 1, .label = 3, .cfg = 4.0f, .t_from = 1.0f, .t_to = 0.95f},
    {.n = 2, .label = -1, .cfg = 1.0f, .t_from = 0.5f, .t_to = 0.45f}, /* unconditional */
    {.n = 1, .label = 7, .cfg = 2.0f, .t_from = 0.3f, .t_to = 0.2f},
    {.n = 3, .label = 0, .cfg = 1.0f, .t_from = 0.8f, .t_to = 0.7f}, /* conditional, no guidance */
};
#define NT ((int)(sizeof(trajs) / sizeof(trajs[0])))

static bool one_case(dit_model_t *m, int res, dit_sampler_kind_t kind, double *largest)
{
    size_t per = (size_t)m->config.in_channels * res * res;
    float *alone[NT], *batched[NT];
    int labels[NT][4];
    dit_sample_item_t items[NT];
    bool ok = true;
    for (int i = 0; i < NT; i++) {
        size_t n = (size_t)trajs[i].n * per;
        alone[i] = malloc(n * sizeof(float));
        batched[i] = malloc(n * sizeof(float));
        dit_sampler_noise(alone[i], trajs[i].n, per, 100 + (uint64_t)i, 0);
        memcpy(batched[i], alone[i], n * sizeof(float));
        for (int j = 0; j < trajs[i].n; j++)
            labels[i][j] = trajs[i].label;
        items[i] = (dit_sample_item_t){.x = batched[i],
                                       .labels = labels[i],
                                       .n = trajs[i].n,
                                       .t_from = trajs[i].t_from,
                                       .t_to = trajs[i].t_to,
                                       .cfg_scale = trajs[i].cfg};
        if (dit_sampler_step(m, alone[i], labels[i], trajs[i].n, res, res, trajs[i].t_from,
                             trajs[i].t_to, kind, trajs[i].cfg) != TDL_OK) {
            diag("dit_sampler_step: %s", tdl_error_get());
            ok = false;
        }
    }
    if (dit_sampler_step_batch(m, items, NT, res, res, kind) != TDL_OK) {
        diag("dit_sampler_step_batch: %s", tdl_error_get());
        ok = false;
    }
    double moved = 0;
    for (int i = 0; i < NT; i++) {
        size_t n = (size_t)trajs[i].n * per;
        size_t nd = 0, first = 0;
        for (size_t e = 0; e < n; e++)
            if (memcmp(&alone[i][e], &batched[i][e], sizeof(float)) && !nd++)
                first = e;
        if (nd) {
            diag("trajectory %d: %zu of %zu values differ, the first at %zu: %a against %a", i,
                 nd, n, first, alone[i][first], batched[i][first]);
            ok = false;
        }
        for (size_t e = 0; e < n; e++) {
            *largest = fmax(*largest, fabs((double)alone[i][e] - (double)batched[i][e]));
            moved += fabs((double)alone[i][e]);
        }
        free(alone[i]);
        free(batched[i]);
    }
    return ok && moved > 0;
}

int main(void)
{
    dit_config_t cfg;
    dit_config_named("tiny", &cfg);
    /* 4 + 2 + 2 + 3 = 11 rows: max_batch 4 runs them in three passes, 16 in one */
    const int batches[] = {4, 16};
    for (int bi = 0; bi < 2; bi++) {
        for (int inf = 0; inf < 2; inf++) {
            dit_model_t *m = NULL;
            tdl_status_t st = inf ? dit_model_create_inference(&cfg, batches[bi], 64, NULL, &m)
                                  : dit_model_create(&cfg, batches[bi], 64, &m);
            if (!ok(st == TDL_OK, "the tiny %s model for %d rows a pass",
                    inf ? "inference" : "training", batches[bi]))
                continue;
            random_weights(m, 9);
            for (int res = 32; res <= 64; res *= 2) {
                for (int k = 0; k < 2; k++) {
                    dit_sampler_kind_t kind = k ? DIT_SAMPLER_HEUN : DIT_SAMPLER_EULER;
                    double largest = 0;
                    ok(one_case(m, res, kind, &largest),
                       "%s, %d rows a pass, %d px, %s: 4 requests (guided, unconditional, "
                       "several images) stepped together equal each alone byte for byte "
                       "(largest difference %g)",
                       inf ? "inference" : "training", batches[bi], res,
                       k ? "heun" : "euler", largest);
                }
            }
            dit_model_free(m);
        }
    }
    dit_sample_item_t bad = {.x = NULL, .n = 1};
    dit_model_t *m = NULL;
    if (dit_model_create(&cfg, 4, 32, &m) == TDL_OK) {
        is_int(dit_sampler_step_batch(m, &bad, 1, 32, 32, DIT_SAMPLER_EULER), TDL_ERR_INVALID_ARG,
               "an item without images is refused");
        dit_model_free(m);
    }
    return done_testing();
}
