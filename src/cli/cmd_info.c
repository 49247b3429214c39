/* `tidal info`: one line per rank saying where it runs and what it can use. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"
#ifdef TIDAL_HAVE_CUDA
#include "cuda/cuda.h"
#endif

static void describe_cuda(char *buf, size_t size)
{
#ifdef TIDAL_HAVE_CUDA
    int count = 0;
    char names[1024];
    if (tdl_cuda_devices_describe(&count, names, sizeof(names)) != TDL_OK)
        snprintf(buf, size, "error(%s)", tdl_error_get());
    else if (count == 0)
        snprintf(buf, size, "0");
    else
        snprintf(buf, size, "%d:%s", count, names);
#else
    snprintf(buf, size, "not-built");
#endif
}

static int info_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal info' takes no arguments, found '%s'", pos[0]);
    tdl_boot_info_t me;
    tdl_status_t st = tdl_boot_init(NULL, NULL, &me);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: cannot start MPI: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    tdl_log_set_rank(me.rank);

    char ucx[512], cuda[1200], line[2400];
    if (gfc_transports_query(ucx, sizeof(ucx)) != TDL_OK)
        snprintf(ucx, sizeof(ucx), "error");
    describe_cuda(cuda, sizeof(cuda));
    int n = snprintf(line, sizeof(line),
                     "rank=%d size=%d host=%s local_rank=%d local_size=%d ucx=%s cuda=%s "
                     "build=%s",
                     me.rank, me.size, me.host, me.local_rank, me.local_size, ucx, cuda,
                     tdl_build_options());
    size_t len = n < 0 ? 0 : TDL_MIN((size_t)n, sizeof(line) - 1);

    /* Rank 0 prints every line in rank order, so the output does not interleave. */
    tdl_blobs_t all;
    st = tdl_boot_allgatherv(line, len, &all);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal[%d]: %s\n", me.rank, tdl_error_get());
        tdl_boot_finalize();
        return CLI_EXIT_FAILURE;
    }
    if (me.rank == 0) {
        for (int r = 0; r < all.count; r++)
            printf("%.*s\n", (int)all.len[r], (const char *)all.data + all.off[r]);
        fflush(stdout);
    }
    tdl_blobs_free(&all);
    tdl_boot_finalize();
    return CLI_EXIT_OK;
}

const cli_command_t cli_cmd_info = {
    .name = "info",
    .summary = "print one line per rank: host, ranks, UCX transports, CUDA devices, build",
    .usage = "[mpirun -np N] tidal info",
    .params = NULL,
    .nparams = 0,
    .run = info_run,
};
