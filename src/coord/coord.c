/* The coordinator core (coord.h): requests through the scheduler to TASK commands, finished
 * tasks to ANSWERs, and, when co-located, training's membership moved by a reallocation
 * policy at step boundaries. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/coord.h"

enum { ROLE_TRAIN = 0, ROLE_SERVE, ROLE_TO_SERVE, ROLE_TO_TRAIN, ROLE_LOST };

#define COORD_MAX_MOVES 4096 /* moves to serving timed for the summary */

typedef struct coord_req {
    void *handle;
    serve_traj_spec_t spec;
    uint64_t next_seq; /* tasks sent */
    double arrival_s, deadline_s;
    serve_task_kind_t kind; /* of the task running (or run last) */
    int first, last;        /* its first and last world rank */
    int restarts;           /* times it started again after a rank died */
    int replaced;           /* of those, the times its PREPARE has been placed again */
    bool cancel; /* asked to stop at its running task's end */
    /* its answer, once it finished: kept here, so that answering never allocates */
    bool ok, late, cancelled;
    double finish_s;
    void *result;
    size_t result_len;
    char why[SERVE_ERROR_MAX];
} coord_req_t;

/* A command waiting to be taken: its rank lists as offsets into the pool, its membership as an
 * index into the memberships, its text here. */
typedef struct coord_pending {
    coord_cmd_t cmd;
    size_t ranks_at, prev_at, mem_at;
    char text[SERVE_ERROR_MAX];
} coord_pending_t;

struct coord {
    coord_config_t cfg;
    coord_cost_model_t cost;
    coord_sched_t *sched;
    coord_req_t *reqs; /* by request number */
    size_t nreqs, cap;
    uint64_t *answers; /* requests answered and not yet taken, cap of them */
    size_t nanswers, answers_head;
    coord_pending_t *cmds;
    size_t ncmds, head, cmdcap;
    int *pool;
    size_t npool, poolcap;
    serve_wire_members_t *mems; /* the memberships of the commands waiting, each once */
    size_t nmems, memcap;
    coord_cmd_t out; /* the command last taken */
    bool taken;      /* commands were taken since the queue last ran dry (the event log's "end") */
    coord_stats_t stats;
    /* co-location */
    void *pstate;
    int role[SERVE_WIRE_MAX_WORKERS + 1];
    bool moved[SERVE_WIRE_MAX_WORKERS + 1]; /* sent to serving by a resize, not training's end */
    serve_wire_members_t m;                 /* the membership, as of the last resize sent */
    int pending;                            /* reports a resize still waits for */
    double decided_at, last_decide;
    double move_ms[COORD_MAX_MOVES];
    double over_budget[COORD_MAX_MOVES]; /* each move's time over (its step + 10 ms) */
    double over_prev[COORD_MAX_MOVES];   /* the same over (the step before the decision + 10 ms) */
    double last_step_at, step_ms; /* when the last step report came, how long that step took */
    double budget_ms;             /* of the resize in flight: the step before it + 10 ms */
    double flight_start;          /* when the step under way at the decision began */
    bool flight_open;             /* that step's report has not come yet */
    int flight_first;             /* the first of the resize's moves in move_ms */
    int nmoves;
    bool decided_after_start; /* the resize in flight was decided after the first step */
    bool done, seen_step;
    int64_t step, first_step;
    double loss;
    char latest[sizeof(((serve_wire_report_t *)0)->path)];
    int moves_to_serve, moves_to_train;
    /* a regroup after a training member died: who has reported FAILED, and its steps done */
    bool regrouping, orphaned, regrouped; /* regrouped: no step reported since the last one */
    bool failed[SERVE_WIRE_MAX_WORKERS + 1];
    bool died_training[SERVE_WIRE_MAX_WORKERS + 1]; /* since the last regroup: named by the next */
    int64_t failed_step[SERVE_WIRE_MAX_WORKERS + 1];
    int regroups, restarts; /* restarts: training taken up again from a checkpoint */
};

static bool guided(const serve_traj_spec_t *s)
{
    return serve_guided(s->label, s->cfg);
}

/* ---- the event log ----------------------------------------------------------------------------
 * One line an event or command; times with %.17g, so that a replay reads back the very double. */

static void elog(const coord_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void elog(const coord_t *c, const char *fmt, ...)
{
    if (!c->cfg.event_log)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(c->cfg.event_log, fmt, ap);
    va_end(ap);
    fputc('\n', c->cfg.event_log);
}

/* What a replay needs to build the same coordinator: its configuration, the reallocation's
 * options and the cost model as it uses it (trimmed to the model and the ranks). */
static void elog_header(const coord_t *c)
{
    const coord_config_t *g = &c->cfg;
    const coord_realloc_opts_t *o = &g->realloc_opts;
    elog(c,
         "# tidal coordinator events 1: workers=%d chunk=%d max_degree=%d cfg_parallel=%d "
         "admit_max=%d policy=%s realloc=%s min_train=%d min_serve=%d fixed_weights=%d",
         g->workers, g->chunk, g->max_degree, g->cfg_parallel, g->admit_max, g->policy->name,
         g->realloc ? g->realloc->name : "none", g->min_train, g->min_serve, g->fixed_weights);
    elog(c, "# realloc drain=%.17g cooldown=%.17g static_serve=%d day_s=%.17g start_h=%.17g",
         o->drain_s, o->cooldown_s, o->static_serve, o->day_s, o->start_h);
    for (int i = 0; i < o->nperiods; i++)
        elog(c, "# period from_h=%.17g serve=%.17g", o->from_h[i], o->serve[i]);
    if (g->batch_rows > 1) /* (only then: the logs of before batching read the same) */
        elog(c, "# batch rows=%d", g->batch_rows);
    if (g->pixel_scale > 1) /* (likewise: a latent model's VAE) */
        elog(c, "# pixel_scale=%d", g->pixel_scale);
    const coord_cost_model_t *m = &c->cost;
    elog(c,
         "# cost patch=%d per_image=%d migration_latency_s=%.17g migration_bytes_per_s=%.17g "
         "state_bytes_per_token=%.17g",
         m->patch, m->per_image, m->migration_latency_s, m->migration_bytes_per_s,
         m->state_bytes_per_token);
    for (int k = 0; k < COORD_COST_NSTAGES; k++)
        for (int i = 0; i < m->nfits[k]; i++) {
            const coord_cost_fit_t *f = &m->fits[k][i];
            elog(c, "# fit stage=%d degree=%d a=%.17g b=%.17g c=%.17g rel_err=%.17g", k, f->degree,
                 f->a, f->b, f->c, f->rel_err);
        }
    for (int i = 0; i < m->nbatch; i++)
        for (int k = 0; k < m->batch[i].npoints; k++)
            elog(c, "# step_batch tokens=%d images=%d factor=%.17g", m->batch[i].tokens,
                 m->batch[i].images[k], m->batch[i].factor[k]);
}

static void elog_ranks(const coord_t *c, const char *what, const int *r, int n)
{
    fprintf(c->cfg.event_log, " %s", what);
    for (int i = 0; i < n; i++)
        fprintf(c->cfg.event_log, "%c%d", i ? ',' : '=', r[i]);
    if (!n)
        fputs("=-", c->cfg.event_log);
}

static void elog_command(const coord_t *c, const coord_cmd_t *o)
{
    static const char *const kinds[] = {"task",    "answer", "resize",  "join", "reload",
                                        "recover", "leave",  "restart", "drop"};
    FILE *f = c->cfg.event_log;
    if (!f)
        return;
    fprintf(f, "> %s", (unsigned)o->kind < TDL_ARRAY_SIZE(kinds) ? kinds[o->kind] : "?");
    if (o->kind == COORD_CMD_TASK) {
        fprintf(f, " req=%" PRIu64 " task=%d steps=%d move=%d cfgp=%d seq=%" PRIu64 " est=%.17g",
                o->request, (int)o->task.kind, o->task.steps, o->task.move, o->task.cfg_parallel,
                o->task.seq, o->estimate_s);
        elog_ranks(c, "ranks", o->task.ranks, o->task.nranks);
        elog_ranks(c, "prev", o->task.prev, o->task.nprev);
        if (o->task.batch_after > 0)
            fprintf(f, " batch_after=%d", o->task.batch_after);
    } else if (o->kind == COORD_CMD_ANSWER) {
        fprintf(f, " req=%" PRIu64 " ok=%d late=%d finish=%.17g", o->request, o->ok, o->late,
                o->finish_s);
        if (o->cancelled) /* (only then: logs of before cancellation read the same) */
            fputs(" cancelled=1", f);
        fprintf(f, " why=%s", o->why && *o->why ? o->why : "-");
    } else if (o->kind == COORD_CMD_DROP) {
        fprintf(f, " worker=%d req=%" PRIu64, o->worker, o->request);
    } else {
        fprintf(f, " worker=%d", o->worker);
        if (o->members) {
            fprintf(f, " epoch=%u root=%d", o->members->epoch, o->members->root);
            int r[SERVE_WIRE_MAX_WORKERS];
            for (uint32_t i = 0; i < o->members->n; i++)
                r[i] = o->members->ranks[i];
            elog_ranks(c, "members", r, (int)o->members->n);
        }
        if (o->kind == COORD_CMD_RELOAD)
            fprintf(f, " path=%s", o->path);
    }
    fputc('\n', f);
}

/* ---- commands ------------------------------------------------------------------------------ */

static tdl_status_t push(coord_t *c, coord_pending_t **out)
{
    if (c->ncmds == c->cmdcap) {
        size_t cap = c->cmdcap ? 2 * c->cmdcap : 16;
        coord_pending_t *more = tdl_realloc(c->cmds, cap * sizeof(*more));
        if (!more)
            return tdl_error_raise(TDL_ERR_NOMEM, "coordinator: out of memory for commands");
        c->cmds = more, c->cmdcap = cap;
    }
    *out = &c->cmds[c->ncmds++];
    memset(*out, 0, sizeof(**out));
    return TDL_OK;
}

/* n ints into the pool; *at: where they start */
static tdl_status_t pool_put(coord_t *c, const int *v, int n, int add, size_t *at)
{
    if (c->npool + (size_t)n > c->poolcap) {
        size_t cap = TDL_MAX(2 * c->poolcap, c->npool + (size_t)n + 64);
        int *more = tdl_realloc(c->pool, cap * sizeof(*more));
        if (!more)
            return tdl_error_raise(TDL_ERR_NOMEM, "coordinator: out of memory for rank lists");
        c->pool = more, c->poolcap = cap;
    }
    *at = c->npool;
    for (int i = 0; i < n; i++)
        c->pool[c->npool++] = v[i] + add;
    return TDL_OK;
}

static const coord_cmd_t *command_next(coord_t *c);

const coord_cmd_t *coord_command_next(coord_t *c)
{
    const coord_cmd_t *o = command_next(c);
    if (o)
        elog_command(c, o);
    else if (c->taken)
        elog(c, "> end");
    c->taken = o != NULL;
    return o;
}

static const coord_cmd_t *command_next(coord_t *c)
{
    if (c->head == c->ncmds && c->answers_head < c->nanswers) {
        const coord_req_t *r = &c->reqs[c->answers[c->answers_head]];
        c->out = (coord_cmd_t){.kind = COORD_CMD_ANSWER,
                               .request = c->answers[c->answers_head++],
                               .handle = r->handle,
                               .ok = r->ok,
                               .late = r->late,
                               .cancelled = r->cancelled,
                               .arrival_s = r->arrival_s,
                               .finish_s = r->finish_s,
                               .result = r->result,
                               .result_len = r->result_len,
                               .why = r->why};
        return &c->out;
    }
    if (c->head == c->ncmds) {
        c->head = c->ncmds = c->npool = c->nmems = 0;
        c->answers_head = c->nanswers = 0;
        return NULL;
    }
    coord_pending_t *p = &c->cmds[c->head++];
    c->out = p->cmd;
    if (c->out.kind == COORD_CMD_DROP)
        c->out.spec = &c->reqs[c->out.request].spec;
    if (c->out.kind == COORD_CMD_TASK) {
        c->out.spec = &c->reqs[c->out.request].spec;
        c->out.task.ranks = c->pool + p->ranks_at;
        c->out.task.prev = c->pool + p->prev_at; /* never NULL: memcpy of 0 from it is fine */
    }
    if (c->out.kind == COORD_CMD_RESIZE || c->out.kind == COORD_CMD_JOIN ||
        c->out.kind == COORD_CMD_RECOVER || c->out.kind == COORD_CMD_RESTART)
        c->out.members = &c->mems[p->mem_at];
    c->out.why = c->out.path = p->text;
    return &c->out;
}

/* A request finished: its answer waits in the request, and its number in `answers` (grown with
 * the requests), so that an answer never fails for want of memory. */
static void answer(coord_t *c, uint64_t id, double now, bool ok, void *result, size_t len,
                   const char *why)
{
    coord_req_t *r = &c->reqs[id];
    r->ok = ok, r->finish_s = now, r->result = result, r->result_len = len;
    r->late = r->deadline_s > 0 && now > r->deadline_s + 1e-9;
    snprintf(r->why, sizeof(r->why), "%s", why ? why : "");
    c->answers[c->nanswers++] = id;
    ok ? c->stats.done++ : c->stats.failed++;
    c->stats.late += r->late;
}

/* A request cancelled: answered so, counted apart from the failed ones. */
static void answer_cancelled(coord_t *c, uint64_t id, double now)
{
    coord_req_t *r = &c->reqs[id];
    r->ok = false, r->late = false, r->cancelled = true, r->finish_s = now;
    r->result = NULL, r->result_len = 0;
    snprintf(r->why, sizeof(r->why), "cancelled");
    c->answers[c->nanswers++] = id;
    c->stats.cancelled++;
}

/* DROP commands to the executor ranks (the policy's numbering) holding request id's state. */
static tdl_status_t drop_state(coord_t *c, uint64_t id, const int *ranks, int n)
{
    tdl_status_t st = TDL_OK;
    for (int i = 0; i < n && st == TDL_OK; i++) {
        coord_pending_t *p = NULL;
        if ((st = push(c, &p)) == TDL_OK)
            p->cmd = (coord_cmd_t){.kind = COORD_CMD_DROP, .request = id, .worker = ranks[i] + 1};
    }
    return st;
}

/* A membership the commands pushed after it name; *at: its index. */
static tdl_status_t mem_put(coord_t *c, const serve_wire_members_t *m, size_t *at)
{
    if (c->nmems == c->memcap) {
        size_t cap = c->memcap ? 2 * c->memcap : 4;
        serve_wire_members_t *more = tdl_realloc(c->mems, cap * sizeof(*more));
        if (!more)
            return tdl_error_raise(TDL_ERR_NOMEM, "coordinator: out of memory for memberships");
        c->mems = more, c->memcap = cap;
    }
    *at = c->nmems;
    c->mems[c->nmems++] = *m;
    return TDL_OK;
}

/* A command carrying the membership mem_put stored at `at`. */
static tdl_status_t send_members(coord_t *c, int worker, coord_cmd_kind_t kind, size_t at)
{
    coord_pending_t *p;
    tdl_status_t st = push(c, &p);
    if (st == TDL_OK) {
        p->cmd = (coord_cmd_t){.kind = kind, .worker = worker};
        p->mem_at = at;
    }
    return st;
}

_Static_assert(COORD_SCHED_MAX_BATCH == SERVE_MAX_BATCH, "a batch the scheduler forms fits the wire");

/* The scheduler starts a task: a TASK command to its ranks (the policy's rank k is world
 * rank k + 1). */
static tdl_status_t on_start(void *user, const coord_sched_task_t *t)
{
    coord_t *c = user;
    coord_req_t *r = &c->reqs[t->id];
    coord_pending_t *p = NULL;
    size_t ranks_at = 0, prev_at = 0;
    tdl_status_t st = pool_put(c, t->ranks, t->degree, 1, &ranks_at);
    if (st == TDL_OK)
        st = pool_put(c, t->prev, t->nprev, 1, &prev_at);
    if (st == TDL_OK)
        st = push(c, &p);
    if (st != TDL_OK)
        return st;
    serve_task_kind_t kind = t->task == COORD_POLICY_TASK_PREPARE      ? SERVE_TASK_PREPARE
                             : t->task == COORD_POLICY_TASK_STEP_CHUNK ? SERVE_TASK_STEP_CHUNK
                                                                       : SERVE_TASK_DECODE;
    p->cmd = (coord_cmd_t){
        .kind = COORD_CMD_TASK,
        .request = t->id,
        .handle = r->handle,
        .task = {.kind = kind,
                 .steps = t->steps,
                 .nranks = t->degree,
                 .nprev = t->nprev,
                 .move = t->move,
                 .cfg_parallel = c->cfg.cfg_parallel && guided(&r->spec) && t->degree % 2 == 0,
                 .seq = r->next_seq++,
                 .batch_after = t->batch_after},
        .estimate_s = t->estimate_s};
    p->ranks_at = ranks_at, p->prev_at = prev_at;
    r->kind = kind, r->first = t->ranks[0] + 1, r->last = t->ranks[t->degree - 1] + 1;
    if (kind == SERVE_TASK_PREPARE && r->replaced < r->restarts) {
        r->replaced = r->restarts; /* the moment the failover benchmark times */
        TDL_WARN("request %llu placed again on executor ranks %d..%d",
                 (unsigned long long)r->spec.id, r->first, r->last);
    }
    return TDL_OK;
}

/* The scheduler starts a request again from PREPARE: a rank holding its state died. */
static void on_restart(void *user, uint64_t id)
{
    coord_t *c = user;
    coord_req_t *r = &c->reqs[id];
    r->restarts++;
    TDL_INFO("request %llu starts again from its first step (%d of at most %d), its seed %llu "
             "making the same image",
             (unsigned long long)r->spec.id, r->restarts, COORD_MAX_RESTARTS,
             (unsigned long long)r->spec.seed);
}

/* ---- life ------------------------------------------------------------------------------------ */

void coord_cost_trim(coord_cost_model_t *cost, int num_heads, int hidden, int executors,
                     int max_degree)
{
    for (int k = 0; k < COORD_COST_NSTAGES; k++) {
        int kept = 0;
        for (int i = 0; i < cost->nfits[k]; i++) {
            int p = cost->fits[k][i].degree;
            if (p <= executors && p <= max_degree && num_heads % p == 0 && hidden % p == 0)
                cost->fits[k][kept++] = cost->fits[k][i];
        }
        cost->nfits[k] = kept;
    }
}

tdl_status_t coord_create(const coord_config_t *cfg, coord_t **out)
{
    if (!cfg || !cfg->cost || !cfg->policy || cfg->workers < 1 || cfg->chunk < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "coordinator: need workers >= 1, chunk >= 1, "
                                                    "a cost model and a policy");
    if (cfg->realloc && cfg->workers > SERVE_WIRE_MAX_WORKERS)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "coordinator: co-location takes at most %d "
                               "workers, not %d",
                               SERVE_WIRE_MAX_WORKERS, cfg->workers);
    coord_t *c = tdl_calloc(1, sizeof(*c));
    if (!c)
        return tdl_error_raise(TDL_ERR_NOMEM, "coordinator: out of memory");
    c->cfg = *cfg;
    c->last_decide = -INFINITY; /* the first tick decides */
    c->cost = *cfg->cost;
    c->cfg.cost = &c->cost;
    if (c->cfg.admit_max <= 0)
        c->cfg.admit_max = TDL_MAX(16, 4 * cfg->workers);
    c->cfg.min_train = coord_min_train(cfg->workers, cfg->min_train);
    coord_sched_config_t sc = {.ranks = cfg->workers,
                               .chunk = cfg->chunk,
                               .max_degree = cfg->max_degree,
                               .batch_rows = cfg->cfg_parallel ? 0 : cfg->batch_rows,
                               .cost = &c->cost,
                               .policy = cfg->policy,
                               .start = on_start,
                               .restarted = on_restart,
                               .user = c};
    tdl_status_t st = coord_sched_create(&sc, &c->sched);
    for (int w = 1; w <= SERVE_WIRE_MAX_WORKERS && w <= cfg->workers; w++)
        c->role[w] = cfg->realloc ? ROLE_TRAIN : ROLE_SERVE;
    if (st == TDL_OK && cfg->realloc) { /* everyone trains at first */
        c->m = (serve_wire_members_t){.n = (uint32_t)cfg->workers, .root = 1};
        for (int w = 1; st == TDL_OK && w <= cfg->workers; w++) {
            c->m.ranks[w - 1] = (uint16_t)w;
            st = coord_sched_set_available(c->sched, w - 1, false);
        }
        if (st == TDL_OK)
            st = cfg->realloc->create(&cfg->realloc_opts, &c->pstate);
    }
    if (st != TDL_OK) {
        coord_free(c);
        return st;
    }
    elog_header(c);
    *out = c;
    return TDL_OK;
}

void coord_free(coord_t *c)
{
    if (!c)
        return;
    if (c->pstate)
        c->cfg.realloc->destroy(c->pstate);
    coord_sched_free(c->sched);
    free(c->reqs);
    free(c->answers);
    free(c->cmds);
    free(c->pool);
    free(c->mems);
    free(c);
}

/* ---- serving --------------------------------------------------------------------------------- */

void coord_sched_request_of(const serve_request_params_t *p, double now, coord_sched_request_t *out)
{
    bool g = serve_guided(p->label, (float)p->cfg);
    *out = (coord_sched_request_t){.resolution = p->resolution,
                                   .n = p->n * (g ? 2 : 1),
                                   .steps = p->steps,
                                   .step_evals = p->sampler == DIT_SAMPLER_HEUN ? 2 : 1,
                                   .sampler = (int)p->sampler,
                                   .deadline_s =
                                       p->deadline_ms > 0 ? now + (double)p->deadline_ms / 1e3 : 0,
                                   .priority = p->priority};
}

int coord_min_train(int workers, int min_train)
{
    return min_train > 0 ? min_train : TDL_MAX(1, (workers + 9) / 10);
}

bool coord_admits(const coord_t *c)
{
    return coord_sched_live(c->sched) < c->cfg.admit_max;
}

tdl_status_t coord_request_arrive(coord_t *c, double now, const serve_request_params_t *p,
                                  void *handle)
{
    return coord_request_arrive_at(c, now, now, p, handle);
}

tdl_status_t coord_request_arrive_at(coord_t *c, double now, double arrived,
                                     const serve_request_params_t *p, void *handle)
{
    elog(c,
         "arrive %.17g arrived=%.17g label=%d cfg=%.17g n=%d res=%d steps=%d sampler=%d "
         "priority=%d deadline_ms=%" PRId64 " seed=%" PRIu64,
         now, arrived, p->label, p->cfg, p->n, p->resolution, p->steps, (int)p->sampler,
         p->priority, p->deadline_ms, p->seed);
    arrived = fmin(arrived, now);
    serve_request_params_t q = *p; /* as the tasks run it: at the model's resolution */
    q.resolution /= c->cfg.pixel_scale > 1 ? c->cfg.pixel_scale : 1;
    p = &q;
    if (c->nreqs == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        uint64_t *ans = tdl_realloc(c->answers, cap * sizeof(*ans));
        if (ans)
            c->answers = ans;
        coord_req_t *more = ans ? tdl_realloc(c->reqs, cap * sizeof(*more)) : NULL;
        if (!more)
            return tdl_error_raise(TDL_ERR_NOMEM, "coordinator: out of memory for requests");
        c->reqs = more, c->cap = cap;
    }
    coord_req_t *r = &c->reqs[c->nreqs];
    coord_sched_request_t sr;
    coord_sched_request_of(p, arrived, &sr);
    *r = (coord_req_t){.handle = handle, .arrival_s = arrived, .deadline_s = sr.deadline_s};
    r->spec = (serve_traj_spec_t){.id = c->nreqs + 1,
                                  .seed = p->seed,
                                  .n = p->n,
                                  .res = p->resolution,
                                  .steps = p->steps,
                                  .label = p->label,
                                  /* unconditional: guidance would mix two equal halves */
                                  .cfg = (float)serve_cfg_used(p->label, p->cfg),
                                  .sampler = (int)p->sampler,
                                  .priority = p->priority,
                                  .deadline_ms = (double)p->deadline_ms};
    uint64_t id = UINT64_MAX;
    c->nreqs++;
    tdl_status_t st = coord_sched_arrive(c->sched, now, &sr, &id);
    if (id == UINT64_MAX) /* the scheduler did not take it */
        c->nreqs--;
    else
        c->stats.arrived++;
    return st;
}

uint64_t coord_requests(const coord_t *c)
{
    return c->nreqs;
}

tdl_status_t coord_request_cancel(coord_t *c, double now, uint64_t request)
{
    elog(c, "cancel %.17g req=%" PRIu64, now, request);
    if (request >= c->nreqs)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "coordinator: no request %llu to cancel",
                               (unsigned long long)request);
    coord_req_t *r = &c->reqs[request];
    int state = coord_sched_state(c->sched, request);
    if (state < 0 || r->cancel)
        return TDL_OK;
    if (state == 1) { /* at its task's end */
        r->cancel = true;
        return TDL_OK;
    }
    int ranks[COORD_POLICY_MAX_DEGREE], n = 0;
    tdl_status_t st = coord_sched_cancel_waiting(c->sched, request, ranks, &n);
    if (st == TDL_OK) {
        answer_cancelled(c, request, now);
        st = drop_state(c, request, ranks, n);
    }
    return st;
}

/* A cancelled request's task ended (ok: its ranks hold its state): it ends here. */
static tdl_status_t end_cancelled(coord_t *c, double now, uint64_t request, bool held)
{
    int ranks[COORD_POLICY_MAX_DEGREE];
    int n = held ? coord_sched_held(c->sched, request, ranks) : 0;
    tdl_status_t st = drop_state(c, request, ranks, n);
    answer_cancelled(c, request, now);
    tdl_status_t s2 = coord_sched_failed(c->sched, now, request);
    return st == TDL_OK ? s2 : st;
}

tdl_status_t coord_task_finished(coord_t *c, double now, uint64_t request, bool ok, void *result,
                                 size_t result_len)
{
    elog(c, "finish %.17g req=%" PRIu64 " ok=%d", now, request, ok);
    if (request >= c->nreqs)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "coordinator: no request %llu finished a "
                               "task",
                               (unsigned long long)request);
    coord_req_t *r = &c->reqs[request];
    if (r->cancel && !(ok && r->kind == SERVE_TASK_DECODE)) /* a DECODE done: it is done */
        return end_cancelled(c, now, request, ok);
    if (!ok) {
        char why[SERVE_ERROR_MAX];
        snprintf(why, sizeof(why), "its %s task failed on executor ranks %d..%d (see their log)",
                 serve_task_name(r->kind), r->first, r->last);
        answer(c, request, now, false, NULL, 0, why);
        return coord_sched_failed(c->sched, now, request);
    }
    bool last = false;
    tdl_status_t st = coord_sched_finished(c->sched, now, request, &last);
    if (last)
        answer(c, request, now, true, result, result_len, NULL);
    return st;
}

tdl_status_t coord_task_lost(coord_t *c, double now, uint64_t request)
{
    elog(c, "lost %.17g req=%" PRIu64, now, request);
    if (request >= c->nreqs)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "coordinator: no request %llu lost a task",
                               (unsigned long long)request);
    coord_req_t *r = &c->reqs[request];
    if (r->cancel)
        return end_cancelled(c, now, request, true);
    if (r->restarts < COORD_MAX_RESTARTS) {
        TDL_WARN("request %llu: its %s task on executor ranks %d..%d lost a rank",
                 (unsigned long long)r->spec.id, serve_task_name(r->kind), r->first, r->last);
        return coord_sched_restart(c->sched, now, request);
    }
    char why[SERVE_ERROR_MAX];
    snprintf(why, sizeof(why),
             "its %s task on executor ranks %d..%d lost a rank, after %d starts again",
             serve_task_name(r->kind), r->first, r->last, r->restarts);
    answer(c, request, now, false, NULL, 0, why);
    return coord_sched_failed(c->sched, now, request);
}

/* Fails `why` every request that waits with no task running (started_too: also those started). */
static int drop(coord_t *c, double now, bool started_too, const char *why)
{
    uint64_t ids[64];
    int n, total = 0;
    while ((n = coord_sched_drop_waiting(c->sched, started_too, ids, (int)TDL_ARRAY_SIZE(ids))) > 0)
        for (int i = 0; i < n; i++, total++)
            answer(c, ids[i], now, false, NULL, 0, why);
    return total;
}

int coord_shutdown(coord_t *c, double now, const char *why)
{
    elog(c, "shutdown %.17g why=%s", now, why);
    return drop(c, now, false, why);
}

/* The backlog of coord_backlog_s, with the requests at risk. */
static double backlog(const coord_t *c, double now, int queued, int *at_risk)
{
    int live = coord_sched_live(c->sched);
    double sum = coord_sched_backlog_s(c->sched, now, at_risk);
    /* a request still in the queue counts as the average live one, or a small one */
    double each = live ? sum / live
                       : coord_policy_single_rank_s(&c->cost, 32, 1, 2.0 * 20 /* 20 Heun steps */);
    return sum + queued * each;
}

double coord_backlog_s(const coord_t *c, double now, int queued)
{
    return backlog(c, now, queued, NULL);
}

/* ---- co-location ------------------------------------------------------------------------------
 */

/* Training lost every member: the ranks of `next` (idle serving ones) take it up again from the
 * newest checkpoint in the run's folder, or from the start, each loading it itself. */
static tdl_status_t restart_training(coord_t *c, serve_wire_members_t *next, double now)
{
    next->root = next->ranks[0];
    c->orphaned = false;
    c->restarts++;
    c->decided_at = now;
    c->decided_after_start = false; /* not a move of a step's budget */
    c->flight_open = false;
    c->m = *next;
    char ranks[256] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < next->n; i++)
        used += (size_t)snprintf(ranks + used, used < sizeof(ranks) ? sizeof(ranks) - used : 0,
                                 "%s%d", i ? ", " : "", next->ranks[i]);
    TDL_WARN("training starts again on ranks %s from %s (restart %d)", ranks,
             c->latest[0] ? c->latest : "its first step (no checkpoint yet)", c->restarts);
    size_t at;
    tdl_status_t st = mem_put(c, next, &at);
    for (uint32_t i = 0; st == TDL_OK && i < next->n; i++)
        st = send_members(c, next->ranks[i], COORD_CMD_RESTART, at);
    return st;
}

/* Moves ranks toward `target` serving ones: one resize at a time. */
static tdl_status_t reallocate(coord_t *c, int serving, int target, double now)
{
    serve_wire_members_t next = c->m;
    next.epoch++;
    int leader = c->m.n ? c->m.ranks[0] : 0; /* none: every member died (orphaned) */
    next.root = leader;
    int moved = 0;
    if (target > serving && c->orphaned) /* nothing trains: nothing to move */
        return TDL_OK;
    if (target > serving) { /* the last members leave; the leader stays */
        while (serving + moved < target && next.n > 1) {
            int r = next.ranks[--next.n];
            c->role[r] = ROLE_TO_SERVE;
            c->moved[r] = true;
            moved++;
        }
        if (!moved)
            return TDL_OK;
        c->pending = moved;
        c->moves_to_serve += moved;
    } else {
        /* idle serving ranks that hold no request's state join training */
        for (int w = c->cfg.workers; w >= 1 && serving - moved > target; w--) {
            if (c->role[w] != ROLE_SERVE || coord_sched_rank_in_use(c->sched, w - 1))
                continue;
            tdl_status_t st = coord_sched_set_available(c->sched, w - 1, false);
            if (st != TDL_OK)
                return st;
            c->role[w] = ROLE_TO_TRAIN;
            /* keep the list sorted: the state holder is named by root, not by position */
            int i = (int)next.n++;
            while (i > 0 && next.ranks[i - 1] > w) {
                next.ranks[i] = next.ranks[i - 1];
                i--;
            }
            next.ranks[i] = (uint16_t)w;
            moved++;
        }
        if (!moved)
            return TDL_OK;
        c->pending = moved;
        c->moves_to_train += moved;
        if (c->orphaned) /* no member holds the state: the joiners start from the checkpoint */
            return restart_training(c, &next, now);
    }
    size_t at;
    tdl_status_t st = mem_put(c, &next, &at);
    for (uint32_t i = 0; st == TDL_OK && target < serving && i < next.n; i++)
        if (c->role[next.ranks[i]] == ROLE_TO_TRAIN)
            st = send_members(c, next.ranks[i], COORD_CMD_JOIN, at);
    if (st != TDL_OK)
        return st;
    TDL_INFO("realloc: %d serving -> %d (%d training)", serving, target, (int)next.n);
    c->decided_at = now;
    c->decided_after_start = c->seen_step && c->step_ms > 0;
    /* the target: at most the training step under way plus 10 ms (a leaving rank is in that
     * step's all-reduce, so it can leave at its end and no sooner); also kept against the step
     * before the decision, which a step slowed by the burst itself overruns */
    c->budget_ms = c->step_ms + 10;
    c->flight_start = c->last_step_at;
    c->flight_open = target > serving;
    c->flight_first = c->nmoves;
    c->m = next;
    return send_members(c, leader, COORD_CMD_RESIZE, at);
}

static tdl_status_t rank_left(coord_t *c, int w, double now)
{
    TDL_INFO("rank %d serves, %.1f ms after the decision", w, (now - c->decided_at) * 1e3);
    c->role[w] = ROLE_SERVE;
    c->pending--;
    /* moves decided while the workers were still starting up say nothing of a step */
    if (c->nmoves < COORD_MAX_MOVES && c->moved[w] && c->decided_after_start) {
        int k = c->nmoves++;
        c->move_ms[k] = (now - c->decided_at) * 1e3;
        c->over_prev[k] = c->move_ms[k] / c->budget_ms;
        /* until the step under way reports (it normally has by now) */
        c->over_budget[k] =
            c->flight_open ? NAN : c->move_ms[k] / ((c->last_step_at - c->flight_start) * 1e3 + 10);
    }
    c->moved[w] = false;
    tdl_status_t st = coord_sched_set_available(c->sched, w - 1, true);
    return st == TDL_OK ? coord_sched_kick(c->sched, now) : st;
}

static bool in_members(const serve_wire_members_t *m, int w)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->ranks[i] == w)
            return true;
    return false;
}

/* A member died, or a group failed, while a resize to serving was in flight: the resize is void,
 * and its leavers, which were in the group that failed and hold its state, take part in the
 * regroup (appended, as they were the last members). One that had left all the same reports
 * LEFT, and leaves the regroup then. */
static void void_resize(coord_t *c)
{
    for (int w = 1; w <= c->cfg.workers && w <= SERVE_WIRE_MAX_WORKERS && !c->done; w++)
        if (c->role[w] == ROLE_TO_SERVE && c->m.n < SERVE_WIRE_MAX_WORKERS) {
            c->role[w] = ROLE_TRAIN;
            c->m.ranks[c->m.n++] = (uint16_t)w;
            c->moved[w] = false;
            c->pending--;
            c->moves_to_serve--;
            TDL_INFO("rank %d stays in training for the regroup: the resize that moved it is void",
                     w);
        }
}

/* Once every live member of the membership has reported its group failed: the survivors train
 * on together from the state of the one that got furthest. */
static tdl_status_t try_regroup(coord_t *c)
{
    if (!c->regrouping)
        return TDL_OK;
    serve_wire_members_t next = {.epoch = c->m.epoch + 1, .root = -1};
    int64_t best = -1;
    char lost[256] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < c->m.n; i++) {
        int w = c->m.ranks[i];
        if (c->role[w] == ROLE_LOST)
            continue;
        if (!c->failed[w])
            return TDL_OK; /* its report is still to come */
    }
    /* the members and leavers that died since the last regroup */
    for (int w = 1; w <= c->cfg.workers && w <= SERVE_WIRE_MAX_WORKERS; w++)
        if (c->died_training[w]) {
            used += (size_t)snprintf(lost + used, used < sizeof(lost) ? sizeof(lost) - used : 0,
                                     "%s%d", used ? ", " : "", w);
            c->died_training[w] = false;
        }
    for (uint32_t i = 0; i < c->m.n; i++) {
        int w = c->m.ranks[i];
        if (c->role[w] == ROLE_LOST)
            continue;
        next.ranks[next.n++] = (uint16_t)w;
        if (c->failed_step[w] > best)
            best = c->failed_step[w], next.root = w;
    }
    c->regrouping = false;
    for (int w = 1; w <= c->cfg.workers && w <= SERVE_WIRE_MAX_WORKERS; w++)
        c->failed[w] = false;
    if (next.n == 0) {
        c->orphaned = true;
        c->m.n = 0;
        TDL_WARN("training lost every member (ranks %s): serving goes on, and training starts "
                 "again from %s once a serving rank is free",
                 lost, c->latest[0] ? c->latest : "its first step (no checkpoint yet)");
        return TDL_OK;
    }
    /* moves to training become members; moves to serving still report when they leave */
    c->pending = 0;
    for (int w = 1; w <= c->cfg.workers && w <= SERVE_WIRE_MAX_WORKERS; w++)
        c->pending += c->role[w] == ROLE_TO_SERVE;
    c->flight_open = false;
    c->m = next;
    c->regroups++;
    c->regrouped = true;
    TDL_WARN("training lost ranks %s: %u members go on from step %lld, the state of rank %d",
             lost[0] ? lost : "(none)", next.n, (long long)best, next.root);
    size_t at;
    tdl_status_t st = mem_put(c, &next, &at);
    for (uint32_t i = 0; st == TDL_OK && i < next.n; i++) {
        c->role[next.ranks[i]] = ROLE_TRAIN;
        st = send_members(c, next.ranks[i], COORD_CMD_RECOVER, at);
    }
    return st;
}

tdl_status_t coord_rank_lost(coord_t *c, double now, int w, const char *why)
{
    elog(c, "dead %.17g worker=%d why=%s", now, w, why && *why ? why : "-");
    if (w < 1 || w > c->cfg.workers)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "coordinator: no worker %d was lost", w);
    if (coord_sched_lost(c->sched, w - 1))
        return TDL_OK;
    if (w <= SERVE_WIRE_MAX_WORKERS) {
        int role = c->role[w];
        if (role == ROLE_TO_SERVE || role == ROLE_TO_TRAIN) /* its report will not come */
            c->pending--;
        /* (a leaver that dies fails only a group it was still in: its members report) */
        c->died_training[w] = role != ROLE_SERVE;
        c->role[w] = ROLE_LOST;
        if (c->cfg.realloc && in_members(&c->m, w) && !c->done) {
            c->regrouping = true; /* the survivors' reports are on their way */
            void_resize(c);
        }
    }
    coord_sched_stats_t k;
    coord_sched_get_stats(c->sched, &k);
    long before = k.restarts;
    tdl_status_t st = coord_sched_rank_lost(c->sched, now, w - 1);
    coord_sched_get_stats(c->sched, &k);
    TDL_WARN("rank %d is dead (%s): it leaves the pool, %d of %d executors are left; %ld "
             "waiting requests whose state it held start again",
             w, why && *why ? why : "declared by gfc", c->cfg.workers - k.lost, c->cfg.workers,
             k.restarts - before);
    return st == TDL_OK ? try_regroup(c) : st;
}

tdl_status_t coord_report(coord_t *c, double now, int w, const serve_wire_report_t *r)
{
    elog(c, "report %.17g worker=%d kind=%u members=%d step=%" PRId64 " loss=%.17g path=%.*s", now,
         w, r->kind, r->members, r->step, r->loss, (int)strnlen(r->path, sizeof(r->path)), r->path);
    if (!c->cfg.realloc || w < 1 || w > c->cfg.workers)
        return tdl_error_raise(TDL_ERR_CORRUPT, "rank %d sent a report of kind %u %s", w, r->kind,
                               c->cfg.realloc ? "(no such worker)" : "(nothing trains)");
    switch (r->kind) {
    case SERVE_REPORT_STEP:
        if (!c->seen_step)
            c->first_step = r->step - 1, c->seen_step = true;
        else
            c->step_ms = (now - c->last_step_at) * 1e3;
        c->last_step_at = now;
        if (c->flight_open) {
            /* the step the resize waited for has ended: its moves' budget is known */
            c->flight_open = false;
            double budget = (now - c->flight_start) * 1e3 + 10;
            for (int k = c->flight_first; k < c->nmoves; k++)
                c->over_budget[k] = c->move_ms[k] / budget;
        }
        c->step = r->step, c->loss = r->loss;
        if (c->regrouped) {
            c->regrouped = false;
            TDL_WARN("training went on: step %lld done by %d members after the regroup",
                     (long long)r->step, r->members);
        }
        return TDL_OK;
    case SERVE_REPORT_RESUMED:
        if (!c->seen_step)
            c->step = c->first_step = r->step;
        if (!c->latest[0])
            snprintf(c->latest, sizeof(c->latest), "%.*s", (int)sizeof(r->path) - 1, r->path);
        return TDL_OK;
    case SERVE_REPORT_CKPT:
        snprintf(c->latest, sizeof(c->latest), "%.*s", (int)sizeof(r->path) - 1, r->path);
        /* serving ranks reload it between their tasks */
        for (int k = 1; k <= c->cfg.workers && !c->cfg.fixed_weights; k++)
            if (c->role[k] == ROLE_SERVE) {
                coord_pending_t *p;
                tdl_status_t st = push(c, &p);
                if (st != TDL_OK)
                    return st;
                p->cmd = (coord_cmd_t){.kind = COORD_CMD_RELOAD, .worker = k};
                snprintf(p->text, sizeof(p->text), "%s", c->latest);
            }
        return TDL_OK;
    case SERVE_REPORT_DONE:
        c->done = true;
        c->step = TDL_MAX(c->step, r->step);
        for (int k = 1; k <= c->cfg.workers; k++)
            if (c->role[k] == ROLE_TRAIN) {
                c->role[k] = ROLE_TO_SERVE;
                c->pending++;
            }
        return TDL_OK;
    case SERVE_REPORT_LEFT:
        if (c->role[w] == ROLE_TRAIN && r->members < 0 && !c->regrouping) {
            /* training is over: this member's word came before the leader's DONE */
            c->role[w] = ROLE_TO_SERVE;
            c->pending++;
        }
        if (c->role[w] != ROLE_TO_SERVE && !(c->role[w] == ROLE_TRAIN && c->regrouping))
            return tdl_error_raise(TDL_ERR_CORRUPT,
                                   "rank %d reports it left training, which it was not told to", w);
        if (c->role[w] == ROLE_TRAIN && c->regrouping) {
            /* a leaver of a resize made void (void_resize) that had left all the same */
            for (uint32_t i = 0; i < c->m.n; i++)
                if (c->m.ranks[i] == w) {
                    memmove(&c->m.ranks[i], &c->m.ranks[i + 1],
                            (c->m.n - i - 1) * sizeof(uint16_t));
                    c->m.n--;
                    break;
                }
            c->role[w] = ROLE_TO_SERVE;
            c->pending++, c->moves_to_serve++;
            tdl_status_t st = rank_left(c, w, now);
            return st == TDL_OK ? try_regroup(c) : st;
        }
        return rank_left(c, w, now);
    case SERVE_REPORT_JOINED:
        if (c->role[w] != ROLE_TO_TRAIN)
            return tdl_error_raise(
                TDL_ERR_CORRUPT, "rank %d reports it joined training, which it was not told to", w);
        c->role[w] = ROLE_TRAIN;
        c->pending--;
        return TDL_OK;
    case SERVE_REPORT_ERROR:
        return tdl_error_raise(TDL_ERR_PEER, "rank %d failed: %.*s", w, (int)sizeof(r->path) - 1,
                               r->path);
    case SERVE_REPORT_FAILED:
        TDL_INFO("rank %d: its training group (epoch %d) failed after %lld steps: %.*s", w,
                 r->members, (long long)r->step, (int)sizeof(r->path) - 1, r->path);
        if (c->role[w] == ROLE_TO_SERVE && !c->done)
            void_resize(c); /* its group failed before the resize reached it: it holds the state */
        if (!in_members(&c->m, w) || c->done) {
            /* training is over (or it is no member): it goes to serve, as it would have */
            coord_pending_t *p;
            tdl_status_t st = push(c, &p);
            if (st == TDL_OK)
                p->cmd = (coord_cmd_t){.kind = COORD_CMD_LEAVE, .worker = w};
            return st;
        }
        c->regrouping = true;
        c->failed[w] = true;
        c->failed_step[w] = r->step;
        return try_regroup(c);
    default:
        return tdl_error_raise(TDL_ERR_CORRUPT, "rank %d sent a report of kind %u", w, r->kind);
    }
}

tdl_status_t coord_tick(coord_t *c, double now, int queued)
{
    int live = coord_sched_live(c->sched), running = coord_sched_running(c->sched);
    if (!c->cfg.realloc) {
        coord_sched_stats_t k;
        coord_sched_get_stats(c->sched, &k);
        if (live > 0 && running == 0 && k.lost > 0) { /* what needs more ranks than are left */
            elog(c, "tick %.17g queued=%d", now, queued);
            char why[SERVE_ERROR_MAX];
            snprintf(why, sizeof(why),
                     "policy %s cannot place it on the %d executors left alive (%d died)",
                     coord_sched_policy_name(c->sched), c->cfg.workers - k.lost, k.lost);
            int n = drop(c, now, true, why);
            TDL_WARN("%d requests failed: %s", n, why);
            return TDL_OK;
        }
        if (live > 0 && running == 0)
            return tdl_error_raise(TDL_ERR_INTERNAL,
                                   "policy %s leaves %d requests waiting with every executor idle",
                                   coord_sched_policy_name(c->sched), live);
        return TDL_OK;
    }
    if (c->pending > 0 || c->regrouping || now - c->last_decide < 0.02 || c->done)
        return TDL_OK;
    elog(c, "tick %.17g queued=%d", now, queued); /* (ticks that decide nothing go unlogged) */
    c->last_decide = now;
    int serving = 0, lost = 0;
    for (int k = 1; k <= c->cfg.workers; k++) {
        serving += c->role[k] == ROLE_SERVE || c->role[k] == ROLE_TO_SERVE;
        lost += c->role[k] == ROLE_LOST;
    }
    int at_risk = 0;
    /* (one pass over the live requests, skipped for a policy that does not look at them) */
    double work = c->cfg.realloc->split_only ? 0 : backlog(c, now, queued, &at_risk);
    coord_realloc_view_t v = {.now = now,
                              .workers = c->cfg.workers - lost, /* the live ones */
                              .serving = serving,
                              .min_train = c->cfg.min_train,
                              .min_serve = c->cfg.min_serve,
                              .training = true,
                              .waiting = queued + live - running,
                              .running = running,
                              .backlog_s = work,
                              .at_risk = at_risk};
    int target = c->cfg.realloc->decide(c->pstate, &v);
    return target == serving ? TDL_OK : reallocate(c, serving, target, now);
}

/* ---- queries --------------------------------------------------------------------------------- */

int coord_live(const coord_t *c)
{
    return coord_sched_live(c->sched);
}

int coord_running(const coord_t *c)
{
    return coord_sched_running(c->sched);
}

void coord_roles(const coord_t *c, int ranks[SERVE_ROLE_COUNT])
{
    int serve = 0, train = 0;
    coord_sched_stats_t k;
    coord_sched_get_stats(c->sched, &k);
    for (int w = 1; w <= c->cfg.workers && w <= SERVE_WIRE_MAX_WORKERS; w++) {
        serve += c->role[w] == ROLE_SERVE;
        train += c->role[w] == ROLE_TRAIN;
    }
    if (c->cfg.workers > SERVE_WIRE_MAX_WORKERS) /* plain serving, beyond the role table */
        serve = c->cfg.workers - k.lost;
    ranks[SERVE_ROLE_COORDINATOR] = 1;
    ranks[SERVE_ROLE_SERVING] = serve;
    ranks[SERVE_ROLE_TRAINING] = train;
    ranks[SERVE_ROLE_DEAD] = k.lost;
    ranks[SERVE_ROLE_IDLE] = c->cfg.workers - serve - train - k.lost;
}

void coord_training_get(const coord_t *c, coord_training_t *out)
{
    int ranks[SERVE_ROLE_COUNT];
    coord_roles(c, ranks);
    *out = (coord_training_t){.colocated = c->cfg.realloc != NULL,
                              .done = c->done,
                              .seen_step = c->seen_step,
                              .step = c->step,
                              .first_step = c->first_step,
                              .loss = c->loss,
                              .latest = c->latest,
                              .serving = ranks[SERVE_ROLE_SERVING],
                              .training = ranks[SERVE_ROLE_TRAINING],
                              .moves_to_serve = c->moves_to_serve,
                              .moves_to_train = c->moves_to_train,
                              .regroups = c->regroups,
                              .restarts = c->restarts,
                              .orphaned = c->orphaned};
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void coord_move_stats_get(coord_t *c, coord_move_stats_t *out)
{
    /* moves whose step never reported (training ended under them): the step before */
    for (int k = 0; k < c->nmoves; k++)
        if (isnan(c->over_budget[k]))
            c->over_budget[k] = c->over_prev[k];
    qsort(c->move_ms, (size_t)c->nmoves, sizeof(double), cmp_double);
    qsort(c->over_budget, (size_t)c->nmoves, sizeof(double), cmp_double);
    qsort(c->over_prev, (size_t)c->nmoves, sizeof(double), cmp_double);
    c->flight_first = c->nmoves; /* sorted: no open flight may index them any more */
    c->flight_open = false;
    *out = (coord_move_stats_t){
        .n = c->nmoves, .ms = c->move_ms, .over_budget = c->over_budget, .over_prev = c->over_prev};
}

void coord_stats_get(const coord_t *c, coord_stats_t *out)
{
    coord_sched_stats_t k;
    coord_sched_get_stats(c->sched, &k);
    *out = c->stats;
    out->tasks = k.tasks, out->migrations = k.migrations;
    out->busy_rank_s = k.busy_rank_s, out->migration_s = k.migration_s;
    out->restarts = k.restarts, out->lost = k.lost;
    out->batches = k.batches, out->batched = k.batched;
}

const char *coord_policy_name(const coord_t *c)
{
    return coord_sched_policy_name(c->sched);
}

const char *coord_realloc_name(const coord_t *c)
{
    return c->cfg.realloc ? c->cfg.realloc->name : "none";
}
