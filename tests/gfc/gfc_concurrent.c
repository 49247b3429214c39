/* Collectives in flight at the same time on overlapping groups and namespaces, and churn.
 *
 * (a) Every rank starts several collectives (the _start functions) on overlapping groups and
 *     namespaces, several per group at once, in an order of its own: only the order within one
 *     (group, ns) is the same on every member. Then it waits for all of them and checks each
 *     result against hand-computed values. Inputs are small integers that depend on the group,
 *     the round, the operation and the sender, so a message matched by the wrong collective
 *     shows, and float sums are exact in any order.
 * (b) The same ranks array in two group values that differ only in the namespace, running the
 *     same operations with the same sizes and the same point-to-point tag at once, started in
 *     opposite orders on alternate ranks.
 * (c) Churn: 10,000 distinct groups formed and used once each (a barrier or a small
 *     all-reduce); afterwards no request is live, at most world - 1 endpoints exist, and the
 *     resident set did not grow by more than 2 MiB between group 1,000 and the end. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "mpi/baseline.h"

enum {
    ROUNDS = 40,
    OPS_PER_CONV = 3,
    AR_I64_COUNT = 17,
    AR_F32_COUNT = 1000,
    AG_COUNT = 33,
    BC_COUNT = 100,
    A2A_COUNT = 5,
    RS_COUNT = 3,
};

typedef enum {
    K_ALLREDUCE_I64,
    K_ALLREDUCE_F32,
    K_ALLGATHER,
    K_BCAST,
    K_ALLTOALL,
    K_REDUCE_SCATTER,
    K_BARRIER,
    K_COUNT
} kind_t;

static const char *const kind_names[] = {"allreduce i64", "allreduce f32",  "allgather", "bcast",
                                         "alltoall",      "reduce_scatter", "barrier"};

typedef struct conv {
    int *ranks;
    int n;
    uint64_t ns;
    bool member;
    gfc_group_t g;
    char str[200];
} conv_t;

typedef struct pending {
    int conv;
    int k; /* operation index within the conversation's round */
    kind_t kind;
    int root;
    gfc_allreduce_algo_t algo;
    void *send, *recv;
    gfc_request_t *req;
    bool started;
} pending_t;

/* Element i of what world rank w contributes to operation k of conversation c in round r. */
static int32_t val(uint64_t seed, int c, int r, int k, int w, size_t i)
{
    uint64_t x = harness_mix64(seed ^ harness_mix64(((uint64_t)c << 48) ^ ((uint64_t)r << 32) ^
                                    ((uint64_t)k << 24) ^ (uint64_t)w));
    x = harness_mix64(x ^ (uint64_t)i);
    return (int32_t)(x % 2001) - 1000;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        abort();
    return p;
}

static void add_conv(conv_t *cv, int *nconv, harness_t *h, const int *ranks, int n, uint64_t ns)
{
    conv_t *c = &cv[(*nconv)++];
    c->ranks = xcalloc((size_t)n, sizeof(int));
    memcpy(c->ranks, ranks, (size_t)n * sizeof(int));
    c->n = n;
    c->ns = ns;
    c->member = harness_index_of(ranks, n, h->rank) >= 0;
    snprintf(c->str, sizeof(c->str), "ns %" PRIu64 " ", ns);
    harness_ranks_str(ranks, n, c->str + strlen(c->str), sizeof(c->str) - strlen(c->str));
}

/* Starts one operation with inputs from val(). */
static tdl_status_t op_start(harness_t *h, conv_t *cv, pending_t *p, int round)
{
    conv_t *c = &cv[p->conv];
    int n = c->n, me = c->g.me, w = h->rank;
    gfc_group_t *g = &c->g;
    switch (p->kind) {
    case K_ALLREDUCE_I64: {
        int64_t *s = xcalloc(AR_I64_COUNT, 8);
        for (size_t i = 0; i < AR_I64_COUNT; i++)
            s[i] = val(h->seed, p->conv, round, p->k, w, i);
        p->send = s;
        p->recv = xcalloc(AR_I64_COUNT, 8);
        gfc_allreduce_opts_t o = {.algo = p->algo};
        return gfc_allreduce_start(g, s, p->recv, AR_I64_COUNT, GFC_DT_I64, GFC_OP_SUM, &o,
                                   &p->req);
    }
    case K_ALLREDUCE_F32: {
        float *s = xcalloc(AR_F32_COUNT, 4);
        for (size_t i = 0; i < AR_F32_COUNT; i++)
            s[i] = (float)val(h->seed, p->conv, round, p->k, w, i);
        p->send = s;
        p->recv = xcalloc(AR_F32_COUNT, 4);
        gfc_allreduce_opts_t o = {.algo = p->algo};
        return gfc_allreduce_start(g, s, p->recv, AR_F32_COUNT, GFC_DT_F32, GFC_OP_SUM, &o,
                                   &p->req);
    }
    case K_ALLGATHER: {
        uint8_t *s = xcalloc(AG_COUNT, 1);
        for (size_t i = 0; i < AG_COUNT; i++)
            s[i] = (uint8_t)val(h->seed, p->conv, round, p->k, w, i);
        p->send = s;
        p->recv = xcalloc((size_t)n * AG_COUNT, 1);
        return gfc_allgather_start(g, s, p->recv, AG_COUNT, GFC_DT_BYTE, &p->req);
    }
    case K_BCAST: {
        int32_t *b = xcalloc(BC_COUNT, 4);
        for (size_t i = 0; me == p->root && i < BC_COUNT; i++)
            b[i] = val(h->seed, p->conv, round, p->k, w, i);
        p->recv = b;
        return gfc_bcast_start(g, b, BC_COUNT, GFC_DT_I32, p->root, &p->req);
    }
    case K_ALLTOALL:
    case K_REDUCE_SCATTER: {
        size_t count = p->kind == K_ALLTOALL ? A2A_COUNT : RS_COUNT;
        int32_t *s = xcalloc((size_t)n * count, 4);
        for (size_t i = 0; i < (size_t)n * count; i++)
            s[i] = val(h->seed, p->conv, round, p->k, w, i);
        p->send = s;
        if (p->kind == K_ALLTOALL) {
            p->recv = xcalloc((size_t)n * count, 4);
            return gfc_alltoall_start(g, s, p->recv, count, GFC_DT_I32, &p->req);
        }
        p->recv = xcalloc(count, 4);
        return gfc_reduce_scatter_start(g, s, p->recv, count, GFC_DT_I32, GFC_OP_SUM, &p->req);
    }
    default: return gfc_barrier_start(g, &p->req);
    }
}

/* Checks a finished operation against hand-computed values; returns false on a mismatch. */
static bool op_check(harness_t *h, conv_t *cv, pending_t *p, int round)
{
    conv_t *c = &cv[p->conv];
    int n = c->n, me = c->g.me;
    uint64_t s = h->seed;
    size_t bad = SIZE_MAX;
    switch (p->kind) {
    case K_ALLREDUCE_I64:
        for (size_t i = 0; i < AR_I64_COUNT && bad == SIZE_MAX; i++) {
            int64_t want = 0;
            for (int m = 0; m < n; m++)
                want += val(s, p->conv, round, p->k, c->ranks[m], i);
            if (((int64_t *)p->recv)[i] != want)
                bad = i;
        }
        break;
    case K_ALLREDUCE_F32:
        for (size_t i = 0; i < AR_F32_COUNT && bad == SIZE_MAX; i++) {
            int64_t want = 0;
            for (int m = 0; m < n; m++)
                want += val(s, p->conv, round, p->k, c->ranks[m], i);
            if (((float *)p->recv)[i] != (float)want)
                bad = i;
        }
        break;
    case K_ALLGATHER:
        for (size_t i = 0; i < (size_t)n * AG_COUNT && bad == SIZE_MAX; i++)
            if (((uint8_t *)p->recv)[i] !=
                (uint8_t)val(s, p->conv, round, p->k, c->ranks[i / AG_COUNT], i % AG_COUNT))
                bad = i;
        break;
    case K_BCAST:
        for (size_t i = 0; i < BC_COUNT && bad == SIZE_MAX; i++)
            if (((int32_t *)p->recv)[i] != val(s, p->conv, round, p->k, c->ranks[p->root], i))
                bad = i;
        break;
    case K_ALLTOALL:
        for (size_t i = 0; i < (size_t)n * A2A_COUNT && bad == SIZE_MAX; i++) {
            size_t m = i / A2A_COUNT, j = (size_t)me * A2A_COUNT + i % A2A_COUNT;
            if (((int32_t *)p->recv)[i] != val(s, p->conv, round, p->k, c->ranks[m], j))
                bad = i;
        }
        break;
    case K_REDUCE_SCATTER:
        for (size_t i = 0; i < RS_COUNT && bad == SIZE_MAX; i++) {
            int32_t want = 0;
            for (int m = 0; m < n; m++)
                want += val(s, p->conv, round, p->k, c->ranks[m], (size_t)me * RS_COUNT + i);
            if (((int32_t *)p->recv)[i] != want)
                bad = i;
        }
        break;
    default: break;
    }
    if (bad != SIZE_MAX)
        harness_fail(h, "round %d, %s on %s (op %d, algo %s, root %d): element %zu is wrong", round,
                     kind_names[p->kind], c->str, p->k, gfc_allreduce_algo_name(p->algo), p->root,
                     bad);
    return bad == SIZE_MAX;
}

/* (a): overlapping groups and namespaces, started in an order of each rank's own. */
static void test_overlapping(harness_t *h)
{
    int W = h->size, nconv = 0;
    int *ranks = xcalloc((size_t)W, sizeof(int));
    conv_t cv[16];
    memset(cv, 0, sizeof(cv));
    tdl_rng_t rng;
    harness_rng(h, 2, &rng);

    for (int r = 0; r < W; r++)
        ranks[r] = r;
    add_conv(cv, &nconv, h, ranks, W, 1);
    add_conv(cv, &nconv, h, ranks, W, 2); /* same ranks, other namespace */
    for (int r = 0; r < W; r++)
        ranks[r] = W - 1 - r;
    add_conv(cv, &nconv, h, ranks, W, 1); /* same set, other order */
    int ne = 0, no = 0;
    for (int r = 0; r < W; r += 2)
        ranks[ne++] = r;
    add_conv(cv, &nconv, h, ranks, ne, 1);
    for (int r = 1; r < W; r += 2)
        ranks[no++] = r;
    if (no > 0)
        add_conv(cv, &nconv, h, ranks, no, 1);
    /* random groups get namespaces of their own: they may repeat a list above, and equal
     * (ranks, ns) would be one conversation */
    for (int k = 0; k < 4; k++) {
        int n = harness_random_group(&rng, W, 2, W, ranks);
        add_conv(cv, &nconv, h, ranks, n, 10 + (uint64_t)k);
        if (k == 0)
            add_conv(cv, &nconv, h, ranks, n, 20);
    }
    bool init_ok = true;
    for (int c = 0; c < nconv; c++)
        if (cv[c].member)
            init_ok &= harness_expect_status(
                h, gfc_group_init(&cv[c].g, h->rt, cv[c].ranks, cv[c].n, cv[c].ns), TDL_OK,
                "gfc_group_init");
    char desc[64];
    snprintf(desc, sizeof(desc), "%d overlapping groups formed", nconv);
    if (!harness_point(h, "%s", desc) || !init_ok)
        goto out;

    for (int round = 0; round < ROUNDS; round++) {
        pending_t *pend = xcalloc((size_t)nconv * OPS_PER_CONV, sizeof(pending_t));
        int np = 0;
        /* the plan: the same on every member */
        for (int c = 0; c < nconv; c++) {
            tdl_rng_t plan;
            harness_rng(h, 1000 + (uint64_t)round * 100 + (uint64_t)c, &plan);
            for (int k = 0; k < OPS_PER_CONV; k++) {
                pending_t p = {.conv = c, .k = k};
                p.kind = (kind_t)tdl_rng_below(&plan, K_COUNT);
                p.root = (int)tdl_rng_below(&plan, (uint64_t)cv[c].n);
                p.algo = (gfc_allreduce_algo_t)tdl_rng_below(&plan, GFC_ALLREDUCE_COUNT);
                if (cv[c].member)
                    pend[np++] = p;
            }
        }
        /* this rank's order: a random merge that keeps each conversation's own order */
        tdl_rng_t mine;
        harness_rng(h, 0x10000000ull + (uint64_t)h->rank * 1000 + (uint64_t)round, &mine);
        int *next = xcalloc((size_t)nconv, sizeof(int));
        gfc_request_t **reqs = xcalloc((size_t)np, sizeof(*reqs));
        pending_t **order = xcalloc((size_t)np, sizeof(*order));
        int started = 0;
        for (int left = np; left > 0; left--) {
            /* candidates: the ops that are next in their conversation */
            int cand = 0, idx = -1;
            for (int i = 0; i < np; i++)
                cand += !pend[i].started && pend[i].k == next[pend[i].conv];
            int pick = (int)tdl_rng_below(&mine, (uint64_t)cand);
            for (int i = 0; i < np && idx < 0; i++)
                if (!pend[i].started && pend[i].k == next[pend[i].conv] && pick-- == 0)
                    idx = i;
            pending_t *p = &pend[idx];
            p->started = true;
            next[p->conv]++;
            tdl_status_t st = op_start(h, cv, p, round);
            if (harness_expect_status(h, st, TDL_OK, kind_names[p->kind])) {
                reqs[started] = p->req;
                order[started++] = p;
            } else {
                p->req = NULL;
            }
        }
        tdl_status_t st = gfc_request_wait_all(reqs, (size_t)started);
        if (harness_expect_status(h, st, TDL_OK, "gfc_request_wait_all"))
            for (int i = 0; i < started; i++)
                op_check(h, cv, order[i], round);
        for (int i = 0; i < np; i++) {
            free(pend[i].send);
            free(pend[i].recv);
        }
        free(order);
        free(reqs);
        free(next);
        free(pend);
    }
    harness_point(h,
                  "%d rounds of %d collectives per group in flight on %d overlapping groups and "
                  "namespaces, each rank in its own order: every result as computed by hand",
                  ROUNDS, OPS_PER_CONV, nconv);
out:
    for (int c = 0; c < nconv; c++)
        free(cv[c].ranks);
    free(ranks);
}

/* (b): one ranks array, two namespaces, the same operations and tag, opposite orders. */
static void test_namespaces(harness_t *h)
{
    int W = h->size, me = h->rank;
    int *ranks = xcalloc((size_t)W, sizeof(int));
    tdl_rng_t rng;
    harness_rng(h, 3, &rng);
    int n = harness_random_group(&rng, W, 2, W, ranks);
    gfc_group_t g[2];
    int gme = harness_index_of(ranks, n, me);
    if (gme >= 0) {
        bool formed = true;
        for (int v = 0; v < 2; v++)
            formed &= harness_expect_status(h, gfc_group_init(&g[v], h->rt, ranks, n, 500 + v),
                                            TDL_OK, "gfc_group_init");
        for (int rep = 0; formed && rep < 5; rep++) {
            int first = (me + rep) % 2; /* who starts which namespace first alternates */
            int next = (gme + 1) % n, prev = (gme + n - 1) % n;
            int64_t ar_in[2][AR_I64_COUNT], ar_out[2][AR_I64_COUNT];
            int32_t p2p_out[2][64], p2p_in[2][64];
            uint8_t ag_in[2][AG_COUNT], *ag_out[2];
            gfc_request_t *reqs[8];
            int nr = 0;
            tdl_status_t st = TDL_OK;
            for (int v = 0; v < 2; v++) {
                for (size_t i = 0; i < AR_I64_COUNT; i++)
                    ar_in[v][i] = val(h->seed, 100 + v, rep, 0, me, i);
                for (size_t i = 0; i < 64; i++)
                    p2p_out[v][i] = val(h->seed, 100 + v, rep, 1, me, i);
                for (size_t i = 0; i < AG_COUNT; i++)
                    ag_in[v][i] = (uint8_t)val(h->seed, 100 + v, rep, 2, me, i);
                ag_out[v] = xcalloc((size_t)n, AG_COUNT);
                memset(p2p_in[v], 0, sizeof(p2p_in[v]));
            }
            /* per value: p2p first (both directions), then the collectives */
            for (int j = 0; j < 2 && st == TDL_OK; j++) {
                int v = j ^ first;
                gfc_allreduce_opts_t o = {.algo = GFC_ALLREDUCE_RING};
                st = gfc_recv_start(&g[v], prev, 5, p2p_in[v], sizeof(p2p_in[v]), &reqs[nr]);
                nr += st == TDL_OK;
                if (st == TDL_OK) {
                    st = gfc_send_start(&g[v], next, 5, p2p_out[v], sizeof(p2p_out[v]), &reqs[nr]);
                    nr += st == TDL_OK;
                }
                if (st == TDL_OK) {
                    st = gfc_allreduce_start(&g[v], ar_in[v], ar_out[v], AR_I64_COUNT, GFC_DT_I64,
                                             GFC_OP_SUM, &o, &reqs[nr]);
                    nr += st == TDL_OK;
                }
                if (st == TDL_OK) {
                    st = gfc_allgather_start(&g[v], ag_in[v], ag_out[v], AG_COUNT, GFC_DT_BYTE,
                                             &reqs[nr]);
                    nr += st == TDL_OK;
                }
            }
            harness_expect_status(h, st, TDL_OK, "starting operations on two namespaces");
            st = gfc_request_wait_all(reqs, (size_t)nr);
            if (harness_expect_status(h, st, TDL_OK, "gfc_request_wait_all")) {
                for (int v = 0; v < 2; v++) {
                    bool good = true;
                    for (size_t i = 0; i < AR_I64_COUNT; i++) {
                        int64_t want = 0;
                        for (int m = 0; m < n; m++)
                            want += val(h->seed, 100 + v, rep, 0, ranks[m], i);
                        good &= ar_out[v][i] == want;
                    }
                    for (size_t i = 0; i < 64; i++)
                        good &= p2p_in[v][i] == val(h->seed, 100 + v, rep, 1, ranks[prev], i);
                    for (size_t i = 0; i < (size_t)n * AG_COUNT; i++)
                        good &= ag_out[v][i] == (uint8_t)val(h->seed, 100 + v, rep, 2,
                                                             ranks[i / AG_COUNT], i % AG_COUNT);
                    harness_expect(h, good, "rep %d, ns %d: a result belongs to the other ns", rep,
                                   500 + v);
                }
            }
            free(ag_out[0]);
            free(ag_out[1]);
        }
    }
    char str[200];
    harness_ranks_str(ranks, n, str, sizeof(str));
    harness_point(h,
                  "one ranks array %s under ns 500 and 501 at once, opposite orders on "
                  "alternate ranks: allreduce, allgather and p2p with the same tag never "
                  "cross",
                  str);
    free(ranks);
}

static long rss_bytes(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* (c): many distinct groups, each used once. */
static void test_churn(harness_t *h, int groups)
{
    int W = h->size, me = h->rank;
    int *ranks = xcalloc((size_t)W, sizeof(int));
    gfc_stats_t before, after;
    gfc_runtime_stats(h->rt, &before);
    uint64_t started = 0;
    long rss_mark = -1, rss_end;
    int mark = groups / 10;
    double t0 = tdl_clock_s();
    for (int i = 0; i < groups; i++) {
        if (i == mark)
            rss_mark = rss_bytes();
        tdl_rng_t rng;
        harness_rng(h, 0x20000000ull + (uint64_t)i, &rng);
        int n = harness_random_group(&rng, W, 2, W, ranks);
        int gme = harness_index_of(ranks, n, me);
        if (gme < 0)
            continue;
        gfc_group_t g;
        tdl_status_t st = gfc_group_init(&g, h->rt, ranks, n, (uint64_t)i);
        if (!harness_expect_status(h, st, TDL_OK, "gfc_group_init"))
            break;
        started++;
        if (i % 2 == 0) {
            st = gfc_barrier(&g);
        } else {
            int32_t in[4], out[4], want[4] = {0, 0, 0, 0};
            for (int j = 0; j < 4; j++) {
                in[j] = val(h->seed, 7, i, 0, me, (size_t)j);
                for (int m = 0; m < n; m++)
                    want[j] += val(h->seed, 7, i, 0, ranks[m], (size_t)j);
            }
            st = gfc_allreduce(&g, in, out, 4, GFC_DT_I32, GFC_OP_SUM, NULL);
            if (st == TDL_OK && memcmp(out, want, sizeof(out)) != 0) {
                harness_fail(h, "group %d: allreduce result is wrong", i);
                break;
            }
        }
        if (!harness_expect_status(h, st, TDL_OK, i % 2 ? "churn allreduce" : "churn barrier")) {
            harness_fail(h, "at group %d of %d", i, groups);
            break;
        }
    }
    double dt = tdl_clock_s() - t0;
    rss_end = rss_bytes();
    mref_world_barrier(); /* every rank done; the wait loop progressed gfc meanwhile */
    gfc_runtime_progress(h->rt);
    gfc_runtime_stats(h->rt, &after);
    harness_expect(h, after.endpoints <= (size_t)W - 1, "%zu endpoints for %d ranks",
                   after.endpoints, W);
    harness_expect(h, after.requests_live == 0 && after.ucx_requests_live == 0,
                   "%zu gfc and %zu UCX requests live after the churn", after.requests_live,
                   after.ucx_requests_live);
    harness_expect(h, after.collectives - before.collectives == started,
                   "stats count %" PRIu64 " collectives, this rank started %" PRIu64,
                   after.collectives - before.collectives, started);
    harness_expect(h, rss_mark > 0 && rss_end > 0 && rss_end - rss_mark <= 2l << 20,
                   "resident set grew by %ld KiB between group %d and group %d",
                   (rss_end - rss_mark) >> 10, mark, groups);
    int64_t grow = (rss_end - rss_mark) >> 10, slowest = (int64_t)(dt * 1000);
    mref_world_allreduce_i64(&grow, MREF_OP_MAX);
    mref_world_allreduce_i64(&slowest, MREF_OP_MAX);
    harness_diag(
        h, "churn: %d groups in %.1f s on the slowest rank; largest RSS growth %" PRId64 " KiB",
        groups, (double)slowest / 1000, grow);
    harness_point(h,
                  "churn: %d distinct groups used once each; endpoints <= world - 1, no request "
                  "live, RSS grew <= 2 MiB after group %d",
                  groups, mark);
    free(ranks);
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 0) != TDL_OK)
        return 1;
    const char *env = getenv("TIDAL_GFC_CHURN");
    int churn = env && *env ? atoi(env) : 10000;
    test_overlapping(&h);
    test_namespaces(&h);
    test_churn(&h, churn);
    return harness_finish(&h);
}
