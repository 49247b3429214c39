/* Writing CUDA kernels that can also be checked on a machine without a GPU.
 *
 * A .cu file that includes this header and follows its rules compiles two ways:
 *  - by nvcc into libtidal (the GPU backend), kernels launched with TDL_LAUNCH;
 *  - by the host C++ compiler with -DTDL_CUDA_EMULATE, into a CPU test program: every launch
 *    then runs the kernel body once per (block, thread), one after another, so the kernels'
 *    indexing and arithmetic are tested against the CPU code where no GPU exists.
 *
 * The rules, for the emulation to mean anything:
 *  - kernels are `TDL_KERNEL void name(args)`, launched only by
 *    TDL_LAUNCH(name, grid, block, stream, args...), with 1-D grids and blocks;
 *  - a kernel's threads do not talk to each other: no __shared__, no __syncthreads, no warp
 *    intrinsics, no atomics (each thread writes its own outputs; reductions are per thread);
 *  - device code indexes with tdl_tid() (global thread index) and tdl_nthreads() (grid size),
 *    in grid-stride loops;
 *  - device memory and copies go through tdl_gpu_* below, matrix products through
 *    tdl_gpu_gemm (cuBLAS on the GPU, OpenBLAS under emulation).
 * Kernels that need cooperation (cuda/dynamiq.cu's warp ballots) cannot be emulated and are
 * compared with the CPU on a GPU only. */
#ifndef TIDAL_CUDA_KERNEL_H
#define TIDAL_CUDA_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef TDL_CUDA_EMULATE
/* ---- emulation: host C++ --------------------------------------------------------------- */
#include <stdlib.h>
#include <string.h>

/* The emulation lives in libtidal beside the real backend (--device cuda-emulated): its entry
 * points get names of their own. */
#define tdl_gpu_open tdl_emu_gpu_open
#define tdl_gpu_close tdl_emu_gpu_close
#define tdl_gpu_stream tdl_emu_gpu_stream
#define tdl_gpu_alloc tdl_emu_gpu_alloc
#define tdl_gpu_free tdl_emu_gpu_free
#define tdl_gpu_host_alloc tdl_emu_gpu_host_alloc
#define tdl_gpu_host_free tdl_emu_gpu_host_free
#define tdl_gpu_upload tdl_emu_gpu_upload
#define tdl_gpu_download tdl_emu_gpu_download
#define tdl_gpu_copy tdl_emu_gpu_copy
#define tdl_gpu_zero tdl_emu_gpu_zero
#define tdl_gpu_finish tdl_emu_gpu_finish
#define tdl_gpu_check_launch tdl_emu_gpu_check_launch
#define tdl_gpu_gemm tdl_emu_gpu_gemm
#define tdl_gpu_gemm_strided tdl_emu_gpu_gemm_strided

typedef void *tdl_stream_t;
#define TDL_KERNEL static
#define TDL_DEVICE static inline
#define TDL_HD static inline

struct tdl_emu_index {
    unsigned block, thread, block_dim, grid_dim;
};
extern thread_local tdl_emu_index tdl_emu_at;

TDL_HD size_t tdl_tid(void)
{
    return (size_t)tdl_emu_at.block * tdl_emu_at.block_dim + tdl_emu_at.thread;
}
TDL_HD size_t tdl_nthreads(void)
{
    return (size_t)tdl_emu_at.grid_dim * tdl_emu_at.block_dim;
}

#define TDL_LAUNCH(kernel, grid, block, stream, ...)                                         \
    do {                                                                                     \
        (void)(stream);                                                                      \
        unsigned tdl_g_ = (unsigned)(grid), tdl_b_ = (unsigned)(block);                      \
        for (unsigned tdl_i_ = 0; tdl_i_ < tdl_g_; tdl_i_++)                                 \
            for (unsigned tdl_j_ = 0; tdl_j_ < tdl_b_; tdl_j_++) {                           \
                tdl_emu_at = tdl_emu_index{tdl_i_, tdl_j_, tdl_b_, tdl_g_};                  \
                kernel(__VA_ARGS__);                                                         \
            }                                                                                \
    } while (0)

/* The math functions device code may use, as the host's. */
#include <math.h>
#define tdl_expf expf
#define tdl_sqrtf sqrtf
#define tdl_rsqrtf(x) (1.0f / sqrtf(x))

#else
/* ---- nvcc ------------------------------------------------------------------------------- */
#include <cuda_runtime_api.h>

typedef cudaStream_t tdl_stream_t;
#define TDL_KERNEL __global__
#define TDL_DEVICE static __device__ __forceinline__
#define TDL_HD static __host__ __device__ __forceinline__

TDL_DEVICE size_t tdl_tid(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
TDL_DEVICE size_t tdl_nthreads(void)
{
    return (size_t)gridDim.x * blockDim.x;
}

#define TDL_LAUNCH(kernel, grid, block, stream, ...)                                         \
    kernel<<<(unsigned)(grid), (unsigned)(block), 0, (stream)>>>(__VA_ARGS__)

#define tdl_expf expf
#define tdl_sqrtf sqrtf
#define tdl_rsqrtf(x) (1.0f / sqrtf(x))
#endif

/* Threads per block, and the number of blocks for n items one per thread (at most `cap`
 * blocks; grid-stride loops cover the rest). */
#define TDL_BLOCK 256
static inline unsigned tdl_blocks_for(size_t n, unsigned cap)
{
    size_t b = (n + TDL_BLOCK - 1) / TDL_BLOCK;
    return (unsigned)(b < 1 ? 1 : (b > cap ? cap : b));
}

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device memory and copies (cuda/gpu.cu, or its emulation) --------------------------------
 * A context holds the stream and the cuBLAS handle of one rank's GPU. Copies are ordered on the
 * stream; tdl_gpu_finish waits for it and returns the first error since the last finish. */
typedef struct tdl_gpu tdl_gpu_t;

tdl_status_t tdl_gpu_open(int device, tdl_gpu_t **gpu_out);
void tdl_gpu_close(tdl_gpu_t *gpu);
tdl_stream_t tdl_gpu_stream(tdl_gpu_t *gpu);
/* n bytes of device memory (cudaMalloc, never managed), zeroed; NULL with the error raised. */
void *tdl_gpu_alloc(tdl_gpu_t *gpu, size_t bytes);
void tdl_gpu_free(tdl_gpu_t *gpu, void *p);
/* Page-locked host memory for staging (cudaMallocHost); plain memory under emulation. */
void *tdl_gpu_host_alloc(tdl_gpu_t *gpu, size_t bytes);
void tdl_gpu_host_free(tdl_gpu_t *gpu, void *p);
void tdl_gpu_upload(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes);
void tdl_gpu_download(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes);
void tdl_gpu_copy(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes);
void tdl_gpu_zero(tdl_gpu_t *gpu, void *p, size_t bytes);
tdl_status_t tdl_gpu_finish(tdl_gpu_t *gpu);
/* Records the launch error of the kernel just launched (cudaGetLastError) for finish. */
void tdl_gpu_check_launch(tdl_gpu_t *gpu, const char *what);

/* C[M,N] = alpha op(A) op(B) + beta C, row-major with leading dimensions, as tensor_gemm; fp32
 * throughout (cuBLAS's default math mode, no TF32). */
void tdl_gpu_gemm(tdl_gpu_t *gpu, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* `count` products, the i-th on a + i*stride_a, b + i*stride_b, c + i*stride_c. */
void tdl_gpu_gemm_strided(tdl_gpu_t *gpu, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const float *a, int lda, long long stride_a,
                          const float *b, int ldb, long long stride_b, float beta, float *c,
                          int ldc, long long stride_c, int count);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_CUDA_KERNEL_H */
