/* Elastic data-parallel training inside one job: ranks leave and join at step boundaries, a
 * joiner takes a member's state with train_trainer_sync, and the run follows the one in which
 * every rank trained from the start. The plan at N >= 3 ranks: {0,1} for 3 steps while the
 * others wait (rank 2 idle; ranks 3.. train alone on stale state the sync must replace), then
 * every rank for 3 steps after a sync from rank 0, then {0,2} for 2 steps. Losses must match the
 * reference within 1e-5 relative and the weights within 1e-5 absolute: only the order of float
 * sums differs between member counts, while a wrong batch or a missed sync moves the loss by far
 * more. Ranks at the same step must hold the same bits. Last, joiners with another model or seed
 * are refused on every member. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gfc/harness.h"
#include "train/train.h"

enum { STEPS = 8, JOIN = 3, LEAVE = 6 };

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    return worst;
}

static uint64_t state_hash(train_trainer_t *tr)
{
    dit_model_t *m = train_trainer_model(tr);
    uint64_t h[2] = {harness_hash(m->params, m->num_params * sizeof(float)),
                     harness_hash(train_trainer_ema(tr), m->num_params * sizeof(float))};
    return harness_hash(h, sizeof(h));
}

/* A trainer with another model or seed asks rank 0's trainer for its state: both refuse, and
 * neither state changes. */
static void check_refused(harness_t *h, train_trainer_t *tr, const train_opts_t *other, uint64_t ns,
                          const char *what, const char *says)
{
    int pair[2] = {0, h->size - 1};
    train_trainer_t *joiner = NULL;
    if (h->rank == pair[1])
        harness_expect_status(h, train_trainer_create(other, &joiner), TDL_OK, "joiner");
    train_trainer_t *mine = h->rank == 0 ? tr : joiner;
    if ((h->rank == 0 || h->rank == pair[1]) && mine) {
        gfc_group_t g;
        harness_expect_status(h, gfc_group_init(&g, h->rt, pair, 2, ns), TDL_OK, "pair");
        uint64_t before = state_hash(mine);
        tdl_status_t st = train_trainer_sync(mine, &g, 0);
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", tdl_error_get());
        harness_expect_status(h, st, TDL_ERR_MISMATCH, what);
        /* the joiner's error names what differs; rank 0 only knows that something does */
        harness_expect(h, h->rank == 0 || strstr(msg, says), "%s: the joiner says '%s'", what, msg);
        if (h->rank == 0)
            harness_diag(h, "%s: rank 0 says: %s", what, msg);
        harness_expect(h, state_hash(mine) == before, "%s: rank %d's state changed", what, h->rank);
    }
    train_trainer_free(joiner);
    harness_point(h, "a joiner with %s is refused by both members, no state changed", what);
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 60000) != TDL_OK)
        return 1;
    if (h.size < 3) {
        harness_fail(&h, "needs at least 3 ranks, got %d", h.size);
        harness_point(&h, "world size");
        return harness_finish(&h);
    }
    train_opts_t o = {.model = "tiny",
                      .data = "fmnist",
                      .steps = STEPS,
                      .batch = 8,
                      .micro_batch = 2,
                      .lr = 1e-3f,
                      .clip = 1.0f,
                      .ema_decay = 0.9f,
                      .warmup = 2,
                      .seed = 5};
    int *world = malloc((size_t)h.size * sizeof(int));
    for (int r = 0; r < h.size; r++)
        world[r] = r;

    /* The reference: every rank in one group from the start. */
    train_trainer_t *ref = NULL, *tr = NULL;
    harness_expect_status(&h, train_trainer_create(&o, &ref), TDL_OK, "reference trainer");
    harness_expect_status(&h, train_trainer_create(&o, &tr), TDL_OK, "elastic trainer");
    if (!harness_point(&h, "trainers on Fashion-MNIST")) {
        train_trainer_free(tr), train_trainer_free(ref), free(world);
        return harness_finish(&h);
    }
    size_t np = train_trainer_model(ref)->num_params;
    float *ref_at_leave = malloc(2 * np * sizeof(float)); /* weights | EMA */
    double ref_loss[STEPS], loss[STEPS];
    for (int s = 0; s < STEPS; s++)
        loss[s] = NAN;
    gfc_group_t g;
    harness_expect_status(&h, gfc_group_init(&g, h.rt, world, h.size, 1), TDL_OK, "world");
    for (int s = 0; s < STEPS; s++) {
        harness_expect_status(&h, train_trainer_step(ref, &g, &ref_loss[s], NULL), TDL_OK,
                              "reference step");
        if (s + 1 == LEAVE) {
            memcpy(ref_at_leave, train_trainer_model(ref)->params, np * sizeof(float));
            memcpy(ref_at_leave + np, train_trainer_ema(ref), np * sizeof(float));
        }
    }
    harness_point(&h, "reference: %d ranks for %d steps", h.size, STEPS);

    /* The elastic run. */
    static const int first[] = {0, 1}, last[] = {0, 2};
    const int *members[] = {first, world, last};
    const int sizes[] = {2, h.size, 2}, ends[] = {JOIN, LEAVE, STEPS};
    int from = 0;
    for (int p = 0; p < 3; p++) {
        bool in = harness_index_of(members[p], sizes[p], h.rank) >= 0;
        /* Stale state on a rank that will join: the sync must replace all of it. */
        for (int s = 0; p == 0 && !in && h.rank >= 3 && s < 2; s++)
            harness_expect_status(&h, train_trainer_step(tr, NULL, NULL, NULL), TDL_OK,
                                  "stale step");
        if (in) {
            harness_expect_status(&h,
                                  gfc_group_init(&g, h.rt, members[p], sizes[p], (uint64_t)(2 + p)),
                                  TDL_OK, "phase group");
            if (p == 1)
                harness_expect_status(&h, train_trainer_sync(tr, &g, 0), TDL_OK, "sync");
            harness_expect(&h, train_trainer_steps_done(tr) == from,
                           "phase %d: rank %d is at step %lld, the group at %d", p, h.rank,
                           (long long)train_trainer_steps_done(tr), from);
            for (int s = from; s < ends[p]; s++)
                harness_expect_status(&h, train_trainer_step(tr, &g, &loss[s], NULL), TDL_OK,
                                      "elastic step");
        }
        from = ends[p];
    }
    int64_t done = train_trainer_steps_done(tr);
    double worst_loss = 0;
    for (int s = 0; s < done; s++) {
        if (isnan(loss[s])) /* a step this rank did not take part in */
            continue;
        double rel = fabs(loss[s] - ref_loss[s]) / fabs(ref_loss[s]);
        worst_loss = fmax(worst_loss, rel);
        harness_expect(&h, rel <= 1e-5, "rank %d step %d: loss %.9f, reference %.9f", h.rank, s,
                       loss[s], ref_loss[s]);
    }
    dit_model_t *m = train_trainer_model(tr), *mr = train_trainer_model(ref);
    const float *want = done == STEPS ? mr->params : ref_at_leave;
    const float *want_ema = done == STEPS ? train_trainer_ema(ref) : ref_at_leave + np;
    double worst_w = max_abs_diff(m->params, want, np);
    double worst_ema = max_abs_diff(train_trainer_ema(tr), want_ema, np);
    harness_expect(&h, done == STEPS || done == LEAVE, "rank %d ends at step %lld", h.rank,
                   (long long)done);
    harness_expect(&h, worst_w < 1e-5, "rank %d: weights differ from the reference by %.3g", h.rank,
                   worst_w);
    harness_expect(&h, worst_ema < 1e-5, "rank %d: EMA differs from the reference by %.3g", h.rank,
                   worst_ema);
    if (done == STEPS) {
        float hist[STEPS + 1][2], ref_hist[STEPS + 1][2];
        int n = train_trainer_loss_history(tr, hist, STEPS + 1);
        harness_expect(&h, n == STEPS && train_trainer_loss_history(ref, ref_hist, STEPS) == n,
                       "rank %d remembers %d losses", h.rank, n);
        for (int i = 0; i < n && n == STEPS; i++)
            harness_expect(&h,
                           hist[i][0] == ref_hist[i][0] &&
                               fabsf(hist[i][1] - ref_hist[i][1]) <= 1e-5f * ref_hist[i][1],
                           "rank %d: loss history row %d is (%g, %g), reference (%g, %g)", h.rank,
                           i, hist[i][0], hist[i][1], ref_hist[i][0], ref_hist[i][1]);
    }
    /* Every rank reports (step, hash, differences); rank 0 reports for the whole world. */
    typedef struct {
        int64_t step;
        uint64_t hash;
        double loss, weights, ema;
    } report_t;
    report_t mine = {done, state_hash(tr), worst_loss, worst_w, worst_ema};
    report_t *all = malloc((size_t)h.size * sizeof(mine));
    harness_expect_status(&h, gfc_group_init(&g, h.rt, world, h.size, 9), TDL_OK, "world");
    harness_expect_status(&h, gfc_allgather(&g, &mine, all, sizeof(mine), GFC_DT_BYTE), TDL_OK,
                          "allgather");
    uint64_t hash_end = 0, hash_leave = 0;
    for (int r = 0; r < h.size; r++) {
        const report_t *a = &all[r];
        uint64_t *same = a->step == STEPS ? &hash_end : &hash_leave;
        if (!*same)
            *same = a->hash;
        harness_expect(&h, a->hash == *same, "rank %d at step %lld holds other bits than its peers",
                       r, (long long)a->step);
        harness_diag(&h, "rank %d: step %lld, loss rel. diff %.2e, weights %.2e, EMA %.2e", r,
                     (long long)a->step, a->loss, a->weights, a->ema);
    }
    harness_point(&h, "ranks leave and join: losses and weights follow the %d-rank run", h.size);

    train_opts_t other = o;
    other.model = "fmnist";
    check_refused(&h, tr, &other, 10, "another model", "fmnist with");
    other = o;
    other.seed = o.seed + 1;
    check_refused(&h, tr, &other, 11, "another seed", "another seed");

    free(all);
    free(ref_at_leave);
    train_trainer_free(tr);
    train_trainer_free(ref);
    free(world);
    return harness_finish(&h);
}
