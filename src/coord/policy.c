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

void coord_policy_key_arrival(const coord_policy_request_t *r, double k[3])
{
    k[0] = r->arrival_s;
    k[1] = -(double)r->priority;
    k[2] = 0;
}

void coord_policy_key_deadline(const coord_policy_request_t *r, double k[3])
{
    k[0] = r->deadline_s > 0 ? r->deadline_s : INFINITY;
    k[1] = r->arrival_s;
    k[2] = -(double)r->priority;
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

/* A waiting request in the heap of a keyed rule. */
typedef struct keyed {
    double k[3];
    uint64_t id;
} keyed_t;

typedef struct engine {
    const coord_policy_rule_t *rule;
    /* keyed rules: the waiting requests the engine was told of, first on top; in[id] says
     * which ids it holds (nin of them, gone ones too until they come to the top) */
    keyed_t *kh, *aside;
    int nkh, cap_kh, nin;
    uint8_t *in;
    uint64_t cap_in;
    int *cand;   /* indices of runnable requests not yet considered: a heap in the rule's order */
    int *placed; /* the request index of each placement of this call */
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
    free(e->placed);
    free(e->kh);
    free(e->aside);
    free(e->in);
    free(e->taken);
    free(e);
}

static tdl_status_t engine_reserve(engine_t *e, int nreq, int nranks)
{
    if (nreq > e->cap_req) {
        int cap = TDL_MAX(nreq, 2 * e->cap_req);
        int *p = tdl_realloc(e->cand, (size_t)cap * sizeof(*p));
        if (p)
            e->cand = p;
        int *q = tdl_realloc(e->placed, (size_t)cap * sizeof(*q));
        if (q)
            e->placed = q;
        if (!p || !q)
            return tdl_error_raise(TDL_ERR_NOMEM, "policy: out of memory");
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

/* The candidates' heap: the first in the rule's order on top (the order is total: ties fall
 * to the request id). */
static bool cand_before(const engine_t *e, const coord_policy_view_t *v, int a, int b)
{
    return e->rule->before(v, &v->requests[e->cand[a]], &v->requests[e->cand[b]]);
}

static void cand_down(engine_t *e, const coord_policy_view_t *v, int i, int n)
{
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && cand_before(e, v, c + 1, c))
            c++;
        if (!cand_before(e, v, c, i))
            return;
        int t = e->cand[i];
        e->cand[i] = e->cand[c];
        e->cand[c] = t;
        i = c;
    }
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

/* ---- keyed rules: the waiting requests in a heap kept across calls ---------------------- */

static bool keyed_before(const keyed_t *a, const keyed_t *b)
{
    for (int i = 0; i < 3; i++)
        if (a->k[i] != b->k[i])
            return a->k[i] < b->k[i];
    return a->id < b->id;
}

static void kh_down(keyed_t *h, int n, int i)
{
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && keyed_before(&h[c + 1], &h[c]))
            c++;
        if (!keyed_before(&h[c], &h[i]))
            return;
        keyed_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

static void kh_push(engine_t *e, keyed_t x)
{
    int i = e->nkh++;
    while (i > 0 && keyed_before(&x, &e->kh[(i - 1) / 2])) {
        e->kh[i] = e->kh[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->kh[i] = x;
}

static keyed_t kh_pop(engine_t *e)
{
    keyed_t top = e->kh[0];
    e->kh[0] = e->kh[--e->nkh];
    kh_down(e->kh, e->nkh, 0);
    return top;
}

static tdl_status_t keyed_reserve(engine_t *e, uint64_t nids, int need)
{
    if (nids > e->cap_in) {
        uint64_t cap = TDL_MAX(nids, 2 * e->cap_in);
        uint8_t *p = tdl_realloc(e->in, (size_t)cap);
        if (!p)
            return tdl_error_raise(TDL_ERR_NOMEM, "policy: out of memory");
        memset(p + e->cap_in, 0, (size_t)(cap - e->cap_in));
        e->in = p;
        e->cap_in = cap;
    }
    if (need > e->cap_kh) {
        int cap = TDL_MAX(need, 2 * e->cap_kh);
        keyed_t *h = tdl_realloc(e->kh, (size_t)cap * sizeof(*h));
        if (h)
            e->kh = h;
        keyed_t *a = tdl_realloc(e->aside, (size_t)cap * sizeof(*a));
        if (a)
            e->aside = a;
        if (!h || !a)
            return tdl_error_raise(TDL_ERR_NOMEM, "policy: out of memory");
        e->cap_kh = cap;
    }
    return TDL_OK;
}

/* The live request with this id when it waits, else NULL. */
static const coord_policy_request_t *waiting(const coord_policy_view_t *v, uint64_t id)
{
    int slot = id < v->nids ? v->slot_of[id] : -1;
    return slot >= 0 && slot < v->nrequests && !v->requests[slot].running ? &v->requests[slot]
                                                                           : NULL;
}

/* Takes in the request a call names (it arrived, or a task of it ended); and when what the
 * engine holds does not add up to the view's waiting requests (one dropped unseen), all of
 * them again. */
static tdl_status_t keyed_sync(engine_t *e, const coord_policy_view_t *v, uint64_t id)
{
    tdl_status_t st = keyed_reserve(e, v->nids, e->nkh + 1);
    if (st != TDL_OK)
        return st;
    const coord_policy_request_t *r = waiting(v, id);
    if (r && !e->in[id]) {
        keyed_t x = {.id = id};
        e->rule->key(r, x.k);
        kh_push(e, x);
        e->in[id] = 1;
        e->nin++;
    }
    if (e->nin == v->nwaiting)
        return TDL_OK;
    while (e->nkh > 0)
        e->in[e->kh[--e->nkh].id] = 0;
    if ((st = keyed_reserve(e, v->nids, v->nrequests)) != TDL_OK)
        return st;
    for (int i = 0; i < v->nrequests; i++) {
        const coord_policy_request_t *q = &v->requests[i];
        if (q->running)
            continue;
        keyed_t x = {.id = q->id};
        e->rule->key(q, x.k);
        e->kh[e->nkh++] = x;
        e->in[q->id] = 1;
    }
    e->nin = e->nkh;
    for (int i = e->nkh / 2 - 1; i >= 0; i--)
        kh_down(e->kh, e->nkh, i);
    return TDL_OK;
}

/* The next waiting request in the rule's order (its index in v->requests), or -1: from the
 * heap of a keyed rule, else from the candidates of this call. */
typedef struct order {
    bool keyed;
    int ncand, pick, naside;
} order_t;

static int order_next(engine_t *e, const coord_policy_view_t *v, order_t *o)
{
    if (o->keyed) {
        while (e->nkh > 0) {
            keyed_t x = kh_pop(e);
            const coord_policy_request_t *r = waiting(v, x.id);
            if (!r) { /* gone, or placed unseen: no longer held */
                e->in[x.id] = 0;
                e->nin--;
                continue;
            }
            e->aside[o->naside++] = x; /* back in the heap unless placed (order_placed) */
            return (int)(r - v->requests);
        }
        return -1;
    }
    if (o->ncand <= 0)
        return -1;
    /* Most calls place one request (a task's end frees its ranks): the first by a scan, the
     * rest from a heap, built at the second pick. */
    int bi = 0;
    if (o->pick == 0) {
        for (int i = 1; i < o->ncand; i++)
            if (cand_before(e, v, i, bi))
                bi = i;
    } else if (o->pick == 1) {
        for (int i = o->ncand / 2 - 1; i >= 0; i--)
            cand_down(e, v, i, o->ncand);
    }
    int ri = e->cand[bi];
    e->cand[bi] = e->cand[--o->ncand];
    if (o->pick++ > 0)
        cand_down(e, v, 0, o->ncand);
    return ri;
}

/* The request order_next gave last was placed: the heap lets it go. */
static void order_placed(engine_t *e, order_t *o)
{
    if (o->keyed) {
        e->in[e->aside[--o->naside].id] = 0;
        e->nin--;
    }
}

tdl_status_t coord_policy_engine_place(void *state, const coord_policy_view_t *v,
                                       uint64_t request_id, coord_policy_placement_t *out,
                                       int max_out, int *nout)
{
    engine_t *e = state;
    const coord_policy_rule_t *rule = e->rule;
    *nout = 0;
    order_t o = {.keyed = rule->key && v->slot_of};
    tdl_status_t st;
    if (o.keyed && (st = keyed_sync(e, v, request_id)) != TDL_OK)
        return st;
    if (v->nfree <= 0 || max_out <= 0)
        return TDL_OK;
    if ((st = engine_reserve(e, v->nrequests, v->nranks)) != TDL_OK)
        return st;
    for (int i = 0; !o.keyed && i < v->nrequests; i++)
        if (!v->requests[i].running)
            e->cand[o.ncand++] = i;
    memcpy(e->taken, v->busy, (size_t)v->nranks * sizeof(bool));
    int nfree = v->nfree, n = 0;
    int ri;
    while (nfree > 0 && n < max_out && (ri = order_next(e, v, &o)) >= 0) {
        const coord_policy_request_t *r = &v->requests[ri];
        int want = rule->degree(v, r, nfree);
        int d = want > 0 ? coord_policy_stage_degree(v, r, r->next, want) : 0;
        if (d <= 0 || d > nfree) {
            if (rule->blocking)
                break;
            continue;
        }
        order_placed(e, &o);
        e->placed[n] = ri;
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
        const coord_policy_request_t *r = &v->requests[e->placed[i]];
        if (r->next != COORD_POLICY_TASK_STEP_CHUNK)
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
    while (o.naside > 0) /* waiting still */
        kh_push(e, e->aside[--o.naside]);
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
