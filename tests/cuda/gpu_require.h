/* The start of every test on a real GPU: "1..0 # SKIP" and exit 77 where no GPU is visible,
 * else a line naming the GPUs. */
#ifndef TIDAL_TESTS_CUDA_GPU_REQUIRE_H
#define TIDAL_TESTS_CUDA_GPU_REQUIRE_H

#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda.h"
#include "tap.h"

static void gpu_require(void)
{
    int count = 0;
    char names[256];
    if (tdl_cuda_devices_describe(&count, names, sizeof(names)) != TDL_OK || count == 0) {
        printf("1..0 # SKIP no GPU visible\n");
        exit(77);
    }
    diag("GPUs: %s", names);
}

#endif
