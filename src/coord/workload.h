/* Workloads for serving: timed requests as the JSON lines `tidal serve --trace` reads
 * (doc/serving.md), generated with Poisson, piecewise-Poisson or diurnal arrivals from three
 * classes. */
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
    int euler;           /* 1: one model evaluation a step ("euler", "ddpm", "ddim"); 0: Heun
                          * (two), as tidal serve does by default */
    int diffusion;       /* 1: "ddpm", 2: "ddim" (a Gaussian diffusion model's); 0: rf */
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
#define COORD_WORKLOAD_MAX_BURSTS 64
/* The most requests a trace that runs "until the end" (requests 0) may be expected to hold. */
#define COORD_WORKLOAD_MAX_REQUESTS 100000000

/* A day-long trace (`tidal workload --diurnal`): a non-homogeneous Poisson process whose rate at
 * hour h of the day is base x (1 + a cos(2 pi (h - peak_hour) / 24)), a = (R - 1) / (R + 1) so
 * that peak / trough = R, times burst_height inside a burst (overlapping bursts do not compound).
 * base is chosen so that the mean over the day, bursts included, is the config's load times the
 * capacity. at_ms 0 is midnight; a day lasts day_s seconds (less than 86400: the same shape in
 * less time), and hours and minutes below are day-time, scaled with it. */
typedef struct coord_workload_diurnal {
    int on;
    double day_s;          /* 1 .. 1e9 */
    double peak_to_trough; /* R: 1 (flat) .. 1e6 */
    double peak_hour;      /* 0 .. 24; the trough is 12 hours away */
    int nbursts;           /* 0 .. COORD_WORKLOAD_MAX_BURSTS */
    double burst_height;   /* 1 .. 100 */
    double burst_minutes;  /* > 0; a burst ends by midnight: start hour + minutes / 60 <= 24 */
    int burst_hours_given; /* 1: the bursts start at burst_hour[]; 0: hours drawn from the seed,
                            * uniform in 0 .. 24 - burst_minutes / 60 */
    double burst_hour[COORD_WORKLOAD_MAX_BURSTS];
} coord_workload_diurnal_t;

typedef struct coord_workload_config {
    int ranks;
    double load;  /* arrival rate as a fraction of the cluster's capacity */
    int requests; /* how many to generate (0 with phases: until the phases end; 0 with diurnal:
                   * one day; more than a day holds: the day repeats) */
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
    coord_workload_diurnal_t diurnal; /* off by default; not with phases */
} coord_workload_config_t;

/* The defaults of `tidal workload`: 1000 requests at load 1 on 8 ranks, the classes of
 * doc/scheduler.md; diurnal off, its fields at their defaults (a day of 86400 s, R 4, peak at
 * 14 h, no bursts; a burst's height 3, its length 10 minutes). */
void coord_workload_config_default(coord_workload_config_t *cfg);
/* Checks what needs no cost model; generate checks it too. Errors (TDL_ERR_INVALID_ARG) name
 * the option of `tidal workload` at fault: "workload: --peak-to-trough 0.5: ...". */
tdl_status_t coord_workload_config_check(const coord_workload_config_t *cfg);
/* Requests per second a cluster of cfg->ranks ranks finishes at load 1: ranks over the mean
 * single-rank time of a request of the mix. */
double coord_workload_capacity_rps(const coord_workload_config_t *cfg,
                                   const coord_cost_model_t *cost);
/* The rate of a diurnal trace, resolved (burst hours drawn): what generate thins against. */
typedef struct coord_workload_curve {
    double day_s, peak_hour, burst_height;
    double base_rps;  /* the curve's mean rate outside bursts */
    double amplitude; /* a = (R - 1) / (R + 1) */
    double peak_rps;  /* base x (1 + a) x burst_height: a bound of the rate, the thinning's */
    int nbursts;
    double burst_hour[COORD_WORKLOAD_MAX_BURSTS]; /* start hours, as given or drawn */
    /* the bursts' union, in seconds after midnight: sorted, disjoint */
    int nwindows;
    double window_start_s[COORD_WORKLOAD_MAX_BURSTS], window_end_s[COORD_WORKLOAD_MAX_BURSTS];
} coord_workload_curve_t;

tdl_status_t coord_workload_curve_init(const coord_workload_config_t *cfg,
                                       const coord_cost_model_t *cost, coord_workload_curve_t *out);
/* Requests per second at t seconds after the first midnight (the day repeats). */
double coord_workload_curve_rate(const coord_workload_curve_t *k, double t_s);

/* Poisson at load x capacity, piecewise Poisson over the phases, or diurnal (Lewis-Shedler
 * thinning); the same config and seed give the same trace. */
tdl_status_t coord_workload_generate(const coord_workload_config_t *cfg,
                                     const coord_cost_model_t *cost,
                                     coord_workload_request_t **reqs_out, int *n_out);
/* "-" is standard output. */
tdl_status_t coord_workload_write(const char *path, const coord_workload_request_t *reqs, int n);
/* Checks every line as `tidal serve --trace` does (unknown fields are errors) and sorts by
 * at_ms, ties in file order. Errors read "FILE:LINE: field 'x': ...". */
tdl_status_t coord_workload_read(const char *path, coord_workload_request_t **reqs_out, int *n_out);

#endif /* TIDAL_COORD_WORKLOAD_H */
