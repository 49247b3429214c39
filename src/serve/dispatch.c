/* Rank 0 sends trajectory tasks to executor ranks; the executors run them and keep each
 * request's state between its tasks. Every message goes over gfc: the coordinator and executor w
 * talk on the two-member group {0, w} (namespace SERVE_NS_CONTROL); a task's ranks step together
 * on their own group (namespace: the request and the task's number), the state moves on the
 * union of the old and new ranks, and the task's first rank reports on {0, lead}.
 *
 * Every rank runs its commands in the order rank 0 sent them, and a command involves only the
 * ranks it was sent to: the earliest unfinished command always has all its ranks at it, so the
 * moves of state between ranks that are busy elsewhere wait but never deadlock. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gfc/gfc.h"
#include "serve/serve.h"

#define SERVE_NS_CONTROL 0x636f6e74726f6cull /* "control" */
#define SERVE_NS_RESULT 0x726573756c74ull    /* "result" */
#define SERVE_NS_TASK 0x7461736bull          /* "task" */
#define SERVE_NS_MOVE 0x6d6f7665ull          /* "move" */
#define SERVE_NS_STATUS 0x737461747573ull    /* "status" */
#define SERVE_MAX_PNG (8u << 20)

enum { CMD_TASK = 1 }; /* SERVE_OP_STOP and the callers' own ops are the others */

typedef struct serve_cmd {
    uint32_t op, kind, steps, move, cfg_parallel, nranks, nprev, user_len;
    uint64_t seq;
    int32_t ranks[SERVE_MAX_DEGREE], prev[SERVE_MAX_DEGREE];
    serve_traj_spec_t spec;
    unsigned char user[SERVE_USER_BYTES]; /* a caller's own command */
} serve_cmd_t;

/* pair must outlive the group (a group refers to its rank list) */
static tdl_status_t control_group(gfc_runtime_t *rt, int worker, int *pair, gfc_group_t *g)
{
    pair[0] = 0, pair[1] = worker;
    return gfc_group_init(g, rt, pair, 2, SERVE_NS_CONTROL);
}

/* A namespace of its own for each task of each request. */
static uint64_t task_ns(uint64_t base, uint64_t id, uint64_t seq)
{
    uint64_t z = base ^ (id * 0x9e3779b97f4a7c15ull) ^ (seq * 0xbf58476d1ce4e5b9ull);
    z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
    return z ^ (z >> 29);
}

static bool member(const int32_t *ranks, uint32_t n, int r)
{
    for (uint32_t i = 0; i < n; i++)
        if (ranks[i] == r)
            return true;
    return false;
}

/* ---- the executor side -------------------------------------------------------------------- */

/* The states this executor holds, by request id. */
typedef struct held {
    bool used;
    serve_traj_t t;
} held_t;

struct serve_worker {
    gfc_runtime_t *rt;
    int me;
    const dit_model_t *model;
    held_t *held;
    int nheld;
    gfc_group_t ctl, status; /* {0, me}: commands in, reports out */
    int pair[2];
    uint64_t seq, status_seq;  /* commands taken, reports sent */
    gfc_request_t *pending;    /* the receive of command seq, once posted */
    serve_cmd_t cmd;
};

static held_t *held_find(serve_worker_t *e, uint64_t id)
{
    for (int i = 0; i < e->nheld; i++)
        if (e->held[i].used && e->held[i].t.spec.id == id)
            return &e->held[i];
    return NULL;
}

static tdl_status_t held_add(serve_worker_t *e, const serve_traj_spec_t *spec, held_t **out)
{
    held_t *h = NULL;
    for (int i = 0; i < e->nheld && !h; i++)
        if (!e->held[i].used)
            h = &e->held[i];
    if (!h) {
        int n = e->nheld ? 2 * e->nheld : 8;
        held_t *more = realloc(e->held, (size_t)n * sizeof(*more));
        if (!more)
            return tdl_error_raise(TDL_ERR_NOMEM, "executor %d: out of memory for states", e->me);
        memset(more + e->nheld, 0, (size_t)(n - e->nheld) * sizeof(*more));
        h = &more[e->nheld];
        e->held = more, e->nheld = n;
    }
    tdl_status_t st = serve_traj_init(&h->t, spec, e->model->config.in_channels);
    if (st != TDL_OK)
        return st;
    h->used = true;
    *out = h;
    return TDL_OK;
}

static void held_drop(held_t *h)
{
    if (h && h->used) {
        serve_traj_free(&h->t);
        h->used = false;
    }
}

static tdl_status_t run_task(serve_worker_t *e, const serve_cmd_t *c)
{
    int me = e->me;
    bool in_new = member(c->ranks, c->nranks, me), in_prev = member(c->prev, c->nprev, me);
    held_t *h = held_find(e, c->spec.id);
    tdl_status_t st = TDL_OK;
    if (in_prev && !h)
        st = tdl_error_raise(TDL_ERR_INTERNAL, "executor %d: request %llu: told to hand on a "
                             "state it does not hold", me, (unsigned long long)c->spec.id);
    if (st == TDL_OK && in_new && !h)
        st = held_add(e, &c->spec, &h);
    if (st == TDL_OK && c->move) { /* the old and the new ranks, together */
        st = serve_traj_migrate(e->rt, me, c->prev, (int)c->nprev, c->ranks, (int)c->nranks,
                                task_ns(SERVE_NS_MOVE, c->spec.id, c->seq), &h->t);
    }
    if (st == TDL_OK && in_new) {
        serve_traj_t *t = &h->t;
        /* a chunk on ranks that did not run PREPARE draws the noise again from the seed */
        if (c->kind == SERVE_TASK_PREPARE || (c->kind == SERVE_TASK_STEP_CHUNK && !t->prepared))
            st = serve_task_prepare(t);
        if (st == TDL_OK && c->kind == SERVE_TASK_STEP_CHUNK) {
            gfc_group_t g;
            const int *ranks = (const int *)c->ranks;
            st = gfc_group_init(&g, e->rt, ranks, (int)c->nranks,
                                task_ns(SERVE_NS_TASK, c->spec.id, c->seq));
            if (st == TDL_OK)
                st = serve_task_step_chunk(t, e->model, c->nranks > 1 ? &g : NULL,
                                           c->cfg_parallel != 0, (int)c->steps);
        }
        if (st == TDL_OK && c->kind == SERVE_TASK_DECODE && c->ranks[0] == me)
            st = serve_task_decode(t, 0);
    }
    return st;
}

/* The lead's report: the PNG after DECODE (empty when it failed), else a status word. */
static tdl_status_t report(serve_worker_t *e, const serve_cmd_t *c, tdl_status_t st)
{
    gfc_group_t back;
    int pair[2] = {0, e->me};
    tdl_status_t sst = gfc_group_init(&back, e->rt, pair, 2, SERVE_NS_RESULT ^ c->spec.id);
    if (sst != TDL_OK)
        return sst;
    if (c->kind == SERVE_TASK_DECODE) {
        held_t *h = held_find(e, c->spec.id);
        bool ok = st == TDL_OK && h && h->t.png;
        return gfc_send(&back, 0, c->seq, ok ? h->t.png : NULL, ok ? h->t.png_len : 0);
    }
    int32_t ack = st == TDL_OK ? 0 : (int32_t)st;
    return gfc_send(&back, 0, c->seq, &ack, sizeof(ack));
}

tdl_status_t serve_worker_create(gfc_runtime_t *rt, int me, const dit_model_t *model,
                                 serve_worker_t **out)
{
    serve_worker_t *w = calloc(1, sizeof(*w));
    if (!w)
        return tdl_error_raise(TDL_ERR_NOMEM, "executor %d: out of memory", me);
    w->rt = rt, w->me = me, w->model = model;
    tdl_status_t st = control_group(rt, me, w->pair, &w->ctl);
    if (st == TDL_OK)
        st = gfc_group_init(&w->status, rt, w->pair, 2, SERVE_NS_STATUS);
    if (st != TDL_OK) {
        free(w);
        return st;
    }
    *out = w;
    return TDL_OK;
}

void serve_worker_free(serve_worker_t *w)
{
    if (!w)
        return;
    if (w->pending)
        gfc_request_free(w->pending);
    for (int i = 0; i < w->nheld; i++)
        held_drop(&w->held[i]);
    free(w->held);
    free(w);
}

void serve_worker_set_model(serve_worker_t *w, const dit_model_t *model)
{
    w->model = model;
}

int serve_worker_held(const serve_worker_t *w)
{
    int n = 0;
    for (int i = 0; i < w->nheld; i++)
        n += w->held[i].used;
    return n;
}

/* The next command, if it has arrived: *got says so, w->cmd holds it. */
static tdl_status_t next_cmd(serve_worker_t *w, bool *got)
{
    tdl_status_t st = TDL_OK;
    *got = false;
    if (!w->pending &&
        (st = gfc_recv_start(&w->ctl, 0, w->seq, &w->cmd, sizeof(w->cmd), &w->pending)) != TDL_OK)
        return st;
    if ((st = gfc_request_test(w->pending, got)) != TDL_OK || !*got) {
        *got = false;
        return st;
    }
    gfc_request_free(w->pending);
    w->pending = NULL;
    w->seq++;
    if (w->cmd.nranks > SERVE_MAX_DEGREE || w->cmd.nprev > SERVE_MAX_DEGREE ||
        w->cmd.user_len > SERVE_USER_BYTES ||
        (w->cmd.op == CMD_TASK && (w->cmd.nranks < 1 || w->cmd.kind > SERVE_TASK_DECODE)))
        return tdl_error_raise(TDL_ERR_CORRUPT, "executor %d: a command it cannot read", w->me);
    return TDL_OK;
}

static void user_msg(const serve_worker_t *w, serve_ctl_msg_t *msg)
{
    msg->op = w->cmd.op;
    msg->len = w->cmd.user_len;
    memcpy(msg->data, w->cmd.user, w->cmd.user_len);
}

tdl_status_t serve_worker_poll(serve_worker_t *w, bool *got, serve_ctl_msg_t *msg)
{
    tdl_status_t st = next_cmd(w, got);
    if (st == TDL_OK && *got) {
        if (w->cmd.op == CMD_TASK)
            return tdl_error_raise(TDL_ERR_INTERNAL, "executor %d: a task arrived while it was "
                                   "not serving", w->me);
        user_msg(w, msg);
    }
    return st;
}

tdl_status_t serve_worker_run(serve_worker_t *w, serve_ctl_msg_t *msg)
{
    for (;;) {
        bool got = false;
        tdl_status_t st;
        /* idle for as long as it takes: poll, then sleep a little, never time out */
        while ((st = next_cmd(w, &got)) == TDL_OK && !got)
            nanosleep(&(struct timespec){0, 200000}, NULL);
        if (st != TDL_OK)
            return st;
        serve_cmd_t *cmd = &w->cmd;
        if (cmd->op != CMD_TASK) {
            user_msg(w, msg);
            return TDL_OK;
        }
        tdl_status_t tst = run_task(w, cmd);
        if (tst != TDL_OK)
            TDL_WARN("request %llu: %s failed on rank %d: %s", (unsigned long long)cmd->spec.id,
                     serve_task_name((serve_task_kind_t)cmd->kind), w->me, tdl_error_get());
        if (cmd->ranks[0] == w->me && (st = report(w, cmd, tst)) != TDL_OK)
            return st;
        /* the state stays with the ranks that ran the task, and goes when the request ends */
        held_t *h = held_find(w, cmd->spec.id);
        if (h && (!member(cmd->ranks, cmd->nranks, w->me) || tst != TDL_OK ||
                  cmd->kind == SERVE_TASK_DECODE))
            held_drop(h);
    }
}

tdl_status_t serve_worker_report(serve_worker_t *w, const void *buf, size_t len)
{
    if (len > SERVE_USER_BYTES)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "executor report of %zu bytes (at most %d)",
                               len, SERVE_USER_BYTES);
    return gfc_send(&w->status, 0, w->status_seq++, buf, len);
}

tdl_status_t serve_executor_loop(gfc_runtime_t *rt, int me, const dit_model_t *model)
{
    serve_worker_t *w;
    tdl_status_t st = serve_worker_create(rt, me, model, &w);
    serve_ctl_msg_t msg;
    while (st == TDL_OK && (st = serve_worker_run(w, &msg)) == TDL_OK && msg.op != SERVE_OP_STOP)
        TDL_WARN("executor %d: command %u ignored (not a serving command)", me, msg.op);
    serve_worker_free(w);
    return st;
}

/* ---- the coordinator side ----------------------------------------------------------------- */

struct serve_dispatcher {
    gfc_runtime_t *rt;
    int nworkers;            /* ranks 1 .. nworkers */
    uint64_t *seq;           /* commands sent to each worker */
    gfc_group_t *ctl;        /* the control groups */
    int (*pairs)[2];         /* their rank lists */
    serve_inflight_t *inflight;
    int max_inflight;        /* slots in inflight[] */
    int ninflight;
    gfc_group_t *status;     /* reports from each worker, */
    gfc_request_t **status_req; /* the receive posted for the next one */
    uint64_t *status_seq;
    unsigned char (*status_buf)[SERVE_USER_BYTES];
    int status_next;         /* where the next poll starts: no worker starves the others */
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
    d->max_inflight = world;
    d->inflight = calloc((size_t)world, sizeof(serve_inflight_t));
    d->status = calloc((size_t)world, sizeof(gfc_group_t));
    d->status_req = calloc((size_t)world, sizeof(gfc_request_t *));
    d->status_seq = calloc((size_t)world, sizeof(uint64_t));
    d->status_buf = calloc((size_t)world, sizeof(*d->status_buf));
    tdl_status_t st = d->seq && d->ctl && d->pairs && d->inflight && d->status &&
                              d->status_req && d->status_seq && d->status_buf
                          ? TDL_OK
                          : tdl_error_raise(TDL_ERR_NOMEM, "dispatcher: out of memory");
    for (int w = 1; w < world && st == TDL_OK; w++) {
        st = control_group(rt, w, d->pairs[w], &d->ctl[w]);
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
    for (int i = 0; i < d->max_inflight && slot < 0; i++)
        if (!d->inflight[i].active)
            slot = i;
    if (!valid_ranks(d, c->ranks, c->nranks, 1) || !valid_ranks(d, c->prev, c->nprev, 0) ||
        (c->move && c->nprev == 0) || c->kind > SERVE_TASK_DECODE)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "dispatch: request %llu: a task needs 1 to %d distinct executor "
                               "ranks in 1..%d (and ranks holding the state to move it)",
                               (unsigned long long)spec->id, SERVE_MAX_DEGREE, d->nworkers);
    if (slot < 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "dispatch: %d tasks already in flight",
                               d->max_inflight);
    serve_cmd_t cmd = {.op = CMD_TASK, .kind = (uint32_t)c->kind, .steps = (uint32_t)c->steps,
                       .move = c->move, .cfg_parallel = c->cfg_parallel,
                       .nranks = (uint32_t)c->nranks, .nprev = (uint32_t)c->nprev, .seq = c->seq,
                       .spec = *spec};
    for (int k = 0; k < c->nranks; k++)
        cmd.ranks[k] = c->ranks[k];
    for (int k = 0; k < c->nprev; k++)
        cmd.prev[k] = c->prev[k];
    serve_inflight_t *f = &d->inflight[slot];
    memset(f, 0, sizeof(*f));
    f->id = spec->id, f->kind = c->kind, f->user = user, f->degree = c->nranks;
    memcpy(f->ranks, c->ranks, (size_t)c->nranks * sizeof(int));
    if (c->kind == SERVE_TASK_DECODE && !(f->png = malloc(SERVE_MAX_PNG)))
        return tdl_error_raise(TDL_ERR_NOMEM, "dispatch: out of memory");
    f->pair[0] = 0, f->pair[1] = c->ranks[0];
    tdl_status_t st = gfc_group_init(&f->back, d->rt, f->pair, 2, SERVE_NS_RESULT ^ spec->id);
    if (st == TDL_OK)
        st = c->kind == SERVE_TASK_DECODE
                 ? gfc_recv_start(&f->back, 1, c->seq, f->png, SERVE_MAX_PNG, &f->req)
                 : gfc_recv_start(&f->back, 1, c->seq, &f->ack, sizeof(f->ack), &f->req);
    /* every rank of either list hears of it once */
    for (int k = 0; k < c->nranks + c->nprev && st == TDL_OK; k++) {
        int w = k < c->nranks ? c->ranks[k] : c->prev[k - c->nranks];
        if (k >= c->nranks && member(cmd.ranks, cmd.nranks, w))
            continue;
        st = gfc_send(&d->ctl[w], 1, d->seq[w]++, &cmd, sizeof(cmd));
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
    for (int i = 0; i < d->max_inflight && n < max; i++) {
        serve_inflight_t *f = &d->inflight[i];
        if (!f->active)
            continue;
        bool fin = false;
        tdl_status_t st = gfc_request_test(f->req, &fin);
        if (!fin && st == TDL_OK)
            continue;
        size_t got = st == TDL_OK ? gfc_request_received_bytes(f->req) : 0;
        gfc_request_free(f->req);
        f->req = NULL;
        if (st == TDL_OK && f->kind == SERVE_TASK_DECODE) {
            f->png_len = got;
            if (!got)
                st = tdl_error_raise(TDL_ERR_INTERNAL, "request %llu: DECODE failed on rank %d",
                                     (unsigned long long)f->id, f->ranks[0]);
        } else if (st == TDL_OK && (got != sizeof(f->ack) || f->ack != 0)) {
            st = tdl_error_raise(TDL_ERR_INTERNAL, "request %llu: %s failed on ranks %d..%d",
                                 (unsigned long long)f->id, serve_task_name(f->kind), f->ranks[0],
                                 f->ranks[f->degree - 1]);
        }
        f->status = st;
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
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "dispatch: a command of %u bytes to rank %d "
                               "(executors 1..%d, op >= %d)", msg->len, worker, d->nworkers,
                               SERVE_OP_STOP);
    serve_cmd_t *cmd = calloc(1, sizeof(*cmd));
    if (!cmd)
        return tdl_error_raise(TDL_ERR_NOMEM, "dispatch: out of memory");
    cmd->op = msg->op, cmd->user_len = msg->len;
    memcpy(cmd->user, msg->data, msg->len);
    tdl_status_t st = gfc_send(&d->ctl[worker], 1, d->seq[worker]++, cmd, sizeof(*cmd));
    free(cmd);
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
    tdl_status_t st = TDL_OK;
    serve_cmd_t cmd = {.op = SERVE_OP_STOP};
    for (int w = 1; w <= d->nworkers; w++) {
        tdl_status_t s = gfc_send(&d->ctl[w], 1, d->seq[w]++, &cmd, sizeof(cmd));
        if (st == TDL_OK)
            st = s;
    }
    return st;
}

void serve_dispatcher_free(serve_dispatcher_t *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->max_inflight && d->inflight; i++)
        if (d->inflight[i].active) {
            gfc_request_free(d->inflight[i].req);
            free(d->inflight[i].png);
        }
    for (int w = 1; w <= d->nworkers && d->status_req; w++)
        if (d->status_req[w])
            gfc_request_free(d->status_req[w]);
    free(d->status_buf), free(d->status_seq), free(d->status_req), free(d->status);
    free(d->inflight), free(d->pairs), free(d->ctl), free(d->seq), free(d);
}
