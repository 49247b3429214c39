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
    uint32_t u = tdl_f32_bits(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    /* every case computed, one selected: no branch, so the loop vectorizes */
    uint16_t rounded = sign | (uint16_t)codec_minifloat_round(&fp16_format, a, stochastic, r);
    return a > 0x7f800000u    ? (uint16_t)(sign | 0x7e00u)
           : a == 0x7f800000u ? (uint16_t)(sign | 0x7c00u)
                              : rounded;
}

/* Every case is computed and one selected, without branches. */
static inline float fp16_decode_one(const unsigned char *p)
{
    uint16_t h = codec_load_le16(p);
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t sub = tdl_f32_bits((float)mant * 0x1.0p-24f);  /* subnormal: mant * 2^-24, exact */
    uint32_t special = 0x7f800000u | (mant << 13);          /* Inf, NaN with its payload */
    uint32_t normal = ((exp - 15 + 127) << 23) | (mant << 13);
    uint32_t is_sub = 0u - (uint32_t)(exp == 0), is_special = 0u - (uint32_t)(exp == 31);
    return tdl_bits_f32(sign | (sub & is_sub) | (special & is_special) |
                        (normal & ~(is_sub | is_special)));
}

CODEC_HALF_OPS(FP16_NAME, fp16)
