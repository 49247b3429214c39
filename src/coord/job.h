/* The real job around the coordinator core (coord.h): rank 0's side feeds it from HTTP, a
 * trace and the executors' reports over gfc and carries out its commands (src/coord/rank0.c,
 * with co-location's files and summary in src/coord/colocate.c); a worker's side runs the tasks
 * it is sent and, when co-located, trains between them (src/coord/worker.c). `tidal serve` and
 * `tidal run` start MPI and the model and then call these. doc/coordinator.md. */
#ifndef TIDAL_COORD_JOB_H
#define TIDAL_COORD_JOB_H

#include <signal.h>
#include <stdbool.h>

#include "coord/coord.h"
#include "dit/dit.h"
#include "gfc/gfc.h"
#include "serve/serve.h"
#include "train/train.h"

/* Co-location: what rank 0 needs beyond serving. */
typedef struct coord_colocate_opts {
    const coord_realloc_ops_t *realloc;
    coord_realloc_opts_t realloc_opts;
    int min_train, min_serve;
    const char *out;  /* the run's folder: timeline.csv, timeline.png, loss.csv, samples.png */
    double row_every; /* seconds between rows of timeline.csv */
    int batch;        /* images per training step, for the timeline's images/s */
    bool fixed;       /* --ckpt: serving keeps those weights */
} coord_colocate_opts_t;

typedef struct coord_rank0_opts {
    const char *ckpt, *weights; /* named in the start line (ckpt NULL: the training run's) */
    bool http_on;
    serve_http_opts_t http; /* limits are filled in from the model */
    const char *trace;      /* NULL: none */
    bool exit_after_trace;
    int queue_max, keep_results;
    int max_resolution, default_steps;
    double default_cfg;
    double max_seconds;    /* 0: until *stop */
    double progress_every; /* 0: no progress lines */
    bool batching; /* requests of one resolution share the model's passes: alone, step by step;
                    * under mpirun, chunks of one sampler on the same ranks */
    /* under mpirun */
    const char *policy; /* a placement policy by name */
    const char *cost;   /* a cost model file (NULL: the built-in one) */
    const char *request_log;
    const char *event_log; /* the coordinator's events and commands (coord_config_t.event_log) */
    int chunk;
    bool cfg_parallel;
    const dit_vae_t *vae; /* a latent model's: its decoder makes the images (NULL: none) */
    const coord_colocate_opts_t *colocate; /* NULL: plain serving */
} coord_rank0_opts_t;

/* Rank 0 of a world of `world` ranks: serves until *stop (a signal's number), --max-seconds or
 * the trace's end; d NULL: alone, it samples every request itself. A bad --trace sets
 * *bad_input (exit 2 for the program). The executors are not stopped here. */
tdl_status_t coord_rank0_run(const coord_rank0_opts_t *o, int world, dit_model_t *model,
                             serve_dispatcher_t *d, volatile sig_atomic_t *stop, bool *bad_input);

/* A co-located worker: what it trains and how it keeps checkpoints. */
typedef struct coord_worker_opts {
    train_opts_t train; /* train.steps: the run's last step */
    int64_t ckpt_every;
    int keep;
    const char *ckpt_dir;
    bool fixed; /* --ckpt: serving keeps its weights */
} coord_worker_opts_t;

/* Ranks 1 .. world - 1 of `tidal run`: train in the membership rank 0 sets, serve when moved
 * out of it, until rank 0 says stop. */
tdl_status_t coord_worker_run(const coord_worker_opts_t *o, gfc_runtime_t *rt, int me, int world,
                              dit_model_t *serve_model);

/* co-location's edges at rank 0 (colocate.c), called by coord_rank0_run */
typedef struct coord_colocate coord_colocate_t;
tdl_status_t coord_colocate_open(const coord_colocate_opts_t *o, int workers,
                                 coord_colocate_t **out);
void coord_colocate_report(coord_colocate_t *k, const serve_wire_report_t *r);
void coord_colocate_row(coord_colocate_t *k, coord_t *c, serve_queue_t *q, double now, bool force);
void coord_colocate_finish(coord_colocate_t *k, coord_t *c, serve_queue_t *q, double elapsed);
void coord_colocate_close(coord_colocate_t *k);

/* The built-in trace of `tidal run --demo`: two bursts over 85 s, written to path; 32 and 64
 * pixel requests, or 32 alone when max_resolution is below 64. */
tdl_status_t coord_colocate_demo_trace(int workers, uint64_t seed, int steps, int max_resolution,
                                       const char *path);

#endif /* TIDAL_COORD_JOB_H */
