/* The CUDA backend's kernels (cuda/dit.cu), compiled as host code under cuda/kernel.h's
 * emulation, against the CPU model: the same forward and gradients on any machine. What this
 * cannot see (races, the GPU's memory, cuBLAS itself) tests/cuda/dit.gpu checks on a GPU. */
#include "config.h"

#include "../cuda/dit_compare.h"

static tdl_status_t open_device_backend(dit_backend_t **be_out)
{
    return dit_backend_open("cuda-emulated", -1, be_out);
}

int main(void)
{
    tdl_rng_init(&rng, 11, 0);
    compare("tiny", 3, 16, 8, 16, 1e-4);
    compare("tiny", 1, 8, 8, 16, 1e-4);
    compare("fmnist", 2, 32, 32, 32, 1e-4);
    compare("tiny+sigma", 2, 16, 8, 16, 1e-4); /* learn_sigma: the final layer's 2C channels */
    return done_testing();
}
