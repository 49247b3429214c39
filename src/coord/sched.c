/* The scheduling core shared by the coordinator and the simulator (see sched.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord/sched.h"

struct sched {
    coord_sched_config_t cfg;
    void *pstate;
    bool *busy;
    int *load;     /* tasks running on each rank: a batch's members share its ranks */
    bool *offline; /* taken out of the policy's reach: busy too */
    bool *lost;    /* gone for good: offline too */
    int nfree, maxdeg;
    coord_policy_request_t *live; /* dense, nlive of cap */
    int *live_ranks;              /* maxdeg per live slot */
    int *prev_ranks;              /* maxdeg: the last task's ranks of the request being started */
    int nlive, cap;
    int *live_of; /* request id -> live slot, -1 when not live; nids of idcap */
    uint64_t nids;
    size_t idcap;
    int *stamp; /* rank -> generation mark, for set comparisons */
    int gen;
    coord_policy_placement_t *buf[2];
    int bufcap;
    uint64_t *started; /* request ids started, not yet reported to the policy */
    int nstarted;
    int running;
    uint64_t *joined; /* request id -> the apply() that took it into a batch (0: none) */
    uint64_t applies;
    uint64_t *planned; /* request id -> the list of placements that names it (0: none) */
    uint64_t plans;
    int *cand;        /* live slots that may join a batch */
    double now;
    coord_sched_stats_t stats;
};

static coord_policy_view_t view_of(const coord_sched_t *s)
{
    return (coord_policy_view_t){.now = s->now,
                                 .cost = s->cfg.cost,
                                 .nranks = s->cfg.ranks,
                                 .busy = s->busy,
                                 .nfree = s->nfree,
                                 .requests = s->live,
                                 .nrequests = s->nlive,
                                 .chunk = s->cfg.chunk,
                                 .slot_of = s->live_of,
                                 .nids = s->nids,
                                 .nwaiting = s->nlive - s->running};
}

static tdl_status_t bad_placement(const coord_sched_t *s, const coord_policy_placement_t *p,
                                  const char *why)
{
    return tdl_error_raise(TDL_ERR_INTERNAL, "policy %s placed request %llu wrongly at %.6f s: %s",
                           s->cfg.policy->name, (unsigned long long)p->request_id, s->now, why);
}

static int slot_of(const coord_sched_t *s, uint64_t id)
{
    return id < s->nids ? s->live_of[id] : -1;
}

/* Whether a chunk of r on the ranks stamped with the current generation moves its state: it
 * has done steps (noise after PREPARE is drawn again from the seed) on another set of ranks. A
 * DECODE moves when its rank did not hold the latents. */
static bool needs_move(const coord_sched_t *s, const coord_policy_request_t *r, int degree,
                       int first)
{
    bool move = false;
    if (r->next == COORD_POLICY_TASK_STEP_CHUNK && r->steps_done > 0) {
        move = r->nranks != degree;
        for (int i = 0; !move && i < r->nranks; i++)
            move = s->stamp[r->ranks[i]] != s->gen;
    } else if (r->next == COORD_POLICY_TASK_DECODE) {
        move = true;
        for (int i = 0; move && i < r->nranks; i++)
            move = r->ranks[i] != first;
    }
    return move;
}

/* Whether waiting request q may join r's chunk on the stamped ranks: the same resolution and
 * sampler, rows to spare, its next task a chunk or its first PREPARE (which the chunk does: it
 * draws the noise from the seed on ranks that did not prepare it; a request started again keeps
 * its PREPARE, which lets the ranks of its old state go), and its state, if it has any, there
 * already or on ranks that are free to hand it on. */
static bool may_join(const coord_sched_t *s, const coord_policy_request_t *r,
                     const coord_policy_request_t *q, int rows)
{
    bool first = q->next == COORD_POLICY_TASK_PREPARE && q->nranks == 0;
    if (s->planned[q->id] == s->plans) /* the policy places it on ranks of its own */
        return false;
    if (q->running || (q->next != COORD_POLICY_TASK_STEP_CHUNK && !first) || q->id == r->id ||
        q->resolution != r->resolution || q->step_evals != r->step_evals ||
        q->sampler != r->sampler ||
        rows + q->n > s->cfg.batch_rows)
        return false;
    for (int i = 0; q->steps_done > 0 && i < q->nranks; i++)
        if (s->stamp[q->ranks[i]] != s->gen && s->busy[q->ranks[i]])
            return false;
    return true;
}

/* Whether live slot a joins a batch before slot b: higher priority, then the earlier deadline
 * (none last), then the earlier arrival. */
static bool join_before(const coord_policy_request_t *a, const coord_policy_request_t *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    double da = a->deadline_s > 0 ? a->deadline_s : INFINITY;
    double db = b->deadline_s > 0 ? b->deadline_s : INFINITY;
    if (da != db)
        return da < db;
    return a->id < b->id;
}

/* Marks r running its next task on ranks[0 .. degree) for steps (of a chunk) and calls the
 * caller's start function. */
static tdl_status_t launch(coord_sched_t *s, int slot, const int *ranks, int degree, int steps,
                           bool move, double dur, int batch_after)
{
    coord_policy_request_t *r = &s->live[slot];
    bool chunk = r->next == COORD_POLICY_TASK_STEP_CHUNK;
    if (move) {
        double m = coord_cost_migration_s(s->cfg.cost, r->tokens, r->n);
        s->stats.migration_s += m;
        s->stats.migrations++;
    }
    int nprev = r->nranks; /* 0 before PREPARE */
    memcpy(s->prev_ranks, r->ranks, (size_t)nprev * sizeof(int));
    coord_sched_task_t t = {.id = r->id,
                            .task = r->next,
                            .steps = chunk ? steps : 0,
                            .steps_before = r->steps_done,
                            .degree = degree,
                            .ranks = ranks,
                            .nprev = nprev,
                            .prev = s->prev_ranks,
                            .move = move,
                            .estimate_s = dur,
                            .batch_after = batch_after};
    for (int i = 0; i < degree; i++) {
        if (s->load[ranks[i]]++ == 0) {
            s->busy[ranks[i]] = true;
            s->nfree--;
        }
        s->live_ranks[slot * s->maxdeg + i] = ranks[i];
    }
    r->nranks = degree;
    r->running = true;
    if (chunk) {
        r->last_degree = degree;
        r->steps_done += steps; /* counted at the start; the view says it is running */
    }
    s->stats.tasks++;
    s->running++;
    s->started[s->nstarted++] = r->id;
    return s->cfg.start(s->cfg.user, &t);
}

static tdl_status_t start(coord_sched_t *s, const coord_policy_placement_t *p)
{
    const coord_cost_model_t *cost = s->cfg.cost;
    int slot = slot_of(s, p->request_id);
    if (slot < 0)
        return bad_placement(s, p, "not a live request");
    coord_policy_request_t *r = &s->live[slot];
    if (r->running && s->joined[r->id] == s->applies)
        return TDL_OK; /* a batch took it in this call: the placement is moot */
    if (r->running)
        return bad_placement(s, p, "a task of it is running");
    coord_cost_stage_t stage = coord_policy_task_stage(r->next);
    if (p->degree < 1 || p->degree > s->nfree || p->degree > s->maxdeg ||
        !coord_cost_has_degree(cost, stage, p->degree))
        return bad_placement(s, p, "degree not free or not in the cost model");
    bool chunk = r->next == COORD_POLICY_TASK_STEP_CHUNK;
    if ((chunk && (p->steps < 1 || p->steps > r->steps_total - r->steps_done)) ||
        (!chunk && p->steps != 0))
        return bad_placement(s, p, "wrong step count");
    s->gen++;
    for (int i = 0; i < p->degree; i++) {
        int k = p->ranks[i];
        if (k < 0 || k >= s->cfg.ranks || s->busy[k] || s->stamp[k] == s->gen)
            return bad_placement(s, p, "a rank busy, repeated or out of range");
        s->stamp[k] = s->gen;
    }
    /* A chunk takes in waiting chunks of its resolution and sampler while their rows fit in
     * batch_rows, in join_before's order, where the cost model's batch factor says it pays: one
     * batch, which runs as long as its longest member, at the batch factor of its images. */
    int nj = 0, rows = r->n;
    if (chunk && s->cfg.batch_rows > r->n) {
        for (int i = 0; i < s->nlive; i++)
            if (may_join(s, r, &s->live[i], r->n))
                s->cand[nj++] = i;
        for (int i = 1; i < nj; i++) /* insertion sort: the candidates are few */
            for (int j = i; j > 0 && join_before(&s->live[s->cand[j]], &s->live[s->cand[j - 1]]);
                 j--) {
                int x = s->cand[j];
                s->cand[j] = s->cand[j - 1], s->cand[j - 1] = x;
            }
        /* one joins where the cost model says that sharing pays: a step of the batch with it
         * is shorter than one of the batch and one of it alone */
        int kept = 0;
        for (int i = 0; i < nj && kept < COORD_SCHED_MAX_BATCH - 1; i++) {
            const coord_policy_request_t *q = &s->live[s->cand[i]];
            double with = (rows + q->n) * coord_cost_batch_factor(cost, r->tokens, rows + q->n);
            double apart = rows * coord_cost_batch_factor(cost, r->tokens, rows) +
                           q->n * coord_cost_batch_factor(cost, r->tokens, q->n);
            if (rows + q->n > s->cfg.batch_rows || with >= apart * (1 - 1e-9))
                continue;
            rows += q->n;
            s->cand[kept++] = s->cand[i];
        }
        nj = kept;
    }
    double im = cost->per_image ? rows : 1;
    double dur = im * coord_cost_stage_s(cost, stage, r->tokens, p->degree) *
                 (chunk ? coord_cost_batch_factor(cost, r->tokens, rows) * p->steps *
                              coord_policy_step_evals(r)
                        : 1);
    bool move = needs_move(s, r, p->degree, p->ranks[0]);
    bool *moves = nj ? tdl_malloc((size_t)nj * sizeof(bool)) : NULL;
    if (nj && !moves)
        return tdl_error_raise(TDL_ERR_NOMEM, "scheduler: out of memory for a batch");
    dur += move ? coord_cost_migration_s(cost, r->tokens, r->n) : 0;
    for (int i = 0; i < nj; i++) {
        const coord_policy_request_t *q = &s->live[s->cand[i]];
        moves[i] = needs_move(s, q, p->degree, p->ranks[0]);
        dur += moves[i] ? coord_cost_migration_s(cost, q->tokens, q->n) : 0;
    }
    s->stats.busy_rank_s += p->degree * dur;
    tdl_status_t st = launch(s, slot, p->ranks, p->degree, p->steps, move, dur, nj);
    for (int i = 0; st == TDL_OK && i < nj; i++) {
        coord_policy_request_t *q = &s->live[s->cand[i]];
        s->joined[q->id] = s->applies;
        q->next = COORD_POLICY_TASK_STEP_CHUNK; /* (a first PREPARE is the chunk's) */
        st = launch(s, s->cand[i], p->ranks, p->degree,
                    TDL_MIN(p->steps, q->steps_total - q->steps_done), moves[i], dur, nj - 1 - i);
    }
    if (nj)
        s->stats.batches++, s->stats.batched += nj + 1;
    free(moves);
    return st;
}

/* The requests of a list of placements: no batch takes them in while it is started. */
static void plan(coord_sched_t *s, const coord_policy_placement_t *ps, int n)
{
    s->plans++;
    for (int i = 0; i < n; i++)
        if (ps[i].request_id < s->nids)
            s->planned[ps[i].request_id] = s->plans;
}

/* Starts placements, then reports each start to the policy and starts what it answers. */
static tdl_status_t apply(coord_sched_t *s, int nout)
{
    tdl_status_t st = TDL_OK;
    s->applies++;
    plan(s, s->buf[0], nout);
    for (int i = 0; st == TDL_OK && i < nout; i++)
        st = start(s, &s->buf[0][i]);
    while (st == TDL_OK && s->nstarted > 0) {
        uint64_t id = s->started[--s->nstarted];
        int n2 = 0;
        coord_policy_event_t ev = {COORD_POLICY_EV_STARTED, id, s->live[slot_of(s, id)].next};
        coord_policy_view_t v = view_of(s);
        st = s->cfg.policy->on_event(s->pstate, &v, &ev, s->buf[1], s->bufcap, &n2);
        if (st == TDL_OK)
            plan(s, s->buf[1], n2);
        for (int i = 0; st == TDL_OK && i < n2; i++)
            st = start(s, &s->buf[1][i]);
    }
    return st;
}

static tdl_status_t grow(coord_sched_t *s)
{
    if (s->nids == s->idcap) {
        size_t cap = s->idcap * 2;
        int *lo = tdl_realloc(s->live_of, cap * sizeof(int));
        if (lo)
            s->live_of = lo;
        uint64_t *jo = tdl_realloc(s->joined, cap * sizeof(uint64_t));
        if (jo)
            s->joined = jo;
        uint64_t *pl = tdl_realloc(s->planned, cap * sizeof(uint64_t));
        if (pl)
            s->planned = pl;
        if (!lo || !jo || !pl)
            return tdl_error_raise(TDL_ERR_NOMEM, "scheduler: out of memory");
        s->idcap = cap;
    }
    if (s->nlive == s->cap) {
        int cap = s->cap * 2;
        coord_policy_request_t *lv = tdl_realloc(s->live, (size_t)cap * sizeof(*lv));
        if (lv)
            s->live = lv;
        int *cd = tdl_realloc(s->cand, (size_t)cap * sizeof(int));
        if (cd)
            s->cand = cd;
        int *lr = tdl_realloc(s->live_ranks, (size_t)cap * (size_t)s->maxdeg * sizeof(int));
        if (lr) {
            s->live_ranks = lr;
            for (int i = 0; i < s->nlive; i++) /* the views' rank pointers follow the move */
                s->live[i].ranks = &s->live_ranks[i * s->maxdeg];
        }
        if (!lv || !lr || !cd)
            return tdl_error_raise(TDL_ERR_NOMEM, "scheduler: out of memory");
        s->cap = cap;
    }
    return TDL_OK;
}

tdl_status_t coord_sched_arrive(coord_sched_t *s, double now, const coord_sched_request_t *q,
                                uint64_t *id_out)
{
    tdl_status_t st = grow(s);
    if (st != TDL_OK)
        return st;
    s->now = now;
    uint64_t id = s->nids++;
    s->joined[id] = 0;
    s->planned[id] = 0;
    int slot = s->nlive++;
    coord_policy_request_t *r = &s->live[slot];
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->resolution = q->resolution;
    r->tokens = coord_cost_tokens(s->cfg.cost, q->resolution);
    r->n = q->n;
    r->steps_total = q->steps;
    r->step_evals = q->step_evals > 0 ? q->step_evals : 1;
    r->sampler = q->sampler;
    r->next = COORD_POLICY_TASK_PREPARE;
    r->arrival_s = now;
    r->deadline_s = q->deadline_s;
    r->priority = q->priority;
    r->cls = coord_policy_class_of(q->resolution);
    r->ranks = &s->live_ranks[slot * s->maxdeg];
    s->live_of[id] = slot;
    if (id_out)
        *id_out = id;
    int nout = 0;
    coord_policy_view_t v = view_of(s);
    st = s->cfg.policy->on_arrival(s->pstate, &v, id, s->buf[0], s->bufcap, &nout);
    return st == TDL_OK ? apply(s, nout) : st;
}

static void retire(coord_sched_t *s, uint64_t id)
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

/* r starts again from PREPARE: the ranks it has left that are not lost become the previous
 * ranks of that PREPARE, which lets them drop what they held. */
static void restart(coord_sched_t *s, int slot)
{
    coord_policy_request_t *r = &s->live[slot];
    int *ranks = &s->live_ranks[slot * s->maxdeg], k = 0;
    for (int i = 0; i < r->nranks; i++)
        if (!s->lost[ranks[i]])
            ranks[k++] = ranks[i];
    r->nranks = k;
    r->steps_done = 0;
    r->last_degree = 0;
    r->next = COORD_POLICY_TASK_PREPARE;
    s->stats.restarts++;
    if (s->cfg.restarted)
        s->cfg.restarted(s->cfg.user, r->id);
}

typedef enum { END_FINISHED, END_FAILED, END_RESTART } end_t;

static tdl_status_t end_task(coord_sched_t *s, double now, uint64_t id, end_t how, bool *done)
{
    int slot = slot_of(s, id);
    if (slot < 0 || !s->live[slot].running)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "scheduler: request %llu has no task running",
                               (unsigned long long)id);
    s->now = now;
    coord_policy_request_t *r = &s->live[slot];
    coord_policy_task_t task = r->next;
    for (int i = 0; i < r->nranks; i++) /* a lost rank stays busy */
        if (--s->load[r->ranks[i]] == 0 && !s->lost[r->ranks[i]]) {
            s->busy[r->ranks[i]] = false;
            s->nfree++;
        }
    s->running--;
    r->running = false;
    bool failed = how == END_FAILED;
    bool finished = failed || (how == END_FINISHED && task == COORD_POLICY_TASK_DECODE);
    if (how == END_RESTART)
        restart(s, slot);
    else if (task == COORD_POLICY_TASK_PREPARE || task == COORD_POLICY_TASK_STEP_CHUNK)
        r->next = r->steps_done >= r->steps_total ? COORD_POLICY_TASK_DECODE
                                                  : COORD_POLICY_TASK_STEP_CHUNK;
    if (finished)
        retire(s, id);
    if (done)
        *done = finished && !failed;
    coord_policy_event_t ev = {
        how == END_FINISHED ? COORD_POLICY_EV_FINISHED : COORD_POLICY_EV_FAILED, id, task};
    int nout = 0;
    coord_policy_view_t v = view_of(s);
    tdl_status_t st = s->cfg.policy->on_event(s->pstate, &v, &ev, s->buf[0], s->bufcap, &nout);
    if (st == TDL_OK)
        st = apply(s, nout);
    if (st == TDL_OK && !finished && !s->live[slot_of(s, id)].running) {
        v = view_of(s);
        st = s->cfg.policy->on_runnable(s->pstate, &v, id, s->buf[0], s->bufcap, &nout);
        if (st == TDL_OK)
            st = apply(s, nout);
    }
    return st;
}

tdl_status_t coord_sched_finished(coord_sched_t *s, double now, uint64_t id, bool *request_done)
{
    return end_task(s, now, id, END_FINISHED, request_done);
}

tdl_status_t coord_sched_failed(coord_sched_t *s, double now, uint64_t id)
{
    return end_task(s, now, id, END_FAILED, NULL);
}

tdl_status_t coord_sched_restart(coord_sched_t *s, double now, uint64_t id)
{
    return end_task(s, now, id, END_RESTART, NULL);
}

tdl_status_t coord_sched_rank_lost(coord_sched_t *s, double now, int r)
{
    if (r < 0 || r >= s->cfg.ranks)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "scheduler: no rank %d", r);
    if (s->lost[r])
        return TDL_OK;
    s->lost[r] = true;
    s->stats.lost++;
    if (!s->busy[r])
        s->nfree--;
    s->busy[r] = s->offline[r] = true;
    for (int i = 0; i < s->nlive; i++) {
        const coord_policy_request_t *q = &s->live[i];
        bool held = false;
        for (int k = 0; k < q->nranks && !held; k++)
            held = q->ranks[k] == r;
        if (!q->running && held)
            restart(s, i);
    }
    return coord_sched_kick(s, now);
}

bool coord_sched_lost(const coord_sched_t *s, int r)
{
    return r >= 0 && r < s->cfg.ranks && s->lost[r];
}

tdl_status_t coord_sched_set_available(coord_sched_t *s, int r, bool available)
{
    if (r < 0 || r >= s->cfg.ranks)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "scheduler: no rank %d", r);
    if (available && s->lost[r])
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "scheduler: rank %d is lost", r);
    if (available == !s->offline[r])
        return TDL_OK;
    if (!available && s->busy[r])
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "scheduler: rank %d runs a task", r);
    s->offline[r] = !available;
    s->busy[r] = !available;
    s->nfree += available ? 1 : -1;
    return TDL_OK;
}

tdl_status_t coord_sched_kick(coord_sched_t *s, double now)
{
    s->now = now;
    for (int i = 0; i < s->nlive; i++) {
        if (s->live[i].running)
            continue;
        /* the engine places every waiting request in its order, whichever id it is told */
        int nout = 0;
        coord_policy_view_t v = view_of(s);
        tdl_status_t st =
            s->cfg.policy->on_runnable(s->pstate, &v, s->live[i].id, s->buf[0], s->bufcap, &nout);
        return st == TDL_OK ? apply(s, nout) : st;
    }
    return TDL_OK;
}

int coord_sched_drop_waiting(coord_sched_t *s, bool started_too, uint64_t *ids, int max)
{
    int n = 0;
    for (int i = s->nlive - 1; i >= 0 && n < max; i--) {
        const coord_policy_request_t *r = &s->live[i];
        if (r->running || (!started_too && (r->next != COORD_POLICY_TASK_PREPARE || r->nranks)))
            continue;
        ids[n++] = r->id;
        retire(s, r->id); /* moves the last slot here: the ones above were seen already */
    }
    return n;
}

int coord_sched_state(const coord_sched_t *s, uint64_t id)
{
    int slot = slot_of(s, id);
    return slot < 0 ? -1 : s->live[slot].running ? 1 : 0;
}

tdl_status_t coord_sched_cancel_waiting(coord_sched_t *s, uint64_t id, int *ranks, int *nranks)
{
    int slot = slot_of(s, id);
    if (slot < 0 || s->live[slot].running)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "scheduler: request %llu does not wait",
                               (unsigned long long)id);
    *nranks = coord_sched_held(s, id, ranks);
    retire(s, id);
    return TDL_OK;
}

int coord_sched_held(const coord_sched_t *s, uint64_t id, int *ranks)
{
    int slot = slot_of(s, id), n = 0;
    const coord_policy_request_t *r = slot >= 0 ? &s->live[slot] : NULL;
    for (int i = 0; r && i < r->nranks && i < s->maxdeg; i++)
        if (!s->lost[r->ranks[i]])
            ranks[n++] = r->ranks[i];
    return n;
}

bool coord_sched_available(const coord_sched_t *s, int r)
{
    return r >= 0 && r < s->cfg.ranks && !s->offline[r];
}

bool coord_sched_rank_in_use(const coord_sched_t *s, int r)
{
    if (r < 0 || r >= s->cfg.ranks || (s->busy[r] && !s->offline[r]))
        return true;
    for (int i = 0; i < s->nlive; i++)
        for (int k = 0; k < s->live[i].nranks; k++)
            if (s->live[i].ranks[k] == r)
                return true;
    return false;
}

double coord_sched_backlog_s(const coord_sched_t *s, double now, int *at_risk)
{
    coord_policy_view_t v = view_of(s);
    v.now = now;
    double sum = 0;
    int risk = 0;
    for (int i = 0; i < s->nlive; i++) {
        const coord_policy_request_t *r = &s->live[i];
        double left = coord_policy_remaining_s(&v, r, 1);
        sum += left;
        risk += r->deadline_s > 0 && now + left > r->deadline_s;
    }
    if (at_risk)
        *at_risk = risk;
    return sum;
}

int coord_sched_live(const coord_sched_t *s)
{
    return s->nlive;
}
int coord_sched_running(const coord_sched_t *s)
{
    return s->running;
}
int coord_sched_nfree(const coord_sched_t *s)
{
    return s->nfree;
}
const char *coord_sched_policy_name(const coord_sched_t *s)
{
    return s->cfg.policy->name;
}
void coord_sched_get_stats(const coord_sched_t *s, coord_sched_stats_t *out)
{
    *out = s->stats;
}

tdl_status_t coord_sched_create(const coord_sched_config_t *cfg, coord_sched_t **out)
{
    if (!cfg || !cfg->cost || !cfg->policy || !cfg->start || cfg->ranks < 1 || cfg->chunk < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "scheduler: needs ranks >= 1, chunk >= 1, a "
                                                    "cost model, a policy and a start function");
    coord_sched_t *s = tdl_calloc(1, sizeof(*s));
    if (!s)
        return tdl_error_raise(TDL_ERR_NOMEM, "scheduler: out of memory");
    s->cfg = *cfg;
    s->maxdeg = 1;
    for (int k = 0; k < COORD_COST_NSTAGES; k++)
        for (int i = 0; i < cfg->cost->nfits[k]; i++)
            s->maxdeg = TDL_MAX(s->maxdeg, cfg->cost->fits[k][i].degree);
    s->maxdeg = TDL_MIN(s->maxdeg, cfg->ranks);
    if (cfg->max_degree > 0)
        s->maxdeg = TDL_MIN(s->maxdeg, cfg->max_degree);
    s->nfree = cfg->ranks;
    s->bufcap = cfg->ranks;
    s->cap = 64;
    s->idcap = 64;
    s->busy = tdl_calloc((size_t)cfg->ranks, sizeof(bool));
    s->load = tdl_calloc((size_t)cfg->ranks, sizeof(int));
    s->joined = tdl_calloc(s->idcap, sizeof(uint64_t));
    s->planned = tdl_calloc(s->idcap, sizeof(uint64_t));
    s->cand = tdl_calloc((size_t)s->cap, sizeof(int));
    s->offline = tdl_calloc((size_t)cfg->ranks, sizeof(bool));
    s->lost = tdl_calloc((size_t)cfg->ranks, sizeof(bool));
    s->stamp = tdl_calloc((size_t)cfg->ranks, sizeof(int));
    s->live = tdl_calloc((size_t)s->cap, sizeof(*s->live));
    s->live_ranks = tdl_calloc((size_t)s->cap * (size_t)s->maxdeg, sizeof(int));
    s->prev_ranks = tdl_calloc((size_t)s->maxdeg, sizeof(int));
    s->live_of = tdl_malloc(s->idcap * sizeof(int));
    s->started = tdl_malloc(((size_t)cfg->ranks + 1) * COORD_SCHED_MAX_BATCH * sizeof(uint64_t));
    s->buf[0] = tdl_malloc((size_t)s->bufcap * sizeof(coord_policy_placement_t));
    s->buf[1] = tdl_malloc((size_t)s->bufcap * sizeof(coord_policy_placement_t));
    tdl_status_t st = TDL_OK;
    if (!s->busy || !s->load || !s->joined || !s->planned || !s->cand || !s->offline || !s->lost || !s->stamp || !s->live || !s->live_ranks ||
        !s->prev_ranks || !s->live_of || !s->started || !s->buf[0] || !s->buf[1])
        st = tdl_error_raise(TDL_ERR_NOMEM, "scheduler: out of memory for %d ranks", cfg->ranks);
    if (st == TDL_OK)
        st = cfg->policy->create(&s->pstate);
    if (st != TDL_OK) {
        coord_sched_free(s);
        return st;
    }
    *out = s;
    return TDL_OK;
}

void coord_sched_free(coord_sched_t *s)
{
    if (!s)
        return;
    if (s->pstate)
        s->cfg.policy->destroy(s->pstate);
    free(s->buf[1]), free(s->buf[0]), free(s->started), free(s->live_of), free(s->prev_ranks);
    free(s->live_ranks), free(s->live), free(s->stamp), free(s->lost), free(s->offline),
        free(s->busy);
    free(s->load), free(s->joined), free(s->planned), free(s->cand);
    free(s);
}
