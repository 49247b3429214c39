/* Gradient codecs: MX encodings against examples worked by hand from the OCP Microscaling v1.0
 * specification, element values against the specification's formula, round-trip error bounds,
 * special values, fused passes equal to the unfused ones byte for byte, unbiased and
 * reproducible stochastic rounding, malformed input refused without reading past it, and the MX
 * formats' AVX-512 loops byte for byte the portable ones. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"
#include "core/core.h"
#include "tap.h"

static const char *const all_names[] = {"f32",        "bf16",       "fp16",       "mxfp8_e4m3",
                                        "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1"};

static const codec_config_t cfg_rne = {.round = CODEC_ROUND_NEAREST};
static const codec_config_t cfg_sr = {.round = CODEC_ROUND_STOCHASTIC};

/* The element formats as the specification describes them (section 5.3), independent of the
 * codec's own tables. */
typedef enum { SPECIAL_NONE, SPECIAL_E4M3, SPECIAL_IEEE } special_t;
typedef struct mx_ref {
    const char *name;
    int bits, ebits, mbits, bias, emax;
    double maxnorm;
    special_t special;
} mx_ref_t;

static const mx_ref_t mx_refs[] = {
    {"mxfp8_e4m3", 8, 4, 3, 7, 8, 448.0, SPECIAL_E4M3},
    {"mxfp8_e5m2", 8, 5, 2, 15, 15, 57344.0, SPECIAL_IEEE},
    {"mxfp6_e3m2", 6, 3, 2, 3, 4, 28.0, SPECIAL_NONE},
    {"mxfp6_e2m3", 6, 2, 3, 1, 2, 7.5, SPECIAL_NONE},
    {"mxfp4_e2m1", 4, 2, 1, 1, 2, 6.0, SPECIAL_NONE},
};

static double ref_value(const mx_ref_t *f, unsigned code)
{
    unsigned sign = code >> (f->bits - 1);
    unsigned e = (code >> f->mbits) & ((1u << f->ebits) - 1);
    unsigned m = code & ((1u << f->mbits) - 1);
    double v;
    if (f->special == SPECIAL_E4M3 && e == 15 && m == 7)
        return NAN;
    if (f->special == SPECIAL_IEEE && e == 31)
        return m ? NAN : (sign ? -INFINITY : INFINITY);
    if (e == 0)
        v = ldexp((double)m / (1 << f->mbits), 1 - f->bias);
    else
        v = ldexp(1.0 + (double)m / (1 << f->mbits), (int)e - f->bias);
    return sign ? -v : v;
}

/* Element i's code, read bit by bit from the layout in doc/codec_formats.md. */
static unsigned get_code(const unsigned char *enc, size_t n, int bits, size_t i)
{
    const unsigned char *elems = enc + (n + 31) / 32;
    unsigned c = 0;
    for (int b = 0; b < bits; b++) {
        size_t bit = i * (size_t)bits + (size_t)b;
        c |= (unsigned)((elems[bit / 8] >> (bit % 8)) & 1u) << b;
    }
    return c;
}

static int same_float(double a, double b)
{
    return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
}

static codec_where_t where_of(uint64_t seed, int rank, int hop, uint64_t stream)
{
    codec_where_t w = {
        .seed = seed, .rank = rank, .hop = hop, .contributions = hop + 1, .stream = stream};
    return w;
}

/* Encodes n values with ops and cfg into a fresh buffer of exactly the bound. */
static unsigned char *encode_new(const codec_ops_t *ops, const codec_config_t *cfg,
                                 const codec_where_t *w, const float *x, size_t n, size_t *bytes)
{
    size_t cap = ops->max_encoded_bytes(cfg, n);
    unsigned char *buf = malloc(cap ? cap : 1);
    tdl_status_t st = ops->encode(cfg, w, x, n, buf, bytes);
    if (st || *bytes > cap) {
        diag("%s encode failed: %s", ops->name, tdl_error_get());
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- names -------------------------------------------------------------------------------- */

static void test_names(void)
{
    int found = 1;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(all_names); i++) {
        const codec_ops_t *ops = codec_find(all_names[i]);
        found &= ops && strcmp(ops->name, all_names[i]) == 0 && ops->max_encoded_bytes &&
                 ops->encode && ops->decode && ops->decode_accumulate &&
                 ops->decode_accumulate_encode && ops->bits_per_coord;
    }
    ok(found, "every format is found by name with all its operations");
    is_str(codec_names(),
           "f32|bf16|fp16|mxfp8_e4m3|mxfp8_e5m2|mxfp6_e3m2|mxfp6_e2m3|mxfp4_e2m1|int8|int8_rht|"
           "dynamiq",
           "codec_names lists the table");
    ok(codec_find("mxfp5") == NULL && codec_find(NULL) == NULL, "unknown names give NULL");
    ok(codec_find("mxfp8") == codec_find("mxfp8_e4m3") &&
           codec_find("mxfp6") == codec_find("mxfp6_e3m2") &&
           codec_find("mxfp4") == codec_find("mxfp4_e2m1"),
       "mxfp8, mxfp6 and mxfp4 name E4M3, E3M2 and E2M1");
    {
        char choices[] = CODEC_CHOICES;
        int n = 0, all = 1;
        for (char *save = NULL, *name = strtok_r(choices, "|", &save); name;
             name = strtok_r(NULL, "|", &save), n++)
            all &= codec_find(name) != NULL;
        /* the 8 above, int8, int8_rht and dynamiq, and the 3 short names */
        ok(all && n == 14, "every one of CODEC_CHOICES (--allreduce's) is a codec: the 11 "
                           "formats and 3 short names (%d)", n);
    }

    codec_t *c = NULL;
    is_int(codec_create("mxfp4_e2m1", &cfg_sr, &c), TDL_OK, "codec_create by name");
    ok(c && c->ops == codec_find("mxfp4_e2m1") &&
           ((const codec_config_t *)c->cfg)->round == CODEC_ROUND_STOCHASTIC,
       "the codec holds its ops and a copy of the configuration");
    codec_destroy(c);
    c = NULL;
    is_int(codec_create("int3", NULL, &c), TDL_ERR_NOT_FOUND, "unknown codec refused");
    ok(c == NULL && strstr(tdl_error_get(), "'int3'") && strstr(tdl_error_get(), "mxfp8_e5m2"),
       "the error names the codec and the choices: %s", tdl_error_get());
    codec_round_t r;
    ok(codec_round_parse("stochastic", &r) == TDL_OK && r == CODEC_ROUND_STOCHASTIC &&
           codec_round_parse("up", &r) == TDL_ERR_INVALID_ARG &&
           strcmp(codec_round_name(CODEC_ROUND_NEAREST), "nearest") == 0,
       "rounding names parse and print");
    codec_where_t w1 = where_of(1, 0, 0, 5), w2 = where_of(1, 1, 0, 5), w3 = where_of(1, 0, 1, 5);
    ok(codec_where_stream(&w1) != codec_where_stream(&w2) &&
           codec_where_stream(&w1) != codec_where_stream(&w3) &&
           codec_stream_make(7, 1, 0) != codec_stream_make(7, 1, 1) &&
           codec_stream_make(7, 1, 0) != codec_stream_make(7, 2, 0),
       "rank, hop, sequence and chunk give different streams");
}

/* ---- sizes -------------------------------------------------------------------------------- */

static void test_sizes(void)
{
    const double want[] = {32, 16, 16, 8.25, 8.25, 6.25, 6.25, 4.25};
    const size_t block_bytes[] = {128, 64, 64, 33, 33, 25, 25, 17};
    int good = 1;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(all_names); i++) {
        const codec_ops_t *ops = codec_find(all_names[i]);
        good &= ops->bits_per_coord(NULL, 32 * 1024) == want[i];
        good &= ops->bits_per_coord(NULL, 0) == want[i];
        good &= ops->max_encoded_bytes(NULL, 32) == block_bytes[i];
        good &= ops->max_encoded_bytes(NULL, 0) == 0;
        if (!good)
            diag("%s: %g bits, %zu bytes per 32", ops->name, ops->bits_per_coord(NULL, 32 * 1024),
                 ops->max_encoded_bytes(NULL, 32));
    }
    ok(good, "bits per coordinate 32, 16, 16, 8.25, 8.25, 6.25, 6.25, 4.25 with scales counted");
    /* 37 values: 2 scales + ceil(37 * w / 8) element bytes */
    ok(codec_find("mxfp6_e2m3")->max_encoded_bytes(NULL, 37) == 2 + 28 &&
           codec_find("mxfp4_e2m1")->max_encoded_bytes(NULL, 37) == 2 + 19 &&
           codec_find("mxfp8_e4m3")->max_encoded_bytes(NULL, 37) == 2 + 37,
       "a partial last block costs its scale and the bytes its elements fill");
    is_near(codec_find("mxfp4_e2m1")->bits_per_coord(NULL, 1), 16.0, 0,
            "one value in MXFP4 takes a scale byte and a padded element byte");
}

/* ---- element values, exhaustively --------------------------------------------------------- */

static void test_element_tables(void)
{
    for (size_t k = 0; k < TDL_ARRAY_SIZE(mx_refs); k++) {
        const mx_ref_t *f = &mx_refs[k];
        const codec_ops_t *ops = codec_find(f->name);
        int dec_ok = 1, enc_ok = 1;
        for (unsigned c = 0; c < (1u << f->bits); c++) {
            /* one value: scale 2^0 and one element byte (narrow codes leave the padding zero) */
            unsigned char enc[2] = {127, (unsigned char)c};
            float got;
            if (ops->decode(NULL, enc, 2, &got, 1) || !same_float(got, ref_value(f, c))) {
                dec_ok = 0;
                diag("%s code 0x%02x: got %g want %g", f->name, c, got, ref_value(f, c));
            }
            /* a representable value encodes to its own code when the block's scale is 2^0 */
            double v = ref_value(f, c);
            if (isnan(v) || isinf(v))
                continue;
            float blk[2] = {(float)f->maxnorm, (float)v};
            size_t bytes;
            unsigned char *e = encode_new(ops, &cfg_rne, NULL, blk, 2, &bytes);
            if (!e || e[0] != 127 || get_code(e, 2, f->bits, 1) != c) {
                enc_ok = 0;
                diag("%s value %g: code 0x%02x, want 0x%02x", f->name, v,
                     e ? get_code(e, 2, f->bits, 1) : 0u, c);
            }
            free(e);
        }
        ok(dec_ok, "%s: all %d codes decode to the specification's values", f->name, 1 << f->bits);
        ok(enc_ok, "%s: every finite element value encodes to its own code", f->name);
    }
}

/* ---- hand-worked examples ----------------------------------------------------------------- */

/* Encodes a block padded with zeros to n values; returns codes and scale through the buffer. */
static unsigned char *mx_encode_vals(const char *name, const float *vals, size_t nv, size_t n)
{
    float x[64] = {0};
    memcpy(x, vals, nv * sizeof(float));
    size_t bytes;
    return encode_new(codec_find(name), &cfg_rne, NULL, x, n, &bytes);
}

static void test_mx_examples(void)
{
    /* MXFP4 E2M1: max 6.0 = 1.5 * 2^2, emax 2, so X = 2 - 2 = 0 (scale byte 127).
     * 6.0 -> S.11.1 = 0x7; 3.1 -> 3.0 = 0x5; 0.25 is halfway between 0 (code 0) and 0.5 (code 1):
     * ties to even -> 0; 0.75 halfway between 0.5 (1) and 1.0 (2) -> 1.0; -6.0 -> 0xF;
     * 5.0 halfway between 4 (0x6) and 6 (0x7) -> 4; 0.5 -> 0x1 (subnormal). */
    const float fp4[] = {6.0f, 3.1f, 0.25f, 0.75f, -6.0f, 5.0f, 0.5f, -0.0f};
    const unsigned fp4_codes[] = {0x7, 0x5, 0x0, 0x2, 0xF, 0x6, 0x1, 0x8};
    unsigned char *e = mx_encode_vals("mxfp4_e2m1", fp4, 8, 32);
    int good = e && e[0] == 127;
    for (int i = 0; e && i < 8; i++)
        good &= get_code(e, 32, 4, (size_t)i) == fp4_codes[i];
    ok(good,
       "MXFP4: block max 6.0 -> scale 2^0; 6.0 -> 0b0111, 3.1 -> 3.0, 0.25 -> 0 (tie to even)");
    /* element bytes: low nibble first */
    ok(e && e[1] == 0x57 && e[2] == 0x20 && e[3] == 0x6F && e[4] == 0x81,
       "MXFP4 packs the first element of a pair in the low nibble: 57 20 6f 81");
    float d[32];
    ok(e && codec_find("mxfp4_e2m1")->decode(NULL, e, 17, d, 32) == TDL_OK && d[0] == 6.0f &&
           d[1] == 3.0f && d[2] == 0.0f && d[3] == 1.0f && d[4] == -6.0f && d[5] == 4.0f &&
           d[6] == 0.5f && d[7] == 0.0f && signbit(d[7]),
       "MXFP4 decodes 6, 3, 0, 1, -6, 4, 0.5, -0");
    free(e);

    /* MXFP4, small block: max 0.3, floor(log2 0.3) = -2, X = -4 (byte 123); 0.3 * 16 = 4.8 -> 4
     * (0x6), decoded 4 * 2^-4 = 0.25; -0.1 * 16 = -1.6 -> -1.5 = 1.01.1 (0xB). */
    const float small[] = {0.3f, -0.1f};
    e = mx_encode_vals("mxfp4_e2m1", small, 2, 32);
    ok(e && e[0] == 123 && get_code(e, 32, 4, 0) == 0x6 && get_code(e, 32, 4, 1) == 0xB,
       "MXFP4: max 0.3 -> X = -4; 4.8 -> 4 (0x6); -1.6 -> -1.5 (0xb)");
    free(e);

    /* MXFP8 E4M3: max 1000, floor(log2 1000) = 9, emax 8, X = 1 (byte 128); 1000 / 2 = 500
     * saturates to 448 = S.1111.110 (0x7E) and decodes to 896. 1.0 / 2 = 0.5 = 2^-1 -> exponent
     * field 6 -> 0x30; -2.0 / 2 = -1.0 -> 0xB8. */
    const float e4[] = {1000.0f, 1.0f, -2.0f};
    e = mx_encode_vals("mxfp8_e4m3", e4, 3, 32);
    ok(e && e[0] == 128 && e[1] == 0x7E && e[2] == 0x30 && e[3] == 0xB8,
       "E4M3: max 1000 -> X = 1, 500 saturates to 448 (0x7e); 0.5 -> 0x30, -1 -> 0xb8");
    ok(e && codec_find("mxfp8_e4m3")->decode(NULL, e, 33, d, 32) == TDL_OK && d[0] == 896.0f &&
           d[1] == 1.0f && d[2] == -2.0f,
       "E4M3 decodes 896, 1, -2");
    free(e);
    /* E4M3 with X = 0 (max 256 = 2^8): 1.0 -> 0 0111 000 = 0x38; 256 -> 0 1111 000 = 0x78;
     * subnormals are m * 2^-9: 2^-9 -> 0x01, 7 * 2^-9 -> 0x07, 2^-10 is a tie -> 0,
     * 3 * 2^-10 = 1.5 * 2^-9 is a tie between 0x01 and 0x02 -> 0x02; 0.1 -> 1.625 * 2^-4 = 0x1D */
    const float e4b[] = {256.0f, 1.0f, 0x1p-9f, 7 * 0x1p-9f, 0x1p-10f, 3 * 0x1p-10f, 0.1f, 448.0f};
    const unsigned e4b_codes[] = {0x78, 0x38, 0x01, 0x07, 0x00, 0x02, 0x1D, 0x7E};
    e = mx_encode_vals("mxfp8_e4m3", e4b, 8, 32);
    good = e && e[0] == 127;
    for (int i = 0; e && i < 8; i++) {
        good &= e[1 + i] == e4b_codes[i];
        if (e[1 + i] != e4b_codes[i])
            diag("E4M3 value %g: 0x%02x, want 0x%02x", e4b[i], e[1 + i], e4b_codes[i]);
    }
    ok(good, "E4M3 bytes: 1.0 -> 0x38, 256 -> 0x78, subnormals 2^-9 -> 0x01, ties to even");
    free(e);

    /* MXFP8 E5M2: max 60000, floor(log2) = 15 = emax, X = 0; 60000 saturates to 57344 (0x7B)
     * rather than Inf; 1.0 -> 0 01111 00 = 0x3C; 2^-16 (smallest subnormal) -> 0x01; -0.75 ->
     * 1 01110 10 = 0xBA. */
    const float e5[] = {60000.0f, 1.0f, 0x1p-16f, -0.75f};
    e = mx_encode_vals("mxfp8_e5m2", e5, 4, 32);
    ok(e && e[0] == 127 && e[1] == 0x7B && e[2] == 0x3C && e[3] == 0x01 && e[4] == 0xBA,
       "E5M2: 60000 saturates to 57344 (0x7b), 1.0 -> 0x3c, 2^-16 -> 0x01, -0.75 -> 0xba");
    free(e);

    /* MXFP6 E3M2 (bias 3): max 28 = 1.75 * 2^4, X = 0; 28 -> 0 111 11 = 0x1F; 1.0 -> 0 011 00 =
     * 0x0C; 2^-4 (smallest subnormal, 0.25 * 2^-2) -> 0x01; 3 * 2^-4 -> 0x03; -0.5 -> 0x28.
     * Packed: w = 0x1F | 0x0C << 6 | 0x01 << 12 | 0x03 << 18 = 0x0C131F -> bytes 1f 13 0c. */
    const float e32[] = {28.0f, 1.0f, 0.0625f, 0.1875f, -0.5f};
    e = mx_encode_vals("mxfp6_e3m2", e32, 5, 32);
    ok(e && e[0] == 127 && e[1] == 0x1F && e[2] == 0x13 && e[3] == 0x0C &&
           get_code(e, 32, 6, 4) == 0x28,
       "E3M2: 28 -> 0x1f, 1.0 -> 0x0c, 2^-4 -> 0x01, 3 * 2^-4 -> 0x03 packed as 1f 13 0c; -0.5 -> "
       "0x28");
    free(e);

    /* MXFP6 E2M3 (bias 1): max 7.5 = 1.875 * 2^2, X = 0; 7.5 -> 0 11 111 = 0x1F; 1.0 -> 0x08;
     * 0.125 -> 0x01; 0.875 -> 0x07 (largest subnormal); 1.0625 ties between 0x08 and 0x09 -> 0x08;
     * -3.25 = -1.625 * 2^1 -> 1 10 101 = 0x35. */
    const float e23[] = {7.5f, 1.0f, 0.125f, 0.875f, 1.0625f, -3.25f};
    const unsigned e23_codes[] = {0x1F, 0x08, 0x01, 0x07, 0x08, 0x35};
    e = mx_encode_vals("mxfp6_e2m3", e23, 6, 32);
    good = e && e[0] == 127;
    for (int i = 0; e && i < 6; i++)
        good &= get_code(e, 32, 6, (size_t)i) == e23_codes[i];
    ok(good,
       "E2M3: 7.5 -> 0x1f, 1.0 -> 0x08, 0.125 -> 0x01, 0.875 -> 0x07, tie -> even, -3.25 -> 0x35");
    free(e);

    /* NaN in a block makes its scale NaN (0xFF) and every value of the block decodes to NaN; the
     * next block is unaffected. Inf does the same. */
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i % 7) - 3.0f;
    x[5] = NAN;
    x[40] = -INFINITY;
    int nan_ok = 1;
    for (size_t k = 0; k < TDL_ARRAY_SIZE(mx_refs); k++) {
        const codec_ops_t *ops = codec_find(mx_refs[k].name);
        size_t bytes;
        e = encode_new(ops, &cfg_rne, NULL, x, 64, &bytes);
        float y[64];
        nan_ok &= e && e[0] == 0xFF && e[1] == 0xFF && ops->decode(NULL, e, bytes, y, 64) == TDL_OK;
        for (int i = 0; i < 64; i++)
            nan_ok &= isnan(y[i]);
        e[1] = 127; /* the second block's elements were written as zeros */
        nan_ok &= ops->decode(NULL, e, bytes, y, 64) == TDL_OK && y[40] == 0.0f && isnan(y[0]);
        free(e);
    }
    ok(nan_ok, "a NaN or Inf in a block gives scale 0xff and NaN for the whole block");

    /* All zeros: scale 2^-127 (byte 0), zero elements, decoded exactly (with signs). */
    float z[33] = {0};
    z[3] = -0.0f;
    int zero_ok = 1;
    for (size_t k = 0; k < TDL_ARRAY_SIZE(mx_refs); k++) {
        const codec_ops_t *ops = codec_find(mx_refs[k].name);
        size_t bytes;
        e = encode_new(ops, &cfg_rne, NULL, z, 33, &bytes);
        float y[33];
        zero_ok &= e && e[0] == 0 && e[1] == 0 && ops->decode(NULL, e, bytes, y, 33) == TDL_OK;
        for (int i = 0; i < 33; i++)
            zero_ok &= y[i] == 0.0f && !!signbit(y[i]) == (i == 3);
        free(e);
    }
    ok(zero_ok, "an all-zero block gets scale byte 0 and decodes to zeros, -0 kept");

    /* Tiny maxima clamp the scale at 2^-127: an f32 subnormal maximum. */
    const float tiny[] = {1e-40f, -3e-41f};
    e = mx_encode_vals("mxfp8_e4m3", tiny, 2, 32);
    good = e && e[0] == 0 && codec_find("mxfp8_e4m3")->decode(NULL, e, 33, d, 32) == TDL_OK;
    ok(good && fabsf(d[0] - 1e-40f) <= 1e-40f / 16 &&
           fabsf(d[1] + 3e-41f) <= 0x1p-137f, /* half of E4M3's 2^-9 step, scaled */
       "an f32 subnormal maximum clamps X at -127 and still encodes: %g, %g", good ? d[0] : 0.0,
       good ? d[1] : 0.0);
    free(e);

    /* The largest floats: X = 127 - emax, decoded values stay finite. */
    const float huge[] = {FLT_MAX, -FLT_MAX / 3};
    int huge_ok = 1;
    for (size_t k = 0; k < TDL_ARRAY_SIZE(mx_refs); k++) {
        const mx_ref_t *f = &mx_refs[k];
        float hx[32] = {0}, hy[32];
        memcpy(hx, huge, sizeof(huge));
        size_t bytes;
        e = encode_new(codec_find(f->name), &cfg_rne, NULL, hx, 32, &bytes);
        huge_ok &= e && e[0] == 127 + 127 - f->emax &&
                   codec_find(f->name)->decode(NULL, e, bytes, hy, 32) == TDL_OK &&
                   isfinite(hy[0]) && hy[0] == (float)ldexp(f->maxnorm, 127 - f->emax);
        free(e);
    }
    ok(huge_ok, "FLT_MAX saturates to the largest element times 2^(127 - emax), finite");

    /* Partial last block: 37 values in E2M3 are 2 scales + 28 element bytes; the second block
     * holds 5 values (30 bits) and its last byte's top 2 bits stay zero. */
    float p[37];
    for (int i = 0; i < 37; i++)
        p[i] = (i < 32) ? 1.0f : 0.5f * (float)(i - 31); /* 0.5, 1, 1.5, 2, 2.5 */
    size_t bytes;
    e = encode_new(codec_find("mxfp6_e2m3"), &cfg_rne, NULL, p, 37, &bytes);
    float q[37];
    good = e && bytes == 30 && e[1] == 127 - 1 &&
           codec_find("mxfp6_e2m3")->decode(NULL, e, bytes, q, 37) == TDL_OK && (e[29] >> 6) == 0;
    for (int i = 0; good && i < 37; i++)
        good &= q[i] == p[i];
    ok(good, "a partial last block (37 values) has its own scale and exact values");
    free(e);
}

/* ---- round-trip bounds -------------------------------------------------------------------- */

static void fill_normal(float *x, size_t n, uint64_t seed)
{
    tdl_rng_t r;
    tdl_rng_init(&r, seed, 1);
    tdl_rng_fill_normal(&r, x, n);
}

/* normal times a log-normal scale: values over many orders of magnitude, with a few zeros */
static void fill_heavy(float *x, size_t n, uint64_t seed)
{
    tdl_rng_t r;
    tdl_rng_init(&r, seed, 2);
    for (size_t i = 0; i < n; i++)
        x[i] = (i % 97 == 5) ? 0.0f : tdl_rng_normal(&r) * expf(3.0f * tdl_rng_normal(&r));
}

static int floor_log2(double a)
{
    int e;
    frexp(a, &e);
    return e - 1;
}

/* |decoded - x| within half an element ulp (one ulp for stochastic rounding) times the block
 * scale, or the distance to the saturated maximum. */
static int check_mx_bounds(const mx_ref_t *f, const float *x, size_t n, int stochastic)
{
    const codec_ops_t *ops = codec_find(f->name);
    codec_where_t w = where_of(11, 3, 0, 99);
    size_t bytes;
    unsigned char *e = encode_new(ops, stochastic ? &cfg_sr : &cfg_rne, &w, x, n, &bytes);
    float *y = malloc(n * sizeof(float));
    int good = e && bytes == ops->max_encoded_bytes(NULL, n) &&
               ops->decode(NULL, e, bytes, y, n) == TDL_OK;
    int emin = 1 - f->bias;
    double vn = 0, vd = 0;
    for (size_t b = 0; good && b * 32 < n; b++) {
        size_t cnt = n - b * 32 < 32 ? n - b * 32 : 32;
        double amax = 0;
        for (size_t i = 0; i < cnt; i++)
            amax = fmax(amax, fabs(x[b * 32 + i]));
        int xs = amax > 0 ? floor_log2(amax) - f->emax : -127;
        xs = xs < -127 ? -127 : xs;
        if (e[b] != xs + 127) {
            diag("%s block %zu: scale byte %d, want %d", f->name, b, e[b], xs + 127);
            good = 0;
        }
        for (size_t i = 0; i < cnt; i++) {
            double v = x[b * 32 + i], yv = ldexp(fabs(v), -xs);
            double ulp_rel = ldexp(1.0, -f->mbits), ulp_abs = ldexp(1.0, emin - f->mbits);
            double half = stochastic ? 1.0 : 0.5;
            double bound = ldexp(half * fmax(yv * ulp_rel, ulp_abs) + fmax(0, yv - f->maxnorm), xs);
            double err = fabs((double)y[b * 32 + i] - v);
            if (!(err <= bound) || (v == 0 && y[b * 32 + i] != 0)) {
                diag("%s: x = %.9g decoded %.9g, error %g > %g", f->name, v, y[b * 32 + i], err,
                     bound);
                good = 0;
                break;
            }
            vn += err * err;
            vd += v * v;
        }
    }
    if (good)
        diag("%s %s vNMSE %.3g", f->name, stochastic ? "stochastic" : "nearest", vn / vd);
    free(y);
    free(e);
    return good;
}

static void test_mx_bounds(void)
{
    enum { N = 1000 }; /* 31 full blocks and 8 values */
    static float xn[N], xh[N];
    fill_normal(xn, N, 1);
    fill_heavy(xh, N, 2);
    for (size_t k = 0; k < TDL_ARRAY_SIZE(mx_refs); k++) {
        const mx_ref_t *f = &mx_refs[k];
        ok(check_mx_bounds(f, xn, N, 0) && check_mx_bounds(f, xh, N, 0),
           "%s: round-trip error within half an ulp of the block scale (normal, heavy-tailed)",
           f->name);
        ok(check_mx_bounds(f, xn, N, 1) && check_mx_bounds(f, xh, N, 1),
           "%s stochastic: error within one ulp", f->name);
    }
}

/* bf16 and fp16: relative half ulp for normals, absolute for subnormals; overflow is Inf. */
static int check_half_bounds(const char *name, const float *x, size_t n, int stochastic)
{
    const codec_ops_t *ops = codec_find(name);
    int mbits = strcmp(name, "bf16") == 0 ? 7 : 10, emin = mbits == 7 ? -126 : -14;
    double maxv = mbits == 7 ? (double)FLT_MAX : 65504.0;
    double overflow = mbits == 7 ? INFINITY : 65520.0;
    codec_where_t w = where_of(5, 1, 2, 3);
    size_t bytes;
    unsigned char *e = encode_new(ops, stochastic ? &cfg_sr : &cfg_rne, &w, x, n, &bytes);
    float *y = malloc(n * sizeof(float));
    int good = e && bytes == 2 * n && ops->decode(NULL, e, bytes, y, n) == TDL_OK;
    double half = stochastic ? 1.0 : 0.5;
    for (size_t i = 0; good && i < n; i++) {
        double v = x[i], a = fabs(v);
        if (!stochastic && a >= overflow) {
            good = isinf(y[i]) && signbit(y[i]) == signbit(x[i]);
        } else if (stochastic && a > maxv) {
            good = isinf(y[i]) || fabs(y[i]) == maxv;
        } else {
            double bound = half * fmax(a * ldexp(1.0, -mbits), ldexp(1.0, emin - mbits));
            good = fabs((double)y[i] - v) <= bound && (v != 0 || y[i] == 0);
        }
        if (!good)
            diag("%s: x = %.9g decoded %.9g", name, v, y[i]);
    }
    free(y);
    free(e);
    return good;
}

static void test_half(void)
{
    enum { N = 1003 };
    static float xn[N], xh[N];
    fill_normal(xn, N, 3);
    fill_heavy(xh, N, 4);
    for (int s = 0; s < 2; s++) {
        ok(check_half_bounds("bf16", xn, N, s) && check_half_bounds("bf16", xh, N, s),
           "bf16 %s: error within %s ulp", s ? "stochastic" : "nearest", s ? "one" : "half an");
        ok(check_half_bounds("fp16", xn, N, s) && check_half_bounds("fp16", xh, N, s),
           "fp16 %s: error within %s ulp, overflow to Inf", s ? "stochastic" : "nearest",
           s ? "one" : "half an");
    }

    /* Nearest-even bits equal the core conversions, over random bit patterns and edges. */
    enum { M = 1 << 17 };
    static float r[M];
    static unsigned char eb[2 * M], ef[2 * M];
    tdl_rng_t rng;
    tdl_rng_init(&rng, 77, 0);
    const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x00800000u,
                              0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x7f800000u, 0xff800000u,
                              0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x477fe000u, 0x477ff000u,
                              0x477fefffu, 0x33000000u, 0x33000001u, 0x387fe000u, 0x38800000u,
                              0x3f800000u, 0x3f808000u, 0x3f818000u, 0xb3800000u};
    for (size_t i = 0; i < M; i++) {
        uint32_t u = i < TDL_ARRAY_SIZE(edges) ? edges[i] : tdl_rng_u32(&rng);
        if (i >= TDL_ARRAY_SIZE(edges) && i % 4 == 1) /* more values in fp16's range */
            u = (u & 0x87ffffffu) | 0x30000000u;
        memcpy(&r[i], &u, 4);
    }
    size_t bytes;
    int same_b = codec_find("bf16")->encode(NULL, NULL, r, M, eb, &bytes) == TDL_OK;
    int same_f = codec_find("fp16")->encode(NULL, NULL, r, M, ef, &bytes) == TDL_OK;
    for (size_t i = 0; i < M; i++) {
        uint16_t hb = (uint16_t)(eb[2 * i] | eb[2 * i + 1] << 8);
        uint16_t hf = (uint16_t)(ef[2 * i] | ef[2 * i + 1] << 8);
        if (hb != tdl_bf16_from_f32(r[i]) && same_b) {
            diag("bf16 of %a: 0x%04x, core 0x%04x", r[i], hb, tdl_bf16_from_f32(r[i]));
            same_b = 0;
        }
        if (hf != tdl_f16_from_f32(r[i]) && same_f) {
            diag("fp16 of %a: 0x%04x, core 0x%04x", r[i], hf, tdl_f16_from_f32(r[i]));
            same_f = 0;
        }
    }
    ok(same_b, "bf16 nearest-even bytes equal tdl_bf16_from_f32 on %d values", M);
    ok(same_f, "fp16 nearest-even bytes equal tdl_f16_from_f32 on %d values", M);

    /* Every code decodes as the core conversion does (bit for bit, NaN payloads too). */
    static unsigned char all[2 * 65536];
    static float db[65536], df[65536];
    for (unsigned h = 0; h < 65536; h++)
        all[2 * h] = (unsigned char)h, all[2 * h + 1] = (unsigned char)(h >> 8);
    int dec_ok = codec_find("bf16")->decode(NULL, all, sizeof(all), db, 65536) == TDL_OK &&
                 codec_find("fp16")->decode(NULL, all, sizeof(all), df, 65536) == TDL_OK;
    for (unsigned h = 0; dec_ok && h < 65536; h++) {
        float cb = tdl_bf16_to_f32((uint16_t)h), cf = tdl_f16_to_f32((uint16_t)h);
        dec_ok = memcmp(&db[h], &cb, 4) == 0 && memcmp(&df[h], &cf, 4) == 0;
        if (!dec_ok)
            diag("code 0x%04x: bf16 %a / %a, fp16 %a / %a", h, db[h], cb, df[h], cf);
    }
    ok(dec_ok, "all 65536 bf16 and fp16 codes decode as the core conversions");

    /* Specials and byte patterns, little-endian. */
    const float sp[] = {1.0f,     NAN,      -INFINITY, 70000.0f,     65504.0f, 65519.0f,
                        65520.0f, 0x1p-24f, 0x1p-25f,  3 * 0x1p-25f, -0.0f};
    const uint16_t want_f[] = {0x3C00, 0x7E00, 0xFC00, 0x7C00, 0x7BFF, 0x7BFF,
                               0x7C00, 0x0001, 0x0000, 0x0002, 0x8000};
    unsigned char out[2 * TDL_ARRAY_SIZE(sp)];
    int sp_ok = codec_find("fp16")->encode(NULL, NULL, sp, TDL_ARRAY_SIZE(sp), out, &bytes) == 0;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(sp); i++)
        sp_ok &= (uint16_t)(out[2 * i] | out[2 * i + 1] << 8) == want_f[i];
    ok(sp_ok && out[0] == 0x00 && out[1] == 0x3C,
       "fp16: 1.0 -> 00 3c, NaN and -Inf kept, 70000 and 65520 -> Inf, 65519 -> 65504, "
       "subnormals tie to even");
    /* Stochastic rounding keeps NaN and Inf too. */
    codec_where_t w = where_of(1, 0, 0, 0);
    float back[TDL_ARRAY_SIZE(sp)];
    int sr_sp = 1;
    for (int k = 0; k < 2; k++) {
        const codec_ops_t *ops = codec_find(k ? "fp16" : "bf16");
        sr_sp &= ops->encode(&cfg_sr, &w, sp, TDL_ARRAY_SIZE(sp), out, &bytes) == TDL_OK &&
                 ops->decode(NULL, out, bytes, back, TDL_ARRAY_SIZE(sp)) == TDL_OK &&
                 back[0] == 1.0f && isnan(back[1]) && isinf(back[2]) && back[2] < 0 &&
                 back[10] == 0.0f && signbit(back[10]);
    }
    ok(sr_sp, "stochastic bf16 and fp16 keep 1.0 exact, NaN, -Inf and -0");
    const float bsp[] = {1.0f, -2.0f, 0x1.0101p0f, FLT_MAX, NAN};
    const uint16_t want_b[] = {0x3F80, 0xC000, 0x3F81, 0x7F80, 0x7FC0};
    sp_ok = codec_find("bf16")->encode(NULL, NULL, bsp, 5, out, &bytes) == 0;
    for (size_t i = 0; i < 5; i++)
        sp_ok &= (uint16_t)(out[2 * i] | out[2 * i + 1] << 8) == want_b[i];
    ok(sp_ok, "bf16: 1.0 -> 0x3f80, -2 -> 0xc000, rounds to nearest, FLT_MAX -> Inf, NaN quiet");
}

/* ---- fused passes ------------------------------------------------------------------------- */

static int check_fused(const codec_ops_t *ops, const codec_config_t *cfg, size_t n, uint64_t seed)
{
    float *x = malloc((n + 1) * sizeof(float)), *local = malloc((n + 1) * sizeof(float));
    float *dec = malloc((n + 1) * sizeof(float)), *acc = malloc((n + 1) * sizeof(float));
    float *sum = malloc((n + 1) * sizeof(float));
    fill_heavy(x, n, seed);
    fill_normal(local, n, seed + 1);
    if (n > 40)
        x[40] = NAN; /* a NaN block stays NaN through the sum */
    codec_where_t w0 = where_of(seed, 2, 0, 17), w1 = where_of(seed, 3, 1, 17);
    size_t b_in, b_fused, b_plain;
    unsigned char *in = encode_new(ops, cfg, &w0, x, n, &b_in);
    size_t cap = ops->max_encoded_bytes(cfg, n);
    unsigned char *fused = malloc(cap + 1), *plain = NULL;
    int good = in && ops->decode(cfg, in, b_in, dec, n) == TDL_OK;
    for (size_t i = 0; good && i < n; i++)
        sum[i] = local[i] + dec[i];
    good = good &&
           ops->decode_accumulate_encode(cfg, &w1, in, b_in, local, n, fused, &b_fused) == TDL_OK;
    if (good)
        plain = encode_new(ops, cfg, &w1, sum, n, &b_plain);
    good = good && plain && b_plain == b_fused && memcmp(plain, fused, b_fused) == 0;
    memcpy(acc, local, n * sizeof(float));
    good = good && ops->decode_accumulate(cfg, in, b_in, acc, n) == TDL_OK;
    for (size_t i = 0; good && i < n; i++)
        good = memcmp(&acc[i], &sum[i], 4) == 0 || (isnan(acc[i]) && isnan(sum[i]));
    free(plain);
    free(fused);
    free(in);
    free(x);
    free(local);
    free(dec);
    free(acc);
    free(sum);
    return good;
}

static void test_fused(void)
{
    const size_t sizes[] = {1000, 33, 1, 0, 64, 2500}; /* 2500: the 16-bit formats' tiles */
    for (size_t i = 0; i < TDL_ARRAY_SIZE(all_names); i++) {
        const codec_ops_t *ops = codec_find(all_names[i]);
        int good = 1;
        for (size_t s = 0; s < TDL_ARRAY_SIZE(sizes); s++) {
            good &= check_fused(ops, &cfg_rne, sizes[s], 10 + s);
            good &= check_fused(ops, &cfg_sr, sizes[s], 20 + s);
            good &= check_fused(ops, NULL, sizes[s], 30 + s);
        }
        ok(good,
           "%s: fused decode-accumulate-encode equals encode(local + decode) byte for "
           "byte, decode_accumulate equals decode then add",
           ops->name);
    }
    /* A sum of two NaNs keeps the decoded value's NaN (quieted), not local's: bf16 keeps the
     * payload, fp16 the sign; 64 values, so vector loops run too. */
    const char *halves[] = {"bf16", "fp16"};
    const uint16_t in_code[] = {0x7fa2, 0xfe00}, want[] = {0x7fe2, 0xfe00};
    for (int k = 0; k < 2; k++) {
        const codec_ops_t *ops = codec_find(halves[k]);
        enum { M = 64 };
        unsigned char in[2 * M], out[2 * M];
        float local[M], acc[M], dec[M];
        uint32_t lbits = 0x7fc10000u;
        for (int i = 0; i < M; i++) {
            in[2 * i] = in_code[k] & 0xff, in[2 * i + 1] = in_code[k] >> 8;
            memcpy(&local[i], &lbits, 4);
        }
        memcpy(acc, local, sizeof(acc));
        codec_where_t w = where_of(1, 0, 1, 3);
        size_t len = 0;
        int good =
            ops->decode_accumulate_encode(&cfg_rne, &w, in, 2 * M, local, M, out, &len) == TDL_OK &&
            len == 2 * M && ops->decode(&cfg_rne, in, 2 * M, dec, M) == TDL_OK &&
            ops->decode_accumulate(&cfg_rne, in, 2 * M, acc, M) == TDL_OK;
        uint32_t abits = 0, dbits = 0;
        for (int i = 0; good && i < M; i++) {
            memcpy(&abits, &acc[i], 4);
            memcpy(&dbits, &dec[i], 4);
            good = (out[2 * i] | out[2 * i + 1] << 8) == want[k] && abits == (dbits | 0x00400000u);
        }
        ok(good, "%s: NaN + NaN keeps the decoded NaN (fused %02x%02x, accumulate %08x)", halves[k],
           out[1], out[0], abits);
    }
}

/* ---- the MX formats' AVX-512 loops against the portable ones --------------------------- */

/* Values over every magnitude a float has, with blocks of zeros, subnormals, specials, ties of
 * the element formats (few mantissa bits) and values near the largest normals. */
static void fill_wild(float *x, size_t n, uint64_t seed)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 5);
    for (size_t i = 0; i < n; i++) {
        size_t block = i / 32;
        uint32_t r = tdl_rng_u32(&rng);
        double sgn = (r & 1) ? -1.0 : 1.0;
        switch (block % 9) {
        case 0: x[i] = 0.0f; break;
        case 1: x[i] = (float)(sgn * ldexp(1.0 + (r >> 8 & 7) / 8.0, -140 + (int)(r >> 16 & 15)));
            break;
        case 2: x[i] = (float)(sgn * ldexp((r >> 4 & 15) / 4.0 + 0.125, (int)(r >> 12 & 7)));
            break; /* ties of 1-3 mantissa bits */
        case 3: x[i] = (float)(sgn * (440.0 + (r >> 4 & 31) + (r >> 9 & 1) * 57000.0)); break;
        case 4: x[i] = i % 32 == 7 ? NAN : (float)(sgn * (r >> 8) * 1e-3); break;
        case 5: x[i] = i % 32 == 11 ? (float)(sgn * INFINITY) : (float)(sgn * (r >> 8)); break;
        default: {
            uint32_t u = tdl_rng_u32(&rng) & 0xff7fffffu; /* any finite float */
            memcpy(&x[i], &u, 4);
        }
        }
    }
}

static void test_mx_isa(void)
{
    int initial = codec_mxfp_isa(-1);
    codec_mxfp_isa(1);
    if (codec_mxfp_isa(-1) != 1) {
        ok(1, "# SKIP no AVX-512 here: only the portable MX loops run");
        codec_mxfp_isa(initial);
        return;
    }
    const size_t sizes[] = {1, 31, 32, 33, 100, 1000, 4099, 40000};
    const codec_config_t *cfgs[] = {&cfg_rne, &cfg_sr};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(all_names); i++) {
        if (strncmp(all_names[i], "mxfp", 4) != 0)
            continue;
        const codec_ops_t *ops = codec_find(all_names[i]);
        int same = 1;
        for (size_t z = 0; z < TDL_ARRAY_SIZE(sizes) && same; z++)
            for (size_t c = 0; c < TDL_ARRAY_SIZE(cfgs) && same; c++) {
                size_t n = sizes[z], cap = ops->max_encoded_bytes(cfgs[c], n), b[2], f[2];
                float *x = malloc(n * 4), *l = malloc(n * 4), *d[2], *a[2];
                unsigned char *e[2], *u[2];
                fill_wild(x, n, 100 + z);
                fill_wild(l, n, 200 + z);
                codec_where_t w0 = where_of(z + 1, 1, 0, 3 + c), w1 = where_of(z + 1, 2, 1, 5 + c);
                for (int isa = 0; isa < 2; isa++) {
                    codec_mxfp_isa(isa);
                    e[isa] = malloc(cap), u[isa] = malloc(cap);
                    d[isa] = malloc(n * 4), a[isa] = malloc(n * 4);
                    memcpy(a[isa], l, n * 4);
                    ops->encode(cfgs[c], &w0, x, n, e[isa], &b[isa]);
                    ops->decode(cfgs[c], e[0], b[0], d[isa], n);
                    ops->decode_accumulate(cfgs[c], e[0], b[0], a[isa], n);
                    ops->decode_accumulate_encode(cfgs[c], &w1, e[0], b[0], l, n, u[isa], &f[isa]);
                }
                same = b[0] == b[1] && !memcmp(e[0], e[1], b[0]) && !memcmp(d[0], d[1], n * 4) &&
                       !memcmp(a[0], a[1], n * 4) && f[0] == f[1] && !memcmp(u[0], u[1], f[0]);
                if (!same)
                    diag("%s: %zu values, %s rounding differ", ops->name, n,
                         c ? "stochastic" : "nearest");
                free(x), free(l);
                for (int isa = 0; isa < 2; isa++)
                    free(e[isa]), free(u[isa]), free(d[isa]), free(a[isa]);
            }
        ok(same, "%s: the AVX-512 loops give the portable loops' bytes and floats (encode, decode, "
                 "decode-accumulate, fused; nearest and stochastic; 8 sizes)",
           ops->name);
    }
    codec_mxfp_isa(initial);
}

/* ---- stochastic rounding ------------------------------------------------------------------ */

static void test_stochastic(void)
{
    enum { SEEDS = 3000 };
    for (size_t i = 1; i < TDL_ARRAY_SIZE(all_names); i++) {
        const codec_ops_t *ops = codec_find(all_names[i]);
        /* values between two neighbours lo < x < hi, found by rounding down and up */
        float x[32], lo[32], hi[32];
        const mx_ref_t *f = NULL;
        for (size_t k = 0; k < TDL_ARRAY_SIZE(mx_refs); k++)
            if (strcmp(mx_refs[k].name, ops->name) == 0)
                f = &mx_refs[k];
        const double fracs[] = {0.1, 0.25, 0.5, 0.77, 0.93};
        x[0] = lo[0] = hi[0] = f ? (float)f->maxnorm : 1.0f; /* fixes the MX scale at 2^0 */
        for (int j = 1; j < 32; j++) {
            double a, b;
            if (f) { /* neighbouring finite codes c and c + 1, alternating signs */
                unsigned nfinite = 0;
                while (isfinite(ref_value(f, nfinite)) && nfinite < (1u << (f->bits - 1)))
                    nfinite++;
                unsigned c = (unsigned)(j * 3) % (nfinite - 1);
                a = ref_value(f, c);
                b = ref_value(f, c + 1);
            } else {
                int mb = strcmp(ops->name, "bf16") == 0 ? 7 : 10;
                a = ldexp(1.0 + (j % 5) / 8.0, (j % 9) - 4);
                if (j == 31) /* a subnormal of the format */
                    a = ldexp(3.0, (mb == 7 ? -126 : -14) - mb);
                b = a + ldexp(1.0, floor_log2(a) - mb);
                if (j == 31)
                    b = a + ldexp(1.0, (mb == 7 ? -126 : -14) - mb);
            }
            double sgn = (j & 1) ? -1.0 : 1.0;
            lo[j] = (float)(sgn * a);
            hi[j] = (float)(sgn * b);
            x[j] = (float)(sgn * (a + fracs[j % 5] * (b - a)));
        }
        double mean[32] = {0};
        int only_neighbours = 1, same = 1, differs = 0;
        size_t cap = ops->max_encoded_bytes(&cfg_sr, 32), bytes, bytes2;
        unsigned char *e = malloc(cap), *e2 = malloc(cap);
        for (int s = 0; s < SEEDS; s++) {
            codec_where_t w = where_of((uint64_t)s, s % 5, s % 3, 1000 + (uint64_t)s);
            float y[32];
            ops->encode(&cfg_sr, &w, x, 32, e, &bytes);
            ops->decode(NULL, e, bytes, y, 32);
            for (int j = 0; j < 32; j++) {
                mean[j] += y[j];
                only_neighbours &= y[j] == lo[j] || y[j] == hi[j];
            }
            if (s < 50) { /* reproducible, and the seed matters */
                ops->encode(&cfg_sr, &w, x, 32, e2, &bytes2);
                same &= bytes == bytes2 && memcmp(e, e2, bytes) == 0;
                codec_where_t w2 = w;
                w2.seed ^= 1;
                ops->encode(&cfg_sr, &w2, x, 32, e2, &bytes2);
                differs |= memcmp(e, e2, bytes) != 0;
            }
        }
        int unbiased = 1;
        for (int j = 1; j < 32; j++) {
            mean[j] /= SEEDS;
            double gap = fabs((double)hi[j] - lo[j]);
            double p = fabs((double)x[j] - lo[j]) / gap;
            double se = gap * sqrt(p * (1 - p) / SEEDS);
            if (fabs(mean[j] - x[j]) > 5 * se + 1e-12 * gap) {
                diag("%s: x = %.9g between %.9g and %.9g, mean %.9g (se %.3g)", ops->name, x[j],
                     lo[j], hi[j], mean[j], se);
                unbiased = 0;
            }
        }
        ok(only_neighbours && unbiased,
           "%s stochastic rounding picks a neighbour; mean over %d seeds within 5 standard "
           "errors of x",
           ops->name, SEEDS);
        ok(same && differs, "%s: the same (seed, rank, hop, stream) gives the same bytes",
           ops->name);
        free(e);
        free(e2);
    }

    /* Each of seed, rank, hop and stream changes the bytes of a long vector. */
    enum { N = 512 };
    static float x[N];
    fill_normal(x, N, 9);
    const codec_ops_t *ops = codec_find("mxfp4_e2m1");
    size_t cap = ops->max_encoded_bytes(&cfg_sr, N), bytes;
    unsigned char *ref = malloc(cap), *other = malloc(cap);
    codec_where_t w = where_of(1, 2, 3, 4);
    ops->encode(&cfg_sr, &w, x, N, ref, &bytes);
    int all_differ = 1;
    for (int k = 0; k < 4; k++) {
        codec_where_t v = w;
        if (k == 0)
            v.seed++;
        else if (k == 1)
            v.rank++;
        else if (k == 2)
            v.hop++;
        else
            v.stream++;
        ops->encode(&cfg_sr, &v, x, N, other, &bytes);
        all_differ &= memcmp(ref, other, bytes) != 0;
    }
    ok(all_differ, "seed, rank, hop and stream each change the random bits");
    free(ref);
    free(other);
}

/* ---- malformed input ---------------------------------------------------------------------- */

static void test_malformed(void)
{
    enum { N = 45 }; /* one full block and 13 values */
    float x[N], out[N], local[N];
    fill_normal(x, N, 5);
    fill_normal(local, N, 6);
    for (size_t i = 0; i < TDL_ARRAY_SIZE(all_names); i++) {
        const codec_ops_t *ops = codec_find(all_names[i]);
        size_t want = ops->max_encoded_bytes(NULL, N), bytes;
        unsigned char *good_enc = encode_new(ops, NULL, NULL, x, N, &bytes);
        const size_t wrong[] = {want - 1, want + 1, 0, 1, want / 2};
        int refused = good_enc != NULL;
        for (size_t k = 0; k < TDL_ARRAY_SIZE(wrong); k++) {
            /* exactly in_bytes of heap, so ASan sees any read past it */
            unsigned char *in = malloc(wrong[k] ? wrong[k] : 1);
            memcpy(in, good_enc, TDL_MIN(wrong[k], want));
            for (size_t j = 0; j < N; j++)
                out[j] = -7.0f;
            unsigned char enc[1024];
            size_t ob = 12345;
            tdl_error_clear();
            refused &= ops->decode(NULL, in, wrong[k], out, N) == TDL_ERR_CORRUPT;
            refused &= strstr(tdl_error_get(), ops->name) != NULL;
            refused &= ops->decode_accumulate(NULL, in, wrong[k], out, N) == TDL_ERR_CORRUPT;
            refused &= ops->decode_accumulate_encode(NULL, NULL, in, wrong[k], local, N, enc,
                                                     &ob) == TDL_ERR_CORRUPT;
            refused &= ob == 12345;
            for (size_t j = 0; j < N; j++)
                refused &= out[j] == -7.0f;
            free(in);
        }
        ok(refused, "%s: wrong sizes give TDL_ERR_CORRUPT naming the codec, outputs untouched",
           ops->name);
        free(good_enc);
    }
    diag("for example: %s", tdl_error_get());

    /* Nonzero padding bits after the last value. */
    int pad_ok = 1;
    const char *narrow[] = {"mxfp6_e3m2", "mxfp6_e2m3", "mxfp4_e2m1"};
    for (size_t i = 0; i < 3; i++) {
        const codec_ops_t *ops = codec_find(narrow[i]);
        size_t bytes;
        unsigned char *e = encode_new(ops, NULL, NULL, x, N, &bytes);
        pad_ok &= e && ops->decode(NULL, e, bytes, out, N) == TDL_OK;
        e[bytes - 1] |= 0x80; /* 13 values: 78 bits (6-bit) or 52 bits (4-bit) leave the top bit */
        tdl_error_clear();
        pad_ok &= ops->decode(NULL, e, bytes, out, N) == TDL_ERR_CORRUPT &&
                  strstr(tdl_error_get(), "padding") != NULL;
        free(e);
    }
    ok(pad_ok, "nonzero padding bits in the last byte are refused: %s", tdl_error_get());

    /* Bad arguments. */
    const codec_ops_t *ops = codec_find("mxfp8_e4m3");
    size_t bytes;
    unsigned char buf[64];
    ok(ops->encode(NULL, NULL, NULL, 4, buf, &bytes) == TDL_ERR_INVALID_ARG &&
           ops->decode(NULL, buf, 5, NULL, 4) == TDL_ERR_INVALID_ARG &&
           codec_find("bf16")->encode(&cfg_sr, NULL, x, 4, buf, &bytes) == TDL_ERR_INVALID_ARG,
       "NULL buffers, and stochastic rounding without a where, are invalid arguments");
    bytes = 99;
    ok(ops->encode(NULL, NULL, NULL, 0, NULL, &bytes) == TDL_OK && bytes == 0 &&
           ops->decode(NULL, NULL, 0, NULL, 0) == TDL_OK,
       "zero values encode to zero bytes");
}

int main(void)
{
    test_names();
    test_sizes();
    test_element_tables();
    test_mx_examples();
    test_mx_bounds();
    test_half();
    test_fused();
    test_stochastic();
    test_malformed();
    test_mx_isa();
    return done_testing();
}
