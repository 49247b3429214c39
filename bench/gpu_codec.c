/* gpu-codec: encode, decode and the fused decode-accumulate-encode pass of dynamiq
 * (cuda/dynamiq.cu) and of the MX formats (cuda/mxfp.cu) on one GPU, against cudaMemcpyAsync
 * device to device of the same bytes. GB/s are f32 input bytes per second for the codecs, bytes
 * copied per second for the copy; times are CUDA events around back-to-back operations, the
 * median of several samples. Each result is also compared with the CPU codec's (same_as_cpu).
 * Writes CSV rows: format,op,bytes,seconds,gbps,over_d2d,bits_per_coord,same_as_cpu.
 * Exits 77, having measured nothing, where no GPU is visible. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "core/core.h"
#include "cuda/codec_gpu.h"
#include "cuda/cuda.h"

static const char *const formats[] = {"dynamiq",    "mxfp8_e4m3", "mxfp8_e5m2",
                                      "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1"};
enum { OP_ENCODE, OP_DECODE, OP_FUSED, OP_COUNT };
static const char *const op_names[] = {"encode", "decode", "fused"};

static void die_cuda(cudaError_t e, const char *what)
{
    fprintf(stderr, "gpu_codec: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}

static void die_status(tdl_status_t st, const char *what)
{
    fprintf(stderr, "gpu_codec: %s: %s (status %d)\n", what, tdl_error_get(), (int)st);
    exit(1);
}

/* What one timed operation needs. */
typedef struct bench {
    tdl_gpu_t *gpu;
    cudaStream_t stream; /* the context's; dynamiq runs on the legacy default stream */
    size_t n;
    const float *d_x, *d_local;
    float *d_dec, *d_copy;
    unsigned char *d_enc, *d_out;
    size_t enc_bytes, out_bytes;
    const char *format;
    const codec_config_t *cfg;
    codec_where_t w0, w1;
    codec_dq_params_t p0, p1;
} bench_t;

/* One operation: op < 0 the copy. */
static void run_op(bench_t *b, int op)
{
    bool dq = b->format && strcmp(b->format, "dynamiq") == 0;
    tdl_status_t st = TDL_OK;
    if (op < 0) {
        cudaError_t e =
            cudaMemcpyAsync(b->d_copy, b->d_x, b->n * 4, cudaMemcpyDeviceToDevice, b->stream);
        if (e != cudaSuccess)
            die_cuda(e, "cudaMemcpyAsync");
        return;
    }
    if (op == OP_ENCODE)
        st = dq ? tdl_cuda_dynamiq_encode(&b->p0, b->d_x, b->n, b->d_enc, &b->enc_bytes)
                : tdl_cuda_mx_encode(b->gpu, b->format, b->cfg, &b->w0, b->d_x, b->n, b->d_enc,
                                     &b->enc_bytes);
    else if (op == OP_DECODE)
        st = dq ? tdl_cuda_dynamiq_decode(b->d_enc, b->enc_bytes, b->d_dec, b->n, 0)
                : tdl_cuda_mx_decode(b->gpu, b->format, b->d_enc, b->enc_bytes, b->d_dec, b->n, 0);
    else
        st = dq ? tdl_cuda_dynamiq_fused(&b->p1, b->d_enc, b->enc_bytes, b->d_local, b->n, b->d_out,
                                         &b->out_bytes)
                : tdl_cuda_mx_fused(b->gpu, b->format, b->cfg, &b->w1, b->d_enc, b->enc_bytes,
                                    b->d_local, b->n, b->d_out, &b->out_bytes);
    if (st != TDL_OK)
        die_status(st, op_names[op]);
}

/* Seconds per operation: the median over `iters` samples of `reps` operations between two
 * events, after one untimed operation. */
static double time_op(bench_t *b, int op, int iters, int reps)
{
    bool dq = op >= 0 && strcmp(b->format, "dynamiq") == 0;
    cudaStream_t s = dq ? 0 : b->stream;
    cudaEvent_t start, stop;
    double t[32];
    cudaError_t e = cudaEventCreate(&start);
    if (e == cudaSuccess)
        e = cudaEventCreate(&stop);
    if (e != cudaSuccess)
        die_cuda(e, "cudaEventCreate");
    run_op(b, op);
    for (int i = 0; i < iters; i++) {
        cudaEventRecord(start, s);
        for (int r = 0; r < reps; r++)
            run_op(b, op);
        cudaEventRecord(stop, s);
        if ((e = cudaEventSynchronize(stop)) != cudaSuccess)
            die_cuda(e, "timing");
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        t[i] = ms * 1e-3 / reps;
    }
    tdl_status_t st = tdl_gpu_finish(b->gpu);
    if (st != TDL_OK)
        die_status(st, "the GPU's stream");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return tdl_median(t, iters);
}

/* 1 when the GPU's last result of op is the CPU codec's: the same bytes, or the same floats (NaN
 * payloads aside). The CPU's encoding of x is kept in cpu_enc for the other two. */
static int same_as_cpu(bench_t *b, const codec_ops_t *ops, const float *x, const float *local,
                       int op, unsigned char *cpu_enc, size_t *cpu_len)
{
    size_t cap = ops->max_encoded_bytes(b->cfg, b->n), len = 0;
    size_t bytes = op == OP_DECODE ? b->n * 4 : cap;
    unsigned char *cpu = malloc(bytes), *gpu = malloc(bytes);
    const void *dev = op == OP_ENCODE   ? (const void *)b->d_enc
                      : op == OP_DECODE ? (const void *)b->d_dec
                                        : (const void *)b->d_out;
    int same = cpu && gpu;
    if (same && op == OP_ENCODE) {
        same = ops->encode(b->cfg, &b->w0, x, b->n, cpu_enc, cpu_len) == TDL_OK;
        memcpy(cpu, cpu_enc, *cpu_len);
        len = *cpu_len;
        same = same && len == b->enc_bytes;
    } else if (same && op == OP_DECODE) {
        same = ops->decode(b->cfg, cpu_enc, *cpu_len, (float *)cpu, b->n) == TDL_OK;
        len = b->n * 4;
    } else if (same) {
        same = ops->decode_accumulate_encode(b->cfg, &b->w1, cpu_enc, *cpu_len, local, b->n, cpu,
                                             &len) == TDL_OK &&
               len == b->out_bytes;
    }
    if (same) {
        tdl_gpu_download(b->gpu, gpu, dev, len);
        same = tdl_gpu_finish(b->gpu) == TDL_OK;
    }
    if (same && op == OP_DECODE) {
        const float *dc = (const float *)cpu, *dg = (const float *)gpu;
        for (size_t i = 0; same && i < b->n; i++)
            same = memcmp(&dc[i], &dg[i], 4) == 0 || (isnan(dc[i]) && isnan(dg[i]));
    } else if (same) {
        same = memcmp(cpu, gpu, len) == 0;
    }
    free(cpu), free(gpu);
    return same;
}

static void *dev_alloc(tdl_gpu_t *gpu, size_t bytes)
{
    void *p = tdl_gpu_alloc(gpu, bytes);
    if (!p)
        die_status(TDL_ERR_NOMEM, "device memory");
    return p;
}

int main(int argc, char **argv)
{
    const char *csv_path = NULL;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else {
            fprintf(stderr, "gpu_codec: unknown argument '%s' (--csv FILE, --quick)\n", argv[i]);
            return 2;
        }
    }
    int count = 0;
    char names[256] = "";
    if (tdl_cuda_devices_describe(&count, names, sizeof(names)) != TDL_OK || count == 0) {
        printf("gpu_codec: no GPU is visible (CUDA runtime %s): nothing measured\n",
               tdl_cuda_runtime_version());
        return 77;
    }
    bench_t b = {0};
    tdl_status_t st = tdl_gpu_open(0, &b.gpu);
    if (st != TDL_OK)
        die_status(st, "GPU 0");
    b.stream = tdl_gpu_stream(b.gpu);
    b.n = quick ? (size_t)4 << 20 : (size_t)16 << 20; /* floats: 16 or 64 MiB */
    int iters = quick ? 5 : 9, reps = quick ? 5 : 20;
    printf("gpu_codec: device 0 of %s, %zu MiB of f32\n", names, b.n * 4 >> 20);

    float *x = malloc(b.n * 4), *local = malloc(b.n * 4);
    size_t cap = 0;
    for (size_t f = 0; f < TDL_ARRAY_SIZE(formats); f++) {
        size_t c = codec_find(formats[f])->max_encoded_bytes(NULL, b.n);
        cap = c > cap ? c : cap;
    }
    unsigned char *cpu_enc = malloc(cap);
    if (!x || !local || !cpu_enc)
        die_status(TDL_ERR_NOMEM, "host memory");
    tdl_rng_t rng;
    tdl_rng_init(&rng, 1, 1);
    tdl_rng_fill_normal(&rng, x, b.n);
    tdl_rng_fill_normal(&rng, local, b.n);
    float *d_x = dev_alloc(b.gpu, b.n * 4), *d_local = dev_alloc(b.gpu, b.n * 4);
    b.d_dec = dev_alloc(b.gpu, b.n * 4), b.d_copy = dev_alloc(b.gpu, b.n * 4);
    b.d_enc = dev_alloc(b.gpu, cap), b.d_out = dev_alloc(b.gpu, cap);
    tdl_gpu_upload(b.gpu, d_x, x, b.n * 4);
    tdl_gpu_upload(b.gpu, d_local, local, b.n * 4);
    if ((st = tdl_gpu_finish(b.gpu)) != TDL_OK)
        die_status(st, "upload");
    b.d_x = d_x, b.d_local = d_local;

    FILE *csv = csv_path ? fopen(csv_path, "w") : stdout;
    if (!csv) {
        fprintf(stderr, "gpu_codec: cannot write %s\n", csv_path);
        return 1;
    }
    fprintf(csv, "format,op,bytes,seconds,gbps,over_d2d,bits_per_coord,same_as_cpu\n");
    double d2d = time_op(&b, -1, iters, reps);
    fprintf(csv, "d2d,copy,%zu,%.9f,%.3f,1.000,32,1\n", b.n * 4, d2d, b.n * 4 / d2d / 1e9);
    printf("d2d copy    %8.1f GB/s copied (cudaMemcpyAsync device to device)\n",
           b.n * 4 / d2d / 1e9);
    b.w0 = (codec_where_t){.seed = 1, .rank = 0, .hop = 0, .contributions = 1, .stream = 7};
    b.w1 = (codec_where_t){.seed = 1, .rank = 1, .hop = 1, .contributions = 2, .stream = 7};
    for (size_t f = 0; f < TDL_ARRAY_SIZE(formats); f++) {
        codec_t *c;
        if ((st = codec_create(formats[f], NULL, &c)) != TDL_OK)
            die_status(st, formats[f]);
        b.format = formats[f];
        b.cfg = c->cfg;
        codec_dynamiq_params(c->cfg, &b.w0, &b.p0);
        codec_dynamiq_params(c->cfg, &b.w1, &b.p1);
        size_t cpu_len = 0;
        /* dynamiq's calls allocate and wait on every call: fewer of them per sample */
        int r = strcmp(formats[f], "dynamiq") == 0 ? (reps + 3) / 4 : reps;
        for (int op = 0; op < OP_COUNT; op++) {
            double s = time_op(&b, op, iters, r);
            int same = same_as_cpu(&b, c->ops, x, local, op, cpu_enc, &cpu_len);
            fprintf(csv, "%s,%s,%zu,%.9f,%.3f,%.3f,%.3f,%d\n", formats[f], op_names[op], b.n * 4, s,
                    b.n * 4 / s / 1e9, d2d / s, c->ops->bits_per_coord(c->cfg, b.n), same);
            printf("%-11s %-6s %8.1f GB/s of f32 input  %.3f x d2d  %s\n", formats[f], op_names[op],
                   b.n * 4 / s / 1e9, d2d / s, same ? "same as the CPU" : "DIFFERS FROM THE CPU");
        }
        codec_destroy(c);
    }
    if (csv != stdout)
        fclose(csv);
    tdl_gpu_free(b.gpu, d_x), tdl_gpu_free(b.gpu, d_local), tdl_gpu_free(b.gpu, b.d_dec);
    tdl_gpu_free(b.gpu, b.d_copy), tdl_gpu_free(b.gpu, b.d_enc), tdl_gpu_free(b.gpu, b.d_out);
    tdl_gpu_close(b.gpu);
    free(x), free(local), free(cpu_enc);
    return 0;
}
