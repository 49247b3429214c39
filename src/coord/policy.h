/* Serving policies: where and how wide each trajectory task of a request runs. A request is a
 * sequence of tasks, PREPARE, STEP_CHUNKs of up to `chunk` steps, DECODE; at every task boundary
 * the request gives its ranks back and a policy places its next task (an ordered list of ranks,
 * the sequence-parallel degree, the steps of the chunk). Policies do no I/O and keep no clock of
 * their own, so the coordinator and the simulator (src/coord/sim.c) run the same code.
 *
 * The caller (coordinator or simulator) calls on_arrival when a request arrives, on_runnable
 * when a request's next task may start (after the previous one finished), and on_event for a
 * worker's report on a task (started, finished, failed). Each callback may return placements;
 * the caller starts them in order before the next callback. */
#ifndef TIDAL_COORD_POLICY_H
#define TIDAL_COORD_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "coord/cost.h"
#include "core/core.h"

#define COORD_POLICY_MAX_DEGREE 1024

typedef enum {
    COORD_POLICY_TASK_PREPARE = 0,
    COORD_POLICY_TASK_STEP_CHUNK,
    COORD_POLICY_TASK_DECODE
} coord_policy_task_t;

typedef enum {
    COORD_POLICY_CLASS_S = 0,
    COORD_POLICY_CLASS_M,
    COORD_POLICY_CLASS_L,
    COORD_POLICY_NCLASSES
} coord_policy_class_t;

/* One live request (arrived, not finished), as the caller sees it. */
typedef struct coord_policy_request {
    uint64_t id;
    int resolution, tokens; /* tokens of one image, from the cost model's patch */
    int n;                  /* images, guidance's doubled batch included */
    int steps_total, steps_done;
    coord_policy_task_t next; /* the task that runs next (or runs now, when running) */
    double arrival_s;         /* caller's clock, seconds */
    double deadline_s;        /* absolute; 0: none */
    int priority;             /* higher first */
    coord_policy_class_t cls; /* from the resolution: 32 S, 64 M, 128 L */
    int last_degree;          /* degree of the last task placed; 0 before the first */
    double step_evals;        /* model evaluations per step: 1 Euler, 2 Heun (0 reads as 1) */
    int sampler;              /* dit_sampler_kind_t (the scheduler's, for batching) */
    bool running;             /* a task of it is running on ranks[] */
    const int *ranks;         /* the ranks of the running task, else of the last one (state) */
    int nranks;
} coord_policy_request_t;

/* What a policy sees: the caller's state at `now`. */
typedef struct coord_policy_view {
    double now;
    const coord_cost_model_t *cost;
    int nranks;
    const bool *busy; /* busy[r]: rank r runs a task; a placement may use only ranks not busy */
    int nfree;        /* ranks not busy */
    const coord_policy_request_t *requests; /* every live request, running or not */
    int nrequests;
    int chunk; /* steps per STEP_CHUNK */
    /* Optional (NULL in a view built by hand): request id -> its index in requests[], -1 once
     * it is gone, for ids below nids; and how many requests are not running. With them a policy
     * may keep its own order of the waiting requests across calls (the engine does, for orders
     * fixed at arrival), checking it against nwaiting. */
    const int *slot_of;
    uint64_t nids;
    int nwaiting;
} coord_policy_view_t;

typedef enum {
    COORD_POLICY_EV_STARTED = 0,
    COORD_POLICY_EV_FINISHED,
    COORD_POLICY_EV_FAILED
} coord_policy_event_kind_t;

typedef struct coord_policy_event {
    coord_policy_event_kind_t kind;
    uint64_t request_id;
    coord_policy_task_t task;
} coord_policy_event_t;

/* Starts the next task of request_id on ranks[0 .. degree - 1], in that order (the first one
 * decodes and answers). steps: the steps of a STEP_CHUNK, 0 for PREPARE and DECODE. */
typedef struct coord_policy_placement {
    uint64_t request_id;
    int degree;
    int steps;
    int ranks[COORD_POLICY_MAX_DEGREE];
} coord_policy_placement_t;

/* Each callback writes at most max_out placements to out and their count to *nout; a
 * placement never names a busy rank or a running request, nor one rank twice in one call. */
typedef tdl_status_t (*coord_policy_cb_t)(void *state, const coord_policy_view_t *view,
                                          uint64_t request_id, coord_policy_placement_t *out,
                                          int max_out, int *nout);

typedef struct coord_policy_ops {
    const char *name;
    const char *summary;
    tdl_status_t (*create)(void **state_out);
    void (*destroy)(void *state);
    coord_policy_cb_t on_arrival;  /* request_id arrived */
    coord_policy_cb_t on_runnable; /* request_id's next task may start */
    tdl_status_t (*on_event)(void *state, const coord_policy_view_t *view,
                             const coord_policy_event_t *ev, coord_policy_placement_t *out,
                             int max_out, int *nout);
} coord_policy_ops_t;

/* NULL when there is no policy of that name. */
const coord_policy_ops_t *coord_policy_find(const char *name);
/* "static_sp1, static_sp2, ..., edf_priority", for help and errors. */
const char *coord_policy_names(void);
/* The i-th policy, NULL past the last. */
const coord_policy_ops_t *coord_policy_at(int i);

coord_policy_class_t coord_policy_class_of(int resolution);
const char *coord_policy_class_name(coord_policy_class_t cls);

/* ---- estimates the policies share (pure functions of the view) ---------------------------- */

/* The cost-model stage of a task. */
coord_cost_stage_t coord_policy_task_stage(coord_policy_task_t task);
/* The degree a task of `r` runs at when a policy asks for `want`: the largest degree the cost
 * model has for the task's stage that is at most want; 0 when none. */
int coord_policy_stage_degree(const coord_policy_view_t *v, const coord_policy_request_t *r,
                              coord_policy_task_t task, int want);
/* Seconds to finish r from its next task on if every remaining task ran at degree `want`
 * (clamped per stage as above), a migration included when the chunk degree changes. */
double coord_policy_remaining_s(const coord_policy_view_t *v, const coord_policy_request_t *r,
                                int want);
/* Seconds the whole request takes on one rank: the size the workload's deadlines scale. evals:
 * model evaluations of its denoising (steps x 2 for Heun). */
double coord_policy_single_rank_s(const coord_cost_model_t *cost, int resolution, int n,
                                  double evals);
/* Model evaluations per step of r (1 when it does not say). */
static inline double coord_policy_step_evals(const coord_policy_request_t *r)
{
    return r->step_evals > 0 ? r->step_evals : 1;
}

#endif /* TIDAL_COORD_POLICY_H */
