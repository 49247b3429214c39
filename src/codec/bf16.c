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
    uint32_t u = tdl_f32_bits(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u), nan = (uint16_t)((u >> 16) | 0x0040u);
    if (!stochastic)
        return a > 0x7f800000u ? nan : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    /* every case computed, one selected: no branch, so the loop vectorizes */
    uint16_t rounded = sign | (uint16_t)codec_minifloat_round(&bf16_format, a, true, r);
    return a > 0x7f800000u ? nan : a == 0x7f800000u ? (uint16_t)(sign | 0x7f80u) : rounded;
}

static inline float bf16_decode_one(const unsigned char *p)
{
    return tdl_bits_f32((uint32_t)codec_load_le16(p) << 16);
}

CODEC_HALF_OPS(BF16_NAME, bf16)
