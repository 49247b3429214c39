/* A discrete-event simulation of the coordinator: ranks, the requests of a trace, the policy's
 * placements, task completions costed by the cost model, migrations when a request's next task
 * goes to another set of ranks; with co-location, training's steps, resizes and joins costed by
 * the training model, and the reallocation policy's decisions. Deterministic: the same inputs
 * give the same numbers. */
#ifndef TIDAL_COORD_SIM_H
#define TIDAL_COORD_SIM_H

#include <stdio.h>

#include "coord/cost.h"
#include "coord/policy.h"
#include "coord/realloc.h"
#include "coord/train_model.h"
#include "coord/workload.h"

typedef struct coord_sim_config {
    int ranks;
    int chunk; /* denoising steps per STEP_CHUNK task */
    const coord_cost_model_t *cost;
    const coord_policy_ops_t *policy;
    int batch_rows; /* batched chunks up to this many images (coord_config_t); 0: none */
    int admit_max; /* requests the policy sees at once (0: as tidal serve, max(16, 4 x ranks));
                    * the rest wait in a queue, in order of arrival */
    /* co-location (realloc not NULL): the ranks are the workers of `tidal run`, all training at
     * first, moved by the reallocation policy through the same coordinator code; a step and a
     * join cost what `train` says, a leaver waits for the step under way to end */
    const coord_realloc_ops_t *realloc;
    coord_realloc_opts_t realloc_opts;
    int min_train, min_serve;
    const coord_train_model_t *train;
    int64_t train_steps; /* training's last step; 0: it goes on until the trace is served */
    double tick_s;       /* how often the coordinator decides (0: 0.02 s, as tidal run) */
    FILE *timeline;      /* a CSV row every row_s simulated seconds, when not NULL */
    double row_s;
    FILE *event_log; /* the coordinator's (coord_config_t.event_log), when not NULL */
} coord_sim_config_t;

typedef struct coord_sim_result {
    int requests;
    double makespan_s;     /* first arrival to last finish */
    double throughput_rps; /* requests / makespan */
    double goodput_rps;    /* requests that met their deadline (or had none) / makespan */
    double mean_s, p50_s, p95_s, p99_s; /* latency, arrival to finish; nearest rank */
    int with_deadline, slo_violations;
    double slo_violation_rate; /* violations / requests with a deadline (0 when none) */
    double utilization;        /* rank-seconds busy (migrations included) / ranks x makespan */
    long tasks, migrations;
    double migration_s;    /* total time spent moving state */
    long batches, batched; /* chunks that took in others, and their requests (heads included) */
    /* co-location, over the simulated time (0 to the last answer) */
    double end_s;
    double train_device_h; /* device-hours in training: its members times the time */
    int64_t train_steps;
    double train_images_per_s; /* images trained over end_s */
    int moves_to_serve, moves_to_train;
    double moves_per_h;
} coord_sim_result_t;

/* Runs the trace (sorted by at_ms) to the end. finish_s, when not NULL, receives each request's
 * finish time in seconds from time 0, in the order of reqs. Fails with TDL_ERR_INTERNAL naming
 * the policy if it places a task wrongly or leaves requests waiting with every rank idle. */
tdl_status_t coord_sim_run(const coord_sim_config_t *cfg, const coord_workload_request_t *reqs,
                           int n, coord_sim_result_t *result, double *finish_s);

#endif /* TIDAL_COORD_SIM_H */
