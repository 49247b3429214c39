/* Peers that fail: the others get an error in bounded time, never a hang.
 *
 *   gfc_failure silent  A member that never joins (the last rank sleeps past the timeout and
 *                       only then takes part in the world's verdict): the others' all-to-all
 *                       ends in TDL_ERR_TIMEOUT no earlier than timeout_ms and within
 *                       timeout_ms + 10 s, and the message names the collective and the silent
 *                       rank (every member waits for the silent rank's own block). A barrier
 *                       fails the same way on every member. Afterwards the others still run an
 *                       all-reduce among themselves and no request is left live. TAP output.
 *   gfc_failure kill    The last rank kills itself (SIGKILL) in the middle of a sequence of
 *                       all-reduces. Each survivor must see TDL_ERR_PEER or TDL_ERR_TIMEOUT at
 *                       or after the victim's iteration, within timeout_ms + 10 s, then run an
 *                       all-reduce among the survivors, destroy its runtime, print one
 *                       "SURVIVOR rank=... verdict=PASS|FAIL ..." line and _exit(0) without
 *                       touching MPI again. Needs `mpirun --enable-recovery`, which keeps
 *                       Open MPI from killing the job when a process dies.
 *   gfc_failure stop    The last rank stops itself (SIGSTOP) in the middle of an all-reduce,
 *                       with a collective timeout far above gfc-dead-after-ms: each survivor
 *                       must get TDL_ERR_PEER naming it and its silence within the bound plus
 *                       a margin (in that all-reduce or, where the victim's data was out, the
 *                       next), hold it as the only dead rank, and run an all-reduce among
 *                       the survivors. Rank 0 then lets the victim go on (SIGCONT): it must find
 *                       itself fenced (declared dead by another rank), its all-reduce failing.
 *                       Lines "SURVIVOR ..." and "FENCED rank=... verdict=PASS|FAIL ...".
 *   gfc_failure throttled  Under tools/cluster: the last rank starves its own device (its
 *                       cgroup's quota down to 1 ms a second) and computes for 4 s of wall time
 *                       while the others wait in an all-reduce: a slow device is not a dead
 *                       rank, so no rank may be declared dead (its keep-alive thread runs
 *                       outside the device, gfc-keepalive-cgroup) and the all-reduce completes.
 *                       Checks too that the keep-alive thread ("gfc-keepalive") is in that
 *                       cgroup and the main thread in the device's. TAP output.
 *   gfc_failure refused Every rank but the last holds the last rank's endpoint failed (as UCX's
 *                       error callback leaves it, before the keep-alive declares the rank dead):
 *                       every collective and point-to-point start on a group of this rank and
 *                       the last, each of which posts to it at once, fails with TDL_ERR_PEER
 *                       naming the collective ("gfc NAME (group of 2, ...)") and the rank, as a
 *                       failure in flight does; with TIDAL_GFC_FAILURE_ALGO, an all-reduce by it
 *                       over the world too (where its start fails). Then the endpoint is given
 *                       back and the world runs an all-reduce, with no request left live. A kill
 *                       met in that window once gave "rank 3 has failed (Endpoint timeout)",
 *                       naming no collective (test_gfc_hier.sh in CI). TAP output.
 * TIDAL_GFC_FAILURE_ALGO=hier (or another algorithm) runs every all-reduce of kill, stop and
 * refused by it
 * (tests/gfc/test_gfc_hier.sh, on the hosts of TIDAL_GFC_HOSTS or an emulated cluster). */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gfc/gfc_internal.h"
#include "harness.h"
#include "mpi/baseline.h"

enum { KILL_AT = 5, KILL_ITERATIONS = 20, AR_COUNT = 1000 };

/* TIDAL_GFC_FAILURE_ALGO (ring, butterfly, hier ...): every all-reduce of kill and stop by that
 * algorithm instead of the modes' own mix; AUTO when unset. */
static gfc_allreduce_algo_t forced_algo(void)
{
    const char *env = getenv("TIDAL_GFC_FAILURE_ALGO");
    gfc_allreduce_algo_t a = GFC_ALLREDUCE_AUTO;
    if (env && *env && gfc_allreduce_algo_parse(env, &a) != TDL_OK) {
        fprintf(stderr, "TIDAL_GFC_FAILURE_ALGO: %s\n", tdl_error_get());
        exit(2);
    }
    return a;
}

/* Whether `text` holds the number `n` as a whole token (not inside a longer number). */
static bool names_number(const char *text, int n)
{
    char want[16];
    size_t len = (size_t)snprintf(want, sizeof(want), "%d", n);
    for (const char *p = strstr(text, want); p; p = strstr(p + 1, want)) {
        bool before = p == text || !isdigit((unsigned char)p[-1]);
        bool after = !isdigit((unsigned char)p[len]);
        if (before && after)
            return true;
    }
    return false;
}

static bool names_word(const char *text, const char *const *words)
{
    char lower[1024];
    size_t i = 0;
    for (; text[i] && i + 1 < sizeof(lower); i++)
        lower[i] = (char)tolower((unsigned char)text[i]);
    lower[i] = '\0';
    for (; *words; words++)
        if (strstr(lower, *words))
            return true;
    return false;
}

/* Polls a request with a deadline of our own (gfc_request_test applies no timeout). */
static tdl_status_t poll_until(gfc_request_t *req, double seconds)
{
    double deadline = tdl_clock_s() + seconds;
    bool done = false;
    tdl_status_t st = TDL_OK;
    while (!done && st == TDL_OK && tdl_clock_s() < deadline)
        st = gfc_request_test(req, &done);
    if (st == TDL_OK && !done) {
        gfc_request_free(req);
        return tdl_error_raise(TDL_ERR_TIMEOUT, "test deadline of %.0f s passed", seconds);
    }
    if (done)
        gfc_request_free(req);
    return st;
}

/* An all-reduce of (rank + 1) over ranks[0..n) with our own deadline; true when right. */
static bool survivors_allreduce(harness_t *h, int *ranks, int n, uint64_t ns, char *why,
                                size_t why_size)
{
    gfc_group_t g;
    tdl_status_t st = gfc_group_init(&g, h->rt, ranks, n, ns);
    if (st != TDL_OK) {
        snprintf(why, why_size, "group_init: %s", tdl_error_get());
        return false;
    }
    int64_t in = h->rank + 1, out = -1, want = 0;
    for (int i = 0; i < n; i++)
        want += ranks[i] + 1;
    gfc_request_t *req = NULL;
    st = gfc_allreduce_start(&g, &in, &out, 1, GFC_DT_I64, GFC_OP_SUM, NULL, &req);
    if (st == TDL_OK)
        st = poll_until(req, 3.0 * (double)h->config.timeout_ms / 1000.0 + 10.0);
    if (st != TDL_OK) {
        snprintf(why, why_size, "%s: %s", tdl_status_str(st), tdl_error_get());
        return false;
    }
    if (out != want) {
        snprintf(why, why_size, "sum %" PRId64 ", want %" PRId64, out, want);
        return false;
    }
    return true;
}

/* The world's group in namespace 1 (world[r] = r), all-reduced once so that endpoints exist
 * and the group works; the failures are the harness's. */
static void world_warm(harness_t *h, int *world, gfc_group_t *g)
{
    int W = h->size;
    for (int r = 0; r < W; r++)
        world[r] = r;
    int64_t one = 1, total = 0;
    tdl_status_t st = gfc_group_init(g, h->rt, world, W, 1);
    if (st == TDL_OK)
        st = gfc_allreduce(g, &one, &total, 1, GFC_DT_I64, GFC_OP_SUM, NULL);
    harness_expect_status(h, st, TDL_OK, "warm-up allreduce");
    harness_expect(h, total == W, "warm-up sum %" PRId64 ", want %d", total, W);
}

static int run_silent(harness_t *h)
{
    int W = h->size, s = W - 1, me = h->rank;
    double timeout = (double)h->config.timeout_ms / 1000.0;
    int *world = calloc((size_t)W, sizeof(int));
    gfc_group_t warm;
    world_warm(h, world, &warm);
    harness_point(h, "warm-up allreduce over the world");
    tdl_status_t st;

    gfc_group_t g2, g3;
    gfc_group_init(&g2, h->rt, world, W, 2);
    gfc_group_init(&g3, h->rt, world, W, 3);
    if (me == s) {
        /* silent through both collectives below, then on to the verdict */
        usleep((useconds_t)((2 * timeout + 3.0) * 1e6));
    } else {
        int32_t *send = calloc(4 * (size_t)W, 4), *recv = calloc(4 * (size_t)W, 4);
        for (int i = 0; i < 4 * W; i++)
            send[i] = me * 1000 + i;
        double t0 = tdl_clock_s();
        st = gfc_alltoall(&g2, send, recv, 4, GFC_DT_I32);
        double dt = tdl_clock_s() - t0;
        free(send);
        free(recv);
        const char *msg = tdl_error_get();
        static const char *const a2a[] = {"alltoall", "all-to-all", "all_to_all", NULL};
        if (harness_expect_status(h, st, TDL_ERR_TIMEOUT, "alltoall with a silent member")) {
            harness_expect(h, names_number(msg, s), "message does not name silent rank %d: '%s'", s,
                           msg);
            harness_expect(h, names_word(msg, a2a), "message does not name the collective: '%s'",
                           msg);
        }
        harness_expect(h, dt >= 0.9 * timeout && dt <= timeout + 10.0,
                       "alltoall gave up after %.2f s with a timeout of %.2f s", dt, timeout);
        if (me == 0)
            printf("# rank 0: alltoall: %s after %.2f s: %s\n", tdl_status_str(st), dt, msg);

        t0 = tdl_clock_s();
        st = gfc_barrier(&g3);
        dt = tdl_clock_s() - t0;
        harness_expect_status(h, st, TDL_ERR_TIMEOUT, "barrier with a silent member");
        harness_expect(h, tdl_error_get()[0] != '\0', "barrier timeout without a message");
        harness_expect(h, dt >= 0.9 * timeout && dt <= timeout + 10.0,
                       "barrier gave up after %.2f s with a timeout of %.2f s", dt, timeout);
        if (me == 0)
            printf("# rank 0: barrier: %s after %.2f s: %s\n", tdl_status_str(st), dt,
                   tdl_error_get());
    }
    harness_point(h,
                  "a member that never joins: the others' alltoall and barrier end in "
                  "TDL_ERR_TIMEOUT after timeout_ms (+10 s at most), naming the collective and "
                  "rank %d",
                  s);

    if (me != s) {
        char why[256];
        harness_expect(h, survivors_allreduce(h, world, W - 1, 4, why, sizeof(why)),
                       "allreduce among the others after the timeout: %s", why);
        gfc_stats_t stats;
        for (int i = 0; i < 100; i++)
            gfc_runtime_progress(h->rt);
        gfc_runtime_stats(h->rt, &stats);
        harness_expect(h, stats.requests_live == 0 && stats.ucx_requests_live == 0,
                       "%zu gfc and %zu UCX requests live after the timeouts", stats.requests_live,
                       stats.ucx_requests_live);
    }
    harness_point(h, "after the timeouts the others still run an allreduce among themselves; "
                     "no request is left live");
    free(world);
    return harness_finish(h);
}

static int run_kill(harness_t *h)
{
    int W = h->size, victim = W - 1, me = h->rank;
    double timeout = (double)h->config.timeout_ms / 1000.0;
    int *world = calloc((size_t)W, sizeof(int));
    for (int r = 0; r < W; r++)
        world[r] = r;
    gfc_group_t g;
    tdl_status_t st = gfc_group_init(&g, h->rt, world, W, 1);
    float *in = calloc(AR_COUNT, sizeof(float)), *out = calloc(AR_COUNT, sizeof(float));
    for (int i = 0; i < AR_COUNT; i++)
        in[i] = (float)(me + 1);
    int failed_at = -1;
    double dt = 0;
    char msg[512] = "";
    const char *verdict = "PASS";
    char why[300] = "";
    static const gfc_allreduce_algo_t algos[] = {GFC_ALLREDUCE_RING, GFC_ALLREDUCE_BUTTERFLY,
                                                 GFC_ALLREDUCE_RECURSIVE_DOUBLING};
    for (int it = 0; st == TDL_OK && it < KILL_ITERATIONS; it++) {
        gfc_allreduce_opts_t opts = {.algo = forced_algo() ? forced_algo() : algos[it % 3]};
        if (me == victim && it == KILL_AT) {
            /* in the middle of it: started, a little progress, then gone */
            gfc_request_t *req;
            if (gfc_allreduce_start(&g, in, out, AR_COUNT, GFC_DT_F32, GFC_OP_SUM, &opts, &req) ==
                TDL_OK)
                for (int i = 0; i < 3; i++)
                    gfc_runtime_progress(h->rt);
            fflush(stdout);
            raise(SIGKILL);
        }
        double t0 = tdl_clock_s();
        st = gfc_allreduce(&g, in, out, AR_COUNT, GFC_DT_F32, GFC_OP_SUM, &opts);
        dt = tdl_clock_s() - t0;
        if (st != TDL_OK) {
            failed_at = it;
            snprintf(msg, sizeof(msg), "%s", tdl_error_get());
        } else if (out[AR_COUNT - 1] != (float)(W * (W + 1) / 2)) {
            snprintf(why, sizeof(why), "iteration %d: sum %g, want %d", it, out[AR_COUNT - 1],
                     W * (W + 1) / 2);
            verdict = "FAIL";
        }
    }
    if (failed_at < 0) {
        snprintf(why, sizeof(why), "no error in %d iterations", KILL_ITERATIONS);
        verdict = "FAIL";
    } else if (failed_at < KILL_AT) {
        snprintf(why, sizeof(why), "error before the victim died");
        verdict = "FAIL";
    } else if (st != TDL_ERR_PEER && st != TDL_ERR_TIMEOUT) {
        snprintf(why, sizeof(why), "status %s, want peer or timeout", tdl_status_str(st));
        verdict = "FAIL";
    } else if (dt > timeout + 10.0) {
        snprintf(why, sizeof(why), "the error took %.2f s", dt);
        verdict = "FAIL";
    }
    char after[256] = "ok";
    bool survivors_ok = survivors_allreduce(h, world, W - 1, 2, after, sizeof(after));
    if (!survivors_ok)
        verdict = "FAIL";
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    printf("SURVIVOR rank=%d verdict=%s iteration=%d status=%s elapsed=%.2f "
           "survivors_allreduce=%s%s%s msg=%s\n",
           me, verdict, failed_at, tdl_status_str(st), dt, survivors_ok ? "ok" : after,
           why[0] ? " why=" : "", why, msg);
    fflush(stdout);
    gfc_runtime_destroy(h->rt);
    printf("DESTROYED rank=%d\n", me);
    fflush(stdout);
    _exit(0); /* MPI is not safe to touch with a dead peer */
}

static int run_stop(harness_t *h)
{
    int W = h->size, victim = W - 1, me = h->rank;
    double bound = (double)h->config.dead_after_ms / 1000.0;
    int *world = calloc((size_t)W, sizeof(int));
    int32_t *pids = calloc((size_t)W, sizeof(int32_t)), mypid = (int32_t)getpid();
    for (int r = 0; r < W; r++)
        world[r] = r;
    gfc_group_t g;
    tdl_status_t st = gfc_group_init(&g, h->rt, world, W, 1);
    if (st == TDL_OK)
        st = gfc_allgather(&g, &mypid, pids, 1, GFC_DT_I32);
    float *in = calloc(AR_COUNT, sizeof(float)), *out = calloc(AR_COUNT, sizeof(float));
    for (int i = 0; i < AR_COUNT; i++)
        in[i] = (float)(me + 1);
    int failed_at = -1;
    double dt = 0;
    char msg[512] = "", why[300] = "";
    const char *verdict = "PASS";
    for (int it = 0; st == TDL_OK && it < KILL_ITERATIONS; it++) {
        gfc_allreduce_opts_t opts = {.algo = forced_algo() ? forced_algo()
                                     : it % 2            ? GFC_ALLREDUCE_BUTTERFLY
                                                         : GFC_ALLREDUCE_RING};
        if (me == victim && it == KILL_AT) {
            gfc_request_t *req;
            st = gfc_allreduce_start(&g, in, out, AR_COUNT, GFC_DT_F32, GFC_OP_SUM, &opts, &req);
            for (int i = 0; st == TDL_OK && i < 3; i++)
                gfc_runtime_progress(h->rt);
            fflush(stdout);
            raise(SIGSTOP);
            /* let go by rank 0 once the others are done with this rank: its all-reduce may
             * have all it needs already, but its next keep-alive gets it told it is dead */
            double t0 = tdl_clock_s();
            if (st == TDL_OK)
                (void)gfc_request_wait(req);
            while (gfc_runtime_fenced_by(h->rt) < 0 && tdl_clock_s() < t0 + bound + 3.0)
                gfc_runtime_progress(h->rt), usleep(1000);
            dt = tdl_clock_s() - t0;
            int by = gfc_runtime_fenced_by(h->rt);
            st = gfc_allreduce(&g, in, out, AR_COUNT, GFC_DT_F32, GFC_OP_SUM, &opts);
            snprintf(msg, sizeof(msg), "%s", st == TDL_OK ? "" : tdl_error_get());
            if (by < 0)
                snprintf(why, sizeof(why), "not fenced"), verdict = "FAIL";
            else if (st != TDL_ERR_PEER || !strstr(msg, "declared dead"))
                snprintf(why, sizeof(why), "its next all-reduce: %s", tdl_status_str(st)),
                    verdict = "FAIL";
            printf("FENCED rank=%d verdict=%s by=%d status=%s elapsed=%.2f%s%s msg=%s\n", me,
                   verdict, by, tdl_status_str(st), dt, why[0] ? " why=" : "", why, msg);
            fflush(stdout);
            gfc_runtime_destroy(h->rt);
            _exit(0);
        }
        double t0 = tdl_clock_s();
        st = gfc_allreduce(&g, in, out, AR_COUNT, GFC_DT_F32, GFC_OP_SUM, &opts);
        dt = tdl_clock_s() - t0;
        if (st != TDL_OK) {
            failed_at = it;
            snprintf(msg, sizeof(msg), "%s", tdl_error_get());
        }
    }
    int dead[4], ndead = gfc_dead_ranks(h->rt, dead, 4);
    /* the victim's last all-reduce may have given some members all they need before it
     * stopped: those complete it and fail on the next one */
    if (failed_at != KILL_AT && failed_at != KILL_AT + 1)
        snprintf(why, sizeof(why), "failed at iteration %d, want %d or %d", failed_at, KILL_AT,
                 KILL_AT + 1);
    else if (st != TDL_ERR_PEER)
        snprintf(why, sizeof(why), "status %s, want peer", tdl_status_str(st));
    else if (!names_number(msg, victim) || !strstr(msg, "no keep-alive"))
        snprintf(why, sizeof(why), "the error does not name rank %d and its silence", victim);
    else if (dt < 0.5 * bound || dt > bound + 3.0)
        snprintf(why, sizeof(why), "declared after %.2f s, the bound is %.1f s", dt, bound);
    else if (ndead != 1 || dead[0] != victim)
        snprintf(why, sizeof(why), "%d dead ranks, want only %d", ndead, victim);
    if (why[0])
        verdict = "FAIL";
    char after[256] = "ok";
    if (!survivors_allreduce(h, world, W - 1, 2, after, sizeof(after)))
        verdict = "FAIL";
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    printf("SURVIVOR rank=%d verdict=%s iteration=%d status=%s elapsed=%.2f "
           "survivors_allreduce=%s%s%s msg=%s\n",
           me, verdict, failed_at, tdl_status_str(st), dt, after, why[0] ? " why=" : "", why,
           msg);
    fflush(stdout);
    /* the survivors are done with the victim: let it go on, and stay long enough (keep-alive
     * threads running) for it to be told it is dead */
    if (me == 0 && pids[victim] > 0)
        kill((pid_t)pids[victim], SIGCONT);
    usleep((useconds_t)((bound + 2.0) * 1e6));
    gfc_runtime_destroy(h->rt);
    printf("DESTROYED rank=%d\n", me);
    fflush(stdout);
    _exit(0);
}

/* Whether msg names collective `name` the way a request's error does, and the rank. */
static bool names_request(const char *msg, const char *name, int group_size, int rank)
{
    char want[96];
    snprintf(want, sizeof(want), "gfc %s", name);
    char size[32];
    snprintf(size, sizeof(size), "(group of %d,", group_size);
    return strncmp(msg, want, strlen(want)) == 0 && strstr(msg, size) && names_number(msg, rank);
}

enum { REFUSED_COUNT = 64 };

/* One start of collective `which` on the 2-member group g (this rank first, the victim second),
 * every one of which posts to the victim at once; its name in *name. */
static tdl_status_t refused_start(gfc_group_t *g, int which, float *in, float *out,
                                  const char **name, gfc_request_t **req)
{
    static const gfc_allreduce_algo_t algos[] = {GFC_ALLREDUCE_RING, GFC_ALLREDUCE_BUTTERFLY,
                                                 GFC_ALLREDUCE_RECURSIVE_DOUBLING};
    switch (which) {
    case 0:
    case 1:
    case 2: {
        gfc_allreduce_opts_t o = {.algo = algos[which]};
        *name = "allreduce";
        return gfc_allreduce_start(g, in, out, REFUSED_COUNT, GFC_DT_F32, GFC_OP_SUM, &o, req);
    }
    case 3:
        *name = "barrier";
        return gfc_barrier_start(g, req);
    case 4:
        *name = "bcast";
        return gfc_bcast_start(g, in, REFUSED_COUNT, GFC_DT_F32, 0, req);
    case 5:
        *name = "gather";
        return gfc_gather_start(g, in, out, REFUSED_COUNT / 2, GFC_DT_F32, 1, req);
    case 6:
        *name = "allgather";
        return gfc_allgather_start(g, in, out, REFUSED_COUNT / 2, GFC_DT_F32, req);
    case 7:
        *name = "alltoall";
        return gfc_alltoall_start(g, in, out, REFUSED_COUNT / 2, GFC_DT_F32, req);
    case 8:
        *name = "reduce_scatter";
        return gfc_reduce_scatter_start(g, in, out, REFUSED_COUNT / 2, GFC_DT_F32, GFC_OP_SUM,
                                        req);
    default:
        *name = "send";
        return gfc_send_start(g, 1, 7, in, REFUSED_COUNT * sizeof(float), req);
    }
}

static int run_refused(harness_t *h)
{
    int W = h->size, victim = W - 1, me = h->rank;
    enum { KINDS = 10 };
    int *world = calloc((size_t)W, sizeof(int));
    for (int r = 0; r < W; r++)
        world[r] = r;
    float in[REFUSED_COUNT], out[2 * REFUSED_COUNT];
    for (int i = 0; i < REFUSED_COUNT; i++)
        in[i] = (float)(me + 1);
    if (me != victim) {
        h->rt->peer_status[victim] = UCS_ERR_ENDPOINT_TIMEOUT;
        int pair[2] = {me, victim};
        for (int k = 0; k < KINDS; k++) {
            gfc_group_t g;
            const char *name = "";
            gfc_request_t *req = NULL;
            tdl_status_t st = gfc_group_init(&g, h->rt, pair, 2, 100 + (uint64_t)k);
            if (st == TDL_OK)
                st = refused_start(&g, k, in, out, &name, &req);
            if (st == TDL_OK) {
                gfc_request_free(req);
                harness_expect(h, false, "%s (kind %d) started with rank %d's endpoint failed",
                               name, k, victim);
                continue;
            }
            const char *msg = tdl_error_get();
            if (harness_expect_status(h, st, TDL_ERR_PEER, name))
                harness_expect(h, names_request(msg, name, 2, victim),
                               "%s's error names neither the collective nor rank %d: '%s'", name,
                               victim, msg);
            if (me == 0 && k == 0)
                printf("# rank 0: %s\n", msg);
        }
        gfc_allreduce_algo_t algo = forced_algo();
        if (algo != GFC_ALLREDUCE_AUTO) {
            /* over the world: only the members whose start posts to the victim fail at once */
            gfc_group_t g;
            gfc_request_t *req = NULL;
            gfc_allreduce_opts_t o = {.algo = algo};
            char name[64];
            snprintf(name, sizeof(name), "allreduce/%s", gfc_allreduce_algo_name(algo));
            tdl_status_t st = gfc_group_init(&g, h->rt, world, W, 200);
            if (st == TDL_OK)
                st = gfc_allreduce_start(&g, in, out, REFUSED_COUNT, GFC_DT_F32, GFC_OP_SUM, &o,
                                         &req);
            if (st == TDL_OK)
                gfc_request_free(req);
            else if (harness_expect_status(h, st, TDL_ERR_PEER, name))
                harness_expect(h, names_request(tdl_error_get(), name, W, victim),
                               "%s's error names neither it nor rank %d: '%s'", name, victim,
                               tdl_error_get());
            if (st != TDL_OK)
                printf("# rank %d: %s over the world: %s\n", me, name, tdl_error_get());
        }
        h->rt->peer_status[victim] = UCS_OK;
    }
    /* the world again: the failed starts left nothing behind that a later collective meets */
    gfc_group_t g;
    int64_t one = me + 1, sum = -1;
    tdl_status_t st = gfc_group_init(&g, h->rt, world, W, 300);
    if (st == TDL_OK)
        st = gfc_allreduce(&g, &one, &sum, 1, GFC_DT_I64, GFC_OP_SUM, NULL);
    harness_expect_status(h, st, TDL_OK, "world allreduce afterwards");
    harness_expect(h, st != TDL_OK || sum == (int64_t)W * (W + 1) / 2,
                   "world sum %" PRId64 ", want %d", sum, W * (W + 1) / 2);
    gfc_stats_t stats;
    gfc_runtime_stats(h->rt, &stats);
    harness_expect(h, stats.requests_live == 0, "%zu gfc requests live after the failed starts",
                   stats.requests_live);
    harness_point(h,
                  "with rank %d's endpoint failed, every start that posts to it fails with "
                  "TDL_ERR_PEER naming the collective and the rank; the world then all-reduces, "
                  "no request left live",
                  victim);
    free(world);
    return harness_finish(h);
}

/* The cgroup (v1 cpu) of thread tid of this process: its path under /sys/fs/cgroup/cpu. */
static bool cpu_cgroup_of(long tid, char *out, size_t len)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/self/task/%ld/cgroup", tid);
    FILE *f = fopen(path, "r");
    bool found = false;
    while (f && !found && fgets(line, sizeof(line), f)) {
        char *ctl = strchr(line, ':'), *cg = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!cg)
            continue;
        *cg++ = '\0';
        ctl++;
        /* "cpu" alone or in a list ("cpu,cpuacct"), not "cpuset" or "cpuacct" */
        for (char *t = strtok(ctl, ","); t && !found; t = strtok(NULL, ","))
            found = strcmp(t, "cpu") == 0;
        if (found)
            snprintf(out, len, "%.*s", (int)strcspn(cg, "\n"), cg);
    }
    if (f)
        fclose(f);
    return found;
}

/* The thread of this process named name, or -1. */
static long thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    long tid = -1;
    while (d && tid < 0 && (e = readdir(d))) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof(comm), f) && strncmp(comm, name, strlen(name)) == 0)
            tid = strtol(e->d_name, NULL, 10);
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return tid;
}

static bool write_value(const char *dir, const char *file, long long v)
{
    char path[600];
    snprintf(path, sizeof(path), "/sys/fs/cgroup/cpu%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    bool ok = f && fprintf(f, "%lld\n", v) > 0;
    return f && fclose(f) == 0 && ok;
}

static long long read_value(const char *dir, const char *file)
{
    char path[600];
    long long v = -2;
    snprintf(path, sizeof(path), "/sys/fs/cgroup/cpu%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (f && fscanf(f, "%lld", &v) != 1)
        v = -2;
    if (f)
        fclose(f);
    return v;
}

static int run_throttled(harness_t *h)
{
    int W = h->size, me = h->rank, victim = W - 1;
    int *world = calloc((size_t)W, sizeof(int));
    gfc_group_t g;
    world_warm(h, world, &g);

    /* where the threads are: the main one in its device, the keep-alive one beside it */
    char main_cg[256] = "", live_cg[256] = "";
    long live = thread_named("gfc-keepalive");
    bool have = cpu_cgroup_of((long)syscall(SYS_gettid), main_cg, sizeof(main_cg)) && live > 0 &&
                cpu_cgroup_of(live, live_cg, sizeof(live_cg));
    /* gfc-keepalive-cgroup is a folder, the thread's cgroup a path under the controller's */
    const char *want = h->config.keepalive_cgroup;
    char live_dir[300];
    snprintf(live_dir, sizeof(live_dir), "/sys/fs/cgroup/cpu%s", live_cg);
    harness_expect(h, have, "rank %d: no gfc-keepalive thread, or no cpu cgroup", me);
    harness_expect(h, read_value(main_cg, "cpu.cfs_quota_us") > 0,
                   "rank %d: the main thread's cgroup %s has no quota (not a device)", me,
                   main_cg);
    harness_expect(h, want[0] && strcmp(live_dir, want) == 0,
                   "rank %d: keep-alive thread in cgroup '%s', gfc-keepalive-cgroup '%s'", me,
                   live_cg, want);
    harness_point(h, "the keep-alive thread is in gfc-keepalive-cgroup, the main thread in its "
                     "device (a cgroup with a quota)");

    int64_t one = 1, sum = 0;
    double t0 = tdl_clock_s();
    if (me == victim) {
        long long quota = read_value(main_cg, "cpu.cfs_quota_us");
        long long period = read_value(main_cg, "cpu.cfs_period_us");
        /* 1 ms a second: the quota first, so that the share only shrinks */
        bool starved = write_value(main_cg, "cpu.cfs_quota_us", 1000) &&
                       write_value(main_cg, "cpu.cfs_period_us", 1000000);
        harness_expect(h, starved, "rank %d: cannot lower the quota of %s", me, main_cg);
        volatile double x = 0;
        while (tdl_clock_s() - t0 < 4.0)
            for (int i = 0; i < 100000; i++)
                x += 1e-9 * i;
        bool back = write_value(main_cg, "cpu.cfs_period_us", period) &&
                    write_value(main_cg, "cpu.cfs_quota_us", quota);
        harness_expect(h, back, "rank %d: cannot restore the quota of %s", me, main_cg);
    }
    tdl_status_t st = gfc_allreduce(&g, &one, &sum, 1, GFC_DT_I64, GFC_OP_SUM, NULL);
    double dt = tdl_clock_s() - t0;
    harness_expect_status(h, st, TDL_OK, "allreduce with a starved member");
    harness_expect(h, sum == W, "sum %" PRId64 ", want %d", sum, W);
    int dead = 0;
    for (int r = 0; r < W; r++)
        dead += gfc_peer_state(h->rt, r) != GFC_PEER_ALIVE;
    harness_expect(h, dead == 0, "rank %d holds %d ranks dead", me, dead);
    if (me == 0)
        printf("# rank 0: the all-reduce with a member starved 4 s took %.2f s\n", dt);
    harness_point(h, "rank %d starved to 1 ms a second for 4 s: nobody declared dead (bound "
                     "%lld ms), the all-reduce completes",
                  victim, (long long)h->config.dead_after_ms);
    free(world);
    return harness_finish(h);
}

/* leave (4 ranks): a member that leaves on purpose (gfc_runtime_destroy) after its part fails no
 * request that has, or is being sent, what it needs from it, and a receive from it that it never
 * sent fails naming it, long before the timeout. Ranks 2, 0, 1 all-reduce by recursive doubling
 * as members 0, 1, 2: member 0 (rank 2) sits out the core, sending its values to its buddy (rank
 * 0) and taking the sum back from it. Rank 2 starts it and sleeps 0.8 s without progress; ranks 0
 * and 1 finish, and rank 1 destroys its runtime (its BYE reaches rank 2); rank 3 dies, so that a
 * death is declared while rank 2 sleeps and its next pass checks its requests' members. Before
 * the fix that check failed the all-reduce with "rank 1 has left" (seen in CI, test_gfc_failure
 * kill, in the survivors' all-reduce). Each rank prints LEAVE rank=R verdict=...; rank 2's
 * counts. */
static int run_leave(harness_t *h)
{
    int me = h->rank, members[3] = {2, 0, 1};
    if (h->size != 4) {
        harness_diag(h, "leave needs 4 ranks");
        return harness_finish(h);
    }
    char why[400] = "";
    gfc_group_t g;
    tdl_status_t st = TDL_OK;
    if (me != 3)
        st = gfc_group_init(&g, h->rt, members, 3, 1);
    int64_t in = me + 1, sum = 0;
    gfc_allreduce_opts_t rd = {.algo = GFC_ALLREDUCE_RECURSIVE_DOUBLING};
    if (me == 3) {
        usleep(200000);
        fflush(stdout);
        raise(SIGKILL);
    } else if (me == 2 && st == TDL_OK) {
        gfc_request_t *req;
        st = gfc_allreduce_start(&g, &in, &sum, 1, GFC_DT_I64, GFC_OP_SUM, &rd, &req);
        if (st == TDL_OK) {
            usleep(800000);
            st = gfc_request_wait(req);
        }
        if (st != TDL_OK)
            snprintf(why, sizeof(why), "the all-reduce: %s", tdl_error_get());
        else if (sum != 6)
            snprintf(why, sizeof(why), "sum %" PRId64 ", want 6", sum);
        int dead = gfc_peer_state(h->rt, 3), left = gfc_peer_state(h->rt, 1);
        if (!why[0] && (dead != GFC_PEER_DEAD || left != GFC_PEER_LEFT))
            snprintf(why, sizeof(why), "rank 3 %s dead, rank 1 %s left",
                     dead == GFC_PEER_DEAD ? "is" : "is not", left == GFC_PEER_LEFT ? "has" : "has not");
        /* a message rank 1 never sent: refused as from a rank that has left */
        char buf[16];
        double t0 = tdl_clock_s();
        tdl_status_t rs = gfc_recv(&g, 2, 99, buf, sizeof(buf), NULL);
        double dt = tdl_clock_s() - t0;
        const char *err = tdl_error_get();
        if (!why[0] && (rs != TDL_ERR_PEER || !strstr(err, "rank 1 has left")))
            snprintf(why, sizeof(why), "a receive from rank 1 after it left: status %s, '%s'",
                     tdl_status_str(rs), err);
        else if (!why[0] && dt > 0.5)
            snprintf(why, sizeof(why), "a receive from rank 1 after it left took %.2f s", dt);
    } else if (st == TDL_OK) {
        st = gfc_allreduce(&g, &in, &sum, 1, GFC_DT_I64, GFC_OP_SUM, &rd);
        if (st != TDL_OK || sum != 6)
            snprintf(why, sizeof(why), "the all-reduce: %s, sum %" PRId64,
                     st == TDL_OK ? "ok" : tdl_error_get(), sum);
        if (me == 0)
            usleep(1500000); /* rank 2's sum comes from here; stay until it has checked */
    }
    printf("LEAVE rank=%d verdict=%s%s%s\n", me, why[0] ? "FAIL" : "PASS", why[0] ? " why=" : "",
           why);
    fflush(stdout);
    gfc_runtime_destroy(h->rt);
    _exit(0); /* MPI is not safe to touch with a dead peer */
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "silent";
    const char *env = getenv("TIDAL_GFC_FAILURE_TIMEOUT_MS");
    /* stop: far above the keep-alive bound, so that only the keep-alive can end the wait;
     * throttled: above the 4 s a starved member computes */
    bool long_wait = strcmp(mode, "stop") == 0 || strcmp(mode, "throttled") == 0;
    int64_t timeout_ms = env && *env ? strtoll(env, NULL, 10) : long_wait ? 30000 : 1000;
    harness_t h;
    if (harness_init(&h, &argc, &argv, timeout_ms) != TDL_OK)
        return 1;
    if (h.size < 2) {
        harness_diag(&h, "needs at least 2 ranks");
        return harness_finish(&h);
    }
    if (strcmp(mode, "kill") == 0)
        return run_kill(&h);
    if (strcmp(mode, "stop") == 0)
        return run_stop(&h);
    if (strcmp(mode, "refused") == 0)
        return run_refused(&h);
    if (strcmp(mode, "throttled") == 0)
        return run_throttled(&h);
    if (strcmp(mode, "leave") == 0)
        return run_leave(&h);
    return run_silent(&h);
}
