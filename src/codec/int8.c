/* int8 per group (THC-like): groups of 256 values share one f32 scale, max |x| / 127, and each
 * value is an int8 rounded to nearest even or stochastically. "int8_rht" first rotates every full
 * group with a randomized Hadamard transform (random signs, then a Walsh-Hadamard transform
 * scaled by 1/16), which spreads outliers over the group so the scale fits the bulk of the values;
 * its sign seed is stored in the header, so decoding needs no context.
 * A group holding NaN or Inf stores a NaN scale and zero codes, and decodes to NaN (as an MX block
 * does); other groups are unaffected.
 * Layout: [u64 sign seed, int8_rht only] then per group [f32 scale][int8 x group size]. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"

#define INT8_GROUP 256

static size_t int8_bytes(size_t n, bool rht)
{
    size_t groups = (n + INT8_GROUP - 1) / INT8_GROUP;
    return (rht ? 8 : 0) + groups * 4 + n;
}

/* The loops below are written lane by lane, without library calls or data-dependent branches,
 * so the compiler vectorizes them (CODEC_HALF_LOOP: an AVX2 clone where the CPU has it); every
 * lane computes what the scalar expression would, so every clone writes the same bytes. A group
 * holding NaN or Inf is stored as the one NaN scale and zero codes, so no NaN payload reaches the
 * bytes; sums keep the decoded value's NaN, as the 16-bit formats' do. */

/* In-place Walsh-Hadamard transform of 256 values, scaled to be its own inverse. Every butterfly
 * is x[j], x[j + h] = a + b, a - b: the first three stages within each run of 8 values (vector
 * shuffles where the compiler has them), the others between runs. */
CODEC_HALF_LOOP static void int8_fwht(float *x)
{
#if defined(__GNUC__) && !defined(__clang__)
    typedef float v8f __attribute__((vector_size(32)));
    typedef int32_t v8i __attribute__((vector_size(32)));
    const v8i swap1 = {1, 0, 3, 2, 5, 4, 7, 6}, swap2 = {2, 3, 0, 1, 6, 7, 4, 5};
    const v8i swap4 = {4, 5, 6, 7, 0, 1, 2, 3};
    const v8i low1 = {-1, 0, -1, 0, -1, 0, -1, 0}, low2 = {-1, -1, 0, 0, -1, -1, 0, 0};
    const v8i low4 = {-1, -1, -1, -1, 0, 0, 0, 0};
    for (int i = 0; i < INT8_GROUP; i += 8) {
        v8f v;
        memcpy(&v, x + i, sizeof(v));
        /* lanes with the low partner take a + b (a = v, b = the partner), the others a - b with
         * a = the partner */
        v8f p = __builtin_shuffle(v, swap1);
        v = (v8f)(((v8i)(v + p) & low1) | ((v8i)(p - v) & ~low1));
        p = __builtin_shuffle(v, swap2);
        v = (v8f)(((v8i)(v + p) & low2) | ((v8i)(p - v) & ~low2));
        p = __builtin_shuffle(v, swap4);
        v = (v8f)(((v8i)(v + p) & low4) | ((v8i)(p - v) & ~low4));
        memcpy(x + i, &v, sizeof(v));
    }
    const int first = 8;
#else
    const int first = 1;
#endif
    for (int h = first; h < INT8_GROUP; h *= 2)
        for (int i = 0; i < INT8_GROUP; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    for (int i = 0; i < INT8_GROUP; i++)
        x[i] *= 1.0f / 16.0f; /* 1 / sqrt(256) */
}

/* Random signs of group g: bit i of Philox words (seed, stream g). */
static void int8_signs(uint64_t seed, uint64_t g, uint32_t *bits)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, g);
    for (int i = 0; i < INT8_GROUP / 32; i++)
        bits[i] = tdl_rng_u32(&rng);
}

CODEC_HALF_LOOP static void int8_flip(float *x, const uint32_t *bits)
{
    for (int k = 0; k < INT8_GROUP / 32; k++) {
        uint32_t b = bits[k];
        for (int i = 0; i < 32; i++)
            x[32 * k + i] = tdl_bits_f32(tdl_f32_bits(x[32 * k + i]) ^ ((b >> i & 1u) << 31));
    }
}

static void int8_rotate(float *x, uint64_t seed, uint64_t g, bool inverse)
{
    uint32_t bits[INT8_GROUP / 32];
    int8_signs(seed, g, bits);
    if (inverse)
        int8_fwht(x);
    int8_flip(x, bits);
    if (!inverse)
        int8_fwht(x);
}

/* The largest magnitude of v[m]; answers whether one of them is NaN or Inf instead (then *mx is
 * meaningless). */
CODEC_HALF_LOOP static bool int8_absmax(const float *v, size_t m, float *mx_out)
{
    float mx = 0;
    uint32_t bad = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t u = tdl_f32_bits(v[i]) & 0x7fffffffu;
        float a = tdl_bits_f32(u);
        bad |= u >= 0x7f800000u;
        mx = a > mx ? a : mx;
    }
    *mx_out = mx;
    return bad != 0;
}

/* Codes of the finite v[m] times inv (inv finite, |v inv| at most a few hundred): rounded to
 * nearest even, or up when the random word's top 24 bits (as a fraction) lie below q's fractional
 * part; clamped to [-127, 127]. */
CODEC_HALF_LOOP static void int8_quantize(const float *restrict v, size_t m, float inv,
                                          const uint32_t *restrict words, unsigned char *restrict o)
{
    if (words) {
        for (size_t i = 0; i < m; i++) {
            /* lo = floorf(q) (|q| <= 127 here, so exact), written so GCC vectorizes it */
            float q = v[i] * inv;
            int32_t k = (int32_t)q;
            k -= (float)k > q;
            float lo = (float)k;
            float u = (float)(int32_t)(words[i] >> 8) * 0x1.0p-24f; /* exact: 24 bits */
            float r = lo + (float)(u < q - lo);
            r = r > -127.0f ? r : -127.0f;
            r = r < 127.0f ? r : 127.0f;
            o[i] = (unsigned char)(int8_t)r;
        }
    } else {
        for (size_t i = 0; i < m; i++) {
            float r = nearbyintf(v[i] * inv);
            r = r > -127.0f ? r : -127.0f;
            r = r < 127.0f ? r : 127.0f;
            o[i] = (unsigned char)(int8_t)r;
        }
    }
}

/* Encodes group values v[m] (already rotated when asked) at o: scale then codes. */
static void int8_encode_group(const float *v, size_t m, unsigned char *o, bool stochastic,
                              tdl_rng_t *rng)
{
    float mx;
    if (int8_absmax(v, m, &mx)) { /* NaN or Inf: the group decodes to NaN */
        codec_store_le32(o, tdl_f32_bits(NAN));
        memset(o + 4, 0, m);
        if (stochastic)
            tdl_rng_seek(rng, rng->pos + m);
        return;
    }
    float scale = mx > 0 ? mx / 127.0f : 0.0f;
    codec_store_le32(o, tdl_f32_bits(scale));
    float inv = 0.0f, tiny[INT8_GROUP];
    if (scale > 0)
        v = codec_scaled_group(v, m, scale, tiny, &inv);
    uint32_t words[INT8_GROUP];
    if (stochastic)
        tdl_rng_fill_u32(rng, words, m);
    int8_quantize(v, m, inv, stochastic ? words : NULL, o + 4);
}

CODEC_HALF_LOOP static void int8_decode_group(const unsigned char *p, size_t m, float *v)
{
    float scale = tdl_bits_f32(codec_load_le32(p));
    for (size_t i = 0; i < m; i++)
        v[i] = (float)(int8_t)p[4 + i] * scale;
}

/* y[m] = dec[m] + x[m], a NaN of dec winning (codec_add_nan_first) */
CODEC_HALF_LOOP static void int8_add(float *y, const float *dec, const float *x, size_t m)
{
    for (size_t i = 0; i < m; i++)
        y[i] = codec_add_nan_first(dec[i], x[i]);
}

typedef enum { INT8_ENCODE, INT8_DECODE, INT8_DECODE_ADD, INT8_FUSED } int8_mode_t;

/* One pass over the groups for every operation, so the fused pass is the two steps exactly. */
static tdl_status_t int8_run(const char *name, bool rht, const void *cfg, const codec_where_t *w,
                             int8_mode_t mode, const float *in, const unsigned char *enc,
                             size_t enc_bytes, const float *local, float *outf,
                             unsigned char *out, size_t n, size_t *out_bytes)
{
    uint64_t in_seed = 0, out_seed = 0;
    tdl_rng_t rng;
    bool stochastic = codec_cfg_stochastic(cfg);
    if (mode == INT8_ENCODE || mode == INT8_FUSED) {
        tdl_rng_init(&rng, w->seed, codec_where_stream(w));
        out_seed = codec_mix64(w->seed ^ codec_mix64(codec_where_stream(w) + 0x52485421ull));
        if (rht)
            for (int i = 0; i < 8; i++)
                out[i] = (unsigned char)(out_seed >> (8 * i));
    }
    if (mode != INT8_ENCODE) {
        tdl_status_t st = codec_check_size(name, enc_bytes, int8_bytes(n, rht), n);
        if (st != TDL_OK)
            return st;
        for (int i = 0; rht && i < 8; i++)
            in_seed |= (uint64_t)enc[i] << (8 * i);
    }
    size_t hdr = rht ? 8 : 0;
    float v[INT8_GROUP];
    for (size_t g = 0, first = 0; first < n; g++, first += INT8_GROUP) {
        size_t m = TDL_MIN((size_t)INT8_GROUP, n - first);
        bool rotate = rht && m == INT8_GROUP;
        size_t at = hdr + g * 4 + first;
        if (mode == INT8_ENCODE) {
            memcpy(v, in + first, m * sizeof(float));
        } else {
            int8_decode_group(enc + at, m, v);
            if (rotate)
                int8_rotate(v, in_seed, g, true);
            if (mode == INT8_DECODE) {
                memcpy(outf + first, v, m * sizeof(float));
                continue;
            }
            if (mode == INT8_DECODE_ADD) {
                int8_add(outf + first, v, outf + first, m);
                continue;
            }
            int8_add(v, v, local + first, m);
        }
        if (rotate)
            int8_rotate(v, out_seed, g, false);
        int8_encode_group(v, m, out + at, stochastic, &rng);
    }
    if (out_bytes)
        *out_bytes = int8_bytes(n, rht);
    return TDL_OK;
}

#define INT8_OPS(NAME, SUFFIX, RHT)                                                            \
    static size_t SUFFIX##_max(const void *cfg, size_t n)                                      \
    {                                                                                          \
        return int8_bytes(n, RHT);                                                             \
    }                                                                                          \
    static tdl_status_t SUFFIX##_encode(const void *cfg, const codec_where_t *w,               \
                                        const float *in, size_t n, void *out, size_t *ob)      \
    {                                                                                          \
        tdl_status_t st = codec_check_args(NAME, in, out, n);                                  \
        if (!st)                                                                               \
            st = codec_check_where(NAME, cfg, w);                                              \
        return st ? st                                                                         \
                  : int8_run(NAME, RHT, cfg, w, INT8_ENCODE, in, NULL, 0, NULL, NULL, out, n,  \
                             ob);                                                              \
    }                                                                                          \
    static tdl_status_t SUFFIX##_decode(const void *cfg, const void *in, size_t ib,            \
                                        float *out, size_t n)                                  \
    {                                                                                          \
        tdl_status_t st = codec_check_args(NAME, in, out, n);                                  \
        return st ? st                                                                         \
                  : int8_run(NAME, RHT, cfg, NULL, INT8_DECODE, NULL, in, ib, NULL, out, NULL, \
                             n, NULL);                                                         \
    }                                                                                          \
    static tdl_status_t SUFFIX##_decode_acc(const void *cfg, const void *in, size_t ib,        \
                                            float *acc, size_t n)                              \
    {                                                                                          \
        tdl_status_t st = codec_check_args(NAME, in, acc, n);                                  \
        return st ? st                                                                         \
                  : int8_run(NAME, RHT, cfg, NULL, INT8_DECODE_ADD, NULL, in, ib, NULL, acc,   \
                             NULL, n, NULL);                                                   \
    }                                                                                          \
    static tdl_status_t SUFFIX##_fused(const void *cfg, const codec_where_t *w, const void *in, \
                                       size_t ib, const float *local, size_t n, void *out,     \
                                       size_t *ob)                                             \
    {                                                                                          \
        tdl_status_t st = codec_check_args(NAME, in, out, n);                                  \
        if (!st)                                                                               \
            st = codec_check_args(NAME, local, out, n);                                        \
        if (!st)                                                                               \
            st = codec_check_where(NAME, cfg, w);                                              \
        return st ? st                                                                         \
                  : int8_run(NAME, RHT, cfg, w, INT8_FUSED, NULL, in, ib, local, NULL, out, n, \
                             ob);                                                              \
    }                                                                                          \
    static double SUFFIX##_bits(const void *cfg, size_t n)                                     \
    {                                                                                          \
        return n ? 8.0 * (double)int8_bytes(n, RHT) / (double)n : 8.0 + 32.0 / INT8_GROUP;     \
    }                                                                                          \
    const codec_ops_t codec_##SUFFIX##_ops = {                                                 \
        .name = NAME,                                                                          \
        .max_encoded_bytes = SUFFIX##_max,                                                     \
        .encode = SUFFIX##_encode,                                                             \
        .decode = SUFFIX##_decode,                                                             \
        .decode_accumulate = SUFFIX##_decode_acc,                                              \
        .decode_accumulate_encode = SUFFIX##_fused,                                            \
        .bits_per_coord = SUFFIX##_bits,                                                       \
    };

INT8_OPS("int8", int8, false)
INT8_OPS("int8_rht", int8_rht, true)
