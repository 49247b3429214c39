/* MPI baselines for the benchmarks: see bench_mpi.h. */
#include "config.h"

#include <limits.h>
#include <mpi.h>

#include "mpi/bootstrap.h"
#include <stdlib.h>

#include "mpi/bench_mpi.h"

/* Any tag below MPI_TAG_UB: the benchmark creates one communicator at a time. */
#define BENCH_MPI_CREATE_TAG 4242

static tdl_status_t bench_mpi_count(size_t count, const char *what, int *count_out)
{
    if (count > INT_MAX)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s: %zu elements do not fit an MPI count",
                               what, count);
    *count_out = (int)count;
    return TDL_OK;
}

/* ---- world-wide helpers ------------------------------------------------------------------ */

static bench_mpi_progress_fn_t bench_mpi_progress_fn;
static void *bench_mpi_progress_arg;

void bench_mpi_progress_set(bench_mpi_progress_fn_t fn, void *arg)
{
    bench_mpi_progress_fn = fn;
    bench_mpi_progress_arg = arg;
}

/* Completes a nonblocking MPI operation, running the progress hook meanwhile. */
static tdl_status_t bench_mpi_complete(int rc, MPI_Request *req, const char *what)
{
    tdl_status_t st = tdl_boot_check(rc, what);
    int done = 0;
    while (st == TDL_OK && !done) {
        st = tdl_boot_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), what);
        if (!done && bench_mpi_progress_fn != NULL)
            bench_mpi_progress_fn(bench_mpi_progress_arg);
    }
    return st;
}

tdl_status_t bench_mpi_barrier(void)
{
    MPI_Request req;
    return bench_mpi_complete(MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "MPI_Ibarrier");
}

static tdl_status_t bench_mpi_allreduce_inplace(void *values, size_t n, MPI_Datatype type,
                                                MPI_Op op, const char *what)
{
    int count = 0;
    tdl_status_t st = bench_mpi_count(n, what, &count);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    return bench_mpi_complete(
        MPI_Iallreduce(MPI_IN_PLACE, values, count, type, op, MPI_COMM_WORLD, &req), &req, what);
}

tdl_status_t bench_mpi_max_f64(double *values, size_t n)
{
    return bench_mpi_allreduce_inplace(values, n, MPI_DOUBLE, MPI_MAX, "MPI_Iallreduce(MAX)");
}

tdl_status_t bench_mpi_min_f64(double *values, size_t n)
{
    return bench_mpi_allreduce_inplace(values, n, MPI_DOUBLE, MPI_MIN, "MPI_Iallreduce(MIN)");
}

tdl_status_t bench_mpi_sum_i64(int64_t *values, size_t n)
{
    return bench_mpi_allreduce_inplace(values, n, MPI_INT64_T, MPI_SUM, "MPI_Iallreduce(SUM)");
}

tdl_status_t bench_mpi_bcast(void *buf, size_t bytes, int root)
{
    int count = 0;
    tdl_status_t st = bench_mpi_count(bytes, "MPI_Ibcast", &count);
    if (st != TDL_OK)
        return st;
    MPI_Request req;
    return bench_mpi_complete(MPI_Ibcast(buf, count, MPI_BYTE, root, MPI_COMM_WORLD, &req), &req,
                              "MPI_Ibcast");
}

/* ---- communicator creation --------------------------------------------------------------- */

const char *bench_mpi_setup_name(bench_mpi_setup_t how)
{
    switch (how) {
    case BENCH_MPI_SETUP_COMM_SPLIT: return "MPI_Comm_split";
    case BENCH_MPI_SETUP_COMM_CREATE_GROUP: return "MPI_Comm_create_group";
    default: return "?";
    }
}

/* Where this rank sits in `ranks`, or -1. */
static int bench_mpi_position(const int *ranks, int n, int me)
{
    for (int i = 0; i < n; i++)
        if (ranks[i] == me)
            return i;
    return -1;
}

/* One create + barrier + free. */
static tdl_status_t bench_mpi_setup_once(bench_mpi_setup_t how, MPI_Group world_group,
                                         const int *ranks, int n, int pos)
{
    MPI_Comm comm = MPI_COMM_NULL;
    tdl_status_t st;
    if (how == BENCH_MPI_SETUP_COMM_SPLIT) {
        int color = pos >= 0 ? 0 : MPI_UNDEFINED;
        st = tdl_boot_check(MPI_Comm_split(MPI_COMM_WORLD, color, pos, &comm), "MPI_Comm_split");
        if (st != TDL_OK)
            return st;
    } else {
        MPI_Group group;
        st = tdl_boot_check(MPI_Group_incl(world_group, n, ranks, &group), "MPI_Group_incl");
        if (st != TDL_OK)
            return st;
        st = tdl_boot_check(
            MPI_Comm_create_group(MPI_COMM_WORLD, group, BENCH_MPI_CREATE_TAG, &comm),
            "MPI_Comm_create_group");
        MPI_Group_free(&group);
        if (st != TDL_OK)
            return st;
    }
    if (comm == MPI_COMM_NULL)
        return TDL_OK;
    st = tdl_boot_check(MPI_Barrier(comm), "MPI_Barrier(new communicator)");
    tdl_status_t st_free = tdl_boot_check(MPI_Comm_free(&comm), "MPI_Comm_free");
    return st != TDL_OK ? st : st_free;
}

tdl_status_t bench_mpi_setup_time(bench_mpi_setup_t how, const int *ranks, int n, int reps,
                                  uint64_t *ns_out)
{
    if ((unsigned)how >= BENCH_MPI_SETUP_COUNT || n < 1 || reps < 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "bench_mpi_setup_time: bad arguments");
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int pos = bench_mpi_position(ranks, n, me);
    if (pos < 0 && how != BENCH_MPI_SETUP_COMM_SPLIT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s: rank %d is not in the group",
                               bench_mpi_setup_name(how), me);
    /* A program keeps the world group, so it stays outside the timed loop. */
    MPI_Group world_group;
    tdl_status_t st =
        tdl_boot_check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
    if (st != TDL_OK)
        return st;
    uint64_t t0 = tdl_clock_ns();
    for (int r = 0; r < reps && st == TDL_OK; r++)
        st = bench_mpi_setup_once(how, world_group, ranks, n, pos);
    uint64_t t1 = tdl_clock_ns();
    MPI_Group_free(&world_group);
    if (st != TDL_OK)
        return st;
    *ns_out = t1 - t0;
    return TDL_OK;
}

/* ---- data collectives over the world ----------------------------------------------------- */

tdl_status_t bench_mpi_allreduce_f32(const float *send, float *recv, size_t count)
{
    int n = 0;
    tdl_status_t st = bench_mpi_count(count, "MPI_Allreduce", &n);
    if (st != TDL_OK)
        return st;
    return tdl_boot_check(MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                           "MPI_Allreduce");
}

tdl_status_t bench_mpi_allreduce_f32_time(const float *send, float *recv, size_t count, int reps,
                                          uint64_t *ns_out)
{
    int n = 0;
    tdl_status_t st = bench_mpi_count(count, "MPI_Allreduce", &n);
    if (st != TDL_OK)
        return st;
    uint64_t t0 = tdl_clock_ns();
    for (int r = 0; r < reps && st == TDL_OK; r++)
        st = tdl_boot_check(MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                             "MPI_Allreduce");
    uint64_t t1 = tdl_clock_ns();
    if (st != TDL_OK)
        return st;
    *ns_out = t1 - t0;
    return TDL_OK;
}

tdl_status_t bench_mpi_alltoall(const void *send, void *recv, size_t bytes_per_peer)
{
    int n = 0;
    tdl_status_t st = bench_mpi_count(bytes_per_peer, "MPI_Alltoall", &n);
    if (st != TDL_OK)
        return st;
    return tdl_boot_check(MPI_Alltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD),
                           "MPI_Alltoall");
}

tdl_status_t bench_mpi_alltoall_time(const void *send, void *recv, size_t bytes_per_peer, int reps,
                                     uint64_t *ns_out)
{
    int n = 0;
    tdl_status_t st = bench_mpi_count(bytes_per_peer, "MPI_Alltoall", &n);
    if (st != TDL_OK)
        return st;
    uint64_t t0 = tdl_clock_ns();
    for (int r = 0; r < reps && st == TDL_OK; r++)
        st = tdl_boot_check(MPI_Alltoall(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD),
                             "MPI_Alltoall");
    uint64_t t1 = tdl_clock_ns();
    if (st != TDL_OK)
        return st;
    *ns_out = t1 - t0;
    return TDL_OK;
}
