// The OCP MX formats on the GPU: encode, decode (and accumulate) and the fused
// decode-accumulate-encode pass, producing the bytes of src/codec/mxfp.c (layout, scale choice and
// rounding there and in doc/codec_formats.md). One thread per block of 32 values, in grid-stride
// loops; no thread talks to another, so the file also compiles as host C++ under cuda/kernel.h's
// emulation and tests/unit/test_mxfp_emu.c compares it with the CPU codec where no GPU exists.
// Every float operation is the CPU's, rounded alike: explicit _rn intrinsics (no fused
// multiply-add), rounding to the element format in integers, Philox words as src/core/rng.c's.
// f32 subnormals are kept as on the CPU: never build this with -ftz=true or --use_fast_math.
#include "cuda/kernel.h"

#include <stdint.h>
#include <string.h>

#include "codec/codec.h"
#include "cuda/codec_gpu.h"

#if defined(TDL_CUDA_EMULATE) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#define MX_BLOCK 32

#ifdef TDL_CUDA_EMULATE
#define MX_UNROLL
TDL_DEVICE float mx_fmul(float a, float b)
{
    return a * b;
}
TDL_DEVICE float mx_fadd(float a, float b)
{
    return a + b;
}
TDL_DEVICE uint32_t mx_f32_bits(float x)
{
    return tdl_f32_bits(x);
}
TDL_DEVICE float mx_bits_f32(uint32_t u)
{
    return tdl_bits_f32(u);
}
#else
#ifdef __CUDA_ARCH__ // the device pass: the host compiler does not know the pragma
#define MX_UNROLL _Pragma("unroll")
#else
#define MX_UNROLL
#endif
TDL_DEVICE float mx_fmul(float a, float b)
{
    return __fmul_rn(a, b);
}
TDL_DEVICE float mx_fadd(float a, float b)
{
    return __fadd_rn(a, b);
}
TDL_DEVICE uint32_t mx_f32_bits(float x)
{
    return __float_as_uint(x);
}
TDL_DEVICE float mx_bits_f32(uint32_t u)
{
    return __uint_as_float(u);
}
#endif

// ---- the element formats, as mxfp.c's mx_format_t -----------------------------------------

enum { MX_E4M3, MX_E5M2, MX_E3M2, MX_E2M3, MX_E2M1, MX_FORMATS };
static const char *const mx_names[MX_FORMATS] = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2",
                                                 "mxfp6_e2m3", "mxfp4_e2m1"};

// bits: element width; emax: exponent of the largest normal; mbits, emin, max_code: the
// saturating minifloat the magnitudes round to; special: 1 E4M3's NaN, 2 E5M2's Inf and NaNs.
template <int F> struct mx_fmt;
#define MX_FMT(F, BITS, EMAX, MBITS, EMIN, MAX, SPECIAL)                                           \
    template <> struct mx_fmt<F> {                                                                 \
        enum { bits = BITS, emax = EMAX, mbits = MBITS, emin = EMIN, max_code = MAX };             \
        enum { special = SPECIAL, block_bytes = 4 * BITS };                                        \
    }
MX_FMT(MX_E4M3, 8, 8, 3, -6, 0x7e, 1);
MX_FMT(MX_E5M2, 8, 15, 2, -14, 0x7b, 2);
MX_FMT(MX_E3M2, 6, 4, 2, -2, 0x1f, 0);
MX_FMT(MX_E2M3, 6, 2, 3, 0, 0x1f, 0);
MX_FMT(MX_E2M1, 4, 2, 1, 0, 0x7, 0);

// Encoded bytes of n values: scales, then every block's elements (mxfp.c's mx_bytes).
TDL_HD size_t mx_elem_bytes(int bits, size_t cnt)
{
    return (cnt * (size_t)bits + 7) / 8;
}

TDL_HD size_t mx_bytes(int bits, size_t n)
{
    if (n > SIZE_MAX / 2)
        return SIZE_MAX;
    size_t full = n / MX_BLOCK, rest = n % MX_BLOCK;
    return full + (rest != 0) + full * mx_elem_bytes(bits, MX_BLOCK) + mx_elem_bytes(bits, rest);
}

// ---- device helpers, each the CPU's expression ---------------------------------------------

// codec_pow2f: 2^k for -127 <= k <= 127.
TDL_DEVICE float mx_pow2f(int k)
{
    return k >= -126 ? mx_bits_f32((uint32_t)(k + 127) << 23) : mx_bits_f32(0x00400000u);
}

TDL_DEVICE float mx_scale_value(unsigned s)
{
    return s == 0xff ? mx_bits_f32(0x7fc00000u) : mx_pow2f((int)s - 127);
}

// The element value of code c at scale 2^0: mxfp.c's tables, computed (every product exact).
template <int F> TDL_DEVICE float mx_value(uint32_t c)
{
    typedef mx_fmt<F> f;
    const uint32_t sign = 1u << (f::bits - 1), mag = c & (sign - 1);
    if ((f::special == 1 && mag == 0x7f) || (f::special == 2 && (mag & 0x7c) == 0x7c && (mag & 3)))
        return mx_bits_f32(0x7fc00000u);
    float v;
    if (f::special == 2 && mag == 0x7c)
        v = mx_bits_f32(0x7f800000u);
    else if ((mag >> f::mbits) == 0)
        v = mx_fmul((float)(mag & ((1u << f::mbits) - 1)), mx_pow2f(f::emin - f::mbits));
    else
        v = mx_fmul((float)((1u << f::mbits) + (mag & ((1u << f::mbits) - 1))),
                    mx_pow2f((int)(mag >> f::mbits) - 1 + f::emin - f::mbits));
    return (c & sign) ? -v : v;
}

// codec_minifloat_round: the magnitude code of the finite f32 whose bits without sign are a.
template <int F> TDL_DEVICE uint32_t mx_round(uint32_t a, bool stochastic, uint32_t r)
{
    typedef mx_fmt<F> f;
    bool normal = a >= 0x00800000u;
    int e = normal ? (int)(a >> 23) - 127 : -126;
    uint32_t m = normal ? (a & 0x7fffffu) | 0x800000u : a;
    int eeff = e > (int)f::emin ? e : (int)f::emin;
    int s = 23 - f::mbits + (eeff - e);
    uint32_t n;
    if (stochastic) {
        uint64_t t = ((uint64_t)m << 32) >> (s < 63 ? s : 63);
        n = (uint32_t)((t + r) >> 32);
    } else {
        s = s < 25 ? s : 25;
        uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
        n = m >> s;
        n += (uint32_t)(rem > half) | ((uint32_t)(rem == half) & n);
    }
    uint32_t code = ((uint32_t)(eeff - f::emin) << f::mbits) + n;
    return code > (uint32_t)f::max_code ? (uint32_t)f::max_code : code;
}

// Philox4x32-10 block `id` of stream (seed, stream): src/core/rng.c's tdl_rng_u32 words 4 id ..
// 4 id + 3.
TDL_DEVICE void mx_philox(uint64_t seed, uint64_t stream, uint64_t id, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)id, c1 = (uint32_t)(id >> 32), c2 = (uint32_t)stream;
    uint32_t c3 = (uint32_t)(stream >> 32), k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1, c3 = (uint32_t)p0, c0 = n0, c2 = n2;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// Codes of a block's cnt elements at p, reading no byte past the block; false when the unused
// bits of its last byte are not zero (mxfp.c's mx_block_unpack). Also the host's padding check.
template <int B> TDL_HD bool mx_unpack(const unsigned char *p, int cnt, uint8_t *codes)
{
    MX_UNROLL
    for (int i = 0; i < MX_BLOCK; i++) {
        uint32_t c = 0;
        if (i < cnt) {
            int bit = i * B, at = bit / 8, sh = bit % 8;
            c = (uint32_t)p[at] >> sh;
            if (sh + B > 8)
                c |= (uint32_t)p[at + 1] << (8 - sh);
            c &= (1u << B) - 1;
        }
        codes[i] = (uint8_t)c;
    }
    int used = (cnt * B) % 8;
    return cnt == 0 || used == 0 || (p[(cnt * B) / 8] >> used) == 0;
}

// The block's element bytes from codes[0..32), those past cnt zero (mxfp.c's mx_block_pack).
template <int B> TDL_DEVICE void mx_pack(const uint8_t *codes, int cnt, unsigned char *out)
{
    int nbytes = (cnt * B + 7) / 8;
    if (B == 8) {
        MX_UNROLL
        for (int i = 0; i < MX_BLOCK; i++)
            if (i < cnt)
                out[i] = codes[i];
    } else if (B == 6) {
        MX_UNROLL
        for (int q = 0; q < MX_BLOCK / 4; q++) {
            uint32_t w = (uint32_t)codes[4 * q] | (uint32_t)codes[4 * q + 1] << 6 |
                         (uint32_t)codes[4 * q + 2] << 12 | (uint32_t)codes[4 * q + 3] << 18;
            MX_UNROLL
            for (int j = 0; j < 3; j++)
                if (3 * q + j < nbytes)
                    out[3 * q + j] = (unsigned char)(w >> (8 * j));
        }
    } else {
        MX_UNROLL
        for (int j = 0; j < MX_BLOCK / 2; j++)
            if (j < nbytes)
                out[j] = (unsigned char)(codes[2 * j] | codes[2 * j + 1] << 4);
    }
}

// Stochastic rounding: value i of the call rounds with word i of Philox stream (seed, stream).
struct mx_rand {
    int on;
    uint64_t seed, stream;
};

// mxfp.c's mx_block_encode of x[0..cnt) (x[cnt..32) zero), value i at index first + i.
template <int F>
TDL_DEVICE void mx_block_encode(const float *x, int cnt, mx_rand rnd, size_t first,
                                unsigned char *scale_out, unsigned char *elems)
{
    typedef mx_fmt<F> f;
    uint8_t codes[MX_BLOCK];
    uint32_t amax = 0;
    MX_UNROLL
    for (int i = 0; i < MX_BLOCK; i++) {
        uint32_t a = mx_f32_bits(x[i]) & 0x7fffffffu;
        amax = i < cnt && a > amax ? a : amax;
    }
    if (amax >= 0x7f800000u) { // NaN or Inf: the block is NaN, its elements zero
        *scale_out = 0xff;
        MX_UNROLL
        for (int i = 0; i < MX_BLOCK; i++)
            codes[i] = 0;
        mx_pack<f::bits>(codes, cnt, elems);
        return;
    }
    int e = amax >= 0x00800000u ? (int)(amax >> 23) - 127 : -127;
    int xs = e - f::emax < -127 ? -127 : e - f::emax;
    *scale_out = (unsigned char)(xs + 127);
    float inv = mx_pow2f(-xs);
    const uint32_t sign = 1u << (f::bits - 1);
    uint32_t words[4] = {0, 0, 0, 0};
    MX_UNROLL
    for (int i = 0; i < MX_BLOCK; i++) {
        if (rnd.on && i % 4 == 0 && i < cnt) // first is a multiple of 32, so of 4
            mx_philox(rnd.seed, rnd.stream, (first + (size_t)i) >> 2, words);
        uint32_t u = mx_f32_bits(mx_fmul(x[i], inv));
        uint32_t mag = mx_round<F>(u & 0x7fffffffu, rnd.on != 0, words[i % 4]);
        codes[i] = i < cnt ? (uint8_t)(((u >> 31) ? sign : 0) | mag) : 0;
    }
    mx_pack<f::bits>(codes, cnt, elems);
}

// ---- kernels -------------------------------------------------------------------------------

// Encodes in (enc NULL), or local + decode(enc) (the fused pass), into out: one block a thread.
template <int F>
TDL_KERNEL void mx_encode_kernel(const float *in, const unsigned char *enc, const float *local,
                                 size_t n, mx_rand rnd, unsigned char *out)
{
    typedef mx_fmt<F> f;
    size_t nb = (n + MX_BLOCK - 1) / MX_BLOCK;
    for (size_t b = tdl_tid(); b < nb; b += tdl_nthreads()) {
        size_t first = b * MX_BLOCK;
        int cnt = n - first < MX_BLOCK ? (int)(n - first) : MX_BLOCK;
        float x[MX_BLOCK];
        if (enc) {
            uint8_t codes[MX_BLOCK];
            mx_unpack<f::bits>(enc + nb + b * f::block_bytes, cnt, codes);
            float sc = mx_scale_value(enc[b]);
            MX_UNROLL
            for (int i = 0; i < MX_BLOCK; i++)
                x[i] =
                    i < cnt ? mx_fadd(local[first + i], mx_fmul(mx_value<F>(codes[i]), sc)) : 0.0f;
        } else {
            MX_UNROLL
            for (int i = 0; i < MX_BLOCK; i++)
                x[i] = i < cnt ? in[first + i] : 0.0f;
        }
        mx_block_encode<F>(x, cnt, rnd, first, out + b, out + nb + b * f::block_bytes);
    }
}

// out = decode(enc), or out += decode(enc): one block a thread.
template <int F>
TDL_KERNEL void mx_decode_kernel(const unsigned char *enc, size_t n, float *out, int add)
{
    typedef mx_fmt<F> f;
    size_t nb = (n + MX_BLOCK - 1) / MX_BLOCK;
    for (size_t b = tdl_tid(); b < nb; b += tdl_nthreads()) {
        size_t first = b * MX_BLOCK;
        int cnt = n - first < MX_BLOCK ? (int)(n - first) : MX_BLOCK;
        uint8_t codes[MX_BLOCK];
        mx_unpack<f::bits>(enc + nb + b * f::block_bytes, cnt, codes);
        float sc = mx_scale_value(enc[b]);
        MX_UNROLL
        for (int i = 0; i < MX_BLOCK; i++) {
            if (i < cnt) {
                float y = mx_fmul(mx_value<F>(codes[i]), sc);
                out[first + i] = add ? mx_fadd(out[first + i], y) : y;
            }
        }
    }
}

// ---- host side -----------------------------------------------------------------------------

// Under emulation a few blocks, so that the grid-stride loops run more than once per thread.
#ifdef TDL_CUDA_EMULATE
#define MX_GRID_CAP 3
#else
#define MX_GRID_CAP 65535
#endif

static const int mx_bits_of[MX_FORMATS] = {8, 8, 6, 6, 4};

// The format's index, or the error naming what it is not.
static tdl_status_t mx_lookup(tdl_gpu_t *gpu, const char *format, int *fmt_out)
{
    const codec_ops_t *ops = codec_find(format);
    for (int f = 0; ops && f < MX_FORMATS; f++) {
        if (strcmp(ops->name, mx_names[f]) == 0) {
            if (!gpu)
                return tdl_error_raise(TDL_ERR_INVALID_ARG, "codec %s on the GPU: no GPU context",
                                       mx_names[f]);
            *fmt_out = f;
            return TDL_OK;
        }
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG,
                           "codec '%s' has no MX kernels on the GPU (mxfp8_e4m3, mxfp8_e5m2, "
                           "mxfp6_e3m2, mxfp6_e2m3, mxfp4_e2m1)",
                           format ? format : "(null)");
}

static tdl_status_t mx_check_buffers(int fmt, const void *in, const void *out, size_t n)
{
    if (n > 0 && (!in || !out))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "codec %s on the GPU: NULL %s buffer for %zu values", mx_names[fmt],
                               in ? "output" : "input", n);
    return TDL_OK;
}

static tdl_status_t mx_where_rand(int fmt, const codec_config_t *cfg, const codec_where_t *w,
                                  mx_rand *rnd)
{
    memset(rnd, 0, sizeof(*rnd));
    if (!cfg || cfg->round != CODEC_ROUND_STOCHASTIC)
        return TDL_OK;
    if (!w)
        return tdl_error_raise(
            TDL_ERR_INVALID_ARG,
            "codec %s on the GPU: stochastic rounding needs where the encoding happens",
            mx_names[fmt]);
    rnd->on = 1, rnd->seed = w->seed, rnd->stream = codec_where_stream(w);
    return TDL_OK;
}

// An encoding's size, and the padding of its partial last block (read back: waits on the stream).
template <int F>
static tdl_status_t mx_check_input(tdl_gpu_t *gpu, const unsigned char *enc, size_t in_bytes,
                                   size_t n)
{
    typedef mx_fmt<F> f;
    size_t want = mx_bytes(f::bits, n);
    if (in_bytes != want)
        return tdl_error_raise(
            TDL_ERR_CORRUPT,
            "codec %s on the GPU: encoded data of %zu values is %zu bytes, expected %zu",
            mx_names[F], n, in_bytes, want);
    size_t rest = n % MX_BLOCK;
    if (rest == 0)
        return TDL_OK;
    unsigned char last[f::block_bytes];
    size_t nb = (n + MX_BLOCK - 1) / MX_BLOCK, lb = mx_elem_bytes(f::bits, rest);
    tdl_gpu_download(gpu, last, enc + nb + (nb - 1) * f::block_bytes, lb);
    tdl_status_t st = tdl_gpu_finish(gpu);
    if (st != TDL_OK)
        return st;
    uint8_t codes[MX_BLOCK];
    if (!mx_unpack<f::bits>(last, (int)rest, codes))
        return tdl_error_raise(
            TDL_ERR_CORRUPT,
            "codec %s on the GPU: padding bits after the last of %zu values are not zero",
            mx_names[F], n);
    return TDL_OK;
}

template <int F>
static tdl_status_t mx_run_encode(tdl_gpu_t *gpu, mx_rand rnd, const float *in,
                                  const unsigned char *enc, size_t in_bytes, const float *local,
                                  size_t n, unsigned char *out)
{
    if (enc) {
        tdl_status_t st = mx_check_input<F>(gpu, enc, in_bytes, n);
        if (st != TDL_OK)
            return st;
    }
    size_t nb = (n + MX_BLOCK - 1) / MX_BLOCK;
    TDL_LAUNCH(mx_encode_kernel<F>, tdl_blocks_for(nb, MX_GRID_CAP), TDL_BLOCK, tdl_gpu_stream(gpu),
               in, enc, local, n, rnd, out);
    tdl_gpu_check_launch(gpu, enc ? "MX fused pass kernel" : "MX encode kernel");
    return TDL_OK;
}

template <int F>
static tdl_status_t mx_run_decode(tdl_gpu_t *gpu, const unsigned char *enc, size_t in_bytes,
                                  float *out, size_t n, int add)
{
    tdl_status_t st = mx_check_input<F>(gpu, enc, in_bytes, n);
    if (st != TDL_OK)
        return st;
    size_t nb = (n + MX_BLOCK - 1) / MX_BLOCK;
    TDL_LAUNCH(mx_decode_kernel<F>, tdl_blocks_for(nb, MX_GRID_CAP), TDL_BLOCK, tdl_gpu_stream(gpu),
               enc, n, out, add);
    tdl_gpu_check_launch(gpu, "MX decode kernel");
    return TDL_OK;
}

#define MX_DISPATCH(fmt, FN, ...)                                                                  \
    ((fmt) == MX_E4M3   ? FN<MX_E4M3>(__VA_ARGS__)                                                 \
     : (fmt) == MX_E5M2 ? FN<MX_E5M2>(__VA_ARGS__)                                                 \
     : (fmt) == MX_E3M2 ? FN<MX_E3M2>(__VA_ARGS__)                                                 \
     : (fmt) == MX_E2M3 ? FN<MX_E2M3>(__VA_ARGS__)                                                 \
                        : FN<MX_E2M1>(__VA_ARGS__))

extern "C" tdl_status_t tdl_cuda_mx_encode(tdl_gpu_t *gpu, const char *format,
                                           const codec_config_t *cfg, const codec_where_t *w,
                                           const float *d_in, size_t n, void *d_out,
                                           size_t *out_bytes)
{
    int fmt = 0;
    mx_rand rnd;
    tdl_status_t st = mx_lookup(gpu, format, &fmt);
    if (!st)
        st = mx_check_buffers(fmt, d_in, d_out, n);
    if (!st)
        st = mx_where_rand(fmt, cfg, w, &rnd);
    if (st)
        return st;
    if (n > 0 && (st = MX_DISPATCH(fmt, mx_run_encode, gpu, rnd, d_in, NULL, 0, NULL, n,
                                   (unsigned char *)d_out)) != TDL_OK)
        return st;
    *out_bytes = mx_bytes(mx_bits_of[fmt], n);
    return TDL_OK;
}

extern "C" tdl_status_t tdl_cuda_mx_fused(tdl_gpu_t *gpu, const char *format,
                                          const codec_config_t *cfg, const codec_where_t *w,
                                          const void *d_in, size_t in_bytes, const float *d_local,
                                          size_t n, void *d_out, size_t *out_bytes)
{
    int fmt = 0;
    mx_rand rnd;
    tdl_status_t st = mx_lookup(gpu, format, &fmt);
    if (!st)
        st = mx_check_buffers(fmt, d_in, d_out, n);
    if (!st)
        st = mx_check_buffers(fmt, d_local, d_out, n);
    if (!st)
        st = mx_where_rand(fmt, cfg, w, &rnd);
    if (st)
        return st;
    if (n == 0 && in_bytes != 0)
        return tdl_error_raise(
            TDL_ERR_CORRUPT,
            "codec %s on the GPU: encoded data of 0 values is %zu bytes, expected 0", mx_names[fmt],
            in_bytes);
    if (n > 0 && (st = MX_DISPATCH(fmt, mx_run_encode, gpu, rnd, NULL, (const unsigned char *)d_in,
                                   in_bytes, d_local, n, (unsigned char *)d_out)) != TDL_OK)
        return st;
    *out_bytes = mx_bytes(mx_bits_of[fmt], n);
    return TDL_OK;
}

extern "C" tdl_status_t tdl_cuda_mx_decode(tdl_gpu_t *gpu, const char *format, const void *d_in,
                                           size_t in_bytes, float *d_out, size_t n, int add)
{
    int fmt = 0;
    tdl_status_t st = mx_lookup(gpu, format, &fmt);
    if (!st)
        st = mx_check_buffers(fmt, d_in, d_out, n);
    if (st)
        return st;
    if (n == 0)
        return in_bytes == 0 ? TDL_OK
                             : tdl_error_raise(TDL_ERR_CORRUPT,
                                               "codec %s on the GPU: encoded data of 0 values "
                                               "is %zu bytes, expected 0",
                                               mx_names[fmt], in_bytes);
    return MX_DISPATCH(fmt, mx_run_decode, gpu, (const unsigned char *)d_in, in_bytes, d_out, n,
                       add);
}
