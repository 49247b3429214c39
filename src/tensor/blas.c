/* Every matrix product goes through OpenBLAS: cblas_sgemm, and cblas_sgemv for products of one
 * row. */
#include "config.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

void tensor_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tensor_linear_forward(float *out, const float *in, const float *weight, const float *bias,
                           int n, int in_dim, int out_dim, int group)
{
    if (bias) {
        for (int i = 0; i < n; i++)
            memcpy(out + (size_t)i * out_dim, bias, (size_t)out_dim * sizeof(float));
    }
    if (group <= 0 || group > n)
        group = n;
    if (group == 1) {
        /* OpenBLAS 0.3.21 packs all of W for a product of one row, then reads the copy: a
         * matrix-vector product reads W once (the DiT's adaLN rows: a third of its weights) */
        for (int r = 0; r < n; r++)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, out_dim, in_dim, 1.0f, weight, in_dim,
                        in + (size_t)r * in_dim, 1, bias ? 1.0f : 0.0f, out + (size_t)r * out_dim,
                        1);
        return;
    }
    for (int r = 0; r < n; r += group)
        tensor_gemm(false, true, TDL_MIN(group, n - r), out_dim, in_dim, 1.0f,
                    in + (size_t)r * in_dim, in_dim, weight, in_dim, bias ? 1.0f : 0.0f,
                    out + (size_t)r * out_dim, out_dim);
}

void tensor_linear_backward(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, int n, int in_dim, int out_dim)
{
    if (din)
        tensor_gemm(false, false, n, in_dim, out_dim, 1.0f, dout, out_dim, weight, in_dim, 1.0f,
                    din, in_dim);
    if (dweight)
        tensor_gemm(true, false, out_dim, in_dim, n, 1.0f, dout, out_dim, in, in_dim, 1.0f,
                    dweight, in_dim);
    if (dbias) {
        for (int i = 0; i < n; i++) {
            const float *row = dout + (size_t)i * out_dim;
            for (int o = 0; o < out_dim; o++)
                dbias[o] += row[o];
        }
    }
}

const char *tensor_blas_core(void)
{
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

const char *tensor_blas_advice(char *buf, size_t size)
{
    buf[0] = '\0';
#if defined(__GNUC__) && defined(__x86_64__)
    const char *name = tensor_blas_core(), *env = getenv("OPENBLAS_CORETYPE");
    if (__builtin_cpu_supports("avx512f") &&
        (!strcmp(name, "Haswell") || !strncmp(name, "Zen", 3) || !strcmp(name, "Sandybridge"))) {
        if (env)
            snprintf(buf, size,
                     "OPENBLAS_CORETYPE=%s keeps OpenBLAS off this CPU's AVX-512 kernels: unset it "
                     "(or set SKYLAKEX) for faster products (doc/vae.md)",
                     env);
        else
            snprintf(buf, size,
                     "OpenBLAS runs its %s kernels on this AVX-512 CPU: OPENBLAS_CORETYPE=SKYLAKEX "
                     "gives faster products (doc/vae.md)",
                     name);
    }
#endif
    return buf;
}
