/* The scheduling core that the coordinator (tidal serve) and the simulator (tidal sim) share:
 * the live requests, which ranks are busy, and the conversation with a policy. The caller tells
 * it what happened (a request arrived, a task finished or failed) at its own clock; it asks the
 * policy, checks each placement, works out whether the request's state must move, and calls the
 * caller's start function for every task to run. The simulator's start function schedules a
 * completion from the cost model; the coordinator's sends the task to executor ranks. */
#ifndef TIDAL_COORD_SCHED_H
#define TIDAL_COORD_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "coord/cost.h"
#include "coord/policy.h"
#include "core/core.h"

#define COORD_SCHED_MAX_BATCH 64 /* requests in one batched chunk (SERVE_MAX_BATCH) */

/* A task to start now. ranks/prev point into the scheduler and are valid during the call. */
typedef struct coord_sched_task {
    uint64_t id; /* the request, as coord_sched_arrive numbered it */
    coord_policy_task_t task;
    int steps; /* of a STEP_CHUNK (0 otherwise); steps_before of them were done before */
    int steps_before;
    int degree;
    const int *ranks; /* degree ranks, 0 .. nranks - 1; ranks[0] decodes */
    int nprev;        /* the ranks that ran its last task (0 before the first) */
    const int *prev;
    bool move;         /* the state moves from prev to ranks before the task runs */
    double estimate_s; /* the cost model's duration, the move included (a batch's: all moves) */
    /* chunks of other requests started right after this one on the same ranks, as one batch
     * with it (0: the batch's last, or alone); a batch's members share its estimate */
    int batch_after;
} coord_sched_task_t;

typedef tdl_status_t (*coord_sched_start_fn)(void *user, const coord_sched_task_t *task);
/* A request starts again from PREPARE: a rank that held its state or ran its task is lost. */
typedef void (*coord_sched_restart_fn)(void *user, uint64_t id);

typedef struct coord_sched_config {
    int ranks;      /* ranks 0 .. ranks - 1 run tasks */
    int chunk;      /* denoising steps per STEP_CHUNK */
    int max_degree; /* widest placement accepted (0: ranks) */
    /* batched chunks: a chunk takes in waiting chunks of its resolution and sampler while all
     * their images fit in batch_rows (guidance's doubled rows counted) and the cost model's
     * batch factor says that sharing a step costs less than two (never, without a batch table);
     * 0 or 1: no batching */
    int batch_rows;
    const coord_cost_model_t *cost;
    const coord_policy_ops_t *policy;
    coord_sched_start_fn start;
    coord_sched_restart_fn restarted; /* may be NULL */
    void *user;
} coord_sched_config_t;

/* A request as it arrives. */
typedef struct coord_sched_request {
    int resolution, n, steps; /* n: images, guidance's doubled batch included */
    double step_evals;        /* model evaluations per step: 1 Euler, 2 Heun (0: 1) */
    int sampler;              /* dit_sampler_kind_t: only chunks of one sampler batch together */
    double deadline_s;        /* absolute, on the caller's clock; 0: none */
    int priority;
} coord_sched_request_t;

typedef struct coord_sched_stats {
    long tasks, migrations;
    double busy_rank_s; /* rank-seconds of the estimates of the tasks started */
    double migration_s; /* estimated seconds of the moves */
    long restarts;      /* requests started again after a rank was lost */
    long batches;       /* chunks that took in others */
    long batched;       /* the requests of those batches, heads included */
    int lost;           /* ranks lost */
} coord_sched_stats_t;

typedef struct sched coord_sched_t;

tdl_status_t coord_sched_create(const coord_sched_config_t *cfg, coord_sched_t **out);
void coord_sched_free(coord_sched_t *s);
/* A request arrives at `now`; *id_out gets its number (0, 1, 2, ... in order of arrival).
 * Placements the policy makes start before it returns. */
tdl_status_t coord_sched_arrive(coord_sched_t *s, double now, const coord_sched_request_t *req,
                                uint64_t *id_out);
/* The running task of request `id` finished at `now`; *request_done: it was the last (DECODE).
 * Its ranks are free again; the policy hears of it and its placements start. */
tdl_status_t coord_sched_finished(coord_sched_t *s, double now, uint64_t id, bool *request_done);
/* The running task of `id` failed: its ranks are free and the request is dropped. */
tdl_status_t coord_sched_failed(coord_sched_t *s, double now, uint64_t id);
/* The running task of `id` failed because a rank it used is lost: its ranks that are not lost
 * are free, and the request starts again from PREPARE (its seed makes the same image). */
tdl_status_t coord_sched_restart(coord_sched_t *s, double now, uint64_t id);
/* Rank r is gone for good: out of the policy's reach, never given back. A waiting request whose
 * state r held starts again from PREPARE at once; one whose task runs on r starts again when
 * that task's failure comes (coord_sched_restart). The ranks that shared the lost state are
 * the first PREPARE's previous ranks, so that they let go of it. */
tdl_status_t coord_sched_rank_lost(coord_sched_t *s, double now, int r);
bool coord_sched_lost(const coord_sched_t *s, int r);
/* Takes rank r out of the policy's reach (it trains) or gives it back; a rank running a task
 * cannot be taken, nor a lost one given back (TDL_ERR_INVALID_ARG). */
tdl_status_t coord_sched_set_available(coord_sched_t *s, int r, bool available);
/* Asks the policy to place what it will on the free ranks at `now` (after ranks were given
 * back: no arrival or completion would). */
tdl_status_t coord_sched_kick(coord_sched_t *s, double now);
/* Drops the requests no task of which has started (a server stopping fails them), or with
 * started_too every request with no task running (no placement fits the ranks left): writes up
 * to max of their ids and answers how many were dropped. */
int coord_sched_drop_waiting(coord_sched_t *s, bool started_too, uint64_t *ids, int max);
/* Request id: -1 not live (finished, or never), 0 waiting between tasks, 1 a task running. */
int coord_sched_state(const coord_sched_t *s, uint64_t id);
/* The ranks of request id's running task, or of its last one (which hold its state), none
 * lost, into ranks[0 .. count) (the scheduler's max degree at most); 0 when not live. */
int coord_sched_held(const coord_sched_t *s, uint64_t id, int *ranks);
/* Takes waiting request id out (cancelled); ranks[0 .. *nranks): those that held its state. */
tdl_status_t coord_sched_cancel_waiting(coord_sched_t *s, uint64_t id, int *ranks, int *nranks);
bool coord_sched_available(const coord_sched_t *s, int r);
/* Whether rank r runs a task or holds the state of a live request (its last task ran there). */
bool coord_sched_rank_in_use(const coord_sched_t *s, int r);
/* Single-rank seconds of the work the live requests have left, by the cost model; *at_risk
 * (may be NULL): how many of them would miss their deadline even at degree 1 from `now`. */
double coord_sched_backlog_s(const coord_sched_t *s, double now, int *at_risk);
int coord_sched_live(const coord_sched_t *s);    /* requests arrived and not finished */
int coord_sched_running(const coord_sched_t *s); /* tasks running */
int coord_sched_nfree(const coord_sched_t *s);
const char *coord_sched_policy_name(const coord_sched_t *s);
void coord_sched_get_stats(const coord_sched_t *s, coord_sched_stats_t *out);

#endif /* TIDAL_COORD_SCHED_H */
