/* Choosing a backend by name: the CPU, or a GPU through cuda/dit.cu where it was built. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit_internal.h"

/* This process's rank among those of its node, from the launcher (-1: not launched by one). */
static int node_local_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                       "MPI_LOCALRANKID", "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0)
            return (int)r;
    }
    return -1;
}

tdl_status_t dit_backend_open(const char *device, int gpu, dit_backend_t **be_out)
{
    *be_out = NULL;
    if (!device || strcmp(device, "cpu") == 0) {
        *be_out = (dit_backend_t *)dit_backend_cpu();
        return TDL_OK;
    }
    if (strcmp(device, "cuda-emulated") == 0)
        return dit_backend_cuda_emu_open(gpu < 0 ? 0 : gpu, -1, be_out);
    if (strcmp(device, "cuda") != 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "--device '%s': the devices are cpu, cuda and cuda-emulated",
                               device);
#ifdef TIDAL_HAVE_CUDA
    return dit_backend_cuda_open(gpu, node_local_rank(), be_out);
#else
    (void)gpu, (void)node_local_rank;
    return tdl_error_raise(TDL_ERR_UNSUPPORTED,
                           "--device cuda: this tidal was built without CUDA (configure found no "
                           "nvcc); use --device cpu, or rebuild where the CUDA toolkit is "
                           "installed");
#endif
}

void dit_backend_close(dit_backend_t *be)
{
    if (be && be->close)
        be->close(be);
}

const char *dit_backend_name(const dit_backend_t *be)
{
    return be ? be->name : "cpu";
}

int dit_backend_gpu(const dit_backend_t *be)
{
    return be ? be->gpu : -1;
}
