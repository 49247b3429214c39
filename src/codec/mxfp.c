/* OCP Microscaling (MX) v1.0 formats: blocks of 32 values share an E8M0 scale 2^(s - 127)
 * (s = 0xFF: the block is NaN); each value is a small float element: MXFP8 E4M3 and E5M2, MXFP6
 * E3M2 and E2M3, MXFP4 E2M1.
 *
 * Layout of n values in ceil(n / 32) blocks: first one scale byte per block, then the elements
 * of every block in order, packed densely as a little-endian bit stream (element i at bits
 * [i * w, i * w + w), bit 0 the least significant bit of byte 0): 8-bit elements one per byte,
 * 6-bit elements four per three bytes, 4-bit elements two per byte (the first in the low
 * nibble). Each block starts on a byte; the unused bits of the last byte are zero.
 *
 * Encoding follows the specification's conversion (section 6.3): the shared exponent is
 * X = floor(log2(max |v|)) - emax, emax the exponent of the element format's largest normal,
 * clamped to [-127, 127]; each v / 2^X is rounded to the element format (nearest even, or
 * stochastically) and clamped to its largest normal. A block of zeros gets X = -127. A NaN or
 * Inf in a block makes its scale NaN, as in the specification's reference code. */
#include "config.h"

#include <math.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"

#define MX_BLOCK 32
/* Inlined into each format's operations, so the format's constants fold into the loops. */
#define MX_INLINE static inline __attribute__((always_inline))

/* ---- element values, at scale 2^0 --------------------------------------------------------- */

/* 2^k for -32 <= k < 32, as a constant expression. */
#define MX_P2(k) ((float)(1ull << ((k) + 32)) * 0x1.0p-32f)
/* Magnitude code c with mb mantissa bits and smallest normal exponent emin. */
#define MX_MANT(c, mb) ((c) & ((1 << (mb)) - 1))
#define MX_MAG(c, mb, emin)                                                                        \
    (((c) >> (mb)) == 0                                                                            \
         ? (float)MX_MANT(c, mb) * MX_P2((emin) - (mb))                                            \
         : (float)((1 << (mb)) + MX_MANT(c, mb)) * MX_P2(((c) >> (mb)) - 1 + (emin) - (mb)))
#define MX_SIGNED(c, sb, v) (((c) & (sb)) ? -(v) : (v))

#define MX_E4M3(c) (((c)&0x7f) == 0x7f ? NAN : MX_SIGNED(c, 0x80, MX_MAG((c)&0x7f, 3, -6)))
#define MX_E5M2(c)                                                                                 \
    (((c)&0x7c) == 0x7c ? (((c)&3) ? NAN : MX_SIGNED(c, 0x80, INFINITY))                           \
                        : MX_SIGNED(c, 0x80, MX_MAG((c)&0x7f, 2, -14)))
#define MX_E3M2(c) MX_SIGNED(c, 0x20, MX_MAG((c)&0x1f, 2, -2))
#define MX_E2M3(c) MX_SIGNED(c, 0x20, MX_MAG((c)&0x1f, 3, 0))
#define MX_E2M1(c) MX_SIGNED(c, 0x8, MX_MAG((c)&0x7, 1, 0))

#define MX_R4(F, b)   F(b), F((b) + 1), F((b) + 2), F((b) + 3)
#define MX_R16(F, b)  MX_R4(F, b), MX_R4(F, (b) + 4), MX_R4(F, (b) + 8), MX_R4(F, (b) + 12)
#define MX_R64(F, b)  MX_R16(F, b), MX_R16(F, (b) + 16), MX_R16(F, (b) + 32), MX_R16(F, (b) + 48)
#define MX_R256(F, b) MX_R64(F, b), MX_R64(F, (b) + 64), MX_R64(F, (b) + 128), MX_R64(F, (b) + 192)

static const float mx_e4m3_values[256] = {MX_R256(MX_E4M3, 0)};
static const float mx_e5m2_values[256] = {MX_R256(MX_E5M2, 0)};
static const float mx_e3m2_values[64] = {MX_R64(MX_E3M2, 0)};
static const float mx_e2m3_values[64] = {MX_R64(MX_E2M3, 0)};
static const float mx_e2m1_values[16] = {MX_R16(MX_E2M1, 0)};

/* ---- formats ------------------------------------------------------------------------------ */

typedef struct mx_format {
    const char *name;
    int bits;             /* element width: 1 + exponent bits + mantissa bits */
    int emax;             /* exponent of the largest normal element */
    codec_minifloat_t mf; /* saturating: overflow_code == max_code */
    const float *values;  /* 2^bits element values at scale 2^0 */
} mx_format_t;

static const mx_format_t mx_e4m3 = {"mxfp8_e4m3", 8, 8, {3, -6, 0x7e, 0x7e}, mx_e4m3_values};
static const mx_format_t mx_e5m2 = {"mxfp8_e5m2", 8, 15, {2, -14, 0x7b, 0x7b}, mx_e5m2_values};
static const mx_format_t mx_e3m2 = {"mxfp6_e3m2", 6, 4, {2, -2, 0x1f, 0x1f}, mx_e3m2_values};
static const mx_format_t mx_e2m3 = {"mxfp6_e2m3", 6, 2, {3, 0, 0x1f, 0x1f}, mx_e2m3_values};
static const mx_format_t mx_e2m1 = {"mxfp4_e2m1", 4, 2, {1, 0, 0x7, 0x7}, mx_e2m1_values};

/* Element bytes of a block of cnt values. */
static inline size_t mx_elem_bytes(const mx_format_t *f, size_t cnt)
{
    return (cnt * (size_t)f->bits + 7) / 8;
}

static size_t mx_bytes(const mx_format_t *f, size_t n)
{
    if (n > SIZE_MAX / 2)
        return SIZE_MAX;
    size_t full = n / MX_BLOCK, rest = n % MX_BLOCK;
    return full + (rest != 0) + full * mx_elem_bytes(f, MX_BLOCK) + mx_elem_bytes(f, rest);
}

/* ---- one block ---------------------------------------------------------------------------- */

/* Scale and element codes of v[0..cnt); random word `first + i` rounds value i. */
MX_INLINE void mx_block_encode(const mx_format_t *f, const float *v, size_t cnt, tdl_rng_t *rng,
                               uint64_t first, uint8_t *scale_out, uint8_t *codes)
{
    uint32_t amax = 0;
    for (size_t i = 0; i < cnt; i++) {
        uint32_t a = codec_f32_bits(v[i]) & 0x7fffffffu;
        amax = a > amax ? a : amax;
    }
    if (amax >= 0x7f800000u) { /* NaN or Inf: no finite scale fits */
        *scale_out = 0xff;
        memset(codes, 0, cnt);
        return;
    }
    /* floor(log2(amax)); an f32 subnormal or zero maximum ends up at the clamp anyway */
    int e = amax >= 0x00800000u ? (int)(amax >> 23) - 127 : -127;
    int x = e - f->emax < -127 ? -127 : e - f->emax; /* <= 127 - 2 */
    *scale_out = (uint8_t)(x + 127);
    float inv = codec_pow2f(-x);
    uint32_t sign_bit = 1u << (f->bits - 1);
    if (rng) {
        tdl_rng_seek(rng, first);
        for (size_t i = 0; i < cnt; i++) {
            uint32_t u = codec_f32_bits(v[i] * inv);
            uint32_t mag = codec_minifloat_round(&f->mf, u & 0x7fffffffu, true, tdl_rng_u32(rng));
            codes[i] = (uint8_t)(((u >> 31) ? sign_bit : 0) | mag);
        }
    } else {
        for (size_t i = 0; i < cnt; i++) {
            uint32_t u = codec_f32_bits(v[i] * inv);
            uint32_t mag = codec_minifloat_round(&f->mf, u & 0x7fffffffu, false, 0);
            codes[i] = (uint8_t)(((u >> 31) ? sign_bit : 0) | mag);
        }
    }
}

MX_INLINE void mx_block_pack(const mx_format_t *f, const uint8_t *codes, size_t cnt,
                             unsigned char *out)
{
    if (f->bits == 8) {
        memcpy(out, codes, cnt);
    } else if (f->bits == 6) {
        for (size_t i = 0; i < cnt; i += 4) {
            size_t k = TDL_MIN(cnt - i, (size_t)4);
            uint32_t w = 0;
            for (size_t j = 0; j < k; j++)
                w |= (uint32_t)codes[i + j] << (6 * j);
            for (size_t j = 0; j < (6 * k + 7) / 8; j++)
                out[3 * (i / 4) + j] = (unsigned char)(w >> (8 * j));
        }
    } else {
        for (size_t i = 0; i < cnt; i += 2)
            out[i / 2] = (unsigned char)(codes[i] | (i + 1 < cnt ? codes[i + 1] << 4 : 0));
    }
}

/* false when the padding bits of the block's last byte are not zero */
MX_INLINE bool mx_block_unpack(const mx_format_t *f, const unsigned char *in, size_t cnt,
                               uint8_t *codes)
{
    if (f->bits == 8) {
        memcpy(codes, in, cnt);
        return true;
    }
    if (f->bits == 6) {
        uint32_t w = 0;
        size_t k = 0;
        for (size_t i = 0; i < cnt; i += 4) {
            k = TDL_MIN(cnt - i, (size_t)4);
            w = 0;
            for (size_t j = 0; j < (6 * k + 7) / 8; j++)
                w |= (uint32_t)in[3 * (i / 4) + j] << (8 * j);
            for (size_t j = 0; j < k; j++)
                codes[i + j] = (uint8_t)((w >> (6 * j)) & 0x3f);
        }
        return cnt == 0 || (w >> (6 * k)) == 0;
    }
    for (size_t i = 0; i < cnt; i += 2) {
        codes[i] = in[i / 2] & 0xf;
        if (i + 1 < cnt)
            codes[i + 1] = in[i / 2] >> 4;
        else if (in[i / 2] >> 4)
            return false;
    }
    return true;
}

static inline float mx_scale_value(uint8_t s)
{
    return s == 0xff ? NAN : codec_pow2f((int)s - 127);
}

/* ---- the operations ----------------------------------------------------------------------- */

typedef enum { MX_DECODE, MX_ACCUMULATE, MX_ACCUMULATE_ENCODE } mx_pass_t;

MX_INLINE tdl_status_t mx_encode(const mx_format_t *f, const void *cfg, const codec_where_t *w,
                                 const float *in, size_t n, void *out, size_t *out_bytes)
{
    tdl_status_t st = codec_check_args(f->name, in, out, n);
    if (!st)
        st = codec_check_where(f->name, cfg, w);
    if (st)
        return st;
    if (n == 0) {
        *out_bytes = 0;
        return TDL_OK;
    }
    tdl_rng_t rng, *r = NULL;
    if (codec_cfg_stochastic(cfg)) {
        tdl_rng_init(&rng, w->seed, codec_where_stream(w));
        r = &rng;
    }
    size_t nb = (n + MX_BLOCK - 1) / MX_BLOCK, full_bytes = mx_elem_bytes(f, MX_BLOCK);
    unsigned char *scales = out, *elems = scales + nb;
    uint8_t codes[MX_BLOCK];
    for (size_t b = 0; b < nb; b++) {
        size_t first = b * MX_BLOCK, cnt = TDL_MIN(n - first, (size_t)MX_BLOCK);
        mx_block_encode(f, in + first, cnt, r, first, &scales[b], codes);
        mx_block_pack(f, codes, cnt, elems + b * full_bytes);
    }
    *out_bytes = mx_bytes(f, n);
    return TDL_OK;
}

/* decode, decode_accumulate and decode_accumulate_encode: one pass over the blocks. */
MX_INLINE tdl_status_t mx_pass(const mx_format_t *f, mx_pass_t pass, const void *cfg,
                               const codec_where_t *w, const void *in, size_t in_bytes,
                               const float *local, float *acc, size_t n, void *out,
                               size_t *out_bytes)
{
    tdl_status_t st = codec_check_args(f->name, in, pass == MX_ACCUMULATE_ENCODE ? out : acc, n);
    if (!st && pass == MX_ACCUMULATE_ENCODE) {
        st = codec_check_args(f->name, local, out, n);
        if (!st)
            st = codec_check_where(f->name, cfg, w);
    }
    if (!st)
        st = codec_check_size(f->name, in_bytes, mx_bytes(f, n), n);
    if (st)
        return st;
    if (n == 0) {
        if (pass == MX_ACCUMULATE_ENCODE)
            *out_bytes = 0;
        return TDL_OK;
    }
    size_t nb = (n + MX_BLOCK - 1) / MX_BLOCK, full_bytes = mx_elem_bytes(f, MX_BLOCK);
    const unsigned char *scales = in, *elems = scales + nb;
    /* Padding is checked before anything is written, so outputs change only on success. */
    uint8_t codes[MX_BLOCK];
    if (n % MX_BLOCK && !mx_block_unpack(f, elems + (nb - 1) * full_bytes, n % MX_BLOCK, codes))
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "codec %s: padding bits after the last of %zu values are not zero",
                               f->name, n);
    tdl_rng_t rng, *r = NULL;
    if (pass == MX_ACCUMULATE_ENCODE && codec_cfg_stochastic(cfg)) {
        tdl_rng_init(&rng, w->seed, codec_where_stream(w));
        r = &rng;
    }
    unsigned char *oscales = out, *oelems = oscales ? oscales + nb : NULL;
    float sum[MX_BLOCK];
    for (size_t b = 0; b < nb; b++) {
        size_t first = b * MX_BLOCK, cnt = TDL_MIN(n - first, (size_t)MX_BLOCK);
        mx_block_unpack(f, elems + b * full_bytes, cnt, codes);
        float sc = mx_scale_value(scales[b]);
        /* Element value times a power of two is exact, so a compiler contracting the multiply
         * and add into an fma cannot change the sums. */
        switch (pass) {
        case MX_DECODE:
            for (size_t i = 0; i < cnt; i++)
                acc[first + i] = f->values[codes[i]] * sc;
            break;
        case MX_ACCUMULATE:
            for (size_t i = 0; i < cnt; i++)
                acc[first + i] += f->values[codes[i]] * sc;
            break;
        case MX_ACCUMULATE_ENCODE:
            for (size_t i = 0; i < cnt; i++)
                sum[i] = local[first + i] + f->values[codes[i]] * sc;
            mx_block_encode(f, sum, cnt, r, first, &oscales[b], codes);
            mx_block_pack(f, codes, cnt, oelems + b * full_bytes);
            break;
        }
    }
    if (pass == MX_ACCUMULATE_ENCODE)
        *out_bytes = mx_bytes(f, n);
    return TDL_OK;
}

static double mx_bits_per_coord(const mx_format_t *f, size_t n)
{
    if (n == 0)
        return f->bits + 8.0 / MX_BLOCK;
    return 8.0 * (double)mx_bytes(f, n) / (double)n;
}

#define MX_OPS(id, fmt)                                                                            \
    static size_t id##_max_encoded_bytes(const void *cfg, size_t n)                                \
    {                                                                                              \
        return mx_bytes(&fmt, n);                                                                  \
    }                                                                                              \
    static tdl_status_t id##_encode(const void *cfg, const codec_where_t *w, const float *in,      \
                                    size_t n, void *out, size_t *out_bytes)                        \
    {                                                                                              \
        return mx_encode(&fmt, cfg, w, in, n, out, out_bytes);                                     \
    }                                                                                              \
    static tdl_status_t id##_decode(const void *cfg, const void *in, size_t in_bytes, float *out,  \
                                    size_t n)                                                      \
    {                                                                                              \
        return mx_pass(&fmt, MX_DECODE, cfg, NULL, in, in_bytes, NULL, out, n, NULL, NULL);        \
    }                                                                                              \
    static tdl_status_t id##_decode_accumulate(const void *cfg, const void *in, size_t in_bytes,   \
                                               float *acc, size_t n)                               \
    {                                                                                              \
        return mx_pass(&fmt, MX_ACCUMULATE, cfg, NULL, in, in_bytes, NULL, acc, n, NULL, NULL);    \
    }                                                                                              \
    static tdl_status_t id##_decode_accumulate_encode(                                             \
        const void *cfg, const codec_where_t *w, const void *in, size_t in_bytes,                  \
        const float *local, size_t n, void *out, size_t *out_bytes)                                \
    {                                                                                              \
        return mx_pass(&fmt, MX_ACCUMULATE_ENCODE, cfg, w, in, in_bytes, local, NULL, n, out,      \
                       out_bytes);                                                                 \
    }                                                                                              \
    static double id##_bits_per_coord(const void *cfg, size_t n)                                   \
    {                                                                                              \
        return mx_bits_per_coord(&fmt, n);                                                         \
    }                                                                                              \
    const codec_ops_t codec_##id##_ops = {                                                         \
        .name = #id,                                                                               \
        .max_encoded_bytes = id##_max_encoded_bytes,                                               \
        .encode = id##_encode,                                                                     \
        .decode = id##_decode,                                                                     \
        .decode_accumulate = id##_decode_accumulate,                                               \
        .decode_accumulate_encode = id##_decode_accumulate_encode,                                 \
        .bits_per_coord = id##_bits_per_coord,                                                     \
    };

MX_OPS(mxfp8_e4m3, mx_e4m3)
MX_OPS(mxfp8_e5m2, mx_e5m2)
MX_OPS(mxfp6_e3m2, mx_e3m2)
MX_OPS(mxfp6_e2m3, mx_e2m3)
MX_OPS(mxfp4_e2m1, mx_e2m1)
