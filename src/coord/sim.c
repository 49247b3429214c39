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

typedef struct sim {
    const coord_sim_config_t *cfg;
    coord_t *coord;
    sim_ev_t *heap;
    int nheap;
    uint64_t seq;
    double now;
    double *finish;
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

/* The coordinator's commands: a task finishes after its estimate; an answer ends a request. */
static void take_commands(sim_t *s, int *done)
{
    const coord_cmd_t *cmd;
    while ((cmd = coord_command_next(s->coord))) {
        if (cmd->kind == COORD_CMD_TASK) {
            heap_push(s, s->now + cmd->estimate_s, (int)cmd->request);
        } else if (cmd->kind == COORD_CMD_ANSWER) {
            s->finish[cmd->request] = cmd->finish_s;
            (*done)++;
        }
    }
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
}

tdl_status_t coord_sim_run(const coord_sim_config_t *cfg, const coord_workload_request_t *reqs,
                           int n, coord_sim_result_t *result, double *finish_s)
{
    if (!cfg || !cfg->cost || !cfg->policy || cfg->ranks < 1 || cfg->chunk < 1 || n < 0 ||
        (n > 0 && !reqs))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "sim: need ranks >= 1, chunk >= 1, a cost "
                                                    "model and a policy");
    for (int i = 1; i < n; i++)
        if (reqs[i].at_ms < reqs[i - 1].at_ms)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "sim: the trace is not sorted by at_ms");
    sim_t s;
    memset(&s, 0, sizeof(s));
    s.cfg = cfg;
    size_t nn = (size_t)(n > 0 ? n : 1);
    s.heap = malloc(((size_t)cfg->ranks + 1) * sizeof(*s.heap));
    s.finish = calloc(nn, sizeof(double));
    double *lat = malloc(nn * sizeof(double));
    tdl_status_t st = TDL_OK;
    if (!s.heap || !s.finish || !lat) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "sim: out of memory for %d requests", n);
        goto out;
    }
    coord_config_t cc = {.workers = cfg->ranks,
                         .chunk = cfg->chunk,
                         .cost = cfg->cost,
                         .policy = cfg->policy,
                         .admit_max = INT32_MAX};
    if ((st = coord_create(&cc, &s.coord)) != TDL_OK)
        goto out;
    int next = 0, done = 0;
    while (st == TDL_OK && done < n) {
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
            serve_request_params_t p;
            coord_workload_params(&reqs[next++], &p);
            s.now = ta;
            st = coord_request_arrive(s.coord, ta, &p, NULL);
        } else {
            sim_ev_t ev = heap_pop(&s);
            s.now = ev.t;
            st = coord_task_finished(s.coord, ev.t, (uint64_t)ev.id, true, NULL, 0);
        }
        if (st == TDL_OK)
            take_commands(&s, &done);
    }
    if (st == TDL_OK) {
        metrics(&s, reqs, n, result, lat);
        if (finish_s)
            memcpy(finish_s, s.finish, (size_t)n * sizeof(double));
    }
out:
    coord_free(s.coord);
    free(lat);
    free(s.finish);
    free(s.heap);
    return st;
}
