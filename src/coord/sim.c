/* The discrete-event simulator of serving. Events are arrivals (from the trace) and task
 * completions (a binary heap); after each, the policy is told and its placements start at once. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord/sim.h"

typedef struct sim_ev {
    double t;
    uint64_t seq; /* ties in the order the tasks started */
    int id;
} sim_ev_t;

typedef struct sim {
    const sim_config_t *cfg;
    const workload_request_t *reqs;
    void *pstate;
    bool *busy;
    int nfree, maxdeg;
    policy_request_t *live; /* dense */
    int *live_ranks;        /* maxdeg per live slot */
    int *live_of;           /* request id -> live slot, -1 when not live */
    int nlive;
    int *stamp; /* rank -> generation mark, for set comparisons */
    int gen;
    sim_ev_t *heap;
    int nheap;
    uint64_t seq;
    double now;
    policy_placement_t *buf[2];
    int bufcap;
    int *started; /* request ids started, not yet reported */
    int nstarted;
    double *finish;
    double busy_rank_s, migration_s;
    long tasks, migrations;
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
        if (c + 1 < s->nheap && (s->heap[c + 1].t < s->heap[c].t ||
                                 (s->heap[c + 1].t == s->heap[c].t &&
                                  s->heap[c + 1].seq < s->heap[c].seq)))
            c++;
        if (last.t < s->heap[c].t || (last.t == s->heap[c].t && last.seq < s->heap[c].seq))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    s->heap[i] = last;
    return top;
}

static policy_view_t view_of(const sim_t *s)
{
    return (policy_view_t){.now = s->now,
                           .cost = s->cfg->cost,
                           .nranks = s->cfg->ranks,
                           .busy = s->busy,
                           .nfree = s->nfree,
                           .requests = s->live,
                           .nrequests = s->nlive,
                           .chunk = s->cfg->chunk};
}

static tdl_status_t bad_placement(const sim_t *s, const policy_placement_t *p, const char *why)
{
    return tdl_error_raise(TDL_ERR_INTERNAL, "sim: policy %s placed request %llu wrongly at %.6f s: %s",
                           s->cfg->policy->name, (unsigned long long)p->request_id, s->now, why);
}

static tdl_status_t start(sim_t *s, const policy_placement_t *p)
{
    const cost_model_t *cost = s->cfg->cost;
    if (p->request_id >= (uint64_t)INT32_MAX || s->live_of[p->request_id] < 0)
        return bad_placement(s, p, "not a live request");
    int slot = s->live_of[p->request_id];
    policy_request_t *r = &s->live[slot];
    if (r->running)
        return bad_placement(s, p, "a task of it is running");
    cost_stage_t stage = policy_task_stage(r->next);
    if (p->degree < 1 || p->degree > s->nfree || p->degree > s->maxdeg ||
        !cost_has_degree(cost, stage, p->degree))
        return bad_placement(s, p, "degree not free or not in the cost model");
    int want_steps = r->next == POLICY_TASK_STEP_CHUNK ? 1 : 0;
    if ((want_steps && (p->steps < 1 || p->steps > r->steps_total - r->steps_done)) ||
        (!want_steps && p->steps != 0))
        return bad_placement(s, p, "wrong step count");
    s->gen++;
    for (int i = 0; i < p->degree; i++) {
        int k = p->ranks[i];
        if (k < 0 || k >= s->cfg->ranks || s->busy[k] || s->stamp[k] == s->gen)
            return bad_placement(s, p, "a rank busy, repeated or out of range");
        s->stamp[k] = s->gen;
    }
    /* State moves when a chunk runs on another set of ranks than the last task (noise after
     * PREPARE is drawn again from the seed), or when DECODE's rank did not hold the latents. */
    bool move = false;
    if (r->next == POLICY_TASK_STEP_CHUNK && r->steps_done > 0) {
        move = r->nranks != p->degree;
        for (int i = 0; !move && i < r->nranks; i++)
            move = s->stamp[r->ranks[i]] != s->gen;
    } else if (r->next == POLICY_TASK_DECODE) {
        move = true;
        for (int i = 0; move && i < r->nranks; i++)
            move = r->ranks[i] != p->ranks[0];
    }
    double im = cost->per_image ? r->n : 1;
    double dur = im * cost_stage_s(cost, stage, r->tokens, p->degree) * (want_steps ? p->steps : 1);
    if (move) {
        double m = cost_migration_s(cost, r->tokens, r->n);
        dur += m;
        s->migration_s += m;
        s->migrations++;
    }
    for (int i = 0; i < p->degree; i++) {
        s->busy[p->ranks[i]] = true;
        s->live_ranks[slot * s->maxdeg + i] = p->ranks[i];
    }
    s->nfree -= p->degree;
    r->nranks = p->degree;
    r->running = true;
    if (want_steps) {
        r->last_degree = p->degree;
        r->steps_done += p->steps; /* counted at the start; the view says it is running */
    }
    s->busy_rank_s += p->degree * dur;
    s->tasks++;
    heap_push(s, s->now + dur, (int)p->request_id);
    s->started[s->nstarted++] = (int)p->request_id;
    return TDL_OK;
}

/* Starts placements, then reports each start to the policy and starts what it answers. */
static tdl_status_t apply(sim_t *s, int nout)
{
    tdl_status_t st = TDL_OK;
    for (int i = 0; st == TDL_OK && i < nout; i++)
        st = start(s, &s->buf[0][i]);
    while (st == TDL_OK && s->nstarted > 0) {
        int id = s->started[--s->nstarted], n2 = 0;
        policy_event_t ev = {POLICY_EV_STARTED, (uint64_t)id, s->live[s->live_of[id]].next};
        policy_view_t v = view_of(s);
        st = s->cfg->policy->on_event(s->pstate, &v, &ev, s->buf[1], s->bufcap, &n2);
        for (int i = 0; st == TDL_OK && i < n2; i++)
            st = start(s, &s->buf[1][i]);
    }
    return st;
}

static tdl_status_t arrive(sim_t *s, int id)
{
    const workload_request_t *q = &s->reqs[id];
    int slot = s->nlive++;
    policy_request_t *r = &s->live[slot];
    memset(r, 0, sizeof(*r));
    r->id = (uint64_t)id;
    r->resolution = q->resolution;
    r->tokens = cost_tokens(s->cfg->cost, q->resolution);
    r->n = q->n * (q->label >= 0 && q->cfg != 1.0 ? 2 : 1);
    r->steps_total = q->steps;
    r->next = POLICY_TASK_PREPARE;
    r->arrival_s = q->at_ms / 1000.0;
    r->deadline_s = q->deadline_ms > 0 ? r->arrival_s + q->deadline_ms / 1000.0 : 0;
    r->priority = q->priority;
    r->cls = policy_class_of(q->resolution);
    r->ranks = &s->live_ranks[slot * s->maxdeg];
    s->live_of[id] = slot;
    int nout = 0;
    policy_view_t v = view_of(s);
    tdl_status_t st = s->cfg->policy->on_arrival(s->pstate, &v, r->id, s->buf[0], s->bufcap, &nout);
    return st == TDL_OK ? apply(s, nout) : st;
}

static void retire(sim_t *s, int id)
{
    int slot = s->live_of[id], last = --s->nlive;
    if (slot != last) {
        s->live[slot] = s->live[last];
        memcpy(&s->live_ranks[slot * s->maxdeg], &s->live_ranks[last * s->maxdeg],
               (size_t)s->maxdeg * sizeof(int));
        s->live[slot].ranks = &s->live_ranks[slot * s->maxdeg];
        s->live_of[s->live[slot].id] = slot;
    }
    s->live_of[id] = -1;
}

static tdl_status_t complete(sim_t *s, int id)
{
    policy_request_t *r = &s->live[s->live_of[id]];
    policy_task_t task = r->next;
    for (int i = 0; i < r->nranks; i++)
        s->busy[r->ranks[i]] = false;
    s->nfree += r->nranks;
    r->running = false;
    bool finished = task == POLICY_TASK_DECODE;
    if (task == POLICY_TASK_PREPARE || task == POLICY_TASK_STEP_CHUNK)
        r->next = r->steps_done >= r->steps_total ? POLICY_TASK_DECODE : POLICY_TASK_STEP_CHUNK;
    if (finished) {
        s->finish[id] = s->now;
        retire(s, id);
    }
    policy_event_t ev = {POLICY_EV_FINISHED, (uint64_t)id, task};
    int nout = 0;
    policy_view_t v = view_of(s);
    tdl_status_t st = s->cfg->policy->on_event(s->pstate, &v, &ev, s->buf[0], s->bufcap, &nout);
    if (st == TDL_OK)
        st = apply(s, nout);
    if (st == TDL_OK && !finished) {
        v = view_of(s);
        st = s->cfg->policy->on_runnable(s->pstate, &v, (uint64_t)id, s->buf[0], s->bufcap, &nout);
        if (st == TDL_OK)
            st = apply(s, nout);
    }
    return st;
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

static void metrics(const sim_t *s, const workload_request_t *reqs, int n, sim_result_t *res,
                    double *lat)
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
    res->utilization = s->busy_rank_s / (s->cfg->ranks * span);
    res->tasks = s->tasks;
    res->migrations = s->migrations;
    res->migration_s = s->migration_s;
}

tdl_status_t sim_run(const sim_config_t *cfg, const workload_request_t *reqs, int n,
                     sim_result_t *result, double *finish_s)
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
    s.reqs = reqs;
    s.maxdeg = 1;
    for (int k = 0; k < COST_NSTAGES; k++)
        for (int i = 0; i < cfg->cost->nfits[k]; i++)
            s.maxdeg = TDL_MAX(s.maxdeg, cfg->cost->fits[k][i].degree);
    s.maxdeg = TDL_MIN(s.maxdeg, cfg->ranks);
    s.nfree = cfg->ranks;
    s.bufcap = cfg->ranks;
    size_t nn = (size_t)(n > 0 ? n : 1);
    s.busy = calloc((size_t)cfg->ranks, sizeof(bool));
    s.stamp = calloc((size_t)cfg->ranks, sizeof(int));
    s.live = calloc(nn, sizeof(*s.live));
    s.live_ranks = calloc(nn * (size_t)s.maxdeg, sizeof(int));
    s.live_of = malloc(nn * sizeof(int));
    s.heap = malloc(((size_t)cfg->ranks + 1) * sizeof(*s.heap));
    s.started = malloc(((size_t)cfg->ranks + 1) * sizeof(int));
    s.buf[0] = malloc((size_t)s.bufcap * sizeof(policy_placement_t));
    s.buf[1] = malloc((size_t)s.bufcap * sizeof(policy_placement_t));
    s.finish = calloc(nn, sizeof(double));
    double *lat = malloc(nn * sizeof(double));
    tdl_status_t st = TDL_OK;
    if (!s.busy || !s.stamp || !s.live || !s.live_ranks || !s.live_of || !s.heap || !s.started ||
        !s.buf[0] || !s.buf[1] || !s.finish || !lat) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "sim: out of memory for %d requests", n);
        goto out;
    }
    for (int i = 0; i < n; i++)
        s.live_of[i] = -1;
    if ((st = cfg->policy->create(&s.pstate)) != TDL_OK)
        goto out;
    int next = 0, done = 0;
    while (st == TDL_OK && done < n) {
        double ta = next < n ? reqs[next].at_ms / 1000.0 : INFINITY;
        double te = s.nheap ? s.heap[0].t : INFINITY;
        if (isinf(ta) && isinf(te)) {
            st = tdl_error_raise(TDL_ERR_INTERNAL,
                                 "sim: policy %s left %d requests waiting with every rank idle "
                                 "(a degree wider than the %d ranks?)",
                                 cfg->policy->name, s.nlive, cfg->ranks);
            break;
        }
        if (ta < te) { /* completions at the same time go first: they free ranks */
            s.now = ta;
            st = arrive(&s, next++);
        } else {
            sim_ev_t ev = heap_pop(&s);
            s.now = ev.t;
            bool last_task = s.live[s.live_of[ev.id]].next == POLICY_TASK_DECODE;
            st = complete(&s, ev.id);
            done += last_task;
        }
    }
    if (st == TDL_OK) {
        metrics(&s, reqs, n, result, lat);
        if (finish_s)
            memcpy(finish_s, s.finish, (size_t)n * sizeof(double));
    }
out:
    if (s.pstate)
        cfg->policy->destroy(s.pstate);
    free(lat);
    free(s.finish);
    free(s.buf[1]);
    free(s.buf[0]);
    free(s.started);
    free(s.heap);
    free(s.live_of);
    free(s.live_ranks);
    free(s.live);
    free(s.stamp);
    free(s.busy);
    return st;
}
