/* The MX formats' CUDA kernels (cuda/mxfp.cu) on a GPU against the CPU codec, byte for byte:
 * tests/cuda/mxfp_compare.h says what is compared. Exits 77 (skip) where no GPU is visible. */
#include "config.h"

#include "cuda/cuda.h"
#include "gpu_require.h"
#include "mxfp_compare.h"

/* Partial last blocks, up to a million values (32769 blocks: 129 blocks of threads). */
static const size_t gpu_sizes[] = {1, 5, 33, 1000, 40009, ((size_t)1 << 20) + 17};

int main(void)
{
    gpu_require();
    if (tdl_gpu_open(0, &gpu) != TDL_OK) {
        printf("Bail out! GPU 0: %s\n", tdl_error_get());
        return 1;
    }
    sizes = gpu_sizes, sizes_count = TDL_ARRAY_SIZE(gpu_sizes);
    test_values();
    test_any_bytes();
    test_refused();
    tdl_gpu_close(gpu);
    return done_testing();
}
