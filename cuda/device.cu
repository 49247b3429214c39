// Device discovery for the CUDA backend.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda.h"

extern "C" tdl_status_t tdl_cuda_devices_describe(int *count_out, char *names, size_t size)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (size)
        names[0] = '\0';
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
        // A machine without a GPU or driver is normal: zero devices, not an error.
        cudaGetLastError();
        *count_out = 0;
        return TDL_OK;
    }
    if (err != cudaSuccess)
        return tdl_error_raise(TDL_ERR_CUDA, "cudaGetDeviceCount: %s", cudaGetErrorString(err));
    size_t used = 0;
    for (int d = 0; d < count && used < size; d++) {
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess)
            snprintf(prop.name, sizeof(prop.name), "device%d", d);
        for (char *c = prop.name; *c; c++)
            if (*c == ' ')
                *c = '_';
        int n = snprintf(names + used, size - used, "%s%s", d ? "," : "", prop.name);
        used += n > 0 ? (size_t)n : 0;
    }
    *count_out = count;
    return TDL_OK;
}

extern "C" const char *tdl_cuda_runtime_version(void)
{
    static char version[32];
    snprintf(version, sizeof(version), "%d.%d", CUDART_VERSION / 1000,
             (CUDART_VERSION % 1000) / 10);
    return version;
}
