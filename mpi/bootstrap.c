/* MPI start-up for tidal. */
#include "config.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi/bootstrap.h"

static bool boot_started_mpi;

tdl_status_t tdl_boot_check(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return TDL_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof(msg), "error %d", rc);
    return tdl_error_raise(TDL_ERR_MPI, "%s failed: %s", what, msg);
}

tdl_status_t tdl_boot_init(int *argc, char ***argv, tdl_boot_info_t *info_out)
{
    int initialized = 0, provided = MPI_THREAD_SINGLE;
    tdl_status_t st;
    MPI_Initialized(&initialized);
    if (!initialized) {
        st = tdl_boot_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided),
                        "MPI_Init_thread");
        if (st != TDL_OK)
            return st;
        boot_started_mpi = true;
        /* Errors come back as codes so that tidal can name what failed. */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    } else {
        MPI_Query_thread(&provided);
    }

    tdl_boot_info_t info = {0};
    info.thread_level = provided;
    MPI_Comm_rank(MPI_COMM_WORLD, &info.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &info.size);
    MPI_Comm local;
    st = tdl_boot_check(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    if (st != TDL_OK)
        return st;
    MPI_Comm_rank(local, &info.local_rank);
    MPI_Comm_size(local, &info.local_size);
    MPI_Comm_free(&local);
    if (gethostname(info.host, sizeof(info.host) - 1) != 0)
        snprintf(info.host, sizeof(info.host), "unknown");
    *info_out = info;
    return TDL_OK;
}

bool tdl_boot_initialized(void)
{
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

tdl_status_t tdl_boot_finalize(void)
{
    if (!boot_started_mpi)
        return TDL_OK;
    boot_started_mpi = false;
    return tdl_boot_check(MPI_Finalize(), "MPI_Finalize");
}

tdl_status_t tdl_boot_allgatherv(const void *mine, size_t len, tdl_blobs_t *blobs_out)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (len > INT_MAX)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "bootstrap blob of %zu bytes is too large",
                               len);
    tdl_status_t st = TDL_OK;
    int *counts = calloc((size_t)size, sizeof(int));
    int *displs = calloc((size_t)size, sizeof(int));
    tdl_blobs_t b = {.count = size};
    b.len = calloc((size_t)size, sizeof(size_t));
    b.off = calloc((size_t)size, sizeof(size_t));
    if (!counts || !displs || !b.len || !b.off) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "bootstrap all-gather: out of memory");
        goto err;
    }
    int mylen = (int)len;
    st = tdl_boot_check(MPI_Allgather(&mylen, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD),
                    "MPI_Allgather of blob lengths");
    if (st != TDL_OK)
        goto err;
    size_t total = 0;
    for (int r = 0; r < size; r++) {
        if (total + (size_t)counts[r] > INT_MAX) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG, "bootstrap all-gather exceeds 2 GiB");
            goto err;
        }
        displs[r] = (int)total;
        b.off[r] = total;
        b.len[r] = (size_t)counts[r];
        total += (size_t)counts[r];
    }
    b.data = malloc(total ? total : 1);
    if (!b.data) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "bootstrap all-gather: cannot hold %zu bytes", total);
        goto err;
    }
    st = tdl_boot_check(
        MPI_Allgatherv(mine, mylen, MPI_BYTE, b.data, counts, displs, MPI_BYTE, MPI_COMM_WORLD),
        "MPI_Allgatherv of blobs");
    if (st != TDL_OK)
        goto err;
    free(counts);
    free(displs);
    *blobs_out = b;
    return TDL_OK;
err:
    tdl_blobs_free(&b);
    free(displs);
    free(counts);
    return st;
}

tdl_status_t tdl_boot_barrier(void)
{
    return tdl_boot_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

tdl_status_t tdl_boot_allreduce_sum_i64(int64_t *value)
{
    int64_t in = *value, out = 0;
    tdl_status_t st = tdl_boot_check(MPI_Allreduce(&in, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
                                 "MPI_Allreduce");
    if (st == TDL_OK)
        *value = out;
    return st;
}

void tdl_boot_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

const char *tdl_boot_library_version(void)
{
    static char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (!version[0]) {
        MPI_Get_library_version(version, &len);
        char *nl = strchr(version, '\n');
        if (nl)
            *nl = '\0';
        char *comma = strchr(version, ',');
        if (comma)
            *comma = '\0';
    }
    return version;
}
