/* The policy registry, the estimates the policies share, and the list-scheduling engine. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord/policy_internal.h"

static const coord_policy_ops_t *const policies[] = {
    &coord_policy_static_sp1,   &coord_policy_static_sp2, &coord_policy_static_sp4,
    &coord_policy_static_sp8,   &coord_policy_fcfs,       &coord_policy_sjf,
    &coord_policy_srtf,         &coord_policy_edf_greedy, &coord_policy_edf_best_fit,
    &coord_policy_edf_priority,
};

const coord_policy_ops_t *coord_policy_find(const char *name)
{
    for (size_t i = 0; name && i < TDL_ARRAY_SIZE(policies); i++)
        if (!strcmp(policies[i]->name, name))
            return policies[i];
    return NULL;
}

const coord_policy_ops_t *coord_policy_at(int i)
{
    return i >= 0 && (size_t)i < TDL_ARRAY_SIZE(policies) ? policies[i] : NULL;
}

const char *coord_policy_names(void)
{
    static char buf[256];
    if (!buf[0]) {
        size_t len = 0;
        for (size_t i = 0; i < TDL_ARRAY_SIZE(policies) && len < sizeof(buf); i++)
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? ", " : "",
                                    policies[i]->name);
    }
    return buf;
}

coord_policy_class_t coord_policy_class_of(int resolution)
{
    return resolution <= 32   ? COORD_POLICY_CLASS_S
           : resolution <= 64 ? COORD_POLICY_CLASS_M
                              : COORD_POLICY_CLASS_L;
}

const char *coord_policy_class_name(coord_policy_class_t cls)
{
    return cls == COORD_POLICY_CLASS_S   ? "S"
           : cls == COORD_POLICY_CLASS_M ? "M"
           : cls == COORD_POLICY_CLASS_L ? "L"
                                         : "?";
}

/* ---- estimates ------------------------------------------------------------------------- */

coord_cost_stage_t coord_policy_task_stage(coord_policy_task_t task)
{
    return task == COORD_POLICY_TASK_PREPARE  ? COORD_COST_PREPARE
           : task == COORD_POLICY_TASK_DECODE ? COORD_COST_DECODE
                                              : COORD_COST_STEP;
}

int coord_policy_stage_degree(const coord_policy_view_t *v, const coord_policy_request_t *r,
                              coord_policy_task_t task, int want)
{
    coord_cost_stage_t s = coord_policy_task_stage(task);
    int best = 0;
    for (int i = 0; i < v->cost->nfits[s]; i++)
        if (v->cost->fits[s][i].degree <= want)
            best = v->cost->fits[s][i].degree;
    return best;
}

static double images(const coord_cost_model_t *c, int n)
{
    return c->per_image ? n : 1;
}

double coord_policy_remaining_s(const coord_policy_view_t *v, const coord_policy_request_t *r,
                                int want)
{
    const coord_cost_model_t *c = v->cost;
    double t = 0, im = images(c, r->n);
    if (r->next == COORD_POLICY_TASK_PREPARE)
        t += im *
             coord_cost_stage_s(c, COORD_COST_PREPARE, r->tokens,
                                coord_policy_stage_degree(v, r, COORD_POLICY_TASK_PREPARE, want));
    if (r->next != COORD_POLICY_TASK_DECODE) {
        int d = coord_policy_stage_degree(v, r, COORD_POLICY_TASK_STEP_CHUNK, want);
        t += (double)(r->steps_total - r->steps_done) * coord_policy_step_evals(r) * im *
             coord_cost_stage_s(c, COORD_COST_STEP, r->tokens, d);
        if (r->steps_done > 0 && r->last_degree && d != r->last_degree)
            t += coord_cost_migration_s(c, r->tokens, r->n);
    }
    t += im * coord_cost_stage_s(c, COORD_COST_DECODE, r->tokens,
                                 coord_policy_stage_degree(v, r, COORD_POLICY_TASK_DECODE, want));
    return t;
}

double coord_policy_single_rank_s(const coord_cost_model_t *c, int resolution, int n, double steps)
{
    int tok = coord_cost_tokens(c, resolution);
    return images(c, n) * (coord_cost_stage_s(c, COORD_COST_PREPARE, tok, 1) +
                           steps * coord_cost_stage_s(c, COORD_COST_STEP, tok, 1) +
                           coord_cost_stage_s(c, COORD_COST_DECODE, tok, 1));
}

/* ---- shared orders and degree rules ---------------------------------------------------- */

bool coord_policy_before_arrival(const coord_policy_view_t *v, const coord_policy_request_t *a,
                                 const coord_policy_request_t *b)
{
    if (a->arrival_s != b->arrival_s)
        return a->arrival_s < b->arrival_s;
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return a->id < b->id;
}

bool coord_policy_before_deadline(const coord_policy_view_t *v, const coord_policy_request_t *a,
                                  const coord_policy_request_t *b)
{
    double da = a->deadline_s > 0 ? a->deadline_s : INFINITY;
    double db = b->deadline_s > 0 ? b->deadline_s : INFINITY;
    if (da != db)
        return da < db;
    return coord_policy_before_arrival(v, a, b);
}

int coord_policy_degree_fastest(const coord_policy_view_t *v, const coord_policy_request_t *r,
                                int nfree)
{
    int best = 0;
    double best_s = INFINITY;
    for (int i = 0; i < v->cost->nfits[COORD_COST_STEP]; i++) {
        int d = v->cost->fits[COORD_COST_STEP][i].degree;
        if (d > nfree)
            break;
        double s = coord_policy_remaining_s(v, r, d);
        if (s < best_s) {
            best_s = s;
            best = d;
        }
    }
    return best;
}

int coord_policy_degree_best_fit(const coord_policy_view_t *v, const coord_policy_request_t *r,
                                 int nfree)
{
    if (r->deadline_s > 0)
        for (int i = 0; i < v->cost->nfits[COORD_COST_STEP]; i++) {
            int d = v->cost->fits[COORD_COST_STEP][i].degree;
            if (d > nfree)
                break;
            if (v->now + coord_policy_remaining_s(v, r, d) <= r->deadline_s)
                return d;
        }
    else if (nfree >= 1 && v->cost->nfits[COORD_COST_STEP])
        return v->cost->fits[COORD_COST_STEP][0]
            .degree; /* no deadline: the narrowest, then widen */
    return coord_policy_degree_fastest(v, r, nfree);
}

/* ---- the engine ------------------------------------------------------------------------ */

typedef struct engine {
    const coord_policy_rule_t *rule;
    int *cand;   /* indices of runnable requests not yet considered */
    bool *taken; /* busy, or given in this call */
    int cap_req, cap_ranks;
} engine_t;

tdl_status_t coord_policy_engine_create(const coord_policy_rule_t *rule, void **state_out)
{
    engine_t *e = tdl_calloc(1, sizeof(*e));
    if (!e)
        return tdl_error_raise(TDL_ERR_NOMEM, "policy: out of memory");
    e->rule = rule;
    *state_out = e;
    return TDL_OK;
}

void coord_policy_engine_destroy(void *state)
{
    engine_t *e = state;
    if (!e)
        return;
    free(e->cand);
    free(e->taken);
    free(e);
}

static tdl_status_t engine_reserve(engine_t *e, int nreq, int nranks)
{
    if (nreq > e->cap_req) {
        int cap = TDL_MAX(nreq, 2 * e->cap_req);
        int *p = tdl_realloc(e->cand, (size_t)cap * sizeof(*p));
        if (!p)
            return tdl_error_raise(TDL_ERR_NOMEM, "policy: out of memory");
        e->cand = p;
        e->cap_req = cap;
    }
    if (nranks > e->cap_ranks) {
        bool *p = tdl_realloc(e->taken, (size_t)nranks * sizeof(*p));
        if (!p)
            return tdl_error_raise(TDL_ERR_NOMEM, "policy: out of memory");
        e->taken = p;
        e->cap_ranks = nranks;
    }
    return TDL_OK;
}

/* Appends `count` free ranks to ranks[have ..]: those of r's last group first, in order. */
static void take_ranks(engine_t *e, const coord_policy_view_t *v, const coord_policy_request_t *r,
                       int *ranks, int have, int count)
{
    int got = 0;
    for (int i = 0; i < r->nranks && got < count; i++) {
        int k = r->ranks[i];
        if (k >= 0 && k < v->nranks && !e->taken[k]) {
            e->taken[k] = true;
            ranks[have + got++] = k;
        }
    }
    for (int k = 0; k < v->nranks && got < count; k++)
        if (!e->taken[k]) {
            e->taken[k] = true;
            ranks[have + got++] = k;
        }
}

tdl_status_t coord_policy_engine_place(void *state, const coord_policy_view_t *v,
                                       uint64_t request_id, coord_policy_placement_t *out,
                                       int max_out, int *nout)
{
    engine_t *e = state;
    const coord_policy_rule_t *rule = e->rule;
    *nout = 0;
    if (v->nfree <= 0 || max_out <= 0)
        return TDL_OK;
    tdl_status_t st = engine_reserve(e, v->nrequests, v->nranks);
    if (st != TDL_OK)
        return st;
    int ncand = 0;
    for (int i = 0; i < v->nrequests; i++)
        if (!v->requests[i].running)
            e->cand[ncand++] = i;
    memcpy(e->taken, v->busy, (size_t)v->nranks * sizeof(bool));
    int nfree = v->nfree, n = 0;
    while (nfree > 0 && ncand > 0 && n < max_out) {
        int bi = 0;
        for (int i = 1; i < ncand; i++)
            if (rule->before(v, &v->requests[e->cand[i]], &v->requests[e->cand[bi]]))
                bi = i;
        const coord_policy_request_t *r = &v->requests[e->cand[bi]];
        e->cand[bi] = e->cand[--ncand];
        int want = rule->degree(v, r, nfree);
        int d = want > 0 ? coord_policy_stage_degree(v, r, r->next, want) : 0;
        if (d <= 0 || d > nfree) {
            if (rule->blocking)
                break;
            continue;
        }
        coord_policy_placement_t *p = &out[n++];
        p->request_id = r->id;
        p->degree = d;
        p->steps = r->next == COORD_POLICY_TASK_STEP_CHUNK
                       ? TDL_MIN(v->chunk, r->steps_total - r->steps_done)
                       : 0;
        take_ranks(e, v, r, p->ranks, 0, d);
        nfree -= d;
    }
    /* Surplus: widen this round's chunks while the model says wider finishes sooner. */
    for (int i = 0; rule->widen && i < n && nfree > 0; i++) {
        coord_policy_placement_t *p = &out[i];
        const coord_policy_request_t *r = NULL;
        for (int k = 0; k < v->nrequests && !r; k++)
            if (v->requests[k].id == p->request_id)
                r = &v->requests[k];
        if (!r || r->next != COORD_POLICY_TASK_STEP_CHUNK)
            continue;
        for (;;) {
            int wider = coord_policy_stage_degree(v, r, r->next,
                                                  TDL_MIN(2 * p->degree, COORD_POLICY_MAX_DEGREE));
            if (wider <= p->degree || wider - p->degree > nfree ||
                !(coord_policy_remaining_s(v, r, wider) <
                  coord_policy_remaining_s(v, r, p->degree)))
                break;
            take_ranks(e, v, r, p->ranks, p->degree, wider - p->degree);
            nfree -= wider - p->degree;
            p->degree = wider;
        }
    }
    *nout = n;
    return TDL_OK;
}

tdl_status_t coord_policy_engine_event(void *state, const coord_policy_view_t *v,
                                       const coord_policy_event_t *ev,
                                       coord_policy_placement_t *out, int max_out, int *nout)
{
    /* A finished or failed task frees ranks: a moment to place waiting requests. */
    if (ev->kind == COORD_POLICY_EV_STARTED) {
        *nout = 0;
        return TDL_OK;
    }
    return coord_policy_engine_place(state, v, ev->request_id, out, max_out, nout);
}
