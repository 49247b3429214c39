/* Gradient codecs on the GPU with a context (cuda/kernel.h's tdl_gpu_t): the OCP MX formats of
 * src/codec/mxfp.c (cuda/mxfp.cu), byte for byte the CPU's encodings. C-compatible; the kernels
 * also compile as host C++ under cuda/kernel.h's emulation, where the same calls run on the CPU
 * (tests/unit/test_mxfp_emu.c). */
#ifndef TIDAL_CUDA_CODEC_GPU_H
#define TIDAL_CUDA_CODEC_GPU_H

#include <stddef.h>

#include "codec/codec.h"
#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Under cuda/kernel.h's emulation (TDL_CUDA_EMULATE: the kernels compiled as host C++) the
 * entry points have names of their own, as kernel.h gives the context's, so that the emulation
 * can be linked beside the real backend. C code that calls the emulated kernels, such as their
 * CPU tests, defines TDL_CUDA_EMULATE before including this header. */
#ifdef TDL_CUDA_EMULATE
#define tdl_gpu_open       tdl_emu_gpu_open
#define tdl_gpu_close      tdl_emu_gpu_close
#define tdl_gpu_alloc      tdl_emu_gpu_alloc
#define tdl_gpu_free       tdl_emu_gpu_free
#define tdl_gpu_upload     tdl_emu_gpu_upload
#define tdl_gpu_download   tdl_emu_gpu_download
#define tdl_gpu_finish     tdl_emu_gpu_finish
#define tdl_cuda_mx_encode tdl_emu_mx_encode
#define tdl_cuda_mx_fused  tdl_emu_mx_fused
#define tdl_cuda_mx_decode tdl_emu_mx_decode
#endif

/* The context calls of cuda/kernel.h that C callers need, declared again here because kernel.h
 * also holds device code that only nvcc or the emulation can read. cuda/mxfp.cu includes both
 * headers, so the compiler checks that they agree. */
typedef struct tdl_gpu tdl_gpu_t;
tdl_status_t tdl_gpu_open(int device, tdl_gpu_t **gpu_out);
void tdl_gpu_close(tdl_gpu_t *gpu);
void *tdl_gpu_alloc(tdl_gpu_t *gpu, size_t bytes);
void tdl_gpu_free(tdl_gpu_t *gpu, void *p);
void tdl_gpu_upload(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes);
void tdl_gpu_download(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes);
tdl_status_t tdl_gpu_finish(tdl_gpu_t *gpu);
#if defined(CUDART_VERSION) && !defined(TDL_CUDA_EMULATE)
/* The context's stream, for callers that include cuda_runtime_api.h first (events, copies). */
cudaStream_t tdl_gpu_stream(tdl_gpu_t *gpu);
#endif

/* MX formats on the GPU: `format` is an MX codec name of codec_find ("mxfp8_e4m3", "mxfp8_e5m2",
 * "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1", or the aliases mxfp8/mxfp6/mxfp4); cfg and w as for
 * the CPU codec's operations (cfg NULL: the defaults; w needed for stochastic rounding). Pointers
 * are device memory; encoded buffers are exactly the CPU codec's max_encoded_bytes(cfg, n).
 *
 * The work is enqueued on the context's stream and these return at once: tdl_gpu_finish waits
 * for it and reports a failed launch. Arguments, sizes and the padding bits of a partial last
 * block are checked before anything is enqueued (the padding check, only when n is not a
 * multiple of 32, reads the last block back and so waits for the stream): TDL_ERR_INVALID_ARG
 * for bad arguments or a format without GPU kernels, TDL_ERR_CORRUPT for bad input, and then
 * nothing is written. *out_bytes is set when the work is enqueued. */
tdl_status_t tdl_cuda_mx_encode(tdl_gpu_t *gpu, const char *format, const codec_config_t *cfg,
                                const codec_where_t *w, const float *d_in, size_t n, void *d_out,
                                size_t *out_bytes);
/* d_out = encode(d_local + decode(d_in)), the CPU's decode_accumulate_encode. */
tdl_status_t tdl_cuda_mx_fused(tdl_gpu_t *gpu, const char *format, const codec_config_t *cfg,
                               const codec_where_t *w, const void *d_in, size_t in_bytes,
                               const float *d_local, size_t n, void *d_out, size_t *out_bytes);
/* add: d_out += decoded (the CPU's decode_accumulate), else d_out = decoded. The floats are the
 * CPU's bit for bit, but a NaN may carry another payload (a GPU's is 0x7fffffff). */
tdl_status_t tdl_cuda_mx_decode(tdl_gpu_t *gpu, const char *format, const void *d_in,
                                size_t in_bytes, float *d_out, size_t n, int add);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_CUDA_CODEC_GPU_H */
