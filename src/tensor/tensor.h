/* tensor: host memory for activations and parameters, and the BLAS calls the model makes. */
#ifndef TIDAL_TENSOR_H
#define TIDAL_TENSOR_H

#include <stddef.h>

#include "core/core.h"

/* One block sized at start; allocations are bumps, so nothing is allocated inside a step. */
typedef struct tensor_arena {
    float *base;
    size_t capacity; /* floats */
    size_t used;     /* floats */
} tensor_arena_t;

tdl_status_t tensor_arena_init(tensor_arena_t *arena, size_t floats);
void tensor_arena_free(tensor_arena_t *arena);
/* n floats, 64-byte aligned; NULL when the arena is full (a sizing bug). */
float *tensor_arena_alloc(tensor_arena_t *arena, size_t n);
void tensor_arena_reset(tensor_arena_t *arena);
/* 64-byte aligned, zeroed, in huge pages from 32 MiB (advised); free with free(). */
float *tensor_alloc(size_t n);

/* out[N,O] = in[N,I] W[O,I]^T (+ bias[O]); W is row-major as in PyTorch's nn.Linear. Each
 * `group` of rows comes out as a product of its own would give it (0: one product of all N; N a
 * multiple of it otherwise): a BLAS sums a row by the shape of its product (OpenBLAS's Haswell
 * kernels sum the rows past the last multiple of 12, and products of 1 to 3 rows, differently),
 * so a row's result can depend on the rows beside it. The DiT's forward makes a group of an image
 * (its tokens, or one row for its conditioning), so that an image comes out the same whatever
 * batch it is in. Groups share one product, up to 1024 rows, where tensor_rows_invariant says
 * that changes no byte (W is then packed once for them, not once a group); products of one row
 * are matrix-vector products (cblas_sgemv). */
void tensor_linear_forward(float *out, const float *in, const float *weight, const float *bias,
                           int n, int in_dim, int out_dim, int group);
/* Whether one product of N rows gives every group of `group` rows the bytes of the group's own
 * product, for this shape on this BLAS: the kernel's tiling decides, not the values, so it is
 * tried once on random values and remembered (up to 128 shapes; false past them). False with
 * more than one BLAS thread, whose split of the rows decides too. */
bool tensor_rows_invariant(int n, int in_dim, int out_dim, int group);
/* din[N,I] += dout W; dweight[O,I] += dout^T in; dbias[O] += column sums of dout. Any of din,
 * dweight, dbias may be NULL. */
void tensor_linear_backward(float *din, float *dweight, float *dbias, const float *dout,
                            const float *in, const float *weight, int n, int in_dim, int out_dim);
/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, with leading dimensions. */
void tensor_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* The kernels OpenBLAS chose on this CPU ("Haswell", "SkylakeX", "Cooperlake", ...). */
const char *tensor_blas_core(void);
/* When OpenBLAS runs AVX2 kernels on a CPU with AVX-512 (OPENBLAS_CORETYPE says so, or OpenBLAS
 * does not know the CPU), what to do about it, into buf; else "". The products are exact either
 * way; the AVX-512 kernels are about 1.5 times as fast (doc/vae.md). */
const char *tensor_blas_advice(char *buf, size_t size);

#endif /* TIDAL_TENSOR_H */
