/* tidal core: status codes, error details, logging, parameters, clocks, counter-based RNG.
 * Depends on libc only; every other module builds on it. */
#ifndef TIDAL_CORE_H
#define TIDAL_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------------------------ */

typedef enum {
    TDL_OK = 0,
    TDL_ERR_INVALID_ARG, /* a caller or user gave a value that is not allowed */
    TDL_ERR_NOMEM,       /* an allocation failed */
    TDL_ERR_IO,          /* a file or socket operation failed */
    TDL_ERR_NOT_FOUND,   /* a named thing (file, parameter, dataset) does not exist */
    TDL_ERR_TIMEOUT,     /* a peer or operation did not answer within its time limit */
    TDL_ERR_PEER,        /* a peer failed or closed its connection */
    TDL_ERR_CORRUPT,     /* data failed a checksum or structural check */
    TDL_ERR_MISMATCH,    /* data is well formed but does not fit (shape, version, config) */
    TDL_ERR_UNSUPPORTED, /* not available in this build or on this machine */
    TDL_ERR_CANCELED,    /* the operation was cancelled before it finished */
    TDL_ERR_MPI,         /* an MPI call failed */
    TDL_ERR_UCX,         /* a UCX call failed */
    TDL_ERR_CUDA,        /* a CUDA call failed */
    TDL_ERR_INTERNAL,    /* a bug: an invariant of tidal itself does not hold */
    TDL_STATUS_COUNT
} tdl_status_t;

/* A short fixed message for each code; never NULL, also for out-of-range values. */
const char *tdl_status_str(tdl_status_t status);

/* The detail of the last error on this thread ("invalid value 'x' for --steps ..."), set by the
 * function that returned the error. tdl_error_get() returns "" when none is set. */
void tdl_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
tdl_status_t tdl_error_raise(tdl_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *tdl_error_get(void);
void tdl_error_clear(void);

/* ---- logging ----------------------------------------------------------------------------- */

typedef enum {
    TDL_LOG_ERROR = 0,
    TDL_LOG_WARN,
    TDL_LOG_INFO,
    TDL_LOG_DEBUG,
    TDL_LOG_TRACE
} tdl_log_level_t;

tdl_status_t tdl_log_level_parse(const char *text, tdl_log_level_t *level_out);
const char *tdl_log_level_name(tdl_log_level_t level);
void tdl_log_set_level(tdl_log_level_t level);
tdl_log_level_t tdl_log_get_level(void);
/* Rank shown in every line's prefix; -1 (the default) shows no rank. */
void tdl_log_set_rank(int rank);
void tdl_log_set_stream(FILE *stream);
/* Fault injection for the failure tests: with TIDAL_FAULT="POINT:RANK:NTH:KILL" (or STOP), the
 * rank set by tdl_log_set_rank raises SIGKILL (SIGSTOP) the NTH time it reaches POINT. Points:
 * serve.chunk (a step chunk's first step), serve.move (a state's move). Unset: nothing. */
void tdl_fault_point(const char *where);
void tdl_log_write(tdl_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tdl_log_vwrite(tdl_log_level_t level, const char *fmt, va_list ap);

#define TDL_LOG_(lvl, ...)                                                                         \
    do {                                                                                           \
        if ((lvl) <= tdl_log_get_level())                                                          \
            tdl_log_write((lvl), __VA_ARGS__);                                                     \
    } while (0)
#define TDL_ERROR(...) TDL_LOG_(TDL_LOG_ERROR, __VA_ARGS__)
#define TDL_WARN(...)  TDL_LOG_(TDL_LOG_WARN, __VA_ARGS__)
#define TDL_INFO(...)  TDL_LOG_(TDL_LOG_INFO, __VA_ARGS__)
#define TDL_DEBUG(...) TDL_LOG_(TDL_LOG_DEBUG, __VA_ARGS__)
#define TDL_TRACE(...) TDL_LOG_(TDL_LOG_TRACE, __VA_ARGS__)

/* ---- parameters -------------------------------------------------------------------------- */

/* One registry for every run-time parameter. A parameter named "gfc-timeout-ms" is set by
 * --gfc-timeout-ms on the command line, TIDAL_GFC_TIMEOUT_MS in the environment, or
 * "gfc-timeout-ms = ..." in a config file; precedence is command line > environment > config
 * file > default, whatever order the sources are read in. */

typedef enum {
    TDL_PARAM_BOOL,
    TDL_PARAM_INT,
    TDL_PARAM_DOUBLE,
    TDL_PARAM_STRING,
    TDL_PARAM_ENUM
} tdl_param_type_t;

typedef enum {
    TDL_PARAM_SRC_DEFAULT = 0,
    TDL_PARAM_SRC_CONFIG,
    TDL_PARAM_SRC_ENV,
    TDL_PARAM_SRC_CMDLINE
} tdl_param_source_t;

typedef struct tdl_param_def {
    const char *name; /* lower case, words joined by '-' */
    tdl_param_type_t type;
    const char *def;     /* default as text; NULL for an unset string */
    const char *help;    /* one line */
    const char *choices; /* TDL_PARAM_ENUM: "a|b|c" */
    double min, max;     /* TDL_PARAM_INT/DOUBLE: inclusive range; min > max: unbounded */
} tdl_param_def_t;

typedef struct tdl_params tdl_params_t;

tdl_status_t tdl_params_create(tdl_params_t **params_out);
void tdl_params_destroy(tdl_params_t *params);
/* The table must outlive the registry. A name registered twice is an internal error. */
tdl_status_t tdl_params_register(tdl_params_t *params, const tdl_param_def_t *defs, size_t count);
/* Sets a value from a source; `where` names the origin in errors ("TIDAL_SEED", "a.conf:3").
 * A value from a lower-precedence source than the current one is checked, then ignored. */
tdl_status_t tdl_params_set(tdl_params_t *params, const char *name, const char *value,
                            tdl_param_source_t source, const char *where);
/* Reads TIDAL_<NAME> for every registered parameter from the process environment. Unknown
 * TIDAL_* variables are ignored (other tools share the prefix) except a likely misspelling,
 * which gets a warning. */
tdl_status_t tdl_params_load_env(tdl_params_t *params);
/* "name = value" lines, '#' comments, blank lines; values may be double-quoted. */
tdl_status_t tdl_params_load_file(tdl_params_t *params, const char *path);
/* Consumes --name value, --name=value, --flag, --no-flag; stops at "--". Arguments that do
 * not start with "--" are returned in order in positional_out (pointers into argv), which
 * has room for argc entries; the count goes to npositional_out. */
tdl_status_t tdl_params_parse_args(tdl_params_t *params, int argc, char **argv,
                                   char **positional_out, int *npositional_out);

bool tdl_params_has(const tdl_params_t *params, const char *name);
const tdl_param_def_t *tdl_params_def(const tdl_params_t *params, const char *name);
tdl_param_source_t tdl_params_source(const tdl_params_t *params, const char *name);
/* Getters abort with a message when the name is not registered or has another type: that is
 * a bug in tidal, not a user error. */
bool tdl_param_bool(const tdl_params_t *params, const char *name);
int64_t tdl_param_int(const tdl_params_t *params, const char *name);
double tdl_param_double(const tdl_params_t *params, const char *name);
const char *tdl_param_str(const tdl_params_t *params, const char *name); /* string and enum */

void tdl_params_print_help(const tdl_params_t *params, FILE *out);
void tdl_params_print_values(const tdl_params_t *params, FILE *out);
/* "gfc-timeout-ms" -> "TIDAL_GFC_TIMEOUT_MS" into buf (truncated to size). */
void tdl_param_env_name(const char *name, char *buf, size_t size);
const char *tdl_param_source_name(tdl_param_source_t source);

/* ---- clocks ------------------------------------------------------------------------------ */

uint64_t tdl_clock_ns(void);   /* monotonic nanoseconds */
double tdl_clock_s(void);      /* monotonic seconds */
double tdl_clock_wall_s(void); /* seconds since the epoch */
/* The median of n timings (the middle two averaged for even n; 0 for none); v is left as it is. */
double tdl_median(const double *v, size_t n);

/* ---- counter-based RNG: Philox4x32-10 ---------------------------------------------------- */

/* Every random stream is a pure function of (seed, stream, position): a stream can be
 * restarted anywhere, saved as three integers, and split between ranks without messages. */
typedef struct tdl_rng {
    uint64_t seed;
    uint64_t stream;
    uint64_t pos;      /* number of 32-bit words drawn so far */
    uint32_t block[4]; /* cached output of block pos / 4 */
    uint64_t block_id; /* which block is cached; UINT64_MAX when none */
} tdl_rng_t;

void tdl_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
void tdl_rng_init(tdl_rng_t *rng, uint64_t seed, uint64_t stream);
void tdl_rng_seek(tdl_rng_t *rng, uint64_t pos);
uint32_t tdl_rng_u32(tdl_rng_t *rng);
uint64_t tdl_rng_u64(tdl_rng_t *rng);
/* The next n words, as n calls of tdl_rng_u32 would give them, 16 blocks at a time. */
void tdl_rng_fill_u32(tdl_rng_t *rng, uint32_t *out, size_t n);
/* The 64 words of blocks id .. id + 15 of stream (seed, stream), words 4 id .. 4 id + 63 in draw
 * order (AVX-512 lanes where the CPU has them). */
void tdl_philox_words64(uint64_t seed, uint64_t stream, uint64_t id, uint32_t out[64]);
float tdl_rng_uniform(tdl_rng_t *rng);      /* [0, 1), 24 random bits */
double tdl_rng_uniform_f64(tdl_rng_t *rng); /* [0, 1), 53 random bits */
float tdl_rng_normal(tdl_rng_t *rng);       /* standard normal, Box-Muller, 2 words */
/* Uniform integer in [0, n) without modulo bias; n >= 1. */
uint64_t tdl_rng_below(tdl_rng_t *rng, uint64_t n);
void tdl_rng_fill_normal(tdl_rng_t *rng, float *out, size_t n);

/* ---- byte strings from every rank ------------------------------------------------------- */

/* One buffer holding every rank's bytes: rank r's are data[off[r] .. off[r] + len[r]). Filled by
 * the MPI bootstrap's all-gather and read by gfc at start-up. */
typedef struct tdl_blobs {
    int count;
    size_t *len;
    size_t *off;
    unsigned char *data;
} tdl_blobs_t;

void tdl_blobs_free(tdl_blobs_t *blobs);

/* ---- half precision ---------------------------------------------------------------------- */

/* Round-to-nearest-even conversions; NaN stays NaN, overflow goes to Inf. */
uint16_t tdl_bf16_from_f32(float x);
float tdl_bf16_to_f32(uint16_t h);
uint16_t tdl_f16_from_f32(float x);
float tdl_f16_to_f32(uint16_t h);

/* ---- files ------------------------------------------------------------------------------- */

/* Publishes a file written under `tmp` (open as fd): fsync, close, rename over path, fsync of
 * the directory. fd is closed in every case; on failure tmp is removed and path is unchanged. */
tdl_status_t tdl_file_commit(int fd, const char *tmp, const char *path);
/* Creates the directory and its missing parents (mkdir -p); existing ones are fine. */
tdl_status_t tdl_mkdir_p(const char *path);

/* ---- small helpers ----------------------------------------------------------------------- */

#define TDL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TDL_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define TDL_MAX(a, b)     ((a) > (b) ? (a) : (b))

/* The bits of a float and the float of bits, by copy (a pointer cast would break aliasing). */
static inline uint32_t tdl_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float tdl_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- allocation, with fault injection for tests (src/core/alloc.c) ----------------------- */

/* malloc, calloc, realloc and strdup, as libc's; free with free(). The modules whose failure
 * paths the tests walk allocate through these. */
void *tdl_malloc(size_t size);
void *tdl_calloc(size_t count, size_t size);
void *tdl_realloc(void *p, size_t size);
char *tdl_strdup(const char *s);
/* SQLite's test_malloc: the next n allocations succeed, then every one fails (n < 0: none
 * fails, the default). Answers the allocations made since the last call. */
long tdl_alloc_fail_after(long n);

/* The version string of the library ("0.1.0") and its build options. */
const char *tdl_version(void);
const char *tdl_build_options(void);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_CORE_H */
