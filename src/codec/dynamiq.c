/* dynamiq: grouped non-uniform quantization for the multi-hop all-reduce (DynamiQ, arXiv
 * 2602.08923), designed and measured in doc/dynamiq.md.
 *
 * Values are cut into super-groups of 256, and those into 8 groups of 32. A super-group stores
 * its largest magnitude rounded up to bf16 (S); a group stores a relative exponent e in half
 * octaves, so its scale is s = S * 2^(-e/2), the smallest such step at or above the group's own
 * largest magnitude (hierarchical scaling: 16 bits per 256 values plus 4 per 32), and a width w
 * of 1 to 16 bits (e = 15 marks a group of zeros, which costs no value bits). Each value x becomes
 * the index of one of 2^w non-uniform levels in [-1, 1] (dynamiq_levels.h, fitted by
 * dynamiq_levels.py) between which x / s lies, rounded stochastically (unbiased) or to nearest.
 *
 * Widths, at two levels by reverse water-filling (the expected error of a block of scale s at w
 * bits is about s^2 4^-w, so w = t + log2 s for the largest t the budget allows): the encoding's
 * budget is split among super-groups by their largest magnitudes (super-group statistics; for
 * the fused pass, of the sum), and a super-group's share among its groups by their exponents,
 * the remainder going to the largest groups. The encoding's budget itself depends on the hop:
 * partial-sum awareness (dq_hop_bits).
 *
 * Correlated rounding: the random word of value i is U(collective, i) + o * 0x9E3779B9, where U
 * is shared by every rank and o numbers (hop, rank): each rounding is uniform on its own, so
 * unbiased, but the roundings of one coordinate at different ranks and hops are stratified
 * (golden-ratio offsets), so their errors partly cancel in the sum.
 *
 * Layout (little-endian): header [u8 version 3][u8 levels: 0 fitted, 1 uniform][u16 budget in
 * 1/256 bits per value], the units table [u8 per super-group: its value units, 4 bytes each],
 * then per super-group [bf16 S][u8 meta per group: e << 4 | (w - 1), 0xf0 for zeros][values:
 * per group, w bit planes of one u32 each (bit i of plane j is bit j of value i's level index),
 * groups one after the other, zeros after the last], then zeros up to the budget's size. A
 * short last super-group has ceil(m / 32) groups; a short last group is padded with zero codes.
 * A super-group holding NaN or Inf stores S = NaN and decodes to NaN. The table puts every
 * super-group at a known offset before any is decoded, so a GPU encodes and decodes them all
 * at once (cuda/dynamiq.cu). */
#include "config.h"

/* No fused multiply-add anywhere here: every machine and the GPU must round alike. */
#pragma GCC optimize("fp-contract=off")

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"
#include "codec/dynamiq_format.h"
#include "codec/dynamiq_levels.h"

#define DQ_DEFAULT_BITS 5.0

typedef struct dq_tables {
    const float (*lv)[256];
    const float (*ig)[256];
} dq_tables_t;

static float dq_uniform_lv[DQ_MAX_WIDTH + 1][256], dq_uniform_ig[DQ_MAX_WIDTH + 1][256];
static pthread_once_t dq_uniform_once = PTHREAD_ONCE_INIT;

static void dq_uniform_init(void)
{
    for (int w = 1; w <= DQ_MAX_WIDTH; w++) {
        int top = (1 << w) - 1;
        for (int k = 0; k <= top; k++)
            dq_uniform_lv[w][k] = -1.0f + 2.0f * (float)k / (float)top;
        for (int k = 0; k < top; k++)
            dq_uniform_ig[w][k] = 1.0f / (dq_uniform_lv[w][k + 1] - dq_uniform_lv[w][k]);
    }
}

static dq_tables_t dq_tables(int kind)
{
    if (kind == 1) {
        pthread_once(&dq_uniform_once, dq_uniform_init);
        return (dq_tables_t){dq_uniform_lv, dq_uniform_ig};
    }
    return (dq_tables_t){dq_levels, dq_inv_gap};
}

static unsigned dq_flags(const void *cfg)
{
    return cfg ? ((const codec_config_t *)cfg)->flags : 0;
}

static double dq_bits(const void *cfg)
{
    double b = cfg ? ((const codec_config_t *)cfg)->bits : 0;
    return b > 0 ? b : DQ_DEFAULT_BITS;
}

/* Stochastic unless nearest was asked for. */
static bool dq_stochastic(const void *cfg)
{
    return !cfg || ((const codec_config_t *)cfg)->round != CODEC_ROUND_NEAREST;
}

/* fmaxf and clamping without the library call (NaN is caught before these matter). */
static inline float dq_max(float a, float b)
{
    return b > a ? b : a;
}

static inline float dq_clamp1(float v)
{
    return v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
}

/* 2^(-e/2) */
static inline float dq_half_pow(int e)
{
    float r = codec_pow2f(-(e >> 1));
    return (e & 1) ? r * 0x1.6a09e6p-1f : r;
}

/* dq_half_pow(e) for every exponent */
static const float dq_half_table[DQ_EMAX + 1] = {
    0x1p0f,  0x1.6a09e6p-1f, 0x1p-1f, 0x1.6a09e6p-2f, 0x1p-2f, 0x1.6a09e6p-3f, 0x1p-3f,
    0x1.6a09e6p-4f, 0x1p-4f, 0x1.6a09e6p-5f, 0x1p-5f, 0x1.6a09e6p-6f, 0x1p-6f,
    0x1.6a09e6p-7f, 0x1p-7f,
};

/* ---- the budget of a hop (partial-sum awareness) -------------------------------------------- */

/* Bits per value, metadata included, for an encoding of data summing `contributions` of
 * `group_size` ranks. The final sum (contributions == group_size) is what every member keeps and
 * half of the all-reduce's traffic; the partial sums before it are the other half, and their
 * errors are smaller the fewer contributions they hold. An all-reduce averages `bits` when the
 * intermediate and final budgets average it, which dq_hop_bits keeps for ring and butterfly. */
/* Partial sums of c < p contributions get 0.5 log2(c) bits more than the first hop; the final
 * sum half a bit less than the last partial sum would (it is half the traffic). Measured on DiT
 * gradients and heavy-tailed vectors (doc/dynamiq.md): 1 to 10% lower vNMSE on a ring than a
 * flat budget; steeper ramps (log2 c, 1.5 log2 c) are worse. */
static double dq_hop_offset(int c, int p)
{
    return c < p ? 0.5 * log2((double)c) : 0.5 * log2((double)p) - 0.5;
}

static double dq_hop_bits(const void *cfg, const codec_where_t *w)
{
    double b = dq_bits(cfg);
    if ((dq_flags(cfg) & CODEC_DQ_FLAT_HOPS) || !w || w->group_size < 2)
        return b;
    int p = w->group_size, c = TDL_MAX(1, TDL_MIN(w->contributions, p));
    double mean = 0; /* the ring's traffic-weighted mean offset */
    for (int k = 1; k < p; k++)
        mean += dq_hop_offset(k, p);
    mean = (mean + (p - 1) * dq_hop_offset(p, p)) / (2.0 * (p - 1));
    return b - mean + dq_hop_offset(c, p);
}

/* A super-group of m values: [bf16 S][meta per group][4 * units value bytes]; its units are in
 * the table after the header. */
static size_t dq_groups(size_t m)
{
    return (m + DQ_GROUP - 1) / DQ_GROUP;
}

static size_t dq_sg_bytes(size_t m, int units)
{
    return 2 + dq_groups(m) + 4 * (size_t)units;
}

static size_t dq_nsg(size_t n)
{
    return (n + DQ_SUPER - 1) / DQ_SUPER;
}

/* Budget in 1/256 bits per value as the header stores it. */
static int dq_bits_code(double bits)
{
    long v = (long)floor(bits * 256.0); /* down: an all-reduce never exceeds its budget */
    return (int)(v < DQ_MIN_BITS256 ? DQ_MIN_BITS256 : v > DQ_MAX_BITS256 ? DQ_MAX_BITS256 : v);
}

/* Encoded size of n values at a budget of code/256 bits per value: every super-group fits at
 * one bit per value (the smallest budget is above that), the rest is padding. */
static size_t dq_size(size_t n, int code)
{
    size_t want = (n * (size_t)code + 2047) / 2048;
    size_t least = dq_nsg(n) + n / DQ_SUPER * dq_sg_bytes(DQ_SUPER, DQ_GPS) +
                   (n % DQ_SUPER ? dq_sg_bytes(n % DQ_SUPER, (int)dq_groups(n % DQ_SUPER)) : 0);
    return DQ_HEADER + TDL_MAX(want, least);
}

/* ---- random words ----------------------------------------------------------------------- */

static inline uint32_t dq_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* Word of the value at absolute index a: fmix32(a * golden + key) + offset. */
typedef struct dq_rand {
    uint32_t key, offset;
} dq_rand_t;

static dq_rand_t dq_rand_of(const void *cfg, const codec_where_t *w)
{
    dq_rand_t r = {0, 0};
    if (!w)
        return r;
    if (dq_flags(cfg) & CODEC_DQ_INDEPENDENT) {
        r.key = (uint32_t)codec_mix64(w->seed ^ codec_where_stream(w));
    } else {
        uint32_t members = w->group_size > 0 ? (uint32_t)w->group_size : 65536u;
        r.key = (uint32_t)codec_mix64(w->seed ^ codec_mix64(w->collective ^ 0x6471ull));
        r.offset = ((uint32_t)w->hop * members + (uint32_t)w->rank) * DQ_GOLDEN;
    }
    return r;
}

/* ---- one super-group -------------------------------------------------------------------- */

/* Widths above the tables' use 2^w uniform levels: level k is -1 + k * 2 / (2^w - 1). */
static inline float dq_wide_inv_step(int w)
{
    return (float)((1 << w) - 1) * 0.5f;
}

static inline float dq_wide_level(int w, int k)
{
    return -1.0f + (float)k * (2.0f / (float)((1 << w) - 1));
}

typedef struct dq_enc {
    dq_tables_t t;
    int kind; /* of the tables: 0 fitted, 1 uniform */
    unsigned flags;
    bool stochastic;
    dq_rand_t rand;
} dq_enc_t;

/* The hot loops, written lane by lane over the 32 values of a group so the compiler vectorizes
 * them (gathers for the table look-ups where AVX2 has them); every lane computes exactly what
 * the scalar expression would, so all clones give the same bytes. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define DQ_CLONES                                                                                  \
    __attribute__((target_clones("avx2", "default"), optimize("O3", "fp-contract=off")))
#else
#define DQ_CLONES
#endif

/* The super-group's scale: its largest magnitude rounded up to a bf16 (at most the largest
 * finite one), stored at o; answers it as a float. */
static inline float dq_store_scale(float smax, unsigned char *o)
{
    uint32_t u = codec_f32_bits(smax);
    u = (u >> 16) + ((u & 0xffffu) != 0);
    if (u >= 0x7f80u)
        u = 0x7f7fu; /* the largest finite bf16 */
    codec_store_le16(o, (uint16_t)u);
    return codec_bits_f32(u << 16);
}

/* The GPU (dynamiq_format.h) scales tiny groups as codec_scaled_group does. */
_Static_assert(DQ_TINY_SCALE == CODEC_TINY_SCALE && DQ_TINY_PRE == CODEC_TINY_PRE,
               "dynamiq's tiny-scale constants differ from the codecs'");

/* Level indices of cnt <= 32 values x scaled by inv, at width w, as w bit planes. */
DQ_CLONES static void dq_quantize_group(const dq_enc_t *c, const float *x, int cnt, float inv,
                                        int w, uint64_t a, uint32_t *planes)
{
    float v[DQ_GROUP], p[DQ_GROUP];
    int32_t k[DQ_GROUP];
    uint32_t code[DQ_GROUP];
    for (int i = 0; i < DQ_GROUP; i++)
        v[i] = dq_clamp1((i < cnt ? x[i] : 0.0f) * inv);
    int top = (1 << w) - 1;
    if (w <= DQ_MAX_WIDTH) {
        const float *lv = c->t.lv[w], *ig = c->t.ig[w];
        for (int i = 0; i < DQ_GROUP; i++)
            k[i] = 0;
        /* branch-free binary search: the largest k with lv[k] <= v */
        for (int step = 1 << (w - 1); step; step >>= 1)
            for (int i = 0; i < DQ_GROUP; i++)
                k[i] += lv[k[i] + step] <= v[i] ? step : 0;
        for (int i = 0; i < DQ_GROUP; i++) {
            k[i] = k[i] < top - 1 ? k[i] : top - 1;
            p[i] = (v[i] - lv[k[i]]) * ig[k[i]];
        }
    } else {
        float is = dq_wide_inv_step(w), st = 2.0f / (float)top;
        for (int i = 0; i < DQ_GROUP; i++) {
            int32_t q = (int32_t)((v[i] + 1.0f) * is);
            q = q < 0 ? 0 : q > top - 1 ? top - 1 : q;
            k[i] = q;
            p[i] = (v[i] - (-1.0f + (float)q * st)) * is;
        }
    }
    if (c->stochastic) {
        uint32_t key = c->rand.key, off = c->rand.offset, a32 = (uint32_t)a;
        for (int i = 0; i < DQ_GROUP; i++) {
            uint32_t r = dq_fmix32((a32 + (uint32_t)i) * DQ_GOLDEN + key) + off;
            code[i] = (uint32_t)k[i] + ((float)(r >> 8) * 0x1.0p-24f < p[i]);
        }
    } else {
        for (int i = 0; i < DQ_GROUP; i++)
            code[i] = (uint32_t)k[i] + (p[i] > 0.5f);
    }
    for (int i = 0; i < DQ_GROUP; i++)
        code[i] = i < cnt ? code[i] : 0;
    for (int j = 0; j < w; j++) {
        uint32_t plane = 0;
        for (int i = 0; i < DQ_GROUP; i++)
            plane |= ((code[i] >> j) & 1u) << i;
        planes[j] = plane;
    }
}

/* The values of cnt <= 32 codes held in w bit planes, times s, into x: x = base + value, or the
 * value alone when base is NULL (base may be x). */
DQ_CLONES static void dq_dequantize_group(dq_tables_t t, const uint32_t *planes, int w, float s,
                                          int cnt, float *x, const float *base)
{
    uint32_t code[DQ_GROUP];
    float y[DQ_GROUP];
    for (int i = 0; i < DQ_GROUP; i++)
        code[i] = 0;
    for (int j = 0; j < w; j++)
        for (int i = 0; i < DQ_GROUP; i++)
            code[i] |= ((planes[j] >> i) & 1u) << j;
    if (w <= DQ_MAX_WIDTH) {
        const float *lv = t.lv[w];
        for (int i = 0; i < DQ_GROUP; i++)
            y[i] = lv[code[i]] * s;
    } else {
        float st = 2.0f / (float)((1 << w) - 1);
        for (int i = 0; i < DQ_GROUP; i++)
            y[i] = (-1.0f + (float)code[i] * st) * s;
    }
    if (base)
        for (int i = 0; i < cnt; i++)
            x[i] = base[i] + y[i];
    else
        for (int i = 0; i < cnt; i++)
            x[i] = y[i];
}

/* The largest magnitude of each group of the m <= 256 values x; answers whether one is NaN or
 * Inf (the maxima are then meaningless). */
DQ_CLONES static bool dq_sg_stats_portable(const float *x, size_t m, float *gmax)
{
    uint32_t bad = 0;
    for (size_t g = 0; g * DQ_GROUP < m; g++) {
        float mx = 0;
        size_t end = TDL_MIN(m, (g + 1) * DQ_GROUP);
        for (size_t i = g * DQ_GROUP; i < end; i++) {
            float a = fabsf(x[i]);
            uint32_t u;
            memcpy(&u, &a, 4);
            bad |= u >= 0x7f800000u;
            mx = a > mx ? a : mx;
        }
        gmax[g] = mx;
    }
    return bad != 0;
}

/* ---- AVX-512: the same two loops with in-register tables ---------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define DQ_HAVE_AVX512 1
#define DQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

#define DQ_INLINE inline __attribute__((always_inline))

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
    const __m512i jg = _mm512_mullo_epi32( /* constants: folded at compile time */
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int32_t)DQ_GOLDEN));
    __m512i r = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(a * DQ_GOLDEN + c->rand.key)), jg);
    r = _mm512_xor_si512(r, _mm512_srli_epi32(r, 16));
    r = _mm512_mullo_epi32(r, _mm512_set1_epi32((int32_t)0x85ebca6bu));
    r = _mm512_xor_si512(r, _mm512_srli_epi32(r, 13));
    r = _mm512_mullo_epi32(r, _mm512_set1_epi32((int32_t)0xc2b2ae35u));
    r = _mm512_xor_si512(r, _mm512_srli_epi32(r, 16));
    r = _mm512_add_epi32(r, _mm512_set1_epi32((int32_t)c->rand.offset));
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)), _mm512_set1_ps(0x1.0p-24f));
    return _mm512_cmp_ps_mask(f, p, _CMP_LT_OQ);
}

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
            __mmask16 l0 = _mm512_cmp_ps_mask(GET_L(n0), v0, _CMP_LE_OQ);                         \
            __mmask16 l1 = _mm512_cmp_ps_mask(GET_L(n1), v1, _CMP_LE_OQ);                         \
            k0 = _mm512_mask_mov_epi32(k0, l0, n0);                                                \
            k1 = _mm512_mask_mov_epi32(k1, l1, n1);                                                \
        }                                                                                          \
        k0 = _mm512_min_epi32(k0, tm1), k1 = _mm512_min_epi32(k1, tm1);                            \
        p0 = _mm512_mul_ps(_mm512_sub_ps(v0, GET_L(k0)), GET_I(k0));                               \
        p1 = _mm512_mul_ps(_mm512_sub_ps(v1, GET_L(k1)), GET_I(k1));                               \
    } while (0)

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

DQ_AVX512 static void dq_quantize_group_avx512(const dq_enc_t *c, const float *x, int cnt,
                                               float inv, int w, uint64_t a, uint32_t *planes)
{
    __mmask16 m0, m1;
    __m512 v0, v1;
    dq_z_load_scaled(x, cnt, inv, &m0, &m1, &v0, &v1);
    int top = (1 << w) - 1;
    __m512i k0 = _mm512_setzero_si512(), k1 = _mm512_setzero_si512(), tm1 = _mm512_set1_epi32(top - 1);
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

DQ_AVX512 static void dq_dequantize_group_avx512(dq_tables_t t, const uint32_t *planes, int w,
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
#endif

/* ---- AVX-512 with VBMI and GFNI: whole super-groups, one width-specialized loop per group ---- */

#ifdef DQ_HAVE_AVX512
#define DQ_ZV __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,gfni")))
/* Byte shuffles of the plane transposes (dq_zidx_init): with GF2P8AFFINEQB, which transposes
 * the 8x8 bit matrix of each qword, 32 codes of up to 16 bits become their bit planes in three
 * instructions and back in three. */
static struct {
    _Alignas(64) uint8_t gather[64]; /* codes (dwords) to qwords: q < 4 low bytes, q >= 4 high */
    _Alignas(64) uint8_t planes[64]; /* transposed qwords to the planes' byte order */
    _Alignas(64) uint8_t unplane[64]; /* the planes' bytes to qwords */
    _Alignas(64) uint8_t codes[2][64]; /* transposed qwords to the codes of values 0-15, 16-31 */
    _Alignas(64) uint8_t bit[64];    /* 1 << (byte % 8): the GF2P8AFFINEQB operand */
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

static void dq_zbucket_init(void)
{
    for (int kind = 0; kind < 2; kind++) {
        dq_tables_t t = dq_tables(kind);
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

static void dq_zidx_init(void)
{
    dq_zbucket_init();
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
    _mm512_mask_storeu_epi8(o, dq_zbytes(w), _mm512_permutexvar_epi8(_mm512_load_si512(dq_zidx.planes), t));
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

/* dq_quantize_group_avx512 for width w, table look-ups as for width lw (a constant; 0 for the
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
                                   const int *w, const float *step, uint64_t a0,
                                   unsigned char *val)
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
        case 1: case 2: case 3: case 4: case 5:
            dq_z_quantize(c, xg, cnt, inv, w[g], 5, a, val);
            break;
        case 6:
            dq_z_quantize(c, xg, cnt, inv, 6, 6, a, val);
            break;
        case 7:
            dq_z_quantize(c, xg, cnt, inv, 7, 7, a, val);
            break;
        case 8:
            dq_z_quantize(c, xg, cnt, inv, 8, 8, a, val);
            break;
        default:
            dq_z_quantize(c, xg, cnt, inv, w[g], 0, a, val);
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
    __m256i w = _mm256_maskz_min_epi32(
        nz, _mm256_max_epi32(_mm256_srli_epi32(d, 1), one), top);
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
    __m256i key = _mm256_mask_or_epi32(_mm256_set1_epi32(0x7fff), cand,
                                       _mm256_slli_epi32(E, 3), lane);
    __m256i rank = zero;
    for (int r = 1; r < 8; r++) {
        __m256i rot = _mm256_permutexvar_epi32(_mm256_and_si256(_mm256_add_epi32(lane,
                                               _mm256_set1_epi32(r)), _mm256_set1_epi32(7)), key);
        rank = _mm256_mask_add_epi32(rank, _mm256_cmplt_epi32_mask(rot, key), rank, one);
    }
    __mmask8 more = _mm256_mask_cmplt_epi32_mask(cand, rank, _mm256_set1_epi32(left / 4));
    return _mm256_mask_add_epi32(w, more, w, one);
}

/* dq_encode_sg after its NaN check: the scale, exponents, widths and meta of the super-group,
 * in 8 lanes, then its groups. */
DQ_ZV static void dq_z_encode_sg(const dq_enc_t *c, const float *x, size_t m, const float *gmax,
                                 uint64_t a0, int units, unsigned char *o)
{
    int ng = (int)dq_groups(m);
    __mmask8 lanes = (__mmask8)((1u << ng) - 1);
    __m256 gm = _mm256_maskz_loadu_ps(lanes, gmax);
    float smax = _mm512_reduce_max_ps(_mm512_zextps256_ps512(gm));
    float S = dq_store_scale(smax, o);
    float step[16];
    _mm512_storeu_ps(step, _mm512_mul_ps(_mm512_set1_ps(S),
                                         _mm512_maskz_loadu_ps(0x7fff, dq_half_table)));
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

/* dq_dequantize_group_avx512 for width w, look-ups as for width lw (as dq_z_quantize), the
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
DQ_ZV static void dq_z_decode_sg(dq_tables_t t, const unsigned char *meta,
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
        case 1: case 2: case 3: case 4: case 5:
            dq_z_dequantize(t, val, w, 5, s, cnt, x + first, b);
            break;
        case 6:
            dq_z_dequantize(t, val, 6, 6, s, cnt, x + first, b);
            break;
        case 7:
            dq_z_dequantize(t, val, 7, 7, s, cnt, x + first, b);
            break;
        case 8:
            dq_z_dequantize(t, val, 8, 8, s, cnt, x + first, b);
            break;
        default:
            dq_z_dequantize(t, val, w, 0, s, cnt, x + first, b);
        }
        val += 4 * w;
    }
}
#endif

#ifdef DQ_HAVE_AVX512
/* dq_sg_stats with 16 lanes: fpclass finds NaN and Inf. */
DQ_AVX512 static bool dq_sg_stats_avx512(const float *x, size_t m, float *gmax)
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
#endif

/* Which code runs the loops: the best the CPU has (2: AVX-512 with VBMI and GFNI, whole
 * super-groups; 1: AVX-512, group by group; 0: lane by lane), unless TIDAL_DYNAMIQ_ISA names a
 * lesser one, "avx512" or "portable" (for tests and comparisons). */
static int dq_isa = -1;
static pthread_once_t dq_isa_once = PTHREAD_ONCE_INIT;

/* The best of the loops this CPU can run. */
static int dq_isa_best(void)
{
#ifdef DQ_HAVE_AVX512
    if (!codec_cpu_avx512())
        return 0;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("gfni") ? 2 : 1;
#else
    return 0;
#endif
}

static void dq_isa_init(void)
{
    const char *env = getenv("TIDAL_DYNAMIQ_ISA");
    int best = dq_isa_best();
    dq_isa = env && !strcmp(env, "portable") ? 0
             : env && !strcmp(env, "avx512") ? TDL_MIN(best, 1)
                                             : best;
#ifdef DQ_HAVE_AVX512
    dq_zidx_init();
#endif
}

int codec_dynamiq_isa(int isa)
{
    pthread_once(&dq_isa_once, dq_isa_init);
    int was = dq_isa;
    if (isa >= 0 && isa <= dq_isa_best())
        dq_isa = isa;
    return was;
}

static void dq_quantize(const dq_enc_t *c, const float *x, int cnt, float inv, int w, uint64_t a,
                        uint32_t *planes)
{
#ifdef DQ_HAVE_AVX512
    if (dq_isa >= 1) {
        dq_quantize_group_avx512(c, x, cnt, inv, w, a, planes);
        return;
    }
#endif
    dq_quantize_group(c, x, cnt, inv, w, a, planes);
}

static void dq_dequantize(dq_tables_t t, const uint32_t *planes, int w, float s, int cnt, float *x,
                          const float *base)
{
#ifdef DQ_HAVE_AVX512
    if (dq_isa >= 1) {
        dq_dequantize_group_avx512(t, planes, w, s, cnt, x, base);
        return;
    }
#endif
    dq_dequantize_group(t, planes, w, s, cnt, x, base);
}

static bool dq_sg_stats(const float *x, size_t m, float *gmax)
{
#ifdef DQ_HAVE_AVX512
    if (dq_isa >= 1)
        return dq_sg_stats_avx512(x, m, gmax);
#endif
    return dq_sg_stats_portable(x, m, gmax);
}

/* Encodes m <= 256 values x (absolute index a0 of x[0]), whose group maxima are gmax (bad: one
 * is NaN or Inf), at o, within `units` value units (4 bytes each: one bit per value of a group);
 * o is zeroed. */
static void dq_encode_sg(const dq_enc_t *c, const float *x, size_t m, const float *gmax,
                         bool bad, uint64_t a0, int units, unsigned char *o)
{
    int ng = (int)dq_groups(m);
    unsigned char *meta = o + 2, *val = o + 2 + ng;
    memset(meta, DQ_META_ZERO, (size_t)ng);
    if (bad) {
        codec_store_le16(o, 0x7fc0);
        return;
    }
#ifdef DQ_HAVE_AVX512
    if (dq_isa == 2) {
        dq_z_encode_sg(c, x, m, gmax, a0, units, o);
        return;
    }
#endif
    float smax = 0;
    for (int g = 0; g < ng; g++)
        smax = dq_max(smax, gmax[g]);
    float S = dq_store_scale(smax, o);
    int e[DQ_GPS], w[DQ_GPS];
    float step[DQ_EMAX + 1]; /* the scales S 2^(-e/2), decreasing with e */
    for (int j = 0; j <= DQ_EMAX; j++)
        step[j] = S * dq_half_table[j];
    for (int g = 0; g < ng; g++) {
        /* the largest e whose scale is still >= gmax: how many of the steps below S are */
        int eg = 0;
        for (int j = 1; j <= DQ_EMAX; j++)
            eg += step[j] >= gmax[g];
        e[g] = gmax[g] == 0 ? DQ_EZERO : (c->flags & CODEC_DQ_FLAT_SCALE) ? 0 : eg;
    }
    dq_allocate(e, ng, 4 * units, (c->flags & CODEC_DQ_FIXED_WIDTH) != 0, w);
    for (int g = 0; g < ng; g++) {
        if (e[g] == DQ_EZERO)
            continue;
        int wg = w[g];
        meta[g] = (unsigned char)(e[g] << 4 | (wg - 1));
        float s = S * dq_half_pow(e[g]);
        uint32_t planes[DQ_WMAX];
        size_t first = (size_t)g * DQ_GROUP, cnt = TDL_MIN((size_t)DQ_GROUP, m - first);
        float inv, tmp[DQ_GROUP];
        const float *xg = codec_scaled_group(x + first, cnt, s, tmp, &inv);
        dq_quantize(c, xg, (int)cnt, inv, wg, a0 + first, planes);
        for (int j = 0; j < wg; j++)
            codec_store_le32(val + 4 * j, planes[j]);
        val += 4 * wg;
    }
}

#ifdef DQ_HAVE_AVX512
/* dq_check_sg with the meta bytes in 16 lanes. */
DQ_AVX512 static bool dq_check_sg_avx512(const unsigned char *p, size_t m, int units)
{
    int ng = (int)dq_groups(m);
    __mmask16 lanes = (__mmask16)((1u << ng) - 1);
    __m128i meta = _mm_maskz_loadu_epi8(lanes, p + 2), hi = _mm_set1_epi8((char)0xf0);
    __m128i wm1 = _mm_and_si128(meta, _mm_set1_epi8(15));
    __mmask16 zero = _mm_mask_cmpeq_epi8_mask(lanes, _mm_and_si128(meta, hi), hi);
    if (_mm_mask_test_epi8_mask(zero, wm1, wm1))
        return false;
    __m128i sad = _mm_sad_epu8(_mm_maskz_add_epi8(lanes & ~zero, wm1, _mm_set1_epi8(1)),
                               _mm_setzero_si128());
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
#endif

/* Whether the super-group of m values at p, given `units`, is possible: widths within its units,
 * no width on a group of zeros, zeros in the value bytes its groups left unused. */
static bool dq_check_sg(const unsigned char *p, size_t m, int units)
{
#ifdef DQ_HAVE_AVX512
    if (dq_isa >= 1)
        return dq_check_sg_avx512(p, m, units);
#endif
    int ng = (int)dq_groups(m), used = 0;
    for (int g = 0; g < ng; g++) {
        int e = p[2 + g] >> 4, w = (p[2 + g] & 15) + 1;
        if (e == DQ_EZERO && (p[2 + g] & 15))
            return false;
        used += e == DQ_EZERO ? 0 : w;
    }
    if (used > units)
        return false;
    const unsigned char *pad = p + dq_sg_bytes(m, used), *end = p + dq_sg_bytes(m, units);
    while (pad < end) /* what the groups left of the units stays zero */
        if (*pad++)
            return false;
    return true;
}

/* Decodes the super-group of m values at p (checked) into x: x = base + decoded, or the decoded
 * values alone when base is NULL (base may be x). */
static void dq_decode_sg(dq_tables_t t, const unsigned char *p, size_t m, float *x,
                         const float *base)
{
    int ng = (int)dq_groups(m);
    const unsigned char *meta = p + 2, *val = p + 2 + ng;
    float S = codec_bits_f32((uint32_t)codec_load_le16(p) << 16);
    if (isnan(S)) {
        for (size_t i = 0; i < m; i++)
            x[i] = base ? base[i] + NAN : NAN;
        return;
    }
#ifdef DQ_HAVE_AVX512
    if (dq_isa == 2) {
        dq_z_decode_sg(t, meta, val, m, S, x, base);
        return;
    }
#endif
    for (int g = 0; g < ng; g++) {
        size_t first = (size_t)g * DQ_GROUP, cnt = TDL_MIN((size_t)DQ_GROUP, m - first);
        int e = meta[g] >> 4, w = (meta[g] & 15) + 1;
        if (e == DQ_EZERO) { /* the value 0: base + 0 is base, but -0 + 0 is +0 */
            for (size_t i = 0; i < cnt; i++)
                x[first + i] = base ? base[first + i] + 0.0f : 0.0f;
            continue;
        }
        uint32_t planes[DQ_WMAX];
        for (int j = 0; j < w; j++)
            planes[j] = codec_load_le32(val + 4 * j);
        val += 4 * w;
        dq_dequantize(t, planes, w, S * dq_half_pow(e), (int)cnt, x + first,
                      base ? base + first : NULL);
    }
}

/* ---- the budget across super-groups ------------------------------------------------------ */

/* log2(x) for x > 0 to within 0.09, from the float's bits alone: the same on every machine
 * (and on the GPU), unlike a libm call. */
static inline float dq_log2_bits(float x)
{
    return (float)((int32_t)codec_f32_bits(x) - 0x3f800000) * 0x1.0p-23f;
}

#ifdef DQ_HAVE_AVX512
/* The value units the budget split below gives the first nk super-groups (full ones) at t: the
 * same double operations, 8 super-groups at a time. */
DQ_AVX512 static size_t dq_split_units_avx512(const float *est, size_t nk, double t)
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
#endif

/* Value units for each super-group from its largest magnitude: reverse water-filling, bits per
 * value t + log2(est) clamped to [1, 16], for the largest t whose total fits `budget` bytes
 * (the units table and super-group overheads included). Zero estimates get no units. est is
 * overwritten with the logarithms. */
static void dq_split_budget(float *est, size_t n, size_t budget, unsigned flags,
                            unsigned char *units)
{
    size_t nsg = dq_nsg(n), fixed = nsg;
    for (size_t k = 0; k < nsg; k++)
        fixed += dq_sg_bytes(TDL_MIN((size_t)DQ_SUPER, n - k * DQ_SUPER), 0);
    /* lo must fit (every super-group at one bit per value), hi need not */
    bool flat = flags & CODEC_DQ_EVEN_SPLIT;
    float lmax = -INFINITY;
    for (size_t k = 0; k < nsg; k++) {
        est[k] = est[k] > 0 ? (flat ? 0.0f : dq_log2_bits(est[k])) : -INFINITY;
        lmax = dq_max(lmax, est[k]);
    }
    double lo = 0, hi = DQ_WMAX + 1;
    if (lmax > -INFINITY)
        lo = -(double)lmax - DQ_WMAX, hi = lo + 2 * DQ_WMAX + 2;
    size_t last_ng = dq_groups(n - (nsg - 1) * DQ_SUPER);
    for (int it = 0; it < 40; it++) {
        double t = 0.5 * (lo + hi);
        size_t total = fixed, k = 0;
#ifdef DQ_HAVE_AVX512
        if (dq_isa >= 1 && nsg > 1) {
            total += 4 * dq_split_units_avx512(est, nsg - 1, t);
            k = nsg - 1;
        }
#endif
        for (; k < nsg; k++) {
            if (est[k] == -INFINITY)
                continue;
            double b = t + (double)est[k];
            b = b < 1 ? 1 : b > DQ_WMAX ? DQ_WMAX : b;
            total += 4 * (size_t)(b * (double)(k + 1 < nsg ? DQ_GPS : last_ng));
        }
        if (total <= budget)
            lo = t;
        else
            hi = t;
    }
    for (size_t k = 0; k < nsg; k++) {
        double b = lo + (double)est[k];
        b = b < 1 ? 1 : b > DQ_WMAX ? DQ_WMAX : b;
        units[k] = est[k] == -INFINITY
                       ? 0
                       : (unsigned char)(b * (double)(k + 1 < nsg ? DQ_GPS : last_ng));
    }
}

/* ---- the operations --------------------------------------------------------------------- */

typedef struct dq_in {
    const unsigned char *units; /* the units table */
    const unsigned char *p;     /* first super-group */
    dq_tables_t t;
} dq_in_t;

static tdl_status_t dq_corrupt(size_t sg)
{
    return tdl_error_raise(TDL_ERR_CORRUPT,
                           "codec dynamiq: super-group %zu has impossible metadata (widths "
                           "beyond its units or the data's end, or a zero group with a width)",
                           sg);
}

/* Checks the header, the size and every super-group's metadata before anything is written. */
static tdl_status_t dq_open(const void *in, size_t in_bytes, size_t n, dq_in_t *d)
{
    pthread_once(&dq_isa_once, dq_isa_init);
    const unsigned char *p = in;
    if (in_bytes < DQ_HEADER)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "codec dynamiq: encoded data of %zu values is %zu bytes, shorter "
                               "than its header",
                               n, in_bytes);
    int code = codec_load_le16(p + 2);
    if (p[0] != DQ_VERSION || p[1] > 1 || code < DQ_MIN_BITS256 || code > DQ_MAX_BITS256)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "codec dynamiq: bad header (version %d, levels %d, budget %d/256 "
                               "bits per value; expected version %d, levels 0 or 1, %d to %d)",
                               p[0], p[1], code, DQ_VERSION, DQ_MIN_BITS256, DQ_MAX_BITS256);
    tdl_status_t st = codec_check_size("dynamiq", in_bytes, dq_size(n, code), n);
    if (st != TDL_OK)
        return st;
    size_t nsg = dq_nsg(n), avail = in_bytes - DQ_HEADER - nsg;
    const unsigned char *units = p + DQ_HEADER, *q = units + nsg;
    for (size_t k = 0; k < nsg; k++) {
        size_t m = TDL_MIN((size_t)DQ_SUPER, n - k * DQ_SUPER), size = dq_sg_bytes(m, units[k]);
        if (units[k] > DQ_WMAX * dq_groups(m) || size > avail || !dq_check_sg(q, m, units[k]))
            return dq_corrupt(k);
        avail -= size;
        q += size;
    }
    while (avail--) /* the padding after the last super-group */
        if (*q++)
            return dq_corrupt(nsg);
    *d = (dq_in_t){.units = units, .p = units + nsg, .t = dq_tables(p[1])};
    return TDL_OK;
}

/* encode (in != NULL) or fused (enc != NULL: out = encode(local + decode(enc))). */
static tdl_status_t dq_run(const void *cfg, const codec_where_t *w, const float *in,
                           const dq_in_t *enc, const float *local, size_t n, void *out,
                           size_t *out_bytes)
{
    pthread_once(&dq_isa_once, dq_isa_init);
    unsigned flags = dq_flags(cfg);
    dq_enc_t c = {.t = dq_tables((flags & CODEC_DQ_UNIFORM) ? 1 : 0),
                  .kind = (flags & CODEC_DQ_UNIFORM) ? 1 : 0,
                  .flags = flags,
                  .stochastic = dq_stochastic(cfg),
                  .rand = dq_rand_of(cfg, w)};
    int code = dq_bits_code(dq_hop_bits(cfg, w));
    size_t total = dq_size(n, code), nsg = dq_nsg(n);
    /* per thread, kept between calls: the fused pass's sums and every super-group's statistics */
    static __thread float *scratch;
    static __thread size_t scratch_n;
    size_t need = nsg * (1 + DQ_GPS) + (enc ? n : 0) + nsg / 4 + 1;
    if (need > scratch_n) {
        float *grown = realloc(scratch, need * sizeof(float));
        if (!grown)
            return tdl_error_raise(TDL_ERR_NOMEM, "codec dynamiq: out of memory for %zu values", n);
        scratch = grown, scratch_n = need;
    }
    float *est = scratch, *gmax = est + nsg, *sums = gmax + nsg * DQ_GPS;
    unsigned char *bad = (unsigned char *)(sums + (enc ? n : 0));
    /* super-group statistics: each one's largest magnitude, of the sum for the fused pass */
    const unsigned char *ip = enc ? enc->p : NULL;
    for (size_t k = 0; k < nsg; k++) {
        size_t first = k * DQ_SUPER, m = TDL_MIN((size_t)DQ_SUPER, n - first);
        const float *v = in ? in + first : sums + first;
        if (enc) { /* local + decoded */
            dq_decode_sg(enc->t, ip, m, sums + first, local + first);
            ip += dq_sg_bytes(m, enc->units[k]);
        }
        float mx = 0, *gm = gmax + k * DQ_GPS;
        bad[k] = dq_sg_stats(v, m, gm);
        for (size_t g = 0; g < dq_groups(m); g++)
            mx = dq_max(mx, gm[g]);
        est[k] = bad[k] ? 0.0f : mx;
    }
    unsigned char *o = out, *units = o + DQ_HEADER;
    memset(o, 0, total);
    o[0] = DQ_VERSION;
    o[1] = (flags & CODEC_DQ_UNIFORM) ? 1 : 0;
    codec_store_le16(o + 2, (uint16_t)code);
    dq_split_budget(est, n, total - DQ_HEADER, flags, units);
    o = units + nsg;
    uint64_t a = w ? w->offset : 0;
    for (size_t k = 0; k < nsg; k++) {
        size_t first = k * DQ_SUPER, m = TDL_MIN((size_t)DQ_SUPER, n - first);
        dq_encode_sg(&c, in ? in + first : sums + first, m, gmax + k * DQ_GPS, bad[k], a + first,
                     units[k], o);
        o += dq_sg_bytes(m, units[k]);
    }
    *out_bytes = total;
    return TDL_OK;
}

static size_t dq_max_encoded_bytes(const void *cfg, size_t n)
{
    size_t full = n / DQ_SUPER * dq_sg_bytes(DQ_SUPER, DQ_WMAX * DQ_GPS);
    size_t tail =
        n % DQ_SUPER ? dq_sg_bytes(n % DQ_SUPER, DQ_WMAX * (int)dq_groups(n % DQ_SUPER)) : 0;
    return TDL_MAX(DQ_HEADER + dq_nsg(n) + full + tail, dq_size(n, DQ_MAX_BITS256));
}

static tdl_status_t dq_encode(const void *cfg, const codec_where_t *w, const float *in, size_t n,
                              void *out, size_t *out_bytes)
{
    tdl_status_t st = codec_check_args("dynamiq", in, out, n);
    if (!st && !out)
        st = tdl_error_raise(TDL_ERR_INVALID_ARG, "codec dynamiq: NULL output buffer");
    if (!st && dq_stochastic(cfg) && !w)
        st = codec_check_where("dynamiq", &(codec_config_t){.round = CODEC_ROUND_STOCHASTIC}, w);
    return st ? st : dq_run(cfg, w, in, NULL, NULL, n, out, out_bytes);
}

static tdl_status_t dq_decode_into(const void *in, size_t in_bytes, float *out, size_t n,
                                   bool add)
{
    tdl_status_t st = codec_check_args("dynamiq", in, out, n);
    dq_in_t d;
    if (st || (st = dq_open(in, in_bytes, n, &d)))
        return st;
    pthread_once(&dq_isa_once, dq_isa_init);
    const unsigned char *p = d.p;
    for (size_t first = 0, k = 0; first < n; first += DQ_SUPER, k++) {
        size_t m = TDL_MIN((size_t)DQ_SUPER, n - first);
        dq_decode_sg(d.t, p, m, out + first, add ? out + first : NULL);
        p += dq_sg_bytes(m, d.units[k]);
    }
    return TDL_OK;
}

static tdl_status_t dq_decode(const void *cfg, const void *in, size_t in_bytes, float *out,
                              size_t n)
{
    return dq_decode_into(in, in_bytes, out, n, false);
}

static tdl_status_t dq_decode_accumulate(const void *cfg, const void *in, size_t in_bytes,
                                         float *acc, size_t n)
{
    return dq_decode_into(in, in_bytes, acc, n, true);
}

static tdl_status_t dq_fused(const void *cfg, const codec_where_t *w, const void *in,
                             size_t in_bytes, const float *local, size_t n, void *out,
                             size_t *out_bytes)
{
    tdl_status_t st = codec_check_args("dynamiq", in, out, n);
    if (!st)
        st = codec_check_args("dynamiq", local, out, n);
    if (!st && !out)
        st = tdl_error_raise(TDL_ERR_INVALID_ARG, "codec dynamiq: NULL output buffer");
    if (!st && dq_stochastic(cfg) && !w)
        st = codec_check_where("dynamiq", &(codec_config_t){.round = CODEC_ROUND_STOCHASTIC}, w);
    dq_in_t d;
    if (st || (st = dq_open(in, in_bytes, n, &d)))
        return st;
    return dq_run(cfg, w, NULL, &d, local, n, out, out_bytes);
}

/* The all-reduce's average over a ring of 8: half its traffic is partial sums, half the final
 * sum (dq_hop_bits keeps that average at the configured bits for any ring). */
static double dq_bits_per_coord(const void *cfg, size_t n)
{
    double sum = 0;
    for (int c = 1; c <= 8; c++) {
        codec_where_t w = {.group_size = 8, .contributions = c, .hop = c - 1};
        int code = dq_bits_code(dq_hop_bits(cfg, &w));
        double per = n ? 8.0 * (double)dq_size(n, code) / (double)n : code / 256.0;
        sum += c < 8 ? per : 7 * per;
    }
    return sum / 14.0;
}

void codec_dynamiq_params(const void *cfg, const codec_where_t *w, codec_dq_params_t *out)
{
    unsigned flags = dq_flags(cfg);
    dq_rand_t r = dq_rand_of(cfg, w);
    *out = (codec_dq_params_t){.code = dq_bits_code(dq_hop_bits(cfg, w)),
                               .levels = (flags & CODEC_DQ_UNIFORM) ? 1 : 0,
                               .flags = flags,
                               .stochastic = dq_stochastic(cfg),
                               .key = r.key,
                               .offset = r.offset,
                               .a0 = w ? w->offset : 0};
}

size_t codec_dynamiq_size(size_t n, int code)
{
    return dq_size(n, code);
}

void codec_dynamiq_tables(int kind, const float **levels, const float **inv_gap)
{
    dq_tables_t t = dq_tables(kind);
    *levels = &t.lv[0][0];
    *inv_gap = &t.ig[0][0];
}

const codec_ops_t codec_dynamiq_ops = {
    .name = "dynamiq",
    .max_encoded_bytes = dq_max_encoded_bytes,
    .encode = dq_encode,
    .decode = dq_decode,
    .decode_accumulate = dq_decode_accumulate,
    .decode_accumulate_encode = dq_fused,
    .bits_per_coord = dq_bits_per_coord,
};
