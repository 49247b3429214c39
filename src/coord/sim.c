/* The discrete-event simulator of serving. Events are arrivals (from the trace) and task
 * completions (a binary heap), fed to the coordinator core (coord.h) as the job feeds it; a
 * TASK command it answers finishes after the cost model's estimate. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord/coord.h"
#include "coord/sim.h"

typedef struct sim_ev {
    double t;
    uint64_t seq; /* ties in the order the tasks started */
    int id;
} sim_ev_t;

/* Events that are not a task's end (ids >= 0 are requests). */
enum { EV_TRAIN_STEP = -1, EV_TRAIN_JOINED = -2, EV_TICK = -3 };

/* Training as the simulated workers do it. */
typedef struct sim_train {
    serve_wire_members_t m, next; /* the group; a resize its leader holds for the step's end */
    bool resize, done;
    int64_t steps;
    double since, device_s; /* members x seconds since the group last changed, and before */
    double row_at, row_steps, arrived; /* the timeline's last row; arrivals since it */
} sim_train_t;

typedef struct sim {
    const coord_sim_config_t *cfg;
    coord_t *coord;
    sim_ev_t *heap;
    int nheap;
    uint64_t seq;
    double now;
    double *finish;
    bool *mark; /* workers 0 .. ranks */
    sim_train_t tr;
} sim_t;

static void heap_push(sim_t *s, double t, int id)
{
    int i = s->nheap++;
    sim_ev_t ev = {t, s->seq++, id};
    while (i > 0) {
        int p = (i - 1) / 2;
        sim_ev_t *q = &s->heap[p];
        if (q->t < t || (q->t == t && q->seq < ev.seq))
            break;
        s->heap[i] = *q;
        i = p;
    }
    s->heap[i] = ev;
}

static sim_ev_t heap_pop(sim_t *s)
{
    sim_ev_t top = s->heap[0], last = s->heap[--s->nheap];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= s->nheap)
            break;
        if (c + 1 < s->nheap &&
            (s->heap[c + 1].t < s->heap[c].t ||
             (s->heap[c + 1].t == s->heap[c].t && s->heap[c + 1].seq < s->heap[c].seq)))
            c++;
        if (last.t < s->heap[c].t || (last.t == s->heap[c].t && last.seq < s->heap[c].seq))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    s->heap[i] = last;
    return top;
}

/* The coordinator's commands: a task finishes after its estimate; an answer ends a request; a
 * resize waits for the end of the step under way (its JOINs say the same to the joiners). */
static void take_commands(sim_t *s, int *done)
{
    const coord_cmd_t *cmd;
    while ((cmd = coord_command_next(s->coord))) {
        if (cmd->kind == COORD_CMD_TASK) {
            heap_push(s, s->now + cmd->estimate_s, (int)cmd->request);
        } else if (cmd->kind == COORD_CMD_ANSWER) {
            s->finish[cmd->request] = cmd->finish_s;
            (*done)++;
        } else if (cmd->kind == COORD_CMD_RESIZE) {
            s->tr.next = *cmd->members;
            s->tr.resize = true;
        }
    }
}

/* ---- training -------------------------------------------------------------------------------- */

static void account(sim_t *s)
{
    s->tr.device_s += s->tr.m.n * (s->now - s->tr.since);
    s->tr.since = s->now;
}

static tdl_status_t report(sim_t *s, uint32_t kind, int w)
{
    serve_wire_report_t r = {
        .kind = kind, .rank = w, .members = (int)s->tr.m.n, .step = s->tr.steps, .loss = NAN};
    if (kind == SERVE_REPORT_LEFT) /* as tidal run's members: -1 once training is over */
        r.members = s->tr.done ? -1 : 0;
    return coord_report(s->coord, s->now, w, &r);
}

/* Marks m's ranks in s->mark (workers 1 .. ranks), for the membership tests of a resize. */
static void mark(sim_t *s, const serve_wire_members_t *m)
{
    memset(s->mark, 0, ((size_t)s->cfg->ranks + 1) * sizeof(bool));
    for (uint32_t i = 0; i < m->n; i++)
        if (m->ranks[i] <= s->cfg->ranks)
            s->mark[m->ranks[i]] = true;
}

static bool marked(const sim_t *s, int w)
{
    return w <= s->cfg->ranks && s->mark[w];
}

/* A step ended: the leader reports it, then takes the resize it holds, if any (its leavers go
 * now, its joiners get the state before the next step). */
static tdl_status_t train_step_end(sim_t *s, int *done)
{
    sim_train_t *t = &s->tr;
    account(s);
    t->steps++;
    tdl_status_t st = report(s, SERVE_REPORT_STEP, t->m.ranks[0]);
    take_commands(s, done);
    if (st == TDL_OK && s->cfg->train_steps > 0 && t->steps >= s->cfg->train_steps) {
        st = report(s, SERVE_REPORT_DONE, t->m.ranks[0]);
        t->done = true;
        for (uint32_t i = 0; st == TDL_OK && i < t->m.n; i++)
            st = report(s, SERVE_REPORT_LEFT, t->m.ranks[i]);
        t->m.n = 0;
        return st;
    }
    if (st != TDL_OK || !t->resize) {
        heap_push(s, s->now + coord_train_step_s(s->cfg->train, (int)t->m.n), EV_TRAIN_STEP);
        return st;
    }
    t->resize = false;
    bool grows = false;
    mark(s, &t->m);
    for (uint32_t i = 0; i < t->next.n; i++)
        grows |= !marked(s, t->next.ranks[i]);
    mark(s, &t->next);
    for (uint32_t i = 0; st == TDL_OK && i < t->m.n; i++)
        if (!marked(s, t->m.ranks[i]))
            st = report(s, SERVE_REPORT_LEFT, t->m.ranks[i]);
    serve_wire_members_t old = t->m;
    t->m = t->next;
    if (grows) { /* the joiners report once they have the state */
        t->next = old;
        heap_push(s, s->now + coord_train_join_s(s->cfg->train), EV_TRAIN_JOINED);
    } else {
        heap_push(s, s->now + coord_train_step_s(s->cfg->train, (int)t->m.n), EV_TRAIN_STEP);
    }
    return st;
}

static tdl_status_t train_joined(sim_t *s)
{
    sim_train_t *t = &s->tr;
    tdl_status_t st = TDL_OK;
    mark(s, &t->next); /* next: the group before the join */
    for (uint32_t i = 0; st == TDL_OK && i < t->m.n; i++)
        if (!marked(s, t->m.ranks[i]))
            st = report(s, SERVE_REPORT_JOINED, t->m.ranks[i]);
    heap_push(s, s->now + coord_train_step_s(s->cfg->train, (int)t->m.n), EV_TRAIN_STEP);
    return st;
}

/* A timeline row: time, ranks serving and training, requests live, training's step and
 * images/s and the arrivals per second since the last row, requests done. */
static void row(sim_t *s, int done)
{
    sim_train_t *t = &s->tr;
    double dt = s->now - t->row_at;
    if (!s->cfg->timeline || dt < s->cfg->row_s)
        return;
    coord_training_t k;
    coord_training_get(s->coord, &k);
    fprintf(s->cfg->timeline, "%.3f,%d,%d,%d,%lld,%.3f,%.3f,%d\n", s->now, k.serving, k.training,
            coord_live(s->coord), (long long)t->steps,
            (t->steps - t->row_steps) * s->cfg->train->batch / dt, t->arrived / dt, done);
    t->row_at = s->now, t->row_steps = (double)t->steps, t->arrived = 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double nearest_rank(const double *sorted, int n, double p)
{
    int k = (int)ceil(p * n) - 1;
    return sorted[TDL_MAX(0, TDL_MIN(n - 1, k))];
}

static void metrics(const sim_t *s, const coord_workload_request_t *reqs, int n,
                    coord_sim_result_t *res, double *lat)
{
    memset(res, 0, sizeof(*res));
    res->requests = n;
    if (s->cfg->realloc) {
        coord_training_t t;
        coord_training_get(s->coord, &t);
        res->end_s = s->now;
        res->train_device_h = s->tr.device_s / 3600;
        res->train_steps = s->tr.steps;
        res->train_images_per_s =
            s->now > 0 ? (double)s->tr.steps * s->cfg->train->batch / s->now : 0;
        res->moves_to_serve = t.moves_to_serve, res->moves_to_train = t.moves_to_train;
        res->moves_per_h = s->now > 0 ? (t.moves_to_serve + t.moves_to_train) / (s->now / 3600) : 0;
    }
    if (!n)
        return;
    double first = reqs[0].at_ms / 1000.0, last = 0, sum = 0;
    int met = 0;
    for (int i = 0; i < n; i++) {
        double arr = reqs[i].at_ms / 1000.0;
        first = fmin(first, arr);
        last = fmax(last, s->finish[i]);
        lat[i] = s->finish[i] - arr;
        sum += lat[i];
        if (reqs[i].deadline_ms > 0) {
            res->with_deadline++;
            /* a nanosecond of slack for the rounding of sums of costs */
            if (lat[i] > reqs[i].deadline_ms / 1000.0 + 1e-9)
                res->slo_violations++;
            else
                met++;
        } else {
            met++;
        }
    }
    qsort(lat, (size_t)n, sizeof(double), cmp_double);
    res->makespan_s = last - first;
    double span = res->makespan_s > 0 ? res->makespan_s : 1e-12;
    res->throughput_rps = n / span;
    res->goodput_rps = met / span;
    res->mean_s = sum / n;
    res->p50_s = nearest_rank(lat, n, 0.50);
    res->p95_s = nearest_rank(lat, n, 0.95);
    res->p99_s = nearest_rank(lat, n, 0.99);
    res->slo_violation_rate =
        res->with_deadline ? (double)res->slo_violations / res->with_deadline : 0;
    coord_stats_t k;
    coord_stats_get(s->coord, &k);
    res->utilization = k.busy_rank_s / (s->cfg->ranks * span);
    res->tasks = k.tasks;
    res->migrations = k.migrations;
    res->migration_s = k.migration_s;
    res->batches = k.batches, res->batched = k.batched;
}

tdl_status_t coord_sim_run(const coord_sim_config_t *cfg, const coord_workload_request_t *reqs,
                           int n, coord_sim_result_t *result, double *finish_s)
{
    if (!cfg || !cfg->cost || !cfg->policy || cfg->ranks < 1 || cfg->chunk < 1 || n < 0 ||
        (n > 0 && !reqs) || (cfg->realloc && !cfg->train))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "sim: need ranks >= 1, chunk >= 1, a cost "
                                                    "model, a policy (and with co-location a "
                                                    "training model)");
    for (int i = 1; i < n; i++)
        if (reqs[i].at_ms < reqs[i - 1].at_ms)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "sim: the trace is not sorted by at_ms");
    sim_t s;
    memset(&s, 0, sizeof(s));
    s.cfg = cfg;
    size_t nn = (size_t)(n > 0 ? n : 1);
    /* a task a rank (a batch's members each), training, tick */
    s.heap = malloc(((size_t)cfg->ranks * COORD_SCHED_MAX_BATCH + 4) * sizeof(*s.heap));
    s.finish = calloc(nn, sizeof(double));
    s.mark = calloc((size_t)cfg->ranks + 1, sizeof(bool));
    double *lat = malloc(nn * sizeof(double));
    tdl_status_t st = TDL_OK;
    if (!s.heap || !s.finish || !s.mark || !lat) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "sim: out of memory for %d requests", n);
        goto out;
    }
    coord_config_t cc = {.workers = cfg->ranks,
                         .chunk = cfg->chunk,
                         .cost = cfg->cost,
                         .policy = cfg->policy,
                         .batch_rows = cfg->batch_rows,
                         .admit_max = cfg->admit_max, /* 0: as tidal serve */
                         .realloc = cfg->realloc,
                         .realloc_opts = cfg->realloc_opts,
                         .min_train = cfg->min_train,
                         .min_serve = cfg->min_serve,
                         .fixed_weights = true,
                         .event_log = cfg->event_log};
    if ((st = coord_create(&cc, &s.coord)) != TDL_OK)
        goto out;
    double tick = cfg->tick_s > 0 ? cfg->tick_s : 0.02;
    if (cfg->realloc) { /* every worker trains at first; the coordinator decides from the start */
        s.tr.m = (serve_wire_members_t){.n = (uint32_t)cfg->ranks, .root = 1};
        for (int w = 1; w <= cfg->ranks; w++)
            s.tr.m.ranks[w - 1] = (uint16_t)w;
        heap_push(&s, coord_train_step_s(cfg->train, cfg->ranks), EV_TRAIN_STEP);
        heap_push(&s, 0, EV_TICK);
        if (cfg->timeline)
            fprintf(cfg->timeline,
                    "t_s,serving,training,live,step,train_images_per_s,arrivals_per_s,done\n");
    }
    int next = 0, admitted = 0, done = 0; /* arrived: [0, next); in the queue: [admitted, next) */
    /* until the trace is served, and training (when it has a last step) has ended */
    bool training = cfg->realloc && cfg->train_steps > 0;
    while (st == TDL_OK && (done < n || (training && !s.tr.done))) {
        double ta = next < n ? reqs[next].at_ms / 1000.0 : INFINITY;
        double te = s.nheap ? s.heap[0].t : INFINITY;
        if (isinf(ta) && isinf(te)) {
            st = tdl_error_raise(TDL_ERR_INTERNAL,
                                 "sim: policy %s left %d requests waiting with every rank idle "
                                 "(a degree wider than the %d ranks?)",
                                 cfg->policy->name, coord_live(s.coord), cfg->ranks);
            break;
        }
        if (ta < te) { /* completions at the same time go first: they free ranks */
            next++;
            s.now = ta;
            s.tr.arrived++;
        } else {
            sim_ev_t ev = heap_pop(&s);
            s.now = ev.t;
            if (ev.id >= 0) {
                st = coord_task_finished(s.coord, ev.t, (uint64_t)ev.id, true, NULL, 0);
            } else if (ev.id == EV_TRAIN_STEP) {
                st = train_step_end(&s, &done);
            } else if (ev.id == EV_TRAIN_JOINED) {
                st = train_joined(&s);
            } else { /* the coordinator's turn; the next one only while there is work */
                st = coord_tick(s.coord, s.now, next - admitted);
                row(&s, done);
                if (next < n || coord_live(s.coord) > 0 || (training && !s.tr.done))
                    heap_push(&s, s.now + tick, EV_TICK);
            }
        }
        if (st == TDL_OK)
            take_commands(&s, &done);
        /* the policy sees a few requests per rank, the rest wait in the queue, as in the job;
         * their deadlines count from their arrival */
        while (st == TDL_OK && admitted < next && coord_admits(s.coord)) {
            serve_request_params_t p;
            coord_workload_params(&reqs[admitted], &p);
            st = coord_request_arrive_at(s.coord, s.now, reqs[admitted].at_ms / 1000.0, &p, NULL);
            admitted++;
            if (st == TDL_OK)
                take_commands(&s, &done);
        }
    }
    if (cfg->realloc)
        account(&s);
    if (st == TDL_OK) {
        metrics(&s, reqs, n, result, lat);
        if (finish_s)
            memcpy(finish_s, s.finish, (size_t)n * sizeof(double));
    }
out:
    coord_free(s.coord);
    free(lat);
    free(s.finish);
    free(s.mark);
    free(s.heap);
    return st;
}
