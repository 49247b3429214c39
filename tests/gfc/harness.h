/* Shared start-up and verdicts for the gfc tests under mpirun.
 *
 * harness_init boots MPI, creates the gfc runtime over the bootstrap's all-gather and agrees on
 * one random seed. A test records failures locally with harness_fail/harness_expect and ends
 * each TAP point with harness_point, which every rank calls at the same place: the point passes
 * only if no rank failed, and rank 0, the only rank that prints TAP, shows the first failure
 * of each failing rank. Groups drawn with harness_rng streams are the same on every rank
 * without any message. */
#ifndef TIDAL_TESTS_GFC_HARNESS_H
#define TIDAL_TESTS_GFC_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"

#define HARNESS_MSG 240

typedef struct harness {
    tdl_boot_info_t boot;
    gfc_runtime_config_t config;
    gfc_runtime_t *rt;
    int rank;
    int size;
    uint64_t seed;     /* the same on every rank */
    int points;        /* TAP points so far (the same on every rank) */
    int failed_points; /* of which failed world-wide */
    int64_t fails;     /* local failures since the last point */
    char first[HARNESS_MSG];
} harness_t;

/* timeout_ms > 0 overrides gfc's default and TIDAL_GFC_TIMEOUT_MS. On failure prints a TAP
 * "Bail out!" line (rank 0) and returns the error. */
tdl_status_t harness_init(harness_t *h, int *argc, char ***argv, int64_t timeout_ms);
/* World barrier, runtime destroyed, TAP plan, MPI finalized. Returns the exit code (0 when
 * every point passed), the same on every rank. */
int harness_finish(harness_t *h);

void harness_fail(harness_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records a failure when !cond; returns cond. */
bool harness_expect(harness_t *h, bool cond, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records a failure unless st == want, adding tdl_error_get() to the message. */
bool harness_expect_status(harness_t *h, tdl_status_t st, tdl_status_t want, const char *what);
/* Collective over the world: one TAP point, passed if no rank failed since the last one. */
bool harness_point(harness_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A "# ..." line from rank 0. */
void harness_diag(harness_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A stream of the shared seed: the same numbers on every rank. */
void harness_rng(const harness_t *h, uint64_t stream, tdl_rng_t *rng);
void harness_shuffle(tdl_rng_t *rng, int *v, int n);
/* A random group of min..max distinct world ranks in random order; `ranks` has room for
 * `world` entries. Returns the size. */
int harness_random_group(tdl_rng_t *rng, int world, int min, int max, int *ranks);
/* n gradient-like values, as the codec tests feed them: heavy tails, blocks of 1024 with
 * log-normal scales (from `shared`), a signal shared by the ranks (from `shared`) plus a part of
 * each rank's own (from `own`). The scales' normals are kept within 3 sigma, so that 8 ranks'
 * sums stay inside fp16's range (65504): at 4.2 sigma one draw's sum came to -85298 and fp16
 * rightly gave -inf (test_gfc_hier, 8 ranks, seed 18053846566442614035). */
void harness_fill_grad(float *x, size_t n, tdl_rng_t *shared, tdl_rng_t *own);
/* malloc that aborts, naming the size, when memory runs out (at least 1 byte). */
void *harness_xmalloc(size_t bytes);
/* Index of rank in ranks, or -1. */
int harness_index_of(const int *ranks, int n, int rank);
/* "[3,0,5]", truncated to size. */
void harness_ranks_str(const int *ranks, int n, char *buf, size_t size);
/* FNV-1a, 64 bits. */
uint64_t harness_hash(const void *buf, size_t len);

/* splitmix64's finalizer: the tests' values from (seed, round, group, rank, index). */
static inline uint64_t harness_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif /* TIDAL_TESTS_GFC_HARNESS_H */
