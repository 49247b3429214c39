/* f32: the values themselves, 4 little-endian bytes each. The exact reference for the others;
 * the rounding mode has nothing to round. */
#include "config.h"

#include "codec/codec.h"
#include "codec/codec_internal.h"

#define F32_NAME "f32"

static size_t f32_bytes(size_t n)
{
    return n <= SIZE_MAX / 4 ? n * 4 : SIZE_MAX;
}

static size_t f32_max_encoded_bytes(const void *cfg, size_t n)
{
    return f32_bytes(n);
}

static tdl_status_t f32_encode(const void *cfg, const codec_where_t *w, const float *in, size_t n,
                               void *out, size_t *out_bytes)
{
    tdl_status_t st = codec_check_args(F32_NAME, in, out, n);
    if (st)
        return st;
    unsigned char *o = out;
    for (size_t i = 0; i < n; i++)
        codec_store_le32(o + 4 * i, tdl_f32_bits(in[i]));
    *out_bytes = 4 * n;
    return TDL_OK;
}

static tdl_status_t f32_check(const void *in, size_t in_bytes, const void *out, size_t n)
{
    tdl_status_t st = codec_check_args(F32_NAME, in, out, n);
    if (st)
        return st;
    return codec_check_size(F32_NAME, in_bytes, f32_bytes(n), n);
}

static tdl_status_t f32_decode(const void *cfg, const void *in, size_t in_bytes, float *out,
                               size_t n)
{
    tdl_status_t st = f32_check(in, in_bytes, out, n);
    if (st)
        return st;
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++)
        out[i] = tdl_bits_f32(codec_load_le32(p + 4 * i));
    return TDL_OK;
}

static tdl_status_t f32_decode_accumulate(const void *cfg, const void *in, size_t in_bytes,
                                          float *acc, size_t n)
{
    tdl_status_t st = f32_check(in, in_bytes, acc, n);
    if (st)
        return st;
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++)
        acc[i] += tdl_bits_f32(codec_load_le32(p + 4 * i));
    return TDL_OK;
}

static tdl_status_t f32_decode_accumulate_encode(const void *cfg, const codec_where_t *w,
                                                 const void *in, size_t in_bytes,
                                                 const float *local, size_t n, void *out,
                                                 size_t *out_bytes)
{
    tdl_status_t st = f32_check(in, in_bytes, out, n);
    if (!st)
        st = codec_check_args(F32_NAME, local, out, n);
    if (st)
        return st;
    const unsigned char *p = in;
    unsigned char *o = out;
    for (size_t i = 0; i < n; i++) {
        float x = local[i] + tdl_bits_f32(codec_load_le32(p + 4 * i));
        codec_store_le32(o + 4 * i, tdl_f32_bits(x));
    }
    *out_bytes = 4 * n;
    return TDL_OK;
}

static double f32_bits_per_coord(const void *cfg, size_t n)
{
    return 32.0;
}

const codec_ops_t codec_f32_ops = {
    .name = F32_NAME,
    .max_encoded_bytes = f32_max_encoded_bytes,
    .encode = f32_encode,
    .decode = f32_decode,
    .decode_accumulate = f32_decode_accumulate,
    .decode_accumulate_encode = f32_decode_accumulate_encode,
    .bits_per_coord = f32_bits_per_coord,
};
