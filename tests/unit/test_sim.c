/* The simulator against timelines computed by hand (exact completion times, one migration and
 * its cost), the cost model's fit and JSON round trip, the trace format, a policy that leaves
 * work waiting, 512 ranks by 10,000 requests (its time reported, not asserted), and co-located
 * training by hand: a resize to serving, a join with its state, training's end. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord/cost.h"
#include "coord/policy_internal.h"
#include "coord/sim.h"
#include "coord/workload.h"
#include "core/core.h"
#include "tap.h"

/* prepare 1 ms, step 10 ms at SP1 and 6 ms at SP2, decode 2 ms; a migration 5 ms. */
static void model_hand(coord_cost_model_t *m)
{
    memset(m, 0, sizeof(*m));
    m->patch = 4;
    m->per_image = true;
    m->migration_latency_s = 0.005;
    m->migration_bytes_per_s = 1e9;
    m->state_bytes_per_token = 0;
    coord_cost_model_set_fit(m, COORD_COST_PREPARE, 1, 0, 0, 0.001, 0);
    coord_cost_model_set_fit(m, COORD_COST_STEP, 1, 0, 0, 0.010, 0);
    coord_cost_model_set_fit(m, COORD_COST_STEP, 2, 0, 0, 0.006, 0);
    coord_cost_model_set_fit(m, COORD_COST_DECODE, 1, 0, 0, 0.002, 0);
}

static coord_workload_request_t wreq(int64_t at_ms, int steps, int prio, int64_t deadline_ms)
{
    return (coord_workload_request_t){.at_ms = at_ms,
                                      .label = -1,
                                      .n = 1,
                                      .resolution = 32,
                                      .steps = steps,
                                      .cfg = 1,
                                      .seed = 1,
                                      .priority = prio,
                                      .euler = 1, /* the timelines count one evaluation a step */
                                      .deadline_ms = deadline_ms};
}

static void test_static_timelines(void)
{
    coord_cost_model_t m;
    model_hand(&m);
    coord_workload_request_t rs[2] = {wreq(0, 10, 0, 0), wreq(0, 10, 0, 0)};
    double fin[2];
    coord_sim_result_t r;
    coord_sim_config_t c = {
        .ranks = 2, .chunk = 5, .cost = &m, .policy = coord_policy_find("static_sp1")};
    ok(coord_sim_run(&c, rs, 2, &r, fin) == TDL_OK, "static_sp1 runs");
    is_near(fin[0], 0.103, 1e-12, "static_sp1: request 0 on its own rank: 1 + 10x10 + 2 ms");
    is_near(fin[1], 0.103, 1e-12, "static_sp1: request 1 beside it, the same");
    is_int(r.migrations, 0, "no migration");
    is_near(r.utilization, 1.0, 1e-9, "both ranks busy all the time");
    /* Heun (the default): two model evaluations a step, so 1 + 10x10x2 + 2 ms */
    rs[0].euler = rs[1].euler = 0;
    ok(coord_sim_run(&c, rs, 2, &r, fin) == TDL_OK, "static_sp1 runs Heun requests");
    is_near(fin[0], 0.203, 1e-12, "static_sp1, Heun: 1 + 10x10x2 + 2 ms");
    rs[0].euler = rs[1].euler = 1;
    /* static_sp2: a task waits for 2 free ranks, even PREPARE and DECODE, which run on the
     * first of them. Request 0: PREPARE (0.001), chunks on both ranks (0.031, 0.061), DECODE
     * (0.063); request 1 waits that long, then PREPARE (0.064), chunks (0.094, 0.124), DECODE
     * (0.126). */
    c.policy = coord_policy_find("static_sp2");
    ok(coord_sim_run(&c, rs, 2, &r, fin) == TDL_OK, "static_sp2 runs");
    is_near(fin[0], 0.063, 1e-12, "static_sp2: request 0 at 63 ms");
    is_near(fin[1], 0.126, 1e-12, "static_sp2: request 1 at 126 ms");
    is_near(r.mean_s, 0.0945, 1e-12, "mean latency 94.5 ms");
    is_near(r.p99_s, 0.126, 1e-12, "p99 by nearest rank: the larger");
    is_near(r.makespan_s, 0.126, 1e-12, "makespan");
    is_near(r.throughput_rps, 2 / 0.126, 1e-9, "throughput = 2 / makespan");
}

static void test_migration(void)
{
    /* edf_priority, no deadlines: request 0 (priority 0) at 0 ms runs PREPARE on rank 0
     * (1 ms), its first chunk widened to both ranks (5 x 6 ms: 31 ms). Request 1 (priority 1)
     * arrives at 10 ms and waits. At 31 ms request 1's PREPARE takes rank 0, request 0's second
     * chunk narrows to rank 1 alone: a migration (5 ms) + 5 x 10 ms -> 86 ms, DECODE on rank 1,
     * which holds the latents -> 88 ms. Request 1: PREPARE to 32 ms, chunks on rank 0 to 82 and
     * 132 ms, DECODE on rank 0 -> 134 ms. */
    coord_cost_model_t m;
    model_hand(&m);
    coord_workload_request_t rs[2] = {wreq(0, 10, 0, 0), wreq(10, 10, 1, 0)};
    double fin[2];
    coord_sim_result_t r;
    coord_sim_config_t c = {
        .ranks = 2, .chunk = 5, .cost = &m, .policy = coord_policy_find("edf_priority")};
    ok(coord_sim_run(&c, rs, 2, &r, fin) == TDL_OK, "edf_priority runs");
    is_near(fin[0], 0.088, 1e-12, "request 0 at 88 ms, the migration's 5 ms included");
    is_near(fin[1], 0.134, 1e-12, "request 1 at 134 ms");
    is_int(r.migrations, 1, "one migration: 2 ranks -> 1");
    is_near(r.migration_s, 0.005, 1e-12, "costing latency_s (no state bytes)");
    /* A deadline request 1 misses: 100 ms from arrival at 10 ms is 110 ms < 134 ms. */
    rs[1].deadline_ms = 100;
    ok(coord_sim_run(&c, rs, 2, &r, fin) == TDL_OK, "again with a deadline");
    ok(r.with_deadline == 1 && r.slo_violations == 1 && r.slo_violation_rate == 1.0,
       "the missed deadline is an SLO violation");
}

static void test_errors(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    coord_workload_request_t rs[1] = {wreq(0, 10, 0, 0)};
    coord_sim_result_t r;
    coord_sim_config_t c = {
        .ranks = 4, .chunk = 5, .cost = &m, .policy = coord_policy_find("static_sp8")};
    is_int(coord_sim_run(&c, rs, 1, &r, NULL), TDL_ERR_INTERNAL,
           "static_sp8 on 4 ranks leaves the request waiting: an error, not a hang");
    ok(strstr(tdl_error_get(), "static_sp8") != NULL, "the error names the policy: %s",
       tdl_error_get());
    coord_workload_request_t un[2] = {wreq(5, 10, 0, 0), wreq(1, 10, 0, 0)};
    c.policy = coord_policy_find("fcfs");
    is_int(coord_sim_run(&c, un, 2, &r, NULL), TDL_ERR_INVALID_ARG, "an unsorted trace is refused");
}

static void test_cost(void)
{
    double xs[4] = {64, 256, 1024, 512}, ys[4], a, b, c, e;
    for (int i = 0; i < 4; i++)
        ys[i] = 1e-7 * xs[i] * xs[i] + 3e-5 * xs[i] + 2e-3;
    ok(coord_cost_fit_quadratic(xs, ys, 4, &a, &b, &c, &e) == TDL_OK, "fit of 4 exact points");
    is_near(a, 1e-7, 1e-15, "a");
    is_near(b, 3e-5, 1e-12, "b");
    is_near(c, 2e-3, 1e-10, "c");
    ok(e < 1e-9, "rel_err about 0 (%g)", e);
    double xx[3] = {64, 64, 64};
    ok(coord_cost_fit_quadratic(xx, ys, 3, &a, &b, &c, &e) != TDL_OK, "repeated x is refused");
    coord_cost_model_t m, back;
    coord_cost_model_default(&m);
    is_near(coord_cost_stage_s(&m, COORD_COST_STEP, 1024, 1), 0.157, 1e-9,
            "default: 157 ms at 1024 tokens");
    is_near(coord_cost_stage_s(&m, COORD_COST_STEP, 64, 2), 0.0023, 1e-9,
            "default: 2.3 ms at 64 tokens SP2");
    ok(isinf(coord_cost_stage_s(&m, COORD_COST_STEP, 64, 16)), "no fit at 16: infinite");
    ok(coord_cost_stage_s(&m, COORD_COST_STEP, 64, 4) >
               coord_cost_stage_s(&m, COORD_COST_STEP, 64, 1) &&
           coord_cost_stage_s(&m, COORD_COST_STEP, 1024, 8) <
               coord_cost_stage_s(&m, COORD_COST_STEP, 1024, 4),
       "default: SP4 loses at 64 tokens, SP8 still scales at 1024");
    char path[] = "/tmp/tidal-cost-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    ok(coord_cost_model_save(&m, path) == TDL_OK, "save");
    ok(coord_cost_model_load(path, &back) == TDL_OK, "load: %s", tdl_error_get());
    int same = back.patch == m.patch && back.migration_latency_s == m.migration_latency_s;
    for (int s = 0; s < COORD_COST_NSTAGES; s++) {
        same &= back.nfits[s] == m.nfits[s];
        for (int i = 0; i < m.nfits[s]; i++)
            same &= back.fits[s][i].degree == m.fits[s][i].degree &&
                    back.fits[s][i].a == m.fits[s][i].a && back.fits[s][i].c == m.fits[s][i].c;
    }
    ok(same, "the round trip is exact");
    FILE *f = fopen(path, "w");
    fputs("{\"patch\": 4, \"stages\": {\"step\": {\"3\": {\"a\": 0, \"b\": 0, \"c\": 1}}}}", f);
    fclose(f);
    ok(coord_cost_model_load(path, &back) == TDL_ERR_CORRUPT, "degree 3 refused: %s",
       tdl_error_get());
    unlink(path);
    ok(coord_cost_model_load("/nonexistent/cost.json", &back) == TDL_ERR_NOT_FOUND, "missing file");
}

static void test_batch(void)
{
    /* the batch table at 64 tokens (32 px, patch 4): a step of 2 images together costs 0.75 of
     * two alone, of 4 0.5 (3: 0.625 between them) */
    coord_cost_model_t m;
    model_hand(&m);
    int images[3] = {4, 1, 2};
    double factor[3] = {0.5, 1.0, 0.75};
    ok(coord_cost_model_set_batch(&m, 64, images, factor, 3) == TDL_OK, "a batch table");
    is_near(coord_cost_batch_factor(&m, 64, 3), 0.625, 1e-15, "3 images: between 2 and 4");
    is_near(coord_cost_batch_factor(&m, 64, 9), 0.5, 1e-15, "past the last point: flat");
    is_near(coord_cost_batch_factor(&m, 200, 2), 0.75, 1e-15, "200 tokens: the nearest table");
    int twice[2] = {2, 2};
    ok(coord_cost_model_set_batch(&m, 64, twice, factor, 2) == TDL_ERR_INVALID_ARG &&
           coord_cost_batch_factor(&m, 64, 2) == 0.75,
       "an image count twice is refused, the table kept: %s", tdl_error_get());
    /* static_sp1 on one rank, three requests of 10 Euler steps at 0 ms, chunks of 5. Request 0's
     * PREPARE (1 ms); its first chunk takes in requests 1 and 2 (their PREPARE is the chunk's):
     * 3 x 10 ms x 0.625 x 5 steps = 93.75 ms, to 94.75; the second chunk of all three the same,
     * to 188.5; then the three DECODEs of 2 ms, one after the other: 190.5, 192.5, 194.5 ms. */
    coord_workload_request_t rs[3] = {wreq(0, 10, 0, 0), wreq(0, 10, 0, 0), wreq(0, 10, 0, 0)};
    double fin[3];
    coord_sim_result_t r;
    coord_sim_config_t c = {.ranks = 1,
                            .chunk = 5,
                            .cost = &m,
                            .policy = coord_policy_find("static_sp1"),
                            .batch_rows = 8};
    ok(coord_sim_run(&c, rs, 3, &r, fin) == TDL_OK, "batched: runs");
    double sorted[3] = {fin[0], fin[1], fin[2]};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (sorted[j] < sorted[i]) {
                double x = sorted[i];
                sorted[i] = sorted[j], sorted[j] = x;
            }
    ok(fabs(sorted[0] - 0.1905) < 1e-12 && fabs(sorted[1] - 0.1925) < 1e-12 &&
           fabs(sorted[2] - 0.1945) < 1e-12,
       "batched: the three done at 190.5, 192.5, 194.5 ms (%.4f %.4f %.4f)", sorted[0],
       sorted[1], sorted[2]);
    ok(r.batches == 2 && r.batched == 6, "two chunks of three requests (%ld, %ld)", r.batches,
       r.batched);
    is_int(r.tasks, 1 + 3 + 3 + 3, "PREPARE once, 3 x 2 chunks, 3 DECODEs");
    c.batch_rows = 0; /* one at a time: 1 + 100 + 2 ms each */
    ok(coord_sim_run(&c, rs, 3, &r, fin) == TDL_OK && fabs(fin[0] - 0.103) < 1e-12 &&
           fabs(fin[1] - 0.206) < 1e-12 && fabs(fin[2] - 0.309) < 1e-12 && r.batches == 0,
       "no batching: 103, 206, 309 ms");
    c.batch_rows = 2; /* two rows at most */
    tdl_status_t st = coord_sim_run(&c, rs, 3, &r, fin);
    ok(st == TDL_OK && r.batches > 0 &&
           r.batched == 2 * r.batches,
       "batch_rows 2: every batch of two (%ld batches, %ld requests)", r.batches, r.batched);
    rs[1].resolution = 64; /* another resolution never joins */
    c.batch_rows = 8;
    st = coord_sim_run(&c, rs, 3, &r, fin);
    ok(st == TDL_OK && r.batched == 2 * r.batches &&
           r.batches > 0,
       "a 64 px request never joins the 32 px ones (%ld batches, %ld requests)", r.batches,
       r.batched);
    rs[1].resolution = 32;
    m.nbatch = 0; /* without a table, sharing never pays */
    ok(coord_sim_run(&c, rs, 3, &r, fin) == TDL_OK && r.batches == 0 && fabs(fin[2] - 0.309) < 1e-12,
       "no batch table: no batch, the unbatched timeline");
    /* the JSON round trip and a bad table */
    coord_cost_model_t back;
    model_hand(&m);
    coord_cost_model_set_batch(&m, 64, images, factor, 3);
    coord_cost_model_set_batch(&m, 256, images, factor, 2);
    char path[] = "/tmp/tidal-cost-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    ok(coord_cost_model_save(&m, path) == TDL_OK && coord_cost_model_load(path, &back) == TDL_OK,
       "a model with batch tables saved and loaded: %s", tdl_error_get());
    bool same = back.nbatch == 2;
    for (int i = 0; same && i < 2; i++) {
        same = back.batch[i].tokens == m.batch[i].tokens &&
               back.batch[i].npoints == m.batch[i].npoints;
        for (int k = 0; same && k < m.batch[i].npoints; k++)
            same = back.batch[i].images[k] == m.batch[i].images[k] &&
                   back.batch[i].factor[k] == m.batch[i].factor[k];
    }
    ok(same, "the batch tables come back exactly");
    FILE *f = fopen(path, "w");
    fputs("{\"patch\": 4, \"stages\": {\"prepare\": {\"1\": {\"a\": 0, \"b\": 0, \"c\": 1}}, "
          "\"step\": {\"1\": {\"a\": 0, \"b\": 0, \"c\": 1}}, \"decode\": {\"1\": {\"a\": 0, "
          "\"b\": 0, \"c\": 1}}}, \"migration\": {\"latency_s\": 0, \"bytes_per_s\": 1, "
          "\"state_bytes_per_token\": 0}, \"step_batch\": {\"64\": {\"2\": -1}}}",
          f);
    fclose(f);
    ok(coord_cost_model_load(path, &back) == TDL_ERR_CORRUPT &&
           strstr(tdl_error_get(), "step_batch.64"),
       "a negative factor refused, naming the table: %s", tdl_error_get());
    unlink(path);
}

/* Field by field: the struct has padding, which no assignment need keep. */
static bool same_requests(const coord_workload_request_t *a, const coord_workload_request_t *b,
                          int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].at_ms != b[i].at_ms || a[i].label != b[i].label || a[i].n != b[i].n ||
            a[i].resolution != b[i].resolution || a[i].steps != b[i].steps ||
            a[i].cfg != b[i].cfg || a[i].seed != b[i].seed || a[i].priority != b[i].priority ||
            a[i].euler != b[i].euler || a[i].diffusion != b[i].diffusion ||
            a[i].deadline_ms != b[i].deadline_ms)
            return false;
    return true;
}

static void test_trace(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    coord_workload_config_t wc;
    coord_workload_config_default(&wc);
    wc.requests = 300;
    coord_workload_request_t *rs = NULL, *back = NULL;
    int n = 0, nb = 0;
    ok(coord_workload_generate(&wc, &m, &rs, &n) == TDL_OK && n == 300, "300 requests generated");
    char path[] = "/tmp/tidal-trace-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    ok(coord_workload_write(path, rs, n) == TDL_OK, "written");
    ok(coord_workload_read(path, &back, &nb) == TDL_OK && nb == n, "read back: %s",
       tdl_error_get());
    ok(nb == n && same_requests(rs, back, n), "identical after the round trip");
    double t1 = coord_policy_single_rank_s(&m, 128, 1, 2 * 50); /* Heun: two evaluations a step */
    int okd = 1;
    for (int i = 0; i < n; i++)
        if (rs[i].resolution == 128)
            okd &= rs[i].deadline_ms == (int64_t)ceil(6 * t1 * 1000) && rs[i].priority == 0;
    ok(okd, "class L: deadline 6 x its single-rank time, priority 0");
    FILE *f = fopen(path, "w");
    fputs("{\"at_ms\": 5, \"n\": 1}\n\n{\"at_ms\": 1, \"class\": \"S\"}\n", f);
    fclose(f);
    free(back);
    back = NULL;
    ok(coord_workload_read(path, &back, &nb) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), ":3: field 'class'"),
       "an unknown field is refused, as serve does: %s", tdl_error_get());
    f = fopen(path, "w");
    fputs("{\"at_ms\": 5, \"seed\": 9}\n{\"at_ms\": 1, \"seed\": 8}\n{\"at_ms\": 5, \"seed\": 7}\n",
          f);
    fclose(f);
    ok(coord_workload_read(path, &back, &nb) == TDL_OK && nb == 3 && back[0].seed == 8 &&
           back[1].seed == 9 && back[2].seed == 7,
       "sorted by at_ms, ties in file order");
    free(back);
    back = NULL;
    f = fopen(path, "w");
    fputs("{\"at_ms\": 1, \"sampler\": \"ddim\"}\n{\"at_ms\": 2, \"sampler\": \"ddpm\"}\n"
          "{\"at_ms\": 3, \"sampler\": \"heun\"}\n",
          f);
    fclose(f);
    ok(coord_workload_read(path, &back, &nb) == TDL_OK && nb == 3 && back[0].diffusion == 2 &&
           back[0].euler == 1 && back[1].diffusion == 1 && back[1].euler == 1 &&
           back[2].diffusion == 0 && back[2].euler == 0,
       "ddim and ddpm: one model evaluation a step, the diffusion's samplers");
    coord_workload_request_t again[3];
    memcpy(again, back, sizeof(again));
    free(back);
    back = NULL;
    ok(coord_workload_write(path, again, 3) == TDL_OK &&
           coord_workload_read(path, &back, &nb) == TDL_OK && nb == 3 &&
           same_requests(again, back, 3),
       "and so written back");
    unlink(path);
    free(back);
    free(rs);
}

static void test_scale(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    coord_workload_config_t wc;
    coord_workload_config_default(&wc);
    wc.ranks = 512;
    wc.requests = 10000;
    wc.load = 0.9;
    coord_workload_request_t *rs = NULL;
    int n = 0;
    ok(coord_workload_generate(&wc, &m, &rs, &n) == TDL_OK, "10,000 requests for 512 ranks");
    coord_sim_config_t c = {
        .ranks = 512, .chunk = 5, .cost = &m, .policy = coord_policy_find("edf_best_fit")};
    coord_sim_result_t r;
    double t0 = tdl_clock_s();
    ok(coord_sim_run(&c, rs, n, &r, NULL) == TDL_OK && r.requests == 10000, "simulated to the end");
    diag("512 ranks, 10,000 requests, edf_best_fit: %.2f s of wall time (%ld tasks); "
         "utilization %.2f, mean latency %.3f s",
         tdl_clock_s() - t0, r.tasks, r.utilization, r.mean_s);
    free(rs);
}

/* The engine's heap of keyed rules against ordering every waiting request at each call: the
 * same rule with and without its key must give the same schedule, request by request, on an
 * overloaded trace (long queues; requests skipped when their degree does not fit; a blocking
 * rule; ranks moving between serving and training). */
static const coord_policy_rule_t keyed_edf_rule = {.before = coord_policy_before_deadline,
                                                   .key = coord_policy_key_deadline,
                                                   .degree = coord_policy_degree_best_fit,
                                                   .widen = true};
static const coord_policy_rule_t scan_edf_rule = {
    .before = coord_policy_before_deadline, .degree = coord_policy_degree_best_fit, .widen = true};
static int sp2_degree(const coord_policy_view_t *v, const coord_policy_request_t *r, int nfree)
{
    return nfree >= 2 ? 2 : 0;
}
static const coord_policy_rule_t keyed_fifo_rule = {.before = coord_policy_before_arrival,
                                                    .key = coord_policy_key_arrival,
                                                    .degree = sp2_degree,
                                                    .blocking = true};
static const coord_policy_rule_t scan_fifo_rule = {
    .before = coord_policy_before_arrival, .degree = sp2_degree, .blocking = true};
COORD_POLICY_ENGINE_OPS(keyed_edf, "keyed_edf", "test");
COORD_POLICY_ENGINE_OPS(scan_edf, "scan_edf", "test");
COORD_POLICY_ENGINE_OPS(keyed_fifo, "keyed_fifo", "test");
COORD_POLICY_ENGINE_OPS(scan_fifo, "scan_fifo", "test");

static void test_keyed_order(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    coord_workload_config_t wc;
    coord_workload_config_default(&wc);
    wc.ranks = 16;
    wc.requests = 3000;
    wc.load = 1.3; /* the queue grows: the admit queue fills */
    wc.seed = 11;
    coord_workload_request_t *rs = NULL;
    int n = 0;
    ok(coord_workload_generate(&wc, &m, &rs, &n) == TDL_OK, "3,000 requests, 1.3x the capacity");
    for (int k = 0; k < n; k++) { /* ties in the first keys: no deadline, the same arrival */
        if (k % 3 == 0)
            rs[k].deadline_ms = 0;
        if (k % 4 == 1)
            rs[k].at_ms = rs[k - 1].at_ms;
        rs[k].priority = k % 2;
    }
    double *fa = calloc((size_t)n, sizeof(double)), *fb = calloc((size_t)n, sizeof(double));
    coord_train_model_t t = {.batch = 64,
                             .image_s = 0.002,
                             .fixed_s = 0.01,
                             .grad_bytes = 1e6,
                             .link_bytes_per_s = 1e9,
                             .state_bytes = 1e6};
    const struct {
        const coord_policy_ops_t *keyed, *scan;
        bool colocate;
    } cases[] = {{&coord_policy_keyed_edf, &coord_policy_scan_edf, false},
                 {&coord_policy_keyed_fifo, &coord_policy_scan_fifo, false},
                 {&coord_policy_keyed_edf, &coord_policy_scan_edf, true}};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(cases); i++) {
        coord_sim_config_t c = {.ranks = 16, .chunk = 5, .cost = &m, .policy = cases[i].keyed};
        if (cases[i].colocate) {
            c.realloc = coord_realloc_find("slo_first");
            c.train = &t;
            c.min_serve = 2;
        }
        coord_sim_result_t ra, rb;
        bool ran = coord_sim_run(&c, rs, n, &ra, fa) == TDL_OK;
        c.policy = cases[i].scan;
        ran = ran && coord_sim_run(&c, rs, n, &rb, fb) == TDL_OK;
        int same = 0;
        for (int k = 0; ran && k < n; k++)
            same += fa[k] == fb[k];
        ok(ran && same == n && ra.tasks == rb.tasks && ra.tasks > 4 * n,
           "%s%s: the heap kept across calls gives the same finish to every request as ordering "
           "them all at each call (%d of %d the same; %ld tasks)",
           cases[i].keyed->name, cases[i].colocate ? ", co-located" : "", same, n, ra.tasks);
    }
    free(fa);
    free(fb);
    free(rs);
}

/* Training in the simulator, by hand: steps of 4 images, 10 ms each and 10 ms fixed, an
 * all-reduce of 10 ms of bytes at 2 members (2 (n - 1) / n of 1 MB at 100 MB/s), a join's state
 * 10 ms. So a step takes 40 ms on 2 members and 50 ms on 1. */
static void train_hand(coord_train_model_t *t)
{
    *t = (coord_train_model_t){.batch = 4,
                               .image_s = 0.01,
                               .fixed_s = 0.01,
                               .grad_bytes = 1e6,
                               .link_bytes_per_s = 1e8,
                               .hop_s = 0,
                               .state_bytes = 1e6};
}

static void test_colocate(void)
{
    coord_cost_model_t m;
    model_hand(&m);
    coord_train_model_t t;
    train_hand(&t);
    is_near(coord_train_step_s(&t, 2), 0.04, 1e-12, "a step of 2 members: 40 ms");
    is_near(coord_train_step_s(&t, 1), 0.05, 1e-12, "of 1: 50 ms");
    is_near(coord_train_join_s(&t), 0.01, 1e-12, "a join: 10 ms for the state");
    /* a day of 1 s: half the workers serve until noon (0.5 s), none after. At 0 rank 2 is told
     * to leave; it does at the end of step 1 (40 ms). Rank 1 alone: steps end at 90, 140, ...,
     * 490, 540 ms. At noon (the tick of 500 ms) rank 2 is sent back: the leader takes it at the
     * end of step 11 (540 ms), the state takes 10 ms, and step 12, on 2 members, ends at 590. */
    coord_sim_config_t c = {.ranks = 2,
                            .chunk = 1,
                            .cost = &m,
                            .policy = coord_policy_find("static_sp1"),
                            .realloc = coord_realloc_find("schedule"),
                            .min_train = 1,
                            .train = &t,
                            .train_steps = 12,
                            .tick_s = 0.0625};
    ok(coord_realloc_schedule_parse("0:0.5,12:0", &c.realloc_opts) == TDL_OK, "a schedule");
    c.realloc_opts.day_s = 1;
    coord_sim_result_t r;
    ok(coord_sim_run(&c, NULL, 0, &r, NULL) == TDL_OK, "training alone, co-located, runs");
    is_int((int)r.train_steps, 12, "its 12 steps");
    is_near(r.end_s, 0.59, 1e-9, "training ends at 590 ms");
    /* 2 members for 40 ms, 1 for 500 ms, 2 for 50 ms (the join's 10 and a step of 40) */
    is_near(r.train_device_h * 3600, 2 * 0.04 + 0.5 + 2 * 0.05, 1e-9, "0.68 device-seconds");
    ok(r.moves_to_serve == 1 && r.moves_to_train == 1, "one move each way (%d, %d)",
       r.moves_to_serve, r.moves_to_train);
    is_near(r.train_images_per_s, 12 * 4 / 0.59, 1e-6, "48 images in 590 ms");

    /* a request at 100 ms: rank 2 serves it at once (prepare 1, 10 steps of 10, decode 2 ms) */
    coord_workload_request_t q = wreq(100, 10, 0, 0);
    double fin = 0;
    ok(coord_sim_run(&c, &q, 1, &r, &fin) == TDL_OK, "with a request");
    is_near(fin, 0.1 + 0.001 + 0.1 + 0.002, 1e-9, "served by rank 2 from its arrival: 203 ms");
    is_int((int)r.train_steps, 12, "training still runs its 12 steps");

    /* static, 1 serving: rank 2 never comes back; the request the same */
    c.realloc = coord_realloc_find("static");
    c.realloc_opts.static_serve = 1;
    ok(coord_sim_run(&c, &q, 1, &r, &fin) == TDL_OK, "static");
    is_near(r.end_s, 0.04 + 11 * 0.05, 1e-9, "training on rank 1 alone from 40 ms: ends at 590");
    is_near(r.train_device_h * 3600, 2 * 0.04 + 11 * 0.05, 1e-9, "0.63 device-seconds");
    ok(r.moves_to_serve == 1 && r.moves_to_train == 0, "one move to serving");
    c.train = NULL;
    ok(coord_sim_run(&c, &q, 1, &r, &fin) == TDL_ERR_INVALID_ARG,
       "co-location without a training model is refused");

    /* the training model beside the serving one in a file: each save keeps the other */
    char path[] = "/tmp/tidal-train-model-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    coord_train_model_t back;
    ok(coord_train_model_save(&t, path) == TDL_OK && coord_cost_model_save(&m, path) == TDL_OK &&
           coord_train_model_load(path, &back) == TDL_OK,
       "a training model, then the serving model saved over it: the training model is still there");
    is_near(back.image_s, t.image_s, 0, "its image_s");
    coord_cost_model_t mb;
    ok(coord_train_model_save(&t, path) == TDL_OK && coord_cost_model_load(path, &mb) == TDL_OK &&
           mb.nfits[COORD_COST_STEP] == m.nfits[COORD_COST_STEP],
       "and the other way round");
    unlink(path);
    ok(coord_cost_model_save(&m, path) == TDL_OK &&
           coord_train_model_load(path, &back) == TDL_ERR_NOT_FOUND,
       "a file with the serving model alone: no training model (TDL_ERR_NOT_FOUND)");
    unlink(path);
}

int main(void)
{
    test_static_timelines();
    test_migration();
    test_errors();
    test_cost();
    test_batch();
    test_trace();
    test_scale();
    test_keyed_order();
    test_colocate();
    return done_testing();
}
