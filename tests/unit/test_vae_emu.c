/* The VAE through the CUDA backend's kernels (cuda/dit.cu) compiled as host code under
 * cuda/kernel.h's emulation, against the CPU backend: each VAE layer, then a reduced-width VAE's
 * decode and encode within 1e-4 relative. tests/cuda/vae.gpu runs the same on a GPU. */
#include "config.h"

#include "../cuda/vae_compare.h"

static tdl_status_t open_device_backend(dit_backend_t **be_out)
{
    return dit_backend_open("cuda-emulated", -1, be_out);
}

int main(void)
{
    tdl_rng_init(&rng, 13, 0);
    dit_backend_t *be;
    tdl_status_t st = open_device_backend(&be);
    if (ok(st == TDL_OK, "cuda-emulated opens%s%s", st ? ": " : "", st ? tdl_error_get() : "")) {
        compare_ops(be, 1e-5);
        dit_backend_close(be);
    }
    compare_vae(1e-4);
    return done_testing();
}
