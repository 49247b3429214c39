/* Reference collectives done by MPI, for the gfc tests (see baseline.h). Each operation is the
 * non-blocking MPI collective followed by a test loop that also turns the caller's progress
 * function: a rank waiting here keeps answering gfc messages. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/baseline.h"
#include "mpi/bootstrap.h"

struct mref_comm {
    MPI_Comm comm;
    int rank;
    int size;
};

static void (*mref_progress_fn)(void *arg);
static void *mref_progress_arg;

void mref_set_progress(void (*progress)(void *arg), void *arg)
{
    mref_progress_fn = progress;
    mref_progress_arg = arg;
}

/* Completes a request started by `rc`, turning the progress function meanwhile. */
static tdl_status_t mref_wait(int rc, MPI_Request *req, const char *what)
{
    if (rc != MPI_SUCCESS)
        return tdl_boot_check(rc, what);
    if (!mref_progress_fn)
        return tdl_boot_check(MPI_Wait(req, MPI_STATUS_IGNORE), what);
    for (;;) {
        int done = 0;
        rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return tdl_boot_check(rc, what);
        if (done)
            return TDL_OK;
        mref_progress_fn(mref_progress_arg);
        sched_yield(); /* the tests run oversubscribed */
    }
}

/* ---- 16-bit floats, converted here independently of src/core/half.c ------------------------ */

/* x rounded to nearest even in a binary format with `mbits` stored significand bits and
 * `ebits` exponent bits; overflow gives Inf, NaN stays NaN. Exact in double throughout. */
static uint16_t mref_half_from_f32(float x, int mbits, int ebits)
{
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t expmask = ((1u << ebits) - 1) << mbits;
    uint16_t sign = signbit(x) ? 0x8000u : 0;
    if (isnan(x))
        return (uint16_t)(sign | expmask | (1u << (mbits - 1)));
    if (isinf(x))
        return (uint16_t)(sign | expmask);
    double a = fabs((double)x);
    if (a == 0)
        return sign;
    int e;
    frexp(a, &e);
    int E = e - 1; /* a in [2^E, 2^(E+1)) */
    if (E < 1 - bias)
        E = 1 - bias; /* subnormal: the spacing stays that of the smallest normal */
    double r = nearbyint(ldexp(a, mbits - E));
    if (r >= ldexp(1, mbits + 1)) {
        r /= 2;
        E++;
    }
    if (E > bias)
        return (uint16_t)(sign | expmask);
    if (r < ldexp(1, mbits))
        return (uint16_t)(sign | (uint32_t)r);
    return (uint16_t)(sign | ((uint32_t)(E + bias) << mbits) | ((uint32_t)r - (1u << mbits)));
}

static float mref_half_to_f32(uint16_t h, int mbits, int ebits)
{
    const int bias = (1 << (ebits - 1)) - 1;
    uint32_t field = (h >> mbits) & ((1u << ebits) - 1);
    uint32_t mant = h & ((1u << mbits) - 1);
    double v;
    if (field == 0)
        v = ldexp((double)mant, 1 - bias - mbits);
    else if (field == (1u << ebits) - 1)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp((double)(mant | (1u << mbits)), (int)field - bias - mbits);
    return (float)((h & 0x8000u) ? -v : v);
}

static int mref_half_mbits(mref_dtype_t dtype)
{
    return dtype == MREF_DT_BF16 ? 7 : 10;
}

static int mref_half_ebits(mref_dtype_t dtype)
{
    return dtype == MREF_DT_BF16 ? 8 : 5;
}

static float *mref_half_to_floats(const void *in, size_t n, mref_dtype_t dtype)
{
    float *out = malloc((n ? n : 1) * sizeof(float));
    if (!out)
        return NULL;
    const uint16_t *h = in;
    for (size_t i = 0; i < n; i++)
        out[i] = mref_half_to_f32(h[i], mref_half_mbits(dtype), mref_half_ebits(dtype));
    return out;
}

static void mref_floats_to_half(const float *in, void *out, size_t n, mref_dtype_t dtype)
{
    uint16_t *h = out;
    for (size_t i = 0; i < n; i++)
        h[i] = mref_half_from_f32(in[i], mref_half_mbits(dtype), mref_half_ebits(dtype));
}

/* ---- types --------------------------------------------------------------------------------- */

/* The MPI type that moves one element. */
static tdl_status_t mref_move_type(mref_dtype_t dtype, MPI_Datatype *type_out)
{
    switch (dtype) {
    case MREF_DT_F32: *type_out = MPI_FLOAT; return TDL_OK;
    case MREF_DT_BF16:
    case MREF_DT_F16: *type_out = MPI_UINT16_T; return TDL_OK;
    case MREF_DT_I32: *type_out = MPI_INT32_T; return TDL_OK;
    case MREF_DT_I64: *type_out = MPI_INT64_T; return TDL_OK;
    case MREF_DT_BYTE: *type_out = MPI_UINT8_T; return TDL_OK;
    default: break;
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "mref: unknown data type %d", (int)dtype);
}

static tdl_status_t mref_mpi_op(mref_op_t op, mref_dtype_t dtype, MPI_Op *op_out)
{
    if (op == MREF_OP_SUM && dtype == MREF_DT_BYTE)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "mref: no sum of bytes");
    switch (op) {
    case MREF_OP_SUM: *op_out = MPI_SUM; return TDL_OK;
    case MREF_OP_MAX: *op_out = MPI_MAX; return TDL_OK;
    case MREF_OP_MIN: *op_out = MPI_MIN; return TDL_OK;
    default: break;
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "mref: unknown operation %d", (int)op);
}

static tdl_status_t mref_int_count(size_t count, int *out)
{
    if (count > INT_MAX)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "mref: count %zu exceeds INT_MAX", count);
    *out = (int)count;
    return TDL_OK;
}

/* counts/displs as ints for the v-collectives; *ints_out holds 2 * n ints. */
static tdl_status_t mref_int_arrays(const size_t *counts, const size_t *displs, int n,
                                    int **ints_out)
{
    int *ints = malloc(2 * (size_t)n * sizeof(int));
    if (!ints)
        return tdl_error_raise(TDL_ERR_NOMEM, "mref: out of memory");
    for (int i = 0; i < n; i++) {
        if (counts[i] > INT_MAX || displs[i] > INT_MAX) {
            free(ints);
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "mref: count or displacement too large");
        }
        ints[i] = (int)counts[i];
        ints[n + i] = (int)displs[i];
    }
    *ints_out = ints;
    return TDL_OK;
}

/* ---- communicators ------------------------------------------------------------------------- */

tdl_status_t mref_comm_open(const int *ranks, int n, mref_comm_t **comm_out)
{
    mref_comm_t *c = calloc(1, sizeof(*c));
    if (!c)
        return tdl_error_raise(TDL_ERR_NOMEM, "mref: out of memory");
    MPI_Group world, group;
    tdl_status_t st = tdl_boot_check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
    if (st != TDL_OK)
        goto err;
    st = tdl_boot_check(MPI_Group_incl(world, n, ranks, &group), "MPI_Group_incl");
    MPI_Group_free(&world);
    if (st != TDL_OK)
        goto err;
    st = tdl_boot_check(MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &c->comm),
                    "MPI_Comm_create_group");
    MPI_Group_free(&group);
    if (st != TDL_OK)
        goto err;
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    *comm_out = c;
    return TDL_OK;
err:
    free(c);
    return st;
}

void mref_comm_close(mref_comm_t *comm)
{
    if (!comm)
        return;
    MPI_Comm_free(&comm->comm);
    free(comm);
}

int mref_comm_rank(const mref_comm_t *comm)
{
    return comm->rank;
}

int mref_comm_size(const mref_comm_t *comm)
{
    return comm->size;
}

/* ---- operations ---------------------------------------------------------------------------- */

tdl_status_t mref_barrier(mref_comm_t *comm)
{
    MPI_Request req;
    return mref_wait(MPI_Ibarrier(comm->comm, &req), &req, "MPI_Ibarrier");
}

tdl_status_t mref_bcast(mref_comm_t *comm, void *buf, size_t count, mref_dtype_t dtype, int root)
{
    MPI_Datatype type = MPI_BYTE;
    int n = 0;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_int_count(count, &n);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    return mref_wait(MPI_Ibcast(buf, n, type, root, comm->comm, &req), &req, "MPI_Ibcast");
}

tdl_status_t mref_gather(mref_comm_t *comm, const void *send, void *recv, size_t count,
                         mref_dtype_t dtype, int root)
{
    MPI_Datatype type = MPI_BYTE;
    int n = 0;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_int_count(count, &n);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    return mref_wait(MPI_Igather(send, n, type, recv, n, type, root, comm->comm, &req), &req,
                     "MPI_Igather");
}

tdl_status_t mref_allgather(mref_comm_t *comm, const void *send, void *recv, size_t count,
                            mref_dtype_t dtype)
{
    MPI_Datatype type = MPI_BYTE;
    int n = 0;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_int_count(count, &n);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    return mref_wait(MPI_Iallgather(send, n, type, recv, n, type, comm->comm, &req), &req,
                     "MPI_Iallgather");
}

tdl_status_t mref_allgatherv(mref_comm_t *comm, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, mref_dtype_t dtype)
{
    MPI_Datatype type = MPI_BYTE;
    int *ints = NULL;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_int_arrays(counts, displs, comm->size, &ints);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    st = mref_wait(MPI_Iallgatherv(send, ints[comm->rank], type, recv, ints, ints + comm->size,
                                   type, comm->comm, &req),
                   &req, "MPI_Iallgatherv");
    free(ints);
    return st;
}

tdl_status_t mref_alltoall(mref_comm_t *comm, const void *send, void *recv, size_t count,
                           mref_dtype_t dtype)
{
    MPI_Datatype type = MPI_BYTE;
    int n = 0;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_int_count(count, &n);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    return mref_wait(MPI_Ialltoall(send, n, type, recv, n, type, comm->comm, &req), &req,
                     "MPI_Ialltoall");
}

tdl_status_t mref_alltoallv(mref_comm_t *comm, const void *send, const size_t *send_counts,
                            const size_t *send_displs, void *recv, const size_t *recv_counts,
                            const size_t *recv_displs, mref_dtype_t dtype)
{
    MPI_Datatype type = MPI_BYTE;
    int *s = NULL, *r = NULL;
    int n = comm->size;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_int_arrays(send_counts, send_displs, n, &s);
    if (st == TDL_OK)
        st = mref_int_arrays(recv_counts, recv_displs, n, &r);
    if (st == TDL_OK) {
        MPI_Request req;
        st = mref_wait(MPI_Ialltoallv(send, s, s + n, type, recv, r, r + n, type, comm->comm, &req),
                       &req, "MPI_Ialltoallv");
    }
    free(r);
    free(s);
    return st;
}

tdl_status_t mref_reduce_scatter_block(mref_comm_t *comm, const void *send, void *recv,
                                       size_t count, mref_dtype_t dtype, mref_op_t op)
{
    MPI_Datatype type = MPI_BYTE;
    MPI_Op mop = MPI_SUM;
    int n = 0;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_mpi_op(op, dtype, &mop);
    if (st == TDL_OK)
        st = mref_int_count(count, &n);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    if (dtype != MREF_DT_BF16 && dtype != MREF_DT_F16)
        return mref_wait(MPI_Ireduce_scatter_block(send, recv, n, type, mop, comm->comm, &req),
                         &req, "MPI_Ireduce_scatter_block");
    float *in = mref_half_to_floats(send, count * (size_t)comm->size, dtype);
    float *out = malloc((count ? count : 1) * sizeof(float));
    if (!in || !out) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "mref: out of memory");
    } else {
        st = mref_wait(MPI_Ireduce_scatter_block(in, out, n, MPI_FLOAT, mop, comm->comm, &req),
                       &req, "MPI_Ireduce_scatter_block");
        if (st == TDL_OK)
            mref_floats_to_half(out, recv, count, dtype);
    }
    free(out);
    free(in);
    return st;
}

tdl_status_t mref_allreduce(mref_comm_t *comm, const void *send, void *recv, size_t count,
                            mref_dtype_t dtype, mref_op_t op)
{
    MPI_Datatype type = MPI_BYTE;
    MPI_Op mop = MPI_SUM;
    int n = 0;
    tdl_status_t st = mref_move_type(dtype, &type);
    if (st == TDL_OK)
        st = mref_mpi_op(op, dtype, &mop);
    if (st == TDL_OK)
        st = mref_int_count(count, &n);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    if (dtype != MREF_DT_BF16 && dtype != MREF_DT_F16)
        return mref_wait(MPI_Iallreduce(send, recv, n, type, mop, comm->comm, &req), &req,
                         "MPI_Iallreduce");
    float *in = mref_half_to_floats(send, count, dtype);
    float *out = malloc((count ? count : 1) * sizeof(float));
    if (!in || !out) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "mref: out of memory");
    } else {
        st = mref_wait(MPI_Iallreduce(in, out, n, MPI_FLOAT, mop, comm->comm, &req), &req,
                       "MPI_Iallreduce");
        if (st == TDL_OK)
            mref_floats_to_half(out, recv, count, dtype);
    }
    free(out);
    free(in);
    return st;
}

/* ---- the world ----------------------------------------------------------------------------- */

int mref_world_rank(void)
{
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int mref_world_size(void)
{
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

tdl_status_t mref_world_barrier(void)
{
    MPI_Request req;
    return mref_wait(MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "MPI_Ibarrier(world)");
}

tdl_status_t mref_world_allreduce_i64(int64_t *value, mref_op_t op)
{
    MPI_Op mop = MPI_SUM;
    tdl_status_t st = mref_mpi_op(op, MREF_DT_I64, &mop);
    if (st != TDL_OK)
        return st;
    int64_t in = *value, out = 0;
    MPI_Request req;
    st = mref_wait(MPI_Iallreduce(&in, &out, 1, MPI_INT64_T, mop, MPI_COMM_WORLD, &req), &req,
                   "MPI_Iallreduce(world)");
    if (st == TDL_OK)
        *value = out;
    return st;
}

tdl_status_t mref_world_bcast_u64(uint64_t *value, int root)
{
    MPI_Request req;
    return mref_wait(MPI_Ibcast(value, 1, MPI_UINT64_T, root, MPI_COMM_WORLD, &req), &req,
                     "MPI_Ibcast(world)");
}

tdl_status_t mref_world_gather_bytes(const void *mine, size_t len, void *all, int root)
{
    int n = 0;
    tdl_status_t st = mref_int_count(len, &n);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    return mref_wait(MPI_Igather(mine, n, MPI_BYTE, all, n, MPI_BYTE, root, MPI_COMM_WORLD, &req),
                     &req, "MPI_Igather(world)");
}
