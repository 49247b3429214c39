/* Philox4x32-10 against Random123's published known-answer vectors, and the stream contract:
 * every word is a function of (seed, stream, position). */
#include "config.h"

#include <string.h>

#include "core/core.h"
#include "tap.h"

static void kat(const uint32_t ctr[4], const uint32_t key[2], const uint32_t want[4],
                const char *name)
{
    uint32_t out[4];
    tdl_philox4x32_10(ctr, key, out);
    int same = out[0] == want[0] && out[1] == want[1] && out[2] == want[2] && out[3] == want[3];
    ok(same, "Random123 kat_vectors philox4x32 10 %s", name);
    if (!same)
        diag("got %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
}

int main(void)
{
    /* tests/kat_vectors of github.com/DEShawResearch/random123 */
    kat((const uint32_t[]){0, 0, 0, 0}, (const uint32_t[]){0, 0},
        (const uint32_t[]){0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}, "zeros");
    kat((const uint32_t[]){0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
        (const uint32_t[]){0xffffffff, 0xffffffff},
        (const uint32_t[]){0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}, "ones");
    kat((const uint32_t[]){0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
        (const uint32_t[]){0xa4093822, 0x299f31d0},
        (const uint32_t[]){0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}, "pi digits");

    /* Stream layout: word p of (seed, stream) is word p%4 of block (p/4, stream) keyed by seed. */
    tdl_rng_t r;
    tdl_rng_init(&r, 0, 0);
    ok(tdl_rng_u32(&r) == 0x6627e8d5, "word 0 of seed 0, stream 0 is the zeros vector's word 0");
    tdl_rng_init(&r, 0x299f31d0a4093822ull, 0x0370734413198a2eull);
    tdl_rng_seek(&r, 4 * 0x05a308d3243f6a88ull + 2);
    uint32_t direct[4];
    tdl_philox4x32_10((const uint32_t[]){0x243f6a88, 0x05a308d3, 0x13198a2e, 0x03707344},
                      (const uint32_t[]){0xa4093822, 0x299f31d0}, direct);
    uint32_t w2 = tdl_rng_u32(&r), w3 = tdl_rng_u32(&r), w4 = tdl_rng_u32(&r);
    ok(w2 == direct[2] && w3 == direct[3], "position maps to counter (p/4, stream), key seed");
    tdl_philox4x32_10((const uint32_t[]){0x243f6a89, 0x05a308d3, 0x13198a2e, 0x03707344},
                      (const uint32_t[]){0xa4093822, 0x299f31d0}, direct);
    ok(w4 == direct[0], "the next block follows at counter + 1");

    /* Reproducible: two generators with the same (seed, stream) agree word for word. */
    tdl_rng_t a, b;
    tdl_rng_init(&a, 42, 7);
    tdl_rng_init(&b, 42, 7);
    int same = 1;
    uint32_t first[1000];
    for (int i = 0; i < 1000; i++) {
        first[i] = tdl_rng_u32(&a);
        same &= first[i] == tdl_rng_u32(&b);
    }
    ok(same, "same seed and stream give the same 1000 words");

    /* Seekable: jumping to any position continues the same sequence. */
    int seek_ok = 1;
    for (uint64_t p = 0; p < 1000; p += 37) {
        tdl_rng_seek(&b, p);
        seek_ok &= tdl_rng_u32(&b) == first[p];
    }
    ok(seek_ok, "seek(p) then draw gives word p, at unaligned positions too");

    /* Distinct streams and seeds differ. */
    tdl_rng_t c, d;
    tdl_rng_init(&c, 42, 8);
    tdl_rng_init(&d, 43, 7);
    int diff_stream = 0, diff_seed = 0;
    for (int i = 0; i < 64; i++) {
        diff_stream += tdl_rng_u32(&c) != first[i];
        diff_seed += tdl_rng_u32(&d) != first[i];
    }
    ok(diff_stream > 60 && diff_seed > 60, "another stream or seed gives another sequence");

    /* Distribution sanity: uniform mean and variance, normal mean and variance. */
    tdl_rng_t u;
    tdl_rng_init(&u, 1, 0);
    const int n = 200000;
    double s = 0, s2 = 0, mn = 1, mx = 0;
    for (int i = 0; i < n; i++) {
        double x = tdl_rng_uniform(&u);
        s += x, s2 += x * x;
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
    }
    is_near(s / n, 0.5, 0.005, "uniform mean is 1/2");
    is_near(s2 / n - (s / n) * (s / n), 1.0 / 12, 0.002, "uniform variance is 1/12");
    ok(mn >= 0 && mx < 1, "uniform stays in [0, 1)");
    s = s2 = 0;
    double s4 = 0;
    for (int i = 0; i < n; i++) {
        double x = tdl_rng_normal(&u);
        s += x, s2 += x * x, s4 += x * x * x * x;
    }
    is_near(s / n, 0.0, 0.01, "normal mean is 0");
    is_near(s2 / n, 1.0, 0.02, "normal variance is 1");
    is_near(s4 / n, 3.0, 0.1, "normal fourth moment is 3");

    /* tdl_rng_below is in range and covers every value. */
    int hist[7] = {0};
    int below_ok = 1;
    for (int i = 0; i < 70000; i++) {
        uint64_t v = tdl_rng_below(&u, 7);
        below_ok &= v < 7;
        if (v < 7)
            hist[v]++;
    }
    int flat = 1;
    for (int i = 0; i < 7; i++)
        flat &= hist[i] > 9500 && hist[i] < 10500;
    ok(below_ok && flat, "below(7) is in range and roughly flat");

    /* fill_normal consumes exactly two words per value: positions stay predictable. */
    float buf[10];
    tdl_rng_init(&a, 5, 5);
    tdl_rng_fill_normal(&a, buf, 10);
    is_int(a.pos, 20, "fill_normal of 10 values advances 20 words");
    tdl_rng_init(&b, 5, 5);
    tdl_rng_seek(&b, 18);
    ok(tdl_rng_normal(&b) == buf[9], "the 10th normal is reproducible from position 18");

    /* fill_u32 (16 blocks at a time) gives the words one draw at a time would: from aligned and
     * unaligned positions, across the counter's 32-bit carry, then draws continue from there. */
    static uint32_t bulk[1000], one[1000];
    const uint64_t starts[] = {0, 3, 4 * 0xfffffff0ull + 1, 4 * 0xffffffffull};
    const size_t lens[] = {1000, 63, 200, 129};
    int fill_ok = 1;
    for (int t = 0; t < 4; t++) {
        tdl_rng_init(&a, 0x299f31d0a4093822ull, 0x0370734413198a2eull + (uint64_t)t);
        tdl_rng_init(&b, 0x299f31d0a4093822ull, 0x0370734413198a2eull + (uint64_t)t);
        tdl_rng_seek(&a, starts[t]);
        tdl_rng_seek(&b, starts[t]);
        tdl_rng_fill_u32(&a, bulk, lens[t]);
        for (size_t i = 0; i < lens[t]; i++)
            one[i] = tdl_rng_u32(&b);
        fill_ok &=
            !memcmp(bulk, one, lens[t] * 4) && a.pos == b.pos && tdl_rng_u32(&a) == tdl_rng_u32(&b);
    }
    ok(fill_ok, "fill_u32 gives the words of single draws (unaligned starts, the 32-bit carry)");
    return done_testing();
}
