/* Workloads for serving: timed requests as the JSON lines `tidal serve --trace` reads
 * (doc/serving.md), generated with Poisson or piecewise-Poisson arrivals from three classes. */
#ifndef TIDAL_COORD_WORKLOAD_H
#define TIDAL_COORD_WORKLOAD_H

#include <stdint.h>

#include "coord/cost.h"
#include "coord/policy.h"
#include "core/core.h"
#include "serve/serve.h"

/* One trace line. */
typedef struct coord_workload_request {
    int64_t at_ms; /* arrival after the start */
    int label;     /* -1: unconditional */
    int n, resolution, steps;
    double cfg;
    uint64_t seed;
    int priority;
    int euler;           /* 1: "sampler": "euler" (one model evaluation a step); 0: Heun (two),
                          * as tidal serve does by default */
    int64_t deadline_ms; /* from arrival; 0: none */
} coord_workload_request_t;

/* Model evaluations per denoising step of a request. */
static inline int coord_workload_step_evals(const coord_workload_request_t *q)
{
    return q->euler ? 1 : 2;
}

/* The request as a client would send it (the trace's JSON line): what the simulator gives the
 * coordinator. */
void coord_workload_params(const coord_workload_request_t *q, serve_request_params_t *out);

#define COORD_WORKLOAD_MAX_PHASES 32

typedef struct coord_workload_config {
    int ranks;
    double load;  /* arrival rate as a fraction of the cluster's capacity */
    int requests; /* how many to generate (0 with phases: until the phases end) */
    uint64_t seed;
    /* per class S, M, L (resolutions 32, 64, 128) */
    double mix[COORD_POLICY_NCLASSES];   /* shares of the requests */
    double alpha[COORD_POLICY_NCLASSES]; /* deadline = arrival + alpha * single-rank time */
    int steps[COORD_POLICY_NCLASSES];
    int priority[COORD_POLICY_NCLASSES];
    int labels; /* labels drawn uniformly from 0 .. labels - 1; 0: all -1 */
    /* piecewise Poisson: phase i lasts phase_s[i] seconds at phase_load[i] */
    int nphases;
    double phase_load[COORD_WORKLOAD_MAX_PHASES], phase_s[COORD_WORKLOAD_MAX_PHASES];
} coord_workload_config_t;

void coord_workload_config_default(coord_workload_config_t *cfg);
/* Requests per second a cluster of cfg->ranks ranks finishes at load 1: ranks over the mean
 * single-rank time of a request of the mix. */
double coord_workload_capacity_rps(const coord_workload_config_t *cfg,
                                   const coord_cost_model_t *cost);
tdl_status_t coord_workload_generate(const coord_workload_config_t *cfg,
                                     const coord_cost_model_t *cost,
                                     coord_workload_request_t **reqs_out, int *n_out);
/* "-" is standard output. */
tdl_status_t coord_workload_write(const char *path, const coord_workload_request_t *reqs, int n);
/* Checks every line as `tidal serve --trace` does (unknown fields are errors) and sorts by
 * at_ms, ties in file order. Errors read "FILE:LINE: field 'x': ...". */
tdl_status_t coord_workload_read(const char *path, coord_workload_request_t **reqs_out, int *n_out);

#endif /* TIDAL_COORD_WORKLOAD_H */
