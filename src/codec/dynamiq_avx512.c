/* dynamiq's AVX-512 loops (F, BW, DQ, VL), group by group: the level search with in-register
 * tables, the bit planes, the statistics, the metadata check and the budget split, each giving
 * exactly what its portable loop in dynamiq.c gives. Compiled by target attributes, run only
 * where dynamiq.c's dispatch finds the CPU able (codec_dynamiq_isa >= 1). */
#include "config.h"

/* No fused multiply-add anywhere here: every machine and the GPU must round alike. */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "codec/dynamiq_internal.h"

#ifdef DQ_HAVE_AVX512

/* ---- a group: the same two loops as dynamiq.c's with in-register tables ------------------- */

/* Level k of width w <= 8 for 16 indices: tables of up to 64 entries stay in registers
 * (permutes), wider ones are gathered. */
typedef struct dq_zt {
    __m512 t[4];
    const float *base;
    int w;
} dq_zt_t;

DQ_AVX512 static inline dq_zt_t dq_zt_load(const float *tab, int w)
{
    dq_zt_t z = {.base = tab, .w = w};
    int n = 1 << w;
    for (int i = 0; i < 4; i++)
        z.t[i] = i * 16 < n && w <= 6 ? _mm512_loadu_ps(tab + 16 * i) : _mm512_setzero_ps();
    return z;
}

DQ_AVX512 static inline __m512 dq_zt_get(const dq_zt_t *z, __m512i idx)
{
    if (z->w <= 4)
        return _mm512_permutexvar_ps(idx, z->t[0]);
    if (z->w == 5)
        return _mm512_permutex2var_ps(z->t[0], idx, z->t[1]);
    if (z->w == 6) {
        __m512 lo = _mm512_permutex2var_ps(z->t[0], idx, z->t[1]);
        __m512 hi = _mm512_permutex2var_ps(z->t[2], idx, z->t[3]);
        __mmask16 up = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
        return _mm512_mask_blend_ps(up, lo, hi);
    }
    return _mm512_i32gather_ps(idx, z->base, 4);
}

/* The level search of both halves of a group in lockstep, for one way of reading the table:
 * k = the largest index with lv[k] <= v (k <= top - 1), p = where v lies between lv[k] and
 * lv[k + 1], as a fraction of the gap. */
#define DQ_Z_SEARCH(GET_L, GET_I)                                                                  \
    do {                                                                                           \
        for (int step = 1 << (w - 1); step; step >>= 1) {                                          \
            __m512i st = _mm512_set1_epi32(step);                                                  \
            __m512i n0 = _mm512_add_epi32(k0, st), n1 = _mm512_add_epi32(k1, st);                  \
            __mmask16 l0 = _mm512_cmp_ps_mask(GET_L(n0), v0, _CMP_LE_OQ);                          \
            __mmask16 l1 = _mm512_cmp_ps_mask(GET_L(n1), v1, _CMP_LE_OQ);                          \
            k0 = _mm512_mask_mov_epi32(k0, l0, n0);                                                \
            k1 = _mm512_mask_mov_epi32(k1, l1, n1);                                                \
        }                                                                                          \
        k0 = _mm512_min_epi32(k0, tm1), k1 = _mm512_min_epi32(k1, tm1);                            \
        p0 = _mm512_mul_ps(_mm512_sub_ps(v0, GET_L(k0)), GET_I(k0));                               \
        p1 = _mm512_mul_ps(_mm512_sub_ps(v1, GET_L(k1)), GET_I(k1));                               \
    } while (0)

DQ_AVX512 void codec_dq_avx512_quantize_group(const dq_enc_t *c, const float *x, int cnt, float inv,
                                              int w, uint64_t a, uint32_t *planes)
{
    __mmask16 m0, m1;
    __m512 v0, v1;
    dq_z_load_scaled(x, cnt, inv, &m0, &m1, &v0, &v1);
    int top = (1 << w) - 1;
    __m512i k0 = _mm512_setzero_si512(), k1 = _mm512_setzero_si512(),
            tm1 = _mm512_set1_epi32(top - 1);
    __m512 p0, p1;
    if (w <= 4) {
        __m512 L = _mm512_loadu_ps(c->t.lv[w]), I = _mm512_loadu_ps(c->t.ig[w]);
#define DQ_GL(i) _mm512_permutexvar_ps(i, L)
#define DQ_GI(i) _mm512_permutexvar_ps(i, I)
        DQ_Z_SEARCH(DQ_GL, DQ_GI);
#undef DQ_GL
#undef DQ_GI
    } else if (w == 5) {
        __m512 L0 = _mm512_loadu_ps(c->t.lv[w]), L1 = _mm512_loadu_ps(c->t.lv[w] + 16);
        __m512 I0 = _mm512_loadu_ps(c->t.ig[w]), I1 = _mm512_loadu_ps(c->t.ig[w] + 16);
#define DQ_GL(i) _mm512_permutex2var_ps(L0, i, L1)
#define DQ_GI(i) _mm512_permutex2var_ps(I0, i, I1)
        DQ_Z_SEARCH(DQ_GL, DQ_GI);
#undef DQ_GL
#undef DQ_GI
    } else if (w == 6) {
        const float *lp = c->t.lv[w], *ip = c->t.ig[w];
        __m512 L0 = _mm512_loadu_ps(lp), L1 = _mm512_loadu_ps(lp + 16);
        __m512 L2 = _mm512_loadu_ps(lp + 32), L3 = _mm512_loadu_ps(lp + 48);
        __m512 I0 = _mm512_loadu_ps(ip), I1 = _mm512_loadu_ps(ip + 16);
        __m512 I2 = _mm512_loadu_ps(ip + 32), I3 = _mm512_loadu_ps(ip + 48);
        __m512i b5 = _mm512_set1_epi32(32);
#define DQ_GL(i)                                                                                   \
    _mm512_mask_blend_ps(_mm512_test_epi32_mask(i, b5), _mm512_permutex2var_ps(L0, i, L1),         \
                         _mm512_permutex2var_ps(L2, i, L3))
#define DQ_GI(i)                                                                                   \
    _mm512_mask_blend_ps(_mm512_test_epi32_mask(i, b5), _mm512_permutex2var_ps(I0, i, I1),         \
                         _mm512_permutex2var_ps(I2, i, I3))
        DQ_Z_SEARCH(DQ_GL, DQ_GI);
#undef DQ_GL
#undef DQ_GI
    } else if (w <= DQ_MAX_WIDTH) {
        const float *lvp = c->t.lv[w], *igp = c->t.ig[w];
#define DQ_GL(i) _mm512_i32gather_ps(i, lvp, 4)
#define DQ_GI(i) _mm512_i32gather_ps(i, igp, 4)
        DQ_Z_SEARCH(DQ_GL, DQ_GI);
#undef DQ_GL
#undef DQ_GI
    } else {
        k0 = dq_z_wide(w, v0, &p0);
        k1 = dq_z_wide(w, v1, &p1);
    }
    __mmask16 u0 = dq_z_up(c, (uint32_t)a, p0), u1 = dq_z_up(c, (uint32_t)a + 16, p1);
    __m512i one = _mm512_set1_epi32(1);
    __m512i c0 = _mm512_maskz_mov_epi32(m0, _mm512_mask_add_epi32(k0, u0, k0, one));
    __m512i cc1 = _mm512_maskz_mov_epi32(m1, _mm512_mask_add_epi32(k1, u1, k1, one));
    for (int j = 0; j < w; j++) {
        __m512i bit = _mm512_set1_epi32(1 << j);
        planes[j] = (uint32_t)_mm512_test_epi32_mask(c0, bit) |
                    (uint32_t)_mm512_test_epi32_mask(cc1, bit) << 16;
    }
}
#undef DQ_Z_SEARCH

DQ_AVX512 void codec_dq_avx512_dequantize_group(dq_tables_t t, const uint32_t *planes, int w,
                                                float s, int cnt, float *x, const float *base)
{
    __m512i code[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int j = 0; j < w; j++) {
        __m512i bit = _mm512_set1_epi32(1 << j);
        code[0] = _mm512_mask_or_epi32(code[0], (__mmask16)planes[j], code[0], bit);
        code[1] = _mm512_mask_or_epi32(code[1], (__mmask16)(planes[j] >> 16), code[1], bit);
    }
    dq_zt_t lz;
    if (w <= DQ_MAX_WIDTH)
        lz = dq_zt_load(t.lv[w], w);
    __m512 vs = _mm512_set1_ps(s), y[2];
    for (int h = 0; h < 2; h++)
        y[h] = w <= DQ_MAX_WIDTH ? _mm512_mul_ps(dq_zt_get(&lz, code[h]), vs)
                                 : dq_z_wide_values(code[h], w, vs);
    dq_z_store_group(y, cnt, x, base);
}

/* ---- a super-group's statistics and metadata, the budget split ---------------------------- */

/* dq_sg_stats with 16 lanes: fpclass finds NaN and Inf. */
DQ_AVX512 bool codec_dq_avx512_sg_stats(const float *x, size_t m, float *gmax)
{
    __mmask16 bad = 0;
    for (size_t g = 0; g * DQ_GROUP < m; g++) {
        __m512 mx = _mm512_setzero_ps();
        for (size_t h = 0; h < 2; h++) {
            size_t at = g * DQ_GROUP + 16 * h;
            __mmask16 k = (__mmask16)(at + 16 <= m ? 0xffff : at < m ? (1u << (m - at)) - 1 : 0);
            __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + at));
            bad |= _mm512_fpclass_ps_mask(a, 0x01 | 0x08 | 0x80); /* QNaN, +Inf, SNaN */
            mx = _mm512_max_ps(mx, a);
        }
        gmax[g] = _mm512_reduce_max_ps(mx);
    }
    return bad != 0;
}

/* dq_check_sg with the meta bytes in 16 lanes. */
DQ_AVX512 bool codec_dq_avx512_check_sg(const unsigned char *p, size_t m, int units)
{
    int ng = (int)dq_groups(m);
    __mmask16 lanes = (__mmask16)((1u << ng) - 1);
    __m128i meta = _mm_maskz_loadu_epi8(lanes, p + 2), hi = _mm_set1_epi8((char)0xf0);
    __m128i wm1 = _mm_and_si128(meta, _mm_set1_epi8(15));
    __mmask16 zero = _mm_mask_cmpeq_epi8_mask(lanes, _mm_and_si128(meta, hi), hi);
    if (_mm_mask_test_epi8_mask(zero, wm1, wm1))
        return false;
    __m128i sad =
        _mm_sad_epu8(_mm_maskz_add_epi8(lanes & ~zero, wm1, _mm_set1_epi8(1)), _mm_setzero_si128());
    int used = _mm_cvtsi128_si32(sad) + _mm_extract_epi16(sad, 4);
    if (used > units)
        return false;
    const unsigned char *pad = p + dq_sg_bytes(m, used), *end = p + dq_sg_bytes(m, units);
    for (; pad < end; pad += 64) {
        size_t left = (size_t)(end - pad);
        __mmask64 k = left >= 64 ? ~0ull : (1ull << left) - 1;
        __m512i b = _mm512_maskz_loadu_epi8(k, pad);
        if (_mm512_test_epi8_mask(b, b))
            return false;
    }
    return true;
}

/* The value units the budget split below gives the first nk super-groups (full ones) at t: the
 * same double operations, 8 super-groups at a time. */
DQ_AVX512 size_t codec_dq_avx512_split_units(const float *est, size_t nk, double t)
{
    __m512d vt = _mm512_set1_pd(t), one = _mm512_set1_pd(1), top = _mm512_set1_pd(DQ_WMAX);
    __m512d gps = _mm512_set1_pd(DQ_GPS);
    __m256 none = _mm256_set1_ps(-INFINITY);
    __m512i acc = _mm512_setzero_si512();
    for (size_t k = 0; k < nk; k += 8) {
        __mmask8 m = (__mmask8)(nk - k >= 8 ? 0xff : (1u << (nk - k)) - 1);
        __m256 e = _mm256_maskz_loadu_ps(m, est + k);
        m &= _mm256_cmp_ps_mask(e, none, _CMP_NEQ_OQ);
        __m512d b = _mm512_add_pd(vt, _mm512_cvtps_pd(e));
        b = _mm512_min_pd(_mm512_max_pd(b, one), top);
        acc = _mm512_mask_add_epi64(acc, m, acc, _mm512_cvttpd_epi64(_mm512_mul_pd(b, gps)));
    }
    return (size_t)_mm512_reduce_add_epi64(acc);
}

#endif /* DQ_HAVE_AVX512 */
