/* The coordinator core (src/coord/coord.h) driven by scripted events, without MPI or HTTP:
 * a request's tasks and answer against times worked by hand from a hand-made cost model, a task
 * that fails, a missed deadline, a shutdown, a stuck policy, a burst that moves a rank from
 * training to serving and back (with its move timed), a checkpoint reloaded by serving ranks,
 * training's end, bad events, and every allocation failing in turn (SQLite's habit). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/coord.h"
#include "core/core.h"
#include "tap.h"

/* prepare 1 ms, a step 10 ms, decode 2 ms, per image, at degree 1 only; a move 5 ms */
static void model_hand(coord_cost_model_t *m)
{
    memset(m, 0, sizeof(*m));
    m->patch = 4;
    m->per_image = true;
    m->migration_latency_s = 0.005;
    m->migration_bytes_per_s = 1e9;
    coord_cost_model_set_fit(m, COORD_COST_PREPARE, 1, 0, 0, 0.001, 0);
    coord_cost_model_set_fit(m, COORD_COST_STEP, 1, 0, 0, 0.010, 0);
    coord_cost_model_set_fit(m, COORD_COST_DECODE, 1, 0, 0, 0.002, 0);
}

static serve_request_params_t req(int label, double cfg, int n, int steps, int64_t deadline_ms)
{
    return (serve_request_params_t){.id = "r",
                                    .label = label,
                                    .n = n,
                                    .resolution = 32,
                                    .steps = steps,
                                    .cfg = cfg,
                                    .has_seed = true,
                                    .seed = 7,
                                    .deadline_ms = deadline_ms,
                                    .sampler = DIT_SAMPLER_EULER};
}

/* A command as the test keeps it: a copy, its rank lists and text with it. */
typedef struct got {
    coord_cmd_t cmd;
    int ranks[SERVE_MAX_DEGREE], prev[SERVE_MAX_DEGREE];
    serve_traj_spec_t spec;
    serve_wire_members_t mem; /* RESIZE, JOIN, RECOVER, RESTART */
    char text[256];
} got_t;

static int take(coord_t *c, got_t *out, int max)
{
    const coord_cmd_t *cmd;
    int n = 0;
    while ((cmd = coord_command_next(c))) {
        if (n == max)
            continue;
        got_t *g = &out[n++];
        g->cmd = *cmd;
        if (cmd->kind == COORD_CMD_TASK) {
            memcpy(g->ranks, cmd->task.ranks, (size_t)cmd->task.nranks * sizeof(int));
            if (cmd->task.nprev)
                memcpy(g->prev, cmd->task.prev, (size_t)cmd->task.nprev * sizeof(int));
            g->spec = *cmd->spec;
        }
        if (cmd->members)
            g->mem = *cmd->members;
        snprintf(g->text, sizeof(g->text), "%s", cmd->why ? cmd->why : "");
    }
    return n;
}

static coord_t *serving(int workers, const char *policy)
{
    coord_cost_model_t cost;
    model_hand(&cost);
    coord_config_t cc = {.workers = workers,
                         .chunk = 1,
                         .max_degree = SERVE_MAX_DEGREE,
                         .cost = &cost,
                         .policy = coord_policy_find(policy)};
    coord_t *c = NULL;
    if (coord_create(&cc, &c) != TDL_OK)
        diag("coord_create: %s", tdl_error_get());
    return c;
}

/* Runs the request's tasks to the end from `first`, each finishing after its estimate; answers
 * the number of tasks and leaves the answer in *ans. */
static int run_to_answer(coord_t *c, got_t first, double *t, void *result, got_t *ans,
                         int kinds[16])
{
    got_t g[8];
    got_t cur = first;
    int tasks = 0;
    for (;;) {
        if (tasks < 16)
            kinds[tasks] = cur.cmd.task.kind;
        tasks++;
        *t += cur.cmd.estimate_s;
        bool last = cur.cmd.task.kind == SERVE_TASK_DECODE;
        if (coord_task_finished(c, *t, cur.cmd.request, true, last ? result : NULL, last ? 3 : 0) !=
            TDL_OK)
            return -1;
        int n = take(c, g, 8);
        if (n != 1)
            return -1;
        if (g[0].cmd.kind == COORD_CMD_ANSWER) {
            *ans = g[0];
            return tasks;
        }
        cur = g[0];
    }
}

static void test_request(void)
{
    coord_t *c = serving(2, "static_sp1");
    got_t g[8], ans;
    int h, kinds[16];
    serve_request_params_t p = req(3, 4.0, 2, 3, 0);
    is_int(coord_request_arrive(c, 0, &p, &h), TDL_OK, "a guided request of 2 images arrives");
    int n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_TASK && g[0].cmd.task.kind == SERVE_TASK_PREPARE,
       "its PREPARE starts at once");
    ok(g[0].cmd.handle == &h && g[0].cmd.request == 0 && g[0].spec.id == 1 && g[0].spec.seed == 7 &&
           g[0].spec.n == 2 && g[0].spec.cfg == 4.0f && g[0].spec.label == 3,
       "with the caller's handle and the request as the executors take it");
    ok(g[0].cmd.task.nranks == 1 && g[0].ranks[0] >= 1 && g[0].ranks[0] <= 2 &&
           g[0].cmd.task.nprev == 0 && g[0].cmd.task.seq == 0,
       "on one executor (world rank %d), nothing to move, task 0", g[0].ranks[0]);
    /* guidance doubles the batch: 4 images of 1 ms */
    is_near(g[0].cmd.estimate_s, 0.004, 1e-12, "estimate: 4 x 1 ms (guidance doubles it)");
    double t = 0;
    char png[3] = "png";
    int tasks = run_to_answer(c, g[0], &t, png, &ans, kinds);
    is_int(tasks, 5, "PREPARE, 3 STEP_CHUNKs of 1 step, DECODE");
    ok(kinds[0] == SERVE_TASK_PREPARE && kinds[1] == SERVE_TASK_STEP_CHUNK &&
           kinds[3] == SERVE_TASK_STEP_CHUNK && kinds[4] == SERVE_TASK_DECODE,
       "in that order");
    ok(ans.cmd.ok && !ans.cmd.late && ans.cmd.result == png && ans.cmd.result_len == 3 &&
           ans.cmd.handle == &h,
       "the answer: done, with the DECODE's result");
    /* 4 + 3 x 40 + 8 ms */
    is_near(ans.cmd.finish_s, 0.132, 1e-9, "finished at 132 ms (%.6f)", ans.cmd.finish_s);
    is_int(coord_live(c), 0, "nothing live after it");

    p = req(-1, 4.0, 1, 1, 0);
    coord_request_arrive(c, 1, &p, &h);
    n = take(c, g, 8);
    ok(n == 1 && g[0].spec.cfg == 1.0f, "an unconditional request samples with cfg 1");
    is_near(g[0].cmd.estimate_s, 0.001, 1e-12, "and one image's cost: no doubling");
    coord_free(c);
}

/* Cancellation at a task boundary, on one executor under edf_best_fit (1 ms prepare, 10 ms a
 * step): a request waiting with its state on rank 1 is answered cancelled at once and rank 1 told
 * to drop it; a running one at its task's end (the same DROP), its ranks then free for the next;
 * one whose DECODE is running is done; a second cancel, or one of a finished request, is
 * nothing. */
static const got_t *of_kind(const got_t *g, int n, coord_cmd_kind_t kind)
{
    for (int i = 0; i < n; i++)
        if (g[i].cmd.kind == kind)
            return &g[i];
    return NULL;
}

static void test_cancel(void)
{
    coord_t *c = serving(1, "edf_best_fit");
    got_t g[8];
    int ha, hb;
    serve_request_params_t p = req(3, 1.0, 1, 3, 0);
    coord_request_arrive(c, 0, &p, &ha); /* 0: PREPARE on rank 1 */
    coord_request_arrive(c, 0, &p, &hb); /* 1: waits for the rank */
    int n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.request == 0 && g[0].cmd.task.kind == SERVE_TASK_PREPARE,
       "request 0 prepares on the one executor, request 1 waits");
    is_int(coord_request_cancel(c, 0.0005, 0), TDL_OK, "cancel of request 0 while it prepares");
    is_int(take(c, g, 8), 0, "nothing yet: its task runs");
    is_int(coord_request_cancel(c, 0.0006, 0), TDL_OK, "a second cancel of it: no effect");
    coord_task_finished(c, 0.001, 0, true, NULL, 0);
    n = take(c, g, 8);
    const got_t *d = of_kind(g, n, COORD_CMD_DROP), *a = of_kind(g, n, COORD_CMD_ANSWER),
                *tk = of_kind(g, n, COORD_CMD_TASK);
    ok(n == 3 && d && d->cmd.worker == 1 && d->cmd.request == 0 && d == &g[0],
       "its PREPARE ends: first, rank 1, which holds its state, is told to drop it");
    ok(a && a->cmd.request == 0 && a->cmd.cancelled && !a->cmd.ok && !a->cmd.late &&
           a->cmd.handle == &ha && fabs(a->cmd.finish_s - 0.001) < 1e-12,
       "answered cancelled, not failed, at the task's end (1 ms)");
    ok(tk && tk->cmd.request == 1 && tk->ranks[0] == 1, "and request 1 gets rank 1 (%d commands)",
       n);
    /* request 1 runs its PREPARE, then a step; cancelled between them it waits with its state */
    coord_task_finished(c, 0.002, 1, true, NULL, 0);
    take(c, g, 8); /* its first step */
    serve_request_params_t urgent = req(3, 1.0, 1, 3, 100);
    coord_request_arrive(c, 0.0025, &urgent, &ha); /* 2: waits, its deadline first */
    coord_task_finished(c, 0.012, 1, true, NULL, 0);
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.request == 2 && g[0].cmd.task.kind == SERVE_TASK_PREPARE,
       "request 2 (a deadline, so first) prepares while request 1 waits, its state on rank 1");
    is_int(coord_request_cancel(c, 0.0121, 1), TDL_OK, "cancel of waiting request 1");
    n = take(c, g, 8);
    ok(n == 2 && g[0].cmd.kind == COORD_CMD_DROP && g[0].cmd.worker == 1 &&
           g[1].cmd.kind == COORD_CMD_ANSWER && g[1].cmd.cancelled && g[1].cmd.request == 1,
       "at once: a DROP to rank 1 and its answer (%d commands)", n);
    is_int(coord_live(c), 1, "request 2 alone is live");
    /* request 2 to its DECODE, cancelled while it decodes: done */
    double t = 0.013;
    coord_task_finished(c, t, 2, true, NULL, 0);
    for (int i = 0; i < 3; i++) {
        take(c, g, 8);
        t += 0.01;
        coord_task_finished(c, t, 2, true, NULL, 0);
    }
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.task.kind == SERVE_TASK_DECODE, "request 2 decodes");
    coord_request_cancel(c, t + 0.001, 2);
    char png[3] = "png";
    coord_task_finished(c, t + 0.002, 2, true, png, 3);
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_ANSWER && g[0].cmd.ok && !g[0].cmd.cancelled &&
           g[0].cmd.result == png,
       "a cancel during the last task loses: the request is done, with its image");
    is_int(coord_request_cancel(c, t + 0.003, 2), TDL_OK, "a cancel of a finished request");
    is_int(take(c, g, 8), 0, "gives no command");
    is_int(coord_request_cancel(c, t, 9), TDL_ERR_INVALID_ARG, "no request 9: refused");
    coord_stats_t k;
    coord_stats_get(c, &k);
    ok(k.cancelled == 2 && k.failed == 0 && k.done == 1, "stats: 2 cancelled, none failed, 1 done");
    coord_free(c);
}

static void test_failure_and_deadline(void)
{
    coord_t *c = serving(1, "static_sp1");
    got_t g[8], ans;
    int kinds[16];
    serve_request_params_t p = req(-1, 1, 1, 2, 0);
    coord_request_arrive(c, 0, &p, NULL);
    take(c, g, 8);
    is_int(coord_task_finished(c, 0.001, 0, false, NULL, 0), TDL_OK, "its PREPARE fails");
    int n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_ANSWER && !g[0].cmd.ok &&
           strstr(g[0].text, "prepare task failed on executor ranks 1..1"),
       "the request fails, naming the task and its ranks: %s", g[0].text);
    is_int(coord_live(c), 0, "and is no longer live");

    /* 20 steps of 10 ms cannot meet 100 ms */
    p = req(-1, 1, 1, 20, 100);
    coord_request_arrive(c, 1.0, &p, NULL);
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.task.kind == SERVE_TASK_PREPARE,
       "the executor freed by the failure takes the next request");
    double t = 1.0;
    run_to_answer(c, g[0], &t, NULL, &ans, kinds);
    ok(ans.cmd.ok && ans.cmd.late, "a request finished 203 ms after it arrived with a deadline "
                                   "of 100 ms is late");
    p = req(-1, 1, 1, 2, 10000);
    coord_request_arrive(c, 2.0, &p, NULL);
    take(c, g, 8);
    t = 2.0;
    run_to_answer(c, g[0], &t, NULL, &ans, kinds);
    ok(ans.cmd.ok && !ans.cmd.late, "one well within its deadline is not");
    coord_stats_t k;
    coord_stats_get(c, &k);
    ok(k.arrived == 3 && k.done == 2 && k.failed == 1 && k.late == 1,
       "counts: 3 arrived, 2 done, 1 failed, 1 late");

    /* a shutdown fails what has not started; the started one runs on */
    p = req(-1, 1, 1, 2, 0);
    for (int i = 0; i < 3; i++)
        coord_request_arrive(c, 3.0, &p, NULL);
    n = take(c, g, 8);
    is_int(n, 1, "one executor: one of 3 requests starts");
    is_int(coord_shutdown(c, 3.0, "the server is shutting down"), 2, "a shutdown drops 2");
    got_t a[8];
    n = take(c, a, 8);
    ok(n == 2 && a[0].cmd.kind == COORD_CMD_ANSWER && !a[0].cmd.ok &&
           !strcmp(a[1].text, "the server is shutting down"),
       "each failed with the reason given");
    t = 3.0;
    ok(run_to_answer(c, g[0], &t, NULL, &ans, kinds) == 4 && ans.cmd.ok,
       "the started one finishes");
    is_int(coord_tick(c, 4.0, 0), TDL_OK, "a tick with nothing live is quiet");
    coord_free(c);

    /* static_sp2 on one executor: it never places, and the coordinator says so */
    c = serving(1, "static_sp2");
    coord_request_arrive(c, 0, &p, NULL);
    is_int(coord_tick(c, 0.1, 0), TDL_ERR_INTERNAL,
           "a policy that leaves a request waiting on "
           "idle executors is an error");
    ok(strstr(tdl_error_get(), "static_sp2") != NULL, "naming the policy: %s", tdl_error_get());
    coord_free(c);
}

static serve_wire_report_t rep(uint32_t kind, int rank, int64_t step, const char *path)
{
    serve_wire_report_t r = {.kind = kind, .rank = rank, .members = 0, .step = step, .loss = 0.5};
    if (path)
        snprintf(r.path, sizeof(r.path), "%s", path);
    return r;
}

static bool quiet; /* while allocations fail on purpose */

static coord_t *colocated(bool fixed)
{
    coord_cost_model_t cost;
    model_hand(&cost);
    coord_config_t cc = {.workers = 3,
                         .chunk = 1,
                         .max_degree = SERVE_MAX_DEGREE,
                         .cost = &cost,
                         .policy = coord_policy_find("static_sp1"),
                         .realloc = coord_realloc_find("slo_first"),
                         .realloc_opts = {.drain_s = 2, .cooldown_s = 0.5},
                         .min_train = 1,
                         .fixed_weights = fixed};
    coord_t *c = NULL;
    if (coord_create(&cc, &c) != TDL_OK && !quiet)
        diag("coord_create: %s", tdl_error_get());
    return c;
}

static void test_burst(void)
{
    coord_t *c = colocated(false);
    got_t g[8], ans;
    int kinds[16];
    coord_training_t t;
    coord_training_get(c, &t);
    ok(t.colocated && t.training == 3 && t.serving == 0, "at first the 3 workers train");
    serve_wire_report_t r = rep(SERVE_REPORT_STEP, 1, 1, NULL);
    coord_report(c, 0.1, 1, &r);
    r.step = 2;
    coord_report(c, 0.2, 1, &r); /* steps of 100 ms */
    serve_request_params_t p = req(-1, 1, 1, 3, 0);
    coord_request_arrive(c, 0.25, &p, NULL);
    is_int(take(c, g, 8), 0, "a request arrives: no executor serves, nothing starts");
    is_int(coord_tick(c, 0.26, 0), TDL_OK, "a tick");
    int n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_RESIZE && g[0].cmd.worker == 1,
       "the burst: a resize to training's leader, rank 1");
    ok(g[0].mem.n == 2 && g[0].mem.ranks[0] == 1 && g[0].mem.ranks[1] == 2 && g[0].mem.epoch == 1 &&
           g[0].mem.root == 1,
       "training goes on as {1, 2}, epoch 1; rank 3 is to serve");
    coord_tick(c, 0.29, 0);
    is_int(take(c, g, 8), 0, "no new decision while the move is under way");
    r.step = 3;
    coord_report(c, 0.3, 1, &r); /* the step the move waited for */
    r = rep(SERVE_REPORT_LEFT, 3, 3, NULL);
    is_int(coord_report(c, 0.31, 3, &r), TDL_OK, "rank 3 reports it left training");
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_TASK && g[0].ranks[0] == 3 &&
           g[0].cmd.task.kind == SERVE_TASK_PREPARE,
       "the waiting request starts on rank 3");
    coord_training_get(c, &t);
    ok(t.training == 2 && t.serving == 1 && t.moves_to_serve == 1, "2 train, 1 serves");
    double now = 0.31;
    ok(run_to_answer(c, g[0], &now, NULL, &ans, kinds) == 5 && ans.cmd.ok, "the request is served");

    r = rep(SERVE_REPORT_CKPT, 1, 4, "runs/x/ckpt/ckpt-00000004.h5");
    coord_report(c, 0.5, 1, &r);
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_RELOAD && g[0].cmd.worker == 3 &&
           !strcmp(g[0].text, "runs/x/ckpt/ckpt-00000004.h5"),
       "a checkpoint: the serving rank reloads it");
    coord_training_get(c, &t);
    ok(!strcmp(t.latest, "runs/x/ckpt/ckpt-00000004.h5") && t.step == 3,
       "the coordinator names it as the latest");

    /* no load: after the cooldown rank 3 goes back */
    coord_tick(c, 0.6, 0);
    is_int(take(c, g, 8), 0, "the load is gone: nothing moves before the cooldown");
    coord_tick(c, 1.2, 0);
    n = take(c, g, 8);
    ok(n == 2 && g[0].cmd.kind == COORD_CMD_JOIN && g[0].cmd.worker == 3 &&
           g[1].cmd.kind == COORD_CMD_RESIZE && g[1].cmd.worker == 1,
       "after it: a join to rank 3 and a resize to the leader");
    ok(g[0].mem.n == 3 && g[0].mem.ranks[2] == 3 && g[0].mem.epoch == 2 && g[0].mem.root == 1 &&
           !memcmp(&g[0].mem, &g[1].mem, sizeof(g[0].mem)),
       "both name {1, 2, 3}, epoch 2, the state from rank 1");
    r = rep(SERVE_REPORT_JOINED, 3, 5, NULL);
    coord_report(c, 1.3, 3, &r);
    coord_training_get(c, &t);
    ok(t.training == 3 && t.serving == 0 && t.moves_to_train == 1, "3 train again");

    coord_move_stats_t mv;
    coord_move_stats_get(c, &mv);
    ok(mv.n == 1, "one move to serving was timed");
    is_near(mv.ms[0], 50, 1e-6, "from the decision (260 ms) to the rank's report (310 ms)");
    /* the step under way at the decision began at 200 ms and ended at 300: 100 + 10 ms */
    is_near(mv.over_budget[0], 50.0 / 110, 1e-9, "against the step it waited for + 10 ms");
    is_near(mv.over_prev[0], 50.0 / 110, 1e-9, "against the step before the decision + 10 ms");

    r = rep(SERVE_REPORT_DONE, 1, 600, NULL);
    coord_report(c, 2.0, 1, &r);
    coord_training_get(c, &t);
    ok(t.done && t.step == 600, "training's end");
    for (int w = 1; w <= 3; w++) {
        r = rep(SERVE_REPORT_LEFT, w, 600, NULL);
        coord_report(c, 2.1, w, &r);
    }
    coord_training_get(c, &t);
    ok(t.serving == 3 && t.training == 0, "then every worker serves");
    coord_tick(c, 9.0, 5);
    is_int(take(c, g, 8), 0, "and nothing moves any more");

    r = rep(SERVE_REPORT_ERROR, 2, 0, "out of memory in the all-reduce");
    is_int(coord_report(c, 9.1, 2, &r), TDL_ERR_PEER, "a worker's error report ends the job");
    ok(strstr(tdl_error_get(), "rank 2") && strstr(tdl_error_get(), "all-reduce"),
       "naming the rank and why: %s", tdl_error_get());
    r = rep(SERVE_REPORT_STEP, 9, 0, NULL);
    is_int(coord_report(c, 9.2, 9, &r), TDL_ERR_CORRUPT, "a report from no worker is refused");
    r = rep(77, 2, 0, NULL);
    is_int(coord_report(c, 9.2, 2, &r), TDL_ERR_CORRUPT, "a report of an unknown kind too");
    is_int(coord_task_finished(c, 9.3, 999, true, NULL, 0), TDL_ERR_INVALID_ARG,
           "a task of a request that never came is refused");
    coord_free(c);

    /* --ckpt: serving keeps its weights */
    c = colocated(true);
    coord_request_arrive(c, 0, &p, NULL);
    coord_tick(c, 0.05, 0);
    take(c, g, 8);
    r = rep(SERVE_REPORT_LEFT, 3, 0, NULL);
    coord_report(c, 0.1, 3, &r);
    take(c, g, 8);
    r = rep(SERVE_REPORT_CKPT, 1, 4, "a.h5");
    coord_report(c, 0.2, 1, &r);
    is_int(take(c, g, 8), 0, "with fixed weights a checkpoint is not reloaded");
    coord_free(c);

    coord_t *none = NULL;
    coord_config_t bad = {.workers = 0};
    is_int(coord_create(&bad, &none), TDL_ERR_INVALID_ARG, "no workers: refused");
}

/* The burst again, every allocation failing in turn: each failure is a clean error, and
 * nothing leaks (ASan's leak check in the sanitizer build). */
static tdl_status_t burst(void)
{
    coord_t *c = colocated(false);
    if (!c)
        return TDL_ERR_NOMEM;
    got_t g[8];
    tdl_status_t st = TDL_OK;
    serve_request_params_t p = req(3, 4, 2, 3, 500);
    serve_wire_report_t r = rep(SERVE_REPORT_STEP, 1, 1, NULL);
    st = coord_report(c, 0.1, 1, &r);
    for (int i = 0; st == TDL_OK && i < 70; i++) /* past the first growth of every array */
        st = coord_request_arrive(c, 0.2, &p, NULL);
    if (st == TDL_OK)
        st = coord_tick(c, 0.3, 0);
    take(c, g, 8);
    for (int w = 2; st == TDL_OK && w <= 3; w++) {
        r = rep(SERVE_REPORT_LEFT, w, 1, NULL);
        st = coord_report(c, 0.4, w, &r);
    }
    double t = 0.4;
    for (int round = 0; st == TDL_OK && coord_live(c) > 0 && round < 2000; round++) {
        const coord_cmd_t *cmd;
        uint64_t ids[8];
        int n = 0;
        while ((cmd = coord_command_next(c)))
            if (cmd->kind == COORD_CMD_TASK && n < 8)
                ids[n++] = cmd->request;
        t += 0.01;
        for (int i = 0; st == TDL_OK && i < n; i++)
            st = coord_task_finished(c, t, ids[i], true, NULL, 0);
        if (st == TDL_OK && n == 0)
            st = coord_tick(c, t, 0);
    }
    if (st == TDL_OK) {
        r = rep(SERVE_REPORT_CKPT, 1, 4, "x.h5");
        st = coord_report(c, t, 1, &r);
    }
    coord_shutdown(c, t, "bye");
    take(c, g, 8);
    coord_free(c);
    return st;
}

static void test_allocation_failures(void)
{
    int clean = 1, runs = 0;
    long n;
    tdl_status_t st = TDL_ERR_NOMEM;
    quiet = true;
    for (n = 0; n < 100000 && st != TDL_OK; n++, runs++) {
        tdl_alloc_fail_after(n);
        st = burst();
        if (st != TDL_OK && (st != TDL_ERR_NOMEM || !strstr(tdl_error_get(), "out of memory"))) {
            clean = 0;
            diag("allocation %ld: status %d: %s", n, st, tdl_error_get());
        }
    }
    long made = tdl_alloc_fail_after(-1);
    quiet = false;
    ok(st == TDL_OK, "the burst runs through once enough allocations succeed (%ld)", n - 1);
    ok(runs > 10 && clean,
       "each of the %d allocations before that failed cleanly, naming "
       "the memory (%ld allocations in the last run)",
       runs - 1, made);
    for (int i = 0; i < 2; i++) {
        const coord_realloc_ops_t *ops = coord_realloc_find(i ? "static" : "slo_first");
        void *state = NULL;
        coord_realloc_opts_t o = {0};
        tdl_alloc_fail_after(0);
        tdl_status_t s = ops->create(&o, &state);
        tdl_alloc_fail_after(-1);
        ok(s == TDL_ERR_NOMEM && !state && strstr(tdl_error_get(), ops->name),
           "realloc %s: no memory is a clean error naming it (%s)", ops->name, tdl_error_get());
    }
}

/* slo_first after a burst: seven ranks serve, the load is gone; nothing goes back before the
 * cooldown, then all that serving does not need go back at once (one resize, not seven). */
static void test_slo_first_return(void)
{
    const coord_realloc_ops_t *ops = coord_realloc_find("slo_first");
    coord_realloc_opts_t o = {.drain_s = 2, .cooldown_s = 3};
    void *state = NULL;
    if (!ok(ops->create(&o, &state) == TDL_OK, "slo_first is created"))
        return;
    coord_realloc_view_t v = {.now = 10,
                              .workers = 8,
                              .serving = 1,
                              .min_train = 1,
                              .training = true,
                              .waiting = 0,
                              .running = 0,
                              .backlog_s = 60};
    is_int(ops->decide(state, &v), 7, "a backlog of 60 single-rank s to clear in 2 s: 7 serve");
    v.serving = 7, v.backlog_s = 4, v.running = 1, v.now = 11;
    is_int(ops->decide(state, &v), 7, "the backlog shrinks to 2 ranks' worth: none goes back yet");
    v.now = 13.9;
    is_int(ops->decide(state, &v), 7, "2.9 s later: still within the cooldown");
    v.now = 14.1;
    is_int(ops->decide(state, &v), 2, "past the cooldown: 5 go back together, 2 keep serving");
    v.serving = 2, v.now = 14.2, v.backlog_s = 0, v.running = 0;
    is_int(ops->decide(state, &v), 2, "a further return waits a cooldown of its own");
    v.now = 17.3;
    is_int(ops->decide(state, &v), 0, "and then the rest go back");
    ops->destroy(state);
}

/* A rank dies: its running request starts again on the other rank, a request whose state it
 * held starts again at once, and a policy that no longer fits fails its requests. By hand, on
 * static_sp1 over 2 executors (world ranks 1 and 2; the policy takes the lowest free). */
static void test_rank_lost(void)
{
    coord_t *c = serving(2, "static_sp1");
    got_t g[8];
    double t = 0;
    serve_request_params_t p = req(-1, 1, 1, 3, 0);
    coord_request_arrive(c, 0, &p, NULL); /* request 0: PREPARE on 1 */
    coord_request_arrive(c, 0, &p, NULL); /* request 1: PREPARE on 2 */
    int n = take(c, g, 8);
    ok(n == 2 && g[0].ranks[0] == 1 && g[1].ranks[0] == 2, "two PREPAREs, on ranks 1 and 2");
    coord_task_finished(c, 0.001, 0, true, NULL, 0); /* request 0: a chunk on 1 */
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.task.kind == SERVE_TASK_STEP_CHUNK && g[0].ranks[0] == 1,
       "request 0 steps on rank 1");
    coord_task_finished(c, 0.002, 1, true, NULL, 0); /* request 1: a chunk on 2 */
    take(c, g, 8);
    coord_task_finished(c, 0.003, 1, true, NULL, 0); /* and again */
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.request == 1 && g[0].ranks[0] == 2, "request 1 steps on rank 2");
    is_int(coord_rank_lost(c, 0.004, 1, "killed"), TDL_OK, "rank 1 dies under request 0's chunk");
    is_int(coord_rank_lost(c, 0.004, 1, "killed"), TDL_OK, "told twice, nothing changes");
    is_int(take(c, g, 8), 0, "nothing is placed while rank 2 is busy");
    int ranks[SERVE_ROLE_COUNT];
    coord_roles(c, ranks);
    ok(ranks[SERVE_ROLE_DEAD] == 1 && ranks[SERVE_ROLE_SERVING] == 1, "1 dead, 1 serving");
    is_int(coord_task_lost(c, 0.005, 0), TDL_OK, "request 0's chunk fails for the dead rank");
    is_int(take(c, g, 8), 0, "it waits: rank 2 is busy");
    coord_task_finished(c, 0.006, 1, true, NULL, 0);
    n = take(c, g, 8);
    /* first come first served: request 0 (arrived first) starts again on rank 2 */
    ok(n == 1 && g[0].cmd.request == 0 && g[0].cmd.task.kind == SERVE_TASK_PREPARE &&
           g[0].ranks[0] == 2 && g[0].cmd.task.nprev == 0 && !g[0].cmd.task.move,
       "request 0 starts again: PREPARE on rank 2, nothing to move from the dead rank");
    /* request 0 to its answer on rank 2; request 1 (its state on rank 2) goes on there after */
    t = 0.006;
    int tasks = 0;
    bool answered = false, have1 = false;
    got_t next1 = {0};
    while (!answered && tasks < 20) {
        tasks++;
        t += 0.001;
        coord_task_finished(c, t, 0, true, NULL, 0);
        n = take(c, g, 8);
        for (int i = 0; i < n; i++)
            if (g[i].cmd.kind == COORD_CMD_ANSWER && g[i].cmd.request == 0)
                answered = g[i].cmd.ok;
            else if (g[i].cmd.request == 1)
                next1 = g[i], have1 = true;
    }
    ok(answered && tasks == 5, "request 0 is answered after 5 tasks (PREPARE, 3 chunks, DECODE)");
    ok(have1 && next1.cmd.task.kind == SERVE_TASK_STEP_CHUNK && next1.ranks[0] == 2 &&
           !next1.cmd.task.move,
       "request 1 takes its last chunk on rank 2, where its state is: no restart, no move");
    coord_stats_t k;
    coord_stats_get(c, &k);
    ok(k.restarts == 1 && k.lost == 1, "1 restart, 1 rank lost (%ld, %d)", k.restarts, k.lost);
    /* rank 2 dies too: nothing can place request 1 any more, and it fails saying so */
    coord_rank_lost(c, t, 2, "stopped");
    coord_task_lost(c, t, 1);
    coord_tick(c, t, 0);
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_ANSWER && !g[0].cmd.ok &&
           strstr(g[0].text, "executors left alive"),
       "with no executor left the request fails: %s", n ? g[0].text : "");
    is_int(coord_live(c), 0, "and nothing is live");
    coord_free(c);
}

/* got_t's of kind `kind` to worker w among g[0 .. n) */
static const got_t *to(const got_t *g, int n, coord_cmd_kind_t kind, int w)
{
    for (int i = 0; i < n; i++)
        if (g[i].cmd.kind == kind && g[i].cmd.worker == w)
            return &g[i];
    return NULL;
}

/* The burst's first resize: rank 1 leads {1, 2}, rank 3 is on its way to serving. */
static coord_t *resize_in_flight(void)
{
    coord_t *c = colocated(false);
    got_t g[8];
    serve_wire_report_t r = rep(SERVE_REPORT_STEP, 1, 1, NULL);
    coord_report(c, 0.1, 1, &r);
    r.step = 2;
    coord_report(c, 0.2, 1, &r);
    serve_request_params_t p = req(-1, 1, 1, 3, 0);
    coord_request_arrive(c, 0.25, &p, NULL);
    coord_tick(c, 0.26, 0);
    take(c, g, 8);
    return c;
}

static void test_training_lost(void)
{
    got_t g[8];
    coord_training_t t;
    /* reports that do not match what the rank was told are refused, and change nothing */
    coord_t *c = colocated(false);
    serve_wire_report_t r = rep(SERVE_REPORT_LEFT, 2, 1, NULL);
    is_int(coord_report(c, 0.05, 2, &r), TDL_ERR_CORRUPT,
           "a LEFT from a member not told to leave is refused");
    r = rep(SERVE_REPORT_JOINED, 3, 1, NULL);
    is_int(coord_report(c, 0.05, 3, &r), TDL_ERR_CORRUPT,
           "a JOINED from a rank not told to join too");
    coord_training_get(c, &t);
    ok(t.training == 3 && t.serving == 0, "the 3 workers still train");
    /* training's end: a member's LEFT (members -1) can reach rank 0 before the leader's DONE */
    r = rep(SERVE_REPORT_LEFT, 2, 9, NULL);
    r.members = -1;
    is_int(coord_report(c, 0.06, 2, &r), TDL_OK, "a LEFT at training's end before the DONE");
    r = rep(SERVE_REPORT_DONE, 1, 9, NULL);
    coord_report(c, 0.07, 1, &r);
    for (int w = 1; w <= 3; w += 2) {
        r = rep(SERVE_REPORT_LEFT, w, 9, NULL);
        r.members = -1;
        coord_report(c, 0.08, w, &r);
    }
    coord_training_get(c, &t);
    ok(t.done && t.serving == 3 && t.training == 0, "then the DONE, the others: all 3 serve");
    coord_free(c);

    /* a member dies: the two others report their group failed, and go on together */
    c = colocated(false);
    r = rep(SERVE_REPORT_STEP, 1, 7, NULL);
    coord_report(c, 0.1, 1, &r);
    is_int(coord_rank_lost(c, 0.2, 3, "killed"), TDL_OK, "member 3 dies");
    r = rep(SERVE_REPORT_FAILED, 1, 7, "rank 3 is dead");
    coord_report(c, 0.21, 1, &r);
    is_int(take(c, g, 8), 0, "one report of two: no word yet");
    coord_tick(c, 0.3, 5);
    is_int(take(c, g, 8), 0, "no resize is decided during a regroup");
    r = rep(SERVE_REPORT_FAILED, 2, 7, "rank 3 is dead");
    coord_report(c, 0.22, 2, &r);
    int n = take(c, g, 8);
    const got_t *a = to(g, n, COORD_CMD_RECOVER, 1), *b = to(g, n, COORD_CMD_RECOVER, 2);
    ok(n == 2 && a && b && a->mem.n == 2 && a->mem.ranks[0] == 1 && a->mem.ranks[1] == 2 &&
           a->mem.epoch == 1 && !memcmp(&a->mem, &b->mem, sizeof(a->mem)),
       "both reports: RECOVER {1, 2}, epoch 1, to each");
    r = rep(SERVE_REPORT_STEP, 1, 8, NULL);
    coord_report(c, 0.3, 1, &r);
    coord_training_get(c, &t);
    ok(t.regroups == 1 && t.training == 2 && !t.orphaned, "one regroup; 2 train");
    coord_free(c);

    /* the leader dies holding a resize to serving: the resize is void, and rank 3, which was
     * still in the group and holds the state, trains on with rank 2 */
    c = resize_in_flight();
    coord_rank_lost(c, 0.27, 1, "killed");
    r = rep(SERVE_REPORT_FAILED, 3, 2, "rank 1 is dead");
    coord_report(c, 0.28, 3, &r);
    is_int(take(c, g, 8), 0, "the leaver's report: it is not sent to serve, it waits");
    r = rep(SERVE_REPORT_FAILED, 2, 2, "rank 1 is dead");
    coord_report(c, 0.29, 2, &r);
    n = take(c, g, 8);
    a = to(g, n, COORD_CMD_RECOVER, 2), b = to(g, n, COORD_CMD_RECOVER, 3);
    ok(a && b && a->mem.n == 2 && a->mem.ranks[0] == 2 && a->mem.ranks[1] == 3 &&
           (a->mem.root == 2 || a->mem.root == 3),
       "RECOVER {2, 3} to both: no restart from a checkpoint");
    coord_training_get(c, &t);
    ok(!t.orphaned && t.restarts == 0 && t.training == 2 && t.moves_to_serve == 0,
       "training was not orphaned; the void move is not counted");
    coord_free(c);

    /* the same, but the resize had reached rank 3: it left, and says so after the death */
    c = resize_in_flight();
    coord_rank_lost(c, 0.27, 1, "killed");
    r = rep(SERVE_REPORT_LEFT, 3, 2, NULL);
    coord_report(c, 0.28, 3, &r);
    n = take(c, g, 8);
    ok(n == 1 && g[0].cmd.kind == COORD_CMD_TASK && g[0].ranks[0] == 3,
       "rank 3 left after all: it serves the waiting request");
    r = rep(SERVE_REPORT_FAILED, 2, 2, "rank 1 is dead");
    coord_report(c, 0.29, 2, &r);
    n = take(c, g, 8);
    a = to(g, n, COORD_CMD_RECOVER, 2);
    ok(n == 1 && a && a->mem.n == 1 && a->mem.root == 2, "rank 2 trains on alone: RECOVER {2}");
    coord_training_get(c, &t);
    ok(t.serving == 1 && t.training == 1, "1 serves, 1 trains");
    coord_free(c);

    /* every member dies: a serving rank takes training up again from the newest checkpoint */
    c = resize_in_flight();
    r = rep(SERVE_REPORT_STEP, 1, 3, NULL);
    coord_report(c, 0.3, 1, &r);
    r = rep(SERVE_REPORT_LEFT, 3, 3, NULL);
    coord_report(c, 0.31, 3, &r);
    r = rep(SERVE_REPORT_CKPT, 1, 3, "runs/x/ckpt/ckpt-00000003.h5");
    coord_report(c, 0.32, 1, &r); /* (rank 3's PREPARE and RELOAD wait in the commands) */
    coord_rank_lost(c, 0.4, 1, "killed");
    coord_rank_lost(c, 0.4, 2, "killed");
    coord_training_get(c, &t);
    ok(t.orphaned && t.training == 0, "both members dead: training has no member");
    double now = 0.4;
    bool restarted = false;
    for (int i = 0; i < 200 && !restarted; i++) { /* rank 3 serves the request, then is free */
        now += 0.01;
        n = take(c, g, 8);
        for (int k = 0; k < n; k++) {
            if (g[k].cmd.kind == COORD_CMD_TASK)
                coord_task_finished(c, now, g[k].cmd.request, true, NULL, 0);
            restarted |= g[k].cmd.kind == COORD_CMD_RESTART && g[k].cmd.worker == 3 &&
                         g[k].mem.n == 1 && g[k].mem.root == 3;
        }
        coord_tick(c, now, 0);
    }
    ok(restarted, "once free, rank 3 gets RESTART {3}");
    r = rep(SERVE_REPORT_JOINED, 3, 3, NULL);
    coord_report(c, now, 3, &r);
    coord_training_get(c, &t);
    ok(!t.orphaned && t.restarts == 1 && t.training == 1 && t.serving == 0,
       "training runs again, on rank 3: one restart");
    coord_free(c);
}

int main(void)
{
    test_request();
    test_cancel();
    test_failure_and_deadline();
    test_rank_lost();
    test_burst();
    test_slo_first_return();
    test_training_lost();
    test_allocation_failures();
    return done_testing();
}
