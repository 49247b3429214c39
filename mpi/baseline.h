/* Reference collectives done by MPI, for the gfc tests: the same operation on an MPI
 * communicator holding the same ranks in the same order, so that gfc's result can be compared
 * with MPI's. No MPI type appears here (nothing outside mpi/ includes mpi.h): counts are in
 * elements and the data type and operation enums mirror gfc's value for value.
 *
 * Every wait inside these functions is a loop of MPI_Test calls that also runs the progress
 * function given to mref_set_progress, so a test can keep gfc moving while MPI works. */
#ifndef TIDAL_MPI_BASELINE_H
#define TIDAL_MPI_BASELINE_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Same values as gfc_dtype_t. bf16 and f16 have no MPI type: they move as 16-bit words and
 * reduce in float (converted on the way in, rounded once to nearest even on the way out). */
typedef enum {
    MREF_DT_F32 = 0,
    MREF_DT_BF16,
    MREF_DT_F16,
    MREF_DT_I32,
    MREF_DT_I64,
    MREF_DT_BYTE,
    MREF_DT_COUNT
} mref_dtype_t;

/* Same values as gfc_redop_t. */
typedef enum { MREF_OP_SUM = 0, MREF_OP_MAX, MREF_OP_MIN, MREF_OP_COUNT } mref_op_t;

typedef struct mref_comm mref_comm_t;

/* Called at every turn of every wait loop (NULL: none). */
void mref_set_progress(void (*progress)(void *arg), void *arg);

/* Collective over the listed world ranks only (MPI_Comm_create_group): member i of the list is
 * rank i of the new communicator. */
tdl_status_t mref_comm_open(const int *ranks, int n, mref_comm_t **comm_out);
void mref_comm_close(mref_comm_t *comm);
int mref_comm_rank(const mref_comm_t *comm);
int mref_comm_size(const mref_comm_t *comm);

tdl_status_t mref_barrier(mref_comm_t *comm);
tdl_status_t mref_bcast(mref_comm_t *comm, void *buf, size_t count, mref_dtype_t dtype, int root);
tdl_status_t mref_gather(mref_comm_t *comm, const void *send, void *recv, size_t count,
                         mref_dtype_t dtype, int root);
tdl_status_t mref_allgather(mref_comm_t *comm, const void *send, void *recv, size_t count,
                            mref_dtype_t dtype);
tdl_status_t mref_allgatherv(mref_comm_t *comm, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, mref_dtype_t dtype);
tdl_status_t mref_alltoall(mref_comm_t *comm, const void *send, void *recv, size_t count,
                           mref_dtype_t dtype);
tdl_status_t mref_alltoallv(mref_comm_t *comm, const void *send, const size_t *send_counts,
                            const size_t *send_displs, void *recv, const size_t *recv_counts,
                            const size_t *recv_displs, mref_dtype_t dtype);
/* MPI_Reduce_scatter_block: send holds size * count elements. */
tdl_status_t mref_reduce_scatter_block(mref_comm_t *comm, const void *send, void *recv,
                                       size_t count, mref_dtype_t dtype, mref_op_t op);
tdl_status_t mref_allreduce(mref_comm_t *comm, const void *send, void *recv, size_t count,
                            mref_dtype_t dtype, mref_op_t op);

/* ---- the world, for test verdicts ---------------------------------------------------------- */

int mref_world_rank(void);
int mref_world_size(void);
tdl_status_t mref_world_barrier(void);
/* op: MREF_OP_SUM, MREF_OP_MAX or MREF_OP_MIN. */
tdl_status_t mref_world_allreduce_i64(int64_t *value, mref_op_t op);
tdl_status_t mref_world_bcast_u64(uint64_t *value, int root);
/* Every rank gives `len` bytes; `all` (size * len bytes, rank order) is filled at root only. */
tdl_status_t mref_world_gather_bytes(const void *mine, size_t len, void *all, int root);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_MPI_BASELINE_H */
