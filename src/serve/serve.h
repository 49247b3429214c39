/* tidal serve: requests, their table and queue, the HTTP front door, traces, PNG output,
 * trajectory tasks, state migration, executors and rank 0's dispatcher, each part in a section of
 * its own below naming its file. The messages between rank 0 and the executors are encoded in
 * src/serve/wire.h. doc/serving.md describes the API as clients see it. */
#ifndef TIDAL_SERVE_H
#define TIDAL_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "dit/dit.h"
#include "dit/vae.h"
#include "gfc/gfc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== requests (src/serve/request.c) ========================================================== */

/* The limits every request is checked against (doc/serving.md lists them for clients). */
#define SERVE_ID_MAX          64                 /* ids: 1..64 of [A-Za-z0-9._-] */
#define SERVE_MAX_IMAGES      16                 /* n */
#define SERVE_MAX_STEPS       1000               /* steps */
#define SERVE_MAX_CFG         20.0               /* cfg in [0, 20] */
#define SERVE_MAX_SEED        (1ull << 53)       /* seeds stay exact as JSON numbers */
#define SERVE_MAX_PRIORITY    1000000            /* priority in [-1e6, 1e6] */
#define SERVE_MAX_DEADLINE_MS (24 * 3600 * 1000) /* deadline_ms in [0, one day]; 0: none */
#define SERVE_ERROR_MAX       256

/* One image request as a client states it. */
typedef struct serve_request_params {
    char id[SERVE_ID_MAX + 1]; /* "" asks the queue for one */
    int label;                 /* -1: unconditional (the null class) */
    int n;                     /* images, returned as one PNG grid */
    int resolution;            /* 32, 64 or 128 pixels a side */
    int steps;
    double cfg;    /* guidance scale; 1: none */
    bool has_seed; /* false: the queue picks one and reports it */
    uint64_t seed;
    int priority;        /* higher first among requests that arrive together */
    int64_t deadline_ms; /* latency objective from arrival; 0: none */
    dit_sampler_kind_t sampler;
} serve_request_params_t;

/* What the loaded model and the operator allow, and the defaults of absent fields. */
typedef struct serve_limits {
    int num_classes;    /* label in [-1, num_classes - 1] */
    int max_resolution; /* 32, 64 or 128 */
    int default_resolution;
    int default_steps;
    double default_cfg;
    /* what the model predicts: its samplers are euler and heun (rectified flow, heun by
     * default) or ddpm and ddim (the Gaussian diffusion, ddpm by default) */
    dit_objective_t objective;
    /* a latent model's VAE: requests name the images' resolution, this many times the model's
     * (32, 64 or 128); 0 or 1: none, the model's own */
    int pixel_scale;
} serve_limits_t;

/* The scale of a server's limits (1 without a VAE). */
static inline int serve_pixel_scale(const serve_limits_t *lim)
{
    return lim->pixel_scale > 1 ? lim->pixel_scale : 1;
}

/* Which field of a request was wrong, and how; field is "body" when the text is not a JSON
 * object at all. */
typedef struct serve_field_error {
    char field[64];
    char message[SERVE_ERROR_MAX];
} serve_field_error_t;

/* The guidance rule: a request is guided when it names a class (label >= 0) and a scale other
 * than 1; an unconditional one samples with cfg 1, since guidance would mix two equal halves. */
static inline bool serve_guided(int label, double cfg)
{
    return label >= 0 && cfg != 1.0;
}

/* The guidance scale a request samples with: its cfg when guided, 1 otherwise. */
static inline double serve_cfg_used(int label, double cfg)
{
    return serve_guided(label, cfg) ? cfg : 1.0;
}

/* Parses and checks one request, a JSON object of len bytes (no NUL needed). Unknown fields,
 * wrong types and out-of-range values are TDL_ERR_INVALID_ARG with *err naming the field;
 * TDL_ERR_NOMEM: no memory to parse it (a client may try again).
 * extra_key (may be NULL) is one more integer field >= 0 accepted and returned in *extra_out:
 * the trace's "at_ms". */
tdl_status_t serve_request_parse(const char *text, size_t len, const serve_limits_t *limits,
                                 const char *extra_key, serve_request_params_t *params_out,
                                 int64_t *extra_out, serve_field_error_t *err);

/* ==== the request table and queue (src/serve/queue.c) ========================================= */

typedef enum {
    SERVE_STATE_QUEUED = 0,
    SERVE_STATE_RUNNING,
    SERVE_STATE_DONE,
    SERVE_STATE_FAILED,
    SERVE_STATE_CANCELLED /* by DELETE, or its client went away (--cancel-on-disconnect) */
} serve_state_t;

/* "queued", "running", "done", "failed", "cancelled" */
const char *serve_state_name(serve_state_t state);

typedef enum { SERVE_SOURCE_HTTP = 0, SERVE_SOURCE_TRACE, SERVE_SOURCE_COUNT } serve_source_t;

/* Roles a rank can hold, for the ranks-per-role gauge; one rank may hold two (alone, rank 0
 * coordinates and executes). */
typedef enum {
    SERVE_ROLE_COORDINATOR = 0,
    SERVE_ROLE_SERVING,
    SERVE_ROLE_TRAINING,
    SERVE_ROLE_IDLE,
    SERVE_ROLE_DEAD, /* declared dead by gfc: out of the pool for good */
    SERVE_ROLE_COUNT
} serve_role_t;

const char *serve_role_name(serve_role_t role);

/* Upper bounds of the latency histograms, in seconds (+Inf follows). */
#define SERVE_HIST_BUCKETS 14
extern const double serve_hist_bounds[SERVE_HIST_BUCKETS];

typedef struct serve_counts {
    uint64_t submitted; /* admitted into the queue */
    uint64_t rejected;  /* refused: queue full or closed */
    uint64_t done, failed;
    uint64_t cancelled;      /* never counted as failed, nor as lost */
    uint64_t slo_violations; /* finished (done or failed) after their deadline */
} serve_counts_t;

typedef struct serve_hist {
    uint64_t buckets[SERVE_HIST_BUCKETS + 1]; /* not cumulative; the last one is +Inf */
    uint64_t count;
    double sum;
} serve_hist_t;

/* Upper bounds of the batch-size histogram, in requests (+Inf follows). */
#define SERVE_BATCH_BUCKETS 7
extern const int serve_batch_bounds[SERVE_BATCH_BUCKETS]; /* 1, 2, 4, 8, 16, 32, 64 */

/* The resolutions the histograms are labelled with (a request's, rounded up to one of them). */
#define SERVE_NRES 3
extern const int serve_res_values[SERVE_NRES]; /* 32, 64, 128 */
int serve_res_index(int resolution);

typedef struct serve_stats {
    int queued, running, capacity;
    serve_counts_t by_source[SERVE_SOURCE_COUNT];
    /* by resolution (serve_res_index) */
    serve_hist_t latency[SERVE_NRES];    /* arrival to finish, done requests */
    serve_hist_t queue_wait[SERVE_NRES]; /* arrival to start */
    serve_hist_t run[SERVE_NRES];        /* start to finish */
    /* requests a batched step took together (alone; serve_queue_observe_batch) */
    uint64_t batch_buckets[SERVE_BATCH_BUCKETS + 1], batch_count, batch_sum;
    int ranks[SERVE_ROLE_COUNT];
} serve_stats_t;

/* A snapshot of one request. Times are tdl_clock_s() values; 0 where not reached yet. */
typedef struct serve_request_info {
    serve_request_params_t params; /* with the id and the seed filled in */
    serve_state_t state;
    serve_source_t source;
    int position; /* 0 next to run, 1 after it ...; -1 when not queued */
    double submit_s, start_s, end_s;
    size_t png_len;
    bool slo_violated;
    bool canceled;               /* failed because the queue closed before it ran */
    bool cancel_asked;           /* running, and asked to stop at its next task boundary */
    char error[SERVE_ERROR_MAX]; /* why it failed */
} serve_request_info_t;

typedef struct serve_queue serve_queue_t;
typedef struct serve_job serve_job_t; /* a request taken from the queue to run */

/* At most max_queued requests wait; the last keep_finished finished ones stay readable. */
tdl_status_t serve_queue_create(int max_queued, int keep_finished, serve_queue_t **queue_out);
/* Requests name images of this many times the model's resolution (a latent model's VAE): the
 * histograms by resolution file them by the model's. */
void serve_queue_set_pixel_scale(serve_queue_t *queue, int scale);
/* No job may be running and no thread waiting in the queue any more. */
void serve_queue_destroy(serve_queue_t *queue);

/* Admits a request and writes its id (the given one, or a new one) to id_out.
 * TDL_ERR_NOMEM: the queue is full (or memory is): try later. TDL_ERR_MISMATCH: the id is
 * taken. TDL_ERR_CANCELED: the queue is closed. */
tdl_status_t serve_queue_submit(serve_queue_t *queue, const serve_request_params_t *params,
                                serve_source_t source, char id_out[SERVE_ID_MAX + 1]);
/* Counts a request refused before it reached the queue (a trace entry, say) as rejected. */
void serve_queue_count_rejected(serve_queue_t *queue, serve_source_t source);

/* Takes the next request: first come, first served; among requests that arrived in the same
 * millisecond the higher priority first. Waits up to timeout_ms. TDL_ERR_TIMEOUT: none came;
 * TDL_ERR_CANCELED: the queue is closed. */
tdl_status_t serve_queue_pop(serve_queue_t *queue, int timeout_ms, serve_job_t **job_out);
const serve_request_params_t *serve_job_params(const serve_job_t *job);
/* Whether a request waits; *params_out: that of the one serve_queue_pop would take next. */
bool serve_queue_head(serve_queue_t *queue, serve_request_params_t *params_out);
/* When it was submitted (tdl_clock_s). */
double serve_job_submit_s(const serve_job_t *job);
/* A number of the runner's own for the job (the coordinator's request number). */
void serve_job_set_tag(serve_job_t *job, uint64_t tag);
uint64_t serve_job_tag(const serve_job_t *job);
/* Finishes a job: done with its PNG (the queue takes png, a malloc'ed buffer), or failed. */
void serve_job_done(serve_queue_t *queue, serve_job_t *job, unsigned char *png, size_t len);
void serve_job_fail(serve_queue_t *queue, serve_job_t *job, const char *reason);

/* A snapshot of request id, after waiting up to wait_ms (0: not at all) for it to finish.
 * png_out (may be NULL) gets a malloc'ed copy of the PNG of a done request, NULL otherwise.
 * TDL_ERR_NOT_FOUND: no such request, or it finished so long ago that it was forgotten. */
tdl_status_t serve_queue_get(serve_queue_t *queue, const char *id, int wait_ms,
                             serve_request_info_t *info_out, unsigned char **png_out);

/* Cancels request id: a queued one at once (info_out says cancelled); a running one is asked
 * to stop at its next task boundary (info_out: running, cancel_asked), which its runner learns
 * from serve_queue_take_cancels or serve_job_cancel_asked. TDL_ERR_NOT_FOUND: no such request;
 * TDL_ERR_MISMATCH: it has finished already (done, failed or cancelled). */
tdl_status_t serve_queue_cancel(serve_queue_t *queue, const char *id,
                                serve_request_info_t *info_out);
/* Running jobs asked to stop since the last call, each once, into jobs[0 .. max); the count. */
int serve_queue_take_cancels(serve_queue_t *queue, serve_job_t **jobs, int max);
bool serve_job_cancel_asked(serve_queue_t *queue, serve_job_t *job);
/* Finishes a running job as cancelled (its ranks and state are free again). */
void serve_job_cancelled(serve_queue_t *queue, serve_job_t *job);

/* A step that took `requests` requests together through the model. */
void serve_queue_observe_batch(serve_queue_t *queue, int requests);

/* Progress events, as Server-Sent Events blocks ("event: NAME\ndata: JSON\n\n"). The queue
 * writes queued, started and the end (done, failed, cancelled); a runner adds what it does
 * with serve_job_event (NAME: task_started, task_finished; data: a JSON object, which gains the
 * request's "id"). A request keeps its first SERVE_EVENTS_MAX; its end is always kept. */
#define SERVE_EVENTS_MAX 256
void serve_job_event(serve_queue_t *queue, serve_job_t *job, const char *name, const char *json);
/* The events of request id from number `from` on, waiting up to wait_ms for one when there are
 * none yet: *text_out (malloc'ed, "" when none), *next_out the number to ask from next time,
 * *ended_out once the request has finished and every event was given. TDL_ERR_NOT_FOUND: no
 * such request (or forgotten). */
tdl_status_t serve_queue_events(serve_queue_t *queue, const char *id, int from, int wait_ms,
                                char **text_out, int *next_out, bool *ended_out);

/* Refuses new requests from now on and fails the waiting ones with `reason`; a running job
 * still finishes. Wakes every waiter. */
void serve_queue_close(serve_queue_t *queue, const char *reason);

void serve_queue_set_ranks(serve_queue_t *queue, const int ranks[SERVE_ROLE_COUNT]);
void serve_queue_stats(serve_queue_t *queue, serve_stats_t *stats_out);
/* The latencies (seconds) of the done requests of `source`, sorted, as a malloc'ed array; the
 * first million are kept. */
tdl_status_t serve_queue_latencies(serve_queue_t *queue, serve_source_t source,
                                   double **latencies_out, size_t *count_out);
/* The p-quantile (p in [0, 1], nearest rank) of sorted values; 0 when there are none. */
double serve_quantile(const double *sorted, size_t n, double p);

/* ==== the HTTP server (src/serve/http.c) ====================================================== */

typedef struct serve_http_opts {
    const char *listen;  /* "127.0.0.1:8000", "[::1]:8000", "localhost:0" (any free port) */
    const char *token;   /* bearer token; NULL or "": no authentication */
    size_t max_body;     /* bytes; larger bodies get 413 */
    int wait_timeout_ms; /* ?wait=1 answers 504 after this long */
    int max_connections;
    int connection_timeout_s; /* idle connections are closed after this long */
    bool cancel_on_disconnect; /* a ?wait=1 request whose client goes away is cancelled */
    serve_limits_t limits;
    /* limits.num_classes names, label 0 first, for the prompts of POST /v1/images/generations;
     * NULL: none, prompts name classes by number. Kept by the caller while the server runs. */
    const char *const *class_names;
} serve_http_opts_t;

typedef struct serve_http serve_http_t;

/* Checks a --listen address, "HOST:PORT" or "[IPV6]:PORT" (an empty host: every address; port
 * 0: any free one), without resolving or binding it, so that a bad one is refused before
 * start-up. TDL_ERR_INVALID_ARG names the address and what is wrong. */
#define SERVE_HOST_MAX 255
tdl_status_t serve_listen_parse(const char *addr, char host_out[SERVE_HOST_MAX + 1], int *port_out);

/* Binds, listens and answers from threads of its own. A failure to bind names the address. */
tdl_status_t serve_http_start(const serve_http_opts_t *opts, serve_queue_t *queue,
                              serve_http_t **http_out);
/* The port bound (the one chosen when the address said 0). */
int serve_http_port(const serve_http_t *http);
/* Closes the listening socket and waits for the connections to end: close the queue first
 * so that no handler is left waiting. */
void serve_http_stop(serve_http_t *http);

/* ==== traces (src/serve/trace.c) ============================================================== */

/* A JSON-lines file: one request object a line with "at_ms", its arrival in milliseconds from
 * the start; blank lines are skipped. Entries are sorted by at_ms (stable). Errors name the
 * line and the field. */
typedef struct serve_trace_entry {
    int64_t at_ms;
    long line; /* in the file, from 1 */
    serve_request_params_t params;
} serve_trace_entry_t;

typedef struct serve_trace {
    size_t count;
    serve_trace_entry_t *entries;
} serve_trace_t;

tdl_status_t serve_trace_load(const char *path, const serve_limits_t *limits,
                              serve_trace_t *trace_out);
void serve_trace_free(serve_trace_t *trace);

/* ==== PNG (src/serve/png.c) =================================================================== */

/* Images float [n, channels, height, width] with values in [-1, 1] (clamped; NaN counts as -1;
 * pixel = round((v + 1) * 127.5)) laid out row by row in a grid of min(ncols, n) columns and
 * ceil(n / ncols) rows, with `pad` pixels of white between and around the tiles; cells of the
 * last row past image n - 1 are white too. channels 1 gives a grayscale PNG, 3 an RGB one.
 * The output is 8 bits per sample and the same bytes for the same arguments. */

/* Writes the grid to `path` atomically: the PNG goes to "<path>.tmp" in the same directory, is
 * fsync'ed and renamed over `path`. On failure nothing is left behind and `path` keeps its old
 * content, if it had one. */
tdl_status_t serve_png_write_grid(const char *path, const float *images, int n, int channels,
                                  int height, int width, int ncols, int pad);

/* The same PNG into memory: *png_out (free it with free()) of *len_out bytes. */
/* The grid a request's n images make in its PNG: the smallest square one (its columns), tiles
 * SERVE_GRID_PAD pixels apart (none for one image). */
#define SERVE_GRID_PAD 2
int serve_grid_cols(int n);
tdl_status_t serve_png_encode(const float *images, int n, int channels, int height, int width,
                              int ncols, int pad, unsigned char **png_out, size_t *len_out);

/* Cuts a grid that serve_png_encode made (len bytes at png) of n images of height x width, in
 * ncols columns `pad` pixels apart, into n PNGs: pngs_out[i] (free() each) of lens_out[i] bytes,
 * the bytes serve_png_encode gives for image i alone (ncols 1, pad 0). A PNG that is not such a
 * grid (another size or colour type, damaged) is TDL_ERR_INVALID_ARG; nothing is returned then. */
tdl_status_t serve_png_split_grid(const unsigned char *png, size_t len, int n, int height,
                                  int width, int ncols, int pad, unsigned char **pngs_out,
                                  size_t *lens_out);

/* ==== trajectory tasks (src/serve/task.c) ===================================================== */

/* What a request asks for. */
typedef struct serve_traj_spec {
    uint64_t id, seed;
    int n;       /* images, 1..SERVE_MAX_IMAGES */
    int res;     /* 32, 64 or 128 */
    int steps;   /* Euler steps from noise (t = 1) to data (t = 0) */
    int label;   /* class, or -1 for none (the null class) */
    float cfg;   /* guidance scale used, serve_cfg_used(); guided when serve_guided(label, cfg) */
    int sampler; /* dit_sampler_kind_t: Euler or Heun */
    int priority;
    double deadline_ms; /* after arrival; 0: none */
} serve_traj_spec_t;

/* A request's trajectory: PREPARE, then STEP_CHUNKs over steps [k, k + c), then DECODE (the PNG)
 * and FINALIZE (freeing). Between tasks the state is this: the spec, the steps done and the
 * latents, replicated on every member of the group that runs the next task. */
typedef struct serve_traj {
    serve_traj_spec_t spec;
    int channels, n, res;
    int step; /* steps done */
    bool prepared;
    float *x;           /* latents [n, channels, res, res] */
    unsigned char *png; /* after DECODE */
    size_t png_len;
} serve_traj_t;

typedef enum {
    SERVE_TASK_PREPARE = 0,
    SERVE_TASK_STEP_CHUNK,
    SERVE_TASK_DECODE,
    SERVE_TASK_FINALIZE
} serve_task_kind_t;
const char *serve_task_name(serve_task_kind_t kind);

/* Allocates the latents (zeros); a spec out of range is TDL_ERR_INVALID_ARG naming it. */
tdl_status_t serve_traj_init(serve_traj_t *t, const serve_traj_spec_t *spec, int channels);
void serve_traj_free(serve_traj_t *t);
size_t serve_traj_values(const serve_traj_t *t);
/* PREPARE: image i's noise from Philox (seed, i), as dit_sample draws it. */
tdl_status_t serve_task_prepare(serve_traj_t *t);
/* STEP_CHUNK: up to `count` steps (Euler or Heun, as dit_sampler_step takes them) on group g
 * (NULL: this rank alone) with sequence parallelism; cfg_parallel (guided requests, even groups):
 * the conditional and unconditional halves of the batch run on the two halves of the group at
 * once. Every member calls it with the same state and ends with the same latents. */
tdl_status_t serve_task_step_chunk(serve_traj_t *t, const dit_model_t *model, gfc_group_t *g,
                                   bool cfg_parallel, int count);
/* STEP_CHUNK of k trajectories together (one resolution and one sampler; labels, guidance,
 * seeds, steps and image counts may differ): up to counts[j] steps of ts[j], each step of every
 * trajectory that still has one in its chunk in one forward pass of all their rows, each along
 * its own time grid. Every trajectory ends with the bytes serve_task_step_chunk gives it alone.
 * cfg_parallel only with k = 1. */
tdl_status_t serve_task_step_batch(serve_traj_t *const *ts, int k, const dit_model_t *model,
                                   gfc_group_t *g, bool cfg_parallel, const int *counts);
/* DECODE: the latents as 8-bit pixels in a PNG grid of ncols columns (0: the smallest square
 * grid that holds them), 2 pixels apart when there are several: what tidal serve answers. With
 * a VAE (a latent model), its decoder's images of upscale times the side instead. */
tdl_status_t serve_task_decode(serve_traj_t *t, const dit_vae_t *vae, int ncols);
/* The state as bytes (to keep or to send) and back; unpack checks what it reads. */
size_t serve_traj_packed_bytes(const serve_traj_t *t);
void serve_traj_pack(const serve_traj_t *t, unsigned char *buf);
tdl_status_t serve_traj_unpack(serve_traj_t *t, const unsigned char *buf, size_t bytes);

/* ==== migration (src/serve/migrate.c) ========================================================= */

typedef enum {
    SERVE_LAYOUT_OWNER = 0,  /* member `owner` holds all of it */
    SERVE_LAYOUT_REPLICATED, /* every member holds all of it */
    SERVE_LAYOUT_SHARDED     /* member i of P holds rows [rows i / P, rows (i + 1) / P) */
} serve_layout_kind_t;

typedef struct serve_layout {
    serve_layout_kind_t kind;
    int owner;
} serve_layout_t;

/* One message of a schedule: rows [row0, row0 + nrows) from world rank src to world rank dst
 * (src == dst: a local copy). */
typedef struct serve_move_msg {
    int src, dst;
    size_t row0, nrows;
} serve_move_msg_t;

/* The messages that move a tensor of `rows` rows from layout `from` on group a (world ranks) to
 * layout `to` on group b; the same on every rank. Writes up to max, answers how many there
 * are (-1: some rows are held by no member of a). */
int serve_reshard_schedule(const int *a, int na, serve_layout_t from, const int *b, int nb,
                           serve_layout_t to, size_t rows, serve_move_msg_t *msgs, int max);

/* A tensor to move: src is this rank's part under `from` (its first held row first; NULL when it
 * holds none), dst its part under `to`. */
typedef struct serve_tensor_move {
    size_t rows, row_bytes;
    serve_layout_t from, to;
    const unsigned char *src;
    unsigned char *dst;
} serve_tensor_move_t;

/* Runs the schedules of the tensors over gfc on a ∪ b (namespace ns); every member of either
 * group calls it with the same groups and layouts; other ranks return at once. */
tdl_status_t serve_reshard(gfc_runtime_t *rt, int me, const int *a, int na, const int *b, int nb,
                           uint64_t ns, const serve_tensor_move_t *moves, int nmoves);
/* Moves a trajectory's state from group a to group b. Members of b not in a must have called
 * serve_traj_init with the request's spec first. */
tdl_status_t serve_traj_migrate(gfc_runtime_t *rt, int me, const int *a, int na, const int *b,
                                int nb, uint64_t ns, serve_traj_t *t);

/* ==== commands between rank 0 and the executors (encoded by src/serve/wire.h) ================= */

#define SERVE_MAX_DEGREE 8
#define SERVE_MAX_BATCH  64 /* requests one batched STEP_CHUNK steps together */

/* Commands other than tasks: stop, and the callers' own (op > SERVE_OP_STOP) with up to
 * SERVE_USER_BYTES of payload. */
#define SERVE_OP_STOP    2
#define SERVE_USER_BYTES 2304 /* a membership of SERVE_WIRE_MAX_WORKERS (wire.h) fits */
typedef struct serve_ctl_msg {
    uint32_t op, len;
    unsigned char data[SERVE_USER_BYTES];
} serve_ctl_msg_t;

/* ==== executors (src/serve/executor.c) ======================================================== */

/* The members of `group` as the exchanges of dit_sp_forward: every member calls it with the
 * same inputs and gets the whole output. */
void serve_sp_comm(dit_sp_comm_t *comm, gfc_group_t *group);

/* An executor rank's side: its inbox of commands from rank 0, the outbox of its reports, and
 * the states of the requests it holds. */
typedef struct serve_worker serve_worker_t;
tdl_status_t serve_worker_create(gfc_runtime_t *rt, int me, const dit_model_t *model,
                                 serve_worker_t **out);
void serve_worker_free(serve_worker_t *w);
/* The model the next tasks run (a reloaded checkpoint). */
void serve_worker_set_model(serve_worker_t *w, const dit_model_t *model);
/* The VAE whose decoder makes a latent model's images at DECODE (NULL: none). */
void serve_worker_set_vae(serve_worker_t *w, const dit_vae_t *vae);
/* Requests whose state this worker holds. */
int serve_worker_held(const serve_worker_t *w);
/* Runs the tasks rank 0 sends, waiting for them without a timeout, until a command that is not
 * a task: it returns that one in *msg (SERVE_OP_STOP or the caller's own). */
tdl_status_t serve_worker_run(serve_worker_t *w, serve_ctl_msg_t *msg);
/* Takes a waiting command without blocking (*got says whether there was one); a task there is
 * an error (the worker is not serving). */
tdl_status_t serve_worker_poll(serve_worker_t *w, bool *got, serve_ctl_msg_t *msg);
/* A report to rank 0 (up to SERVE_USER_BYTES): serve_dispatcher_poll_status reads it. */
tdl_status_t serve_worker_report(serve_worker_t *w, const void *buf, size_t len);

/* Ranks 1 .. N-1: receive tasks from rank 0 and run them until rank 0 says stop. An executor
 * keeps the state of every request whose last task ran on it; a task names the ranks that run
 * it and the ranks that hold the state, and every rank of either takes part (the state moves
 * over gfc when the two differ). The first rank of a task reports to rank 0: the PNG after
 * DECODE, a status after the others. */
tdl_status_t serve_executor_loop(gfc_runtime_t *rt, int me, const dit_model_t *model,
                                 const dit_vae_t *vae);

/* ==== rank 0's dispatcher (src/serve/dispatch.c) ============================================== */

/* One task to run, as rank 0 gives it. Ranks are world ranks (executors: 1 .. N-1). */
typedef struct serve_task_cmd {
    serve_task_kind_t kind; /* PREPARE, STEP_CHUNK or DECODE */
    int steps;              /* of a STEP_CHUNK */
    const int *ranks;       /* nranks ranks run it, sequence parallel when more than one */
    int nranks;
    const int *prev; /* the ranks holding the state (the last task's); 0 for PREPARE */
    int nprev;
    bool move;         /* the state moves from prev to ranks first */
    bool cfg_parallel; /* guidance halves on the two halves of an even group */
    uint64_t seq;      /* the task's number within its request: 0, 1, 2, ... */
    /* STEP_CHUNKs of other requests dispatched right after this one on the same ranks, to run
     * with it as one batch (0: the batch's last, or alone) */
    int batch_after;
} serve_task_cmd_t;

/* A task started and not yet reported, as rank 0 sees it. */
typedef struct serve_inflight {
    uint64_t id; /* the request (spec.id) */
    serve_task_kind_t kind;
    void *user; /* the caller's handle */
    int degree, ranks[SERVE_MAX_DEGREE];
    int pair[2]; /* rank list of `back` */
    bool active;
    bool failed; /* failed as it was sent: no receive is posted */
    gfc_group_t back;
    gfc_request_t *req;
    unsigned char ack[4]; /* the report of a task other than DECODE (wire.h's ack) */
    unsigned char *png;   /* DECODE's answer (the caller frees it once returned by poll) */
    size_t png_len;
    /* TDL_OK: the task ran (and, after DECODE, png_len > 0); TDL_ERR_PEER: a rank it needed
     * is dead or gone, and the request may start again elsewhere */
    tdl_status_t status;
    char why[SERVE_ERROR_MAX]; /* what failed, when status is not TDL_OK */
} serve_inflight_t;

typedef struct serve_dispatcher serve_dispatcher_t;
/* Rank 0's side for a world of `world` ranks (executors 1 .. world - 1). */
tdl_status_t serve_dispatcher_create(gfc_runtime_t *rt, int world, serve_dispatcher_t **out);
/* Sends a task of the request `spec` to the ranks of cmd (and those of cmd->prev). A rank found
 * dead on the way fails the task with TDL_ERR_PEER at the next poll, not here. */
tdl_status_t serve_dispatch_task(serve_dispatcher_t *d, const serve_traj_spec_t *spec,
                                 const serve_task_cmd_t *cmd, void *user);
/* Tasks started and not yet reported, and how many more may be. */
int serve_dispatcher_inflight(const serve_dispatcher_t *d);
int serve_dispatcher_room(const serve_dispatcher_t *d);
/* Reported tasks into done[] (up to max); answers how many. */
int serve_dispatcher_poll(serve_dispatcher_t *d, serve_inflight_t *done, int max);
/* A command of the caller's own (msg->op > SERVE_OP_STOP) to executor `worker`, after the tasks
 * sent to it before. */
tdl_status_t serve_dispatcher_send(serve_dispatcher_t *d, int worker, const serve_ctl_msg_t *msg);
/* A report from some executor, if one has arrived: its rank, bytes and length. */
bool serve_dispatcher_poll_status(serve_dispatcher_t *d, int *worker, void *buf, size_t *len);
/* The ranks gfc holds dead, up to max of them, and how many there are (gfc_dead_ranks). */
int serve_dispatcher_dead(serve_dispatcher_t *d, int *ranks, int max);
/* How many ranks gfc has declared dead: one atomic read, to poll for a change. */
int serve_dispatcher_dead_count(serve_dispatcher_t *d);
/* Why gfc holds rank w dead ("" while it is alive). */
const char *serve_dispatcher_why(const serve_dispatcher_t *d, int w);
/* Tells every live executor to leave serve_executor_loop (after the tasks sent before). */
tdl_status_t serve_dispatcher_stop(serve_dispatcher_t *d);
void serve_dispatcher_free(serve_dispatcher_t *d);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_SERVE_H */
