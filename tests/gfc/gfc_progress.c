/* The progress rule: a wait or a test on one request advances every outstanding request of the
 * runtime, so the order in which members start or wait for their collectives cannot deadlock
 * (issue #18, defect 13: a wait used to drive only the request it was given).
 *
 * (a) The reported case: ranks 0 and 1 start all-reduces on [0, 1] and [1, 0] (ns 1) in opposite
 *     orders and wait for them one by one in the order each started them, for each algorithm.
 *     Rank 0 waits on A while rank 1 waits on B: each needs the other to advance the collective
 *     it is not waiting on.
 * (b) Random rounds: 2 to 6 overlapping groups (random ordered subsets of the world, some the
 *     same set as an earlier one in another order), one to three collectives each (all-reduce
 *     with a random algorithm, type and size, mostly; bcast, allgather, reduce-scatter,
 *     all-to-all, barrier). Each rank starts them in an order of its own (only the order within
 *     a group is shared) and waits for them one by one in another order of its own, with
 *     gfc_request_wait or by polling gfc_request_test. Results are checked against values
 *     computed by hand: small integers, so f32 sums are exact in any order.
 *
 * Run with a short TIDAL_GFC_TIMEOUT_MS: a deadlock then fails in seconds. After the first
 * failed wait a rank frees its other requests instead of waiting for each, and all ranks stop
 * after a round in which any rank failed. */
#include "config.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mpi/baseline.h"

enum { MAX_GROUPS = 6, MAX_OPS = 3, AG_COUNT = 13, BC_COUNT = 50, A2A_COUNT = 3, RS_COUNT = 5 };

typedef enum { K_ALLREDUCE, K_BCAST, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_BARRIER } kind_t;

static const char *const kind_names[] = {"allreduce",      "bcast",    "allgather",
                                         "reduce_scatter", "alltoall", "barrier"};

/* All-reduce sizes: a single element up to several ring chunks per block (the script sets a
 * 4 KiB chunk), across UCX's eager and rendezvous protocols. */
static const size_t ar_counts[] = {1, 5, 64, 257, 1000, 3000, 12000};

static const gfc_dtype_t ar_dtypes[] = {GFC_DT_F32, GFC_DT_I32, GFC_DT_I64};

typedef struct group_plan {
    int ranks[64];
    int n;
    uint64_t ns;
    gfc_group_t g;
    bool member;
    char str[96];
} group_plan_t;

typedef struct op {
    int group, k; /* the k-th collective started on the group */
    kind_t kind;
    gfc_allreduce_algo_t algo;
    gfc_dtype_t dtype;
    size_t count;
    int root;
    void *send, *recv;
    gfc_request_t *req;
    bool started, by_test;
} op_t;

/* Element i of what world rank w contributes to collective k of group c in round r. */
static int32_t val(uint64_t seed, int r, int c, int k, int w, size_t i)
{
    uint64_t x = harness_mix64(seed ^ harness_mix64(((uint64_t)r << 40) ^ ((uint64_t)c << 32) ^
                                    ((uint64_t)k << 24) ^ (uint64_t)w));
    return (int32_t)(harness_mix64(x ^ (uint64_t)i) % 2001) - 1000;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        abort();
    return p;
}

static void put(void *buf, gfc_dtype_t dt, size_t i, int64_t v)
{
    switch (dt) {
    case GFC_DT_F32: ((float *)buf)[i] = (float)v; break;
    case GFC_DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = v; break;
    }
}

static int64_t get(const void *buf, gfc_dtype_t dt, size_t i)
{
    switch (dt) {
    case GFC_DT_F32: return (int64_t)((const float *)buf)[i];
    case GFC_DT_I32: return ((const int32_t *)buf)[i];
    default: return ((const int64_t *)buf)[i];
    }
}

static tdl_status_t op_start(harness_t *h, int round, group_plan_t *gp, op_t *p)
{
    group_plan_t *G = &gp[p->group];
    int n = G->n, w = h->rank;
    uint64_t s = h->seed;
    size_t es = gfc_dtype_size(p->dtype);
    switch (p->kind) {
    case K_ALLREDUCE: {
        p->send = xcalloc(p->count, es);
        p->recv = xcalloc(p->count, es);
        for (size_t i = 0; i < p->count; i++)
            put(p->send, p->dtype, i, val(s, round, p->group, p->k, w, i));
        gfc_allreduce_opts_t o = {.algo = p->algo};
        return gfc_allreduce_start(&G->g, p->send, p->recv, p->count, p->dtype, GFC_OP_SUM, &o,
                                   &p->req);
    }
    case K_BCAST:
        p->recv = xcalloc(BC_COUNT, 4);
        for (size_t i = 0; G->g.me == p->root && i < BC_COUNT; i++)
            ((int32_t *)p->recv)[i] = val(s, round, p->group, p->k, w, i);
        return gfc_bcast_start(&G->g, p->recv, BC_COUNT, GFC_DT_I32, p->root, &p->req);
    case K_ALLGATHER:
        p->send = xcalloc(AG_COUNT, 4);
        p->recv = xcalloc((size_t)n * AG_COUNT, 4);
        for (size_t i = 0; i < AG_COUNT; i++)
            ((int32_t *)p->send)[i] = val(s, round, p->group, p->k, w, i);
        return gfc_allgather_start(&G->g, p->send, p->recv, AG_COUNT, GFC_DT_I32, &p->req);
    case K_REDUCE_SCATTER:
    case K_ALLTOALL: {
        size_t count = p->kind == K_ALLTOALL ? A2A_COUNT : RS_COUNT;
        p->send = xcalloc((size_t)n * count, 4);
        for (size_t i = 0; i < (size_t)n * count; i++)
            ((int32_t *)p->send)[i] = val(s, round, p->group, p->k, w, i);
        if (p->kind == K_ALLTOALL) {
            p->recv = xcalloc((size_t)n * count, 4);
            return gfc_alltoall_start(&G->g, p->send, p->recv, count, GFC_DT_I32, &p->req);
        }
        p->recv = xcalloc(count, 4);
        return gfc_reduce_scatter_start(&G->g, p->send, p->recv, count, GFC_DT_I32, GFC_OP_SUM,
                                        &p->req);
    }
    default: return gfc_barrier_start(&G->g, &p->req);
    }
}

/* Compares a finished collective with the hand-computed result. */
static void op_check(harness_t *h, int round, const group_plan_t *gp, const op_t *p)
{
    const group_plan_t *G = &gp[p->group];
    int n = G->n, me = G->g.me;
    uint64_t s = h->seed;
    size_t bad = SIZE_MAX;
    int64_t got = 0, want = 0;
    switch (p->kind) {
    case K_ALLREDUCE:
        for (size_t i = 0; i < p->count && bad == SIZE_MAX; i++) {
            want = 0;
            for (int m = 0; m < n; m++)
                want += val(s, round, p->group, p->k, G->ranks[m], i);
            if ((got = get(p->recv, p->dtype, i)) != want)
                bad = i;
        }
        break;
    case K_BCAST:
        for (size_t i = 0; i < BC_COUNT && bad == SIZE_MAX; i++)
            if ((got = ((int32_t *)p->recv)[i]) !=
                (want = val(s, round, p->group, p->k, G->ranks[p->root], i)))
                bad = i;
        break;
    case K_ALLGATHER:
        for (size_t i = 0; i < (size_t)n * AG_COUNT && bad == SIZE_MAX; i++)
            if ((got = ((int32_t *)p->recv)[i]) !=
                (want = val(s, round, p->group, p->k, G->ranks[i / AG_COUNT], i % AG_COUNT)))
                bad = i;
        break;
    case K_REDUCE_SCATTER:
        for (size_t i = 0; i < RS_COUNT && bad == SIZE_MAX; i++) {
            want = 0;
            for (int m = 0; m < n; m++)
                want += val(s, round, p->group, p->k, G->ranks[m], (size_t)me * RS_COUNT + i);
            if ((got = ((int32_t *)p->recv)[i]) != want)
                bad = i;
        }
        break;
    case K_ALLTOALL:
        for (size_t i = 0; i < (size_t)n * A2A_COUNT && bad == SIZE_MAX; i++) {
            size_t m = i / A2A_COUNT, j = (size_t)me * A2A_COUNT + i % A2A_COUNT;
            if ((got = ((int32_t *)p->recv)[i]) !=
                (want = val(s, round, p->group, p->k, G->ranks[m], j)))
                bad = i;
        }
        break;
    default: break;
    }
    if (bad != SIZE_MAX)
        harness_fail(h,
                     "round %d: %s %d on %s (%s, %s, %zu elements): element %zu is %" PRId64
                     ", want %" PRId64,
                     round, kind_names[p->kind], p->k, G->str, gfc_allreduce_algo_name(p->algo),
                     gfc_dtype_name(p->dtype), p->count, bad, got, want);
}

/* Polls with gfc_request_test (which applies no timeout) under a deadline of our own; frees. */
static tdl_status_t wait_by_test(gfc_request_t *req, int64_t timeout_ms)
{
    uint64_t deadline = tdl_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
    bool done = false;
    tdl_status_t st;
    while ((st = gfc_request_test(req, &done)) == TDL_OK && !done) {
        if (tdl_clock_ns() > deadline) {
            gfc_request_free(req);
            return tdl_error_raise(TDL_ERR_TIMEOUT,
                                   "gfc_request_test: not done within %" PRId64 " ms", timeout_ms);
        }
        sched_yield();
    }
    gfc_request_free(req);
    return st;
}

/* Waits for ops[order[0..n)] one by one. After the first failure the rest are freed, not waited
 * for: each would cost a whole timeout. Returns whether every one succeeded. */
static bool wait_in_order(harness_t *h, int round, group_plan_t *gp, op_t *ops, const int *order,
                          int n)
{
    bool good = true;
    for (int i = 0; i < n; i++) {
        op_t *p = &ops[order[i]];
        if (!p->req)
            continue;
        if (!good) {
            gfc_request_free(p->req);
            p->req = NULL;
            continue;
        }
        tdl_status_t st =
            p->by_test ? wait_by_test(p->req, h->config.timeout_ms) : gfc_request_wait(p->req);
        p->req = NULL;
        char what[200];
        snprintf(what, sizeof(what), "round %d, wait %d of %d: %s%s%s %d on %s by %s", round, i + 1,
                 n, kind_names[p->kind], p->kind == K_ALLREDUCE ? "/" : "",
                 p->kind == K_ALLREDUCE ? gfc_allreduce_algo_name(p->algo) : "", p->k,
                 gp[p->group].str, p->by_test ? "test" : "wait");
        good = harness_expect_status(h, st, TDL_OK, what);
        if (good)
            op_check(h, round, gp, p);
    }
    return good;
}

static void ops_release(op_t *ops, int n)
{
    for (int i = 0; i < n; i++) {
        if (ops[i].req)
            gfc_request_free(ops[i].req);
        free(ops[i].send);
        free(ops[i].recv);
    }
}

/* True when some rank failed since the last point (a world-wide vote). */
static bool any_failed(harness_t *h)
{
    int64_t f = h->fails;
    if (mref_world_allreduce_i64(&f, MREF_OP_SUM) != TDL_OK)
        return true;
    return f != 0;
}

static void group_plan_init(harness_t *h, group_plan_t *G, const int *ranks, int n, uint64_t ns)
{
    memcpy(G->ranks, ranks, (size_t)n * sizeof(int));
    G->n = n;
    G->ns = ns;
    G->member = harness_index_of(ranks, n, h->rank) >= 0;
    snprintf(G->str, sizeof(G->str), "ns %" PRIu64 " ", ns);
    harness_ranks_str(ranks, n, G->str + strlen(G->str), sizeof(G->str) - strlen(G->str));
    /* from G->ranks: the group value points to its ranks array, and `ranks` may be reused */
    if (G->member)
        harness_expect_status(h, gfc_group_init(&G->g, h->rt, G->ranks, n, ns), TDL_OK,
                              "gfc_group_init");
}

/* (a) */
static void test_reported_case(harness_t *h)
{
    static const gfc_allreduce_algo_t algos[] = {GFC_ALLREDUCE_RING, GFC_ALLREDUCE_BUTTERFLY,
                                                 GFC_ALLREDUCE_RECURSIVE_DOUBLING};
    int done = 0;
    for (size_t a = 0; a < TDL_ARRAY_SIZE(algos); a++) {
        group_plan_t gp[2];
        op_t ops[2];
        memset(gp, 0, sizeof(gp));
        memset(ops, 0, sizeof(ops));
        int order[2] = {h->rank == 1, h->rank != 1};
        if (h->rank <= 1) {
            group_plan_init(h, &gp[0], (const int[]){0, 1}, 2, 1 + a);
            group_plan_init(h, &gp[1], (const int[]){1, 0}, 2, 1 + a);
            for (int i = 0; i < 2; i++) {
                op_t *p = &ops[order[i]];
                *p = (op_t){.group = order[i],
                            .kind = K_ALLREDUCE,
                            .algo = algos[a],
                            .dtype = GFC_DT_F32,
                            .count = 1000};
                harness_expect_status(h, op_start(h, 0, gp, p), TDL_OK, "gfc_allreduce_start");
            }
            wait_in_order(h, 0, gp, ops, order, 2);
        }
        ops_release(ops, 2);
        if (any_failed(h))
            break;
        done++;
    }
    harness_point(h,
                  "ranks 0 and 1 start all-reduces on [0,1] and [1,0] in opposite orders and "
                  "wait for each in turn: %d of %zu algorithms complete",
                  done, TDL_ARRAY_SIZE(algos));
}

/* (b) */
static void test_random_rounds(harness_t *h, int rounds)
{
    int W = h->size, done = 0, nops_total = 0, by_test = 0;
    int *perm = xcalloc((size_t)W, sizeof(int));
    for (int round = 0; round < rounds; round++) {
        tdl_rng_t plan, mine;
        harness_rng(h, 0x51000000ull + (uint64_t)round, &plan);
        harness_rng(h, 0x52000000ull + (uint64_t)round * 4096 + (uint64_t)h->rank, &mine);
        group_plan_t gp[MAX_GROUPS];
        op_t ops[MAX_GROUPS * MAX_OPS];
        memset(gp, 0, sizeof(gp));
        memset(ops, 0, sizeof(ops));
        int ngroups = 2 + (int)tdl_rng_below(&plan, MAX_GROUPS - 1), nops = 0;
        for (int c = 0; c < ngroups; c++) {
            int n;
            if (c > 0 && tdl_rng_below(&plan, 3) == 0) {
                /* an earlier group's set in another order */
                const group_plan_t *prev = &gp[tdl_rng_below(&plan, (uint64_t)c)];
                n = prev->n;
                memcpy(perm, prev->ranks, (size_t)n * sizeof(int));
                harness_shuffle(&plan, perm, n);
            } else {
                n = harness_random_group(&plan, W, 2, W, perm);
            }
            /* a namespace per (round, group): equal lists would otherwise be one conversation */
            group_plan_init(h, &gp[c], perm, n, 1000 + (uint64_t)round * MAX_GROUPS + (uint64_t)c);
            int k_ops = 1 + (int)tdl_rng_below(&plan, MAX_OPS);
            for (int k = 0; k < k_ops; k++) {
                op_t p = {.group = c, .k = k, .kind = K_ALLREDUCE};
                uint64_t pick = tdl_rng_below(&plan, 10);
                if (pick >= 5)
                    p.kind = (kind_t)(pick - 4); /* half all-reduces, the rest one each */
                p.algo = (gfc_allreduce_algo_t)tdl_rng_below(&plan, GFC_ALLREDUCE_COUNT);
                p.dtype = ar_dtypes[tdl_rng_below(&plan, TDL_ARRAY_SIZE(ar_dtypes))];
                p.count = ar_counts[tdl_rng_below(&plan, TDL_ARRAY_SIZE(ar_counts))];
                p.root = (int)tdl_rng_below(&plan, (uint64_t)n);
                if (gp[c].member)
                    ops[nops++] = p;
            }
        }
        /* this rank's start order: a random merge that keeps each group's own order */
        int next[MAX_GROUPS] = {0}, started[MAX_GROUPS * MAX_OPS], nstarted = 0;
        for (int left = nops; left > 0; left--) {
            int cand = 0, idx = -1;
            for (int i = 0; i < nops; i++)
                cand += !ops[i].started && ops[i].k == next[ops[i].group];
            int pick = (int)tdl_rng_below(&mine, (uint64_t)cand);
            for (int i = 0; i < nops && idx < 0; i++)
                if (!ops[i].started && ops[i].k == next[ops[i].group] && pick-- == 0)
                    idx = i;
            op_t *p = &ops[idx];
            p->started = true;
            next[p->group]++;
            if (harness_expect_status(h, op_start(h, round, gp, p), TDL_OK, kind_names[p->kind]))
                started[nstarted++] = idx;
            else
                p->req = NULL;
        }
        /* and its wait order: any permutation, a quarter of them polled with test */
        harness_shuffle(&mine, started, nstarted);
        for (int i = 0; i < nstarted; i++) {
            ops[started[i]].by_test = tdl_rng_below(&mine, 4) == 0;
            by_test += ops[started[i]].by_test;
        }
        nops_total += nstarted;
        wait_in_order(h, round, gp, ops, started, nstarted);
        ops_release(ops, nops);
        if (any_failed(h))
            break;
        done++;
    }
    int64_t total = nops_total, tested = by_test;
    mref_world_allreduce_i64(&total, MREF_OP_SUM);
    mref_world_allreduce_i64(&tested, MREF_OP_SUM);
    harness_diag(h, "%" PRId64 " collective starts over all ranks, %" PRId64 " polled by test",
                 total, tested);
    harness_point(h,
                  "%d of %d rounds of collectives on random overlapping groups, started and "
                  "waited one by one in each rank's own orders: all complete, results exact",
                  done, rounds);
    free(perm);
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 0) != TDL_OK)
        return 1;
    const char *env = getenv("TIDAL_GFC_PROGRESS_ROUNDS");
    int rounds = env && *env ? atoi(env) : 40;
    if (h.size < 2 || h.size > 64) {
        harness_diag(&h, "needs 2 to 64 ranks");
        harness_point(&h, "world of %d ranks", h.size);
        return harness_finish(&h);
    }
    test_reported_case(&h);
    if (h.failed_points == 0)
        test_random_rounds(&h, rounds);
    return harness_finish(&h);
}
