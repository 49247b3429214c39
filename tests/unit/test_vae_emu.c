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
    return compare_all("cuda-emulated");
}
