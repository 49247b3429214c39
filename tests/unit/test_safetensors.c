/* The safetensors reader (src/ckpt/safetensors.c) on files built here byte by byte from the
 * format's description: every dtype tidal converts, with values worked out by hand (F16 0x3c00 is
 * 1, BF16 0x4049 is 3.140625, ...), the metadata, a tensor of no elements; and each way a file
 * can be cut or forged, refused with TDL_ERR_CORRUPT and a message naming what is wrong. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "core/core.h"
#include "tap.h"

static char dir[] = "/tmp/tidal-st-XXXXXX";

/* A file of an 8-byte length (hlen, or the header's own when hlen < 0), the header, then data. */
static const char *write_file(const char *name, const char *header, long long hlen,
                              const void *data, size_t nbytes)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    unsigned long long n = hlen < 0 ? strlen(header) : (unsigned long long)hlen;
    for (int i = 0; i < 8; i++)
        fputc((int)(n >> (8 * i) & 0xff), f);
    fwrite(header, 1, strlen(header), f);
    if (nbytes)
        fwrite(data, 1, nbytes, f);
    fclose(f);
    return path;
}

static void refused(const char *name, const char *header, long long hlen, size_t nbytes,
                    const char *word, const char *what)
{
    unsigned char zeros[256] = {0};
    const char *path = write_file(name, header, hlen, zeros, nbytes);
    ckpt_st_t *st = NULL;
    tdl_status_t s = ckpt_st_open(path, &st);
    const char *msg = tdl_error_get();
    if (!ok(s == TDL_ERR_CORRUPT && st == NULL && strstr(msg, word) && strstr(msg, path),
            "%s: refused, naming the file and '%s'", what, word))
        diag("status %d: %s", (int)s, msg);
    ckpt_st_close(st);
}

static void test_good(void)
{
    /* F32 [2, 3] at 0..24, F16 [4] at 24..32, BF16 [2] at 32..36, F64 [1] at 36..44, I64 [1] at
     * 44..52, an empty F32 [0, 5] at 52..52 */
    unsigned char d[52];
    float f32[6] = {1.5f, -2.0f, 0.25f, 1e-20f, 3.0e38f, -0.0f};
    memcpy(d, f32, 24); /* this machine is little-endian, as the format */
    uint16_t f16[4] = {0x3c00, 0xc000, 0x3555, 0x7c00}; /* 1, -2, 0.333251953125, +Inf */
    memcpy(d + 24, f16, 8);
    uint16_t bf16[2] = {0x4049, 0xbf80}; /* 3.140625, -1 */
    memcpy(d + 32, bf16, 4);
    double f64 = 0.1;
    memcpy(d + 36, &f64, 8);
    int64_t i64 = 7;
    memcpy(d + 44, &i64, 8);
    const char *h =
        "{\"__metadata__\": {\"format\": \"pt\"}, "
        "\"blocks.0.attn.qkv.weight\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": "
        "[0, 24]}, "
        "\"half\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [24, 32]}, "
        "\"brain\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [32, 36]}, "
        "\"double\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [36, 44]}, "
        "\"count\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [44, 52]}, "
        "\"empty\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [52, 52]}}";
    const char *path = write_file("good.safetensors", h, -1, d, sizeof(d));
    ckpt_st_t *st = NULL;
    ok(ckpt_st_open(path, &st) == TDL_OK, "a file of six tensors opens: %s", tdl_error_get());
    if (!st)
        return;
    is_int(ckpt_st_count(st), 6, "six tensors, the metadata apart");
    ok(ckpt_st_metadata(st, "format") && !strcmp(ckpt_st_metadata(st, "format"), "pt") &&
           !ckpt_st_metadata(st, "other"),
       "__metadata__ read");
    const ckpt_st_entry_t *e = ckpt_st_find(st, "blocks.0.attn.qkv.weight");
    ok(e && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 3 && e->numel == 6 &&
           !strcmp(e->dtype, "F32"),
       "the F32 tensor's name, dtype and shape");
    float out[6];
    ok(e && ckpt_st_read_f32(st, e, out, 6) == TDL_OK && !memcmp(out, f32, sizeof(out)),
       "F32 bit for bit");
    e = ckpt_st_find(st, "half");
    ok(e && ckpt_st_read_f32(st, e, out, 4) == TDL_OK && out[0] == 1.0f && out[1] == -2.0f &&
           out[2] == 0.333251953125f && out[3] > 3e38f,
       "F16: 1, -2, 0.333251953125, Inf");
    e = ckpt_st_find(st, "brain");
    ok(e && ckpt_st_read_f32(st, e, out, 2) == TDL_OK && out[0] == 3.140625f && out[1] == -1.0f,
       "BF16: 3.140625, -1");
    e = ckpt_st_find(st, "double");
    ok(e && ckpt_st_read_f32(st, e, out, 1) == TDL_OK && out[0] == 0.1f, "F64 0.1 rounds to float");
    e = ckpt_st_find(st, "count");
    ok(e && e->ndim == 0 && e->numel == 1 && ckpt_st_read_f32(st, e, out, 1) == TDL_ERR_MISMATCH &&
           strstr(tdl_error_get(), "I64"),
       "an I64 scalar is listed but not read as floats: %s", tdl_error_get());
    e = ckpt_st_find(st, "empty");
    ok(e && e->numel == 0 && ckpt_st_read_f32(st, e, out, 0) == TDL_OK, "a tensor of 0 elements");
    e = ckpt_st_find(st, "half");
    ok(ckpt_st_read_f32(st, e, out, 3) == TDL_ERR_INVALID_ARG, "a read of the wrong size refused");
    ok(!ckpt_st_find(st, "missing"), "no such tensor: NULL");
    ckpt_st_close(st);
}

static void test_refused(void)
{
    const char *one = "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
    refused("nohead", "", 3, 0, "header of 3 bytes in a file of 8",
            "a header of 3 bytes not there");
    char path[300];
    snprintf(path, sizeof(path), "%s/short", dir);
    FILE *f = fopen(path, "wb");
    fputs("abc", f);
    fclose(f);
    ckpt_st_t *st = NULL;
    ok(ckpt_st_open(path, &st) == TDL_ERR_CORRUPT && !st && strstr(tdl_error_get(), "8 bytes"),
       "a file of 3 bytes: refused: %s", tdl_error_get());
    refused("long", one, 1000, 8, "header of 1000 bytes", "a header length past the end");
    refused("huge", one, (long long)1 << 40, 8, "100 MiB", "a header length of 1 TiB");
    refused("notjson", "{\"a\": ", -1, 0, "JSON", "a header cut in the middle");
    refused("array", "[1, 2]", -1, 0, "JSON object", "a header that is an array");
    refused("dup",
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
            "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
            -1, 8, "JSON", "a name given twice");
    refused("dtype", "{\"a\": {\"dtype\": \"Q4\", \"shape\": [2], \"data_offsets\": [0, 8]}}", -1,
            8, "dtype 'Q4'", "an unknown dtype");
    refused("neg", "{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", -1,
            8, "dimension", "a negative dimension");
    refused("past", one, -1, 4, "ends at byte 8 of a data section of 4", "data cut short");
    refused("size", "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", -1,
            8, "8 bytes of data for 3 elements", "a size the shape does not make");
    refused("overlap",
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
            "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
            -1, 12, "overlap", "two tensors sharing bytes");
    refused("hole",
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
            "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
            -1, 12, "hole", "bytes between two tensors");
    refused("trailing", one, -1, 12, "4 bytes after", "bytes after the last tensor");
    refused("slash", "{\"a/b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
            -1, 8, "'/'", "a name with a slash");
    refused("meta", "{\"__metadata__\": {\"k\": 1}}", -1, 0, "__metadata__",
            "metadata not strings");
    refused(
        "dims",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
        -1, 4, "9 dimensions", "nine dimensions");
    refused("fields", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", -1, 8, "data_offsets",
            "an entry without its offsets");
    snprintf(path, sizeof(path), "%s/none.safetensors", dir);
    ok(ckpt_st_open(path, &st) == TDL_ERR_NOT_FOUND && !st && strstr(tdl_error_get(), path),
       "a missing file: TDL_ERR_NOT_FOUND naming it");
    ok(ckpt_st_open(dir, &st) == TDL_ERR_IO && !st, "a directory: refused");
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    test_good();
    test_refused();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
