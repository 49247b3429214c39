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
extern const codec_ops_t codec_dynamiq_ops;

/* Which loops dynamiq runs: 0 portable (lane by lane), 1 AVX-512 group by group, 2 AVX-512 with
 * VBMI and GFNI super-group by super-group; answers the previous choice. A request the CPU
 * cannot honour (or -1, to ask) changes nothing. For tests that compare them. */
int codec_dynamiq_isa(int isa);
/* Which loops the MX codecs run: 0 portable, 1 AVX-512; as codec_dynamiq_isa. */
int codec_mxfp_isa(int isa);
/* Whether this CPU runs AVX-512 F, BW, DQ and VL, which every AVX-512 loop of the codecs needs
 * (false where they are not compiled). */
bool codec_cpu_avx512(void);

static inline bool codec_cfg_stochastic(const void *cfg)
{
    return cfg && ((const codec_config_t *)cfg)->round == CODEC_ROUND_STOCHASTIC;
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
    return k >= -126 ? tdl_bits_f32((uint32_t)(k + 127) << 23) : tdl_bits_f32(0x00400000u);
}

/* a + b, except that when a is NaN the sum is a, quieted, whatever b is: which NaN a sum of two
 * NaNs keeps is otherwise up to the order the compiler gives the add's operands. */
static inline float codec_add_nan_first(float a, float b)
{
    uint32_t ua = tdl_f32_bits(a), sum = tdl_f32_bits(a + b);
    uint32_t nan = 0u - (uint32_t)((ua & 0x7fffffffu) > 0x7f800000u); /* a mask, no branch */
    return tdl_bits_f32((sum & ~nan) | ((ua | 0x00400000u) & nan));
}

/* The values of a group of scale s > 0 to quantize and the factor that brings them to [-1, 1]:
 * x and 1 / s, or, for s below CODEC_TINY_SCALE (values far below FLT_MIN, where 1 / s overflows
 * or loses bits), x and s both times CODEC_TINY_PRE, exactly, with the values in tmp[n]: the same
 * quotients. */
#define CODEC_TINY_SCALE 0x1p-100f
#define CODEC_TINY_PRE 0x1p64f
static inline const float *codec_scaled_group(const float *x, size_t n, float s, float *tmp,
                                              float *inv)
{
    if (s >= CODEC_TINY_SCALE) {
        *inv = 1.0f / s;
        return x;
    }
    for (size_t i = 0; i < n; i++)
        tmp[i] = x[i] * CODEC_TINY_PRE;
    *inv = 1.0f / (s * CODEC_TINY_PRE);
    return tmp;
}

/* Errors shared by the formats; each names the codec. */
tdl_status_t codec_check_args(const char *name, const void *in, const void *out, size_t n);
tdl_status_t codec_check_size(const char *name, size_t in_bytes, size_t want, size_t n);
tdl_status_t codec_check_where(const char *name, const void *cfg, const codec_where_t *w);

/* Loops of the 16-bit formats and int8, vectorized by the compiler (an AVX2 clone where the CPU
 * has it): their per-value functions are written without data-dependent branches, and every lane
 * computes what the scalar expression would, so both clones give the same bytes. Their adds go
 * through codec_add_nan_first, since a vectorized add may take its operands in the other order. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CODEC_HALF_LOOP                                                                            \
    __attribute__((target_clones("avx2", "default"), optimize("O3", "fp-contract=off")))
#else
#define CODEC_HALF_LOOP
#endif

/* The driver of a 16-bit element format: encode, decode, decode-accumulate and the fused pass,
 * one loop each, around P##_encode_one(x, stochastic, random bits) and P##_decode_one(p),
 * which the including file defines. Defines codec_##P##_ops. The random words come in tiles
 * from tdl_rng_fill_u32 (word i of the stream for value i, as one draw per value would give);
 * the fused pass decodes a tile and adds local to it in one loop, then encodes it. */
#define CODEC_HALF_TILE 1024
#define CODEC_HALF_OPS(NAME, P)                                                                    \
    static size_t P##_bytes(size_t n)                                                              \
    {                                                                                              \
        return n <= SIZE_MAX / 2 ? n * 2 : SIZE_MAX;                                               \
    }                                                                                              \
                                                                                                   \
    static size_t P##_max_encoded_bytes(const void *cfg, size_t n)                                 \
    {                                                                                              \
        return P##_bytes(n);                                                                       \
    }                                                                                              \
                                                                                                   \
    /* n values at o, stochastically with words[i] for value i when words is given */              \
    CODEC_HALF_LOOP                                                                                \
    static void P##_encode_run(const float *in, size_t n, const uint32_t *words, unsigned char *o) \
    {                                                                                              \
        if (words) {                                                                               \
            for (size_t i = 0; i < n; i++)                                                         \
                codec_store_le16(o + 2 * i, P##_encode_one(in[i], true, words[i]));                \
        } else {                                                                                   \
            for (size_t i = 0; i < n; i++)                                                         \
                codec_store_le16(o + 2 * i, P##_encode_one(in[i], false, 0));                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    CODEC_HALF_LOOP                                                                                \
    static void P##_decode_run(const unsigned char *p, size_t n, float *out)                       \
    {                                                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            out[i] = P##_decode_one(p + 2 * i);                                                    \
    }                                                                                              \
                                                                                                   \
    /* sum[i] = decode(p)[i] + local[i], a NaN of the decoded value winning over one of local */   \
    CODEC_HALF_LOOP                                                                                \
    static void P##_decode_add_run(const unsigned char *p, const float *local, size_t n,           \
                                   float *sum)                                                     \
    {                                                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            sum[i] = codec_add_nan_first(P##_decode_one(p + 2 * i), local[i]);                     \
    }                                                                                              \
                                                                                                   \
    /* in[0 .. n) encoded at o, tile by tile; rng NULL: to nearest */                              \
    static void P##_encode_tiles(const float *in, size_t n, tdl_rng_t *rng, unsigned char *o)      \
    {                                                                                              \
        if (!rng) {                                                                                \
            P##_encode_run(in, n, NULL, o);                                                        \
            return;                                                                                \
        }                                                                                          \
        uint32_t words[CODEC_HALF_TILE];                                                           \
        for (size_t i = 0; i < n; i += CODEC_HALF_TILE) {                                          \
            size_t m = TDL_MIN((size_t)CODEC_HALF_TILE, n - i);                                    \
            tdl_rng_fill_u32(rng, words, m);                                                       \
            P##_encode_run(in + i, m, words, o + 2 * i);                                           \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static tdl_status_t P##_encode(const void *cfg, const codec_where_t *w, const float *in,       \
                                   size_t n, void *out, size_t *out_bytes)                         \
    {                                                                                              \
        tdl_status_t st = codec_check_args(NAME, in, out, n);                                      \
        if (!st)                                                                                   \
            st = codec_check_where(NAME, cfg, w);                                                  \
        if (st)                                                                                    \
            return st;                                                                             \
        tdl_rng_t rng;                                                                             \
        bool sr = codec_cfg_stochastic(cfg);                                                       \
        if (sr)                                                                                    \
            tdl_rng_init(&rng, w->seed, codec_where_stream(w));                                    \
        P##_encode_tiles(in, n, sr ? &rng : NULL, out);                                            \
        *out_bytes = 2 * n;                                                                        \
        return TDL_OK;                                                                             \
    }                                                                                              \
                                                                                                   \
    static tdl_status_t P##_check(const void *in, size_t in_bytes, const void *out, size_t n)      \
    {                                                                                              \
        tdl_status_t st = codec_check_args(NAME, in, out, n);                                      \
        if (st)                                                                                    \
            return st;                                                                             \
        return codec_check_size(NAME, in_bytes, P##_bytes(n), n);                                  \
    }                                                                                              \
                                                                                                   \
    static tdl_status_t P##_decode(const void *cfg, const void *in, size_t in_bytes, float *out,   \
                                   size_t n)                                                       \
    {                                                                                              \
        tdl_status_t st = P##_check(in, in_bytes, out, n);                                         \
        if (st)                                                                                    \
            return st;                                                                             \
        P##_decode_run(in, n, out);                                                                \
        return TDL_OK;                                                                             \
    }                                                                                              \
                                                                                                   \
    static tdl_status_t P##_decode_accumulate(const void *cfg, const void *in, size_t in_bytes,    \
                                              float *acc, size_t n)                                \
    {                                                                                              \
        tdl_status_t st = P##_check(in, in_bytes, acc, n);                                         \
        if (st)                                                                                    \
            return st;                                                                             \
        P##_decode_add_run(in, acc, n, acc);                                                       \
        return TDL_OK;                                                                             \
    }                                                                                              \
                                                                                                   \
    static tdl_status_t P##_decode_accumulate_encode(                                              \
        const void *cfg, const codec_where_t *w, const void *in, size_t in_bytes,                  \
        const float *local, size_t n, void *out, size_t *out_bytes)                                \
    {                                                                                              \
        tdl_status_t st = P##_check(in, in_bytes, out, n);                                         \
        if (!st)                                                                                   \
            st = codec_check_args(NAME, local, out, n);                                            \
        if (!st)                                                                                   \
            st = codec_check_where(NAME, cfg, w);                                                  \
        if (st)                                                                                    \
            return st;                                                                             \
        const unsigned char *p = in;                                                               \
        unsigned char *o = out;                                                                    \
        tdl_rng_t rng;                                                                             \
        bool sr = codec_cfg_stochastic(cfg);                                                       \
        if (sr)                                                                                    \
            tdl_rng_init(&rng, w->seed, codec_where_stream(w));                                    \
        float sum[CODEC_HALF_TILE];                                                                \
        for (size_t i = 0; i < n; i += CODEC_HALF_TILE) {                                          \
            size_t m = TDL_MIN((size_t)CODEC_HALF_TILE, n - i);                                    \
            P##_decode_add_run(p + 2 * i, local + i, m, sum);                                      \
            P##_encode_tiles(sum, m, sr ? &rng : NULL, o + 2 * i);                                 \
        }                                                                                          \
        *out_bytes = 2 * n;                                                                        \
        return TDL_OK;                                                                             \
    }                                                                                              \
                                                                                                   \
    static double P##_bits_per_coord(const void *cfg, size_t n)                                    \
    {                                                                                              \
        return 16.0;                                                                               \
    }                                                                                              \
                                                                                                   \
    const codec_ops_t codec_##P##_ops = {                                                          \
        .name = NAME,                                                                              \
        .max_encoded_bytes = P##_max_encoded_bytes,                                                \
        .encode = P##_encode,                                                                      \
        .decode = P##_decode,                                                                      \
        .decode_accumulate = P##_decode_accumulate,                                                \
        .decode_accumulate_encode = P##_decode_accumulate_encode,                                  \
        .bits_per_coord = P##_bits_per_coord,                                                      \
    };

#endif /* TIDAL_CODEC_INTERNAL_H */
