/* The executor's side: a rank that takes commands from rank 0 (dispatch.c) over gfc, in the
 * order they were sent, runs the trajectory tasks among them and keeps each request's state
 * between its tasks. A task names the ranks that run it and the ranks that hold the state; every
 * rank of either takes part: the state moves from the old ranks to the new on their union, the
 * new ones step together on a group of their own, and the task's first rank reports to rank 0.
 * The messages and their encoding are wire.h's.
 *
 * A sequence-parallel step runs on a gfc group as the DiT's exchanges (serve_sp_comm). Any group
 * value works (any ranks, any order, formed without messages), so a task may run on a different
 * group and degree at every step. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dit/dit.h"
#include "gfc/gfc.h"
#include "serve/serve.h"
#include "serve/wire.h"

/* ---- sequence-parallel exchanges ------------------------------------------------------------- */

static tdl_status_t sp_alltoall(void *ctx, const float *send, float *recv, size_t count)
{
    return gfc_alltoall(ctx, send, recv, count, GFC_DT_F32);
}

static tdl_status_t sp_allgather(void *ctx, const float *send, float *recv, size_t count)
{
    return gfc_allgather(ctx, send, recv, count, GFC_DT_F32);
}

void serve_sp_comm(dit_sp_comm_t *comm, gfc_group_t *group)
{
    *comm = (dit_sp_comm_t){.size = group->size,
                            .rank = group->me,
                            .alltoall = sp_alltoall,
                            .allgather = sp_allgather,
                            .ctx = group};
}

/* ---- the states held, the tasks run ---------------------------------------------------------- */

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
    uint64_t seq, status_seq;              /* commands taken, reports sent */
    gfc_request_t *pending;                /* the receive of command seq, once posted */
    unsigned char buf[SERVE_WIRE_CMD_MAX]; /* where it arrives */
    serve_wire_cmd_t cmd;                  /* the last command taken */
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

static tdl_status_t run_task(serve_worker_t *e, const serve_wire_task_t *c)
{
    int me = e->me;
    bool in_new = serve_wire_member(c->ranks, c->nranks, me);
    bool in_prev = serve_wire_member(c->prev, c->nprev, me);
    held_t *h = held_find(e, c->spec.id);
    tdl_status_t st = TDL_OK;
    if (c->move && in_prev && !h)
        st = tdl_error_raise(TDL_ERR_INTERNAL,
                             "executor %d: request %llu: told to hand on a "
                             "state it does not hold",
                             me, (unsigned long long)c->spec.id);
    /* a PREPARE starts the request afresh: one that starts again after a rank was lost names
     * the ranks that shared its old state as prev, without a move, and they let go of it */
    if (st == TDL_OK && h && c->kind == SERVE_TASK_PREPARE) {
        held_drop(h);
        h = NULL;
    }
    if (st == TDL_OK && in_new && !h)
        st = held_add(e, &c->spec, &h);
    if (st == TDL_OK && c->move) { /* the old and the new ranks, together */
        if (in_prev)
            tdl_fault_point("serve.move");
        st = serve_traj_migrate(e->rt, me, c->prev, c->nprev, c->ranks, c->nranks,
                                serve_wire_task_ns(SERVE_NS_MOVE, c->spec.id, c->seq), &h->t);
    }
    if (st == TDL_OK && in_new) {
        serve_traj_t *t = &h->t;
        /* a chunk on ranks that did not run PREPARE draws the noise again from the seed */
        if (c->kind == SERVE_TASK_PREPARE || (c->kind == SERVE_TASK_STEP_CHUNK && !t->prepared))
            st = serve_task_prepare(t);
        if (st == TDL_OK && c->kind == SERVE_TASK_STEP_CHUNK) {
            gfc_group_t g;
            st = gfc_group_init(&g, e->rt, c->ranks, c->nranks,
                                serve_wire_task_ns(SERVE_NS_TASK, c->spec.id, c->seq));
            tdl_fault_point("serve.chunk");
            if (st == TDL_OK)
                st = serve_task_step_chunk(t, e->model, c->nranks > 1 ? &g : NULL, c->cfg_parallel,
                                           c->steps);
        }
        if (st == TDL_OK && c->kind == SERVE_TASK_DECODE && c->ranks[0] == me)
            st = serve_task_decode(t, 0);
    }
    return st;
}

/* The lead's report: the PNG after DECODE, else (and when DECODE failed) an ack with the status:
 * TDL_ERR_PEER tells rank 0 that a rank died under the task. */
static tdl_status_t report(serve_worker_t *e, const serve_wire_task_t *c, tdl_status_t st)
{
    gfc_group_t back;
    int pair[2] = {0, e->me};
    tdl_status_t sst = gfc_group_init(&back, e->rt, pair, 2, SERVE_NS_RESULT ^ c->spec.id);
    if (sst != TDL_OK)
        return sst;
    if (c->kind == SERVE_TASK_DECODE) {
        held_t *h = held_find(e, c->spec.id);
        if (st == TDL_OK && h && h->t.png)
            return gfc_send(&back, 0, c->seq, h->t.png, h->t.png_len);
        if (st == TDL_OK)
            st = TDL_ERR_INTERNAL;
    }
    unsigned char ack[SERVE_WIRE_ACK_BYTES];
    serve_wire_ack_encode(st == TDL_OK ? 0 : (int32_t)st, ack);
    return gfc_send(&back, 0, c->seq, ack, sizeof(ack));
}

tdl_status_t serve_worker_create(gfc_runtime_t *rt, int me, const dit_model_t *model,
                                 serve_worker_t **out)
{
    serve_worker_t *w = calloc(1, sizeof(*w));
    if (!w)
        return tdl_error_raise(TDL_ERR_NOMEM, "executor %d: out of memory", me);
    w->rt = rt, w->me = me, w->model = model;
    tdl_status_t st = serve_wire_pair_group(rt, me, SERVE_NS_CONTROL, w->pair, &w->ctl);
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
        (st = gfc_recv_start(&w->ctl, 0, w->seq, w->buf, sizeof(w->buf), &w->pending)) != TDL_OK)
        return st;
    if ((st = gfc_request_test(w->pending, got)) != TDL_OK || !*got) {
        *got = false;
        return st;
    }
    size_t len = gfc_request_received_bytes(w->pending);
    gfc_request_free(w->pending);
    w->pending = NULL;
    uint64_t seq = w->seq++;
    if ((st = serve_wire_cmd_decode(w->buf, len, &w->cmd)) != TDL_OK)
        return tdl_error_raise(st, "executor %d: command %llu from rank 0 refused: %s", w->me,
                               (unsigned long long)seq, tdl_error_get());
    if (w->cmd.op == SERVE_OP_DROP) { /* a cancelled request's state: the executor's own */
        uint64_t id = 0;
        if ((st = serve_wire_drop_decode(&w->cmd.msg, &id)) != TDL_OK)
            return tdl_error_raise(st, "executor %d: command %llu from rank 0 refused: %s",
                                   w->me, (unsigned long long)seq, tdl_error_get());
        held_t *h = held_find(w, id);
        TDL_DEBUG("executor %d: request %llu cancelled: %s", w->me, (unsigned long long)id,
                  h ? "its state dropped" : "it held none");
        held_drop(h);
        *got = false;
    }
    return TDL_OK;
}

tdl_status_t serve_worker_poll(serve_worker_t *w, bool *got, serve_ctl_msg_t *msg)
{
    tdl_status_t st = next_cmd(w, got);
    if (st == TDL_OK && *got) {
        if (w->cmd.op == SERVE_OP_TASK)
            return tdl_error_raise(TDL_ERR_INTERNAL,
                                   "executor %d: a task arrived while it was "
                                   "not serving",
                                   w->me);
        *msg = w->cmd.msg;
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
        if (w->cmd.op != SERVE_OP_TASK) {
            *msg = w->cmd.msg;
            return TDL_OK;
        }
        const serve_wire_task_t *cmd = &w->cmd.task;
        tdl_status_t tst = run_task(w, cmd);
        if (tst != TDL_OK)
            TDL_WARN("request %llu: %s failed on rank %d: %s", (unsigned long long)cmd->spec.id,
                     serve_task_name(cmd->kind), w->me, tdl_error_get());
        if (cmd->ranks[0] == w->me && (st = report(w, cmd, tst)) != TDL_OK)
            return st;
        /* the state stays with the ranks that ran the task, and goes when the request ends */
        held_t *h = held_find(w, cmd->spec.id);
        if (h && (!serve_wire_member(cmd->ranks, cmd->nranks, w->me) || tst != TDL_OK ||
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
