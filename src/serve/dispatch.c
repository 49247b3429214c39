/* Rank 0 places requests on groups of executor ranks; the executors run the trajectory tasks.
 * Every message goes over gfc: the coordinator and executor w talk on the two-member group
 * {0, w} (namespace SERVE_NS_CONTROL), a request's members step together on their own group
 * (namespace: the request id), and the group's first member sends the PNG back on {0, lead}. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gfc/gfc.h"
#include "serve/serve.h"

#define SERVE_NS_CONTROL 0x636f6e74726f6cull /* "control" */
#define SERVE_NS_RESULT 0x726573756c74ull    /* "result" */
#define SERVE_MAX_PNG (8u << 20)

enum { CMD_RUN = 1, CMD_STOP = 2 };

typedef struct serve_cmd {
    uint32_t op, nranks, chunk, cfg_parallel;
    int32_t ranks[SERVE_MAX_DEGREE];
    serve_traj_spec_t spec;
} serve_cmd_t;

/* pair must outlive the group (a group refers to its rank list) */
static tdl_status_t control_group(gfc_runtime_t *rt, int worker, int *pair, gfc_group_t *g)
{
    pair[0] = 0, pair[1] = worker;
    return gfc_group_init(g, rt, pair, 2, SERVE_NS_CONTROL);
}

/* ---- the executor side -------------------------------------------------------------------- */

static tdl_status_t run_request(gfc_runtime_t *rt, int me, const dit_model_t *m,
                                const serve_cmd_t *cmd)
{
    serve_traj_t t;
    int channels = m->config.in_channels, n = (int)cmd->nranks;
    tdl_status_t st = serve_traj_init(&t, &cmd->spec, channels);
    if (st != TDL_OK)
        return st;
    gfc_group_t g;
    if ((st = gfc_group_init(&g, rt, cmd->ranks, n, cmd->spec.id)) == TDL_OK) {
        serve_task_prepare(&t);
        int chunk = cmd->chunk ? (int)cmd->chunk : 1;
        while (st == TDL_OK && t.step < t.spec.steps)
            st = serve_task_step_chunk(&t, m, n > 1 ? &g : NULL, cmd->cfg_parallel != 0, chunk);
    }
    /* the lead decodes and answers, with an empty PNG when the request failed */
    if (cmd->ranks[0] == me) {
        if (st == TDL_OK)
            st = serve_task_decode(&t, 0);
        gfc_group_t back;
        int pair[2] = {0, me};
        tdl_status_t sst = gfc_group_init(&back, rt, pair, 2, SERVE_NS_RESULT ^ cmd->spec.id);
        if (sst == TDL_OK)
            sst = gfc_send(&back, 0, cmd->spec.id, st == TDL_OK ? t.png : NULL,
                           st == TDL_OK ? t.png_len : 0);
        if (st == TDL_OK)
            st = sst;
    }
    serve_traj_free(&t);
    return st;
}

tdl_status_t serve_executor_loop(gfc_runtime_t *rt, int me, const dit_model_t *model)
{
    gfc_group_t ctl;
    int pair[2];
    tdl_status_t st = control_group(rt, me, pair, &ctl);
    if (st != TDL_OK)
        return st;
    for (uint64_t seq = 0;; seq++) {
        serve_cmd_t cmd;
        gfc_request_t *req;
        if ((st = gfc_recv_start(&ctl, 0, seq, &cmd, sizeof(cmd), &req)) != TDL_OK)
            return st;
        /* idle for as long as it takes: poll, then sleep a little, never time out */
        bool done = false;
        while ((st = gfc_request_test(req, &done)) == TDL_OK && !done)
            nanosleep(&(struct timespec){0, 200000}, NULL);
        gfc_request_free(req);
        if (st != TDL_OK)
            return st;
        if (cmd.op == CMD_STOP)
            return TDL_OK;
        if (cmd.op != CMD_RUN || cmd.nranks < 1 || cmd.nranks > SERVE_MAX_DEGREE)
            return tdl_error_raise(TDL_ERR_CORRUPT, "executor %d: a command it cannot read", me);
        if ((st = run_request(rt, me, model, &cmd)) != TDL_OK)
            TDL_WARN("request %llu failed on rank %d: %s", (unsigned long long)cmd.spec.id, me,
                     tdl_error_get());
    }
}

/* ---- the coordinator side ----------------------------------------------------------------- */

struct serve_dispatcher {
    gfc_runtime_t *rt;
    int nworkers;            /* ranks 1 .. nworkers */
    bool *busy;              /* [nworkers + 1] */
    uint64_t *seq;           /* commands sent to each worker */
    gfc_group_t *ctl;        /* the control groups */
    int (*pairs)[2];         /* their rank lists */
    serve_inflight_t *inflight;
    int max_inflight;        /* slots in inflight[] */
};

tdl_status_t serve_dispatcher_create(gfc_runtime_t *rt, int world, serve_dispatcher_t **out)
{
    serve_dispatcher_t *d = calloc(1, sizeof(*d));
    if (!d)
        return tdl_error_raise(TDL_ERR_NOMEM, "dispatcher: out of memory");
    d->rt = rt;
    d->nworkers = world - 1;
    d->busy = calloc((size_t)world, sizeof(bool));
    d->seq = calloc((size_t)world, sizeof(uint64_t));
    d->ctl = calloc((size_t)world, sizeof(gfc_group_t));
    d->pairs = calloc((size_t)world, sizeof(*d->pairs));
    d->max_inflight = world;
    d->inflight = calloc((size_t)world, sizeof(serve_inflight_t));
    tdl_status_t st = d->busy && d->seq && d->ctl && d->pairs && d->inflight
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

int serve_dispatcher_idle(const serve_dispatcher_t *d)
{
    int n = 0;
    for (int w = 1; w <= d->nworkers; w++)
        n += !d->busy[w];
    return n;
}

tdl_status_t serve_dispatch(serve_dispatcher_t *d, const serve_traj_spec_t *spec, int degree,
                            int chunk, bool cfg_parallel, void *user)
{
    int slot = -1;
    for (int i = 0; i < d->max_inflight && slot < 0; i++)
        if (!d->inflight[i].active)
            slot = i;
    if (degree < 1 || degree > SERVE_MAX_DEGREE || serve_dispatcher_idle(d) < degree || slot < 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "dispatch: %d ranks asked, %d idle (degree 1 to %d)", degree,
                               serve_dispatcher_idle(d), SERVE_MAX_DEGREE);
    serve_cmd_t cmd = {.op = CMD_RUN, .nranks = (uint32_t)degree, .chunk = (uint32_t)chunk,
                       .cfg_parallel = cfg_parallel, .spec = *spec};
    for (int w = 1, k = 0; w <= d->nworkers && k < degree; w++)
        if (!d->busy[w])
            cmd.ranks[k++] = w;
    serve_inflight_t *f = &d->inflight[slot];
    memset(f, 0, sizeof(*f));
    f->id = spec->id, f->user = user, f->degree = degree;
    memcpy(f->ranks, cmd.ranks, sizeof(f->ranks));
    if (!(f->png = malloc(SERVE_MAX_PNG)))
        return tdl_error_raise(TDL_ERR_NOMEM, "dispatch: out of memory");
    f->pair[0] = 0, f->pair[1] = cmd.ranks[0];
    tdl_status_t st = gfc_group_init(&f->back, d->rt, f->pair, 2, SERVE_NS_RESULT ^ spec->id);
    if (st == TDL_OK)
        st = gfc_recv_start(&f->back, 1, spec->id, f->png, SERVE_MAX_PNG, &f->req);
    for (int k = 0; k < degree && st == TDL_OK; k++) {
        int w = cmd.ranks[k];
        st = gfc_send(&d->ctl[w], 1, d->seq[w]++, &cmd, sizeof(cmd));
        d->busy[w] = true;
    }
    if (st != TDL_OK) {
        free(f->png);
        return st;
    }
    f->active = true;
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
        f->status = st;
        f->png_len = st == TDL_OK ? gfc_request_received_bytes(f->req) : 0;
        gfc_request_free(f->req);
        f->req = NULL;
        for (int k = 0; k < f->degree; k++)
            d->busy[f->ranks[k]] = false;
        f->active = false;
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
    free(d->inflight), free(d->pairs), free(d->ctl), free(d->seq), free(d->busy), free(d);
}
