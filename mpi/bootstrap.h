/* The MPI bootstrap: the only place tidal's runtime touches MPI. It starts MPI, tells each rank
 * who it is and where it runs, and gathers byte strings (UCX worker addresses) once at start-up.
 * No MPI type appears in this interface, so nothing outside mpi/ includes mpi.h. */
#ifndef TIDAL_MPI_BOOTSTRAP_H
#define TIDAL_MPI_BOOTSTRAP_H

#include <stddef.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdl_boot_info {
    int rank;       /* world rank */
    int size;       /* world size */
    int local_rank; /* rank among the processes sharing this node */
    int local_size;
    char host[256];
    int thread_level; /* MPI thread level granted (0 single .. 3 multiple) */
} tdl_boot_info_t;

/* Starts MPI (MPI_Init_thread, asking for MPI_THREAD_MULTIPLE) unless it is already started. */
tdl_status_t tdl_boot_init(int *argc, char ***argv, tdl_boot_info_t *info_out);
/* Finalizes MPI if tdl_boot_init started it. */
tdl_status_t tdl_boot_finalize(void);
bool tdl_boot_initialized(void);
/* Collective over the world: every rank contributes `len` bytes (lengths may differ). */
tdl_status_t tdl_boot_allgatherv(const void *mine, size_t len, tdl_blobs_t *blobs_out);
tdl_status_t tdl_boot_barrier(void);
/* Sums an int64 across the world: for exit codes and test verdicts. */
tdl_status_t tdl_boot_allreduce_sum_i64(int64_t *value);
/* Turns an MPI return code into a status, naming the call: for mpi/'s own files. */
tdl_status_t tdl_boot_check(int rc, const char *what);
/* Ends every rank of the job with `code` (MPI_Abort). */
void tdl_boot_abort(int code) __attribute__((noreturn));
/* "Open MPI v4.1.4, ..." (MPI_Get_library_version, first line). */
const char *tdl_boot_library_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_MPI_BOOTSTRAP_H */
