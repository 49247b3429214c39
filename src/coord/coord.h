/* The coordinator core: every decision rank 0 makes, with no I/O of its own. Events go in (a
 * request arrived, a task finished or failed, a worker's report, the time), commands come out
 * (run a task, answer a request, resize training, send a rank to training, reload weights).
 * It owns no socket, thread or clock: the caller passes its time, in seconds from the job's
 * start. `tidal serve` and `tidal run` feed it from HTTP, traces and gfc (src/coord/rank0.c),
 * `tidal sim` from simulated completions (src/coord/sim.c), so the simulator runs the job's
 * decisions. doc/coordinator.md. */
#ifndef TIDAL_COORD_COORD_H
#define TIDAL_COORD_COORD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "coord/cost.h"
#include "coord/policy.h"
#include "coord/realloc.h"
#include "coord/sched.h"
#include "core/core.h"
#include "serve/serve.h"
#include "serve/wire.h"

typedef struct coord_config {
    int workers;    /* world ranks 1 .. workers run tasks (and train, when co-located) */
    int chunk;      /* denoising steps per STEP_CHUNK */
    int max_degree; /* widest placement (0: SERVE_MAX_DEGREE) */
    const coord_cost_model_t *cost; /* copied */
    const coord_policy_ops_t *policy;
    bool cfg_parallel; /* even groups run a guided request's two halves at once */
    /* batched chunks (the scheduler's batch_rows): waiting chunks of one resolution and sampler
     * join a chunk on its ranks while their images fit in batch_rows; 0 or 1: none, and none
     * with cfg_parallel (whose halves are one request's) */
    int batch_rows;
    /* requests name images this many times the model's side (a latent model's VAE): tasks run
     * at the model's resolution; 0 or 1: the same */
    int pixel_scale;
    int admit_max;     /* requests the policy sees at once (0: max(16, 4 x workers)) */
    /* co-location: NULL realloc serves on every worker; otherwise every worker trains at
     * first and the policy decides how many serve */
    const coord_realloc_ops_t *realloc;
    coord_realloc_opts_t realloc_opts;
    /* 0 min_train: a tenth of the workers, at least 1. Training's global batch is fixed, so a
     * step on fewer members is longer, and a rank moving either way waits for the step under
     * way: at 16 images a rank, one member of 512 would take a step as long as 512 of theirs */
    int min_train, min_serve;
    bool fixed_weights; /* serving keeps its weights: checkpoints are not reloaded */
    /* when not NULL: every event that can change a decision, and every command, a line each
     * (doc/coordinator.md); coord_replay feeds such a log to another coordinator */
    FILE *event_log;
} coord_config_t;

typedef enum {
    COORD_CMD_TASK = 0, /* run a task of a request on executor ranks */
    COORD_CMD_ANSWER,   /* a request finished: done (with the result) or failed (why) */
    COORD_CMD_RESIZE,   /* to training's leader: the membership after the current step */
    COORD_CMD_JOIN,     /* to a serving worker: join training with this membership */
    COORD_CMD_RELOAD,   /* to a serving worker: serve the weights of this checkpoint */
    COORD_CMD_RECOVER,  /* to a member whose group lost a rank: train on in this membership */
    COORD_CMD_LEAVE,    /* to a member whose group lost a rank: leave training and serve */
    COORD_CMD_RESTART,  /* to a serving worker, once every member died: train in this membership
                         * from the newest checkpoint (or the start) */
    COORD_CMD_DROP      /* to an executor holding a cancelled request's state: let it go */
} coord_cmd_kind_t;

/* A command; pointers in it stay valid until the next coord_command_next. */
typedef struct coord_cmd {
    coord_cmd_kind_t kind;
    uint64_t request; /* TASK, ANSWER, DROP: the request's number (0, 1, ... in arrival order) */
    void *handle;     /* TASK, ANSWER: the caller's handle, as it gave it at arrival */
    int worker; /* RESIZE, JOIN, RELOAD, RECOVER, LEAVE, RESTART, DROP: the world rank it goes to */
    /* TASK, DROP: the request (DROP: its spec.id is what the executor holds), and for TASK the
     * task as executors take it (world ranks) */
    const serve_traj_spec_t *spec;
    serve_task_cmd_t task;
    double estimate_s; /* the cost model's duration, a move of state included */
    /* ANSWER */
    bool ok, late;  /* late: it finished after its deadline */
    bool cancelled; /* not ok: cancelled (coord_request_cancel), neither failed nor late */
    double arrival_s, finish_s;
    void *result; /* what coord_task_finished passed with the DECODE (the PNG) */
    size_t result_len;
    const char *why; /* of a failure */
    /* RESIZE, JOIN, RECOVER, RESTART (commands taken together may share it) */
    const serve_wire_members_t *members;
    /* RELOAD */
    const char *path;
} coord_cmd_t;

/* What the coordinator knows of training. */
typedef struct coord_training {
    bool colocated;           /* workers train */
    bool done;                /* training has run its last step */
    bool seen_step;           /* a step has been reported in this job */
    int64_t step, first_step; /* the last step reported; where this job began (a resume) */
    double loss;              /* of the last step */
    const char *latest;       /* the last checkpoint ("" before one) */
    int serving, training;    /* ranks in each role now (moving ones excluded) */
    int moves_to_serve, moves_to_train;
    int regroups;  /* times training went on without members that died */
    int restarts;  /* times every member died and serving ranks took it up again from
                    * the newest checkpoint */
    bool orphaned; /* every training member died, and no rank has taken it up yet */
} coord_training_t;

/* Moves to serving, timed from the decision to the rank's report that it serves. */
typedef struct coord_move_stats {
    int n;
    const double *ms;          /* n move times, sorted */
    const double *over_budget; /* each over (the training step it waited for + 10 ms), sorted */
    const double *over_prev;   /* each over (the step before the decision + 10 ms), sorted */
} coord_move_stats_t;

#define COORD_MAX_RESTARTS 3 /* starts again of one request before it fails */

typedef struct coord_stats {
    uint64_t arrived, done, failed, late, cancelled;
    long tasks, migrations;
    long restarts; /* requests started again after a rank died */
    int lost;      /* executor ranks declared dead */
    double busy_rank_s, migration_s;
    long batches, batched; /* chunks that took in others, and their requests (heads included) */
} coord_stats_t;

typedef struct coord coord_t;

tdl_status_t coord_create(const coord_config_t *cfg, coord_t **out);
void coord_free(coord_t *c);

/* ---- events ----------------------------------------------------------------------------- */

/* Whether the policy takes another request now (the rest wait in the caller's queue). */
bool coord_admits(const coord_t *c);
/* The ranks that always train among `workers` for a min_train of the configuration (0: a
 * tenth, at least 1). */
int coord_min_train(int workers, int min_train);
/* A request arrives, as serve validated it (id and seed filled in). handle: the caller's. */
tdl_status_t coord_request_arrive(coord_t *c, double now, const serve_request_params_t *p,
                                  void *handle);
/* The same for a request that arrived at `arrived` (<= now) and waited in the caller's queue
 * since: its deadline, and the latency its answer reports, count from then. */
tdl_status_t coord_request_arrive_at(coord_t *c, double now, double arrived,
                                     const serve_request_params_t *p, void *handle);
/* Cancels `request`: one waiting between tasks is answered cancelled at once (and DROP
 * commands free its state on the ranks that hold it); one running is, when its task ends,
 * unless that task was its last (then it is done). Finished or unknown to the scheduler: no
 * effect. */
tdl_status_t coord_request_cancel(coord_t *c, double now, uint64_t request);
/* How many request numbers have been given: the last request that arrived is this minus 1. */
uint64_t coord_requests(const coord_t *c);
/* The running task of `request` ended: ok, or failed. result/result_len: the DECODE's PNG,
 * handed on in the ANSWER (the coordinator never frees it). */
tdl_status_t coord_task_finished(coord_t *c, double now, uint64_t request, bool ok, void *result,
                                 size_t result_len);
/* The running task of `request` failed because a rank it needed died (the dispatcher's
 * TDL_ERR_PEER): the request starts again from PREPARE on live ranks, its seed making the same
 * image, at most COORD_MAX_RESTARTS times; then it fails. */
tdl_status_t coord_task_lost(coord_t *c, double now, uint64_t request);
/* World rank `worker` is dead (gfc declared it; why: its reason): it leaves the pool for good,
 * and the waiting requests whose state it held start again from PREPARE. Its running task, if
 * any, fails on its own (coord_task_lost). A training member's death starts a regroup: once
 * every live member has reported SERVE_REPORT_FAILED, each gets a RECOVER naming them all, the
 * state from the one with the most steps done (a member that was leaving gets a LEAVE as soon as
 * it reports); no resize is decided meanwhile. Telling it twice changes nothing. */
tdl_status_t coord_rank_lost(coord_t *c, double now, int worker, const char *why);
/* A report of worker `worker` (world rank). A worker's error report is TDL_ERR_PEER naming it. */
tdl_status_t coord_report(coord_t *c, double now, int worker, const serve_wire_report_t *r);
/* The time passes: reallocation decisions; `queued`: requests waiting in the caller's queue.
 * Plain serving: TDL_ERR_INTERNAL when the policy leaves requests waiting on idle executors. */
tdl_status_t coord_tick(coord_t *c, double now, int queued);
/* The job stops: requests no task of which has started fail with `why` (ANSWER commands);
 * started ones run to their end. Answers how many failed. */
int coord_shutdown(coord_t *c, double now, const char *why);

/* ---- commands and queries ----------------------------------------------------------------- */

/* The next command, in the order decided; NULL when there is none. */
const coord_cmd_t *coord_command_next(coord_t *c);
int coord_live(const coord_t *c);    /* requests arrived and not finished */
int coord_running(const coord_t *c); /* tasks running */
/* Single-rank seconds of the work left: the live requests' and `queued` more of average size. */
double coord_backlog_s(const coord_t *c, double now, int queued);
/* Ranks per role, for the queue's gauge (rank 0 coordinates). */
void coord_roles(const coord_t *c, int ranks[SERVE_ROLE_COUNT]);
void coord_training_get(const coord_t *c, coord_training_t *out);
void coord_move_stats_get(coord_t *c, coord_move_stats_t *out);
void coord_stats_get(const coord_t *c, coord_stats_t *out);
const char *coord_policy_name(const coord_t *c);

/* Replays an event log (coord_config_t.event_log) on a coordinator made from cfg, whose
 * workers, policy and reallocation must be those the log's first line names: every event is
 * fed at its time, commands are taken where the log took them, and the new coordinator's own log
 * goes to cfg->event_log. The same code fed the same events writes the same lines.
 * TDL_ERR_CORRUPT names the line it cannot read, TDL_ERR_MISMATCH a header that differs. */
tdl_status_t coord_replay(const char *path, const coord_config_t *cfg);
const char *coord_realloc_name(const coord_t *c);

/* The cost model's degrees that a model of num_heads heads and width hidden can run on
 * `executors` ranks (at most max_degree wide). */
void coord_cost_trim(coord_cost_model_t *cost, int num_heads, int hidden, int executors,
                     int max_degree);
/* What the scheduler sees of a request: the one conversion the job and the simulator share. */
void coord_sched_request_of(const serve_request_params_t *p, double now,
                            coord_sched_request_t *out);

#endif /* TIDAL_COORD_COORD_H */
