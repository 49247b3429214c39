/* Rank 0's side of serving: it sends trajectory tasks to the executor ranks (executor.c), which
 * run them and keep each request's state between its tasks, and it collects their reports. Every
 * message goes over gfc in wire.h's encoding: rank 0 and executor w talk on the two-member group
 * {0, w} (namespace SERVE_NS_CONTROL); a task's ranks step together on their own group
 * (namespace: the request and the task's number), the state moves on the union of the old and
 * new ranks, and the task's first rank reports on {0, lead}.
 *
 * Every rank runs its commands in the order rank 0 sent them, and a command involves only the
 * ranks it was sent to: the earliest unfinished command always has all its ranks at it, so the
 * moves of state between ranks that are busy elsewhere wait but never deadlock. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gfc/gfc.h"
#include "serve/serve.h"
#include "serve/wire.h"

struct serve_dispatcher {
    gfc_runtime_t *rt;
    int nworkers;     /* ranks 1 .. nworkers */
    uint64_t *seq;    /* commands sent to each worker */
    gfc_group_t *ctl; /* the control groups */
    int (*pairs)[2];  /* their rank lists */
    /* the tasks in flight, each where it was made (a posted receive points into it): up to
     * SERVE_MAX_BATCH a worker, since a batch's members are tasks of their own */
    serve_inflight_t **inflight;
    int max_inflight; /* slots in inflight[] */
    int hi;           /* slots [hi, max_inflight) never used yet */
    int ninflight;
    gfc_group_t *status;        /* reports from each worker, */
    gfc_request_t **status_req; /* the receive posted for the next one */
    uint64_t *status_seq;
    unsigned char (*status_buf)[SERVE_USER_BYTES];
    int status_next; /* where the next poll starts: no worker starves the others */
};

static tdl_status_t post_status(serve_dispatcher_t *d, int w)
{
    return gfc_recv_start(&d->status[w], 1, d->status_seq[w], d->status_buf[w], SERVE_USER_BYTES,
                          &d->status_req[w]);
}

tdl_status_t serve_dispatcher_create(gfc_runtime_t *rt, int world, serve_dispatcher_t **out)
{
    serve_dispatcher_t *d = calloc(1, sizeof(*d));
    if (!d)
        return tdl_error_raise(TDL_ERR_NOMEM, "dispatcher: out of memory");
    d->rt = rt;
    d->nworkers = world - 1;
    d->seq = calloc((size_t)world, sizeof(uint64_t));
    d->ctl = calloc((size_t)world, sizeof(gfc_group_t));
    d->pairs = calloc((size_t)world, sizeof(*d->pairs));
    d->max_inflight = world * SERVE_MAX_BATCH;
    d->inflight = calloc((size_t)d->max_inflight, sizeof(serve_inflight_t *));
    d->status = calloc((size_t)world, sizeof(gfc_group_t));
    d->status_req = calloc((size_t)world, sizeof(gfc_request_t *));
    d->status_seq = calloc((size_t)world, sizeof(uint64_t));
    d->status_buf = calloc((size_t)world, sizeof(*d->status_buf));
    tdl_status_t st = d->seq && d->ctl && d->pairs && d->inflight && d->status && d->status_req &&
                              d->status_seq && d->status_buf
                          ? TDL_OK
                          : tdl_error_raise(TDL_ERR_NOMEM, "dispatcher: out of memory");
    for (int w = 1; w < world && st == TDL_OK; w++) {
        st = serve_wire_pair_group(rt, w, SERVE_NS_CONTROL, d->pairs[w], &d->ctl[w]);
        if (st == TDL_OK)
            st = gfc_group_init(&d->status[w], rt, d->pairs[w], 2, SERVE_NS_STATUS);
        if (st == TDL_OK)
            st = post_status(d, w);
    }
    if (st != TDL_OK) {
        serve_dispatcher_free(d);
        return st;
    }
    *out = d;
    return TDL_OK;
}

int serve_dispatcher_inflight(const serve_dispatcher_t *d)
{
    return d->ninflight;
}

int serve_dispatcher_room(const serve_dispatcher_t *d)
{
    return d->max_inflight - d->ninflight;
}

static bool valid_ranks(const serve_dispatcher_t *d, const int *r, int n, int lo)
{
    if (n < lo || n > SERVE_MAX_DEGREE || (n && !r))
        return false;
    for (int i = 0; i < n; i++) {
        if (r[i] < 1 || r[i] > d->nworkers)
            return false;
        for (int j = 0; j < i; j++)
            if (r[j] == r[i])
                return false;
    }
    return true;
}

tdl_status_t serve_dispatch_task(serve_dispatcher_t *d, const serve_traj_spec_t *spec,
                                 const serve_task_cmd_t *c, void *user)
{
    int slot = -1;
    for (int i = 0; i < d->hi && slot < 0; i++)
        if (!d->inflight[i]->active)
            slot = i;
    if (slot < 0 && d->hi < d->max_inflight) {
        if (!(d->inflight[d->hi] = calloc(1, sizeof(serve_inflight_t))))
            return tdl_error_raise(TDL_ERR_NOMEM, "dispatch: out of memory");
        slot = d->hi++;
    }
    if (!valid_ranks(d, c->ranks, c->nranks, 1) || !valid_ranks(d, c->prev, c->nprev, 0) ||
        (c->move && c->nprev == 0) || c->kind > SERVE_TASK_DECODE)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "dispatch: request %llu: a task needs 1 to %d distinct executor "
                               "ranks in 1..%d (and ranks holding the state to move it)",
                               (unsigned long long)spec->id, SERVE_MAX_DEGREE, d->nworkers);
    if (slot < 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "dispatch: %d tasks already in flight",
                               d->max_inflight);
    serve_wire_task_t task = {.kind = c->kind,
                              .steps = c->steps,
                              .move = c->move,
                              .cfg_parallel = c->cfg_parallel,
                              .nranks = c->nranks,
                              .nprev = c->nprev,
                              .seq = c->seq,
                              .batch_after = c->batch_after,
                              .spec = *spec};
    memcpy(task.ranks, c->ranks, (size_t)c->nranks * sizeof(int));
    if (c->nprev)
        memcpy(task.prev, c->prev, (size_t)c->nprev * sizeof(int));
    unsigned char cmd[SERVE_WIRE_CMD_MAX];
    size_t len = 0;
    tdl_status_t st = serve_wire_task_encode(&task, cmd, &len);
    if (st != TDL_OK)
        return st;
    serve_inflight_t *f = d->inflight[slot];
    memset(f, 0, sizeof(*f));
    f->id = spec->id, f->kind = c->kind, f->user = user, f->degree = c->nranks;
    memcpy(f->ranks, c->ranks, (size_t)c->nranks * sizeof(int));
    if (c->kind == SERVE_TASK_DECODE && !(f->png = malloc(SERVE_MAX_PNG)))
        return tdl_error_raise(TDL_ERR_NOMEM, "dispatch: out of memory");
    f->pair[0] = 0, f->pair[1] = c->ranks[0];
    st = gfc_group_init(&f->back, d->rt, f->pair, 2, SERVE_NS_RESULT ^ spec->id);
    if (st == TDL_OK)
        st = c->kind == SERVE_TASK_DECODE
                 ? gfc_recv_start(&f->back, 1, c->seq, f->png, SERVE_MAX_PNG, &f->req)
                 : gfc_recv_start(&f->back, 1, c->seq, f->ack, sizeof(f->ack), &f->req);
    if (st == TDL_ERR_PEER) { /* the lead is dead: the task fails at the next poll */
        f->failed = true;
        f->status =
            tdl_error_raise(TDL_ERR_PEER, "request %llu: %s: %s", (unsigned long long)spec->id,
                            serve_task_name(c->kind), tdl_error_get());
        snprintf(f->why, sizeof(f->why), "%s", tdl_error_get());
        f->active = true;
        d->ninflight++;
        return TDL_OK;
    }
    /* every rank of either list hears of it once; a dead one is no error here: the ranks that
     * hear fail the task at its first exchange with it, and the lead says so */
    for (int k = 0; k < c->nranks + c->nprev && st == TDL_OK; k++) {
        int w = k < c->nranks ? c->ranks[k] : c->prev[k - c->nranks];
        if (k >= c->nranks && serve_wire_member(c->ranks, c->nranks, w))
            continue;
        st = gfc_send(&d->ctl[w], 1, d->seq[w]++, cmd, len);
        if (st == TDL_ERR_PEER) {
            TDL_DEBUG("request %llu: %s not sent to rank %d: %s", (unsigned long long)spec->id,
                      serve_task_name(c->kind), w, tdl_error_get());
            st = TDL_OK;
        }
    }
    if (st != TDL_OK) {
        if (f->req)
            gfc_request_free(f->req);
        free(f->png);
        f->png = NULL;
        return st;
    }
    f->active = true;
    d->ninflight++;
    return TDL_OK;
}

int serve_dispatcher_poll(serve_dispatcher_t *d, serve_inflight_t *done, int max)
{
    int n = 0;
    for (int i = 0; i < d->hi && n < max; i++) {
        serve_inflight_t *f = d->inflight[i];
        if (!f->active)
            continue;
        if (f->failed) {
            f->active = false;
            d->ninflight--;
            done[n++] = *f;
            continue;
        }
        bool fin = false;
        tdl_status_t st = gfc_request_test(f->req, &fin);
        if (!fin && st == TDL_OK)
            continue;
        size_t got = st == TDL_OK ? gfc_request_received_bytes(f->req) : 0;
        gfc_request_free(f->req);
        f->req = NULL;
        int32_t ack = 0;
        if (st != TDL_OK) /* the lead is dead, or gone */
            st = tdl_error_raise(st, "request %llu: %s on ranks %d..%d: %s",
                                 (unsigned long long)f->id, serve_task_name(f->kind), f->ranks[0],
                                 f->ranks[f->degree - 1], tdl_error_get());
        else if (f->kind == SERVE_TASK_DECODE && got > SERVE_WIRE_ACK_BYTES)
            f->png_len = got; /* a PNG is longer than an ack: a failed DECODE answers one */
        else if ((st = serve_wire_ack_decode(f->kind == SERVE_TASK_DECODE ? f->png : f->ack, got,
                                             &ack)) != TDL_OK)
            st = tdl_error_raise(st, "request %llu: %s: the report of rank %d: %s",
                                 (unsigned long long)f->id, serve_task_name(f->kind), f->ranks[0],
                                 tdl_error_get());
        else if (ack != 0 || f->kind == SERVE_TASK_DECODE)
            /* a rank of the task died under it (TDL_ERR_PEER), or the task itself failed */
            st = tdl_error_raise(ack == TDL_ERR_PEER ? TDL_ERR_PEER : TDL_ERR_INTERNAL,
                                 "request %llu: %s failed on ranks %d..%d%s",
                                 (unsigned long long)f->id, serve_task_name(f->kind), f->ranks[0],
                                 f->ranks[f->degree - 1],
                                 ack == TDL_ERR_PEER ? ": a rank it needed died" : "");
        f->status = st;
        if (st != TDL_OK)
            snprintf(f->why, sizeof(f->why), "%s", tdl_error_get());
        f->active = false;
        d->ninflight--;
        done[n++] = *f; /* the caller owns png now */
    }
    return n;
}

tdl_status_t serve_dispatcher_send(serve_dispatcher_t *d, int worker, const serve_ctl_msg_t *msg)
{
    if (worker < 1 || worker > d->nworkers || msg->op < SERVE_OP_STOP ||
        msg->len > SERVE_USER_BYTES)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "dispatch: a command of %u bytes to rank %d "
                               "(executors 1..%d, op >= %d)",
                               msg->len, worker, d->nworkers, SERVE_OP_STOP);
    unsigned char cmd[SERVE_WIRE_CMD_MAX];
    size_t len = 0;
    tdl_status_t st = serve_wire_msg_encode(msg, cmd, &len);
    if (st == TDL_OK)
        st = gfc_send(&d->ctl[worker], 1, d->seq[worker]++, cmd, len);
    return st;
}

bool serve_dispatcher_poll_status(serve_dispatcher_t *d, int *worker, void *buf, size_t *len)
{
    for (int k = 0; k < d->nworkers; k++) {
        int w = 1 + (d->status_next + k) % d->nworkers;
        bool fin = false;
        if (!d->status_req[w])
            continue;
        tdl_status_t st = gfc_request_test(d->status_req[w], &fin);
        if (st != TDL_OK) { /* the worker is gone: no more reports from it */
            TDL_WARN("reports from rank %d: %s", w, tdl_error_get());
            gfc_request_free(d->status_req[w]);
            d->status_req[w] = NULL;
            continue;
        }
        if (!fin)
            continue;
        *len = gfc_request_received_bytes(d->status_req[w]);
        memcpy(buf, d->status_buf[w], *len);
        *worker = w;
        gfc_request_free(d->status_req[w]);
        d->status_req[w] = NULL;
        d->status_seq[w]++;
        if (post_status(d, w) != TDL_OK)
            TDL_WARN("reports from rank %d: %s", w, tdl_error_get());
        d->status_next = w % d->nworkers;
        return true;
    }
    return false;
}

tdl_status_t serve_dispatcher_stop(serve_dispatcher_t *d)
{
    unsigned char cmd[SERVE_WIRE_CMD_MAX];
    size_t len = 0;
    tdl_status_t st = serve_wire_msg_encode(&(serve_ctl_msg_t){.op = SERVE_OP_STOP}, cmd, &len);
    if (st != TDL_OK)
        return st;
    for (int w = 1; w <= d->nworkers; w++) {
        if (!gfc_peer_alive(d->rt, w))
            continue;
        tdl_status_t s = gfc_send(&d->ctl[w], 1, d->seq[w]++, cmd, len);
        if (st == TDL_OK && s != TDL_ERR_PEER) /* one that died since is no error */
            st = s;
    }
    return st;
}

int serve_dispatcher_dead(serve_dispatcher_t *d, int *ranks, int max)
{
    return gfc_dead_ranks(d->rt, ranks, max);
}

int serve_dispatcher_dead_count(serve_dispatcher_t *d)
{
    return gfc_runtime_dead_count(d->rt);
}

const char *serve_dispatcher_why(const serve_dispatcher_t *d, int w)
{
    return gfc_peer_why(d->rt, w);
}

void serve_dispatcher_free(serve_dispatcher_t *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->hi && d->inflight; i++)
        if (d->inflight[i]->active) {
            gfc_request_free(d->inflight[i]->req);
            free(d->inflight[i]->png);
        }
    for (int i = 0; i < d->hi && d->inflight; i++)
        free(d->inflight[i]);
    for (int w = 1; w <= d->nworkers && d->status_req; w++)
        if (d->status_req[w])
            gfc_request_free(d->status_req[w]);
    free(d->status_buf), free(d->status_seq), free(d->status_req), free(d->status);
    free(d->inflight), free(d->pairs), free(d->ctl), free(d->seq), free(d);
}
