// One rank's GPU: its stream, its cuBLAS handle, device memory and copies (cuda/kernel.h).
// Compiled by nvcc into libtidal; compiled as host C++ with -DTDL_CUDA_EMULATE, the same calls
// run on host memory and OpenBLAS, for the CPU tests of the kernels.
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernel.h"

#ifdef TDL_CUDA_EMULATE
#include <cblas.h>

thread_local tdl_emu_index tdl_emu_at;

struct tdl_gpu {
    int device;
};

extern "C" tdl_status_t tdl_gpu_open(int device, tdl_gpu_t **gpu_out)
{
    tdl_gpu_t *g = (tdl_gpu_t *)calloc(1, sizeof(*g));
    if (!g)
        return tdl_error_raise(TDL_ERR_NOMEM, "GPU context: out of memory");
    g->device = device;
    *gpu_out = g;
    return TDL_OK;
}

extern "C" void tdl_gpu_close(tdl_gpu_t *gpu)
{
    free(gpu);
}

extern "C" tdl_stream_t tdl_gpu_stream(tdl_gpu_t *gpu)
{
    (void)gpu;
    return NULL;
}

extern "C" void *tdl_gpu_alloc(tdl_gpu_t *gpu, size_t bytes)
{
    (void)gpu;
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p)
        tdl_error_raise(TDL_ERR_NOMEM, "emulated device memory: %zu bytes", bytes);
    return p;
}

extern "C" void tdl_gpu_free(tdl_gpu_t *gpu, void *p)
{
    (void)gpu;
    free(p);
}

extern "C" void *tdl_gpu_host_alloc(tdl_gpu_t *gpu, size_t bytes)
{
    return tdl_gpu_alloc(gpu, bytes);
}

extern "C" void tdl_gpu_host_free(tdl_gpu_t *gpu, void *p)
{
    tdl_gpu_free(gpu, p);
}

extern "C" void tdl_gpu_upload(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes)
{
    (void)gpu;
    if (bytes)
        memcpy(dst, src, bytes);
}

extern "C" void tdl_gpu_download(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes)
{
    (void)gpu;
    if (bytes)
        memcpy(dst, src, bytes);
}

extern "C" void tdl_gpu_copy(tdl_gpu_t *gpu, void *dst, const void *src, size_t bytes)
{
    (void)gpu;
    if (bytes)
        memmove(dst, src, bytes);
}

extern "C" void tdl_gpu_zero(tdl_gpu_t *gpu, void *p, size_t bytes)
{
    (void)gpu;
    if (bytes)
        memset(p, 0, bytes);
}

extern "C" tdl_status_t tdl_gpu_finish(tdl_gpu_t *gpu)
{
    (void)gpu;
    return TDL_OK;
}

extern "C" void tdl_gpu_check_launch(tdl_gpu_t *gpu, const char *what)
{
    (void)gpu, (void)what;
}

extern "C" void tdl_gpu_gemm(tdl_gpu_t *gpu, bool trans_a, bool trans_b, int m, int n, int k,
                             float alpha, const float *a, int lda, const float *b, int ldb,
                             float beta, float *c, int ldc)
{
    (void)gpu;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#else /* nvcc */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>

/* cuBLAS is opened when a GPU is, not linked: loading libcublas (and its libcublasLt) costs
 * every process about 150 MiB of resident memory, a CPU-only tidal serve most of its footprint.
 * The six functions tidal calls, by their exported names. */
static struct {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided;
    char error[400];
} cb;
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

#define TDL_STR_(x) #x
#define TDL_STR(x) TDL_STR_(x)

static void cublas_load(void)
{
    const char *names[] = {
#ifdef TIDAL_CUDA_LIBDIR
        TIDAL_CUDA_LIBDIR "/libcublas.so." TDL_STR(CUBLAS_VER_MAJOR),
#endif
        "libcublas.so." TDL_STR(CUBLAS_VER_MAJOR), "libcublas.so"};
    void *h = NULL;
    for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(cb.error, sizeof(cb.error), "cannot load cuBLAS %d (%s): install the CUDA "
                 "toolkit's libcublas, or run with --device cpu", CUBLAS_VER_MAJOR, dlerror());
        return;
    }
    cb.create = (decltype(cb.create))dlsym(h, "cublasCreate_v2");
    cb.destroy = (decltype(cb.destroy))dlsym(h, "cublasDestroy_v2");
    cb.set_stream = (decltype(cb.set_stream))dlsym(h, "cublasSetStream_v2");
    cb.set_math_mode = (decltype(cb.set_math_mode))dlsym(h, "cublasSetMathMode");
    cb.sgemm = (decltype(cb.sgemm))dlsym(h, "cublasSgemm_v2");
    cb.sgemm_strided = (decltype(cb.sgemm_strided))dlsym(h, "cublasSgemmStridedBatched");
    if (!cb.create || !cb.destroy || !cb.set_stream || !cb.set_math_mode || !cb.sgemm ||
        !cb.sgemm_strided) {
        snprintf(cb.error, sizeof(cb.error), "the cuBLAS loaded lacks a function tidal calls "
                 "(%s): a cuBLAS of CUDA %d is needed", dlerror(), CUBLAS_VER_MAJOR);
        cb.create = NULL;
    }
}

struct tdl_gpu {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaError_t first_error; // the first failure since the last finish
    char first_what[96];
    cublasStatus_t blas_error;
};

static void gpu_note(tdl_gpu_t *g, cudaError_t e, const char *what)
{
    if (e != cudaSuccess && g->first_error == cudaSuccess) {
        g->first_error = e;
        snprintf(g->first_what, sizeof(g->first_what), "%s", what);
    }
}

extern "C" tdl_status_t tdl_gpu_open(int device, tdl_gpu_t **gpu_out)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return tdl_error_raise(TDL_ERR_CUDA,
                               "no GPU is visible (%s): run with --device cpu, or on a node with "
                               "a GPU and its driver",
                               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= count)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "GPU %d does not exist: %d visible (CUDA_VISIBLE_DEVICES narrows "
                               "them)",
                               device, count);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return tdl_error_raise(TDL_ERR_CUDA, "cudaSetDevice(%d): %s", device,
                               cudaGetErrorString(e));
    tdl_gpu_t *g = (tdl_gpu_t *)calloc(1, sizeof(*g));
    if (!g)
        return tdl_error_raise(TDL_ERR_NOMEM, "GPU context: out of memory");
    g->device = device;
    if ((e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        free(g);
        return tdl_error_raise(TDL_ERR_CUDA, "cudaStreamCreate on GPU %d: %s", device,
                               cudaGetErrorString(e));
    }
    pthread_once(&cb_once, cublas_load);
    if (!cb.create) {
        cudaStreamDestroy(g->stream);
        free(g);
        return tdl_error_raise(TDL_ERR_CUDA, "GPU %d: %s", device, cb.error);
    }
    cublasStatus_t bs = cb.create(&g->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(g->stream);
        free(g);
        return tdl_error_raise(TDL_ERR_CUDA, "cublasCreate on GPU %d: status %d", device,
                               (int)bs);
    }
    cb.set_stream(g->blas, g->stream);
    cb.set_math_mode(g->blas, CUBLAS_DEFAULT_MATH); // fp32, no TF32: the CPU's results
    *gpu_out = g;
    return TDL_OK;
}

extern "C" void tdl_gpu_close(tdl_gpu_t *g)
{
    if (!g)
        return;
    cudaStreamSynchronize(g->stream);
    cb.destroy(g->blas);
    cudaStreamDestroy(g->stream);
    free(g);
}

extern "C" tdl_stream_t tdl_gpu_stream(tdl_gpu_t *g)
{
    return g->stream;
}

extern "C" void *tdl_gpu_alloc(tdl_gpu_t *g, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        tdl_error_raise(TDL_ERR_NOMEM, "cudaMalloc of %.1f MiB on GPU %d: %s",
                        (double)bytes / (1 << 20), g->device, cudaGetErrorString(e));
        return NULL;
    }
    if ((e = cudaMemsetAsync(p, 0, bytes, g->stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(g->stream)) != cudaSuccess) {
        cudaFree(p);
        tdl_error_raise(TDL_ERR_CUDA, "zeroing new device memory: %s", cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

extern "C" void tdl_gpu_free(tdl_gpu_t *g, void *p)
{
    (void)g;
    if (p)
        cudaFree(p);
}

extern "C" void *tdl_gpu_host_alloc(tdl_gpu_t *g, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        tdl_error_raise(TDL_ERR_NOMEM, "cudaMallocHost of %.1f MiB for GPU %d: %s",
                        (double)bytes / (1 << 20), g->device, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

extern "C" void tdl_gpu_host_free(tdl_gpu_t *g, void *p)
{
    (void)g;
    if (p)
        cudaFreeHost(p);
}

extern "C" void tdl_gpu_upload(tdl_gpu_t *g, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        gpu_note(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g->stream),
                 "copy to the GPU");
}

extern "C" void tdl_gpu_download(tdl_gpu_t *g, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        gpu_note(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g->stream),
                 "copy from the GPU");
}

extern "C" void tdl_gpu_copy(tdl_gpu_t *g, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        gpu_note(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->stream),
                 "copy on the GPU");
}

extern "C" void tdl_gpu_zero(tdl_gpu_t *g, void *p, size_t bytes)
{
    if (bytes)
        gpu_note(g, cudaMemsetAsync(p, 0, bytes, g->stream), "cudaMemset");
}

extern "C" void tdl_gpu_check_launch(tdl_gpu_t *g, const char *what)
{
    gpu_note(g, cudaGetLastError(), what);
}

extern "C" tdl_status_t tdl_gpu_finish(tdl_gpu_t *g)
{
    gpu_note(g, cudaStreamSynchronize(g->stream), "cudaStreamSynchronize");
    cudaError_t e = g->first_error;
    cublasStatus_t bs = g->blas_error;
    g->first_error = cudaSuccess;
    g->blas_error = CUBLAS_STATUS_SUCCESS;
    if (e != cudaSuccess)
        return tdl_error_raise(TDL_ERR_CUDA, "GPU %d: %s: %s", g->device, g->first_what,
                               cudaGetErrorString(e));
    if (bs != CUBLAS_STATUS_SUCCESS)
        return tdl_error_raise(TDL_ERR_CUDA, "GPU %d: a cuBLAS product failed with status %d",
                               g->device, (int)bs);
    return TDL_OK;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first.
extern "C" void tdl_gpu_gemm(tdl_gpu_t *g, bool trans_a, bool trans_b, int m, int n, int k,
                             float alpha, const float *a, int lda, const float *b, int ldb,
                             float beta, float *c, int ldc)
{
    cublasStatus_t s = cb.sgemm(g->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a,
                                lda, &beta, c, ldc);
    if (s != CUBLAS_STATUS_SUCCESS && g->blas_error == CUBLAS_STATUS_SUCCESS)
        g->blas_error = s;
}
#endif

extern "C" void tdl_gpu_gemm_strided(tdl_gpu_t *g, bool trans_a, bool trans_b, int m, int n,
                                     int k, float alpha, const float *a, int lda,
                                     long long stride_a, const float *b, int ldb,
                                     long long stride_b, float beta, float *c, int ldc,
                                     long long stride_c, int count)
{
#ifdef TDL_CUDA_EMULATE
    for (int i = 0; i < count; i++)
        tdl_gpu_gemm(g, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b,
                     ldb, beta, c + i * stride_c, ldc);
#else
    cublasStatus_t s = cb.sgemm_strided(
        g->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
        &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, count);
    if (s != CUBLAS_STATUS_SUCCESS && g->blas_error == CUBLAS_STATUS_SUCCESS)
        g->blas_error = s;
#endif
}
