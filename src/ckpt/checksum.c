/* HDF5's Fletcher32 checksum, computed by ckpt itself (doc/checkpoint.md).
 *
 * Direct chunk I/O: HDF5's Fletcher32 filter reads the data a byte at a time and copies every
 * chunk through its pipeline; at checkpoint sizes that is most of the time spent. tidal computes
 * the same checksum itself, in the same blocks of 360 words (so every intermediate sum is the one
 * HDF5's algorithm reaches, bit for bit), and moves whole chunks with H5Dwrite_chunk and
 * H5Dread_chunk (src/ckpt/write.c, src/ckpt/read.c). The files are the same: any HDF5 reader
 * applies the filter and checks the checksum as usual (tests/unit/test_ckpt_weights compares
 * with the library's own filter). */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

/* The Fletcher32 checksum of HDF5 (H5_checksum_fletcher32): big-endian 16-bit words, sums
 * folded every 360 words, an odd last byte as the high byte of a word. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default"), optimize("O3")))
#endif
uint32_t
ckpt_fletcher32(const void *data, size_t len)
{
    const uint8_t *d = data;
    size_t words = len / 2;
    uint64_t sum1 = 0, sum2 = 0;
    while (words) {
        size_t t = words > 360 ? 360 : words;
        words -= t;
        /* sum1 += w_i; sum2 += sum1 after each: over the block, sum2 gains t * sum1 (from
         * before) plus sum_i (t - i) w_i, all below 2^32 as HDF5's 32-bit sums are */
        uint32_t a = 0, b = 0;
        for (size_t i = 0; i < t; i++) {
            uint32_t w = (uint32_t)d[2 * i] << 8 | d[2 * i + 1];
            a += w;
            b += (uint32_t)(t - i) * w;
        }
        d += 2 * t;
        sum2 += t * sum1 + b;
        sum1 += a;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (len % 2) {
        sum1 += (uint32_t)*d << 8;
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (uint32_t)(sum2 << 16 | sum1);
}
