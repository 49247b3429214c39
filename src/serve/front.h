/* The front door of `tidal serve`: the request table and queue (src/serve/queue.c), the
 * HTTP/1.1 JSON server, the request validator and the trace reader (src/serve/http.c).
 * doc/serving.md describes the API as clients see it. */
#ifndef TIDAL_SERVE_FRONT_H
#define TIDAL_SERVE_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "dit/dit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== requests ================================================================================ */

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
} serve_limits_t;

/* Which field of a request was wrong, and how; field is "body" when the text is not a JSON
 * object at all. */
typedef struct serve_field_error {
    char field[64];
    char message[SERVE_ERROR_MAX];
} serve_field_error_t;

/* Parses and checks one request, a JSON object of len bytes (no NUL needed). Unknown fields,
 * wrong types and out-of-range values are TDL_ERR_INVALID_ARG with *err naming the field.
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
    SERVE_STATE_FAILED
} serve_state_t;

const char *serve_state_name(serve_state_t state); /* "queued", "running", "done", "failed" */

typedef enum { SERVE_SOURCE_HTTP = 0, SERVE_SOURCE_TRACE, SERVE_SOURCE_COUNT } serve_source_t;

/* Roles a rank can hold, for the ranks-per-role gauge; one rank may hold two (alone, rank 0
 * coordinates and executes). */
typedef enum {
    SERVE_ROLE_COORDINATOR = 0,
    SERVE_ROLE_SERVING,
    SERVE_ROLE_TRAINING,
    SERVE_ROLE_IDLE,
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
    uint64_t slo_violations; /* finished (done or failed) after their deadline */
} serve_counts_t;

typedef struct serve_hist {
    uint64_t buckets[SERVE_HIST_BUCKETS + 1]; /* not cumulative; the last one is +Inf */
    uint64_t count;
    double sum;
} serve_hist_t;

typedef struct serve_stats {
    int queued, running, capacity;
    serve_counts_t by_source[SERVE_SOURCE_COUNT];
    serve_hist_t latency;    /* arrival to finish, done requests */
    serve_hist_t queue_wait; /* arrival to start */
    serve_hist_t run;        /* start to finish */
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
    char error[SERVE_ERROR_MAX]; /* why it failed */
} serve_request_info_t;

typedef struct serve_queue serve_queue_t;
typedef struct serve_job serve_job_t; /* a request taken from the queue to run */

/* At most max_queued requests wait; the last keep_finished finished ones stay readable. */
tdl_status_t serve_queue_create(int max_queued, int keep_finished, serve_queue_t **queue_out);
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
/* Finishes a job: done with its PNG (the queue takes png, a malloc'ed buffer), or failed. */
void serve_job_done(serve_queue_t *queue, serve_job_t *job, unsigned char *png, size_t len);
void serve_job_fail(serve_queue_t *queue, serve_job_t *job, const char *reason);

/* A snapshot of request id, after waiting up to wait_ms (0: not at all) for it to finish.
 * png_out (may be NULL) gets a malloc'ed copy of the PNG of a done request, NULL otherwise.
 * TDL_ERR_NOT_FOUND: no such request, or it finished so long ago that it was forgotten. */
tdl_status_t serve_queue_get(serve_queue_t *queue, const char *id, int wait_ms,
                             serve_request_info_t *info_out, unsigned char **png_out);

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
    serve_limits_t limits;
} serve_http_opts_t;

typedef struct serve_http serve_http_t;

/* Checks a --listen address, "HOST:PORT" or "[IPV6]:PORT" (an empty host: every address; port
 * 0: any free one), without resolving or binding it, so that a bad one is refused before
 * start-up. TDL_ERR_INVALID_ARG names the address and what is wrong. */
#define SERVE_HOST_MAX 255
tdl_status_t serve_listen_parse(const char *addr, char host_out[SERVE_HOST_MAX + 1],
                                int *port_out);

/* Binds, listens and answers from threads of its own. A failure to bind names the address. */
tdl_status_t serve_http_start(const serve_http_opts_t *opts, serve_queue_t *queue,
                              serve_http_t **http_out);
/* The port bound (the one chosen when the address said 0). */
int serve_http_port(const serve_http_t *http);
/* Closes the listening socket and waits for the connections to end: close the queue first
 * so that no handler is left waiting. */
void serve_http_stop(serve_http_t *http);

/* ==== traces (src/serve/http.c) =============================================================== */

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

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_SERVE_FRONT_H */
