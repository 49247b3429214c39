/* gfc without a launcher: a world of one process (the start-up all-gather copies its own bytes),
 * group validation, collectives on a group of just this rank, the timeout, gfc_reduce_local for
 * every type and operation against hand-worked values, the names and parsers, and the bf16/f16
 * conversions of src/core against hand-worked bit patterns. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "gfc/gfc.h"
#include "gfc/gfc_internal.h"
#include "tap.h"

/* ---- conversions ------------------------------------------------------------------------- */

static void test_bf16(void)
{
    static const struct {
        uint32_t in;
        uint16_t want;
        const char *why;
    } cases[] = {
        {0x3f800000, 0x3f80, "1.0"},
        {0xbfc00000, 0xbfc0, "-1.5"},
        {0x80000000, 0x8000, "-0.0 keeps its sign"},
        {0x3f808000, 0x3f80, "1 + 2^-8: tie goes to even (down)"},
        {0x3f818000, 0x3f82, "1 + 3 * 2^-8: tie goes to even (up)"},
        {0x3f808001, 0x3f81, "just above the tie rounds up"},
        {0x3f807fff, 0x3f80, "just below the tie rounds down"},
        {0x3f80ffff, 0x3f81, "1.0078...: rounds up"},
        {0x7f7fffff, 0x7f80, "FLT_MAX overflows to +Inf"},
        {0xff7fffff, 0xff80, "-FLT_MAX overflows to -Inf"},
        {0x7f7f7fff, 0x7f7f, "below the overflow tie stays finite"},
        {0x7f7f8000, 0x7f80, "tie at the top, odd: up to Inf"},
        {0x7f800000, 0x7f80, "+Inf"},
        {0xff800000, 0xff80, "-Inf"},
        {0x000116c2, 0x0001, "f32 subnormal 1e-40 -> bf16 subnormal"},
        {0x00008000, 0x0000, "half the smallest bf16 subnormal: tie to even zero"},
        {0x00018000, 0x0002, "1.5 smallest subnormals: tie to even (2)"},
        {0x00000001, 0x0000, "smallest f32 subnormal rounds to 0"},
        {0x007fffff, 0x0080, "largest f32 subnormal rounds up to the smallest normal"},
    };
    for (size_t i = 0; i < TDL_ARRAY_SIZE(cases); i++) {
        uint16_t got = tdl_bf16_from_f32(tdl_bits_f32(cases[i].in));
        ok(got == cases[i].want, "bf16 from %08" PRIx32 " = %04x: %s", cases[i].in, cases[i].want,
           cases[i].why);
        if (got != cases[i].want)
            diag("got %04x", got);
    }
    uint16_t qn = tdl_bf16_from_f32(tdl_bits_f32(0x7fc00000));
    uint16_t sn = tdl_bf16_from_f32(tdl_bits_f32(0x7f800001)); /* payload only in the low bits */
    uint16_t nn = tdl_bf16_from_f32(tdl_bits_f32(0xffc00001));
    ok((qn & 0x7f80) == 0x7f80 && (qn & 0x7f) != 0, "quiet NaN stays NaN (%04x)", qn);
    ok((sn & 0x7f80) == 0x7f80 && (sn & 0x7f) != 0,
       "NaN with its payload in the dropped bits stays NaN, not Inf (%04x)", sn);
    ok((nn & 0xff80) == 0xff80 && (nn & 0x7f) != 0, "negative NaN stays a negative NaN (%04x)", nn);

    ok(tdl_f32_bits(tdl_bf16_to_f32(0x3f80)) == 0x3f800000, "bf16 0x3f80 -> 1.0");
    ok(tdl_f32_bits(tdl_bf16_to_f32(0x0001)) == 0x00010000, "bf16 subnormal 0x0001 -> 2^-133");
    ok(tdl_f32_bits(tdl_bf16_to_f32(0xff80)) == 0xff800000, "bf16 -Inf");
    ok(tdl_f32_bits(tdl_bf16_to_f32(0x8000)) == 0x80000000, "bf16 -0");
    int round_trip = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t b = (uint16_t)h;
        if ((b & 0x7f80) == 0x7f80 && (b & 0x7f))
            continue; /* NaNs may be quieted */
        round_trip &= tdl_bf16_from_f32(tdl_bf16_to_f32(b)) == b;
    }
    ok(round_trip, "every non-NaN bf16 survives to f32 and back");
}

static void test_f16(void)
{
    static const struct {
        float in;
        uint16_t want;
        const char *why;
    } cases[] = {
        {1.0f, 0x3c00, "1.0"},
        {-2.0f, 0xc000, "-2.0"},
        {0.1f, 0x2e66, "0.1 (0x3dcccccd) rounds down"},
        {-0.0f, 0x8000, "-0.0 keeps its sign"},
        {65504.0f, 0x7bff, "65504, the largest finite"},
        {65519.0f, 0x7bff, "65519 rounds down to 65504"},
        {65520.0f, 0x7c00, "65520: tie at the top, odd: Inf"},
        {65536.0f, 0x7c00, "65536 overflows"},
        {1e6f, 0x7c00, "1e6 overflows to +Inf"},
        {-1e6f, 0xfc00, "-1e6 overflows to -Inf"},
        {0x1.002p0f, 0x3c00, "1 + 2^-11: tie to even (down)"},
        {0x1.006p0f, 0x3c02, "1 + 3 * 2^-11: tie to even (up)"},
        {0x1.00201p0f, 0x3c01, "just above the tie rounds up"},
        {0x1p-14f, 0x0400, "2^-14, the smallest normal"},
        {0x1p-24f, 0x0001, "2^-24, the smallest subnormal"},
        {0x1p-25f, 0x0000, "2^-25: tie between 0 and 2^-24 goes to 0"},
        {0x1.8p-24f, 0x0002, "1.5 * 2^-24: tie goes to even 2"},
        {0x1.000002p-25f, 0x0001, "just above 2^-25 rounds up"},
        {0x1.ffcp-15f, 0x0400, "1023.5 * 2^-24: subnormal tie rounds up into the normals"},
        {0x1.ffap-15f, 0x03ff, "1023.25 * 2^-24: the largest subnormal"},
        {0x1p-30f, 0x0000, "2^-30 underflows to 0"},
        {-0x1p-24f, 0x8001, "-2^-24"},
        {INFINITY, 0x7c00, "+Inf"},
        {-INFINITY, 0xfc00, "-Inf"},
    };
    for (size_t i = 0; i < TDL_ARRAY_SIZE(cases); i++) {
        uint16_t got = tdl_f16_from_f32(cases[i].in);
        ok(got == cases[i].want, "f16 from %a = %04x: %s", (double)cases[i].in, cases[i].want,
           cases[i].why);
        if (got != cases[i].want)
            diag("got %04x", got);
    }
    uint16_t qn = tdl_f16_from_f32(NAN), sn = tdl_f16_from_f32(tdl_bits_f32(0x7f800001));
    ok((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0, "NaN stays NaN (%04x)", qn);
    ok((sn & 0x7c00) == 0x7c00 && (sn & 0x3ff) != 0,
       "NaN with its payload in the dropped bits stays NaN, not Inf (%04x)", sn);

    ok(tdl_f16_to_f32(0x0001) == 0x1p-24f, "f16 0x0001 -> 2^-24");
    ok(tdl_f16_to_f32(0x03ff) == 0x1.ff8p-15f, "f16 0x03ff -> largest subnormal");
    ok(tdl_f16_to_f32(0xfbff) == -65504.0f, "f16 0xfbff -> -65504");
    ok(isinf(tdl_f16_to_f32(0x7c00)) && tdl_f16_to_f32(0x7c00) > 0, "f16 0x7c00 -> +Inf");
    ok(isnan(tdl_f16_to_f32(0x7e00)), "f16 0x7e00 -> NaN");
    float mz = tdl_f16_to_f32(0x8000);
    ok(mz == 0 && signbit(mz), "f16 0x8000 -> -0.0");
    int round_trip = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t b = (uint16_t)h;
        if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff))
            continue;
        round_trip &= tdl_f16_from_f32(tdl_f16_to_f32(b)) == b;
    }
    ok(round_trip, "every non-NaN f16 survives to f32 and back");
}

/* ---- gfc_reduce_local -------------------------------------------------------------------- */

static void test_reduce_local(void)
{
    /* f32: the compiler's IEEE single operations are the reference */
    float fa[4] = {1e8f, 0.1f, -3.5f, 2.0f}, fb[4] = {1.0f, 0.2f, 3.5f, -7.25f};
    float want_sum[4] = {1e8f, 0.1f + 0.2f, 0.0f, -5.25f};
    float want_max[4] = {1e8f, 0.2f, 3.5f, 2.0f}, want_min[4] = {1.0f, 0.1f, -3.5f, -7.25f};
    const float *want_f[3] = {want_sum, want_max, want_min};
    for (int op = 0; op < GFC_OP_COUNT; op++) {
        float x[4];
        memcpy(x, fa, sizeof(x));
        tdl_status_t st = gfc_reduce_local(x, fb, 4, GFC_DT_F32, (gfc_redop_t)op);
        ok(st == TDL_OK && memcmp(x, want_f[op], sizeof(x)) == 0, "f32 %s",
           gfc_redop_name((gfc_redop_t)op));
    }

    /* bf16: sums round to nearest even; in[] holds the second operand */
    uint16_t ba[6] = {0x3f80, 0x3f81, 0x3f80, 0x7f7f, 0xc040, 0x0001};
    uint16_t bb[6] = {0x3b80, 0x3b80, 0x3b81, 0x7f7f, 0x4040, 0x0001};
    /* 1+2^-8 tie->1; (1+2^-7)+2^-8 tie->1+2^-6; 1+2^-8+2^-15 ->1+2^-7; max+max -> Inf; -3+3 -> 0;
     * two smallest subnormals -> 2 */
    uint16_t bsum[6] = {0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x0000, 0x0002};
    uint16_t bmax[6] = {0x3f80, 0x3f81, 0x3f80, 0x7f7f, 0x4040, 0x0001};
    uint16_t bmin[6] = {0x3b80, 0x3b80, 0x3b81, 0x7f7f, 0xc040, 0x0001};
    const uint16_t *want_b[3] = {bsum, bmax, bmin};
    for (int op = 0; op < GFC_OP_COUNT; op++) {
        uint16_t x[6];
        memcpy(x, ba, sizeof(x));
        tdl_status_t st = gfc_reduce_local(x, bb, 6, GFC_DT_BF16, (gfc_redop_t)op);
        int same = st == TDL_OK && memcmp(x, want_b[op], sizeof(x)) == 0;
        ok(same, "bf16 %s (ties to even, overflow to Inf, subnormals)",
           gfc_redop_name((gfc_redop_t)op));
        if (!same)
            diag("got %04x %04x %04x %04x %04x %04x", x[0], x[1], x[2], x[3], x[4], x[5]);
    }

    /* f16 */
    uint16_t ha[6] = {0x3c00, 0x3c01, 0x7bff, 0x7bff, 0x0001, 0xc500};
    uint16_t hb[6] = {0x1000, 0x1000, 0x4c00, 0x4800, 0x0001, 0x4400};
    /* 1+2^-11 tie->1; (1+2^-10)+2^-11 tie->1+2^-9; 65504+16 = 65520 tie->Inf; 65504+8 -> 65504;
     * 2^-24+2^-24 -> 2^-23; -5+4 -> -1 */
    uint16_t hsum[6] = {0x3c00, 0x3c02, 0x7c00, 0x7bff, 0x0002, 0xbc00};
    uint16_t hmax[6] = {0x3c00, 0x3c01, 0x7bff, 0x7bff, 0x0001, 0x4400};
    uint16_t hmin[6] = {0x1000, 0x1000, 0x4c00, 0x4800, 0x0001, 0xc500};
    const uint16_t *want_h[3] = {hsum, hmax, hmin};
    for (int op = 0; op < GFC_OP_COUNT; op++) {
        uint16_t x[6];
        memcpy(x, ha, sizeof(x));
        tdl_status_t st = gfc_reduce_local(x, hb, 6, GFC_DT_F16, (gfc_redop_t)op);
        int same = st == TDL_OK && memcmp(x, want_h[op], sizeof(x)) == 0;
        ok(same, "f16 %s (ties to even, overflow to Inf, subnormals)",
           gfc_redop_name((gfc_redop_t)op));
        if (!same)
            diag("got %04x %04x %04x %04x %04x %04x", x[0], x[1], x[2], x[3], x[4], x[5]);
    }

    /* i32 and i64: exact, also beyond 2^53 */
    int32_t ia[4] = {INT32_MAX - 1, -5, INT32_MIN, 7}, ib[4] = {1, -5, -1 - INT32_MIN, -9};
    int32_t isum[4] = {INT32_MAX, -10, -1, -2}, imax[4] = {INT32_MAX - 1, -5, -1 - INT32_MIN, 7};
    int32_t imin[4] = {1, -5, INT32_MIN, -9};
    const int32_t *want_i[3] = {isum, imax, imin};
    for (int op = 0; op < GFC_OP_COUNT; op++) {
        int32_t x[4];
        memcpy(x, ia, sizeof(x));
        tdl_status_t st = gfc_reduce_local(x, ib, 4, GFC_DT_I32, (gfc_redop_t)op);
        ok(st == TDL_OK && memcmp(x, want_i[op], sizeof(x)) == 0, "i32 %s",
           gfc_redop_name((gfc_redop_t)op));
    }
    int64_t la[3] = {((int64_t)1 << 62) + 1, INT64_MIN, -3}, lb[3] = {2, INT64_MAX, 5};
    int64_t lsum[3] = {((int64_t)1 << 62) + 3, -1, 2},
            lmax[3] = {((int64_t)1 << 62) + 1, INT64_MAX, 5};
    int64_t lmin[3] = {2, INT64_MIN, -3};
    const int64_t *want_l[3] = {lsum, lmax, lmin};
    for (int op = 0; op < GFC_OP_COUNT; op++) {
        int64_t x[3];
        memcpy(x, la, sizeof(x));
        tdl_status_t st = gfc_reduce_local(x, lb, 3, GFC_DT_I64, (gfc_redop_t)op);
        ok(st == TDL_OK && memcmp(x, want_l[op], sizeof(x)) == 0, "i64 %s (2^62 + 1 + 2 exact)",
           gfc_redop_name((gfc_redop_t)op));
    }

    /* bytes: max and min as unsigned; no sum */
    uint8_t ya[4] = {0x01, 0x7f, 0x80, 0xff}, yb[4] = {0x02, 0x80, 0x7f, 0x00};
    uint8_t ymax[4] = {0x02, 0x80, 0x80, 0xff}, ymin[4] = {0x01, 0x7f, 0x7f, 0x00}, y[4];
    memcpy(y, ya, 4);
    ok(gfc_reduce_local(y, yb, 4, GFC_DT_BYTE, GFC_OP_MAX) == TDL_OK && memcmp(y, ymax, 4) == 0,
       "byte max, unsigned");
    memcpy(y, ya, 4);
    ok(gfc_reduce_local(y, yb, 4, GFC_DT_BYTE, GFC_OP_MIN) == TDL_OK && memcmp(y, ymin, 4) == 0,
       "byte min, unsigned");
    memcpy(y, ya, 4);
    tdl_status_t st = gfc_reduce_local(y, yb, 4, GFC_DT_BYTE, GFC_OP_SUM);
    ok(st != TDL_OK && memcmp(y, ya, 4) == 0, "byte sum is refused (%s) and changes nothing",
       tdl_status_str(st));

    /* n = 0 touches nothing */
    float z = 5.0f, zin = 1.0f;
    ok(gfc_reduce_local(&z, &zin, 0, GFC_DT_F32, GFC_OP_SUM) == TDL_OK && z == 5.0f,
       "n = 0 is a no-op");
    /* a long vector, sum, against the compiler */
    enum { N = 1000 };
    float va[N], vb[N];
    int all = 1;
    for (int i = 0; i < N; i++) {
        va[i] = (float)i * 0.37f - 100.0f;
        vb[i] = 1.0f / (float)(i + 1);
    }
    float vx[N];
    memcpy(vx, va, sizeof(vx));
    gfc_reduce_local(vx, vb, N, GFC_DT_F32, GFC_OP_SUM);
    for (int i = 0; i < N; i++)
        all &= vx[i] == va[i] + vb[i];
    ok(all, "f32 sum of 1000 elements matches element-wise IEEE addition");
}

/* ---- names ------------------------------------------------------------------------------- */

static void test_names(void)
{
    static const size_t sizes[GFC_DT_COUNT] = {4, 2, 2, 4, 8, 1};
    for (int d = 0; d < GFC_DT_COUNT; d++) {
        is_int(gfc_dtype_size((gfc_dtype_t)d), sizes[d], "gfc_dtype_size(%s)",
               gfc_dtype_name((gfc_dtype_t)d));
    }
    int distinct = 1;
    for (int a = 0; a < GFC_DT_COUNT; a++)
        for (int b = 0; b < a; b++)
            distinct &= strcmp(gfc_dtype_name((gfc_dtype_t)a), gfc_dtype_name((gfc_dtype_t)b)) != 0;
    ok(distinct, "data type names are distinct");
    ok(strcmp(gfc_redop_name(GFC_OP_SUM), gfc_redop_name(GFC_OP_MAX)) != 0 &&
           strcmp(gfc_redop_name(GFC_OP_MAX), gfc_redop_name(GFC_OP_MIN)) != 0,
       "operation names are distinct");

    for (int a = 0; a < GFC_ALLREDUCE_COUNT; a++) {
        gfc_allreduce_algo_t got = GFC_ALLREDUCE_COUNT;
        const char *name = gfc_allreduce_algo_name((gfc_allreduce_algo_t)a);
        tdl_status_t st = gfc_allreduce_algo_parse(name, &got);
        ok(st == TDL_OK && got == (gfc_allreduce_algo_t)a, "algorithm '%s' parses back", name);
    }
    static const struct {
        const char *name;
        gfc_allreduce_algo_t algo;
    } good[] = {{"auto", GFC_ALLREDUCE_AUTO},
                {"ring", GFC_ALLREDUCE_RING},
                {"butterfly", GFC_ALLREDUCE_BUTTERFLY}};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(good); i++) {
        gfc_allreduce_algo_t got = GFC_ALLREDUCE_COUNT;
        ok(gfc_allreduce_algo_parse(good[i].name, &got) == TDL_OK && got == good[i].algo,
           "'%s' parses", good[i].name);
    }
    static const char *const bad[] = {"", "rings", "bogus", "ring ", "butterfly2"};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(bad); i++) {
        gfc_allreduce_algo_t got = GFC_ALLREDUCE_COUNT;
        tdl_status_t st = gfc_allreduce_algo_parse(bad[i], &got);
        ok(st == TDL_ERR_INVALID_ARG && got == GFC_ALLREDUCE_COUNT &&
               (bad[i][0] == '\0' || strstr(tdl_error_get(), bad[i]) != NULL),
           "'%s' is refused, named in the message, output untouched", bad[i]);
        if (st != TDL_ERR_INVALID_ARG)
            diag("status %s, message '%s'", tdl_status_str(st), tdl_error_get());
    }

    /* every choice of the gfc-allreduce parameter parses */
    const char *choices = NULL;
    for (size_t i = 0; i < gfc_nparams; i++)
        if (strcmp(gfc_params[i].name, "gfc-allreduce") == 0)
            choices = gfc_params[i].choices;
    ok(choices != NULL, "gfc-allreduce is a registered parameter with choices");
    if (choices) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", choices);
        int all = 1, n = 0;
        for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|"), n++) {
            gfc_allreduce_algo_t got;
            all &= gfc_allreduce_algo_parse(tok, &got) == TDL_OK;
        }
        ok(all && n == GFC_ALLREDUCE_COUNT, "the %d choices '%s' all parse", n, choices);
    }
}

/* ---- the choice of an all-reduce algorithm ---------------------------------------------- */

/* The rule gfc chose by before its table (allreduce_algs[]), written out: what was asked, else
 * the configured algorithm; with a codec the ring; recursive doubling up to gfc-small-msg bytes
 * or below 64 bytes a member; above, the butterfly on power-of-two groups and the ring on others.
 */
static gfc_allreduce_algo_t select_expected(const gfc_runtime_config_t *c, int size, size_t bytes,
                                            gfc_allreduce_algo_t asked, bool codec)
{
    if (asked == GFC_ALLREDUCE_AUTO)
        asked = c->allreduce_algo;
    if (asked != GFC_ALLREDUCE_AUTO)
        return asked;
    if (codec)
        return GFC_ALLREDUCE_RING;
    if (bytes <= c->small_msg_bytes || bytes / (size_t)size < 64)
        return GFC_ALLREDUCE_RECURSIVE_DOUBLING;
    if ((size & (size - 1)) == 0)
        return GFC_ALLREDUCE_BUTTERFLY;
    return GFC_ALLREDUCE_RING;
}

static void test_select(void)
{
    gfc_runtime_config_t c;
    gfc_runtime_config_default(&c);
    /* a few by hand, at the default gfc-small-msg (16 KiB) */
    static const struct {
        int size;
        size_t bytes;
        bool codec;
        gfc_allreduce_algo_t want;
    } cases[] = {
        {4, 16 << 10, false, GFC_ALLREDUCE_RECURSIVE_DOUBLING},
        {4, (16 << 10) + 4, false, GFC_ALLREDUCE_BUTTERFLY},
        {6, 1 << 20, false, GFC_ALLREDUCE_RING},
        {8, 1 << 20, true, GFC_ALLREDUCE_RING},
        {8, 4, true, GFC_ALLREDUCE_RING},
        {1024, (64 << 10) - 4, false, GFC_ALLREDUCE_RECURSIVE_DOUBLING}, /* 63 bytes a member */
        {1024, 64 << 10, false, GFC_ALLREDUCE_BUTTERFLY},                /* 64 */
        {1024, 1 << 20, false, GFC_ALLREDUCE_BUTTERFLY},
    };
    for (size_t i = 0; i < TDL_ARRAY_SIZE(cases); i++) {
        gfc_allreduce_algo_t got = gfc_allreduce_select(&c, cases[i].size, cases[i].bytes,
                                                        GFC_ALLREDUCE_AUTO, cases[i].codec);
        ok(got == cases[i].want, "auto on %d members, %zu bytes%s: %s", cases[i].size,
           cases[i].bytes, cases[i].codec ? ", codec" : "", gfc_allreduce_algo_name(got));
    }

    /* the grid: group sizes, vector sizes around every threshold, gfc-small-msg, the configured
     * and the asked algorithm, with and without a codec */
    static const int sizes[] = {1,  2,  3,  4,  5,  6,  7,   8,   9,    12,
                                16, 17, 24, 32, 63, 64, 100, 128, 1000, 1024};
    static const size_t smalls[] = {0, 1, 4096, 16 << 10, (size_t)1 << 30};
    static const size_t fixed[] = {0,
                                   1,
                                   4,
                                   63,
                                   64,
                                   65,
                                   4095,
                                   4096,
                                   4097,
                                   16383,
                                   16 << 10,
                                   16385,
                                   65535,
                                   65536,
                                   1 << 20,
                                   64 << 20,
                                   (size_t)1 << 30,
                                   ((size_t)1 << 30) + 1};
    long cases_run = 0, wrong = 0;
    for (size_t si = 0; si < TDL_ARRAY_SIZE(sizes); si++) {
        int n = sizes[si];
        for (size_t mi = 0; mi < TDL_ARRAY_SIZE(smalls); mi++) {
            c.small_msg_bytes = smalls[mi];
            size_t bytes[TDL_ARRAY_SIZE(fixed) + 6];
            size_t nb = 0;
            for (size_t k = 0; k < TDL_ARRAY_SIZE(fixed); k++)
                bytes[nb++] = fixed[k];
            /* 64 bytes a member, and gfc-small-msg, each on both sides */
            bytes[nb++] = 64 * (size_t)n - 1, bytes[nb++] = 64 * (size_t)n;
            bytes[nb++] = 64 * (size_t)n + 1, bytes[nb++] = smalls[mi];
            bytes[nb++] = smalls[mi] + 1, bytes[nb++] = smalls[mi] ? smalls[mi] - 1 : 0;
            for (size_t bi = 0; bi < nb; bi++)
                for (int conf = 0; conf < GFC_ALLREDUCE_COUNT; conf++)
                    for (int asked = 0; asked < GFC_ALLREDUCE_COUNT; asked++)
                        for (int codec = 0; codec < 2; codec++) {
                            c.allreduce_algo = (gfc_allreduce_algo_t)conf;
                            gfc_allreduce_algo_t want = select_expected(
                                &c, n, bytes[bi], (gfc_allreduce_algo_t)asked, codec);
                            gfc_allreduce_algo_t got = gfc_allreduce_select(
                                &c, n, bytes[bi], (gfc_allreduce_algo_t)asked, codec);
                            cases_run++;
                            if (got != want && wrong++ < 10)
                                diag("%d members, %zu bytes, small %zu, configured %s, asked %s, "
                                     "codec %d: %s, expected %s",
                                     n, bytes[bi], smalls[mi],
                                     gfc_allreduce_algo_name((gfc_allreduce_algo_t)conf),
                                     gfc_allreduce_algo_name((gfc_allreduce_algo_t)asked), codec,
                                     gfc_allreduce_algo_name(got), gfc_allreduce_algo_name(want));
                        }
        }
    }
    ok(wrong == 0, "the table chooses as the rule it replaced: %ld of %ld choices differ", wrong,
       cases_run);
}

/* ---- parameters -------------------------------------------------------------------------- */

static void test_config(void)
{
    gfc_runtime_config_t c;
    memset(&c, 0, sizeof(c));
    gfc_runtime_config_default(&c);
    ok(c.timeout_ms > 0 && c.allreduce_algo == GFC_ALLREDUCE_AUTO && c.small_msg_bytes > 0 &&
           c.ring_chunk_bytes > 0 && c.ring_codec_chunk_bytes > 0,
       "default config: timeout %" PRId64 " ms, auto, small %zu, chunk %zu, codec chunk %zu",
       c.timeout_ms, c.small_msg_bytes, c.ring_chunk_bytes, c.ring_codec_chunk_bytes);

    tdl_params_t *p = NULL;
    tdl_status_t st = tdl_params_create(&p);
    if (st == TDL_OK)
        st = tdl_params_register(p, gfc_params, gfc_nparams);
    if (st == TDL_OK)
        st = tdl_params_set(p, "gfc-timeout-ms", "1234", TDL_PARAM_SRC_CMDLINE, "test");
    if (st == TDL_OK)
        st = tdl_params_set(p, "gfc-allreduce", "butterfly", TDL_PARAM_SRC_CMDLINE, "test");
    if (st == TDL_OK)
        st = tdl_params_set(p, "gfc-ring-codec-chunk", "2m", TDL_PARAM_SRC_CMDLINE, "test");
    gfc_runtime_config_t q;
    memset(&q, 0, sizeof(q));
    if (st == TDL_OK)
        st = gfc_runtime_config_from_params(p, &q);
    ok(st == TDL_OK && q.timeout_ms == 1234 && q.allreduce_algo == GFC_ALLREDUCE_BUTTERFLY &&
           q.ring_codec_chunk_bytes == 2u << 20 && q.ring_chunk_bytes == 256u << 10,
       "config from parameters: gfc-timeout-ms 1234, gfc-allreduce butterfly, "
       "gfc-ring-codec-chunk 2m (gfc-ring-chunk its default)");
    if (st != TDL_OK)
        diag("%s", tdl_error_get());
    tdl_params_destroy(p);
}

/* ---- a world of one ---------------------------------------------------------------------- */

static tdl_status_t self_allgather(const void *mine, size_t len, tdl_blobs_t *all_out)
{
    tdl_blobs_t b = {.count = 1};
    b.len = malloc(sizeof(size_t));
    b.off = malloc(sizeof(size_t));
    b.data = malloc(len ? len : 1);
    if (!b.len || !b.off || !b.data) {
        tdl_blobs_free(&b);
        return tdl_error_raise(TDL_ERR_NOMEM, "self all-gather: out of memory");
    }
    b.len[0] = len;
    b.off[0] = 0;
    memcpy(b.data, mine, len);
    *all_out = b;
    return TDL_OK;
}

static void test_bad_runtime_config(void)
{
    gfc_runtime_config_t c;
    gfc_runtime_t *rt = NULL;
    gfc_runtime_config_default(&c);
    c.rank = 1;
    c.size = 1;
    c.allgather = self_allgather;
    tdl_status_t st = gfc_runtime_create(&c, &rt);
    ok(st != TDL_OK && rt == NULL, "rank 1 of a world of 1 is refused (%s)", tdl_status_str(st));
    if (rt)
        gfc_runtime_destroy(rt);
    rt = NULL;
    c.rank = 0;
    c.allgather = NULL;
    st = gfc_runtime_create(&c, &rt);
    ok(st != TDL_OK && rt == NULL, "no all-gather function is refused (%s)", tdl_status_str(st));
    if (rt)
        gfc_runtime_destroy(rt);
}

static void test_groups(gfc_runtime_t *rt)
{
    gfc_group_t g, untouched;
    memset(&g, 0x5c, sizeof(g));
    untouched = g;
    int r1[1] = {1}, rneg[1] = {-1}, rdup[2] = {0, 0}, r0[1] = {0};
    tdl_status_t st = gfc_group_init(&g, rt, r1, 1, 0);
    ok(st == TDL_ERR_INVALID_ARG && strstr(tdl_error_get(), "1") != NULL,
       "rank 1 in a world of 1 is out of range: '%s'", tdl_error_get());
    st = gfc_group_init(&g, rt, rneg, 1, 0);
    ok(st == TDL_ERR_INVALID_ARG && strstr(tdl_error_get(), "-1") != NULL,
       "rank -1 is out of range: '%s'", tdl_error_get());
    st = gfc_group_init(&g, rt, rdup, 2, 0);
    ok(st == TDL_ERR_INVALID_ARG, "[0,0] has a duplicate: '%s'", tdl_error_get());
    st = gfc_group_init(&g, rt, r0, 0, 0);
    ok(st == TDL_ERR_INVALID_ARG, "size 0 is refused: '%s'", tdl_error_get());
    ok(memcmp(&g, &untouched, sizeof(g)) == 0, "refused group_init leaves its output alone");
    st = gfc_group_init(&g, rt, r0, 1, 42);
    ok(st == TDL_OK && g.size == 1 && g.me == 0 && g.ns == 42 && g.seq == 0 && g.ranks == r0,
       "[0] is a group: size 1, me 0, ns 42, seq 0");
}

static void test_self_collectives(gfc_runtime_t *rt)
{
    int r0[1] = {0};
    gfc_group_t g;
    if (gfc_group_init(&g, rt, r0, 1, 7) != TDL_OK) {
        ok(0, "group of self: %s", tdl_error_get());
        return;
    }
    float in[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f}, out[5];
    for (int a = 0; a < GFC_ALLREDUCE_COUNT; a++) {
        for (int op = 0; op < GFC_OP_COUNT; op++) {
            gfc_allreduce_opts_t opts = {.algo = (gfc_allreduce_algo_t)a, .codec = NULL};
            memset(out, 0xff, sizeof(out));
            tdl_status_t st = gfc_allreduce(&g, in, out, 5, GFC_DT_F32, (gfc_redop_t)op, &opts);
            ok(st == TDL_OK && memcmp(in, out, sizeof(in)) == 0,
               "allreduce %s %s on a group of one returns the input",
               gfc_allreduce_algo_name((gfc_allreduce_algo_t)a), gfc_redop_name((gfc_redop_t)op));
        }
    }
    /* with a codec (never called on one member): refused by recursive doubling only */
    static const gfc_codec_ops_t unused_ops = {.name = "unused"};
    gfc_codec_t codec = {&unused_ops, NULL};
    for (int a = 0; a < GFC_ALLREDUCE_COUNT; a++) {
        gfc_allreduce_opts_t opts = {.algo = (gfc_allreduce_algo_t)a, .codec = &codec};
        memset(out, 0xff, sizeof(out));
        tdl_status_t st = gfc_allreduce(&g, in, out, 5, GFC_DT_F32, GFC_OP_SUM, &opts);
        if (a == GFC_ALLREDUCE_RECURSIVE_DOUBLING)
            ok(st == TDL_ERR_INVALID_ARG &&
                   strstr(tdl_error_get(), "recursive doubling takes no codec") != NULL,
               "allreduce recursive_doubling with a codec is refused: %s", tdl_error_get());
        else
            ok(st == TDL_OK && memcmp(in, out, sizeof(in)) == 0,
               "allreduce %s with a codec on a group of one returns the input",
               gfc_allreduce_algo_name((gfc_allreduce_algo_t)a));
    }
    int64_t iv[3] = {1, -2, (int64_t)1 << 60};
    int64_t iv0[3];
    memcpy(iv0, iv, sizeof(iv));
    ok(gfc_allreduce(&g, iv, iv, 3, GFC_DT_I64, GFC_OP_SUM, NULL) == TDL_OK &&
           memcmp(iv, iv0, sizeof(iv)) == 0,
       "in-place i64 allreduce on a group of one");
    unsigned char b[33], b0[33];
    for (int i = 0; i < 33; i++)
        b[i] = b0[i] = (unsigned char)(i * 7);
    ok(gfc_bcast(&g, b, 33, GFC_DT_BYTE, 0) == TDL_OK && memcmp(b, b0, 33) == 0,
       "bcast on a group of one leaves the buffer");
    unsigned char a[12];
    memset(a, 0, sizeof(a));
    ok(gfc_alltoall(&g, b0, a, 3, GFC_DT_I32) == TDL_OK && memcmp(a, b0, 12) == 0,
       "alltoall on a group of one copies the block");
    memset(a, 0, sizeof(a));
    ok(gfc_allgather(&g, b0, a, 12, GFC_DT_BYTE) == TDL_OK && memcmp(a, b0, 12) == 0,
       "allgather on a group of one copies");
    memset(a, 0, sizeof(a));
    ok(gfc_gather(&g, b0, a, 6, GFC_DT_F16, 0) == TDL_OK && memcmp(a, b0, 12) == 0,
       "gather on a group of one copies");
    memset(a, 0, sizeof(a));
    size_t cnt[1] = {5}, dsp[1] = {2};
    ok(gfc_allgatherv(&g, b0, a, cnt, dsp, GFC_DT_BYTE) == TDL_OK && memcmp(a + 2, b0, 5) == 0 &&
           a[0] == 0 && a[1] == 0 && a[7] == 0,
       "allgatherv on a group of one places the block at its displacement");
    memset(a, 0, sizeof(a));
    size_t sd[1] = {1}, rd[1] = {3}, c4[1] = {4};
    ok(gfc_alltoallv(&g, b0, c4, sd, a, c4, rd, GFC_DT_BYTE) == TDL_OK &&
           memcmp(a + 3, b0 + 1, 4) == 0 && a[2] == 0 && a[7] == 0,
       "alltoallv on a group of one moves the block between displacements");
    int32_t rs_in[4] = {4, -1, 9, 2}, rs_out[4] = {0, 0, 0, 0};
    ok(gfc_reduce_scatter(&g, rs_in, rs_out, 4, GFC_DT_I32, GFC_OP_MAX) == TDL_OK &&
           memcmp(rs_in, rs_out, sizeof(rs_in)) == 0,
       "reduce_scatter on a group of one copies");
    ok(gfc_barrier(&g) == TDL_OK, "barrier on a group of one");

    char msg[] = "to myself", got[32] = {0};
    gfc_request_t *s = NULL;
    size_t n = 0;
    tdl_status_t st = gfc_send_start(&g, 0, 3, msg, sizeof(msg), &s);
    if (st == TDL_OK)
        st = gfc_recv(&g, 0, 3, got, sizeof(got), &n);
    if (st == TDL_OK)
        st = gfc_request_wait(s);
    else if (s)
        gfc_request_free(s);
    ok(st == TDL_OK && n == sizeof(msg) && strcmp(got, msg) == 0, "send and receive to self");
    gfc_stats_t stats;
    gfc_runtime_stats(rt, &stats);
    ok(stats.requests_live == 0 && stats.ucx_requests_live == 0,
       "world of one: %zu requests and %zu UCX requests live", stats.requests_live,
       stats.ucx_requests_live);
    ok(stats.endpoints == 0,
       "world of one: %zu endpoints (at most size - 1), also after a send to self",
       stats.endpoints);
    /* 12 all-reduces, one in place, 8 other collectives, all started */
    ok(stats.collectives >= 4 * 3 + 9,
       "%" PRIu64 " collectives counted of 21 started on a group of one", stats.collectives);
}

/* A receive nobody sends to times out after the runtime's timeout; the runtime still works. */
static void test_timeout(gfc_runtime_t *rt)
{
    int r0[1] = {0};
    gfc_group_t g;
    gfc_group_init(&g, rt, r0, 1, 8);
    char buf[8];
    size_t n = 0;
    double t0 = tdl_clock_s();
    tdl_status_t st = gfc_recv(&g, 0, 99, buf, sizeof(buf), &n);
    double dt = tdl_clock_s() - t0;
    ok(st == TDL_ERR_TIMEOUT, "an unanswered receive times out (%s: %s)", tdl_status_str(st),
       tdl_error_get());
    ok(dt >= 0.150, "not before the 200 ms timeout (%.3f s)", dt);

    gfc_request_t *r = NULL;
    bool done = true;
    st = gfc_recv_start(&g, 0, 98, buf, sizeof(buf), &r);
    if (st == TDL_OK)
        st = gfc_request_test(r, &done);
    ok(st == TDL_OK && !done, "a pending receive tests as not done");
    if (r)
        gfc_request_free(r);
    gfc_stats_t stats;
    gfc_runtime_stats(rt, &stats);
    ok(stats.requests_live == 0, "freed and timed-out requests are gone (%zu live)",
       stats.requests_live);
    for (int i = 0; i < 20 && stats.ucx_requests_live; i++) {
        gfc_runtime_progress(rt);
        gfc_runtime_stats(rt, &stats);
    }
    ok(stats.ucx_requests_live == 0, "cancelled UCX receives are released (%zu live)",
       stats.ucx_requests_live);
    float x = 2.0f, y = 0.0f;
    ok(gfc_allreduce(&g, &x, &y, 1, GFC_DT_F32, GFC_OP_SUM, NULL) == TDL_OK && y == 2.0f,
       "the runtime works after a timeout");
}

int main(void)
{
    test_bf16();
    test_f16();
    test_reduce_local();
    test_names();
    test_select();
    test_config();
    test_bad_runtime_config();

    gfc_runtime_config_t c;
    gfc_runtime_config_default(&c);
    c.rank = 0;
    c.size = 1;
    c.allgather = self_allgather;
    c.timeout_ms = 200;
    gfc_runtime_t *rt = NULL;
    tdl_status_t st = gfc_runtime_create(&c, &rt);
    ok(st == TDL_OK && rt, "a runtime for a world of one");
    if (st != TDL_OK)
        diag("%s: %s", tdl_status_str(st), tdl_error_get());
    if (st == TDL_OK) {
        ok(gfc_runtime_rank(rt) == 0 && gfc_runtime_size(rt) == 1, "rank 0 of 1");
        test_groups(rt);
        test_self_collectives(rt);
        test_timeout(rt);
        gfc_runtime_destroy(rt);
    }
    char tl[256];
    ok(gfc_transports_query(tl, sizeof(tl)) == TDL_OK && strstr(tl, "self") != NULL,
       "UCX transports include self: %s", tl);
    const char *v = gfc_ucx_version();
    ok(v && v[0] >= '1' && v[0] <= '9' && strchr(v, '.'), "UCX version '%s'", v ? v : "(null)");
    return done_testing();
}
