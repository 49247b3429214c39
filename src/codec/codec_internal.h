/* What the codec formats share and other modules do not use: the minifloat rounding core,
 * little-endian byte access, the stochastic-rounding stream and the size checks. */
#ifndef TIDAL_CODEC_INTERNAL_H
#define TIDAL_CODEC_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "codec/codec.h"

extern const codec_ops_t codec_f32_ops;
extern const codec_ops_t codec_bf16_ops;
extern const codec_ops_t codec_fp16_ops;
extern const codec_ops_t codec_mxfp8_e4m3_ops;
extern const codec_ops_t codec_mxfp8_e5m2_ops;
extern const codec_ops_t codec_mxfp6_e3m2_ops;
extern const codec_ops_t codec_mxfp6_e2m3_ops;
extern const codec_ops_t codec_mxfp4_e2m1_ops;
extern const codec_ops_t codec_int8_ops;
extern const codec_ops_t codec_int8_rht_ops;

static inline bool codec_cfg_stochastic(const void *cfg)
{
    return cfg && ((const codec_config_t *)cfg)->round == CODEC_ROUND_STOCHASTIC;
}

static inline uint32_t codec_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float codec_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Encoded data is little-endian whatever the host. */
static inline uint16_t codec_load_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline void codec_store_le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline uint32_t codec_load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void codec_store_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* A binary floating-point format without sign, for rounding: values are
 * code = ((e - emin) << mbits) + n for a value n * 2^(max(e, emin) - mbits). */
typedef struct codec_minifloat {
    int mbits;              /* stored mantissa bits */
    int emin;               /* unbiased exponent of the smallest normal */
    uint32_t max_code;      /* largest finite magnitude */
    uint32_t overflow_code; /* what a larger magnitude becomes: max_code (saturate) or Inf */
} codec_minifloat_t;

/* The magnitude code of the finite f32 whose bits without sign are `a`, rounded to nearest even,
 * or stochastically with the random word r: up with probability (distance from below) / ulp,
 * to 32 bits of resolution. Integer arithmetic only, so every machine gets the same code. */
static inline uint32_t codec_minifloat_round(const codec_minifloat_t *f, uint32_t a,
                                             bool stochastic, uint32_t r)
{
    /* Written without data-dependent branches: gradients make them unpredictable. */
    bool normal = a >= 0x00800000u;
    int e = normal ? (int)(a >> 23) - 127 : -126; /* f32 subnormal or zero: a * 2^-149 */
    uint32_t m = normal ? (a & 0x7fffffu) | 0x800000u : a;
    int eeff = e > f->emin ? e : f->emin;
    int s = 23 - f->mbits + (eeff - e); /* bits of m below the target's ulp; >= 13 here */
    uint32_t n;
    if (stochastic) {
        uint64_t t = ((uint64_t)m << 32) >> (s < 63 ? s : 63); /* value in ulp / 2^32 */
        n = (uint32_t)((t + r) >> 32);
    } else {
        s = s < 25 ? s : 25; /* beyond 24, m < half an ulp and rounds to 0 */
        uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
        n = m >> s;
        n += (uint32_t)(rem > half) | ((uint32_t)(rem == half) & n);
    }
    uint32_t code = ((uint32_t)(eeff - f->emin) << f->mbits) + n; /* a carry bumps the exponent */
    return code > f->max_code ? f->overflow_code : code;
}

/* 2^k as a float for -127 <= k <= 127. */
static inline float codec_pow2f(int k)
{
    return k >= -126 ? codec_bits_f32((uint32_t)(k + 127) << 23) : codec_bits_f32(0x00400000u);
}

/* Errors shared by the formats; each names the codec. */
tdl_status_t codec_check_args(const char *name, const void *in, const void *out, size_t n);
tdl_status_t codec_check_size(const char *name, size_t in_bytes, size_t want, size_t n);
tdl_status_t codec_check_where(const char *name, const void *cfg, const codec_where_t *w);

#endif /* TIDAL_CODEC_INTERNAL_H */
