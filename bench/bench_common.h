/* What the C benchmark programs share: MPI and gfc start-up, command-line options, CSV rows,
 * statistics over timing samples and `key: value` lines. A program is run by bench/run under
 * mpirun once per rank count and appends its rows to one CSV, from which bench/run draws the
 * plot and the headline figures. */
#ifndef TIDAL_BENCH_COMMON_H
#define TIDAL_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/core.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"

/* Command-line options every program takes; 0 (or NULL) means "the program's default". */
typedef struct bench_args {
    bool quick;           /* --quick: fewer sizes and samples, for a run under a minute */
    const char *csv_path; /* --csv PATH: rows are appended; the header is written once */
    int iters;            /* --iters N: timed samples per measurement */
    int reps;             /* --reps N: operations per timed sample */
    int warmup;           /* --warmup N: untimed operations before the samples */
    size_t min_bytes;     /* --min-bytes SIZE (4K, 1M, 256MiB ...) */
    size_t max_bytes;     /* --max-bytes SIZE */
    int size_factor;      /* --factor F: each size is F times the last (2 or 4) */
    uint64_t seed;        /* --seed N: input data */
} bench_args_t;

typedef struct bench_ctx {
    const char *name; /* "gfc-allreduce" */
    bench_args_t args;
    tdl_boot_info_t boot;
    gfc_runtime_t *rt;
    int *world_ranks; /* 0 .. size-1: the world as a group list, kept for gfc_group_t.ranks */
    FILE *csv;        /* rank 0 only; NULL without --csv */
} bench_ctx_t;

/* Starts MPI, parses the options (an unknown one prints usage and exits 2), creates the gfc
 * runtime (gfc_runtime_config_default + rank, size, tdl_boot_allgatherv) and, on rank 0,
 * opens the CSV. Exits the process with a message on failure: a benchmark has nothing to
 * fall back on. `defaults` gives the program's values for what the user did not set. */
void bench_ctx_init(bench_ctx_t *ctx, const char *name, int *argc, char ***argv,
                    const bench_args_t *defaults);
/* Destroys the runtime, closes the CSV, finalizes MPI. */
void bench_ctx_fini(bench_ctx_t *ctx);
bool bench_ctx_is_root(const bench_ctx_t *ctx);

/* On error: prints "NAME: rank R: WHAT: detail" and ends every rank (MPI_Abort), so that one
 * failed rank cannot leave the others waiting. */
void bench_check(const bench_ctx_t *ctx, tdl_status_t st, const char *what);

/* Rank 0 writes `header` (comma separated, no newline) if the CSV is empty. */
void bench_csv_header(bench_ctx_t *ctx, const char *header);
/* Rank 0 appends one row (printf format, no newline) and flushes. */
void bench_csv_row(bench_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Rank 0 prints "key: value" on stdout. */
void bench_kv_print(const bench_ctx_t *ctx, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rank 0 prints a line on stdout, for progress. */
void bench_log(const bench_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Minimum of n > 0 samples (the median is core's tdl_median). */
double bench_stats_min(const double *v, size_t n);

/* One timed sample of measurement m: runs `reps` operations back to back and returns this
 * rank's nanoseconds per operation. */
typedef double (*bench_sample_fn_t)(bench_ctx_t *ctx, void *arg, int m, int reps);

/* Takes `iters` samples of each of `count` measurements, interleaved: iteration i runs them in
 * the order i, i+1, ... (mod count), each after a world barrier, so that a noisy moment hurts
 * every side alike. reps[m] operations per sample of m. samples[m * iters + i] receives the
 * slowest rank's time of iteration i of m (ns per operation), the same on every rank. */
void bench_samples_interleave(bench_ctx_t *ctx, int count, int iters, const int *reps,
                              bench_sample_fn_t fn, void *arg, double *samples);

/* For size sweeps: timed samples at `bytes` (--iters, or fewer as messages grow so that the
 * largest take seconds, not minutes) and operations per sample (--reps, or enough to fill about
 * a mebibyte, so that small messages are timed over many back-to-back calls). */
int bench_iters_for_size(const bench_ctx_t *ctx, size_t bytes);
int bench_reps_for_size(const bench_ctx_t *ctx, size_t bytes);

/* "4K", "4KiB", "16m", "1G", "4096" -> bytes (powers of 1024). */
tdl_status_t bench_size_parse(const char *text, size_t *bytes_out);
/* 4096 -> "4KiB", 1536 -> "1536B"; returns buf. */
const char *bench_size_format(size_t bytes, char *buf, size_t size);

/* Page-aligned, zeroed (and so touched) memory; ends the job when it cannot be had. */
void *bench_buf_alloc(const bench_ctx_t *ctx, size_t bytes);

/* A 64-bit digest of bytes, to compare results between ranks without moving them. */
uint64_t bench_digest(const void *buf, size_t bytes);
/* Collective over the world: true when every rank passed the same digest. */
bool bench_digest_agree(const bench_ctx_t *ctx, uint64_t digest);

/* Gradient-like values: per block of 4096 a scale exp(N(0, 1)) / 1000 from stream 0 (the same
 * on every rank), times Student-t(4) values from this rank's stream: z / sqrt((E1 + E2) / 2)
 * with E = -log(uniform) exponential, so (E1 + E2) / 2 is chi-squared(4) / 4. */
void bench_fill_gradient(float *x, size_t count, uint64_t seed, int rank);
/* The parameters of the DiT configuration `model` ("fmnist"): the values of its gradient. */
tdl_status_t bench_dit_param_count(const char *model, size_t *count_out);
/* sum (x - ref)^2 / sum ref^2 (the sum of squares alone where ref is 0). */
double bench_vnmse(const float *x, const float *ref, size_t n);

/* The --sizes list of the all-reduce benchmarks: sizes ("64M") and "dit" (the gradient of the
 * DiT configuration `model`) as counts of f32 values, with their names ("64MiB",
 * "dit-fmnist"); a bad entry ends the run through bench_check, naming it. Returns how many (at
 * most `max`). */
int bench_gradient_sizes(bench_ctx_t *ctx, const char *list, const char *model, char (*names)[32],
                         size_t *counts, int max);

#endif /* TIDAL_BENCH_COMMON_H */
