/* The placement policies on hand-built scenarios whose right answers are known: a deadline only
 * SP2 meets, a surplus that must not be handed out, static degrees, srtf's pre-emption at a task
 * boundary, and a starving low-priority request that edf_priority lets through. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord/cost.h"
#include "coord/policy.h"
#include "core/core.h"
#include "tap.h"

/* Every stage a constant: prepare and decode free at degree 1; steps per degree as given. */
static void model_steps(coord_cost_model_t *m, const int *deg, const double *step_s, int nd)
{
    memset(m, 0, sizeof(*m));
    m->patch = 4;
    m->per_image = true;
    m->migration_bytes_per_s = 1e12;
    coord_cost_model_set_fit(m, COORD_COST_PREPARE, 1, 0, 0, 0, 0);
    coord_cost_model_set_fit(m, COORD_COST_DECODE, 1, 0, 0, 0, 0);
    for (int i = 0; i < nd; i++)
        coord_cost_model_set_fit(m, COORD_COST_STEP, deg[i], 0, 0, step_s[i], 0);
}

static coord_policy_request_t req(uint64_t id, int steps_total, int steps_done,
                                  coord_policy_task_t next, double arrival, double deadline,
                                  int prio, int res)
{
    coord_policy_request_t r = {.id = id,
                                .resolution = res,
                                .tokens = (res / 4) * (res / 4),
                                .n = 1,
                                .steps_total = steps_total,
                                .steps_done = steps_done,
                                .next = next,
                                .arrival_s = arrival,
                                .deadline_s = deadline,
                                .priority = prio,
                                .cls = coord_policy_class_of(res)};
    return r;
}

static coord_policy_placement_t out[16];

/* Runs `name` once on the requests with `nfree` of `nranks` ranks free (the first ones busy). */
static int place(const char *name, const coord_cost_model_t *m, double now,
                 coord_policy_request_t *rs, int n, int nranks, int nfree)
{
    const coord_policy_ops_t *ops = coord_policy_find(name);
    bool busy[16] = {false};
    for (int i = 0; i < nranks - nfree; i++)
        busy[i] = true;
    coord_policy_view_t v = {.now = now,
                             .cost = m,
                             .nranks = nranks,
                             .busy = busy,
                             .nfree = nfree,
                             .requests = rs,
                             .nrequests = n,
                             .chunk = 5};
    void *st = NULL;
    int nout = -1;
    if (!ops || ops->create(&st) != TDL_OK)
        return -1;
    if (ops->on_runnable(st, &v, rs[0].id, out, 16, &nout) != TDL_OK)
        nout = -1;
    ops->destroy(st);
    return nout;
}

static void test_registry(void)
{
    ok(coord_policy_find("edf_best_fit") != NULL, "edf_best_fit is registered");
    ok(coord_policy_find("nope") == NULL, "an unknown name is NULL");
    const char *need[] = {"static_sp1", "static_sp2", "static_sp4", "static_sp8",   "fcfs",
                          "sjf",        "srtf",       "edf_greedy", "edf_best_fit", "edf_priority"};
    int found = 0;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(need); i++)
        found += coord_policy_find(need[i]) && strstr(coord_policy_names(), need[i]);
    is_int(found, (int)TDL_ARRAY_SIZE(need), "every policy of the issue is registered and listed");
}

static void test_deadline_sp2(void)
{
    /* 10 steps: SP1 0.10 s, SP2 0.06 s, SP4 0.065 s (slower than SP2). Deadline 0.07 s. */
    coord_cost_model_t m;
    const int deg[] = {1, 2, 4};
    const double s[] = {0.010, 0.006, 0.0065};
    model_steps(&m, deg, s, 3);
    coord_policy_request_t r = req(7, 10, 0, COORD_POLICY_TASK_STEP_CHUNK, 0, 0.07, 0, 32);
    int n = place("edf_best_fit", &m, 0, &r, 1, 4, 4);
    is_int(n, 1, "edf_best_fit places the request");
    is_int(out[0].degree, 2, "edf_best_fit: the deadline only SP2 (and the slower SP4) meets -> 2");
    is_int(out[0].steps, 5, "a chunk of 5 steps");
    n = place("edf_greedy", &m, 0, &r, 1, 4, 4);
    is_int(out[0].degree, 4, "edf_greedy takes every free rank");
    /* Only 1 rank free: best fit falls back to the fastest that fits. */
    n = place("edf_best_fit", &m, 0, &r, 1, 4, 1);
    ok(n == 1 && out[0].degree == 1, "one rank free: degree 1 although it misses");
    /* A deadline SP1 meets: stays at 1 although SP2 is faster (no surplus handed out? it is:
     * the widening rule gives surplus only where faster, and SP2 is faster). */
    r.deadline_s = 0.5;
    n = place("edf_best_fit", &m, 0, &r, 1, 4, 4);
    is_int(out[0].degree, 2,
           "loose deadline: SP1 suffices, the surplus widens it to the faster SP2 "
           "but not to the slower SP4");
}

static void test_surplus(void)
{
    /* A small image: every wider degree is slower. Free ranks must stay free. */
    coord_cost_model_t m;
    const int deg[] = {1, 2, 4, 8};
    const double s[] = {0.003, 0.004, 0.005, 0.006};
    model_steps(&m, deg, s, 4);
    coord_policy_request_t r = req(1, 20, 0, COORD_POLICY_TASK_STEP_CHUNK, 0, 1.0, 0, 32);
    int n = place("edf_best_fit", &m, 0, &r, 1, 8, 8);
    ok(n == 1 && out[0].degree == 1,
       "edf_best_fit: wider is not faster, the surplus is not handed "
       "out (degree %d)",
       n == 1 ? out[0].degree : -1);
    n = place("edf_priority", &m, 0, &r, 1, 8, 8);
    ok(n == 1 && out[0].degree == 1, "edf_priority: the same");
    r.deadline_s = 0;
    n = place("edf_best_fit", &m, 0, &r, 1, 8, 8);
    ok(n == 1 && out[0].degree == 1, "no deadline: the same");
}

static void test_static(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    const char *names[] = {"static_sp1", "static_sp2", "static_sp4", "static_sp8"};
    for (int k = 0; k < 4; k++) {
        int want = 1 << k;
        coord_policy_request_t rs[2] = {req(1, 50, 10, COORD_POLICY_TASK_STEP_CHUNK, 0, 0, 0, 128),
                                        req(2, 20, 0, COORD_POLICY_TASK_STEP_CHUNK, 1, 0, 0, 32)};
        int n = place(names[k], &m, 2, rs, 2, 8, 8);
        int okd = n >= 1;
        for (int i = 0; i < n; i++)
            okd &= out[i].degree == want;
        ok(okd && n == TDL_MIN(2, 8 / want), "%s: every chunk at degree %d (%d placements)",
           names[k], want, n);
        n = place(names[k], &m, 2, rs, 2, 8, want - 1);
        is_int(n, 0, "%s: with %d ranks free the head waits", names[k], want - 1);
    }
    /* PREPARE has only degree 1 in the model: static_sp4 runs it at 1. */
    coord_policy_request_t r = req(3, 20, 0, COORD_POLICY_TASK_PREPARE, 0, 0, 0, 32);
    int n = place("static_sp4", &m, 0, &r, 1, 8, 8);
    ok(n == 1 && out[0].degree == 1 && out[0].steps == 0, "static_sp4: PREPARE at degree 1");
}

static void test_srtf_preempts(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    /* A large request between two chunks, a small one just arrived; one rank free. */
    coord_policy_request_t rs[2] = {req(1, 50, 10, COORD_POLICY_TASK_STEP_CHUNK, 0.0, 0, 0, 128),
                                    req(2, 20, 0, COORD_POLICY_TASK_PREPARE, 0.5, 0, 0, 32)};
    int n = place("srtf", &m, 0.5, rs, 2, 1, 1);
    ok(n == 1 && out[0].request_id == 2, "srtf: the short request takes the rank at the large "
                                         "one's chunk boundary");
    n = place("fcfs", &m, 0.5, rs, 2, 1, 1);
    ok(n == 1 && out[0].request_id == 1, "fcfs: the earlier request keeps it");
    n = place("sjf", &m, 0.5, rs, 2, 1, 1);
    ok(n == 1 && out[0].request_id == 1, "sjf is not pre-emptive: the started request goes on");
}

static void test_starvation(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    double t1 = coord_policy_single_rank_s(&m, 128, 1, 50);
    /* A low-priority large request pre-empted at a chunk boundary; a fresh urgent small one. */
    coord_policy_request_t rs[2] = {req(1, 50, 20, COORD_POLICY_TASK_STEP_CHUNK, 0.0, 0, 0, 128),
                                    req(2, 20, 0, COORD_POLICY_TASK_PREPARE, 0, 0, 5, 32)};
    rs[1].arrival_s = 1.5 * t1;
    int n = place("edf_priority", &m, 1.5 * t1, rs, 2, 1, 1);
    ok(n == 1 && out[0].request_id == 2, "edf_priority: priority first while the large one has "
                                         "waited less than 2x its single-rank time");
    rs[1].arrival_s = 2.5 * t1;
    n = place("edf_priority", &m, 2.5 * t1, rs, 2, 1, 1);
    ok(n == 1 && out[0].request_id == 1, "edf_priority: past 2x its single-rank time the large "
                                         "request is not starved");
}

static void test_sticky_ranks(void)
{
    coord_cost_model_t m;
    coord_cost_model_default(&m);
    int last[2] = {5, 2};
    coord_policy_request_t r = req(1, 50, 10, COORD_POLICY_TASK_STEP_CHUNK, 0, 0, 0, 128);
    r.last_degree = 2;
    r.ranks = last;
    r.nranks = 2;
    int n = place("static_sp2", &m, 0, &r, 1, 8, 8);
    ok(n == 1 && out[0].ranks[0] == 5 && out[0].ranks[1] == 2,
       "the next chunk goes back to the ranks holding the state, in their order");
}

int main(void)
{
    test_registry();
    test_deadline_sp2();
    test_surplus();
    test_static();
    test_srtf_preempts();
    test_starvation();
    test_sticky_ranks();
    return done_testing();
}
