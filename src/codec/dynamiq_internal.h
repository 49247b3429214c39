/* What dynamiq.c shares with its AVX-512 loops (dynamiq_avx512.c, group by group) and its
 * AVX-512 VBMI/GFNI loops (dynamiq_vbmi.c, super-group by super-group): the tables and the
 * encoder's state, the layout helpers the loops read, their entry points, and the inline pieces
 * both SIMD files use. dynamiq.c decides which loops run (codec_dynamiq_isa); nothing outside
 * src/codec includes this. Every file including it is compiled with fp-contract=off. */
#ifndef TIDAL_DYNAMIQ_INTERNAL_H
#define TIDAL_DYNAMIQ_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/codec_internal.h"
#include "codec/dynamiq_format.h"
#include "codec/dynamiq_levels.h"

/* The level tables of one kind: lv[w][k], level k of width w, and ig[w][k] = 1 / (lv[w][k + 1] -
 * lv[w][k]). */
typedef struct dq_tables {
    const float (*lv)[256];
    const float (*ig)[256];
} dq_tables_t;

/* Word of the value at absolute index a: fmix32(a * golden + key) + offset. */
typedef struct dq_rand {
    uint32_t key, offset;
} dq_rand_t;

/* What the encoding loops read: tables, ablation flags, rounding and the random words. */
typedef struct dq_enc {
    dq_tables_t t;
    int kind; /* of the tables: 0 fitted, 1 uniform */
    unsigned flags;
    bool stochastic;
    dq_rand_t rand;
} dq_enc_t;

/* A super-group of m values: [bf16 S][meta per group][4 * units value bytes]; its units are in
 * the table after the header. */
static inline size_t dq_groups(size_t m)
{
    return (m + DQ_GROUP - 1) / DQ_GROUP;
}

static inline size_t dq_sg_bytes(size_t m, int units)
{
    return 2 + dq_groups(m) + 4 * (size_t)units;
}

/* 2^(-e/2) */
static inline float dq_half_pow(int e)
{
    float r = codec_pow2f(-(e >> 1));
    return (e & 1) ? r * 0x1.6a09e6p-1f : r;
}

/* dq_half_pow(e) for every exponent */
static const float dq_half_table[DQ_EMAX + 1] = {
    0x1p0f,         0x1.6a09e6p-1f, 0x1p-1f,        0x1.6a09e6p-2f, 0x1p-2f,
    0x1.6a09e6p-3f, 0x1p-3f,        0x1.6a09e6p-4f, 0x1p-4f,        0x1.6a09e6p-5f,
    0x1p-5f,        0x1.6a09e6p-6f, 0x1p-6f,        0x1.6a09e6p-7f, 0x1p-7f,
};

/* Widths above the tables use 2^w uniform levels: level k is -1 + k * 2 / (2^w - 1). */
static inline float dq_wide_inv_step(int w)
{
    return (float)((1 << w) - 1) * 0.5f;
}

static inline float dq_wide_level(int w, int k)
{
    return -1.0f + (float)k * (2.0f / (float)((1 << w) - 1));
}

/* The super-group's scale: its largest magnitude rounded up to a bf16 (at most the largest
 * finite one), stored at o; answers it as a float. */
static inline float dq_store_scale(float smax, unsigned char *o)
{
    uint32_t u = tdl_f32_bits(smax);
    u = (u >> 16) + ((u & 0xffffu) != 0);
    if (u >= 0x7f80u)
        u = 0x7f7fu; /* the largest finite bf16 */
    codec_store_le16(o, (uint16_t)u);
    return tdl_bits_f32(u << 16);
}

/* ---- the SIMD loops: GCC on x86-64 compiles them (target attributes, no flags), the CPU
 * decides at run time whether they run ---------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define DQ_HAVE_AVX512 1
#define DQ_AVX512      __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define DQ_ZV          __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,gfni")))

#define DQ_INLINE inline __attribute__((always_inline))

/* dynamiq_avx512.c: the portable loops of dynamiq.c with in-register tables, same bytes. */
DQ_AVX512 void codec_dq_avx512_quantize_group(const dq_enc_t *c, const float *x, int cnt, float inv,
                                              int w, uint64_t a, uint32_t *planes);
DQ_AVX512 void codec_dq_avx512_dequantize_group(dq_tables_t t, const uint32_t *planes, int w,
                                                float s, int cnt, float *x, const float *base);
DQ_AVX512 bool codec_dq_avx512_sg_stats(const float *x, size_t m, float *gmax);
DQ_AVX512 bool codec_dq_avx512_check_sg(const unsigned char *p, size_t m, int units);
DQ_AVX512 size_t codec_dq_avx512_split_units(const float *est, size_t nk, double t);

/* dynamiq_vbmi.c: whole super-groups. Init builds its shuffles and level buckets from the two
 * kinds of tables (fitted, uniform), once, before the loops run. */
void codec_dq_vbmi_init(dq_tables_t fitted, dq_tables_t uniform);
DQ_ZV void codec_dq_vbmi_encode_sg(const dq_enc_t *c, const float *x, size_t m, const float *gmax,
                                   uint64_t a0, int units, unsigned char *o);
DQ_ZV void codec_dq_vbmi_decode_sg(dq_tables_t t, const unsigned char *meta,
                                   const unsigned char *val, size_t m, float S, float *x,
                                   const float *base);

/* The pieces of a group's quantizer and dequantizer both SIMD files inline. */

/* The level index k of the uniform widths above the tables for 16 values v in [-1, 1], and where
 * v lies between levels k and k + 1 (p). */
DQ_AVX512 static DQ_INLINE __m512i dq_z_wide(int w, __m512 v, __m512 *p)
{
    int top = (1 << w) - 1;
    __m512 is = _mm512_set1_ps(dq_wide_inv_step(w)), st = _mm512_set1_ps(2.0f / (float)top);
    __m512i k = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_add_ps(v, _mm512_set1_ps(1.0f)), is));
    k = _mm512_min_epi32(_mm512_max_epi32(k, _mm512_setzero_si512()), _mm512_set1_epi32(top - 1));
    __m512 level = _mm512_add_ps(_mm512_set1_ps(-1.0f), _mm512_mul_ps(_mm512_cvtepi32_ps(k), st));
    *p = _mm512_mul_ps(_mm512_sub_ps(v, level), is);
    return k;
}

/* Which of the 16 values at absolute indices a, a + 1, ... round up, p being where each lies
 * between its two levels: stochastically (the random word against p) or to nearest. */
DQ_AVX512 static DQ_INLINE __mmask16 dq_z_up(const dq_enc_t *c, uint32_t a, __m512 p)
{
    if (!c->stochastic)
        return _mm512_cmp_ps_mask(p, _mm512_set1_ps(0.5f), _CMP_GT_OQ);
    /* (a + j) * golden + key = (a * golden + key) + j * golden, mod 2^32: one multiply fewer */
    const __m512i jg =
        _mm512_mullo_epi32(/* constants: folded at compile time */
                           _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int32_t)DQ_GOLDEN));
    __m512i r = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(a * DQ_GOLDEN + c->rand.key)), jg);
    r = _mm512_xor_si512(r, _mm512_srli_epi32(r, 16));
    r = _mm512_mullo_epi32(r, _mm512_set1_epi32((int32_t)0x85ebca6bu));
    r = _mm512_xor_si512(r, _mm512_srli_epi32(r, 13));
    r = _mm512_mullo_epi32(r, _mm512_set1_epi32((int32_t)0xc2b2ae35u));
    r = _mm512_xor_si512(r, _mm512_srli_epi32(r, 16));
    r = _mm512_add_epi32(r, _mm512_set1_epi32((int32_t)c->rand.offset));
    __m512 f =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)), _mm512_set1_ps(0x1.0p-24f));
    return _mm512_cmp_ps_mask(f, p, _CMP_LT_OQ);
}

/* The cnt <= 32 values of a group times inv, clamped to [-1, 1], as two halves (zeros past
 * cnt), with the masks of the lanes that hold values. */
DQ_AVX512 static inline void dq_z_load_scaled(const float *x, int cnt, float inv, __mmask16 *m0,
                                              __mmask16 *m1, __m512 *v0, __m512 *v1)
{
    *m0 = (__mmask16)(cnt >= 16 ? 0xffff : (1u << cnt) - 1);
    *m1 = (__mmask16)(cnt >= 32 ? 0xffff : cnt > 16 ? (1u << (cnt - 16)) - 1 : 0);
    __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-1.0f), hi = _mm512_set1_ps(1.0f);
    *v0 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(*m0, x), vinv), lo), hi);
    *v1 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(*m1, x + 16), vinv), lo),
                        hi);
}

/* The values of codes at width w > DQ_MAX_WIDTH (uniform levels over [-1, 1]) times vs. */
DQ_AVX512 static inline __m512 dq_z_wide_values(__m512i code, int w, __m512 vs)
{
    __m512 st = _mm512_set1_ps(2.0f / (float)((1 << w) - 1));
    return _mm512_mul_ps(
        _mm512_add_ps(_mm512_set1_ps(-1.0f), _mm512_mul_ps(_mm512_cvtepi32_ps(code), st)), vs);
}

/* x[0 .. cnt) = y, or base + y when base is given, from the group's two halves y[0], y[1]. */
DQ_AVX512 static inline void dq_z_store_group(const __m512 y[2], int cnt, float *x,
                                              const float *base)
{
    for (int h = 0; h < 2; h++) {
        __mmask16 m = (__mmask16)(cnt >= 16 * (h + 1) ? 0xffff
                                  : cnt > 16 * h      ? (1u << (cnt - 16 * h)) - 1
                                                      : 0);
        if (!m)
            break;
        __m512 v = base ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, base + 16 * h), y[h]) : y[h];
        _mm512_mask_storeu_ps(x + 16 * h, m, v);
    }
}
#endif /* DQ_HAVE_AVX512 */

#endif /* TIDAL_DYNAMIQ_INTERNAL_H */
