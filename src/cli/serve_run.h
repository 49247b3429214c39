/* The coordinator loop of `tidal serve` under mpirun, which `tidal run` (cmd_run.c) reuses with
 * hooks: rank 0 takes requests (HTTP, trace) into the scheduler (src/coord/sched.h) and sends
 * their tasks to executor ranks; the hooks add what co-location needs (ranks that train, the
 * reallocation policy, the workers' own loop). */
#ifndef TIDAL_CLI_SERVE_RUN_H
#define TIDAL_CLI_SERVE_RUN_H

#include <stdio.h>

#include "coord/cost.h"
#include "coord/sched.h"
#include "core/core.h"
#include "dit/dit.h"
#include "gfc/gfc.h"
#include "serve/serve.h"

typedef struct serve_coord_req {
    serve_job_t *job;
    serve_traj_spec_t spec;
    uint64_t next_seq; /* tasks sent */
    double arrival_s;
} serve_coord_req_t;

/* Rank 0's coordinator state. */
typedef struct serve_coord {
    serve_dispatcher_t *d;
    serve_queue_t *q;
    coord_sched_t *sched;
    coord_cost_model_t cost;
    serve_coord_req_t *reqs; /* by the scheduler's request number */
    size_t nreqs, cap;
    bool cfg_parallel;
    double t0;
    FILE *log;
} serve_coord_t;

typedef struct serve_hooks {
    void *user;
    /* Every rank: the model serving starts with (NULL: --ckpt's weights) */
    tdl_status_t (*model)(void *user, tdl_params_t *params, int rank, dit_model_t **out);
    /* Rank 0, once the scheduler exists (every executor is available to it) */
    tdl_status_t (*start)(void *user, serve_coord_t *c, int world);
    /* Rank 0, every turn of the loop */
    tdl_status_t (*tick)(void *user, serve_coord_t *c, double now);
    /* Rank 0: whether the hooks' own work is over (the job may end when the trace is) */
    bool (*done)(void *user);
    /* Rank 0, after the last request: summaries, plots */
    void (*finish)(void *user, serve_coord_t *c);
    /* Ranks 1 .. N-1: their whole life, instead of serve_executor_loop */
    tdl_status_t (*worker)(void *user, tdl_params_t *params, gfc_runtime_t *rt, int rank, int world,
                           dit_model_t *model);
} serve_hooks_t;

/* `tidal serve` with hooks (NULL: plain serving). Answers the exit code of every rank. */
int serve_main(tdl_params_t *params, const char *what, const serve_hooks_t *hooks);
/* The single-rank seconds of the work left in the scheduler and the queue. */
double serve_coord_backlog_s(const serve_coord_t *c, int waiting);

#endif /* TIDAL_CLI_SERVE_RUN_H */
