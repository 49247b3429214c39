/* The CUDA backend on a GPU against the CPU model: forward within 1e-4 relative, every
 * parameter's gradient too. Exits 77 (skip) where no GPU is visible. */
#include "config.h"

#include "cuda/cuda.h"
#include "gpu_require.h"
#include "dit_compare.h"

static tdl_status_t open_device_backend(dit_backend_t **be_out)
{
    return dit_backend_open("cuda", -1, be_out);
}

int main(void)
{
    gpu_require();
    tdl_rng_init(&rng, 11, 0);
    compare("tiny", 3, 16, 8, 16, 1e-4);
    compare("fmnist", 8, 32, 32, 32, 1e-4);
    compare("DiT-S/4", 4, 32, 32, 32, 1e-4); /* learn_sigma, as the reference's */
    compare("fmnist+sigma", 2, 32, 32, 32, 1e-4);
    return done_testing();
}
