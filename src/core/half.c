/* bf16 and IEEE fp16 conversions, round to nearest even. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

void tdl_blobs_free(tdl_blobs_t *blobs)
{
    if (!blobs)
        return;
    free(blobs->len);
    free(blobs->off);
    free(blobs->data);
    memset(blobs, 0, sizeof(*blobs));
}

uint16_t tdl_bf16_from_f32(float x)
{
    uint32_t u = tdl_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float tdl_bf16_to_f32(uint16_t h)
{
    return tdl_bits_f32((uint32_t)h << 16);
}

uint16_t tdl_f16_from_f32(float x)
{
    uint32_t u = tdl_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00u;
    if (a >= 0x477ff000u) /* rounds to >= 65520: Inf */
        return sign | 0x7c00u;
    if (a < 0x38800000u) {
        /* subnormal or zero in fp16: scale to units of 2^-24 and round to nearest even */
        float f = tdl_bits_f32(a) * 0x1.0p24f;
        float r = nearbyintf(f);
        return sign | (uint16_t)r;
    }
    uint32_t mant = a & 0x7fffffu;
    uint32_t exp = (a >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return sign | (uint16_t)h;
}

float tdl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float f = (float)mant * 0x1.0p-24f;
        return sign ? -f : f;
    }
    if (exp == 31)
        return tdl_bits_f32(sign | 0x7f800000u | (mant << 13));
    return tdl_bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
