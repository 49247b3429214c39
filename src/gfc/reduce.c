/* Data types, reduction operators, and the local reduction every algorithm uses. */
#include "config.h"

#include <stdlib.h>

#include "gfc/gfc_internal.h"

static const size_t dtype_sizes[GFC_DT_COUNT] = {4, 2, 2, 4, 8, 1};
static const char *const dtype_names[GFC_DT_COUNT] = {"f32", "bf16", "f16", "i32", "i64", "byte"};
static const char *const redop_names[GFC_OP_COUNT] = {"sum", "max", "min"};

size_t gfc_dtype_size(gfc_dtype_t dtype)
{
    return (unsigned)dtype < GFC_DT_COUNT ? dtype_sizes[dtype] : 0;
}

const char *gfc_dtype_name(gfc_dtype_t dtype)
{
    return (unsigned)dtype < GFC_DT_COUNT ? dtype_names[dtype] : "?";
}

const char *gfc_redop_name(gfc_redop_t op)
{
    return (unsigned)op < GFC_OP_COUNT ? redop_names[op] : "?";
}

size_t *gfc_uniform_layout(int n, size_t count)
{
    size_t *cd = malloc(2 * (size_t)n * sizeof(size_t));
    for (int i = 0; cd && i < n; i++) {
        cd[i] = count;
        cd[n + i] = (size_t)i * count;
    }
    return cd;
}

tdl_status_t gfc_check_count(const char *what, size_t count, gfc_dtype_t dtype)
{
    if ((unsigned)dtype >= GFC_DT_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc %s: unknown data type %d", what,
                               (int)dtype);
    if (count > ((size_t)1 << 46))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc %s: count %zu is too large", what,
                               count);
    return TDL_OK;
}

/* out may be a (in place) but never b: the compiler versions the loops on that. */
#define REDUCE_LOOP(T, EXPR)                                                                   \
    do {                                                                                       \
        T *o = out;                                                                            \
        const T *pa = a, *pb = b;                                                              \
        for (size_t i = 0; i < n; i++) {                                                       \
            T x = pa[i], y = pb[i];                                                            \
            o[i] = (EXPR);                                                                     \
        }                                                                                      \
    } while (0)

#define REDUCE_HALF(TO, FROM, EXPR)                                                            \
    do {                                                                                       \
        uint16_t *o = out;                                                                     \
        const uint16_t *pa = a, *pb = b;                                                       \
        for (size_t i = 0; i < n; i++) {                                                       \
            float x = FROM(pa[i]), y = FROM(pb[i]);                                            \
            o[i] = TO(EXPR);                                                                   \
        }                                                                                      \
    } while (0)

/* max/min keep NaN: a NaN anywhere makes the result NaN, as in the sum. */
#define FMAX(x, y) ((x) != (x) ? (x) : (y) != (y) ? (y) : (x) > (y) ? (x) : (y))
#define FMIN(x, y) ((x) != (x) ? (x) : (y) != (y) ? (y) : (x) < (y) ? (x) : (y))
#define IMAX(x, y) ((x) > (y) ? (x) : (y))
#define IMIN(x, y) ((x) < (y) ? (x) : (y))

tdl_status_t gfc_reduce_local(void *inout, const void *in, size_t n, gfc_dtype_t dtype,
                              gfc_redop_t op)
{
    return gfc_reduce3(inout, inout, in, n, dtype, op);
}

tdl_status_t gfc_reduce3(void *out, const void *a, const void *b, size_t n, gfc_dtype_t dtype,
                         gfc_redop_t op)
{
    if ((unsigned)op >= GFC_OP_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc: unknown reduction %d", (int)op);
    switch (dtype) {
    case GFC_DT_F32:
        if (op == GFC_OP_SUM)
            REDUCE_LOOP(float, x + y);
        else if (op == GFC_OP_MAX)
            REDUCE_LOOP(float, FMAX(x, y));
        else
            REDUCE_LOOP(float, FMIN(x, y));
        return TDL_OK;
    case GFC_DT_BF16:
        if (op == GFC_OP_SUM)
            REDUCE_HALF(tdl_bf16_from_f32, tdl_bf16_to_f32, x + y);
        else if (op == GFC_OP_MAX)
            REDUCE_HALF(tdl_bf16_from_f32, tdl_bf16_to_f32, FMAX(x, y));
        else
            REDUCE_HALF(tdl_bf16_from_f32, tdl_bf16_to_f32, FMIN(x, y));
        return TDL_OK;
    case GFC_DT_F16:
        if (op == GFC_OP_SUM)
            REDUCE_HALF(tdl_f16_from_f32, tdl_f16_to_f32, x + y);
        else if (op == GFC_OP_MAX)
            REDUCE_HALF(tdl_f16_from_f32, tdl_f16_to_f32, FMAX(x, y));
        else
            REDUCE_HALF(tdl_f16_from_f32, tdl_f16_to_f32, FMIN(x, y));
        return TDL_OK;
    case GFC_DT_I32:
        /* wrap-around sum, as MPI_SUM on MPI_INT32_T does in practice */
        if (op == GFC_OP_SUM)
            REDUCE_LOOP(int32_t, (int32_t)((uint32_t)x + (uint32_t)y));
        else if (op == GFC_OP_MAX)
            REDUCE_LOOP(int32_t, IMAX(x, y));
        else
            REDUCE_LOOP(int32_t, IMIN(x, y));
        return TDL_OK;
    case GFC_DT_I64:
        if (op == GFC_OP_SUM)
            REDUCE_LOOP(int64_t, (int64_t)((uint64_t)x + (uint64_t)y));
        else if (op == GFC_OP_MAX)
            REDUCE_LOOP(int64_t, IMAX(x, y));
        else
            REDUCE_LOOP(int64_t, IMIN(x, y));
        return TDL_OK;
    case GFC_DT_BYTE:
        if (op == GFC_OP_MAX)
            REDUCE_LOOP(uint8_t, IMAX(x, y));
        else if (op == GFC_OP_MIN)
            REDUCE_LOOP(uint8_t, IMIN(x, y));
        else
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc: sum is not defined on bytes");
        return TDL_OK;
    default:
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc: unknown data type %d", (int)dtype);
    }
}
