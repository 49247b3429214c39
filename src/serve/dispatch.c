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
#define SERVE_MAX_PNG (8u << 20)

enum { CMD_TASK = 1, CMD_STOP = 2 };

typedef struct serve_cmd {
    uint32_t op, kind, steps, move, cfg_parallel, nranks, nprev, pad;
    uint64_t seq;
    int32_t ranks[SERVE_MAX_DEGREE], prev[SERVE_MAX_DEGREE];
    serve_traj_spec_t spec;
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

typedef struct executor {
    gfc_runtime_t *rt;
    int me;
    const dit_model_t *model;
    held_t *held;
    int nheld;
} executor_t;

static held_t *held_find(executor_t *e, uint64_t id)
{
    for (int i = 0; i < e->nheld; i++)
        if (e->held[i].used && e->held[i].t.spec.id == id)
            return &e->held[i];
    return NULL;
}

static tdl_status_t held_add(executor_t *e, const serve_traj_spec_t *spec, held_t **out)
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

static tdl_status_t run_task(executor_t *e, const serve_cmd_t *c)
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
static tdl_status_t report(executor_t *e, const serve_cmd_t *c, tdl_status_t st)
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

tdl_status_t serve_executor_loop(gfc_runtime_t *rt, int me, const dit_model_t *model)
{
    gfc_group_t ctl;
    int pair[2];
    tdl_status_t st = control_group(rt, me, pair, &ctl);
    if (st != TDL_OK)
        return st;
    executor_t e = {.rt = rt, .me = me, .model = model};
    for (uint64_t seq = 0;; seq++) {
        serve_cmd_t cmd;
        gfc_request_t *req;
        if ((st = gfc_recv_start(&ctl, 0, seq, &cmd, sizeof(cmd), &req)) != TDL_OK)
            break;
        /* idle for as long as it takes: poll, then sleep a little, never time out */
        bool done = false;
        while ((st = gfc_request_test(req, &done)) == TDL_OK && !done)
            nanosleep(&(struct timespec){0, 200000}, NULL);
        gfc_request_free(req);
        if (st != TDL_OK || cmd.op == CMD_STOP)
            break;
        if (cmd.op != CMD_TASK || cmd.nranks < 1 || cmd.nranks > SERVE_MAX_DEGREE ||
            cmd.nprev > SERVE_MAX_DEGREE || cmd.kind > SERVE_TASK_DECODE) {
            st = tdl_error_raise(TDL_ERR_CORRUPT, "executor %d: a command it cannot read", me);
            break;
        }
        tdl_status_t tst = run_task(&e, &cmd);
        if (tst != TDL_OK)
            TDL_WARN("request %llu: %s failed on rank %d: %s", (unsigned long long)cmd.spec.id,
                     serve_task_name((serve_task_kind_t)cmd.kind), me, tdl_error_get());
        if (cmd.ranks[0] == me && (st = report(&e, &cmd, tst)) != TDL_OK)
            break;
        /* the state stays with the ranks that ran the task, and goes when the request ends */
        held_t *h = held_find(&e, cmd.spec.id);
        if (h && (!member(cmd.ranks, cmd.nranks, me) || tst != TDL_OK ||
                  cmd.kind == SERVE_TASK_DECODE))
            held_drop(h);
    }
    for (int i = 0; i < e.nheld; i++)
        held_drop(&e.held[i]);
    free(e.held);
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
};

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
    tdl_status_t st = d->seq && d->ctl && d->pairs && d->inflight
                          ? TDL_OK
                          : tdl_error_raise(TDL_ERR_NOMEM, "dispatcher: out of memory");
    for (int w = 1; w < world && st == TDL_OK; w++)
        st = control_group(rt, w, d->pairs[w], &d->ctl[w]);
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

tdl_status_t serve_dispatcher_stop(serve_dispatcher_t *d)
{
    tdl_status_t st = TDL_OK;
    serve_cmd_t cmd = {.op = CMD_STOP};
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
    free(d->inflight), free(d->pairs), free(d->ctl), free(d->seq), free(d);
}
