/* codec-vnmse: the error of a compressed all-reduce, |sum^ - sum|^2 / |sum|^2 (vNMSE) against
 * the exact sum in double, for every format, P ranks and the ring and butterfly algorithms, and
 * the bits per coordinate each puts on the wire (metadata included).
 *
 * The all-reduce is replayed in one process with the hop semantics of gfc's ring and butterfly
 * (src/gfc/allreduce): on the ring, block b is encoded by one rank, then decoded, added to the
 * next rank's values and re-encoded (contributions 2, 3, ...) until the final encoding, which
 * every rank decodes; the butterfly halves: each member encodes the half it gives away and adds
 * the decoded half it gets, and the owner of a final block encodes it once. The ring cuts each
 * block into chunks of --chunk bytes as gfc does (default 256 KiB, gfc's; 0: whole blocks), the
 * butterfly sends whole halves as gfc's does. Every encoding gets the codec_where_t the
 * all-reduce would give it (rank, hop, contributions, group size, offset), so correlated rounding
 * behaves as in training.
 *
 * Inputs: captured DiT gradients (--grads DIR of `tidal train --dump-grads` files, grouped by
 * step; the ranks' gradients of one step are the P inputs, reused cyclically when P exceeds
 * them) and synthetic heavy-tailed vectors (a shared signal plus per-rank noise, Student-t with
 * 3 degrees of freedom in blocks of log-normal scale), and independent ranks (each its own
 * Student-t(4) values, no shared signal: the data of bench/allreduce_link.c). Rows:
 * data,format,variant,algo,np,vnmse,bits_per_coord. */
#include "config.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "core/core.h"
#include "dit/dit.h"
#include "train/train.h"

typedef struct sim {
    const codec_ops_t *ops;
    const codec_config_t *cfg;
    uint64_t seed, seq;
    size_t n;
    int p;
    size_t chunk_bytes; /* the ring's chunk, each one encoding (0: one chunk a block) */
    unsigned char *enc, *enc2;
    size_t enc_cap;
    double sent_bits, sent_values;
} sim_t;

static codec_where_t where_of(const sim_t *s, int rank, int contributions, size_t offset,
                              uint64_t chunk)
{
    codec_where_t w = {.seed = s->seed,
                       .rank = rank,
                       .hop = contributions - 1,
                       .contributions = contributions,
                       .group_size = s->p,
                       .stream = codec_stream_make(1, s->seq, chunk),
                       .collective = codec_stream_make(1, s->seq, 0),
                       .offset = offset};
    return w;
}

static int check(tdl_status_t st, const char *what)
{
    if (st != TDL_OK) {
        fprintf(stderr, "codec_vnmse: %s: %s\n", what, tdl_error_get());
        exit(1);
    }
    return 0;
}

static size_t block_off(size_t n, int p, int b)
{
    return n / (size_t)p * (size_t)b + TDL_MIN((size_t)b, n % (size_t)p);
}

/* Ring: result = what every rank decodes. Each block travels in chunks as gfc's ring cuts it
 * (src/gfc/allreduce/ring.c: chunk_bytes / 4 values, at least a 64th of the largest block), each
 * chunk its own encoding. */
static void sim_ring(sim_t *s, float *const *x, float *result)
{
    size_t max_block = block_off(s->n, s->p, 1);
    size_t chunk = s->chunk_bytes ? TDL_MAX(s->chunk_bytes / 4, (size_t)1) : max_block;
    chunk = TDL_MAX(TDL_MIN(TDL_MAX(chunk, (max_block + 63) / 64), max_block), (size_t)1);
    for (int b = 0; b < s->p; b++) {
        size_t blo = block_off(s->n, s->p, b), blen = block_off(s->n, s->p, b + 1) - blo;
        for (size_t first = 0, c = 0; first < blen; first += chunk, c++) {
            size_t lo = blo + first, len = TDL_MIN(chunk, blen - first);
            int r0 = (b + 1) % s->p;
            codec_where_t w = where_of(s, r0, 1, lo, c);
            size_t bytes;
            check(s->ops->encode(s->cfg, &w, x[r0] + lo, len, s->enc, &bytes), "encode");
            s->sent_bits += 8.0 * (double)bytes, s->sent_values += (double)len;
            for (int k = 1; k < s->p; k++) {
                int r = (b + 1 + k) % s->p;
                size_t out;
                w = where_of(s, r, k + 1, lo, c);
                check(s->ops->decode_accumulate_encode(s->cfg, &w, s->enc, bytes, x[r] + lo, len,
                                                       s->enc2, &out),
                      "decode-accumulate-encode");
                unsigned char *t = s->enc;
                s->enc = s->enc2, s->enc2 = t, bytes = out;
                /* the final encoding goes to the p - 1 others in the all-gather */
                int times = k == s->p - 1 ? s->p - 1 : 1;
                s->sent_bits += 8.0 * (double)bytes * times, s->sent_values += (double)len * times;
            }
            check(s->ops->decode(s->cfg, s->enc, bytes, result + lo, len), "decode");
        }
    }
}

/* Butterfly (p a power of two): recursive halving with encoded halves, final blocks encoded by
 * their owners. buf[r] starts as a copy of x[r]. */
static void sim_butterfly(sim_t *s, float *const *x, float **buf, float *result)
{
    int p = s->p;
    for (int r = 0; r < p; r++)
        memcpy(buf[r], x[r], s->n * sizeof(float));
    int *lo = calloc((size_t)p, sizeof(int)), *hi = calloc((size_t)p, sizeof(int));
    for (int r = 0; r < p; r++)
        lo[r] = 0, hi[r] = p;
    int contributions = 1;
    for (int mask = p / 2; mask >= 1; mask /= 2, contributions *= 2) {
        /* all sends of the round are encoded from the values before it */
        size_t total = 0;
        unsigned char *msgs = malloc((size_t)p * s->enc_cap);
        size_t *len = calloc((size_t)p, sizeof(size_t));
        for (int v = 0; v < p; v++) {
            int half = (hi[v] - lo[v]) / 2;
            int send_lo = (v & mask) ? lo[v] : lo[v] + half;
            size_t a = block_off(s->n, p, send_lo), b = block_off(s->n, p, send_lo + half);
            codec_where_t w = where_of(s, v, contributions, a, a);
            check(s->ops->encode(s->cfg, &w, buf[v] + a, b - a, msgs + (size_t)v * s->enc_cap,
                                 &len[v]),
                  "encode");
            s->sent_bits += 8.0 * (double)len[v], s->sent_values += (double)(b - a);
            total += len[v];
        }
        for (int v = 0; v < p; v++) {
            int u = v ^ mask, half = (hi[v] - lo[v]) / 2;
            int keep_lo = (v & mask) ? lo[v] + half : lo[v];
            size_t a = block_off(s->n, p, keep_lo), b = block_off(s->n, p, keep_lo + half);
            check(s->ops->decode_accumulate(s->cfg, msgs + (size_t)u * s->enc_cap, len[u],
                                            buf[v] + a, b - a),
                  "decode-accumulate");
            lo[v] = keep_lo, hi[v] = keep_lo + half;
        }
        free(msgs), free(len);
    }
    for (int v = 0; v < p; v++) {
        size_t a = block_off(s->n, p, v), b = block_off(s->n, p, v + 1), bytes;
        codec_where_t w = where_of(s, v, p, a, a);
        check(s->ops->encode(s->cfg, &w, buf[v] + a, b - a, s->enc, &bytes), "encode");
        s->sent_bits += 8.0 * (double)bytes * (p - 1), s->sent_values += (double)(b - a) * (p - 1);
        check(s->ops->decode(s->cfg, s->enc, bytes, result + a, b - a), "decode");
    }
    free(lo), free(hi);
}

/* ---- inputs ------------------------------------------------------------------------------ */

typedef struct inputs {
    char name[32];
    int count;
    size_t n;
    float **x;
} inputs_t;

static void synthetic(inputs_t *in, int count, size_t n, uint64_t seed)
{
    snprintf(in->name, sizeof(in->name), "synthetic");
    in->count = count, in->n = n;
    in->x = calloc((size_t)count, sizeof(float *));
    float *signal = malloc(n * sizeof(float));
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 0);
    double scale = 1;
    for (size_t i = 0; i < n; i++) {
        if (i % 4096 == 0)
            scale = exp(1.5 * tdl_rng_normal(&rng));
        /* Student-t, 3 degrees of freedom: normal / sqrt(chi2_3 / 3) */
        double c = 0;
        for (int k = 0; k < 3; k++) {
            double z = tdl_rng_normal(&rng);
            c += z * z;
        }
        signal[i] = (float)(scale * tdl_rng_normal(&rng) / sqrt(c / 3 + 1e-12));
    }
    for (int r = 0; r < count; r++) {
        in->x[r] = malloc(n * sizeof(float));
        tdl_rng_init(&rng, seed, (uint64_t)r + 1);
        for (size_t i = 0; i < n; i++) /* each rank: the signal plus noise as large */
            in->x[r][i] = signal[i] + fabsf(signal[i]) * tdl_rng_normal(&rng);
    }
    free(signal);
}

/* Independent ranks: each one's own Student-t(4) values in blocks of 4096 with log-normal
 * scales shared by the ranks, no common signal (the data of bench/allreduce_link.c). */
static void independent(inputs_t *in, int count, size_t n, uint64_t seed)
{
    snprintf(in->name, sizeof(in->name), "iid");
    in->count = count, in->n = n;
    in->x = calloc((size_t)count, sizeof(float *));
    for (int r = 0; r < count; r++) {
        tdl_rng_t scales, mine;
        tdl_rng_init(&scales, seed, 0);
        tdl_rng_init(&mine, seed, (uint64_t)r + 100);
        in->x[r] = malloc(n * sizeof(float));
        double scale = 1;
        for (size_t i = 0; i < n; i++) {
            if (i % 4096 == 0)
                scale = exp(tdl_rng_normal(&scales));
            double c = 0;
            for (int k = 0; k < 4; k++) {
                double z = tdl_rng_normal(&mine);
                c += z * z;
            }
            in->x[r][i] = (float)(scale * tdl_rng_normal(&mine) / sqrt(c / 4 + 1e-12));
        }
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files of the step with the most ranks. */
static int load_grads(inputs_t *in, const char *dir, int max)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "codec_vnmse: cannot open '%s'\n", dir);
        return -1;
    }
    char *names[4096];
    int cnt = 0;
    struct dirent *e;
    while ((e = readdir(d)) && cnt < 4096)
        if (!strncmp(e->d_name, "grads-", 6) && strstr(e->d_name, ".h5"))
            names[cnt++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)cnt, sizeof(char *), by_name);
    /* grads-<step>-rank<r>.h5: pick the step with the most files (the last of equals) */
    int best = -1, best_n = 0;
    for (int i = 0; i < cnt;) {
        int j = i;
        while (j < cnt && !strncmp(names[i], names[j], 14))
            j++;
        if (j - i >= best_n)
            best = i, best_n = j - i;
        i = j;
    }
    snprintf(in->name, sizeof(in->name), "dit");
    in->count = 0;
    in->x = calloc((size_t)TDL_MAX(best_n, 1), sizeof(float *));
    for (int i = best; best >= 0 && i < best + best_n && in->count < max; i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        dit_model_t *m;
        if (train_weights_load(path, "model", 1, 0, &m) != TDL_OK) {
            fprintf(stderr, "codec_vnmse: %s: %s\n", path, tdl_error_get());
            return -1;
        }
        in->n = m->num_params;
        in->x[in->count] = malloc(in->n * sizeof(float));
        memcpy(in->x[in->count++], m->params, in->n * sizeof(float));
        dit_model_free(m);
    }
    for (int i = 0; i < cnt; i++)
        free(names[i]);
    fprintf(stderr, "codec_vnmse: %d gradients of %zu values from %s (step file %s)\n", in->count,
            in->n, dir, best >= 0 ? "found" : "missing");
    return in->count > 0 ? 0 : -1;
}

/* ---- the sweep --------------------------------------------------------------------------- */

typedef struct variant {
    const char *format, *label;
    codec_config_t cfg;
} variant_t;

static void run_one(FILE *csv, const inputs_t *in, const variant_t *v, int p, int butterfly,
                    int seeds, size_t chunk_bytes)
{
    const codec_ops_t *ops = codec_find(v->format);
    if (!ops)
        return;
    size_t n = in->n;
    float **x = malloc((size_t)p * sizeof(float *)), **buf = NULL;
    for (int r = 0; r < p; r++)
        x[r] = in->x[r % in->count];
    double *exact = calloc(n, sizeof(double)), norm = 0;
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < n; i++)
            exact[i] += x[r][i];
    for (size_t i = 0; i < n; i++)
        norm += exact[i] * exact[i];
    sim_t s = {.ops = ops, .cfg = &v->cfg, .n = n, .p = p, .chunk_bytes = chunk_bytes};
    s.enc_cap = ops->max_encoded_bytes(&v->cfg, n) + 64;
    s.enc = malloc(s.enc_cap), s.enc2 = malloc(s.enc_cap);
    float *result = malloc(n * sizeof(float));
    if (butterfly) {
        buf = malloc((size_t)p * sizeof(float *));
        for (int r = 0; r < p; r++)
            buf[r] = malloc(n * sizeof(float));
    }
    double err_sum = 0;
    for (int k = 0; k < seeds; k++) {
        s.seed = 1000 + (uint64_t)k, s.seq = (uint64_t)k;
        if (butterfly)
            sim_butterfly(&s, x, buf, result);
        else
            sim_ring(&s, x, result);
        double err = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)result[i] - exact[i];
            err += d * d;
        }
        err_sum += err / norm;
    }
    fprintf(csv, "%s,%s,%s,%s,%d,%.6e,%.4f\n", in->name, v->format, v->label,
            butterfly ? "butterfly" : "ring", p, err_sum / seeds, s.sent_bits / s.sent_values);
    fflush(csv);
    if (buf)
        for (int r = 0; r < p; r++)
            free(buf[r]);
    free(buf), free(result), free(s.enc), free(s.enc2), free(exact), free(x);
}

int main(int argc, char **argv)
{
    const char *csv_path = NULL, *grads = NULL, *only = NULL;
    bool quick = false, ablation = true;
    size_t chunk_bytes = 256 * 1024; /* gfc's ring codec chunk (gfc-ring-codec-chunk) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            char *end;
            unsigned long long v = strtoull(argv[++i], &end, 10);
            if (*end || argv[i][0] == '-') {
                fprintf(stderr,
                        "codec_vnmse: --chunk '%s' is not a byte count (0: one chunk a "
                        "block)\n",
                        argv[i]);
                return 2;
            }
            chunk_bytes = (size_t)v;
        } else if (!strcmp(argv[i], "--grads") && i + 1 < argc)
            grads = argv[++i];
        else if (!strcmp(argv[i], "--format") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--no-ablation"))
            ablation = false;
        else {
            fprintf(stderr,
                    "codec_vnmse: unknown argument '%s' (--csv FILE, --grads DIR, --format NAME, "
                    "--chunk BYTES, --quick, --no-ablation)\n",
                    argv[i]);
            return 2;
        }
    }
    FILE *csv = csv_path ? fopen(csv_path, "w") : stdout;
    if (!csv) {
        fprintf(stderr, "codec_vnmse: cannot write '%s'\n", csv_path);
        return 1;
    }
    fprintf(csv, "data,format,variant,algo,np,vnmse,bits_per_coord\n");
    static const variant_t base[] = {
        {"bf16", "-", {0}},       {"fp16", "-", {0}},       {"mxfp8_e4m3", "-", {0}},
        {"mxfp8_e5m2", "-", {0}}, {"mxfp6_e3m2", "-", {0}}, {"mxfp6_e2m3", "-", {0}},
        {"mxfp4_e2m1", "-", {0}}, {"int8", "-", {.round = CODEC_ROUND_STOCHASTIC}},
        {"int8_rht", "-", {.round = CODEC_ROUND_STOCHASTIC}},
        {"dynamiq", "-", {0}},
    };
    static const variant_t ablations[] = {
        {"dynamiq", "independent-rounding", {.flags = CODEC_DQ_INDEPENDENT}},
        {"dynamiq", "nearest-rounding", {.round = CODEC_ROUND_NEAREST}},
        {"dynamiq", "uniform-levels", {.flags = CODEC_DQ_UNIFORM}},
        {"dynamiq", "fixed-width", {.flags = CODEC_DQ_FIXED_WIDTH}},
        {"dynamiq", "flat-hop-budget", {.flags = CODEC_DQ_FLAT_HOPS}},
        {"dynamiq", "one-scale-per-256", {.flags = CODEC_DQ_FLAT_SCALE}},
        {"dynamiq", "even-split", {.flags = CODEC_DQ_EVEN_SPLIT}},
        {"dynamiq", "4-bits", {.bits = 4.0}},
        {"dynamiq", "6-bits", {.bits = 6.0}},
    };
    inputs_t sets[3];
    int nsets = 0;
    if (grads && load_grads(&sets[nsets], grads, 16) == 0)
        nsets++;
    synthetic(&sets[nsets++], 16, quick ? (size_t)1 << 18 : (size_t)1 << 20, 7);
    independent(&sets[nsets++], 16, quick ? (size_t)1 << 18 : (size_t)1 << 20, 9);
    static const int nps[] = {2, 4, 8, 16};
    int seeds = quick ? 1 : 3;
    for (int d = 0; d < nsets; d++)
        for (size_t pi = 0; pi < TDL_ARRAY_SIZE(nps); pi++)
            for (int bfly = 0; bfly < 2; bfly++) {
                int p = nps[pi];
                if (quick && p == 16)
                    continue;
                for (size_t f = 0; f < TDL_ARRAY_SIZE(base); f++)
                    if (!only || !strcmp(only, base[f].format))
                        run_one(csv, &sets[d], &base[f], p, bfly, seeds, chunk_bytes);
                if (ablation && p == 8 && !bfly)
                    for (size_t f = 0; f < TDL_ARRAY_SIZE(ablations); f++)
                        run_one(csv, &sets[d], &ablations[f], p, bfly, seeds, chunk_bytes);
                fprintf(stderr, "codec_vnmse: %s, %d ranks, %s done\n", sets[d].name, p,
                        bfly ? "butterfly" : "ring");
            }
    if (csv != stdout)
        fclose(csv);
    return 0;
}
