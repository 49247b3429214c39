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
#include "codec/dynamiq_internal.h"

#define DQ_DEFAULT_BITS 5.0

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

/* The hot loops, written lane by lane over the 32 values of a group so the compiler vectorizes
 * them (gathers for the table look-ups where AVX2 has them); every lane computes exactly what
 * the scalar expression would, so all clones give the same bytes. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define DQ_CLONES                                                                                  \
    __attribute__((target_clones("avx2", "default"), optimize("O3", "fp-contract=off")))
#else
#define DQ_CLONES
#endif

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
    codec_dq_vbmi_init(dq_tables(0), dq_tables(1));
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
        codec_dq_avx512_quantize_group(c, x, cnt, inv, w, a, planes);
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
        codec_dq_avx512_dequantize_group(t, planes, w, s, cnt, x, base);
        return;
    }
#endif
    dq_dequantize_group(t, planes, w, s, cnt, x, base);
}

static bool dq_sg_stats(const float *x, size_t m, float *gmax)
{
#ifdef DQ_HAVE_AVX512
    if (dq_isa >= 1)
        return codec_dq_avx512_sg_stats(x, m, gmax);
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
        codec_dq_vbmi_encode_sg(c, x, m, gmax, a0, units, o);
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

/* Whether the super-group of m values at p, given `units`, is possible: widths within its units,
 * no width on a group of zeros, zeros in the value bytes its groups left unused. */
static bool dq_check_sg(const unsigned char *p, size_t m, int units)
{
#ifdef DQ_HAVE_AVX512
    if (dq_isa >= 1)
        return codec_dq_avx512_check_sg(p, m, units);
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
    float S = tdl_bits_f32((uint32_t)codec_load_le16(p) << 16);
    if (isnan(S)) {
        for (size_t i = 0; i < m; i++)
            x[i] = base ? base[i] + NAN : NAN;
        return;
    }
#ifdef DQ_HAVE_AVX512
    if (dq_isa == 2) {
        codec_dq_vbmi_decode_sg(t, meta, val, m, S, x, base);
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
    return (float)((int32_t)tdl_f32_bits(x) - 0x3f800000) * 0x1.0p-23f;
}

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
            total += 4 * codec_dq_avx512_split_units(est, nsg - 1, t);
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
