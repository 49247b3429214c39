/* The VAE on a GPU (the CUDA backend) against the CPU backend: each VAE layer, then a
 * reduced-width VAE's decode and encode within 1e-4 relative. Exits 77 (skip) where no GPU is
 * visible. */
#include "config.h"

#include "cuda/cuda.h"
#include "vae_compare.h"

static tdl_status_t open_device_backend(dit_backend_t **be_out)
{
    return dit_backend_open("cuda", -1, be_out);
}

int main(void)
{
    int count = 0;
    char names[256];
    if (tdl_cuda_devices_describe(&count, names, sizeof(names)) != TDL_OK || count == 0) {
        printf("1..0 # SKIP no GPU visible\n");
        return 77;
    }
    diag("GPUs: %s", names);
    tdl_rng_init(&rng, 13, 0);
    dit_backend_t *be;
    tdl_status_t st = open_device_backend(&be);
    if (ok(st == TDL_OK, "cuda opens%s%s", st ? ": " : "", st ? tdl_error_get() : "")) {
        compare_ops(be, 1e-5);
        dit_backend_close(be);
    }
    compare_vae(1e-4);
    return done_testing();
}
