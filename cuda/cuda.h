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

/* dynamiq on the GPU (cuda/dynamiq.cu): the bytes of src/codec/dynamiq.c for the same values and
 * parameters (codec_dynamiq_params). Pointers are device memory; d_out has room for the codec's
 * max_encoded_bytes. Finished when they return. Corrupt input: TDL_ERR_CORRUPT. */
struct codec_dq_params;
tdl_status_t tdl_cuda_dynamiq_encode(const struct codec_dq_params *p, const float *d_in, size_t n,
                                     void *d_out, size_t *out_bytes);
tdl_status_t tdl_cuda_dynamiq_fused(const struct codec_dq_params *p, const void *d_in,
                                    size_t in_bytes, const float *d_local, size_t n, void *d_out,
                                    size_t *out_bytes);
/* add: d_out += decoded, else d_out = decoded. */
tdl_status_t tdl_cuda_dynamiq_decode(const void *d_in, size_t in_bytes, float *d_out, size_t n,
                                     int add);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_CUDA_H */
