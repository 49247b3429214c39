/* Liveness: which peers are alive, kept by a thread of its own with a UCX worker of its own.
 *
 * Every keepalive_ms each rank sends every live peer an 16-byte HELLO on the keep-alive worker;
 * a peer not heard from for dead_after_ms, one whose process is gone (same host), or one whose
 * endpoint UCX reports failed is declared dead, once and for good. The thread runs whatever the
 * main thread does (a long step, a checkpoint write), so a busy rank is never taken for a dead
 * one, and a stopped process (SIGSTOP) stops its thread too and is declared dead like a killed
 * one. A rank that declares a peer dead tells the others (DEAD), so that every survivor holds
 * the same dead set within one message; a rank that hears from a peer it holds dead answers
 * FENCE, and a rank told it is dead (FENCE, or DEAD naming it) is fenced: every gfc call fails
 * from then on. A runtime destroyed on purpose says BYE: the peer has left, not died. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gfc/gfc_internal.h"

#define LIVE_MAGIC 0x6766634cu /* "gfcL" */
#define LIVE_TAG   0x6766634c6976650full
#define LIVE_SLOTS 4 /* sends in flight to one peer; past them a HELLO is skipped */
/* How long an endpoint failure waits for the peer's BYE before the peer is declared dead: a
 * runtime that ends says BYE on the keep-alive worker and its endpoints then fail. */
#define LIVE_EP_GRACE_NS 200000000ull

enum { LIVE_HELLO = 1, LIVE_BYE, LIVE_DEAD, LIVE_FENCE };

typedef struct live_msg {
    uint32_t magic;
    int32_t from;
    int32_t kind;
    int32_t about; /* DEAD: the rank declared dead; BYE: 1 if it left collectives unfinished */
    char why[112]; /* DEAD: why the sender declared it (its own reason, not one it was told) */
} live_msg_t;

typedef struct live_peer {
    ucp_ep_h ep;
    bool ep_failed;
    live_msg_t buf[LIVE_SLOTS];
    void *req[LIVE_SLOTS];
    uint64_t heard_ns;         /* last message from it */
    uint64_t fenced_ns;        /* last FENCE sent to it */
    bool gossip;               /* tell it about a death when a slot frees */
    atomic_bool declared_here; /* this rank declared it dead (and tells the others) */
} live_peer_t;

struct gfc_live {
    gfc_runtime_t *rt;
    ucp_context_h context;
    ucp_worker_h worker;
    live_peer_t *peers;
    live_msg_t rbuf;
    void *rreq;
    pthread_t thread;
    bool running;
    atomic_bool stop;
    atomic_bool started; /* the thread has joined its cgroup (gfc_live_start waits for it) */
    uint64_t period_ns, dead_after_ns;
    atomic_int gossip_pending; /* deaths this rank declared and has not yet told everyone */
};

static const char *live_kind_name(int kind)
{
    switch (kind) {
    case LIVE_HELLO: return "hello";
    case LIVE_BYE: return "bye";
    case LIVE_DEAD: return "dead";
    case LIVE_FENCE: return "fence";
    default: return "?";
    }
}

/* ---- the dead set (written by both threads, read by the main one) ------------------------- */

bool gfc_peer_declare(gfc_runtime_t *rt, int peer, int state, bool tell, const char *fmt, ...)
{
    int expect = GFC_PEER_ALIVE;
    if (peer < 0 || peer >= rt->size || peer == rt->rank)
        return false;
    if (!atomic_compare_exchange_strong(&rt->peer_state[peer], &expect, GFC_PEER_DECLARING))
        return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->peer_why[peer], sizeof(rt->peer_why[peer]), fmt, ap);
    va_end(ap);
    atomic_store(&rt->peer_state[peer], state);
    if (state == GFC_PEER_DEAD) {
        if (tell && rt->live && rt->live->peers) {
            atomic_store(&rt->live->peers[peer].declared_here, true);
            atomic_fetch_add(&rt->live->gossip_pending, 1);
        }
        atomic_fetch_add(&rt->dead_count, 1);
        TDL_WARN("gfc: rank %d declared rank %d dead: %s", rt->rank, peer, rt->peer_why[peer]);
    } else {
        TDL_DEBUG("gfc: rank %d: rank %d %s", rt->rank, peer, rt->peer_why[peer]);
    }
    return true;
}

tdl_status_t gfc_peer_error(gfc_runtime_t *rt, int peer)
{
    int by = atomic_load(&rt->fenced_by);
    if (by >= 0)
        return tdl_error_raise(TDL_ERR_PEER, "this rank (%d) was declared dead by rank %d",
                               rt->rank, by);
    int state = gfc_peer_state(rt, peer);
    if (state == GFC_PEER_ALIVE) /* only its main endpoint failed */
        return tdl_error_raise(TDL_ERR_PEER, "rank %d has failed (%s)", peer,
                               ucs_status_string(rt->peer_status[peer]));
    return tdl_error_raise(TDL_ERR_PEER, "rank %d %s%s", peer,
                           state == GFC_PEER_LEFT ? "" : "is dead: ", gfc_peer_why(rt, peer));
}

int gfc_peer_state(const gfc_runtime_t *rt, int peer)
{
    int s = atomic_load(&((gfc_runtime_t *)rt)->peer_state[peer]);
    return s == GFC_PEER_DECLARING ? GFC_PEER_DEAD : s;
}

const char *gfc_peer_why(const gfc_runtime_t *rt, int peer)
{
    int s = atomic_load(&((gfc_runtime_t *)rt)->peer_state[peer]);
    if (s == GFC_PEER_ALIVE)
        return "";
    return s == GFC_PEER_DECLARING ? "being declared dead" : rt->peer_why[peer];
}

bool gfc_peer_alive(gfc_runtime_t *rt, int peer)
{
    if (peer < 0 || peer >= rt->size)
        return false;
    return gfc_peer_check(rt, peer);
}

int gfc_dead_ranks(gfc_runtime_t *rt, int *ranks, int max)
{
    int n = 0;
    for (int r = 0; r < rt->size; r++) {
        if (gfc_peer_state(rt, r) != GFC_PEER_DEAD)
            continue;
        if (n < max)
            ranks[n] = r;
        n++;
    }
    return n;
}

int gfc_runtime_dead_count(gfc_runtime_t *rt)
{
    return atomic_load(&rt->dead_count);
}

int gfc_runtime_fenced_by(gfc_runtime_t *rt)
{
    return atomic_load(&rt->fenced_by);
}

#define GFC_NS_VERDICT 0x76657264696374ull /* "verdict" */

int gfc_verdict(gfc_runtime_t *rt, int code, bool *deaths)
{
    int32_t mine = code;
    *deaths = false;
    if (rt->size == 1)
        return code;
    if (rt->rank != 0) { /* my code to rank 0, its verdict (and whether any rank died) back */
        int pair[2] = {0, rt->rank};
        gfc_group_t g;
        int32_t verdict[2] = {1, 1};
        size_t got = 0;
        tdl_status_t st = gfc_group_init(&g, rt, pair, 2, GFC_NS_VERDICT);
        if (st == TDL_OK)
            st = gfc_send(&g, 0, 0, &mine, sizeof(mine));
        if (st == TDL_OK)
            st = gfc_recv(&g, 0, 1, verdict, sizeof(verdict), &got);
        if (st != TDL_OK || got != sizeof(verdict)) {
            TDL_WARN("the job's verdict from rank 0: %s", st != TDL_OK ? tdl_error_get() : "short");
            *deaths = true;
            return code ? code : 1;
        }
        *deaths = verdict[1] != 0 || gfc_runtime_dead_count(rt) > 0;
        return verdict[0];
    }
    /* rank 0: rank 0's code, else 1 when a rank that lived to the end failed */
    int32_t verdict[2] = {code, 0};
    for (int w = 1; w < rt->size; w++) {
        int pair[2] = {0, w};
        gfc_group_t g;
        int32_t theirs = 0;
        size_t got = 0;
        if (!gfc_peer_alive(rt, w) || gfc_group_init(&g, rt, pair, 2, GFC_NS_VERDICT) != TDL_OK)
            continue;
        if (gfc_recv(&g, 1, 0, &theirs, sizeof(theirs), &got) != TDL_OK) {
            TDL_WARN("rank %d's exit code: %s", w, tdl_error_get());
            continue; /* it died at the end: the job survives it as any other death */
        }
        if (got == sizeof(theirs) && theirs != 0 && verdict[0] == 0)
            verdict[0] = 1;
    }
    /* every rank that lived to the end has answered: rank 0 knows every death */
    verdict[1] = gfc_runtime_dead_count(rt) > 0;
    *deaths = verdict[1] != 0;
    for (int w = 1; w < rt->size; w++) {
        int pair[2] = {0, w};
        gfc_group_t g;
        if (gfc_peer_alive(rt, w) && gfc_group_init(&g, rt, pair, 2, GFC_NS_VERDICT) == TDL_OK &&
            gfc_send(&g, 1, 1, verdict, sizeof(verdict)) != TDL_OK)
            TDL_WARN("the job's verdict to rank %d: %s", w, tdl_error_get());
    }
    return verdict[0];
}

static void live_fenced(gfc_runtime_t *rt, int by)
{
    int expect = -1;
    if (atomic_compare_exchange_strong(&rt->fenced_by, &expect, by))
        TDL_ERROR("gfc: rank %d was declared dead by rank %d (silent for longer than "
                  "gfc-dead-after-ms, %lld ms): it takes part in no collective from now on",
                  rt->rank, by, (long long)rt->config.dead_after_ms);
}

/* ---- the keep-alive thread ---------------------------------------------------------------- */

void gfc_peer_endpoint_failed(gfc_runtime_t *rt, int peer, ucs_status_t status)
{
    if (rt->ending)
        return;
    if (!rt->live) {
        gfc_peer_declare(rt, peer, GFC_PEER_DEAD, true, "its connection failed (%s)",
                         ucs_status_string(status));
        return;
    }
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&rt->ep_failed_ns[peer], &zero, tdl_clock_ns());
}

static void live_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    gfc_live_t *lv = arg;
    for (int r = 0; r < lv->rt->size; r++) {
        if (lv->peers[r].ep != ep)
            continue;
        lv->peers[r].ep_failed = true;
        gfc_peer_endpoint_failed(lv->rt, r, status);
        return;
    }
}

static ucp_ep_h live_ep(gfc_live_t *lv, int peer)
{
    live_peer_t *p = &lv->peers[peer];
    if (p->ep || p->ep_failed)
        return p->ep_failed ? NULL : p->ep;
    gfc_runtime_t *rt = lv->rt;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)rt->live_addrs[peer],
        /* as gfc_ep_get: UCX's peer error handling excludes shared memory */
        .err_mode = rt->peer_local[peer] ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = live_ep_error, .arg = lv},
    };
    if (ucp_ep_create(lv->worker, &ep, &p->ep) != UCS_OK) {
        p->ep = NULL;
        p->ep_failed = true;
    }
    return p->ep;
}

/* Frees the slots whose sends have completed; returns a free one or -1. */
static int live_slot(gfc_live_t *lv, live_peer_t *p)
{
    int free_slot = -1;
    for (int i = 0; i < LIVE_SLOTS; i++) {
        if (p->req[i] && ucp_request_check_status(p->req[i]) != UCS_INPROGRESS) {
            ucp_request_free(p->req[i]);
            p->req[i] = NULL;
        }
        if (!p->req[i] && free_slot < 0)
            free_slot = i;
    }
    (void)lv;
    return free_slot;
}

static bool live_send(gfc_live_t *lv, int peer, int kind, int about, const char *why)
{
    live_peer_t *p = &lv->peers[peer];
    ucp_ep_h ep = live_ep(lv, peer);
    if (!ep)
        return false;
    int slot = live_slot(lv, p);
    if (slot < 0)
        return false;
    p->buf[slot] = (live_msg_t){LIVE_MAGIC, lv->rt->rank, kind, about, ""};
    if (why)
        snprintf(p->buf[slot].why, sizeof(p->buf[slot].why), "%s", why);
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                               .datatype = ucp_dt_make_contig(1)};
    void *r = ucp_tag_send_nbx(ep, &p->buf[slot], sizeof(live_msg_t), LIVE_TAG, &prm);
    if (UCS_PTR_IS_ERR(r))
        return false;
    p->req[slot] = r;
    return true;
}

static void live_post_recv(gfc_live_t *lv)
{
    ucp_request_param_t prm = {.op_attr_mask =
                                   UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                               .datatype = ucp_dt_make_contig(1)};
    void *r =
        ucp_tag_recv_nbx(lv->worker, &lv->rbuf, sizeof(lv->rbuf), LIVE_TAG, (ucp_tag_t)-1, &prm);
    lv->rreq = UCS_PTR_IS_ERR(r) ? NULL : r;
}

static void live_receive(gfc_live_t *lv, uint64_t now)
{
    gfc_runtime_t *rt = lv->rt;
    while (lv->rreq && ucp_request_check_status(lv->rreq) != UCS_INPROGRESS) {
        ucs_status_t s = ucp_request_check_status(lv->rreq);
        live_msg_t m = lv->rbuf;
        ucp_request_free(lv->rreq);
        lv->rreq = NULL;
        live_post_recv(lv);
        if (s != UCS_OK || m.magic != LIVE_MAGIC || m.from < 0 || m.from >= rt->size ||
            m.from == rt->rank)
            continue;
        int from = m.from, state = gfc_peer_state(rt, from);
        TDL_TRACE("gfc: rank %d: %s from rank %d", rt->rank, live_kind_name(m.kind), from);
        if (m.kind == LIVE_FENCE || (m.kind == LIVE_DEAD && m.about == rt->rank)) {
            live_fenced(rt, from);
            continue;
        }
        if (state == GFC_PEER_DEAD) {
            /* a rank we hold dead is back (it was stopped, or cut off): it must know */
            if (now - lv->peers[from].fenced_ns >= lv->period_ns &&
                live_send(lv, from, LIVE_FENCE, -1, NULL))
                lv->peers[from].fenced_ns = now;
            continue;
        }
        lv->peers[from].heard_ns = now;
        if (m.kind == LIVE_BYE) {
            rt->left[from].busy = m.about > 0; /* published by the state's store */
            gfc_peer_declare(rt, from, GFC_PEER_LEFT, false,
                             "has left (its runtime was destroyed%s)",
                             m.about > 0 ? " with collectives unfinished" : "");
        } else if (m.kind == LIVE_DEAD && m.about >= 0 && m.about < rt->size) {
            m.why[sizeof(m.why) - 1] = '\0';
            gfc_peer_declare(rt, m.about, GFC_PEER_DEAD, false, "declared dead by rank %d: %s",
                             from, m.why);
        }
    }
}

static void live_check(gfc_live_t *lv, uint64_t now)
{
    gfc_runtime_t *rt = lv->rt;
    for (int r = 0; r < rt->size; r++) {
        if (r == rt->rank || gfc_peer_state(rt, r) != GFC_PEER_ALIVE)
            continue;
        uint64_t quiet = now - lv->peers[r].heard_ns;
        uint64_t failed = atomic_load(&rt->ep_failed_ns[r]);
        if (failed && now > failed && now - failed > LIVE_EP_GRACE_NS)
            gfc_peer_declare(rt, r, GFC_PEER_DEAD, true,
                             "its connection failed (UCX reported its endpoint failed)");
        else if (rt->peer_local[r] && kill((pid_t)rt->peer_pid[r], 0) != 0 && errno == ESRCH)
            gfc_peer_declare(rt, r, GFC_PEER_DEAD, true, "its process (pid %d) has exited",
                             rt->peer_pid[r]);
        else if (quiet > lv->dead_after_ns)
            gfc_peer_declare(rt, r, GFC_PEER_DEAD, true,
                             "no keep-alive for %.1f s (gfc-dead-after-ms %lld): stopped, hung "
                             "or cut off",
                             (double)quiet / 1e9, (long long)rt->config.dead_after_ms);
    }
}

/* Tells every live peer about every rank this one holds dead (the receivers ignore what they
 * know already); a peer whose slots are full gets it on a later pass. */
static void live_gossip(gfc_live_t *lv)
{
    gfc_runtime_t *rt = lv->rt;
    if (atomic_exchange(&lv->gossip_pending, 0) > 0)
        for (int r = 0; r < rt->size; r++)
            lv->peers[r].gossip = true;
    for (int r = 0; r < rt->size; r++) {
        if (!lv->peers[r].gossip || r == rt->rank || gfc_peer_state(rt, r) != GFC_PEER_ALIVE)
            continue;
        bool sent = true;
        for (int d = 0; d < rt->size && sent; d++)
            if (gfc_peer_state(rt, d) == GFC_PEER_DEAD && atomic_load(&lv->peers[d].declared_here))
                sent = live_send(lv, r, LIVE_DEAD, d, gfc_peer_why(rt, d));
        lv->peers[r].gossip = !sent;
    }
}

/* gfc-keepalive-cgroup: this thread moves into that cgroup (its tasks file), apart from the
 * rank's. Under tools/cluster the rank's process is a device with a CPU quota, and a device
 * that spent long in the kernel (TCP on its emulated links, zeroing gigabytes) owes its quota
 * for as long as it overran: on 2 hosts x 4 devices of 0.25 core, 256 MiB all-reduces throttled
 * a rank through whole periods for up to 1.75 s, this thread with it, and its peers declared it
 * dead. A GPU's host thread owes a GPU nothing, so under the emulation this thread runs beside
 * the device, not in it (it wakes a few times a second for microseconds). */
static void live_join_cgroup(const gfc_live_t *lv)
{
    const char *dir = lv->rt->config.keepalive_cgroup;
    if (!dir[0])
        return;
    char path[300];
    snprintf(path, sizeof(path), "%s/tasks", dir);
    FILE *f = fopen(path, "w");
    bool ok = f && fprintf(f, "%ld\n", (long)syscall(SYS_gettid)) > 0;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        TDL_WARN("gfc: rank %d: the keep-alive thread cannot join cgroup %s (%s): it stays in "
                 "the rank's own",
                 lv->rt->rank, dir, strerror(errno));
}

static void *live_main(void *arg)
{
    gfc_live_t *lv = arg;
    gfc_runtime_t *rt = lv->rt;
    /* signals are the main thread's business (SIGTERM, SIGUSR1 stop the job there) */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    live_join_cgroup(lv);
    atomic_store(&lv->started, true);
    uint64_t now = tdl_clock_ns(), last = now, next_hello = now;
    for (int r = 0; r < rt->size; r++)
        lv->peers[r].heard_ns = now;
    uint64_t nap_ns = lv->period_ns / 4 < 20000000ull ? lv->period_ns / 4 : 20000000ull;
    while (!atomic_load(&lv->stop)) {
        now = tdl_clock_ns();
        /* This thread itself did not run for long (the process was stopped, or starved): the
         * silence it sees is its own, so every peer gets a fresh bound. Ranks that held this
         * one dead meanwhile answer its next HELLO with FENCE. */
        if (now - last > lv->dead_after_ns / 2)
            for (int r = 0; r < rt->size; r++)
                lv->peers[r].heard_ns = now;
        last = now;
        for (int i = 0; i < 64 && ucp_worker_progress(lv->worker); i++)
            ;
        live_receive(lv, now);
        if (now >= next_hello) {
            for (int r = 0; r < rt->size; r++)
                if (r != rt->rank && gfc_peer_state(rt, r) == GFC_PEER_ALIVE)
                    live_send(lv, r, LIVE_HELLO, -1, NULL);
            next_hello = now + lv->period_ns;
        }
        live_check(lv, now);
        live_gossip(lv);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)nap_ns};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---- life cycle ----------------------------------------------------------------------------- */

tdl_status_t gfc_live_create(gfc_runtime_t *rt, void **addr_out, size_t *len_out)
{
    gfc_live_t *lv = calloc(1, sizeof(*lv));
    if (!lv)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
    lv->rt = rt;
    lv->period_ns = (uint64_t)rt->config.keepalive_ms * 1000000ull;
    lv->dead_after_ns = (uint64_t)rt->config.dead_after_ms * 1000000ull;
    tdl_status_t st = gfc_ucx_open("tidal-gfc-live", false, false, &lv->context, &lv->worker);
    if (st != TDL_OK) {
        free(lv);
        return tdl_error_raise(st, "gfc: the keep-alive worker: %s", tdl_error_get());
    }
    ucp_address_t *addr;
    ucs_status_t us = ucp_worker_get_address(lv->worker, &addr, len_out);
    if (us != UCS_OK) {
        st = tdl_error_raise(TDL_ERR_UCX, "gfc: the keep-alive worker's address: %s",
                             ucs_status_string(us));
        goto err;
    }
    *addr_out = malloc(*len_out);
    if (*addr_out)
        memcpy(*addr_out, addr, *len_out);
    ucp_worker_release_address(lv->worker, addr);
    if (!*addr_out) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
        goto err;
    }
    rt->live = lv;
    return TDL_OK;

err:
    ucp_worker_destroy(lv->worker);
    ucp_cleanup(lv->context);
    free(lv);
    return st;
}

tdl_status_t gfc_live_start(gfc_runtime_t *rt)
{
    gfc_live_t *lv = rt->live;
    lv->peers = calloc((size_t)rt->size, sizeof(*lv->peers));
    if (!lv->peers)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
    live_post_recv(lv);
    if (!lv->rreq)
        return tdl_error_raise(TDL_ERR_UCX, "gfc: cannot post the keep-alive receive");
    int e = pthread_create(&lv->thread, NULL, live_main, lv);
    if (e != 0)
        return tdl_error_raise(TDL_ERR_IO, "gfc: cannot start the keep-alive thread: %s",
                               strerror(e));
    /* named, for ps -L, top -H and the tests that find it */
    (void)pthread_setname_np(lv->thread, "gfc-keepalive");
    lv->running = true;
    /* The runtime is up once its keep-alive runs where it should: a device starved right after
     * the start (its quota owed) would otherwise hold the thread inside it (seen in CI under
     * load: the thread still in its device's cgroup when the runtime returned). Bounded. */
    uint64_t deadline = tdl_clock_ns() + 2000000000ull;
    while (!atomic_load(&lv->started) && tdl_clock_ns() < deadline) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000};
        nanosleep(&ts, NULL);
    }
    return TDL_OK;
}

/* Takes in the keep-alive messages that came with no receive posted (at the end, once the
 * thread has stopped), so that UCX has none left to warn about when its worker goes. */
static void live_drain(gfc_live_t *lv)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    live_msg_t sink;
    while ((msg = ucp_tag_probe_nb(lv->worker, LIVE_TAG, (ucp_tag_t)-1, 1, &info)) != NULL) {
        ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                                   .datatype = ucp_dt_make_contig(1)};
        void *r = ucp_tag_msg_recv_nbx(lv->worker, &sink, sizeof(sink), msg, &prm);
        uint64_t end = tdl_clock_ns() + 10000000ull;
        while (r && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS &&
               tdl_clock_ns() < end)
            ucp_worker_progress(lv->worker);
        if (r && !UCS_PTR_IS_ERR(r))
            ucp_request_free(r);
    }
}

void gfc_live_destroy(gfc_runtime_t *rt)
{
    gfc_live_t *lv = rt->live;
    if (!lv)
        return;
    if (lv->running) {
        atomic_store(&lv->stop, true);
        pthread_join(lv->thread, NULL);
    }
    if (lv->rreq) { /* from here on messages stay unexpected, and live_drain takes them */
        ucp_request_cancel(lv->worker, lv->rreq);
        ucp_worker_progress(lv->worker);
        ucp_request_free(lv->rreq);
        lv->rreq = NULL;
    }
    if (lv->peers) {
        /* BYE to every live peer (a fenced rank has nobody to tell), then a short flush: a
         * peer that misses it declares this rank dead after its bound, which is harmless. Its
         * `about`: 1 when this rank leaves collectives unfinished, which its peers may wait on;
         * -1 when it has finished all it took part in. */
        int busy = rt->active_head ? 1 : -1;
        if (lv->running && atomic_load(&rt->fenced_by) < 0)
            for (int r = 0; r < rt->size; r++)
                if (r != rt->rank && gfc_peer_state(rt, r) == GFC_PEER_ALIVE)
                    live_send(lv, r, LIVE_BYE, busy, NULL);
        uint64_t deadline = tdl_clock_ns() + 100000000ull;
        bool pending = true;
        while (pending && tdl_clock_ns() < deadline) {
            ucp_worker_progress(lv->worker);
            live_drain(lv);
            pending = false;
            for (int r = 0; r < rt->size; r++)
                for (int i = 0; i < LIVE_SLOTS; i++)
                    pending |= lv->peers[r].req[i] &&
                               ucp_request_check_status(lv->peers[r].req[i]) == UCS_INPROGRESS;
        }
        for (int r = 0; r < rt->size; r++) {
            live_peer_t *p = &lv->peers[r];
            for (int i = 0; i < LIVE_SLOTS; i++) {
                if (!p->req[i])
                    continue;
                if (ucp_request_check_status(p->req[i]) == UCS_INPROGRESS)
                    ucp_request_cancel(lv->worker, p->req[i]);
                ucp_request_free(p->req[i]);
            }
            if (p->ep) {
                ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                          .flags = UCP_EP_CLOSE_FLAG_FORCE};
                void *cr = ucp_ep_close_nbx(p->ep, &cp);
                uint64_t end = tdl_clock_ns() + 100000000ull;
                while (cr && !UCS_PTR_IS_ERR(cr) &&
                       ucp_request_check_status(cr) == UCS_INPROGRESS && tdl_clock_ns() < end)
                    ucp_worker_progress(lv->worker);
                if (cr && !UCS_PTR_IS_ERR(cr))
                    ucp_request_free(cr);
            }
        }
    }
    ucp_worker_destroy(lv->worker);
    ucp_cleanup(lv->context);
    free(lv->peers);
    free(lv);
    rt->live = NULL;
}
