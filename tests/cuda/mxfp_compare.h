/* The MX formats' kernels (cuda/mxfp.cu, through cuda/codec_gpu.h) against the CPU codec
 * (src/codec/mxfp.c, through the codec API): encode, decode, decode-accumulate and the fused pass
 * give the same bytes and the same floats for every format, over sizes with a partial last
 * block, nearest and stochastic rounding at several (seed, rank, hop, stream), normal and
 * heavy-tailed values, blocks of zeros, f32 subnormals, FLT_MAX, NaN, Inf and random bit
 * patterns, and decoding of arbitrary bytes; bad input is refused without writing. Included by
 * tests/unit/test_mxfp_emu.c (the kernels under emulation, on any machine) and
 * tests/cuda/mxfp_gpu.c (on a GPU), which set gpu, sizes and sizes_count. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"
#include "core/core.h"
#include "cuda/codec_gpu.h"
#include "tap.h"

static const char *const formats[] = {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3",
                                      "mxfp4_e2m1"};
static const int format_bits[] = {8, 8, 6, 6, 4};

/* Set by the including test: the context and the sizes compared. */
static tdl_gpu_t *gpu;
static const size_t *sizes;
static size_t sizes_count;

/* ---- inputs ------------------------------------------------------------------------------- */

typedef enum { FILL_NORMAL, FILL_HEAVY, FILL_SPECIAL, FILL_COUNT } fill_t;
static const char *const fill_names[] = {"normal", "heavy-tailed", "special"};

/* Block by block: zeros (signed), f32 subnormals, FLT_MAX beside tiny values, a NaN, +Inf, -Inf,
 * multiples of 2^-12 (ties for every format), random finite bit patterns, then normal values
 * scaled by a random power of two per block; the pattern repeats every 10 blocks, so the partial
 * last block of most sizes holds specials too. */
static void fill(float *x, size_t n, fill_t kind, uint64_t seed)
{
    tdl_rng_t r;
    tdl_rng_init(&r, seed, 11);
    for (size_t i = 0; i < n; i++) {
        size_t blk = i / 32 % 10, k = i % 32;
        float v = tdl_rng_normal(&r);
        if (kind == FILL_HEAVY) {
            v = (i % 97 == 5) ? 0.0f : v * expf(3.0f * tdl_rng_normal(&r));
        } else if (kind == FILL_SPECIAL) {
            uint32_t u = tdl_rng_u32(&r);
            switch (blk) {
            case 0: v = (k & 1) ? -0.0f : 0.0f; break;
            case 1: /* subnormals, none 0 */
                v = tdl_bits_f32((u & 0x807fffffu) | (k == 3));
                break;
            case 2: v = k == 0 ? FLT_MAX : k == 1 ? -FLT_MAX : k == 2 ? 1e-40f : v * 1e-30f; break;
            case 3: v = k == 7 ? NAN : v; break;
            case 4: v = k == 31 ? INFINITY : v; break;
            case 5: v = k == 0 ? -INFINITY : v; break;
            case 6: v = (float)((int)(u % 2049) - 1024) * 0x1.0p-12f; break;
            case 7:
                v = tdl_bits_f32((u & 0x7f800000u) == 0x7f800000u ? u & 0xbfffffffu : u);
                break;
            default: v = ldexpf(v, (int)(i / 32 % 61) - 30); break;
            }
        }
        x[i] = v;
    }
}

/* ---- comparing ---------------------------------------------------------------------------- */

static size_t bytes_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return SIZE_MAX;
}

/* Equal bits, or both NaN (a GPU's NaN payload is not the CPU's). */
static size_t floats_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tdl_f32_bits(a[i]) != tdl_f32_bits(b[i]) && !(isnan(a[i]) && isnan(b[i])))
            return i;
    return SIZE_MAX;
}

/* ---- device buffers ----------------------------------------------------------------------- */

/* Device buffers end in a guard of 16 bytes 0xA5 that no kernel may write. */
#define GUARD 16

static void *dev_put(const void *host, size_t bytes)
{
    unsigned char pattern[GUARD];
    unsigned char *d = tdl_gpu_alloc(gpu, bytes + GUARD);
    memset(pattern, 0xA5, GUARD);
    if (d && host)
        tdl_gpu_upload(gpu, d, host, bytes);
    if (d)
        tdl_gpu_upload(gpu, d + bytes, pattern, GUARD);
    return d;
}

/* A copy to the host, finished (a copy into pageable memory may return before it lands). */
static void dev_get(void *host, const void *d, size_t bytes)
{
    tdl_gpu_download(gpu, host, d, bytes);
    if (tdl_gpu_finish(gpu) != TDL_OK)
        diag("copy from the device: %s", tdl_error_get());
}

static int guard_intact(const void *d, size_t bytes)
{
    unsigned char got[GUARD], pattern[GUARD];
    memset(pattern, 0xA5, GUARD);
    tdl_gpu_download(gpu, got, (const unsigned char *)d + bytes, GUARD);
    if (tdl_gpu_finish(gpu) == TDL_OK && memcmp(got, pattern, GUARD) == 0)
        return 1;
    diag("a kernel wrote past the end of a buffer of %zu bytes", bytes);
    return 0;
}

/* The results of one comparison: 0 where the kernels agree with the CPU. */
typedef struct result {
    int encode, decode, accumulate, fused;
} result_t;

/* Encodes x with the CPU and the kernels, decodes and accumulates the CPU's encoding onto local
 * with both, and runs the fused pass from it with both (w1). Differences are described once. */
static result_t compare(int f, const codec_config_t *cfg, const codec_where_t *w0,
                        const codec_where_t *w1, const float *x, const float *local_in, size_t n,
                        const unsigned char *given, size_t given_bytes)
{
    const char *name = formats[f];
    const codec_ops_t *ops = codec_find(name);
    size_t cap = ops->max_encoded_bytes(cfg, n), bc = 0, bg = 0, bf = 0, bfg = 0, at;
    unsigned char *ec = malloc(cap + 1), *eg = malloc(cap + 1), *fc = malloc(cap + 1),
                  *fg = malloc(cap + 1);
    float *dc = malloc(n * 4 + 4), *dg = malloc(n * 4 + 4), *ac = malloc(n * 4 + 4),
          *ag = malloc(n * 4 + 4), *local = malloc(n * 4 + 4);
    result_t r = {1, 1, 1, 1};
    memcpy(local, local_in, n * 4);
    float *dx = dev_put(x, n * 4), *dd = dev_put(NULL, n * 4);
    unsigned char *de = dev_put(NULL, cap), *dfo = dev_put(NULL, cap);

    if (ops->encode(cfg, w0, x, n, ec, &bc) != TDL_OK ||
        tdl_cuda_mx_encode(gpu, name, cfg, w0, dx, n, de, &bg) != TDL_OK ||
        tdl_gpu_finish(gpu) != TDL_OK) {
        diag("%s, %zu values: encode failed: %s", name, n, tdl_error_get());
        goto out;
    }
    dev_get(eg, de, bg);
    at = bc == bg ? bytes_diff(ec, eg, bc) : 0;
    r.encode = !guard_intact(de, cap) || at != SIZE_MAX;
    if (at != SIZE_MAX)
        diag("%s, %zu values: encoded byte %zu of %zu: CPU 0x%02x, kernel 0x%02x", name, n, at, bc,
             ec[at], eg[at]);
    if (given) { /* decode and fuse these bytes instead of the encoding of x */
        memcpy(ec, given, given_bytes);
        bc = given_bytes;
    }

    tdl_gpu_upload(gpu, de, ec, bc);
    if (ops->decode(cfg, ec, bc, dc, n) != TDL_OK ||
        tdl_cuda_mx_decode(gpu, name, de, bc, dd, n, 0) != TDL_OK || tdl_gpu_finish(gpu)) {
        diag("%s, %zu values: decode failed: %s", name, n, tdl_error_get());
        goto out;
    }
    dev_get(dg, dd, n * 4);
    at = floats_diff(dc, dg, n);
    r.decode = !guard_intact(dd, n * 4) || at != SIZE_MAX;
    if (at != SIZE_MAX)
        diag("%s, %zu values: decoded value %zu: CPU %a, kernel %a", name, n, at, dc[at], dg[at]);

    /* where a second block exists, local cancels it: the sums are zeros of either sign */
    for (size_t i = 32; i < 64 && i < n; i++)
        local[i] = -dc[i];
    memcpy(ac, local, n * 4);
    tdl_gpu_upload(gpu, dd, local, n * 4);
    if (ops->decode_accumulate(cfg, ec, bc, ac, n) != TDL_OK ||
        tdl_cuda_mx_decode(gpu, name, de, bc, dd, n, 1) != TDL_OK || tdl_gpu_finish(gpu)) {
        diag("%s, %zu values: decode-accumulate failed: %s", name, n, tdl_error_get());
        goto out;
    }
    dev_get(ag, dd, n * 4);
    at = floats_diff(ac, ag, n);
    r.accumulate = !guard_intact(dd, n * 4) || at != SIZE_MAX;
    if (at != SIZE_MAX)
        diag("%s, %zu values: accumulated value %zu: CPU %a, kernel %a", name, n, at, ac[at],
             ag[at]);

    tdl_gpu_upload(gpu, dd, local, n * 4);
    if (ops->decode_accumulate_encode(cfg, w1, ec, bc, local, n, fc, &bf) != TDL_OK ||
        tdl_cuda_mx_fused(gpu, name, cfg, w1, de, bc, (const float *)dd, n, dfo, &bfg) != TDL_OK ||
        tdl_gpu_finish(gpu)) {
        diag("%s, %zu values: fused pass failed: %s", name, n, tdl_error_get());
        goto out;
    }
    dev_get(fg, dfo, bfg);
    at = bf == bfg ? bytes_diff(fc, fg, bf) : 0;
    r.fused = !guard_intact(dfo, cap) || at != SIZE_MAX;
    if (at != SIZE_MAX)
        diag("%s, %zu values: fused byte %zu of %zu: CPU 0x%02x, kernel 0x%02x", name, n, at, bf,
             fc[at], fg[at]);
out:
    tdl_gpu_free(gpu, dx), tdl_gpu_free(gpu, dd), tdl_gpu_free(gpu, de), tdl_gpu_free(gpu, dfo);
    free(ec), free(eg), free(fc), free(fg), free(dc), free(dg), free(ac), free(ag), free(local);
    return r;
}

/* ---- the cases ---------------------------------------------------------------------------- */

static const codec_config_t cfg_rne = {.round = CODEC_ROUND_NEAREST};
static const codec_config_t cfg_sr = {.round = CODEC_ROUND_STOCHASTIC};

static codec_where_t where_of(uint64_t seed, int rank, int hop, uint64_t stream)
{
    codec_where_t w = {
        .seed = seed, .rank = rank, .hop = hop, .contributions = hop + 1, .stream = stream};
    return w;
}

static void test_values(void)
{
    struct {
        const char *what;
        const codec_config_t *cfg;
        codec_where_t w0, w1;
    } runs[] = {
        {"default rounding", NULL, where_of(1, 0, 0, 7), where_of(1, 1, 1, 7)},
        {"nearest", &cfg_rne, where_of(1, 0, 0, 7), where_of(1, 1, 1, 7)},
        {"stochastic, seed 1", &cfg_sr, where_of(1, 0, 0, 7), where_of(1, 1, 1, 7)},
        {"stochastic, seed 2^64-1, rank 1000, hop 7", &cfg_sr, where_of(UINT64_MAX, 1000, 6, 3),
         where_of(UINT64_MAX, 1000, 7, 3)},
        {"stochastic, a collective's stream", &cfg_sr,
         where_of(0xdeadbeefcafeull, 3, 0, codec_stream_make(5, 9, 1)),
         where_of(0xdeadbeefcafeull, 2, 3, codec_stream_make(5, 9, 1))},
    };
    size_t max = 0;
    for (size_t s = 0; s < sizes_count; s++)
        max = sizes[s] > max ? sizes[s] : max;
    float *x = malloc(max * 4), *local = malloc(max * 4);
    for (int f = 0; f < 5; f++)
        for (int kind = 0; kind < FILL_COUNT; kind++)
            for (size_t k = 0; k < TDL_ARRAY_SIZE(runs); k++) {
                result_t bad = {0, 0, 0, 0};
                for (size_t s = 0; s < sizes_count; s++) {
                    size_t n = sizes[s];
                    fill(x, n, (fill_t)kind, 100 + s + 10 * k);
                    fill(local, n, kind == FILL_SPECIAL ? FILL_SPECIAL : FILL_NORMAL, 200 + s);
                    result_t r =
                        compare(f, runs[k].cfg, &runs[k].w0, &runs[k].w1, x, local, n, NULL, 0);
                    bad.encode += r.encode, bad.decode += r.decode;
                    bad.accumulate += r.accumulate, bad.fused += r.fused;
                }
                ok(!bad.encode && !bad.decode && !bad.accumulate && !bad.fused,
                   "%s, %s values, %s: encode, decode, decode-accumulate and fused pass are the "
                   "CPU's over %zu sizes (mismatched sizes: %d, %d, %d, %d)",
                   formats[f], fill_names[kind], runs[k].what, sizes_count, bad.encode, bad.decode,
                   bad.accumulate, bad.fused);
            }
    free(x), free(local);
}

/* Arbitrary bytes (padding cleared): every scale byte, element codes the encoder never writes
 * (E4M3 NaN, E5M2 Inf and NaN), sums that overflow or cancel to NaN. */
static void test_any_bytes(void)
{
    const size_t n = 32 * 40 + 19;
    float *x = malloc(n * 4), *local = malloc(n * 4);
    tdl_rng_t r;
    tdl_rng_init(&r, 9, 4);
    for (int f = 0; f < 5; f++) {
        const codec_ops_t *ops = codec_find(formats[f]);
        size_t bytes = ops->max_encoded_bytes(NULL, n), nb = (n + 31) / 32, rest = n % 32;
        unsigned char *enc = malloc(bytes);
        for (size_t i = 0; i < bytes; i++)
            enc[i] = (unsigned char)tdl_rng_u32(&r);
        for (size_t b = 0; b < nb; b += 7)
            enc[b] = (unsigned char)(b < 7 ? 0xff : b < 14 ? 254 : b < 21 ? 0 : enc[b]);
        size_t used = rest * (size_t)format_bits[f] % 8;
        size_t last = nb + (nb - 1) * 4 * (size_t)format_bits[f] + rest * format_bits[f] / 8;
        if (used)
            enc[last] &= (unsigned char)((1u << used) - 1);
        fill(x, n, FILL_NORMAL, 31);
        fill(local, n, FILL_SPECIAL, 32);
        for (size_t i = 0; i < n; i += 5)
            local[i] = ldexpf(local[i], 100); /* sums beyond FLT_MAX */
        codec_where_t w0 = where_of(4, 0, 0, 1), w1 = where_of(4, 5, 2, 1);
        result_t a = compare(f, &cfg_rne, &w0, &w1, x, local, n, enc, bytes);
        result_t b = compare(f, &cfg_sr, &w0, &w1, x, local, n, enc, bytes);
        ok(!a.decode && !a.accumulate && !a.fused && !b.fused,
           "%s: arbitrary bytes decode, accumulate and fuse (nearest and stochastic) as on the CPU",
           formats[f]);
        free(enc);
    }
    free(x), free(local);
}

/* Bad input is refused as the CPU refuses it, and nothing is written. */
static void test_refused(void)
{
    const size_t n = 33;
    float x[33], sentinel[33], got[33];
    fill(x, n, FILL_NORMAL, 5);
    for (size_t i = 0; i < n; i++)
        sentinel[i] = 12345.0f;
    for (int f = 0; f < 5; f++) {
        const char *name = formats[f];
        const codec_ops_t *ops = codec_find(name);
        size_t bytes = ops->max_encoded_bytes(NULL, n), b = 0, b2 = 77;
        unsigned char *enc = malloc(bytes), *out = malloc(bytes), zeros[64] = {0};
        float cpu[33];
        ops->encode(NULL, NULL, x, n, enc, &b);
        if (format_bits[f] < 8)
            enc[bytes - 1] |= 0x80; /* a padding bit after the one value of the last block */
        tdl_status_t cpu_st = ops->decode(NULL, enc, bytes, cpu, n);
        unsigned char *de = dev_put(enc, bytes), *dout = dev_put(NULL, bytes);
        float *dd = dev_put(sentinel, sizeof(sentinel)), *dl = dev_put(x, sizeof(x));
        int refused = 1;
        if (format_bits[f] < 8) {
            refused = cpu_st == TDL_ERR_CORRUPT &&
                      tdl_cuda_mx_decode(gpu, name, de, bytes, dd, n, 1) == TDL_ERR_CORRUPT &&
                      tdl_cuda_mx_fused(gpu, name, NULL, NULL, de, bytes, dl, n, dout, &b2) ==
                          TDL_ERR_CORRUPT &&
                      strstr(tdl_error_get(), "padding");
        }
        refused = refused &&
                  tdl_cuda_mx_decode(gpu, name, de, bytes - 1, dd, n, 0) == TDL_ERR_CORRUPT &&
                  tdl_cuda_mx_fused(gpu, name, NULL, NULL, de, bytes + 1, dl, n, dout, &b2) ==
                      TDL_ERR_CORRUPT;
        dev_get(got, dd, sizeof(got));
        dev_get(out, dout, bytes);
        ok(refused && b2 == 77 && memcmp(got, sentinel, sizeof(got)) == 0 &&
               memcmp(out, zeros, bytes) == 0,
           "%s: %sa wrong size %s corrupt, and nothing is written", name,
           format_bits[f] < 8 ? "padding bits set or " : "", format_bits[f] < 8 ? "are" : "is");
        tdl_gpu_free(gpu, de), tdl_gpu_free(gpu, dout), tdl_gpu_free(gpu, dd);
        tdl_gpu_free(gpu, dl);
        free(enc), free(out);
    }

    float *dx = dev_put(x, sizeof(x));
    unsigned char *dout = dev_put(NULL, 64);
    unsigned char host[2][64];
    size_t b1 = 0, b2 = 0;
    ok(tdl_cuda_mx_encode(gpu, "mxfp8_e4m3", &cfg_sr, NULL, dx, n, dout, &b1) ==
               TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "stochastic"),
       "stochastic rounding without a where is refused: %s", tdl_error_get());
    ok(tdl_cuda_mx_encode(gpu, "dynamiq", NULL, NULL, dx, n, dout, &b1) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "'dynamiq'") &&
           tdl_cuda_mx_decode(gpu, "mxfp5", dout, 10, (float *)dx, n, 0) == TDL_ERR_INVALID_ARG &&
           tdl_cuda_mx_decode(gpu, NULL, dout, 10, (float *)dx, n, 0) == TDL_ERR_INVALID_ARG,
       "a format without MX kernels is refused: %s", tdl_error_get());
    ok(tdl_cuda_mx_encode(NULL, "mxfp4", NULL, NULL, dx, n, dout, &b1) == TDL_ERR_INVALID_ARG &&
           tdl_cuda_mx_encode(gpu, "mxfp4", NULL, NULL, NULL, n, dout, &b1) == TDL_ERR_INVALID_ARG,
       "no context or a NULL buffer is refused");
    int same = tdl_cuda_mx_encode(gpu, "mxfp6", NULL, NULL, dx, n, dout, &b1) == TDL_OK &&
               tdl_gpu_finish(gpu) == TDL_OK;
    dev_get(host[0], dout, b1);
    same = same && tdl_cuda_mx_encode(gpu, "mxfp6_e3m2", NULL, NULL, dx, n, dout, &b2) == TDL_OK &&
           tdl_gpu_finish(gpu) == TDL_OK;
    dev_get(host[1], dout, b2);
    ok(same && b1 == b2 && b1 == 2 + 24 + 1 && memcmp(host[0], host[1], b1) == 0,
       "mxfp6 is E3M2 on the GPU too");
    b1 = 99;
    ok(tdl_cuda_mx_encode(gpu, "mxfp8", NULL, NULL, NULL, 0, NULL, &b1) == TDL_OK && b1 == 0 &&
           tdl_cuda_mx_decode(gpu, "mxfp8", NULL, 0, NULL, 0, 0) == TDL_OK &&
           tdl_cuda_mx_decode(gpu, "mxfp8", dout, 1, (float *)dx, 0, 0) == TDL_ERR_CORRUPT,
       "zero values encode to zero bytes and decode from nothing else");
    tdl_gpu_free(gpu, dx), tdl_gpu_free(gpu, dout);
}
