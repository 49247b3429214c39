/* Trajectory tasks and migration: a request's final latents, whatever groups and degrees its
 * steps ran on and however its state moved between them (disjoint, overlapping, growing,
 * shrinking), are within 1e-4 of the single-rank run with the same seed, which itself matches
 * dit_sample; sharded, replicated and owner-only tensors reshard between groups of other sizes
 * row for row; the packed state round-trips and a damaged one is refused. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "gfc/harness.h"
#include "model_fixture.h"
#include "serve/serve.h"

static bool member(const int *g, int n, int r)
{
    for (int i = 0; i < n; i++)
        if (g[i] == r)
            return true;
    return false;
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 120000) != TDL_OK)
        return 1;
    dit_model_t *m = fixture_model(&h, 4, 32);
    if (!m)
        return harness_finish(&h);
    const dit_config_t cfg = m->config;
    serve_traj_spec_t spec = {.id = 7, .seed = 5, .n = 2, .res = 32, .steps = 6, .label = 3,
                              .cfg = 1.5f};

    /* the single-rank run, and dit_sample's */
    serve_traj_t ref;
    harness_expect_status(&h, serve_traj_init(&ref, &spec, cfg.in_channels), TDL_OK, "init");
    serve_task_prepare(&ref);
    harness_expect_status(&h, serve_task_step_chunk(&ref, m, NULL, false, 100), TDL_OK, "steps");
    size_t nv = serve_traj_values(&ref);
    float *smp = malloc(nv * sizeof(float));
    int labels[2] = {3, 3};
    dit_sample_opts_t so = {.steps = 6, .cfg_scale = 1.5f, .seed = 5, .kind = DIT_SAMPLER_EULER};
    harness_expect_status(&h, dit_sample(m, labels, 2, 32, 32, &so, smp), TDL_OK, "dit_sample");
    double scale = 0, dsm = 0;
    for (size_t i = 0; i < nv; i++) {
        scale = fmax(scale, fabs(ref.x[i]));
        dsm = fmax(dsm, fabs((double)ref.x[i] - smp[i]));
    }
    harness_expect(&h, dsm <= 1e-5 * scale, "tasks on one rank differ from dit_sample by %.3g", dsm);
    harness_point(&h, "PREPARE and STEP_CHUNKs on one rank give dit_sample's latents (%.2g)", dsm);

    /* the same request moving between groups: each stage (its group, then its steps) */
    typedef struct stage {
        int ranks[4], n, steps;
    } stage_t;
    stage_t plan4[] = {{{0}, 1, 2}, {{1, 2}, 2, 2}, {{2, 3, 0, 1}, 4, 1}, {{3, 1}, 2, 1}, {{3}, 1, 0}};
    stage_t plan2[] = {{{0}, 1, 2}, {{1}, 1, 1}, {{1, 0}, 2, 2}, {{0, 1}, 2, 1}, {{1}, 1, 0}};
    stage_t *plan = h.size >= 4 ? plan4 : plan2;
    int nstages = 5;
    serve_traj_t t;
    bool have = false;
    if (member(plan[0].ranks, plan[0].n, h.rank)) {
        serve_traj_init(&t, &spec, cfg.in_channels);
        serve_task_prepare(&t);
        have = true;
    }
    for (int s = 0; s < nstages; s++) {
        stage_t *st = &plan[s];
        if (s > 0) {
            stage_t *prev = &plan[s - 1];
            bool joins = member(st->ranks, st->n, h.rank) && !have;
            if (joins) {
                serve_traj_init(&t, &spec, cfg.in_channels);
                have = true;
            }
            if (member(prev->ranks, prev->n, h.rank) || member(st->ranks, st->n, h.rank))
                harness_expect_status(&h,
                                      serve_traj_migrate(h.rt, h.rank, prev->ranks, prev->n,
                                                         st->ranks, st->n, 500 + (uint64_t)s, &t),
                                      TDL_OK, "migrate");
            if (have && !member(st->ranks, st->n, h.rank)) {
                serve_traj_free(&t); /* left the request */
                have = false;
            }
        }
        if (have && st->steps > 0) {
            gfc_group_t g;
            harness_expect_status(&h, gfc_group_init(&g, h.rt, st->ranks, st->n, 600 + (uint64_t)s),
                                  TDL_OK, "group");
            /* groups of 2 and 4 run guidance's halves on their two halves (CFG parallelism) */
            harness_expect_status(&h, serve_task_step_chunk(&t, m, &g, st->n % 2 == 0, st->steps),
                                  TDL_OK, "step chunk");
        }
    }
    stage_t *last = &plan[nstages - 1];
    if (have) {
        double worst = 0;
        for (size_t i = 0; i < nv; i++)
            worst = fmax(worst, fabs((double)t.x[i] - ref.x[i]));
        harness_expect(&h, t.step == spec.steps, "the request ran %d of %d steps", t.step,
                       spec.steps);
        harness_expect(&h, worst <= 1e-4 * scale,
                       "migrated final latents differ by %.3g (scale %.3g)", worst, scale);
        harness_expect_status(&h, serve_task_decode(&t, NULL, 0), TDL_OK, "decode");
        harness_expect(&h, t.png_len > 8 && !memcmp(t.png, "\x89PNG", 4), "a PNG came out");
        if (h.rank == last->ranks[0])
            harness_diag(&h, "after %d stages and %d migrations: largest difference %.2e of %.2e",
                         nstages, nstages - 1, worst, scale);
        serve_traj_free(&t);
    }
    harness_point(&h, "%s: final latents within 1e-4 of the single-rank run, decoded to a PNG",
                  h.size >= 4 ? "1 -> 2 disjoint -> 4 overlapping -> 2 -> 1 ranks"
                              : "1 -> 1 other -> 2 -> 2 reordered -> 1 ranks");

    /* resharding a sharded tensor of 37 rows of 3 floats between groups of other sizes */
    if (h.size >= 3) {
        int a[3] = {0, 1, 2}, b[2] = {h.size - 1, 1};
        size_t rows = 37, rb = 3 * sizeof(float);
        serve_layout_t sh = {.kind = SERVE_LAYOUT_SHARDED}, rep = {.kind = SERVE_LAYOUT_REPLICATED};
        serve_layout_t own = {.kind = SERVE_LAYOUT_OWNER, .owner = 1};
        float global[37 * 3];
        for (size_t i = 0; i < rows * 3; i++)
            global[i] = (float)i + 0.5f;
        const serve_layout_t tos[] = {sh, rep, own};
        for (int k = 0; k < 3; k++) {
            int ia = -1, ib = -1;
            for (int i = 0; i < 3; i++)
                if (a[i] == h.rank)
                    ia = i;
            for (int j = 0; j < 2; j++)
                if (b[j] == h.rank)
                    ib = j;
            size_t slo = ia >= 0 ? rows * (size_t)ia / 3 : 0;
            float dst[37 * 3];
            for (size_t i = 0; i < rows * 3; i++)
                dst[i] = -1;
            serve_tensor_move_t mv = {.rows = rows, .row_bytes = rb, .from = sh, .to = tos[k],
                                      .src = ia >= 0 ? (const unsigned char *)(global + slo * 3)
                                                     : NULL,
                                      .dst = ib >= 0 ? (unsigned char *)dst : NULL};
            harness_expect_status(&h, serve_reshard(h.rt, h.rank, a, 3, b, 2, 700 + (uint64_t)k,
                                                    &mv, 1),
                                  TDL_OK, "reshard");
            if (ib >= 0) {
                size_t lo = 0, hi = rows;
                if (tos[k].kind == SERVE_LAYOUT_SHARDED)
                    lo = rows * (size_t)ib / 2, hi = rows * (size_t)(ib + 1) / 2;
                if (tos[k].kind == SERVE_LAYOUT_OWNER && ib != 1)
                    hi = 0;
                bool good = true;
                for (size_t i = lo; i < hi; i++)
                    for (int c = 0; c < 3; c++)
                        good &= dst[(i - lo) * 3 + c] == global[i * 3 + c];
                harness_expect(&h, good, "rank %d's rows after resharding to layout %d", h.rank,
                               (int)tos[k].kind);
            }
        }
        harness_point(&h, "a tensor sharded on 3 ranks reshards to 2 (sharded, replicated, "
                          "owner-only), row for row");
    }

    /* the state as bytes */
    size_t pb = serve_traj_packed_bytes(&ref);
    unsigned char *buf = malloc(pb);
    serve_traj_pack(&ref, buf);
    serve_traj_t back;
    bool same = serve_traj_unpack(&back, buf, pb) == TDL_OK && back.step == ref.step &&
                back.prepared && !memcmp(back.x, ref.x, nv * sizeof(float));
    if (same)
        serve_traj_free(&back);
    buf[0] ^= 1;
    same &= serve_traj_unpack(&back, buf, pb) == TDL_ERR_CORRUPT;
    buf[0] ^= 1;
    same &= serve_traj_unpack(&back, buf, pb - 4) == TDL_ERR_CORRUPT;
    harness_expect(&h, same, "pack/unpack");
    harness_point(&h, "the packed state round-trips; a damaged or short one is refused");
    free(buf), free(smp);
    serve_traj_free(&ref);
    dit_model_free(m);
    return harness_finish(&h);
}
