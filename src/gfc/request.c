/* Requests: the state machine of one operation, its UCX transfers, the progress engine that
 * steps every outstanding request, and the bounded wait. */
#include "config.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "gfc/gfc_internal.h"

uint64_t gfc_tag_base(uint64_t group_id, uint64_t seq);

/* Tags of point-to-point messages live apart from collectives' sequence numbers. */
#define GFC_P2P_SEQ_SALT 0x8000000000000000ull

#define GFC_CACHE_MAX_BYTES (512ull << 20)

static void scratch_release(gfc_runtime_t *rt, void *buf, size_t cap)
{
    if (!buf)
        return;
    size_t cached = 0;
    int slot = -1;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(rt->cache); i++) {
        cached += rt->cache[i].cap;
        if (!rt->cache[i].buf && slot < 0)
            slot = (int)i;
    }
    if (slot < 0 || cached + cap > GFC_CACHE_MAX_BYTES) {
        free(buf);
        return;
    }
    rt->cache[slot].buf = buf;
    rt->cache[slot].cap = cap;
}

void *gfc_request_scratch(gfc_request_t *req, int which, size_t bytes)
{
    gfc_runtime_t *rt = req->rt;
    void **slot = which ? &req->scratch2 : &req->scratch;
    if (*slot)
        return NULL; /* one buffer per slot */
    if (bytes == 0)
        bytes = 1;
    int best = -1;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(rt->cache); i++) {
        if (rt->cache[i].buf && rt->cache[i].cap >= bytes &&
            (best < 0 || rt->cache[i].cap < rt->cache[best].cap))
            best = (int)i;
    }
    if (best >= 0) {
        *slot = rt->cache[best].buf;
        req->scratch_cap[which ? 1 : 0] = rt->cache[best].cap;
        rt->cache[best].buf = NULL;
        rt->cache[best].cap = 0;
    } else {
        *slot = malloc(bytes);
        req->scratch_cap[which ? 1 : 0] = bytes;
    }
    return *slot;
}

/* The active list holds every request that is not finished (and may still hold finished ones
 * until the next pass or their free). */
static void active_add(gfc_request_t *req)
{
    gfc_runtime_t *rt = req->rt;
    req->active = true;
    req->active_next = NULL;
    req->active_prev = rt->active_tail;
    if (rt->active_tail)
        rt->active_tail->active_next = req;
    else
        rt->active_head = req;
    rt->active_tail = req;
}

static void active_remove(gfc_request_t *req)
{
    gfc_runtime_t *rt = req->rt;
    if (!req->active)
        return;
    /* A pass in progress goes on from the request after this one. */
    if (rt->advance_next == req)
        rt->advance_next = req->active_next;
    if (req->active_prev)
        req->active_prev->active_next = req->active_next;
    else
        rt->active_head = req->active_next;
    if (req->active_next)
        req->active_next->active_prev = req->active_prev;
    else
        rt->active_tail = req->active_prev;
    req->active = false;
    req->active_prev = req->active_next = NULL;
}

/* A collective on a group that holds a dead or departed member, or started by a fenced rank,
 * fails at once, naming it (the members that are waiting learn it from the same dead set). */
static tdl_status_t request_group_check(gfc_group_t *g, const char *name)
{
    gfc_runtime_t *rt = g->rt;
    if (atomic_load(&rt->dead_count) == 0 && atomic_load(&rt->fenced_by) < 0)
        return TDL_OK;
    for (int i = 0; i < g->size; i++) {
        int peer = g->ranks[i];
        if (atomic_load(&rt->fenced_by) >= 0 ||
            (peer != rt->rank && gfc_peer_state(rt, peer) != GFC_PEER_ALIVE)) {
            tdl_status_t st = gfc_peer_error(rt, peer);
            return tdl_error_raise(st, "gfc %s (group of %d): %s", name, g->size,
                                   tdl_error_get());
        }
    }
    return TDL_OK;
}

tdl_status_t gfc_request_create(gfc_group_t *g, const char *name, gfc_progress_fn_t progress,
                                size_t state_size, gfc_request_t **req_out)
{
    if (progress) {
        tdl_status_t st = request_group_check(g, name);
        if (st != TDL_OK)
            return st;
    }
    gfc_request_t *req = calloc(1, sizeof(*req));
    void *state = state_size ? calloc(1, state_size) : NULL;
    if (!req || (state_size && !state)) {
        free(req);
        free(state);
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc %s: out of memory", name);
    }
    req->rt = g->rt;
    req->name = name;
    req->group = *g;
    req->progress = progress;
    req->state = state;
    if (progress) {
        req->seq = g->seq++;
        req->tag_base = gfc_tag_base(g->id, req->seq);
        g->rt->collectives++;
    }
    g->rt->requests_live++;
    active_add(req);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_request_create_done(gfc_group_t *g, const char *name, gfc_request_t **req_out)
{
    tdl_status_t st = gfc_request_create(g, name, NULL, 0, req_out);
    if (st == TDL_OK) {
        /* Keeps sequence numbers aligned with members that do send. */
        (*req_out)->seq = g->seq++;
        g->rt->collectives++;
        (*req_out)->finished = true;
        active_remove(*req_out);
    }
    return st;
}

tdl_status_t gfc_p2p_request_create(gfc_group_t *g, const char *name, uint64_t tag,
                                    gfc_request_t **req_out)
{
    tdl_status_t st = gfc_request_create(g, name, NULL, 0, req_out);
    if (st == TDL_OK)
        (*req_out)->tag_base = gfc_tag_base(g->id, GFC_P2P_SEQ_SALT ^ tag);
    return st;
}

static tdl_status_t xfer_slot(gfc_request_t *req, gfc_xfer_t **x_out)
{
    if (req->nxfers == req->cap_xfers) {
        int cap = req->cap_xfers ? 2 * req->cap_xfers : 8;
        gfc_xfer_t *x = realloc(req->xfers, (size_t)cap * sizeof(*x));
        if (!x)
            return tdl_error_raise(TDL_ERR_NOMEM, "gfc %s: out of memory", req->name);
        req->xfers = x;
        req->cap_xfers = cap;
    }
    gfc_xfer_t *x = &req->xfers[req->nxfers++];
    memset(x, 0, sizeof(*x));
    *x_out = x;
    return TDL_OK;
}

tdl_status_t gfc_post_send(gfc_request_t *req, int peer_index, uint32_t step, const void *buf,
                           size_t bytes, int slot)
{
    gfc_runtime_t *rt = req->rt;
    int peer = gfc_member(req, peer_index);
    ucp_ep_h ep;
    tdl_status_t st = gfc_ep_get(rt, peer, &ep);
    if (st != TDL_OK)
        return st;
    gfc_xfer_t *x;
    if ((st = xfer_slot(req, &x)) != TDL_OK)
        return st;
    x->peer = peer;
    x->slot = slot;
    x->tag = gfc_tag(req->tag_base, step, rt->rank);
    rt->bytes_sent += bytes;
    if (gfc_copy_applies(rt, peer, bytes))
        return gfc_copy_send(rt, x, ep, buf, bytes, x->tag);
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                               .datatype = ucp_dt_make_contig(1)};
    void *r = ucp_tag_send_nbx(ep, buf, bytes, x->tag, &prm);
    if (r == NULL) {
        x->done = true;
        x->status = UCS_OK;
    } else if (UCS_PTR_IS_ERR(r)) {
        x->done = true;
        x->status = UCS_PTR_STATUS(r);
    } else {
        x->ucx = r;
        rt->ucx_requests_live++;
    }
    return TDL_OK;
}

/* A receive's UCX part completed with status OK (x->ucx released): a descriptor starts the
 * single copy; a message in the bounce buffer goes to the caller's, or fails as truncated as UCX
 * would have failed it. */
static void recv_landed(gfc_runtime_t *rt, gfc_xfer_t *x, const ucp_tag_recv_info_t *info)
{
    x->bytes = info->length;
    if (info->sender_tag & GFC_TAG_DESC)
        gfc_copy_arrived(rt, x);
    else if (x->bounce && info->length > x->cap)
        x->status = UCS_ERR_MESSAGE_TRUNCATED;
    else if (x->bounce)
        memcpy(x->buf, x->bounce, info->length);
    free(x->bounce);
    x->bounce = NULL;
}

tdl_status_t gfc_post_recv(gfc_request_t *req, int peer_index, uint32_t step, void *buf,
                           size_t bytes, int slot)
{
    gfc_runtime_t *rt = req->rt;
    int peer = gfc_member(req, peer_index);
    gfc_xfer_t *x;
    tdl_status_t st = xfer_slot(req, &x);
    if (st != TDL_OK)
        return st;
    x->peer = peer;
    x->recv = true;
    x->slot = slot;
    x->tag = gfc_tag(req->tag_base, step, peer);
    x->buf = buf;
    x->cap = bytes;
    void *dst = buf;
    size_t room = bytes;
    if (rt->config.single_copy_min > 0 && bytes < GFC_COPY_DESC_BYTES) {
        if (!(x->bounce = malloc(GFC_COPY_DESC_BYTES))) {
            req->nxfers--;
            return tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
        }
        dst = x->bounce;
        room = GFC_COPY_DESC_BYTES;
    }
    ucp_tag_recv_info_t info = {0};
    /* Recv info is read from the request when it completes: asking for immediate completion
     * would leave the length unreported on some UCX versions. */
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                                               UCP_OP_ATTR_FIELD_RECV_INFO |
                                               UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                               .datatype = ucp_dt_make_contig(1),
                               .recv_info.tag_info = &info};
    /* the message itself, or a single copy's descriptor of it (copy.c) */
    void *r = ucp_tag_recv_nbx(rt->worker, dst, room, x->tag, ~GFC_TAG_DESC, &prm);
    if (r == NULL) {
        x->done = true;
        x->status = UCS_OK;
        recv_landed(rt, x, &info);
    } else if (UCS_PTR_IS_ERR(r)) {
        x->done = true;
        x->status = UCS_PTR_STATUS(r);
        free(x->bounce);
        x->bounce = NULL;
    } else {
        x->ucx = r;
        rt->ucx_requests_live++;
    }
    return TDL_OK;
}

static void request_fail(gfc_request_t *req, tdl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void request_fail(gfc_request_t *req, tdl_status_t st, const char *fmt, ...)
{
    if (req->finished && req->status != TDL_OK)
        return;
    char detail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    snprintf(req->error, sizeof(req->error), "gfc %s (group of %d, ns %llu, seq %llu): %s",
             req->name, req->group.size, (unsigned long long)req->group.ns,
             (unsigned long long)req->seq, detail);
    req->status = st;
    req->finished = true;
}

tdl_status_t gfc_request_fail_start(gfc_request_t *req, tdl_status_t st)
{
    request_fail(req, st, "%s", tdl_error_get());
    tdl_error_raise(st, "%s", req->error);
    gfc_request_free(req);
    return st;
}

static void xfer_release(gfc_runtime_t *rt, gfc_xfer_t *x)
{
    if (x->ucx) {
        ucp_request_free(x->ucx);
        x->ucx = NULL;
        rt->ucx_requests_live--;
    }
}

tdl_status_t gfc_xfers_poll(gfc_request_t *req,
                            tdl_status_t (*on_done)(gfc_request_t *req, const gfc_xfer_t *x),
                            bool *all_done)
{
    gfc_runtime_t *rt = req->rt;
    int n = req->nxfers, kept = 0;
    tdl_status_t st = TDL_OK;
    /* on_done may post new transfers: they are appended after n (the array may move) and
     * looked at on the next call. */
    for (int i = 0; i < n; i++) {
        gfc_xfer_t x = req->xfers[i];
        if (!x.done && st == TDL_OK && x.copy) {
            gfc_copy_step(rt, &x);
        } else if (!x.done && st == TDL_OK) {
            ucs_status_t s;
            ucp_tag_recv_info_t info = {0};
            if (x.recv) {
                s = ucp_tag_recv_request_test(x.ucx, &info);
                x.bytes = info.length;
            } else {
                s = ucp_request_check_status(x.ucx);
            }
            if (s != UCS_INPROGRESS) {
                x.done = true;
                x.status = s;
                xfer_release(rt, &x);
                if (s == UCS_OK && x.recv) {
                    recv_landed(rt, &x, &info);
                } else {
                    free(x.bounce);
                    x.bounce = NULL;
                }
            }
        }
        if (x.done && st == TDL_OK) {
            int err = gfc_copy_errno(&x);
            gfc_copy_release(rt, &x, true);
            if (x.status != UCS_OK) {
                bool truncated = x.status == UCS_ERR_MESSAGE_TRUNCATED;
                st = truncated ? TDL_ERR_INVALID_ARG : TDL_ERR_PEER;
                request_fail(req, st, "%s rank %d failed: %s%s%s", x.recv ? "receive from" : "send to",
                             x.peer, ucs_status_string(x.status),
                             err ? "; reading its memory: " : "", err ? strerror(err) : "");
            } else if (on_done && (st = on_done(req, &x)) != TDL_OK) {
                request_fail(req, st, "%s", tdl_error_get());
            }
            continue; /* dropped */
        }
        req->xfers[kept++] = x;
    }
    int appended = req->nxfers - n;
    if (appended > 0 && kept != n)
        memmove(&req->xfers[kept], &req->xfers[n], (size_t)appended * sizeof(gfc_xfer_t));
    req->nxfers = kept + appended;
    *all_done = req->nxfers == 0;
    return st;
}

/* Cancels and releases every outstanding transfer (after a failure or on free). */
static void request_cancel_all(gfc_request_t *req)
{
    gfc_runtime_t *rt = req->rt;
    for (int i = 0; i < req->nxfers; i++) {
        gfc_xfer_t *x = &req->xfers[i];
        gfc_copy_release(rt, x, true);
        if (!x->ucx)
            continue;
        ucp_request_cancel(rt->worker, x->ucx);
    }
    /* Cancelled requests complete through progress; bounded (0.1 s) so that a wedged
     * transport cannot hang. */
    uint64_t deadline = tdl_clock_ns() + 100000000ull;
    for (int i = 0; i < req->nxfers; i++) {
        gfc_xfer_t *x = &req->xfers[i];
        while (x->ucx && ucp_request_check_status(x->ucx) == UCS_INPROGRESS &&
               tdl_clock_ns() < deadline)
            ucp_worker_progress(rt->worker);
        /* a bounce buffer UCX may still write into (a wedged transport) is left to it */
        if (!x->ucx || ucp_request_check_status(x->ucx) != UCS_INPROGRESS)
            free(x->bounce);
        x->bounce = NULL;
        xfer_release(rt, x);
    }
    req->nxfers = 0;
}

static tdl_status_t p2p_done(gfc_request_t *req, const gfc_xfer_t *x)
{
    if (x->recv)
        req->received = x->bytes;
    return TDL_OK;
}

static tdl_status_t request_step(gfc_request_t *req)
{
    if (req->finished || req->stepping) {
        if (req->finished)
            active_remove(req);
        return req->finished ? req->status : TDL_OK;
    }
    req->stepping = true;
    tdl_status_t st = req->progress ? req->progress(req) : TDL_OK;
    if (!req->progress) {
        bool all;
        st = gfc_xfers_poll(req, p2p_done, &all);
        if (st == TDL_OK && all)
            req->finished = true;
    }
    if (st != TDL_OK) {
        if (!req->finished || req->status == TDL_OK)
            request_fail(req, st, "%s", tdl_error_get());
        request_cancel_all(req);
    }
    req->stepping = false;
    if (req->finished)
        active_remove(req);
    return req->finished ? req->status : TDL_OK;
}

/* Whether `req` waits on `peer`, which has left (GFC_PEER_LEFT), for what will never come. A
 * peer that left with collectives unfinished may be owed anything. One that had finished them
 * delivered all it sent before it said BYE (gfc_runtime_destroy), but this rank may not have
 * taken it in yet: only a transfer with it still pending once this rank's worker has been idle
 * in two passes since it was first found pending (or 1 s on) is owed. A request with nothing
 * pending with it does not depend on it (it has had its part); one that posts to it later is
 * found then. */
static bool left_peer_owes(gfc_request_t *req, int peer)
{
    gfc_runtime_t *rt = req->rt;
    struct gfc_left *l = &rt->left[peer];
    if (l->busy)
        return true;
    bool pending = false;
    for (int i = 0; i < req->nxfers && !pending; i++) {
        const gfc_xfer_t *x = &req->xfers[i];
        pending = x->peer == peer && !x->done &&
                  (x->copy || (x->ucx && ucp_request_check_status(x->ucx) == UCS_INPROGRESS));
    }
    if (!pending)
        return false;
    uint64_t now = tdl_clock_ns();
    if (!l->seen_ns) {
        l->seen_ns = now;
        l->seen_idle = rt->idle_passes;
    }
    return rt->idle_passes - l->seen_idle >= 2 || now - l->seen_ns > 1000000000ull;
}

/* Fails the request if a member of its group is known dead, or this rank is fenced: a member
 * that waits only on live peers would otherwise wait for data they cannot send, since they wait
 * on the dead one. A member that has left fails it only where it owes it something
 * (left_peer_owes). The error names the member and why it is gone. */
static void request_check_peers(gfc_request_t *req)
{
    gfc_runtime_t *rt = req->rt;
    /* a point-to-point request depends on its peer alone */
    int n = req->progress ? req->group.size : req->nxfers;
    for (int i = 0; i < n && !req->finished; i++) {
        int peer = req->progress ? req->group.ranks[i] : req->xfers[i].peer;
        if (atomic_load(&rt->fenced_by) < 0 &&
            (peer == rt->rank || gfc_peer_check(rt, peer) ||
             (gfc_peer_state(rt, peer) == GFC_PEER_LEFT && !left_peer_owes(req, peer))))
            continue;
        tdl_status_t st = gfc_peer_error(rt, peer);
        request_fail(req, st, "%s", tdl_error_get());
        request_cancel_all(req);
    }
}

/* One pass of the progress engine: UCX, then one step of every active request, oldest first,
 * whichever request the caller waits for (MPI's progress rule). A collective's next hop is
 * posted by its own step, so a wait that stepped only its own request could leave a peer
 * waiting on a collective this rank started but was not waiting for: members that wait in
 * different orders deadlocked. A pass costs one step per outstanding request, each step polls
 * that request's own transfers. A call made from inside a pass (from a codec, say) steps only
 * the requests it was given: the list is walked by one pass at a time. Returns UCX's events. */
static unsigned progress_pass(gfc_runtime_t *rt, gfc_request_t *const *reqs, size_t count)
{
    unsigned events = ucp_worker_progress(rt->worker);
    rt->idle_passes += events == 0;
    /* A death declared since the last pass fails every request that depends on the dead rank,
     * whether it is being waited for or only tested. */
    int deaths = atomic_load(&rt->dead_count) + (atomic_load(&rt->fenced_by) >= 0);
    if (deaths != rt->deaths_seen) {
        rt->deaths_seen = deaths;
        for (gfc_request_t *r = rt->active_head; r; r = r->active_next)
            if (!r->finished)
                request_check_peers(r);
    }
    if (rt->advancing) {
        for (size_t i = 0; i < count; i++)
            request_step(reqs[i]);
        return events;
    }
    rt->advancing = true;
    rt->advance_next = rt->active_head;
    while (rt->advance_next) {
        gfc_request_t *r = rt->advance_next;
        rt->advance_next = r->active_next;
        request_step(r);
    }
    rt->advancing = false;
    return events;
}

void gfc_runtime_advance(gfc_runtime_t *rt)
{
    progress_pass(rt, NULL, 0);
}

tdl_status_t gfc_request_test(gfc_request_t *req, bool *done)
{
    progress_pass(req->rt, &req, 1);
    tdl_status_t st = req->finished ? req->status : TDL_OK;
    *done = req->finished;
    if (req->finished && st != TDL_OK)
        tdl_error_set("%s", req->error);
    return st;
}

/* Names the ranks that outstanding transfers wait on. */
static void request_silent_ranks(gfc_request_t *req, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < req->nxfers && used < size; i++) {
        gfc_xfer_t *x = &req->xfers[i];
        if (x->done)
            continue;
        bool seen = false;
        for (int j = 0; j < i; j++)
            seen |= !req->xfers[j].done && req->xfers[j].peer == x->peer;
        if (seen)
            continue;
        int n = snprintf(buf + used, size - used, "%s%d", used ? ", " : "", x->peer);
        used += n > 0 ? (size_t)n : 0;
    }
}

#define GFC_LIVENESS_NS 50000000ull /* how often a waiting rank looks for dead peers */

/* A waiting rank that has seen no event: after yield_after idle passes it yields its core, and
 * with idle_sleep_us set it sleeps once nothing has happened for that long (with a timer slack of
 * 1 us: the kernel's default would add 50 us to every sleep). */
static void request_idle(gfc_runtime_t *rt, unsigned events, unsigned *idle, uint64_t *last_ns)
{
    int64_t us = rt->config.idle_sleep_us;
    if (events) {
        *idle = 0;
        *last_ns = 0;
        return;
    }
    if (us > 0) {
        uint64_t now = tdl_clock_ns();
        if (*last_ns == 0) {
            *last_ns = now;
        } else if (now - *last_ns >= (uint64_t)us * 1000u) {
            prctl(PR_SET_TIMERSLACK, 1000UL); /* per thread, and cheap beside the sleep */
            struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
            nanosleep(&ts, NULL);
            return;
        }
    }
    if (++*idle >= rt->yield_after) {
        /* Ranks outnumber cores under oversubscription: let the peer run. */
        sched_yield();
        *idle = 0;
    }
}

static tdl_status_t request_wait_one(gfc_request_t *req, uint64_t deadline)
{
    gfc_runtime_t *rt = req->rt;
    unsigned idle = 0;
    uint64_t next_check = tdl_clock_ns() + GFC_LIVENESS_NS, idle_ns = 0;
    while (!req->finished) {
        unsigned events = progress_pass(rt, &req, 1);
        if (req->finished)
            break;
        request_idle(rt, events, &idle, &idle_ns);
        uint64_t now = tdl_clock_ns();
        if (now > next_check) {
            request_check_peers(req);
            next_check = now + GFC_LIVENESS_NS;
            if (req->finished)
                break;
        }
        if (now > deadline) {
            char silent[256];
            request_silent_ranks(req, silent, sizeof(silent));
            request_fail(req, TDL_ERR_TIMEOUT, "no answer within %lld ms from rank%s %s",
                         (long long)rt->config.timeout_ms, strchr(silent, ',') ? "s" : "",
                         silent[0] ? silent : "(none pending)");
            request_cancel_all(req);
        }
    }
    return req->status;
}

tdl_status_t gfc_request_wait_keep(gfc_request_t *req)
{
    uint64_t deadline = tdl_clock_ns() + (uint64_t)req->rt->config.timeout_ms * 1000000ull;
    tdl_status_t st = request_wait_one(req, deadline);
    /* Push out whatever UCX has queued for peers (acknowledgements, pending sends) before the
     * caller goes off to do something else. */
    for (int i = 0; i < 64 && ucp_worker_progress(req->rt->worker); i++)
        ;
    if (st != TDL_OK)
        tdl_error_set("%s", req->error);
    return st;
}

tdl_status_t gfc_request_wait(gfc_request_t *req)
{
    tdl_status_t st = gfc_request_wait_keep(req);
    gfc_request_free(req);
    return st;
}

tdl_status_t gfc_request_wait_all(gfc_request_t **reqs, size_t count)
{
    tdl_status_t first = TDL_OK;
    char msg[512] = "";
    if (count == 0)
        return TDL_OK;
    gfc_runtime_t *rt = reqs[0]->rt;
    uint64_t deadline = tdl_clock_ns() + (uint64_t)rt->config.timeout_ms * 1000000ull;
    bool pending = true;
    unsigned idle = 0;
    uint64_t next_check = tdl_clock_ns() + GFC_LIVENESS_NS, idle_ns = 0;
    while (pending) {
        pending = false;
        /* steps every active request, these among them, once */
        unsigned events = progress_pass(rt, reqs, count);
        for (size_t i = 0; i < count; i++)
            pending |= !reqs[i]->finished;
        request_idle(rt, events, &idle, &idle_ns);
        uint64_t now = tdl_clock_ns();
        if (now > next_check) {
            for (size_t i = 0; i < count; i++)
                if (!reqs[i]->finished)
                    request_check_peers(reqs[i]);
            next_check = now + GFC_LIVENESS_NS;
        }
        if (pending && tdl_clock_ns() > deadline) {
            for (size_t i = 0; i < count; i++)
                if (!reqs[i]->finished)
                    request_wait_one(reqs[i], 0);
            pending = false;
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (reqs[i]->status != TDL_OK && first == TDL_OK) {
            first = reqs[i]->status;
            snprintf(msg, sizeof(msg), "%s", reqs[i]->error);
        }
        gfc_request_free(reqs[i]);
        reqs[i] = NULL;
    }
    if (first != TDL_OK)
        tdl_error_set("%s", msg);
    return first;
}

void gfc_request_free(gfc_request_t *req)
{
    if (!req)
        return;
    active_remove(req);
    request_cancel_all(req);
    if (req->cleanup)
        req->cleanup(req);
    req->rt->requests_live--;
    free(req->xfers);
    free(req->state);
    scratch_release(req->rt, req->scratch, req->scratch_cap[0]);
    scratch_release(req->rt, req->scratch2, req->scratch_cap[1]);
    free(req);
}

size_t gfc_request_received_bytes(const gfc_request_t *req)
{
    return req->received;
}
