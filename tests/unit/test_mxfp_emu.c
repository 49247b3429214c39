/* The MX formats' GPU kernels (cuda/mxfp.cu) run on the CPU under cuda/kernel.h's emulation
 * (tests/cuda/emu_mxfp.cc, with libtidal's emulated GPU context) against the CPU codec, byte for
 * byte: tests/cuda/mxfp_compare.h says what is compared. The emulation launches a grid of 3
 * blocks, so its threads also take the grid-stride loops' later turns. */
#include "config.h"

#define TDL_CUDA_EMULATE 1 /* the emulation's entry points (cuda/codec_gpu.h) */
#include "../cuda/mxfp_compare.h"

/* Not multiples of 32, but for 64 and 9600; 40009 values are 1251 blocks, more than the
 * emulated grid's 768 threads. */
static const size_t emu_sizes[] = {1, 5, 31, 33, 64, 100, 257, 1000, 4133, 9600, 40009};

int main(void)
{
    if (tdl_gpu_open(0, &gpu) != TDL_OK) {
        printf("Bail out! the emulated GPU context: %s\n", tdl_error_get());
        return 1;
    }
    sizes = emu_sizes, sizes_count = TDL_ARRAY_SIZE(emu_sizes);
    test_values();
    test_any_bytes();
    test_refused();
    tdl_gpu_close(gpu);
    return done_testing();
}
