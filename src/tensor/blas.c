/* Every matrix product goes through OpenBLAS: cblas_sgemm, and cblas_sgemv for products of one
 * row. */
#include "config.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
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

/* tensor_rows_invariant (tensor.h): each (n, in, out, group) is tried once, on random values, and
 * the answer kept. OpenBLAS 0.3.21's AVX-512 kernels (SkylakeX, Cooperlake) tile the rows of
 * these products so that each group of 256 starts a tile; its Haswell kernels tile them in 12s,
 * so that the second group of 256 does not, and its rows come out differently (measured). */
#define ROWS_SEEN 128
#define ROWS_MAX 1024 /* rows of one product of several groups: the trial's memory stays small */
static struct rows_seen {
    int n, in_dim, out_dim, group;
    bool same;
} rows_seen[ROWS_SEEN];
static int rows_nseen;
static pthread_mutex_t rows_lock = PTHREAD_MUTEX_INITIALIZER;

static bool rows_try(int n, int in_dim, int out_dim, int group)
{
    size_t nx = (size_t)n * in_dim, nw = (size_t)out_dim * in_dim, ny = (size_t)n * out_dim;
    float *x = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float));
    float *one = malloc(ny * sizeof(float)), *each = malloc(ny * sizeof(float));
    bool same = false;
    if (x && w && one && each) {
        uint32_t r = 0x9e3779b9u;
        for (size_t i = 0; i < nx + nw; i++) {
            r = r * 1664525u + 1013904223u;
            float v = (float)(r >> 8) * (2.0f / 16777216.0f) - 1.0f;
            if (i < nx)
                x[i] = v;
            else
                w[i - nx] = v;
        }
        tensor_gemm(false, true, n, out_dim, in_dim, 1.0f, x, in_dim, w, in_dim, 0.0f, one,
                    out_dim);
        for (int g = 0; g < n; g += group)
            tensor_gemm(false, true, TDL_MIN(group, n - g), out_dim, in_dim, 1.0f,
                        x + (size_t)g * in_dim, in_dim, w, in_dim, 0.0f,
                        each + (size_t)g * out_dim, out_dim);
        same = memcmp(one, each, ny * sizeof(float)) == 0;
    }
    free(x), free(w), free(one), free(each);
    return same;
}

bool tensor_rows_invariant(int n, int in_dim, int out_dim, int group)
{
    if (group <= 1 || group >= n || openblas_get_num_threads() != 1)
        return false;
    bool same = false, found = false;
    pthread_mutex_lock(&rows_lock);
    for (int i = 0; i < rows_nseen && !found; i++) {
        const struct rows_seen *e = &rows_seen[i];
        if (e->n == n && e->in_dim == in_dim && e->out_dim == out_dim && e->group == group)
            found = true, same = e->same;
    }
    if (!found && rows_nseen < ROWS_SEEN) {
        same = rows_try(n, in_dim, out_dim, group);
        rows_seen[rows_nseen++] = (struct rows_seen){n, in_dim, out_dim, group, same};
    }
    pthread_mutex_unlock(&rows_lock);
    return same;
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
    /* several groups in one product where that gives each the same bytes, up to ROWS_MAX rows */
    int chunk = TDL_MAX(group, TDL_MIN(n, ROWS_MAX / group * group));
    for (int r = 0, rows; r < n; r += rows) {
        rows = TDL_MIN(chunk, n - r);
        if (rows > group && !tensor_rows_invariant(rows, in_dim, out_dim, group))
            rows = group;
        tensor_gemm(false, true, rows, out_dim, in_dim, 1.0f, in + (size_t)r * in_dim, in_dim,
                    weight, in_dim, bias ? 1.0f : 0.0f, out + (size_t)r * out_dim, out_dim);
    }
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
