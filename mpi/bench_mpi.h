/* MPI baselines for the benchmarks in bench/: what a user would call instead of gfc
 * (communicator creation, MPI_Allreduce, MPI_Alltoall), timed the same way as the gfc side, and
 * the few world-wide helpers a benchmark needs to combine its samples. No MPI type appears in
 * this interface, so the benchmark programs do not include mpi.h. Every function here assumes
 * MPI was started by tdl_boot_init and works on MPI_COMM_WORLD. */
#ifndef TIDAL_MPI_BENCH_MPI_H
#define TIDAL_MPI_BENCH_MPI_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- world-wide helpers ------------------------------------------------------------------ */

/* A function the helpers below call while they wait. A gfc rank whose part of a collective is
 * done may still owe its peers protocol messages (rendezvous acknowledgements) that leave only
 * when its UCX worker is progressed: a helper that blocked inside MPI would keep them back, and
 * a peer still waiting on them would never reach the same MPI call. NULL: none. */
typedef void (*bench_mpi_progress_fn_t)(void *arg);
void bench_mpi_progress_set(bench_mpi_progress_fn_t fn, void *arg);

tdl_status_t bench_mpi_barrier(void);
/* Element-wise maximum (minimum) of n values over the world, in place on every rank: the time
 * of a collective is the time of its slowest member. */
tdl_status_t bench_mpi_max_f64(double *values, size_t n);
tdl_status_t bench_mpi_min_f64(double *values, size_t n);
tdl_status_t bench_mpi_sum_i64(int64_t *values, size_t n);
/* Copies `bytes` bytes from `root` to every rank. */
tdl_status_t bench_mpi_bcast(void *buf, size_t bytes, int root);

/* ---- communicator creation --------------------------------------------------------------- */

typedef enum {
    /* MPI_Comm_split(MPI_COMM_WORLD): collective over the world; ranks outside the list pass
     * MPI_UNDEFINED, as a serving rank outside a task's group would. */
    BENCH_MPI_SETUP_COMM_SPLIT = 0,
    /* MPI_Group_incl of the list, MPI_Comm_create_group: collective over the listed ranks only,
     * the cheapest standard way to build a communicator for an arbitrary rank list. */
    BENCH_MPI_SETUP_COMM_CREATE_GROUP,
    BENCH_MPI_SETUP_COUNT
} bench_mpi_setup_t;

const char *bench_mpi_setup_name(bench_mpi_setup_t how);

/* Runs `reps` times, back to back: create a communicator over `ranks` (world ranks, in group
 * order), MPI_Barrier on it, MPI_Comm_free: the per-request cost of using an MPI communicator
 * for a group that exists for one task. *ns_out is this rank's elapsed time for all reps.
 * A rank outside `ranks` may call only with BENCH_MPI_SETUP_COMM_SPLIT. */
tdl_status_t bench_mpi_setup_time(bench_mpi_setup_t how, const int *ranks, int n, int reps,
                                  uint64_t *ns_out);

/* ---- data collectives over the world ----------------------------------------------------- */

/* MPI_Allreduce of `count` floats, MPI_SUM; send != recv. */
tdl_status_t bench_mpi_allreduce_f32(const float *send, float *recv, size_t count);
/* `reps` MPI_Allreduce calls back to back; *ns_out is this rank's elapsed time for all. */
tdl_status_t bench_mpi_allreduce_f32_time(const float *send, float *recv, size_t count, int reps,
                                          uint64_t *ns_out);

/* MPI_Alltoall of `bytes_per_peer` bytes to and from every rank (MPI_BYTE). */
tdl_status_t bench_mpi_alltoall(const void *send, void *recv, size_t bytes_per_peer);
tdl_status_t bench_mpi_alltoall_time(const void *send, void *recv, size_t bytes_per_peer, int reps,
                                     uint64_t *ns_out);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_MPI_BENCH_MPI_H */
