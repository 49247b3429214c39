/* Benchmark allreduce-hier: the hierarchical all-reduce (gfc's hier: f32 within each host, a ring
 * per local rank between hosts, the codec between hosts only) against the flat ring in the same
 * formats and Open MPI's MPI_Allreduce, on an emulated cluster of several ranks per host
 * (bench/run allreduce-hier: 4 hosts x 2 devices, once per host link speed).
 *
 * One f32 sum over the world of a 64 MiB gradient and of the gradient of a DiT (the fmnist
 * model's parameter count). --methods names what runs, in order: ALGO:FORMAT with ALGO a gfc
 * all-reduce algorithm (hier, ring, butterfly, auto) and FORMAT f32 (exact, no codec) or a codec
 * name, or "mpi" (MPI_Allreduce, with whatever collective component the launch selected: --mpi-name
 * names it in the rows, "mpi-han" for a launch with han). The gradient is allreduce_link's: per
 * block of 4096 values a log-normal scale shared by the ranks, times Student-t(4) values of each
 * rank's own. A sample is one whole all-reduce after a world barrier, the slowest rank's time;
 * methods are interleaved sample by sample after one untimed warm-up each, each reports the median.
 * vnmse = |result - ref|^2 / |ref|^2 with ref the exact f32 sum (gfc's ring, no codec), whose own
 * error, about 1e-14, is far below any codec's; wire_mib is what this rank handed to UCX for one
 * all-reduce (the largest over ranks; none for MPI). The host table gfc found is printed first. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "dit/dit.h"
#include "mpi/bench_mpi.h"
#include "train/allreduce_codec.h"

#define HIER_DEFAULT_METHODS "hier:dynamiq,ring:dynamiq,ring:bf16,mpi,hier:f32,ring:f32,hier:bf16"
#define HIER_DEFAULT_SIZES   "64M,dit"
#define HIER_MAX_METHODS     16
#define HIER_MAX_SIZES       8

typedef struct hier_opts {
    const char *methods;
    const char *sizes;
    const char *model;
    const char *mpi_name; /* the rows' name of "mpi" */
    double link_gbit;
} hier_opts_t;

typedef struct hier_method {
    char name[48];   /* "hier+dynamiq", "mpi" */
    char format[24]; /* "dynamiq", "f32", "" for MPI */
    bool mpi;
    gfc_allreduce_algo_t algo;
    train_codec_t *codec; /* NULL: exact */
} hier_method_t;

typedef struct hier_bench {
    gfc_group_t group;
    hier_method_t m[HIER_MAX_METHODS];
    int n;
    const float *send;
    float *recv;
    size_t count;
    uint64_t wire[HIER_MAX_METHODS];
    uint64_t ns; /* a fresh group value per all-reduce */
    int *ranks;
    int size;
    gfc_runtime_t *rt;
} hier_bench_t;

static void hier_usage(FILE *out)
{
    fprintf(out,
            "allreduce_hier options (with the common ones below):\n"
            "  --methods LIST   ALGO:FORMAT (ALGO hier, ring, butterfly, auto; FORMAT f32 or a\n"
            "                   codec) and mpi, comma separated (default %s)\n"
            "  --sizes LIST     gradient sizes (64M ...) and 'dit' (default %s)\n"
            "  --model NAME     the DiT whose gradient 'dit' is (default fmnist)\n"
            "  --mpi-name NAME  the rows' name of mpi (default mpi)\n"
            "  --link GBIT      the host links' speed, written to the CSV\n",
            HIER_DEFAULT_METHODS, HIER_DEFAULT_SIZES);
}

static void hier_opts_take(int *argc, char **argv, hier_opts_t *o)
{
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        bool is_link = strcmp(a, "--link") == 0;
        if (strcmp(a, "--methods") == 0)
            dst = &o->methods;
        else if (strcmp(a, "--sizes") == 0)
            dst = &o->sizes;
        else if (strcmp(a, "--model") == 0)
            dst = &o->model;
        else if (strcmp(a, "--mpi-name") == 0)
            dst = &o->mpi_name;
        if (!dst && !is_link) {
            if (strcmp(a, "--help") == 0)
                hier_usage(stdout);
            argv[kept++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "allreduce_hier: %s needs a value\n", a);
            hier_usage(stderr);
            exit(2);
        }
        const char *v = argv[++i];
        if (is_link) {
            char *end;
            errno = 0;
            o->link_gbit = strtod(v, &end);
            if (errno || end == v || *end || !(o->link_gbit >= 0.0)) {
                fprintf(stderr, "allreduce_hier: --link '%s' is not a speed in Gbit/s\n", v);
                exit(2);
            }
        } else {
            *dst = v;
        }
    }
    argv[kept] = NULL;
    *argc = kept;
}

static void hier_methods_create(bench_ctx_t *ctx, hier_bench_t *b, const hier_opts_t *o)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", o->methods);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (b->n == HIER_MAX_METHODS)
            bench_check(
                ctx, tdl_error_raise(TDL_ERR_INVALID_ARG, "more than %d methods", HIER_MAX_METHODS),
                "--methods");
        hier_method_t *m = &b->m[b->n];
        memset(m, 0, sizeof(*m));
        if (strcmp(tok, "mpi") == 0) {
            m->mpi = true;
            snprintf(m->name, sizeof(m->name), "%s", o->mpi_name);
            b->n++;
            continue;
        }
        char *colon = strchr(tok, ':');
        if (!colon)
            bench_check(ctx,
                        tdl_error_raise(TDL_ERR_INVALID_ARG,
                                        "method '%s' is neither mpi nor ALGO:FORMAT", tok),
                        "--methods");
        *colon = '\0';
        bench_check(ctx, gfc_allreduce_algo_parse(tok, &m->algo), "--methods");
        snprintf(m->format, sizeof(m->format), "%s", colon + 1);
        snprintf(m->name, sizeof(m->name), "%s+%s", tok, colon + 1);
        if (strcmp(m->format, "f32") != 0)
            bench_check(ctx, train_codec_create(m->format, false, ctx->args.seed, &m->codec),
                        m->format);
        b->n++;
    }
    if (b->n == 0)
        bench_check(ctx, tdl_error_raise(TDL_ERR_INVALID_ARG, "no method"), "--methods");
}

static tdl_status_t hier_run(hier_bench_t *b, const hier_method_t *m, float *recv,
                             uint64_t *wire_out)
{
    if (m->mpi) {
        *wire_out = 0;
        return bench_mpi_allreduce_f32(b->send, recv, b->count);
    }
    gfc_allreduce_opts_t opts = {.algo = m->algo,
                                 .codec = m->codec ? train_codec_hook(m->codec) : NULL};
    gfc_stats_t before, after;
    gfc_runtime_stats(b->rt, &before);
    tdl_status_t st = gfc_group_init(&b->group, b->rt, b->ranks, b->size, b->ns++);
    if (st == TDL_OK)
        st = gfc_allreduce(&b->group, b->send, recv, b->count, GFC_DT_F32, GFC_OP_SUM, &opts);
    gfc_runtime_stats(b->rt, &after);
    *wire_out = after.bytes_sent - before.bytes_sent;
    return st;
}

static double hier_sample(bench_ctx_t *ctx, void *arg, int k, int reps)
{
    hier_bench_t *b = arg;
    uint64_t t0 = tdl_clock_ns();
    for (int r = 0; r < reps; r++)
        bench_check(ctx, hier_run(b, &b->m[k], b->recv, &b->wire[k]), b->m[k].name);
    return (double)(tdl_clock_ns() - t0) / reps;
}

static void hier_measure(bench_ctx_t *ctx, hier_bench_t *b, const hier_opts_t *o,
                         const char *size_name, float *ref)
{
    int n = ctx->boot.size, nm = b->n;
    int iters = ctx->args.iters > 0 ? ctx->args.iters : (ctx->args.quick ? 3 : 5);
    size_t bytes = b->count * sizeof(float);
    double err[HIER_MAX_METHODS];
    int same[HIER_MAX_METHODS];
    /* the exact sum, which also opens the connections before anything is timed */
    hier_method_t exact = {.algo = GFC_ALLREDUCE_RING};
    uint64_t ignored;
    bench_check(ctx, hier_run(b, &exact, ref, &ignored), "exact all-reduce");
    for (int k = 0; k < nm; k++) {
        for (int w = 0; w < TDL_MAX(ctx->args.warmup, 1); w++) {
            bench_check(ctx, bench_mpi_barrier(), "MPI_Barrier");
            bench_check(ctx, hier_run(b, &b->m[k], b->recv, &b->wire[k]), b->m[k].name);
        }
        err[k] = bench_vnmse(b->recv, ref, b->count);
        same[k] = bench_digest_agree(ctx, bench_digest(b->recv, bytes));
    }
    double wire[HIER_MAX_METHODS];
    for (int k = 0; k < nm; k++)
        wire[k] = (double)b->wire[k];
    bench_check(ctx, bench_mpi_max_f64(wire, (size_t)nm), "wire bytes");
    int reps[HIER_MAX_METHODS];
    for (int k = 0; k < nm; k++)
        reps[k] = 1;
    double *samples = malloc((size_t)nm * (size_t)iters * sizeof(double));
    if (!samples)
        bench_check(ctx, TDL_ERR_NOMEM, "samples");
    bench_samples_interleave(ctx, nm, iters, reps, hier_sample, b, samples);
    for (int k = 0; k < nm; k++) {
        const hier_method_t *m = &b->m[k];
        double med = tdl_median(samples + k * iters, (size_t)iters) / 1e9;
        double min = bench_stats_min(samples + k * iters, (size_t)iters) / 1e9;
        double busbw = (n > 1 ? 2.0 * (n - 1) / n : 1.0) * (double)bytes / med / 1e9;
        bench_log(ctx,
                  "# np=%d link %g Gbit/s %-10s %-14s %8.4f s (min %.4f) busbw %7.3f GB/s wire "
                  "%7.2f MiB vnmse %.3e%s",
                  n, o->link_gbit, size_name, m->name, med, min, busbw, wire[k] / 1048576.0, err[k],
                  same[k] ? "" : "  RESULTS DIFFER BETWEEN RANKS");
        bench_csv_row(ctx, "%g,%s,%s,%s,%s,%zu,%d,%d,%zu,%d,%.6f,%.6f,%.4f,%.3f,%.4f,%.4e,%d",
                      o->link_gbit, m->name, m->mpi ? "mpi" : gfc_allreduce_algo_name(m->algo),
                      m->mpi ? "f32" : m->format, size_name, bytes, n, gfc_runtime_hosts(b->rt),
                      b->count, iters, med, min, busbw, wire[k] / 1048576.0,
                      wire[k] * 8.0 / (double)b->count, err[k], same[k]);
    }
    free(samples);
}

int main(int argc, char **argv)
{
    hier_opts_t o = {.methods = HIER_DEFAULT_METHODS,
                     .sizes = HIER_DEFAULT_SIZES,
                     .model = "fmnist",
                     .mpi_name = "mpi"};
    hier_opts_take(&argc, argv, &o);
    const bench_args_t defaults = {.warmup = 1, .seed = 1};
    bench_ctx_t ctx;
    bench_ctx_init(&ctx, "allreduce-hier", &argc, &argv, &defaults);
    hier_bench_t b = {.rt = ctx.rt, .ranks = ctx.world_ranks, .size = ctx.boot.size, .ns = 1};
    hier_methods_create(&ctx, &b, &o);
    {
        char line[512];
        size_t used = 0;
        int most = 0;
        for (int r = 0; r < ctx.boot.size && used < sizeof(line); r++)
            used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%d", r ? "," : "",
                                     gfc_runtime_host(ctx.rt, r));
        gfc_group_t w;
        bench_check(&ctx, gfc_group_init(&w, ctx.rt, ctx.world_ranks, ctx.boot.size, 0), "group");
        int hosts = gfc_group_hosts(&w, &most);
        bench_log(&ctx, "# hosts gfc found for ranks 0..%d: %s (%d hosts, at most %d ranks on one)",
                  ctx.boot.size - 1, line, hosts, most);
    }
    char names[HIER_MAX_SIZES][32];
    size_t counts[HIER_MAX_SIZES], max_count = 0;
    int nsizes = bench_gradient_sizes(&ctx, o.sizes, o.model, names, counts, HIER_MAX_SIZES);
    for (int i = 0; i < nsizes; i++)
        max_count = TDL_MAX(max_count, counts[i]);
    float *send = bench_buf_alloc(&ctx, max_count * sizeof(float));
    float *ref = bench_buf_alloc(&ctx, max_count * sizeof(float));
    b.recv = bench_buf_alloc(&ctx, max_count * sizeof(float));
    bench_fill_gradient(send, max_count, ctx.args.seed, ctx.boot.rank);
    b.send = send;
    bench_csv_header(&ctx, "link_gbit,method,algo,format,size_name,bytes,np,hosts,values,iters,"
                           "seconds,min_seconds,busbw_gbs,wire_mib,bits_per_value,vnmse,"
                           "identical");
    for (int i = 0; i < nsizes; i++) {
        b.count = counts[i];
        hier_measure(&ctx, &b, &o, names[i], ref);
    }
    for (int k = 0; k < b.n; k++)
        train_codec_free(b.m[k].codec);
    free(b.recv);
    free(ref);
    free(send);
    bench_ctx_fini(&ctx);
    return 0;
}
