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
#include <pthread.h>
#include <stdlib.h>

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
        uint32_t a = tdl_f32_bits(v[i]) & 0x7fffffffu;
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
            uint32_t u = tdl_f32_bits(v[i] * inv);
            uint32_t mag = codec_minifloat_round(&f->mf, u & 0x7fffffffu, true, tdl_rng_u32(rng));
            codes[i] = (uint8_t)(((u >> 31) ? sign_bit : 0) | mag);
        }
    } else {
        for (size_t i = 0; i < cnt; i++) {
            uint32_t u = tdl_f32_bits(v[i] * inv);
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

/* Whole blocks in vectors (mx_vec_t), where the CPU has them: the bytes of the portable loops. */
typedef struct mx_vec {
    void (*encode)(const float *in, size_t nb, const tdl_rng_t *r, unsigned char *scales,
                   unsigned char *elems);
    void (*fuse)(const unsigned char *scales, const unsigned char *elems, const float *local,
                 size_t nb, const tdl_rng_t *r, unsigned char *oscales, unsigned char *oelems);
    void (*decode)(const unsigned char *scales, const unsigned char *elems, float *acc, size_t nb,
                   bool accumulate);
} mx_vec_t;

/* ---- AVX-512: whole blocks, 16 values a vector -------------------------------------------- */

/* The same arithmetic as mx_block_encode and codec_minifloat_round, lane by lane in integers, so
 * the bytes are the portable loops' bytes; the last partial block is left to those loops. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define MX_HAVE_AVX512 1
#define MX_AVX512                                                                                  \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), optimize("fp-contract=off")))
#define MX_VINLINE MX_AVX512 static inline __attribute__((always_inline))

/* codec_minifloat_round of 16 scaled values u (with their signs), r their random words. With
 * E the f32 exponent field and K that of the format's smallest normal: the format exponent is
 * max(E, K) - K, and s = 23 - mbits + max(E, K) - max(E, 1) bits of the significand m go. */
MX_VINLINE __m512i mx_round16(const mx_format_t *f, __m512i u, bool stochastic, __m512i r)
{
    const int mb = f->mf.mbits, k = f->mf.emin + 127;
    __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i e = _mm512_srli_epi32(a, 23);
    __m512i emx = _mm512_max_epi32(e, _mm512_set1_epi32(k));
    __m512i eb = _mm512_max_epi32(e, _mm512_set1_epi32(1));
    __m512i m =
        _mm512_sub_epi32(a, _mm512_slli_epi32(_mm512_sub_epi32(eb, _mm512_set1_epi32(1)), 23));
    __m512i s = _mm512_add_epi32(_mm512_sub_epi32(emx, eb), _mm512_set1_epi32(23 - mb));
    __m512i n;
    if (stochastic) {
        /* (m * 2^32 >> s) + r, carried out of the low 32 bits; shifts of 32 or more give 0 */
        __m512i hi = _mm512_srlv_epi32(m, s);
        __m512i frac =
            _mm512_or_si512(_mm512_sllv_epi32(m, _mm512_sub_epi32(_mm512_set1_epi32(32), s)),
                            _mm512_srlv_epi32(m, _mm512_sub_epi32(s, _mm512_set1_epi32(32))));
        __mmask16 carry = _mm512_cmplt_epu32_mask(_mm512_add_epi32(frac, r), frac);
        n = _mm512_mask_add_epi32(hi, carry, hi, _mm512_set1_epi32(1));
    } else {
        /* to nearest even: (m + 2^(s-1) - 1 + lsb) >> s */
        s = _mm512_min_epi32(s, _mm512_set1_epi32(25));
        __m512i lsb = _mm512_and_si512(_mm512_srlv_epi32(m, s), _mm512_set1_epi32(1));
        __m512i half1 =
            _mm512_srlv_epi32(_mm512_set1_epi32(-1), _mm512_sub_epi32(_mm512_set1_epi32(33), s));
        n = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(m, half1), lsb), s);
    }
    __m512i code =
        _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(emx, _mm512_set1_epi32(k)), mb), n);
    code = _mm512_min_epu32(code, _mm512_set1_epi32((int32_t)f->mf.max_code));
    __m512i sign =
        _mm512_and_si512(_mm512_srli_epi32(u, 32 - f->bits), _mm512_set1_epi32(1 << (f->bits - 1)));
    return _mm512_or_si512(code, sign);
}

/* Packs the 32 codes of a full block (c0: the first 16) as mx_block_pack does. */
MX_VINLINE void mx_pack32(const mx_format_t *f, __m512i c0, __m512i c1, unsigned char *out)
{
    __m128i b0 = _mm512_cvtepi32_epi8(c0), b1 = _mm512_cvtepi32_epi8(c1);
    if (f->bits == 8) {
        _mm_storeu_si128((__m128i *)out, b0);
        _mm_storeu_si128((__m128i *)(out + 16), b1);
        return;
    }
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1);
    if (f->bits == 6) {
        /* four codes to 24 bits, then 3 bytes of each 32-bit word */
        __m256i t = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x4001));
        t = _mm256_madd_epi16(t, _mm256_set1_epi32(0x10000001));
        t = _mm256_shuffle_epi8(t, _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1,
                                                    -1, -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14,
                                                    -1, -1, -1, -1));
        t = _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7));
        _mm256_mask_storeu_epi8(out, 0xffffff, t);
        return;
    }
    __m256i t = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x1001));
    _mm_storeu_si128((__m128i *)out, _mm256_cvtepi16_epi8(t));
}

/* The 32 codes of a full block, as mx_block_unpack gives them (c0: the first 16). */
MX_VINLINE void mx_unpack32(const mx_format_t *f, const unsigned char *in, __m512i *c0, __m512i *c1)
{
    if (f->bits == 8) {
        *c0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)in));
        *c1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(in + 16)));
    } else if (f->bits == 6) {
        /* bytes 0-11 to the low 128 bits, 12-23 to the high, each 3 bytes to a 32-bit word */
        __m256i x = _mm256_maskz_loadu_epi8(0xffffff, in);
        x = _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 1, 2, 2, 3, 4, 5, 5));
        x = _mm256_shuffle_epi8(x, _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10,
                                                    11, -1, 0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1,
                                                    9, 10, 11, -1));
        __m512i w = _mm512_castsi256_si512(x);
        __m512i sh = _mm512_setr_epi32(0, 6, 12, 18, 0, 6, 12, 18, 0, 6, 12, 18, 0, 6, 12, 18);
        __m512i lo = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        __m512i six = _mm512_set1_epi32(0x3f);
        *c0 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(lo, w), sh), six);
        __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
        *c1 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(hi, w), sh), six);
    } else {
        __m128i x = _mm_loadu_si128((const __m128i *)in), nib = _mm_set1_epi8(0x0f);
        __m128i l = _mm_and_si128(x, nib), h = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
        *c0 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(l, h));
        *c1 = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(l, h));
    }
}

/* f->values[c] for 16 codes: the 8-bit formats from their bits, the others from in-register
 * tables; the same floats, signed zeros and NaNs included. */
MX_VINLINE __m512 mx_values16(const mx_format_t *f, __m512i c)
{
    if (f->bits == 8) {
        int mb = f->mf.mbits, bias = 1 - f->mf.emin; /* 7 or 15 */
        __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
        __m512 nrm = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 23 - mb),
                                                          _mm512_set1_epi32((127 - bias) << 23)));
        __m512 sub =
            _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(codec_pow2f(-bias + 1 - mb)));
        __mmask16 isn = _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x7f & ~((1 << mb) - 1)));
        __m512i v = _mm512_castps_si512(_mm512_mask_blend_ps(isn, sub, nrm));
        __mmask16 nan;
        if (mb == 3) {
            nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
        } else {
            v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7c)),
                                      _mm512_set1_epi32(0x7f800000));
            nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7c));
        }
        v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24));
        v = _mm512_mask_mov_epi32(v, nan, _mm512_castps_si512(_mm512_set1_ps(NAN)));
        return _mm512_castsi512_ps(v);
    }
    __m512 t0 = _mm512_loadu_ps(f->values);
    if (f->bits == 4)
        return _mm512_permutexvar_ps(c, t0);
    __m512 lo = _mm512_permutex2var_ps(t0, c, _mm512_loadu_ps(f->values + 16));
    __m512 hi =
        _mm512_permutex2var_ps(_mm512_loadu_ps(f->values + 32), c, _mm512_loadu_ps(f->values + 48));
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(c, _mm512_set1_epi32(32)), lo, hi);
}

/* Encodes the full block v0, v1 (r: its 32 random words, NULL to round to nearest). */
MX_VINLINE void mx_block_encode32(const mx_format_t *f, __m512 v0, __m512 v1, const uint32_t *r,
                                  unsigned char *scale_out, unsigned char *out)
{
    __m512i abs = _mm512_set1_epi32(0x7fffffff);
    __m512i a = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v0), abs),
                                 _mm512_and_si512(_mm512_castps_si512(v1), abs));
    uint32_t amax = (uint32_t)_mm512_reduce_max_epu32(a);
    if (amax >= 0x7f800000u) {
        *scale_out = 0xff;
        memset(out, 0, mx_elem_bytes(f, MX_BLOCK));
        return;
    }
    int e = amax >= 0x00800000u ? (int)(amax >> 23) - 127 : -127;
    int x = e - f->emax < -127 ? -127 : e - f->emax;
    *scale_out = (uint8_t)(x + 127);
    __m512 inv = _mm512_set1_ps(codec_pow2f(-x));
    __m512i u0 = _mm512_castps_si512(_mm512_mul_ps(v0, inv));
    __m512i u1 = _mm512_castps_si512(_mm512_mul_ps(v1, inv));
    __m512i c0, c1;
    if (r) {
        c0 = mx_round16(f, u0, true, _mm512_loadu_si512(r));
        c1 = mx_round16(f, u1, true, _mm512_loadu_si512(r + 16));
    } else {
        c0 = mx_round16(f, u0, false, _mm512_setzero_si512());
        c1 = mx_round16(f, u1, false, _mm512_setzero_si512());
    }
    mx_pack32(f, c0, c1, out);
}

/* The 32 random words of block b from the stream r, drawn into words two blocks at a time (b
 * counts up from 0); NULL, to round to nearest, without a stream. */
MX_VINLINE const uint32_t *mx_block_words(const tdl_rng_t *r, size_t b, uint32_t *words)
{
    if (!r)
        return NULL;
    if (b % 2 == 0)
        tdl_philox_words64(r->seed, r->stream, (uint64_t)b * (MX_BLOCK / 4), words);
    return words + (b % 2) * MX_BLOCK;
}

/* Blocks 0 .. nb - 1 of encode, all full; r the stream (NULL: nearest). */
MX_VINLINE void mx_encode_avx512(const mx_format_t *f, const float *in, size_t nb,
                                 const tdl_rng_t *r, unsigned char *scales, unsigned char *elems)
{
    size_t bytes = mx_elem_bytes(f, MX_BLOCK);
    uint32_t words[2 * MX_BLOCK];
    for (size_t b = 0; b < nb; b++) {
        const float *v = in + b * MX_BLOCK;
        mx_block_encode32(f, _mm512_loadu_ps(v), _mm512_loadu_ps(v + 16),
                          mx_block_words(r, b, words), &scales[b], elems + b * bytes);
    }
}

/* Blocks 0 .. nb - 1 of the fused pass, all full: out = encode(local + decode(in)). */
MX_VINLINE void mx_fuse_avx512(const mx_format_t *f, const unsigned char *scales,
                               const unsigned char *elems, const float *local, size_t nb,
                               const tdl_rng_t *r, unsigned char *oscales, unsigned char *oelems)
{
    size_t bytes = mx_elem_bytes(f, MX_BLOCK);
    uint32_t words[2 * MX_BLOCK];
    for (size_t b = 0; b < nb; b++) {
        __m512i c0, c1;
        mx_unpack32(f, elems + b * bytes, &c0, &c1);
        __m512 sc = _mm512_set1_ps(mx_scale_value(scales[b]));
        const float *l = local + b * MX_BLOCK;
        __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(l), _mm512_mul_ps(mx_values16(f, c0), sc));
        __m512 v1 = _mm512_add_ps(_mm512_loadu_ps(l + 16), _mm512_mul_ps(mx_values16(f, c1), sc));
        mx_block_encode32(f, v0, v1, mx_block_words(r, b, words), &oscales[b],
                          oelems + b * bytes);
    }
}

/* Blocks 0 .. nb - 1 of decode or decode_accumulate, all full. A NaN product wins the sum, as
 * in the portable loop's code (prod + acc): the NaN bits do not depend on the operand order. */
MX_VINLINE void mx_decode_avx512(const mx_format_t *f, const unsigned char *scales,
                                 const unsigned char *elems, float *acc, size_t nb, bool accumulate)
{
    size_t bytes = mx_elem_bytes(f, MX_BLOCK);
    for (size_t b = 0; b < nb; b++) {
        __m512i c[2];
        mx_unpack32(f, elems + b * bytes, &c[0], &c[1]);
        __m512 sc = _mm512_set1_ps(mx_scale_value(scales[b]));
        for (int h = 0; h < 2; h++) {
            float *o = acc + b * MX_BLOCK + 16 * h;
            __m512 p = _mm512_mul_ps(mx_values16(f, c[h]), sc);
            if (accumulate) {
                __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
                p = _mm512_mask_blend_ps(nan, _mm512_add_ps(_mm512_loadu_ps(o), p), p);
            }
            _mm512_storeu_ps(o, p);
        }
    }
}

#define MX_AVX512_OPS(id, fmt)                                                                     \
    MX_AVX512 static void id##_encode_avx512(const float *in, size_t nb, const tdl_rng_t *r,       \
                                             unsigned char *scales, unsigned char *elems)          \
    {                                                                                              \
        mx_encode_avx512(&fmt, in, nb, r, scales, elems);                                          \
    }                                                                                              \
    MX_AVX512 static void id##_fuse_avx512(                                                        \
        const unsigned char *scales, const unsigned char *elems, const float *local, size_t nb,    \
        const tdl_rng_t *r, unsigned char *oscales, unsigned char *oelems)                         \
    {                                                                                              \
        mx_fuse_avx512(&fmt, scales, elems, local, nb, r, oscales, oelems);                        \
    }                                                                                              \
    MX_AVX512 static void id##_decode_avx512(const unsigned char *scales,                          \
                                             const unsigned char *elems, float *acc, size_t nb,    \
                                             bool accumulate)                                      \
    {                                                                                              \
        mx_decode_avx512(&fmt, scales, elems, acc, nb, accumulate);                                \
    }                                                                                              \
    static const mx_vec_t id##_vec = {id##_encode_avx512, id##_fuse_avx512, id##_decode_avx512};

#endif

#ifdef MX_HAVE_AVX512
#define MX_VEC(id) (&id##_vec)
#else
#define MX_AVX512_OPS(id, fmt)
#define MX_VEC(id) NULL
#endif

/* Which loops run: 1 the AVX-512 ones where the CPU has AVX-512 F, BW, DQ and VL, 0 the portable
 * ones, also when TIDAL_MXFP_ISA is "portable" (for tests and comparisons). */
static int mx_isa = -1;
static pthread_once_t mx_isa_once = PTHREAD_ONCE_INIT;

/* 1 when the CPU can run the AVX-512 loops, else 0. */
static int mx_isa_best(void)
{
#ifdef MX_HAVE_AVX512
    return codec_cpu_avx512();
#else
    return 0;
#endif
}

static void mx_isa_init(void)
{
    const char *env = getenv("TIDAL_MXFP_ISA");
    mx_isa = env && !strcmp(env, "portable") ? 0 : mx_isa_best();
}

/* The vector loops to run, or NULL for the portable ones. */
static const mx_vec_t *mx_vec_pick(const mx_vec_t *vec)
{
    pthread_once(&mx_isa_once, mx_isa_init);
    return mx_isa >= 1 ? vec : NULL;
}

int codec_mxfp_isa(int isa)
{
    pthread_once(&mx_isa_once, mx_isa_init);
    int was = mx_isa;
    if (isa >= 0 && isa <= mx_isa_best())
        mx_isa = isa;
    return was;
}

/* ---- the operations ----------------------------------------------------------------------- */

typedef enum { MX_DECODE, MX_ACCUMULATE, MX_ACCUMULATE_ENCODE } mx_pass_t;

MX_INLINE tdl_status_t mx_encode(const mx_format_t *f, const mx_vec_t *vec, const void *cfg,
                                 const codec_where_t *w, const float *in, size_t n, void *out,
                                 size_t *out_bytes)
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
    size_t b0 = 0;
    if ((vec = mx_vec_pick(vec))) {
        b0 = n / MX_BLOCK;
        vec->encode(in, b0, r, scales, elems);
    }
    for (size_t b = b0; b < nb; b++) {
        size_t first = b * MX_BLOCK, cnt = TDL_MIN(n - first, (size_t)MX_BLOCK);
        mx_block_encode(f, in + first, cnt, r, first, &scales[b], codes);
        mx_block_pack(f, codes, cnt, elems + b * full_bytes);
    }
    *out_bytes = mx_bytes(f, n);
    return TDL_OK;
}

/* decode, decode_accumulate and decode_accumulate_encode: one pass over the blocks. */
MX_INLINE tdl_status_t mx_pass(const mx_format_t *f, const mx_vec_t *vec, mx_pass_t pass,
                               const void *cfg, const codec_where_t *w, const void *in,
                               size_t in_bytes, const float *local, float *acc, size_t n, void *out,
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
    size_t b0 = 0;
    if ((vec = mx_vec_pick(vec))) {
        b0 = n / MX_BLOCK;
        if (pass == MX_ACCUMULATE_ENCODE)
            vec->fuse(scales, elems, local, b0, r, oscales, oelems);
        else
            vec->decode(scales, elems, acc, b0, pass == MX_ACCUMULATE);
    }
    for (size_t b = b0; b < nb; b++) {
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
    MX_AVX512_OPS(id, fmt)                                                                         \
    static size_t id##_max_encoded_bytes(const void *cfg, size_t n)                                \
    {                                                                                              \
        return mx_bytes(&fmt, n);                                                                  \
    }                                                                                              \
    static tdl_status_t id##_encode(const void *cfg, const codec_where_t *w, const float *in,      \
                                    size_t n, void *out, size_t *out_bytes)                        \
    {                                                                                              \
        return mx_encode(&fmt, MX_VEC(id), cfg, w, in, n, out, out_bytes);                         \
    }                                                                                              \
    static tdl_status_t id##_decode(const void *cfg, const void *in, size_t in_bytes, float *out,  \
                                    size_t n)                                                      \
    {                                                                                              \
        return mx_pass(&fmt, MX_VEC(id), MX_DECODE, cfg, NULL, in, in_bytes, NULL, out, n, NULL,   \
                       NULL);                                                                      \
    }                                                                                              \
    static tdl_status_t id##_decode_accumulate(const void *cfg, const void *in, size_t in_bytes,   \
                                               float *acc, size_t n)                               \
    {                                                                                              \
        return mx_pass(&fmt, MX_VEC(id), MX_ACCUMULATE, cfg, NULL, in, in_bytes, NULL, acc, n,     \
                       NULL, NULL);                                                                \
    }                                                                                              \
    static tdl_status_t id##_decode_accumulate_encode(                                             \
        const void *cfg, const codec_where_t *w, const void *in, size_t in_bytes,                  \
        const float *local, size_t n, void *out, size_t *out_bytes)                                \
    {                                                                                              \
        return mx_pass(&fmt, MX_VEC(id), MX_ACCUMULATE_ENCODE, cfg, w, in, in_bytes, local, NULL,  \
                       n, out, out_bytes);                                                         \
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
