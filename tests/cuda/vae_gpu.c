/* The VAE on a GPU (the CUDA backend) against the CPU backend: each VAE layer, then a
 * reduced-width VAE's decode and encode within 1e-4 relative. Exits 77 (skip) where no GPU is
 * visible. */
#include "config.h"

#include "cuda/cuda.h"
#include "gpu_require.h"
#include "vae_compare.h"

static tdl_status_t open_device_backend(dit_backend_t **be_out)
{
    return dit_backend_open("cuda", -1, be_out);
}

int main(void)
{
    gpu_require();
    return compare_all("cuda");
}
