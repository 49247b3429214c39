/* Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11).
 * Word `pos` of stream (seed, stream) is word pos % 4 of the block with counter
 * (pos / 4, stream) under key seed, so any position is reachable in O(1). */
#include "config.h"

#include <math.h>
#include <pthread.h>

#include "core/core.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void tdl_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(PHILOX_M0, c0, &hi0);
        uint32_t lo1 = mulhilo(PHILOX_M1, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n1 = lo1;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        uint32_t n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

void tdl_rng_init(tdl_rng_t *rng, uint64_t seed, uint64_t stream)
{
    rng->seed = seed;
    rng->stream = stream;
    rng->pos = 0;
    rng->block_id = UINT64_MAX;
}

void tdl_rng_seek(tdl_rng_t *rng, uint64_t pos)
{
    rng->pos = pos;
}

uint32_t tdl_rng_u32(tdl_rng_t *rng)
{
    uint64_t id = rng->pos >> 2;
    if (id != rng->block_id) {
        const uint32_t ctr[4] = {(uint32_t)id, (uint32_t)(id >> 32), (uint32_t)rng->stream,
                                 (uint32_t)(rng->stream >> 32)};
        const uint32_t key[2] = {(uint32_t)rng->seed, (uint32_t)(rng->seed >> 32)};
        tdl_philox4x32_10(ctr, key, rng->block);
        rng->block_id = id;
    }
    return rng->block[rng->pos++ & 3];
}

/* 16 Philox blocks, counters id .. id + 15, in the lanes of AVX-512 registers, then transposed
 * into word order. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define RNG_HAVE_AVX512 1

__attribute__((target("avx512f"))) static __m512i rng_mulhilo(__m512i c, __m512i m, __m512i *hi)
{
    /* 32 x 32 -> 64-bit products of the even lanes, then of the odd ones */
    __m512i even = _mm512_mul_epu32(c, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);
    *hi = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(even, 32), odd);
    return _mm512_mask_blend_epi32(0xaaaa, even, _mm512_slli_epi64(odd, 32));
}

__attribute__((target("avx512f"))) static void philox16_avx512(uint64_t seed, uint64_t stream,
                                                               uint64_t id, uint32_t *out)
{
    __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i base = _mm512_set1_epi32((int32_t)(uint32_t)id);
    __m512i c0 = _mm512_add_epi32(base, iota);
    __m512i c1 = _mm512_set1_epi32((int32_t)(uint32_t)(id >> 32));
    c1 = _mm512_mask_add_epi32(c1, _mm512_cmplt_epu32_mask(c0, base), c1, _mm512_set1_epi32(1));
    __m512i c2 = _mm512_set1_epi32((int32_t)(uint32_t)stream);
    __m512i c3 = _mm512_set1_epi32((int32_t)(uint32_t)(stream >> 32));
    __m512i m0 = _mm512_set1_epi32((int32_t)PHILOX_M0), m1 = _mm512_set1_epi32((int32_t)PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        __m512i hi0, hi1;
        __m512i lo0 = rng_mulhilo(c0, m0, &hi0), lo1 = rng_mulhilo(c2, m1, &hi1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int32_t)k0));
        c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int32_t)k1));
        c1 = lo1, c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    /* lane i of ck is word 4i + k: u_k holds block 4q + k in its 128-bit lane q */
    __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
    __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
    __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    __m512i a = _mm512_shuffle_i32x4(u0, u1, 0x44), b = _mm512_shuffle_i32x4(u2, u3, 0x44);
    __m512i c = _mm512_shuffle_i32x4(u0, u1, 0xee), d = _mm512_shuffle_i32x4(u2, u3, 0xee);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(a, b, 0x88));
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(a, b, 0xdd));
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(c, d, 0x88));
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(c, d, 0xdd));
}
#endif

static bool rng_avx512;
static pthread_once_t rng_avx512_once = PTHREAD_ONCE_INIT;

static void rng_avx512_init(void)
{
#ifdef RNG_HAVE_AVX512
    __builtin_cpu_init();
    rng_avx512 = __builtin_cpu_supports("avx512f");
#endif
}

void tdl_philox_words64(uint64_t seed, uint64_t stream, uint64_t id, uint32_t out[64])
{
    pthread_once(&rng_avx512_once, rng_avx512_init);
#ifdef RNG_HAVE_AVX512
    if (rng_avx512) {
        philox16_avx512(seed, stream, id, out);
        return;
    }
#endif
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (uint64_t i = 0; i < 16; i++) {
        uint64_t b = id + i;
        const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)stream,
                                 (uint32_t)(stream >> 32)};
        tdl_philox4x32_10(ctr, key, out + 4 * i);
    }
}

void tdl_rng_fill_u32(tdl_rng_t *rng, uint32_t *out, size_t n)
{
    size_t i = 0;
    while (i < n && (rng->pos & 3)) /* to a block's start */
        out[i++] = tdl_rng_u32(rng);
    for (; n - i >= 64; i += 64, rng->pos += 64)
        tdl_philox_words64(rng->seed, rng->stream, rng->pos >> 2, out + i);
    while (i < n)
        out[i++] = tdl_rng_u32(rng);
}

uint64_t tdl_rng_u64(tdl_rng_t *rng)
{
    uint64_t lo = tdl_rng_u32(rng);
    return lo | ((uint64_t)tdl_rng_u32(rng) << 32);
}

float tdl_rng_uniform(tdl_rng_t *rng)
{
    return (float)(tdl_rng_u32(rng) >> 8) * 0x1.0p-24f;
}

double tdl_rng_uniform_f64(tdl_rng_t *rng)
{
    return (double)(tdl_rng_u64(rng) >> 11) * 0x1.0p-53;
}

float tdl_rng_normal(tdl_rng_t *rng)
{
    /* u1 in (0, 1] keeps log() finite. */
    double u1 = ((double)(tdl_rng_u32(rng) >> 8) + 1.0) * 0x1.0p-24;
    double u2 = (double)(tdl_rng_u32(rng) >> 8) * 0x1.0p-24;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t tdl_rng_below(tdl_rng_t *rng, uint64_t n)
{
    /* Rejection of the short last interval: unbiased, expected draws < 2. */
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
    uint64_t x;
    do {
        x = tdl_rng_u64(rng);
    } while (x >= limit);
    return x % n;
}

void tdl_rng_fill_normal(tdl_rng_t *rng, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = tdl_rng_normal(rng);
}
