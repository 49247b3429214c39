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
    const dit_vae_t *vae; /* a latent model's decoder, or NULL */
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

/* Everything of task c before its computation: the state found or made, moved from the old
 * ranks to the new, and (PREPARE, or a first chunk on ranks that did not run it) the noise
 * drawn. *h_out: the state, when this rank runs the task. */
static tdl_status_t task_setup(serve_worker_t *e, const serve_wire_task_t *c, held_t **h_out)
{
    int me = e->me;
    bool in_new = serve_wire_member(c->ranks, c->nranks, me);
    bool in_prev = serve_wire_member(c->prev, c->nprev, me);
    held_t *h = held_find(e, c->spec.id);
    tdl_status_t st = TDL_OK;
    *h_out = NULL;
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
    /* a chunk on ranks that did not run PREPARE draws the noise again from the seed */
    if (st == TDL_OK && in_new &&
        (c->kind == SERVE_TASK_PREPARE || (c->kind == SERVE_TASK_STEP_CHUNK && !h->t.prepared)))
        st = serve_task_prepare(&h->t);
    if (st == TDL_OK && in_new)
        *h_out = h;
    return st;
}

static tdl_status_t run_task(serve_worker_t *e, const serve_wire_task_t *c)
{
    held_t *h;
    tdl_status_t st = task_setup(e, c, &h);
    if (st == TDL_OK && h && c->kind == SERVE_TASK_STEP_CHUNK) {
        gfc_group_t g;
        st = gfc_group_init(&g, e->rt, c->ranks, c->nranks,
                            serve_wire_task_ns(SERVE_NS_TASK, c->spec.id, c->seq));
        tdl_fault_point("serve.chunk");
        if (st == TDL_OK)
            st = serve_task_step_chunk(&h->t, e->model, c->nranks > 1 ? &g : NULL,
                                       c->cfg_parallel, c->steps);
    }
    if (st == TDL_OK && h && c->kind == SERVE_TASK_DECODE && c->ranks[0] == e->me)
        st = serve_task_decode(&h->t, e->vae, 0);
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

void serve_worker_set_vae(serve_worker_t *w, const dit_vae_t *vae)
{
    w->vae = vae;
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

/* After task c ran with status tst: the lead's report, and the state kept only by the ranks
 * that ran the task, until the request ends. An error here is the report's (rank 0 is gone). */
static tdl_status_t task_end(serve_worker_t *w, const serve_wire_task_t *c, tdl_status_t tst)
{
    if (tst != TDL_OK)
        TDL_WARN("request %llu: %s failed on rank %d: %s", (unsigned long long)c->spec.id,
                 serve_task_name(c->kind), w->me, tdl_error_get());
    tdl_status_t st = c->ranks[0] == w->me ? report(w, c, tst) : TDL_OK;
    held_t *h = held_find(w, c->spec.id);
    if (h && (!serve_wire_member(c->ranks, c->nranks, w->me) || tst != TDL_OK ||
              c->kind == SERVE_TASK_DECODE))
        held_drop(h);
    return st;
}

/* Waits for the next command, as long as it takes. */
static tdl_status_t wait_cmd(serve_worker_t *w)
{
    bool got = false;
    tdl_status_t st;
    while ((st = next_cmd(w, &got)) == TDL_OK && !got)
        nanosleep(&(struct timespec){0, 200000}, NULL);
    return st;
}

/* A batched STEP_CHUNK, on a rank that runs it: the command taken and the batch_after that rank
 * 0 sent right after it to the same ranks. Each member's state is set up (moved, or its noise
 * drawn) in order, as each would be alone; the ranks agree on the members every one of them
 * set up, so that they step the same batch; those step together on the group of the first
 * member's task, and the lead reports each member on its own channel. */
static tdl_status_t run_batch(serve_worker_t *w)
{
    int k = w->cmd.task.batch_after + 1;
    serve_wire_task_t *cmds = malloc((size_t)k * sizeof(*cmds));
    tdl_status_t *sts = malloc((size_t)k * sizeof(*sts));
    serve_traj_t **ts = malloc((size_t)k * sizeof(*ts));
    int *counts = malloc((size_t)k * sizeof(int)), *fine = malloc((size_t)k * sizeof(int));
    if (!cmds || !sts || !ts || !counts || !fine) {
        free(cmds), free(sts), free(ts), free(counts), free(fine);
        return tdl_error_raise(TDL_ERR_NOMEM, "executor %d: out of memory for a batch", w->me);
    }
    cmds[0] = w->cmd.task;
    tdl_status_t st = TDL_OK;
    for (int i = 1; i < k && st == TDL_OK; i++) {
        if ((st = wait_cmd(w)) != TDL_OK)
            break;
        const serve_wire_task_t *c = &w->cmd.task;
        if (w->cmd.op != SERVE_OP_TASK || c->kind != SERVE_TASK_STEP_CHUNK ||
            c->batch_after != k - 1 - i || c->nranks != cmds[0].nranks ||
            memcmp(c->ranks, cmds[0].ranks, (size_t)c->nranks * sizeof(int)) != 0)
            st = tdl_error_raise(TDL_ERR_CORRUPT,
                                 "executor %d: member %d of request %llu's batch of %d is not a "
                                 "step_chunk on its ranks with %d after it",
                                 w->me, i, (unsigned long long)cmds[0].spec.id, k, k - 1 - i);
        else
            cmds[i] = *c;
    }
    for (int i = 0; i < k && st == TDL_OK; i++) {
        held_t *h = NULL;
        sts[i] = task_setup(w, &cmds[i], &h);
        fine[i] = sts[i] == TDL_OK && h && h->t.res == cmds[0].spec.res &&
                  h->t.spec.sampler == cmds[0].spec.sampler;
        if (sts[i] == TDL_OK && !fine[i])
            sts[i] = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                     "request %llu: batched with request %llu of another "
                                     "resolution or sampler",
                                     (unsigned long long)cmds[i].spec.id,
                                     (unsigned long long)cmds[0].spec.id);
        counts[i] = cmds[i].steps;
    }
    /* the states found after every member's set-up: one that made room for a new state may
     * have moved the others */
    for (int i = 0; i < k && st == TDL_OK; i++) {
        held_t *h = held_find(w, cmds[i].spec.id);
        ts[i] = h ? &h->t : NULL;
        fine[i] = fine[i] && h;
    }
    gfc_group_t g;
    if (st == TDL_OK)
        st = gfc_group_init(&g, w->rt, cmds[0].ranks, cmds[0].nranks,
                            serve_wire_task_ns(SERVE_NS_TASK, cmds[0].spec.id, cmds[0].seq));
    tdl_status_t gst = TDL_OK;
    if (st == TDL_OK && cmds[0].nranks > 1) /* members set up on every rank */
        gst = gfc_allreduce(&g, fine, fine, (size_t)k, GFC_DT_I32, GFC_OP_MIN, NULL);
    if (st == TDL_OK) {
        int n = 0;
        for (int i = 0; i < k; i++)
            if (gst == TDL_OK && fine[i])
                ts[n] = ts[i], counts[n] = counts[i], n++;
        tdl_fault_point("serve.chunk");
        tdl_status_t bst = gst;
        if (bst == TDL_OK && n > 0)
            bst = serve_task_step_batch(ts, n, w->model, cmds[0].nranks > 1 ? &g : NULL, false,
                                        counts);
        if (bst == TDL_OK && n < k)
            TDL_DEBUG("executor %d: %d of a batch of %d stepped", w->me, n, k);
        for (int i = 0; i < k; i++)
            if (sts[i] == TDL_OK && (bst != TDL_OK || !fine[i]))
                sts[i] = bst != TDL_OK ? bst
                                       : tdl_error_raise(TDL_ERR_PEER,
                                                         "request %llu: another rank of its batch "
                                                         "could not take its state",
                                                         (unsigned long long)cmds[i].spec.id);
        for (int i = 0; i < k && st == TDL_OK; i++)
            st = task_end(w, &cmds[i], sts[i]);
    }
    free(cmds), free(sts), free(ts), free(counts), free(fine);
    return st;
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
        /* idle for as long as it takes: poll, then sleep a little, never time out */
        tdl_status_t st = wait_cmd(w);
        if (st != TDL_OK)
            return st;
        if (w->cmd.op != SERVE_OP_TASK) {
            *msg = w->cmd.msg;
            return TDL_OK;
        }
        const serve_wire_task_t *cmd = &w->cmd.task;
        if (cmd->batch_after > 0 && serve_wire_member(cmd->ranks, cmd->nranks, w->me))
            st = run_batch(w);
        else
            st = task_end(w, cmd, run_task(w, cmd));
        if (st != TDL_OK)
            return st;
    }
}

tdl_status_t serve_worker_report(serve_worker_t *w, const void *buf, size_t len)
{
    if (len > SERVE_USER_BYTES)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "executor report of %zu bytes (at most %d)",
                               len, SERVE_USER_BYTES);
    return gfc_send(&w->status, 0, w->status_seq++, buf, len);
}

tdl_status_t serve_executor_loop(gfc_runtime_t *rt, int me, const dit_model_t *model,
                                 const dit_vae_t *vae)
{
    serve_worker_t *w;
    tdl_status_t st = serve_worker_create(rt, me, model, &w);
    if (st == TDL_OK)
        serve_worker_set_vae(w, vae);
    serve_ctl_msg_t msg;
    while (st == TDL_OK && (st = serve_worker_run(w, &msg)) == TDL_OK && msg.op != SERVE_OP_STOP)
        TDL_WARN("executor %d: command %u ignored (not a serving command)", me, msg.op);
    serve_worker_free(w);
    return st;
}
