/* codec-throughput: encode, decode and the fused decode-accumulate-encode pass of every gradient
 * codec, in GB/s of f32 input on one core, against memcpy of the same bytes on the same machine.
 * Writes CSV rows: format,op,bytes,seconds,gbps,over_memcpy,bits_per_coord. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "core/core.h"

int main(int argc, char **argv)
{
    const char *csv_path = NULL;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else {
            fprintf(stderr, "codec_throughput: unknown argument '%s' (--csv FILE, --quick)\n",
                    argv[i]);
            return 2;
        }
    }
    size_t n = quick ? (size_t)4 << 20 : (size_t)16 << 20; /* floats: 16 or 64 MiB */
    int reps = quick ? 3 : 5;
    float *in = malloc(n * 4), *local = malloc(n * 4), *dec = malloc(n * 4);
    unsigned char *enc = NULL, *out = NULL;
    void *copy = malloc(n * 4);
    if (!in || !local || !dec || !copy)
        return 1;
    tdl_rng_t rng;
    tdl_rng_init(&rng, 1, 1);
    tdl_rng_fill_normal(&rng, in, n);
    tdl_rng_fill_normal(&rng, local, n);
    FILE *csv = csv_path ? fopen(csv_path, "w") : stdout;
    if (!csv) {
        fprintf(stderr, "codec_throughput: cannot write %s\n", csv_path);
        return 1;
    }
    fprintf(csv, "format,op,bytes,seconds,gbps,over_memcpy,bits_per_coord\n");
    double t[16];
    memset(copy, 1, n * 4); /* its pages exist before the first timed copy */
    for (int r = 0; r < 9; r++) {
        double t0 = tdl_clock_s();
        memcpy(copy, in, n * 4);
        t[r] = tdl_clock_s() - t0;
    }
    double mc = tdl_median(t, 9);
    fprintf(csv, "memcpy,copy,%zu,%.6f,%.3f,1.000,32\n", n * 4, mc, n * 4 / mc / 1e9);
    printf("memcpy: %.2f GB/s on %zu MiB\n", n * 4 / mc / 1e9, n * 4 >> 20);
    char names[512];
    snprintf(names, sizeof(names), "%s", codec_names());
    for (char *save = NULL, *name = strtok_r(names, "|", &save); name;
         name = strtok_r(NULL, "|", &save)) {
        codec_t *c;
        if (codec_create(name, NULL, &c) != TDL_OK)
            continue;
        size_t max = c->ops->max_encoded_bytes(c->cfg, n), len = 0, len2 = 0;
        enc = realloc(enc, max);
        out = realloc(out, max);
        codec_where_t w = {.seed = 1, .rank = 0, .hop = 1, .contributions = 2, .stream = 7};
        const char *ops[] = {"encode", "decode", "fused"};
        for (int op = 0; op < 3; op++) {
            for (int r = 0; r < reps; r++) {
                double t0 = tdl_clock_s();
                if (op == 0)
                    c->ops->encode(c->cfg, &w, in, n, enc, &len);
                else if (op == 1)
                    c->ops->decode(c->cfg, enc, len, dec, n);
                else
                    c->ops->decode_accumulate_encode(c->cfg, &w, enc, len, local, n, out, &len2);
                t[r] = tdl_clock_s() - t0;
            }
            double s = tdl_median(t, reps);
            fprintf(csv, "%s,%s,%zu,%.6f,%.3f,%.3f,%.3f\n", name, ops[op], n * 4, s,
                    n * 4 / s / 1e9, mc / s, c->ops->bits_per_coord(c->cfg, n));
            printf("%-11s %-6s %6.2f GB/s  %.3f x memcpy\n", name, ops[op], n * 4 / s / 1e9,
                   mc / s);
        }
        codec_destroy(c);
    }
    if (csv != stdout)
        fclose(csv);
    free(in), free(local), free(dec), free(copy), free(enc), free(out);
    return 0;
}
