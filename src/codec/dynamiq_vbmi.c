/* dynamiq's loops for AVX-512 with VBMI and GFNI: whole super-groups, one width-specialized loop
 * per group, the super-group's scale, exponents and widths in 8 lanes. Every float operation is
 * dynamiq.c's, so the bytes are its portable loops' (tests/unit/test_codec_dynamiq compares
 * them). Compiled by target attributes, run only where dynamiq.c's dispatch finds the CPU able
 * (codec_dynamiq_isa == 2). */
#include "config.h"

/* No fused multiply-add anywhere here: every machine and the GPU must round alike. */
#pragma GCC optimize("fp-contract=off")

#include "codec/dynamiq_internal.h"

#ifdef DQ_HAVE_AVX512

/* Byte shuffles of the plane transposes (codec_dq_vbmi_init): with GF2P8AFFINEQB, which transposes
 * the 8x8 bit matrix of each qword, 32 codes of up to 16 bits become their bit planes in three
 * instructions and back in three. */
static struct {
    _Alignas(64) uint8_t gather[64];   /* codes (dwords) to qwords: q < 4 low bytes, q >= 4 high */
    _Alignas(64) uint8_t planes[64];   /* transposed qwords to the planes' byte order */
    _Alignas(64) uint8_t unplane[64];  /* the planes' bytes to qwords */
    _Alignas(64) uint8_t codes[2][64]; /* transposed qwords to the codes of values 0-15, 16-31 */
    _Alignas(64) uint8_t bit[64];      /* 1 << (byte % 8): the GF2P8AFFINEQB operand */
} dq_zidx;

/* The level search by buckets: v in [-1, 1] falls in bucket b = (int)((v + 1) * 64) (of 128,
 * the last one holding 1 too), and the search starts from the largest level index below every
 * v of the bucket (dq_zstart), leaving at most dq_zfix(w) levels to compare with v, all at once
 * (not one after the other as the binary search does). Where the tables would need more (or
 * are not increasing), the binary search runs (dq_zbucket false). */
#define DQ_ZB 128
static _Alignas(64) uint8_t dq_zstart[2][DQ_MAX_WIDTH + 1][DQ_ZB];
static bool dq_zbucket[2][DQ_MAX_WIDTH + 1];

static inline int dq_zfix(int w)
{
    return w <= 6 ? 1 : w == 7 ? 2 : 4;
}

/* The binary search's level index for v, in double (exact for the bucket edges). */
static int dq_zsearch(const float *lv, int w, double v)
{
    int k = 0;
    for (int step = 1 << (w - 1); step; step >>= 1)
        k += (double)lv[k + step] <= v ? step : 0;
    return k;
}

static void dq_zbucket_init(const dq_tables_t tables[2])
{
    for (int kind = 0; kind < 2; kind++) {
        dq_tables_t t = tables[kind];
        for (int w = 1; w <= DQ_MAX_WIDTH; w++) {
            const float *lv = t.lv[w];
            bool ok = true;
            for (int k = 0; k + 1 < 1 << w; k++)
                ok &= lv[k] < lv[k + 1];
            /* fl(v + 1) is within 2^-24 of v + 1: a margin of 2^-22 holds every v of bucket b */
            for (int b = 0; b < DQ_ZB && ok; b++) {
                int lo = dq_zsearch(lv, w, -1.0 + 2.0 * b / DQ_ZB - 0x1p-22);
                int hi = dq_zsearch(lv, w, -1.0 + 2.0 * (b + 1) / DQ_ZB + 0x1p-22);
                dq_zstart[kind][w][b] = (uint8_t)lo;
                ok = hi - lo <= dq_zfix(w);
            }
            dq_zbucket[kind][w] = ok;
        }
    }
}

void codec_dq_vbmi_init(dq_tables_t fitted, dq_tables_t uniform)
{
    dq_zbucket_init((const dq_tables_t[2]){fitted, uniform});
    for (int i = 0; i < 64; i++) {
        int hi = i >> 5, q = (i >> 3) & 3, k = 7 - (i & 7), j = i >> 2;
        dq_zidx.gather[i] = (uint8_t)(4 * (8 * q + k) + hi);
        dq_zidx.planes[i] = (uint8_t)(j < 8 ? 8 * (i & 3) + j : 32 + 8 * (i & 3) + j - 8);
        dq_zidx.unplane[i] = (uint8_t)(4 * (k + 8 * hi) + q);
        dq_zidx.codes[0][i] = (uint8_t)((i & 3) == 0 ? i >> 2 : (i & 3) == 1 ? 32 + (i >> 2) : 0);
        dq_zidx.codes[1][i] = (uint8_t)(dq_zidx.codes[0][i] + ((i & 3) < 2 ? 16 : 0));
        dq_zidx.bit[i] = (uint8_t)(1u << (i & 7));
    }
}

static inline __mmask64 dq_zbytes(int w)
{
    return (__mmask64)(~0ull >> (64 - 4 * w));
}

/* The 32 codes c0 (values 0-15), c1 (16-31), below 2^w, as w planes of 32 bits at o. */
DQ_ZV static DQ_INLINE void dq_z_planes_store(__m512i c0, __m512i c1, int w, unsigned char *o)
{
    __m512i a = _mm512_permutex2var_epi8(c0, _mm512_load_si512(dq_zidx.gather), c1);
    __m512i t = _mm512_gf2p8affine_epi64_epi8(_mm512_load_si512(dq_zidx.bit), a, 0);
    _mm512_mask_storeu_epi8(o, dq_zbytes(w),
                            _mm512_permutexvar_epi8(_mm512_load_si512(dq_zidx.planes), t));
}

/* The 32 codes held in the w planes at p, as dwords. */
DQ_ZV static DQ_INLINE void dq_z_planes_load(const unsigned char *p, int w, __m512i *c0,
                                             __m512i *c1)
{
    __m512i a = _mm512_permutexvar_epi8(_mm512_load_si512(dq_zidx.unplane),
                                        _mm512_maskz_loadu_epi8(dq_zbytes(w), p));
    __m512i t = _mm512_gf2p8affine_epi64_epi8(_mm512_load_si512(dq_zidx.bit), a, 0);
    const __mmask64 lo2 = 0x3333333333333333ull;
    *c0 = _mm512_maskz_permutexvar_epi8(lo2, _mm512_load_si512(dq_zidx.codes[0]), t);
    *c1 = _mm512_maskz_permutexvar_epi8(lo2, _mm512_load_si512(dq_zidx.codes[1]), t);
}

/* Entry k of the table tab of width w <= lw for 16 indices: permutes of register pairs of 32
 * entries (one for lw <= 5, so that widths 1 to 5 share their loops), then blends on the higher
 * index bits; gathers in the search of the widest (gather: true), where the tables would not
 * stay in registers. */
DQ_ZV static DQ_INLINE __m512 dq_z_lookup(const float *tab, __m512i k, int lw, bool gather)
{
    int w = lw < 5 ? 5 : lw;
    if (gather && w >= 7)
        return _mm512_i32gather_ps(k, tab, 4);
    __m512 r[8];
    int np = 1 << (w - 5);
    for (int i = 0; i < np; i++)
        r[i] = _mm512_permutex2var_ps(_mm512_loadu_ps(tab + 32 * i), k,
                                      _mm512_loadu_ps(tab + 32 * i + 16));
    for (int b = 5; np > 1; b++, np >>= 1) {
        __mmask16 up = _mm512_test_epi32_mask(k, _mm512_set1_epi32(1 << b));
        for (int i = 0; i < np / 2; i++)
            r[i] = _mm512_mask_blend_ps(up, r[2 * i], r[2 * i + 1]);
    }
    return r[0];
}

/* codec_dq_avx512_quantize_group for width w, table look-ups as for width lw (a constant; 0 for the
 * uniform widths above the tables), the planes stored at o. */
DQ_ZV static DQ_INLINE void dq_z_quantize(const dq_enc_t *c, const float *x, int cnt, float inv,
                                          int w, int lw, uint32_t a, unsigned char *o)
{
    __mmask16 m0, m1;
    __m512 v0, v1, hi = _mm512_set1_ps(1.0f);
    dq_z_load_scaled(x, cnt, inv, &m0, &m1, &v0, &v1);
    int top = (1 << w) - 1;
    __m512i k0 = _mm512_setzero_si512(), k1 = _mm512_setzero_si512();
    __m512i tm1 = _mm512_set1_epi32(top - 1);
    __m512 p0, p1;
    if (lw) {
        const float *lv = c->t.lv[w], *ig = c->t.ig[w];
        if (dq_zbucket[c->kind][w]) {
            const uint8_t *kb = dq_zstart[c->kind][w];
            __m512 nb = _mm512_set1_ps(DQ_ZB / 2);
            __m512i last = _mm512_set1_epi32(DQ_ZB - 1), one = _mm512_set1_epi32(1);
            __m512i tb0 = _mm512_load_si512(kb), tb1 = _mm512_load_si512(kb + 64);
            __m512i b0 = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_add_ps(v0, hi), nb));
            __m512i b1 = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_add_ps(v1, hi), nb));
            const __mmask64 low = 0x1111111111111111ull;
            __m512i s0 = _mm512_maskz_permutex2var_epi8(low, tb0, _mm512_min_epi32(b0, last), tb1);
            __m512i s1 = _mm512_maskz_permutex2var_epi8(low, tb0, _mm512_min_epi32(b1, last), tb1);
            __m512i vtop = _mm512_set1_epi32(top);
            k0 = s0, k1 = s1;
            for (int i = 1; i <= dq_zfix(lw); i++) {
                __m512i n0 = _mm512_min_epi32(_mm512_add_epi32(s0, _mm512_set1_epi32(i)), vtop);
                __m512i n1 = _mm512_min_epi32(_mm512_add_epi32(s1, _mm512_set1_epi32(i)), vtop);
                __mmask16 l0 = _mm512_cmp_ps_mask(dq_z_lookup(lv, n0, lw, true), v0, _CMP_LE_OQ);
                __mmask16 l1 = _mm512_cmp_ps_mask(dq_z_lookup(lv, n1, lw, true), v1, _CMP_LE_OQ);
                k0 = _mm512_mask_add_epi32(k0, l0, k0, one);
                k1 = _mm512_mask_add_epi32(k1, l1, k1, one);
            }
        } else {
            for (int step = 1 << (w - 1); step; step >>= 1) {
                __m512i st = _mm512_set1_epi32(step);
                __m512i n0 = _mm512_add_epi32(k0, st), n1 = _mm512_add_epi32(k1, st);
                __mmask16 l0 = _mm512_cmp_ps_mask(dq_z_lookup(lv, n0, lw, true), v0, _CMP_LE_OQ);
                __mmask16 l1 = _mm512_cmp_ps_mask(dq_z_lookup(lv, n1, lw, true), v1, _CMP_LE_OQ);
                k0 = _mm512_mask_mov_epi32(k0, l0, n0);
                k1 = _mm512_mask_mov_epi32(k1, l1, n1);
            }
        }
        k0 = _mm512_min_epi32(k0, tm1), k1 = _mm512_min_epi32(k1, tm1);
        p0 = _mm512_mul_ps(_mm512_sub_ps(v0, dq_z_lookup(lv, k0, lw, true)),
                           dq_z_lookup(ig, k0, lw, true));
        p1 = _mm512_mul_ps(_mm512_sub_ps(v1, dq_z_lookup(lv, k1, lw, true)),
                           dq_z_lookup(ig, k1, lw, true));
    } else {
        k0 = dq_z_wide(w, v0, &p0);
        k1 = dq_z_wide(w, v1, &p1);
    }
    __mmask16 u0 = dq_z_up(c, a, p0), u1 = dq_z_up(c, a + 16, p1);
    __m512i one = _mm512_set1_epi32(1);
    __m512i c0 = _mm512_maskz_mov_epi32(m0, _mm512_mask_add_epi32(k0, u0, k0, one));
    __m512i cc1 = _mm512_maskz_mov_epi32(m1, _mm512_mask_add_epi32(k1, u1, k1, one));
    dq_z_planes_store(c0, cc1, w, o);
}

/* The groups of a super-group of m values at x (absolute index a0), exponents e, widths w and
 * scales step[e] decided, into the value bytes at val (zeroed). */
DQ_ZV static void dq_z_quantize_sg(const dq_enc_t *c, const float *x, size_t m, const int *e,
                                   const int *w, const float *step, uint64_t a0, unsigned char *val)
{
    int ng = (int)dq_groups(m);
    for (int g = 0; g < ng; g++) {
        if (e[g] == DQ_EZERO)
            continue;
        int first = g * DQ_GROUP, cnt = (int)TDL_MIN((size_t)DQ_GROUP, m - (size_t)first);
        float inv, tmp[DQ_GROUP];
        const float *xg = codec_scaled_group(x + first, (size_t)cnt, step[e[g]], tmp, &inv);
        uint32_t a = (uint32_t)(a0 + (uint64_t)first);
        switch (w[g]) {
        case 1:
        case 2:
        case 3:
        case 4:
        case 5: dq_z_quantize(c, xg, cnt, inv, w[g], 5, a, val); break;
        case 6: dq_z_quantize(c, xg, cnt, inv, 6, 6, a, val); break;
        case 7: dq_z_quantize(c, xg, cnt, inv, 7, 7, a, val); break;
        case 8: dq_z_quantize(c, xg, cnt, inv, 8, 8, a, val); break;
        default: dq_z_quantize(c, xg, cnt, inv, w[g], 0, a, val);
        }
        val += 4 * w[g];
    }
}

/* dq_allocate's widths, not fixed, for the exponents E (DQ_EZERO for zero groups and the lanes
 * past the super-group's groups) within vb value bytes. The threshold the bisection finds is the
 * number of t in [1, 46] whose cost fits (the cost grows with t), counted for all t at once;
 * the remaining units go to the groups next in line, ordered by (exponent, index). */
DQ_ZV static __m256i dq_z_allocate(__m256i E, int vb)
{
    __mmask8 nz = _mm256_cmpneq_epi32_mask(E, _mm256_set1_epi32(DQ_EZERO));
    /* t = 1..48 in three rows of 16 lanes; the costs stay in registers */
    __m256i iota = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m256i tv0 = _mm256_add_epi16(_mm256_set1_epi16(1), iota);
    __m256i tv1 = _mm256_add_epi16(_mm256_set1_epi16(17), iota);
    __m256i tv2 = _mm256_add_epi16(_mm256_set1_epi16(33), iota);
    __m256i cost0 = _mm256_setzero_si256(), cost1 = cost0, cost2 = cost0, z16 = cost0;
    __m256i one16 = _mm256_set1_epi16(1), top16 = _mm256_set1_epi16(DQ_WMAX);
    int e[8];
    _mm256_storeu_si256((__m256i *)e, E);
#define DQ_Z_COST(tv, ev)                                                                          \
    _mm256_min_epi16(                                                                              \
        _mm256_max_epi16(_mm256_srli_epi16(_mm256_max_epi16(_mm256_sub_epi16(tv, ev), z16), 1),    \
                         one16),                                                                   \
        top16)
    for (unsigned left = nz; left; left &= left - 1) {
        __m256i ev = _mm256_set1_epi16((short)e[__builtin_ctz(left)]);
        cost0 = _mm256_add_epi16(cost0, DQ_Z_COST(tv0, ev));
        cost1 = _mm256_add_epi16(cost1, DQ_Z_COST(tv1, ev));
        cost2 = _mm256_add_epi16(cost2, DQ_Z_COST(tv2, ev));
    }
#undef DQ_Z_COST
    __m256i fits = _mm256_set1_epi16((short)(vb / 4));
    int lo = __builtin_popcount(_mm256_cmple_epi16_mask(cost0, fits)) +
             __builtin_popcount(_mm256_cmple_epi16_mask(cost1, fits)) +
             __builtin_popcount(_mm256_cmple_epi16_mask(cost2, fits) & 0x3fff);
    /* widths at lo and lo + 1 */
    __m256i one = _mm256_set1_epi32(1);
    __m256i top = _mm256_set1_epi32(DQ_WMAX), zero = _mm256_setzero_si256();
    __m256i d = _mm256_max_epi32(_mm256_sub_epi32(_mm256_set1_epi32(lo), E), zero);
    __m256i w = _mm256_maskz_min_epi32(nz, _mm256_max_epi32(_mm256_srli_epi32(d, 1), one), top);
    __m256i d1 = _mm256_max_epi32(_mm256_sub_epi32(_mm256_set1_epi32(lo + 1), E), zero);
    __m256i w1 = _mm256_min_epi32(_mm256_max_epi32(_mm256_srli_epi32(d1, 1), one), top);
    __mmask8 cand = _mm256_mask_cmpgt_epi32_mask(nz, w1, w);
    __m256i w4 = _mm256_slli_epi32(w, 2);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(w4), _mm256_extracti128_si256(w4, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    int left = vb - _mm_cvtsi128_si32(s);
    if (left < 4 || !cand)
        return w;
    /* rank of each candidate in (exponent, index) order; the first left / 4 get one more */
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i key =
        _mm256_mask_or_epi32(_mm256_set1_epi32(0x7fff), cand, _mm256_slli_epi32(E, 3), lane);
    __m256i rank = zero;
    for (int r = 1; r < 8; r++) {
        __m256i rot = _mm256_permutexvar_epi32(
            _mm256_and_si256(_mm256_add_epi32(lane, _mm256_set1_epi32(r)), _mm256_set1_epi32(7)),
            key);
        rank = _mm256_mask_add_epi32(rank, _mm256_cmplt_epi32_mask(rot, key), rank, one);
    }
    __mmask8 more = _mm256_mask_cmplt_epi32_mask(cand, rank, _mm256_set1_epi32(left / 4));
    return _mm256_mask_add_epi32(w, more, w, one);
}

/* dq_encode_sg after its NaN check: the scale, exponents, widths and meta of the super-group,
 * in 8 lanes, then its groups. */
DQ_ZV void codec_dq_vbmi_encode_sg(const dq_enc_t *c, const float *x, size_t m, const float *gmax,
                                   uint64_t a0, int units, unsigned char *o)
{
    int ng = (int)dq_groups(m);
    __mmask8 lanes = (__mmask8)((1u << ng) - 1);
    __m256 gm = _mm256_maskz_loadu_ps(lanes, gmax);
    float smax = _mm512_reduce_max_ps(_mm512_zextps256_ps512(gm));
    float S = dq_store_scale(smax, o);
    float step[16];
    _mm512_storeu_ps(
        step, _mm512_mul_ps(_mm512_set1_ps(S), _mm512_maskz_loadu_ps(0x7fff, dq_half_table)));
    __m256i E = _mm256_set1_epi32(DQ_EZERO), one = _mm256_set1_epi32(1);
    __mmask8 nz = _mm256_mask_cmp_ps_mask(lanes, gm, _mm256_setzero_ps(), _CMP_NEQ_OQ);
    if (!(c->flags & CODEC_DQ_FLAT_SCALE)) {
        /* two counts in registers, so the compares do not wait on one another */
        __m256i ea = _mm256_setzero_si256(), eb = _mm256_setzero_si256();
        for (int j = 1; j + 1 <= DQ_EMAX; j += 2) {
            ea = _mm256_mask_add_epi32(
                ea, _mm256_cmp_ps_mask(_mm256_set1_ps(step[j]), gm, _CMP_GE_OQ), ea, one);
            eb = _mm256_mask_add_epi32(
                eb, _mm256_cmp_ps_mask(_mm256_set1_ps(step[j + 1]), gm, _CMP_GE_OQ), eb, one);
        }
        if (DQ_EMAX % 2)
            ea = _mm256_mask_add_epi32(
                ea, _mm256_cmp_ps_mask(_mm256_set1_ps(step[DQ_EMAX]), gm, _CMP_GE_OQ), ea, one);
        E = _mm256_mask_mov_epi32(E, nz, _mm256_add_epi32(ea, eb));
    } else {
        E = _mm256_mask_mov_epi32(E, nz, _mm256_setzero_si256());
    }
    __m256i W;
    int e[8], w[8];
    _mm256_storeu_si256((__m256i *)e, E);
    if (c->flags & CODEC_DQ_FIXED_WIDTH) {
        dq_allocate(e, ng, 4 * units, 1, w);
        W = _mm256_maskz_loadu_epi32(lanes, w);
    } else {
        W = dq_z_allocate(E, 4 * units);
        _mm256_storeu_si256((__m256i *)w, W);
    }
    __m256i meta = _mm256_mask_or_epi32(_mm256_set1_epi32(DQ_META_ZERO), nz,
                                        _mm256_slli_epi32(E, 4), _mm256_sub_epi32(W, one));
    _mm_mask_storeu_epi8(o + 2, lanes, _mm256_cvtepi32_epi8(meta));
    dq_z_quantize_sg(c, x, m, e, w, step, a0, o + 2 + ng);
}

/* codec_dq_avx512_dequantize_group for width w, look-ups as for width lw (as dq_z_quantize), the
 * planes read at p. */
DQ_ZV static DQ_INLINE void dq_z_dequantize(dq_tables_t t, const unsigned char *p, int w, int lw,
                                            float s, int cnt, float *x, const float *base)
{
    __m512i code[2];
    dq_z_planes_load(p, w, &code[0], &code[1]);
    __m512 vs = _mm512_set1_ps(s), y[2];
    for (int h = 0; h < 2; h++)
        y[h] = lw ? _mm512_mul_ps(dq_z_lookup(t.lv[w], code[h], lw, false), vs)
                  : dq_z_wide_values(code[h], w, vs);
    dq_z_store_group(y, cnt, x, base);
}

/* The non-zero groups of dq_decode_sg: meta and val as there, S finite. */
DQ_ZV void codec_dq_vbmi_decode_sg(dq_tables_t t, const unsigned char *meta,
                                   const unsigned char *val, size_t m, float S, float *x,
                                   const float *base)
{
    int ng = (int)dq_groups(m);
    for (int g = 0; g < ng; g++) {
        int first = g * DQ_GROUP, cnt = (int)TDL_MIN((size_t)DQ_GROUP, m - (size_t)first);
        int e = meta[g] >> 4, w = (meta[g] & 15) + 1;
        const float *b = base ? base + first : NULL;
        if (e == DQ_EZERO) { /* the value 0: base + 0 is base, but -0 + 0 is +0 */
            for (int i = 0; i < cnt; i++)
                x[first + i] = b ? b[i] + 0.0f : 0.0f;
            continue;
        }
        float s = S * dq_half_pow(e);
        switch (w) {
        case 1:
        case 2:
        case 3:
        case 4:
        case 5: dq_z_dequantize(t, val, w, 5, s, cnt, x + first, b); break;
        case 6: dq_z_dequantize(t, val, 6, 6, s, cnt, x + first, b); break;
        case 7: dq_z_dequantize(t, val, 7, 7, s, cnt, x + first, b); break;
        case 8: dq_z_dequantize(t, val, 8, 8, s, cnt, x + first, b); break;
        default: dq_z_dequantize(t, val, w, 0, s, cnt, x + first, b);
        }
        val += 4 * w;
    }
}

#endif /* DQ_HAVE_AVX512 */
