/* fp16: IEEE binary16, 2 little-endian bytes per value. Round to nearest even (the same bits as
 * tdl_f16_from_f32) or stochastically, with subnormals; NaN stays a quiet NaN with its sign, Inf
 * stays Inf, and a finite value that rounds past 65504 becomes Inf. */
#include "config.h"

#include "codec/codec.h"
#include "codec/codec_internal.h"

#define FP16_NAME "fp16"

static const codec_minifloat_t fp16_format = {
    .mbits = 10, .emin = -14, .max_code = 0x7bffu, .overflow_code = 0x7c00u};

static inline uint16_t fp16_encode_one(float x, bool stochastic, uint32_t r)
{
    uint32_t u = codec_f32_bits(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u)
        return sign | 0x7e00u;
    if (a == 0x7f800000u)
        return sign | 0x7c00u;
    return sign | (uint16_t)codec_minifloat_round(&fp16_format, a, stochastic, r);
}

static inline float fp16_decode_one(const unsigned char *p)
{
    uint16_t h = codec_load_le16(p);
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) /* subnormal: mant * 2^-24, exact */
        return codec_bits_f32(sign | codec_f32_bits((float)mant * 0x1.0p-24f));
    if (exp == 31)
        return codec_bits_f32(sign | 0x7f800000u | (mant << 13));
    return codec_bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

static size_t fp16_bytes(size_t n)
{
    return n <= SIZE_MAX / 2 ? n * 2 : SIZE_MAX;
}

static size_t fp16_max_encoded_bytes(const void *cfg, size_t n)
{
    return fp16_bytes(n);
}

static tdl_status_t fp16_encode(const void *cfg, const codec_where_t *w, const float *in, size_t n,
                                void *out, size_t *out_bytes)
{
    tdl_status_t st = codec_check_args(FP16_NAME, in, out, n);
    if (!st)
        st = codec_check_where(FP16_NAME, cfg, w);
    if (st)
        return st;
    unsigned char *o = out;
    if (codec_cfg_stochastic(cfg)) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, w->seed, codec_where_stream(w));
        for (size_t i = 0; i < n; i++)
            codec_store_le16(o + 2 * i, fp16_encode_one(in[i], true, tdl_rng_u32(&rng)));
    } else {
        for (size_t i = 0; i < n; i++)
            codec_store_le16(o + 2 * i, fp16_encode_one(in[i], false, 0));
    }
    *out_bytes = 2 * n;
    return TDL_OK;
}

static tdl_status_t fp16_check(const void *in, size_t in_bytes, const void *out, size_t n)
{
    tdl_status_t st = codec_check_args(FP16_NAME, in, out, n);
    if (st)
        return st;
    return codec_check_size(FP16_NAME, in_bytes, fp16_bytes(n), n);
}

static tdl_status_t fp16_decode(const void *cfg, const void *in, size_t in_bytes, float *out,
                                size_t n)
{
    tdl_status_t st = fp16_check(in, in_bytes, out, n);
    if (st)
        return st;
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++)
        out[i] = fp16_decode_one(p + 2 * i);
    return TDL_OK;
}

static tdl_status_t fp16_decode_accumulate(const void *cfg, const void *in, size_t in_bytes,
                                           float *acc, size_t n)
{
    tdl_status_t st = fp16_check(in, in_bytes, acc, n);
    if (st)
        return st;
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++)
        acc[i] += fp16_decode_one(p + 2 * i);
    return TDL_OK;
}

static tdl_status_t fp16_decode_accumulate_encode(const void *cfg, const codec_where_t *w,
                                                  const void *in, size_t in_bytes,
                                                  const float *local, size_t n, void *out,
                                                  size_t *out_bytes)
{
    tdl_status_t st = fp16_check(in, in_bytes, out, n);
    if (!st)
        st = codec_check_args(FP16_NAME, local, out, n);
    if (!st)
        st = codec_check_where(FP16_NAME, cfg, w);
    if (st)
        return st;
    const unsigned char *p = in;
    unsigned char *o = out;
    if (codec_cfg_stochastic(cfg)) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, w->seed, codec_where_stream(w));
        for (size_t i = 0; i < n; i++) {
            float x = local[i] + fp16_decode_one(p + 2 * i);
            codec_store_le16(o + 2 * i, fp16_encode_one(x, true, tdl_rng_u32(&rng)));
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float x = local[i] + fp16_decode_one(p + 2 * i);
            codec_store_le16(o + 2 * i, fp16_encode_one(x, false, 0));
        }
    }
    *out_bytes = 2 * n;
    return TDL_OK;
}

static double fp16_bits_per_coord(const void *cfg, size_t n)
{
    return 16.0;
}

const codec_ops_t codec_fp16_ops = {
    .name = FP16_NAME,
    .max_encoded_bytes = fp16_max_encoded_bytes,
    .encode = fp16_encode,
    .decode = fp16_decode,
    .decode_accumulate = fp16_decode_accumulate,
    .decode_accumulate_encode = fp16_decode_accumulate_encode,
    .bits_per_coord = fp16_bits_per_coord,
};
