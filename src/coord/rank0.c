/* Rank 0 of `tidal serve` and `tidal run` (job.h): requests from HTTP and a trace go into the
 * coordinator core; its commands go to the executors over gfc (serve_dispatcher_*) and its
 * answers back to the request queue. Alone (no executors), rank 0 samples each request itself,
 * first come first served. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord/job.h"

/* ---- the trace replay thread ----------------------------------------------------------------- */

typedef struct trace_run {
    serve_trace_t trace;
    serve_queue_t *queue;
    double t0;
    pthread_t thread;
    bool started;
    int stop;     /* atomic: the main thread asks the replay to end */
    int finished; /* atomic: every entry was submitted (or refused) */
    size_t submitted, rejected;
} trace_run_t;

static void *trace_main(void *arg)
{
    trace_run_t *tr = arg;
    for (size_t i = 0; i < tr->trace.count; i++) {
        const serve_trace_entry_t *e = &tr->trace.entries[i];
        for (;;) {
            if (__atomic_load_n(&tr->stop, __ATOMIC_ACQUIRE))
                goto out;
            double left = tr->t0 + (double)e->at_ms * 1e-3 - tdl_clock_s();
            if (left <= 0)
                break;
            usleep((useconds_t)(TDL_MIN(left, 0.05) * 1e6));
        }
        char id[SERVE_ID_MAX + 1];
        tdl_status_t st = serve_queue_submit(tr->queue, &e->params, SERVE_SOURCE_TRACE, id);
        if (st == TDL_OK) {
            tr->submitted++;
            TDL_DEBUG("trace line %ld: request %s at %lld ms", e->line, id, (long long)e->at_ms);
        } else {
            if (st == TDL_ERR_MISMATCH) /* the queue did not count it */
                serve_queue_count_rejected(tr->queue, SERVE_SOURCE_TRACE);
            tr->rejected++;
            TDL_WARN("trace line %ld: refused: %s", e->line, tdl_error_get());
        }
    }
out:
    __atomic_store_n(&tr->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- a request's events ------------------------------------------------------------------ */

/* A task_started or task_finished event of a task of `steps` steps from step `from` on rank 0
 * alone (seconds < 0: not finished). */
static void job_event(serve_queue_t *q, serve_job_t *job, const char *name, const char *task,
                      int steps, int from, double seconds)
{
    char json[256];
    int n = snprintf(json, sizeof(json),
                     "{\"task\": \"%s\", \"steps\": %d, \"from_step\": %d, \"degree\": 1, "
                     "\"ranks\": [0]",
                     task, steps, from);
    if (seconds >= 0)
        snprintf(json + n, sizeof(json) - (size_t)n, ", \"seconds\": %.6f}", seconds);
    else
        snprintf(json + n, sizeof(json) - (size_t)n, "}");
    serve_job_event(q, job, name, json);
}

/* ---- alone: rank 0 samples the requests itself, batched a step at a time -------------------
 * Requests of one resolution and one sampler share the model's passes (serve_task_step_batch):
 * one joins the batch at any step, while its rows fit in --max-batch, and leaves it when its
 * last step is done, cancelled, or failed. A request of another kind waits, at the head of the
 * queue, for the batch to empty. Each step of a request is a task of its own (its events, and
 * the boundary where a cancel takes effect); an image is the same whatever shared its batch. */

typedef struct alone_req {
    serve_job_t *job;
    const serve_request_params_t *p;
    int *labels;
    float *img;
    float cfg;
    int step;
    double t0;
} alone_req_t;

typedef struct alone {
    dit_model_t *m;
    const dit_vae_t *vae; /* a latent model's decoder, or NULL */
    int scale;            /* requests' resolution over the model's (the VAE's upscale) */
    serve_queue_t *q;
    bool batching;
    alone_req_t *a;
    serve_traj_t *trajs; /* a step's view of each request, for serve_task_step_batch */
    serve_traj_t **tp;
    int *counts;
    int n, cap;
    serve_job_t *held; /* taken from the queue, and then not fitting (a request that came to the
                        * head between a look at it and the taking) */
} alone_t;

static int job_rows(const serve_request_params_t *p)
{
    return serve_cfg_used(p->label, p->cfg) != 1.0 ? 2 * p->n : p->n;
}

static void alone_drop(alone_t *al, int i)
{
    free(al->a[i].labels);
    free(al->a[i].img);
    al->a[i] = al->a[--al->n];
}

static void alone_fail(alone_t *al, int i, const char *what)
{
    char why[SERVE_ERROR_MAX];
    snprintf(why, sizeof(why), "%s: %s", what, tdl_error_get());
    TDL_WARN("request %s: %s", al->a[i].p->id, why);
    serve_job_fail(al->q, al->a[i].job, why);
    alone_drop(al, i);
}

/* Whether job may join the batch now (rows: the batch's). */
static bool alone_fits(const alone_t *al, const serve_request_params_t *p, int rows)
{
    if (al->n == 0)
        return true;
    const serve_request_params_t *b = al->a[0].p;
    return al->batching && p->resolution == b->resolution && p->sampler == b->sampler &&
           rows + job_rows(p) <= al->m->max_batch;
}

/* Takes job into the batch: its noise (the PREPARE). */
static void alone_admit(alone_t *al, serve_job_t *job)
{
    const serve_request_params_t *p = serve_job_params(job);
    int res = p->resolution / al->scale;
    size_t per = (size_t)al->m->config.in_channels * res * res;
    if (al->n == al->cap) {
        int cap = al->cap ? 2 * al->cap : 8;
        alone_req_t *a = tdl_realloc(al->a, (size_t)cap * sizeof(*a));
        if (a)
            al->a = a;
        serve_traj_t *tj = tdl_realloc(al->trajs, (size_t)cap * sizeof(*tj));
        if (tj)
            al->trajs = tj;
        serve_traj_t **tp = tdl_realloc(al->tp, (size_t)cap * sizeof(*tp));
        if (tp)
            al->tp = tp;
        int *cn = tdl_realloc(al->counts, (size_t)cap * sizeof(int));
        if (cn)
            al->counts = cn;
        if (!a || !tj || !tp || !cn) {
            serve_job_fail(al->q, job, "out of memory for the batch");
            return;
        }
        al->cap = cap;
    }
    alone_req_t *r = &al->a[al->n];
    *r = (alone_req_t){.job = job,
                       .p = p,
                       .labels = malloc((size_t)p->n * sizeof(int)),
                       .img = malloc((size_t)p->n * per * sizeof(float)),
                       /* unconditional: guidance would mix two equal halves */
                       .cfg = (float)serve_cfg_used(p->label, p->cfg),
                       .t0 = tdl_clock_s()};
    if (!r->labels || !r->img) {
        free(r->labels), free(r->img);
        serve_job_fail(al->q, job, "out of memory for its images");
        return;
    }
    for (int i = 0; i < p->n; i++)
        r->labels[i] = p->label;
    job_event(al->q, job, "task_started", "prepare", 0, 0, -1);
    dit_sampler_noise(r->img, p->n, per, p->seed, 0);
    job_event(al->q, job, "task_finished", "prepare", 0, 0, tdl_clock_s() - r->t0);
    al->n++;
}

/* The last step done: the PNG (the DECODE), the answer. */
static void alone_finish(alone_t *al, int i)
{
    alone_req_t *r = &al->a[i];
    const serve_request_params_t *p = r->p;
    double td = tdl_clock_s();
    job_event(al->q, r->job, "task_started", "decode", 0, p->steps, -1);
    int res = p->resolution / al->scale;
    serve_traj_t t = {.spec = {.n = p->n, .res = res, .steps = p->steps},
                      .channels = al->m->config.in_channels,
                      .n = p->n,
                      .res = res,
                      .step = p->steps,
                      .prepared = true,
                      .x = r->img};
    if (serve_task_decode(&t, al->vae, 0) != TDL_OK) {
        alone_fail(al, i, al->vae ? "decoding failed" : "encoding failed");
        return;
    }
    unsigned char *png = t.png;
    size_t len = t.png_len;
    job_event(al->q, r->job, "task_finished", "decode", 0, p->steps, tdl_clock_s() - td);
    TDL_INFO("request %s: %d image(s) of %d, label %d, %d steps, cfg %.2f, seed %llu: %.3f s", p->id,
             p->n, p->resolution, p->label, p->steps, r->cfg, (unsigned long long)p->seed,
             tdl_clock_s() - r->t0);
    serve_job_done(al->q, r->job, png, len);
    alone_drop(al, i);
}

/* One turn: requests in (admit: from the queue too), cancels out, one step of the batch.
 * Returns whether there was anything to do. */
static bool alone_turn(alone_t *al, bool admit)
{
    int rows = 0;
    for (int i = 0; i < al->n; i++)
        rows += job_rows(al->a[i].p);
    for (;;) {
        serve_job_t *job = al->held;
        al->held = NULL;
        /* the head joins when it fits; else it waits in the queue, which counts it */
        serve_request_params_t head;
        if (!job && admit && al->n && serve_queue_head(al->q, &head) && !alone_fits(al, &head, rows))
            break;
        if (!job && (!admit || serve_queue_pop(al->q, al->n ? 0 : 200, &job) != TDL_OK))
            break;
        const serve_request_params_t *p = serve_job_params(job);
        if (!alone_fits(al, p, rows)) {
            al->held = job;
            break;
        }
        rows += job_rows(p);
        alone_admit(al, job);
    }
    for (int i = al->n - 1; i >= 0; i--)
        if (serve_job_cancel_asked(al->q, al->a[i].job)) {
            TDL_INFO("request %s: cancelled after %d of %d steps", al->a[i].p->id, al->a[i].step,
                     al->a[i].p->steps);
            serve_job_cancelled(al->q, al->a[i].job);
            alone_drop(al, i);
        }
    if (!al->n)
        return al->held != NULL;
    double ts = tdl_clock_s();
    for (int i = 0; i < al->n; i++) {
        alone_req_t *r = &al->a[i];
        const serve_request_params_t *p = r->p;
        al->trajs[i] = (serve_traj_t){.spec = {.seed = p->seed,
                                               .n = p->n,
                                               .res = p->resolution / al->scale,
                                               .steps = p->steps,
                                               .label = p->label,
                                               .cfg = r->cfg,
                                               .sampler = (int)p->sampler},
                                      .channels = al->m->config.in_channels,
                                      .n = p->n,
                                      .res = p->resolution / al->scale,
                                      .step = r->step,
                                      .prepared = true,
                                      .x = r->img};
        al->tp[i] = &al->trajs[i], al->counts[i] = 1;
        job_event(al->q, r->job, "task_started", "step_chunk", 1, r->step, -1);
    }
    serve_queue_observe_batch(al->q, al->n);
    if (serve_task_step_batch(al->tp, al->n, al->m, NULL, false, al->counts) != TDL_OK) {
        while (al->n)
            alone_fail(al, al->n - 1, "sampling failed");
        return true;
    }
    double took = tdl_clock_s() - ts;
    for (int i = al->n - 1; i >= 0; i--) {
        alone_req_t *r = &al->a[i];
        job_event(al->q, r->job, "task_finished", "step_chunk", 1, r->step, took);
        if (++r->step == r->p->steps)
            alone_finish(al, i);
    }
    return true;
}

/* What is left at the end: the batch's requests run to their end (as the one request being
 * sampled did), and the one held back. */
static void alone_drain(alone_t *al)
{
    while (alone_turn(al, false))
        ;
    free(al->a);
    free(al->trajs), free(al->tp), free(al->counts);
    al->a = NULL, al->trajs = NULL, al->tp = NULL, al->counts = NULL;
}

/* ---- rank 0 with executors: the coordinator's edges -------------------------------------------
 */

/* A request's task under way, for its events: what it is, and when it was sent. */
typedef struct rank0_task {
    void *handle;
    char json[96 + 8 * SERVE_MAX_DEGREE]; /* its task_started data, less the closing brace */
    double sent_s;
    int steps_done;
} rank0_task_t;

/* Seconds rank 0 waits, after a failure, for the tasks in flight before it stops the executors. */
#define RANK0_DRAIN_S 30.0

typedef struct rank0 {
    coord_t *co;
    rank0_task_t *tasks; /* by request number */
    size_t ntasks;
    serve_dispatcher_t *d;
    serve_queue_t *q;
    coord_colocate_t *coloc;
    FILE *log;  /* --request-log */
    FILE *elog; /* --event-log */
    double t0;
    int dead_seen; /* gfc's count of deaths at the last look */
    int batch_left; /* members of the batched chunk under dispatch still to come */
} rank0_t;

static double now_of(const rank0_t *r)
{
    return tdl_clock_s() - r->t0;
}

static void log_answer(rank0_t *r, const coord_cmd_t *cmd)
{
    const serve_request_params_t *p = serve_job_params(cmd->handle);
    if (cmd->ok)
        TDL_INFO("request %s: done, %.3f s after it arrived", p->id,
                 cmd->finish_s - cmd->arrival_s);
    if (!r->log)
        return;
    fprintf(r->log,
            "{\"seq\": %llu, \"id\": \"%s\", \"resolution\": %d, \"arrival_s\": %.6f, "
            "\"finish_s\": %.6f, \"latency_s\": %.6f, \"ok\": %s}\n",
            (unsigned long long)cmd->request, p->id, p->resolution, cmd->arrival_s, cmd->finish_s,
            cmd->finish_s - cmd->arrival_s, cmd->ok ? "true" : "false");
    fflush(r->log);
}

/* The record of request `id` (grown as requests come); NULL without memory. */
static rank0_task_t *task_of(rank0_t *r, uint64_t id)
{
    if (id >= r->ntasks) {
        size_t n = TDL_MAX((size_t)id + 1, 2 * r->ntasks);
        rank0_task_t *t = tdl_realloc(r->tasks, n * sizeof(*t));
        if (!t)
            return NULL;
        memset(t + r->ntasks, 0, (n - r->ntasks) * sizeof(*t));
        r->tasks = t, r->ntasks = n;
    }
    return &r->tasks[id];
}

/* A TASK as it is sent: its task_started event. */
static void task_sent(rank0_t *r, const coord_cmd_t *cmd)
{
    rank0_task_t *t = task_of(r, cmd->request);
    if (!t)
        return;
    t->handle = cmd->handle;
    t->sent_s = tdl_clock_s();
    int n = snprintf(t->json, sizeof(t->json),
                     "{\"task\": \"%s\", \"steps\": %d, \"from_step\": %d, \"degree\": %d, "
                     "\"moved\": %s, \"ranks\": [",
                     serve_task_name(cmd->task.kind), cmd->task.steps, t->steps_done,
                     cmd->task.nranks, cmd->task.move ? "true" : "false");
    for (int i = 0; i < cmd->task.nranks && n < (int)sizeof(t->json) - 16; i++)
        n += snprintf(t->json + n, sizeof(t->json) - (size_t)n, "%s%d", i ? ", " : "",
                      cmd->task.ranks[i]);
    snprintf(t->json + n, sizeof(t->json) - (size_t)n, "]");
    char ev[sizeof(t->json) + 8];
    snprintf(ev, sizeof(ev), "%s}", t->json);
    serve_job_event(r->q, cmd->handle, "task_started", ev);
    t->steps_done += cmd->task.steps;
}

/* A task reported: its task_finished event. */
static void task_reported(rank0_t *r, uint64_t id, bool ok)
{
    if (id >= r->ntasks || !r->tasks[id].handle)
        return;
    rank0_task_t *t = &r->tasks[id];
    char ev[sizeof(t->json) + 64];
    snprintf(ev, sizeof(ev), "%s, \"ok\": %s, \"seconds\": %.6f}", t->json, ok ? "true" : "false",
             tdl_clock_s() - t->sent_s);
    serve_job_event(r->q, t->handle, "task_finished", ev);
}

/* Carries out what the coordinator decided, in its order. */
static tdl_status_t take_commands(rank0_t *r)
{
    const coord_cmd_t *cmd;
    tdl_status_t st = TDL_OK;
    while ((cmd = coord_command_next(r->co))) {
        tdl_status_t s = TDL_OK;
        serve_ctl_msg_t msg;
        switch (cmd->kind) {
        case COORD_CMD_TASK:
            TDL_DEBUG("request %s: %s%s on ranks %d..%d (%d), estimate %.4f s",
                      serve_job_params(cmd->handle)->id, serve_task_name(cmd->task.kind),
                      cmd->task.move ? " (moved)" : "", cmd->task.ranks[0],
                      cmd->task.ranks[cmd->task.nranks - 1], cmd->task.nranks, cmd->estimate_s);
            if (cmd->task.kind == SERVE_TASK_STEP_CHUNK && r->batch_left-- == 0) {
                r->batch_left = cmd->task.batch_after; /* the head of a batch, or alone */
                /* a batch goes out whole or not at all: its executors wait for every member */
                if (cmd->task.batch_after > 0 &&
                    serve_dispatcher_room(r->d) <= cmd->task.batch_after) {
                    s = tdl_error_raise(TDL_ERR_INTERNAL,
                                        "dispatch: room for %d more tasks in flight, a batch of "
                                        "%d needs as many",
                                        serve_dispatcher_room(r->d), cmd->task.batch_after + 1);
                    break;
                }
                serve_queue_observe_batch(r->q, cmd->task.batch_after + 1);
            }
            task_sent(r, cmd);
            s = serve_dispatch_task(r->d, cmd->spec, &cmd->task, (void *)(uintptr_t)cmd->request);
            break;
        case COORD_CMD_ANSWER:
            log_answer(r, cmd);
            if (cmd->request < r->ntasks)
                r->tasks[cmd->request].handle = NULL; /* the job goes */
            if (cmd->ok)
                serve_job_done(r->q, cmd->handle, cmd->result, cmd->result_len);
            else if (cmd->cancelled)
                serve_job_cancelled(r->q, cmd->handle);
            else
                serve_job_fail(r->q, cmd->handle, cmd->why);
            break;
        case COORD_CMD_DROP:
            if ((s = serve_wire_drop_encode(cmd->spec->id, &msg)) == TDL_OK)
                s = serve_dispatcher_send(r->d, cmd->worker, &msg);
            break;
        case COORD_CMD_RESIZE:
        case COORD_CMD_JOIN:
        case COORD_CMD_RECOVER:
        case COORD_CMD_RESTART:
            s = serve_wire_members_encode(cmd->kind == COORD_CMD_JOIN      ? SERVE_OP_JOIN
                                          : cmd->kind == COORD_CMD_RESIZE  ? SERVE_OP_RESIZE
                                          : cmd->kind == COORD_CMD_RESTART ? SERVE_OP_RESTART
                                                                           : SERVE_OP_RECOVER,
                                          cmd->members, &msg);
            if (s == TDL_OK)
                s = serve_dispatcher_send(r->d, cmd->worker, &msg);
            break;
        case COORD_CMD_LEAVE:
            msg = (serve_ctl_msg_t){.op = SERVE_OP_LEAVE, .len = 0};
            s = serve_dispatcher_send(r->d, cmd->worker, &msg);
            break;
        case COORD_CMD_RELOAD:
            if ((s = serve_wire_reload_encode(cmd->path, &msg)) == TDL_OK)
                s = serve_dispatcher_send(r->d, cmd->worker, &msg);
            break;
        }
        if (st == TDL_OK)
            st = s;
    }
    return st;
}

/* Ranks gfc declared dead since the last look leave the coordinator's pool. */
static tdl_status_t note_deaths(rank0_t *r)
{
    int count = serve_dispatcher_dead_count(r->d); /* cheap: one atomic read per turn */
    if (count == r->dead_seen)
        return TDL_OK;
    r->dead_seen = count;
    int dead[SERVE_WIRE_MAX_WORKERS + 1];
    int n = serve_dispatcher_dead(r->d, dead, (int)TDL_ARRAY_SIZE(dead));
    tdl_status_t st = TDL_OK;
    for (int i = 0; i < n && i < (int)TDL_ARRAY_SIZE(dead) && st == TDL_OK; i++)
        st = coord_rank_lost(r->co, now_of(r), dead[i], serve_dispatcher_why(r->d, dead[i]));
    int ranks[SERVE_ROLE_COUNT];
    coord_roles(r->co, ranks);
    serve_queue_set_ranks(r->q, ranks);
    return st == TDL_OK ? take_commands(r) : st;
}

/* Reported tasks and workers' reports into the coordinator; *nout: how many came. */
static tdl_status_t collect(rank0_t *r, int *nout)
{
    /* the deaths first: a task that failed for one is placed again without the dead rank */
    tdl_status_t st = note_deaths(r);
    serve_inflight_t fin[SERVE_MAX_DEGREE * 4];
    int n = st == TDL_OK ? serve_dispatcher_poll(r->d, fin, (int)TDL_ARRAY_SIZE(fin)) : 0;
    for (int i = 0; i < n; i++) {
        bool ok = fin[i].status == TDL_OK;
        uint64_t id = (uintptr_t)fin[i].user;
        tdl_status_t s;
        task_reported(r, id, ok);
        if (!ok)
            free(fin[i].png);
        if (fin[i].status == TDL_ERR_PEER) {
            s = coord_task_lost(r->co, now_of(r), id);
        } else {
            if (!ok)
                TDL_WARN("%s", fin[i].why);
            s = coord_task_finished(r->co, now_of(r), id, ok, ok ? fin[i].png : NULL,
                                    ok ? fin[i].png_len : 0);
        }
        if (st == TDL_OK)
            st = s;
    }
    if (st == TDL_OK)
        st = take_commands(r);
    unsigned char buf[SERVE_USER_BYTES];
    serve_wire_report_t rep;
    int w;
    size_t len;
    while (st == TDL_OK && r->coloc && serve_dispatcher_poll_status(r->d, &w, buf, &len)) {
        n++;
        if ((st = serve_wire_report_decode(buf, len, &rep)) != TDL_OK) {
            st = tdl_error_raise(st, "rank %d: %s", w, tdl_error_get());
            break;
        }
        coord_colocate_report(r->coloc, &rep);
        if ((st = coord_report(r->co, now_of(r), w, &rep)) == TDL_OK)
            st = take_commands(r);
    }
    *nout = n;
    return st;
}

/* One turn of the loop: finished work in, waiting requests admitted, time's decisions. */
static tdl_status_t turn(rank0_t *r, bool admit, int *nout)
{
    int got = 0, admitted = 0;
    tdl_status_t st = collect(r, &got);
    /* the policy sees up to a few requests per executor; the rest wait in the queue, which
     * answers 503 when it is full */
    serve_job_t *job;
    while (st == TDL_OK && admit && coord_admits(r->co) &&
           serve_queue_pop(r->q, 0, &job) == TDL_OK) {
        /* its deadline counts from its arrival in the queue, not from here */
        serve_job_set_tag(job, coord_requests(r->co)); /* the number it gets */
        if ((st = coord_request_arrive_at(r->co, now_of(r), serve_job_submit_s(job) - r->t0,
                                          serve_job_params(job), job)) == TDL_OK)
            st = take_commands(r);
        else
            serve_job_fail(r->q, job, "the coordinator could not take it");
        admitted++;
    }
    /* cancels of requests the coordinator has: at once if waiting, else at their task's end */
    serve_job_t *cancel[16];
    int nc;
    while (st == TDL_OK && (nc = serve_queue_take_cancels(r->q, cancel, 16)) > 0)
        for (int i = 0; i < nc && st == TDL_OK; i++)
            if ((st = coord_request_cancel(r->co, now_of(r), serve_job_tag(cancel[i]))) == TDL_OK)
                st = take_commands(r);
    serve_stats_t s;
    serve_queue_stats(r->q, &s);
    if (st == TDL_OK && r->coloc)
        coord_colocate_row(r->coloc, r->co, r->q, now_of(r), false);
    if (st == TDL_OK && (st = coord_tick(r->co, now_of(r), s.queued)) == TDL_OK)
        st = take_commands(r);
    *nout = got + admitted;
    return st;
}

static void print_latency(const char *what, serve_queue_t *q, serve_source_t src,
                          const serve_counts_t *k, double elapsed)
{
    double *lat = NULL;
    size_t nl = 0;
    if (serve_queue_latencies(q, src, &lat, &nl) != TDL_OK)
        nl = 0;
    char cancelled[48] = "";
    if (k->cancelled)
        snprintf(cancelled, sizeof(cancelled), ", %llu cancelled", (unsigned long long)k->cancelled);
    printf("tidal serve: %s: %llu requests, %llu done, %llu failed, %llu rejected%s in %.1f s "
           "(%.2f done/s); latency p50 %.3f s, p95 %.3f s, p99 %.3f s; %llu SLO violations\n",
           what, (unsigned long long)(k->submitted + k->rejected), (unsigned long long)k->done,
           (unsigned long long)k->failed, (unsigned long long)k->rejected, cancelled, elapsed,
           elapsed > 0 ? (double)k->done / elapsed : 0.0, serve_quantile(lat, nl, 0.50),
           serve_quantile(lat, nl, 0.95), serve_quantile(lat, nl, 0.99),
           (unsigned long long)k->slo_violations);
    free(lat);
}

/* The coordinator for `world - 1` executors, from the options and the model. */
static tdl_status_t coordinator_create(const coord_rank0_opts_t *o, int world, const dit_model_t *m,
                                       int pixel_scale, FILE *event_log, coord_t **out)
{
    coord_cost_model_t cost;
    tdl_status_t st = TDL_OK;
    if (o->cost)
        st = coord_cost_model_load(o->cost, &cost);
    else
        coord_cost_model_default(&cost);
    if (st != TDL_OK)
        return st;
    coord_cost_trim(&cost, m->config.num_heads, m->config.hidden_size, world - 1, SERVE_MAX_DEGREE);
    const coord_colocate_opts_t *k = o->colocate;
    coord_config_t cc = {.workers = world - 1,
                         .chunk = o->chunk,
                         .max_degree = SERVE_MAX_DEGREE,
                         .cost = &cost,
                         .policy = coord_policy_find(o->policy),
                         .cfg_parallel = o->cfg_parallel,
                         .batch_rows = o->batching ? m->max_batch : 0,
                         .pixel_scale = pixel_scale,
                         .realloc = k ? k->realloc : NULL,
                         .realloc_opts = k ? k->realloc_opts : (coord_realloc_opts_t){0},
                         .min_train = k ? k->min_train : 0,
                         .min_serve = k ? k->min_serve : 0,
                         .fixed_weights = k && k->fixed,
                         .event_log = event_log};
    if (!cc.policy)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "unknown policy '%s': use one of %s",
                               o->policy ? o->policy : "(none)", coord_policy_names());
    return coord_create(&cc, out);
}

tdl_status_t coord_rank0_run(const coord_rank0_opts_t *o, int world, dit_model_t *m,
                             serve_dispatcher_t *d, volatile sig_atomic_t *stop, bool *bad_input)
{
    const dit_config_t *c = &m->config;
    serve_limits_t lim = {.objective = c->objective,
                          .num_classes = c->num_classes,
                          .max_resolution = o->max_resolution,
                          .default_resolution = 32,
                          .default_steps = o->default_steps,
                          .default_cfg = o->default_cfg,
                          .pixel_scale = o->vae ? dit_vae_upscale(&o->vae->config) : 1};
    int in = c->input_size, scale = serve_pixel_scale(&lim);
    if ((in == 32 || in == 64 || in == 128) && in <= o->max_resolution)
        lim.default_resolution = in;
    lim.default_resolution *= scale;

    *bad_input = false;
    rank0_t r = {.d = d};
    alone_t al = {0};
    serve_http_t *http = NULL;
    trace_run_t tr;
    memset(&tr, 0, sizeof(tr));
    double elapsed = 0;
    bool ok = false;
    tdl_status_t st = TDL_OK;
    if (o->trace && (st = serve_trace_load(o->trace, &lim, &tr.trace)) != TDL_OK) {
        st = tdl_error_raise(st, "--trace: %s", tdl_error_get());
        *bad_input = true;
        goto out;
    }
    if ((st = serve_queue_create(o->queue_max, o->keep_results, &r.q)) != TDL_OK)
        goto out;
    al = (alone_t){.m = m, .vae = o->vae, .scale = scale, .q = r.q, .batching = o->batching};
    serve_queue_set_pixel_scale(r.q, scale);
    if (d) {
        if (o->request_log && !(r.log = fopen(o->request_log, "w"))) {
            st = tdl_error_raise(TDL_ERR_IO, "--request-log %s: %s", o->request_log,
                                 strerror(errno));
            goto out;
        }
        if (o->event_log && !(r.elog = fopen(o->event_log, "w"))) {
            st = tdl_error_raise(TDL_ERR_IO, "--event-log %s: %s", o->event_log, strerror(errno));
            goto out;
        }
        if ((st = coordinator_create(o, world, m, scale, r.elog, &r.co)) != TDL_OK)
            goto out;
        if (o->colocate && (st = coord_colocate_open(o->colocate, world - 1, &r.coloc)) != TDL_OK)
            goto out;
        int ranks[SERVE_ROLE_COUNT];
        coord_roles(r.co, ranks);
        serve_queue_set_ranks(r.q, ranks);
    } else { /* alone, rank 0 coordinates and serves */
        int ranks[SERVE_ROLE_COUNT] = {[SERVE_ROLE_COORDINATOR] = 1, [SERVE_ROLE_SERVING] = 1};
        serve_queue_set_ranks(r.q, ranks);
    }
    if (o->http_on) {
        serve_http_opts_t ho = o->http;
        ho.limits = lim;
        if ((st = serve_http_start(&ho, r.q, &http)) != TDL_OK)
            goto out;
    }
    printf("tidal serve: %s (%zu parameters, %d classes) from %s (%s weights), up to %dx%d, "
           "%d images a pass in %.1f MiB of activations, queue of %d\n",
           c->name, m->num_params, c->num_classes, o->ckpt ? o->ckpt : "the training run",
           o->weights, o->max_resolution, o->max_resolution, m->max_batch,
           (double)dit_model_activation_bytes(m) / 1048576.0, o->queue_max);
    if (o->vae)
        printf("tidal serve: latents of %d channels decoded by a VAE of %zu parameters, %dx: "
               "requests name images of %d, %d or %d pixels\n",
               c->in_channels, o->vae->num_params, scale, 32 * scale, 64 * scale, 128 * scale);
    if (http) {
        /* the address as bound: the port chosen when it said 0 */
        const char *listen = o->http.listen, *colon = strrchr(listen, ':');
        printf("tidal serve: listening on http://%.*s:%d%s\n", (int)(colon - listen), listen,
               serve_http_port(http),
               o->http.token ? " (bearer token required)"
                             : " (no token required: anyone who reaches this address may "
                               "submit; set TIDAL_TOKEN to require one)");
    }
    if (o->trace)
        printf("tidal serve: replaying %zu requests from %s%s\n", tr.trace.count, o->trace,
               o->exit_after_trace ? ", exiting when they are done" : "");
    fflush(stdout);

    tr.queue = r.q;
    r.t0 = tr.t0 = tdl_clock_s();
    if (o->trace) {
        if (pthread_create(&tr.thread, NULL, trace_main, &tr) != 0) {
            st = tdl_error_raise(TDL_ERR_IO, "cannot start the trace thread");
            goto out;
        }
        tr.started = true;
    }
    double last = r.t0;
    uint64_t last_done = UINT64_MAX;
    const char *why = "signal";
    for (;;) {
        if (*stop) {
            why = *stop == SIGINT ? "SIGINT" : "SIGTERM";
            break;
        }
        if (!d) {
            alone_turn(&al, true);
        } else {
            int got = 0;
            if ((st = turn(&r, true, &got)) != TDL_OK)
                goto out;
            if (!got)
                usleep(300);
        }
        double now = tdl_clock_s();
        /* the replay's end first: the counts read after it include its last request */
        bool trace_over = o->trace && __atomic_load_n(&tr.finished, __ATOMIC_ACQUIRE);
        serve_stats_t s;
        serve_queue_stats(r.q, &s);
        uint64_t done = 0, failed = 0, rejected = 0;
        for (int i = 0; i < SERVE_SOURCE_COUNT; i++) {
            done += s.by_source[i].done;
            failed += s.by_source[i].failed;
            rejected += s.by_source[i].rejected;
        }
        if (o->progress_every > 0 && now - last >= o->progress_every) {
            if (done + failed != last_done || s.queued || s.running) {
                char dead[64] = "";
                coord_stats_t k = {0};
                if (r.co)
                    coord_stats_get(r.co, &k);
                if (k.lost)
                    snprintf(dead, sizeof(dead), "  dead ranks %d  restarted %ld", k.lost,
                             k.restarts);
                printf("tidal serve: %8.1f s  done %llu  failed %llu  rejected %llu  queue %d%s\n",
                       now - r.t0, (unsigned long long)done, (unsigned long long)failed,
                       (unsigned long long)rejected, s.queued, dead);
            }
            fflush(stdout);
            last = now;
            last_done = done + failed;
        }
        if (o->max_seconds > 0 && now - r.t0 >= o->max_seconds) {
            why = "--max-seconds";
            break;
        }
        const serve_counts_t *k = &s.by_source[SERVE_SOURCE_TRACE];
        coord_training_t t = {0};
        if (r.co)
            coord_training_get(r.co, &t);
        if (o->exit_after_trace && trace_over &&
            k->done + k->failed + k->cancelled >= k->submitted &&
            (!t.colocated || t.done || (t.orphaned && t.serving == 0))) {
            why = "the trace is done";
            break;
        }
    }
    ok = true;
    if (!d) /* alone: the batch's requests finish, as the one being sampled did */
        alone_drain(&al);
    coord_training_t t = {0};
    if (r.co)
        coord_training_get(r.co, &t);
    if (t.orphaned) /* no rank was left to take training up again */
        st = tdl_error_raise(TDL_ERR_PEER,
                             "training lost every member at step %lld and stood still; resume it "
                             "from %s",
                             (long long)t.step, t.latest[0] ? t.latest : "the start");
    elapsed = tdl_clock_s() - r.t0;
    printf("tidal serve: stopping (%s)\n", why);
    fflush(stdout);
out:
    free(al.a); /* (alone_drain emptied them where the loop ended) */
    free(al.trajs), free(al.tp), free(al.counts);
    char err[1024]; /* kept past the clean-up below */
    snprintf(err, sizeof(err), "%s", st != TDL_OK ? tdl_error_get() : "");
    if (tr.started) {
        __atomic_store_n(&tr.stop, 1, __ATOMIC_RELEASE);
        pthread_join(tr.thread, NULL);
    }
    if (r.q)
        serve_queue_close(r.q, "the server is shutting down");
    serve_http_stop(http); /* after the close: no handler is left waiting */
    if (r.q && ok) {
        serve_stats_t s;
        serve_queue_stats(r.q, &s);
        if (o->trace)
            print_latency("trace", r.q, SERVE_SOURCE_TRACE, &s.by_source[SERVE_SOURCE_TRACE],
                          elapsed);
        if (http)
            print_latency("http", r.q, SERVE_SOURCE_HTTP, &s.by_source[SERVE_SOURCE_HTTP], elapsed);
        fflush(stdout);
    }
    /* the requests the coordinator took and started finish before the executors stop; those
     * it has not started fail now */
    if (r.co) {
        coord_shutdown(r.co, now_of(&r), "the server is shutting down");
        tdl_status_t s = take_commands(&r);
        if (st == TDL_OK && s != TDL_OK)
            st = s, snprintf(err, sizeof(err), "%s", tdl_error_get());
    }
    while (r.co && ok && st == TDL_OK && coord_live(r.co) > 0) {
        int got = 0;
        if ((st = turn(&r, false, &got)) != TDL_OK)
            snprintf(err, sizeof(err), "%s", tdl_error_get());
        else if (!got)
            usleep(300);
    }
    /* and what is still in flight after a failure, for a while: a task that cannot end (a batch
     * whose executors wait for members that were never sent) must not hold the job */
    double drain_until = tdl_clock_s() + RANK0_DRAIN_S;
    while (d && serve_dispatcher_inflight(d) > 0) {
        serve_inflight_t fin[SERVE_MAX_DEGREE * 4];
        int got = serve_dispatcher_poll(d, fin, (int)TDL_ARRAY_SIZE(fin));
        for (int i = 0; i < got; i++)
            free(fin[i].png);
        if (!got && tdl_clock_s() > drain_until) {
            TDL_WARN("%d tasks still in flight after %.0f s: the executors are stopped anyway",
                     serve_dispatcher_inflight(d), RANK0_DRAIN_S);
            break;
        }
        if (!got)
            usleep(300);
    }
    if (r.co) {
        coord_stats_t k;
        coord_stats_get(r.co, &k);
        printf("tidal serve: policy %s: %ld tasks, %ld moves of state, %ld batched chunks (%ld "
               "requests)\n",
               coord_policy_name(r.co), k.tasks, k.migrations, k.batches, k.batched);
        if (k.lost) {
            int dead[SERVE_WIRE_MAX_WORKERS + 1];
            int n = serve_dispatcher_dead(d, dead, (int)TDL_ARRAY_SIZE(dead));
            printf("tidal serve: %d executor rank%s died:", k.lost, k.lost == 1 ? "" : "s");
            for (int i = 0; i < n && i < (int)TDL_ARRAY_SIZE(dead); i++)
                printf(" %d (%s)%s", dead[i], serve_dispatcher_why(d, dead[i]),
                       i + 1 < n ? "," : "");
            printf("; %ld requests started again\n", k.restarts);
        }
        if (r.coloc)
            coord_colocate_finish(r.coloc, r.co, r.q, tdl_clock_s() - r.t0);
    }
    coord_colocate_close(r.coloc);
    coord_free(r.co);
    free(r.tasks);
    if (r.log)
        fclose(r.log);
    if (r.elog)
        fclose(r.elog);
    serve_queue_destroy(r.q);
    serve_trace_free(&tr.trace);
    if (st != TDL_OK)
        return tdl_error_raise(st, "%s", err);
    return TDL_OK;
}
