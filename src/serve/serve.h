/* tidal serve: requests, trajectory tasks, executors, state migration, the HTTP front door,
 * and PNG output. Each part has its own section below. */
#ifndef TIDAL_SERVE_H
#define TIDAL_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "dit/dit.h"
#include "gfc/gfc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== PNG (src/serve/png.c) ================================================================== */

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
tdl_status_t serve_png_encode(const float *images, int n, int channels, int height, int width,
                              int ncols, int pad, unsigned char **png_out, size_t *len_out);

/* ==== executors (src/serve/executor.c) ======================================================== */

/* The members of `group` as the exchanges of dit_sp_forward: every member calls it with the
 * same inputs and gets the whole output. */
void serve_sp_comm(dit_sp_comm_t *comm, gfc_group_t *group);

/* ==== trajectory tasks (src/serve/task.c) ===================================================== */

#define SERVE_MAX_IMAGES 16

/* What a request asks for. */
typedef struct serve_traj_spec {
    uint64_t id, seed;
    int n;          /* images, 1..SERVE_MAX_IMAGES */
    int res;        /* 32, 64 or 128 */
    int steps;      /* Euler steps from noise (t = 1) to data (t = 0) */
    int label;      /* class, or -1 for none (the null class) */
    float cfg;      /* classifier-free guidance scale (1: none) */
    int sampler;    /* dit_sampler_kind_t: Euler or Heun */
    int priority;
    double deadline_ms; /* after arrival; 0: none */
} serve_traj_spec_t;

/* A request's trajectory: PREPARE, then STEP_CHUNKs over steps [k, k + c), then DECODE (the PNG)
 * and FINALIZE (freeing). Between tasks the state is this: the spec, the steps done and the
 * latents, replicated on every member of the group that runs the next task. */
typedef struct serve_traj {
    serve_traj_spec_t spec;
    int channels, n, res;
    int step;            /* steps done */
    bool prepared;
    float *x;            /* latents [n, channels, res, res] */
    unsigned char *png;  /* after DECODE */
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
/* DECODE: the latents as 8-bit pixels in a PNG grid of ncols columns (0: the smallest square
 * grid that holds them), 2 pixels apart when there are several: what tidal serve answers. */
tdl_status_t serve_task_decode(serve_traj_t *t, int ncols);
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

/* ==== running tasks on executor ranks (src/serve/dispatch.c) ================================= */

#define SERVE_MAX_DEGREE 8

/* Commands other than tasks: stop, and the callers' own (op > SERVE_OP_STOP) with up to
 * SERVE_USER_BYTES of payload. */
#define SERVE_OP_STOP 2
#define SERVE_USER_BYTES 256
typedef struct serve_ctl_msg {
    uint32_t op, len;
    unsigned char data[SERVE_USER_BYTES];
} serve_ctl_msg_t;

/* An executor rank's side: its inbox of commands from rank 0, the outbox of its reports, and
 * the states of the requests it holds. */
typedef struct serve_worker serve_worker_t;
tdl_status_t serve_worker_create(gfc_runtime_t *rt, int me, const dit_model_t *model,
                                 serve_worker_t **out);
void serve_worker_free(serve_worker_t *w);
/* The model the next tasks run (a reloaded checkpoint). */
void serve_worker_set_model(serve_worker_t *w, const dit_model_t *model);
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
tdl_status_t serve_executor_loop(gfc_runtime_t *rt, int me, const dit_model_t *model);

/* One task to run, as rank 0 gives it. Ranks are world ranks (executors: 1 .. N-1). */
typedef struct serve_task_cmd {
    serve_task_kind_t kind; /* PREPARE, STEP_CHUNK or DECODE */
    int steps;              /* of a STEP_CHUNK */
    const int *ranks;       /* nranks ranks run it, sequence parallel when more than one */
    int nranks;
    const int *prev;        /* the ranks holding the state (the last task's); 0 for PREPARE */
    int nprev;
    bool move;              /* the state moves from prev to ranks first */
    bool cfg_parallel;      /* guidance halves on the two halves of an even group */
    uint64_t seq;           /* the task's number within its request: 0, 1, 2, ... */
} serve_task_cmd_t;

/* A task started and not yet reported, as rank 0 sees it. */
typedef struct serve_inflight {
    uint64_t id;             /* the request (spec.id) */
    serve_task_kind_t kind;
    void *user;              /* the caller's handle */
    int degree, ranks[SERVE_MAX_DEGREE];
    int pair[2];             /* rank list of `back` */
    bool active;
    gfc_group_t back;
    gfc_request_t *req;
    int32_t ack;             /* the report of a task other than DECODE: 0 when it ran */
    unsigned char *png;      /* DECODE's answer (the caller frees it once returned by poll) */
    size_t png_len;
    tdl_status_t status;     /* TDL_OK: the task ran (and, after DECODE, png_len > 0) */
} serve_inflight_t;

typedef struct serve_dispatcher serve_dispatcher_t;
/* Rank 0's side for a world of `world` ranks (executors 1 .. world - 1). */
tdl_status_t serve_dispatcher_create(gfc_runtime_t *rt, int world, serve_dispatcher_t **out);
/* Sends a task of the request `spec` to the ranks of cmd (and those of cmd->prev). */
tdl_status_t serve_dispatch_task(serve_dispatcher_t *d, const serve_traj_spec_t *spec,
                                 const serve_task_cmd_t *cmd, void *user);
/* Tasks started and not yet reported. */
int serve_dispatcher_inflight(const serve_dispatcher_t *d);
/* Reported tasks into done[] (up to max); answers how many. */
int serve_dispatcher_poll(serve_dispatcher_t *d, serve_inflight_t *done, int max);
/* A command of the caller's own (msg->op > SERVE_OP_STOP) to executor `worker`, after the tasks
 * sent to it before. */
tdl_status_t serve_dispatcher_send(serve_dispatcher_t *d, int worker, const serve_ctl_msg_t *msg);
/* A report from some executor, if one has arrived: its rank, bytes and length. */
bool serve_dispatcher_poll_status(serve_dispatcher_t *d, int *worker, void *buf, size_t *len);
/* Tells every executor to leave serve_executor_loop (after the tasks sent before). */
tdl_status_t serve_dispatcher_stop(serve_dispatcher_t *d);
void serve_dispatcher_free(serve_dispatcher_t *d);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_SERVE_H */
