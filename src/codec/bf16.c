/* bf16: the upper half of each f32, 2 little-endian bytes per value. Round to nearest even (the
 * same bits as tdl_bf16_from_f32) or stochastically; NaN stays a quiet NaN with its sign, Inf
 * stays Inf, and a finite value that rounds past the largest bf16 becomes Inf. */
#include "config.h"

#include "codec/codec.h"
#include "codec/codec_internal.h"

#define BF16_NAME "bf16"

static const codec_minifloat_t bf16_format = {
    .mbits = 7, .emin = -126, .max_code = 0x7f7fu, .overflow_code = 0x7f80u};

static inline uint16_t bf16_encode_one(float x, bool stochastic, uint32_t r)
{
    uint32_t u = codec_f32_bits(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    if (!stochastic)
        return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* Inf stays Inf */
    if (a == 0x7f800000u)
        return sign | 0x7f80u;
    return sign | (uint16_t)codec_minifloat_round(&bf16_format, a, true, r);
}

static inline float bf16_decode_one(const unsigned char *p)
{
    return codec_bits_f32((uint32_t)codec_load_le16(p) << 16);
}

static size_t bf16_bytes(size_t n)
{
    return n <= SIZE_MAX / 2 ? n * 2 : SIZE_MAX;
}

static size_t bf16_max_encoded_bytes(const void *cfg, size_t n)
{
    return bf16_bytes(n);
}

static tdl_status_t bf16_encode(const void *cfg, const codec_where_t *w, const float *in, size_t n,
                                void *out, size_t *out_bytes)
{
    tdl_status_t st = codec_check_args(BF16_NAME, in, out, n);
    if (!st)
        st = codec_check_where(BF16_NAME, cfg, w);
    if (st)
        return st;
    unsigned char *o = out;
    if (codec_cfg_stochastic(cfg)) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, w->seed, codec_where_stream(w));
        for (size_t i = 0; i < n; i++)
            codec_store_le16(o + 2 * i, bf16_encode_one(in[i], true, tdl_rng_u32(&rng)));
    } else {
        for (size_t i = 0; i < n; i++)
            codec_store_le16(o + 2 * i, bf16_encode_one(in[i], false, 0));
    }
    *out_bytes = 2 * n;
    return TDL_OK;
}

static tdl_status_t bf16_check(const void *in, size_t in_bytes, const void *out, size_t n)
{
    tdl_status_t st = codec_check_args(BF16_NAME, in, out, n);
    if (st)
        return st;
    return codec_check_size(BF16_NAME, in_bytes, bf16_bytes(n), n);
}

static tdl_status_t bf16_decode(const void *cfg, const void *in, size_t in_bytes, float *out,
                                size_t n)
{
    tdl_status_t st = bf16_check(in, in_bytes, out, n);
    if (st)
        return st;
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++)
        out[i] = bf16_decode_one(p + 2 * i);
    return TDL_OK;
}

static tdl_status_t bf16_decode_accumulate(const void *cfg, const void *in, size_t in_bytes,
                                           float *acc, size_t n)
{
    tdl_status_t st = bf16_check(in, in_bytes, acc, n);
    if (st)
        return st;
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++)
        acc[i] += bf16_decode_one(p + 2 * i);
    return TDL_OK;
}

static tdl_status_t bf16_decode_accumulate_encode(const void *cfg, const codec_where_t *w,
                                                  const void *in, size_t in_bytes,
                                                  const float *local, size_t n, void *out,
                                                  size_t *out_bytes)
{
    tdl_status_t st = bf16_check(in, in_bytes, out, n);
    if (!st)
        st = codec_check_args(BF16_NAME, local, out, n);
    if (!st)
        st = codec_check_where(BF16_NAME, cfg, w);
    if (st)
        return st;
    const unsigned char *p = in;
    unsigned char *o = out;
    if (codec_cfg_stochastic(cfg)) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, w->seed, codec_where_stream(w));
        for (size_t i = 0; i < n; i++) {
            float x = local[i] + bf16_decode_one(p + 2 * i);
            codec_store_le16(o + 2 * i, bf16_encode_one(x, true, tdl_rng_u32(&rng)));
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float x = local[i] + bf16_decode_one(p + 2 * i);
            codec_store_le16(o + 2 * i, bf16_encode_one(x, false, 0));
        }
    }
    *out_bytes = 2 * n;
    return TDL_OK;
}

static double bf16_bits_per_coord(const void *cfg, size_t n)
{
    return 16.0;
}

const codec_ops_t codec_bf16_ops = {
    .name = BF16_NAME,
    .max_encoded_bytes = bf16_max_encoded_bytes,
    .encode = bf16_encode,
    .decode = bf16_decode,
    .decode_accumulate = bf16_decode_accumulate,
    .decode_accumulate_encode = bf16_decode_accumulate_encode,
    .bits_per_coord = bf16_bits_per_coord,
};
