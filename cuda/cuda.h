/* The CUDA backend, compiled by nvcc into libtidal when configure finds CUDA. */
#ifndef TIDAL_CUDA_H
#define TIDAL_CUDA_H

#include <stddef.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible devices (0 where the driver finds none) and their names, comma-separated
 * with spaces turned into '_': "NVIDIA_H200,NVIDIA_H200". */
tdl_status_t tdl_cuda_devices_describe(int *count_out, char *names, size_t size);
/* CUDA runtime version this library was built against ("13.0"). */
const char *tdl_cuda_runtime_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_CUDA_H */
