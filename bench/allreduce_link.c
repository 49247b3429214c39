/* Benchmark allreduce-link: the gradient all-reduce in each wire format over a slow link. One
 * f32 sum over the world of a 64 MiB gradient and of the gradient of a DiT (the fmnist model's
 * parameter count), exact (f32, no codec) and through each gradient codec, all with gfc's ring.
 * bench/run allreduce-link runs it at 4 ranks, each rank in its own network namespace behind a
 * rate-limited veth (bench/netns_link.sh), once per link speed; --link names the speed for the
 * CSV rows and does nothing else.
 *
 * The gradient: per block of 4096 values a scale shared by every rank (log-normal, as the
 * magnitudes of different layers differ), times Student-t values with 4 degrees of freedom
 * (heavy-tailed, as gradients are), different on every rank. A sample is one whole
 * gfc_allreduce after a world barrier, the slowest rank's time; the formats are interleaved
 * sample by sample after one untimed warm-up each, and each reports the median. The warm-up's
 * result is compared with the exact f32 sum: rel_err is ||result - exact|| / ||exact||.
 * wire_mib is what this rank handed to UCX for one all-reduce (the largest over ranks).
 *
 * A format the codec table does not know is skipped with a "not built" line, so the list may
 * name formats that are still to come. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "dit/dit.h"
#include "mpi/bench_mpi.h"
#include "train/allreduce_codec.h"

#define LINK_DEFAULT_FORMATS "f32,bf16,mxfp8,mxfp6,mxfp4,int8,dynamiq"
#define LINK_DEFAULT_SIZES   "64M,dit"
#define LINK_MAX_FORMATS     32
#define LINK_MAX_SIZES       8

/* This program's own options; the rest go to bench_ctx_init. */
typedef struct link_opts {
    const char *formats; /* --formats f32,bf16,...: the wire formats, in order */
    const char *sizes;   /* --sizes 64M,dit: gradient sizes; "dit" = --model's gradient */
    const char *model;   /* --model NAME: the DiT configuration of "dit" */
    double link_gbit;    /* --link G: the link speed, for the CSV only (0: not limited) */
} link_opts_t;

typedef struct link_format {
    char name[32];         /* as asked for ("mxfp8") */
    train_codec_t *codec;  /* NULL: f32, exact */
    double bits_per_coord; /* at the size being measured */
} link_format_t;

typedef struct link_state {
    gfc_group_t group;
    link_format_t formats[LINK_MAX_FORMATS];
    int nformats;
    const float *send;
    float *recv;
    size_t count;
    uint64_t wire[LINK_MAX_FORMATS]; /* bytes handed to UCX by the last all-reduce of each */
} link_state_t;

static void link_usage(FILE *out)
{
    fprintf(out,
            "allreduce_link options (with the common ones below):\n"
            "  --formats LIST     wire formats, comma separated: f32 (exact, no codec) and codec\n"
            "                     names (default %s)\n"
            "  --sizes LIST       gradient sizes (64M, 16MiB ...) and 'dit' (default %s)\n"
            "  --model NAME       the DiT whose gradient 'dit' is (default fmnist)\n"
            "  --link GBIT        the link speed, written to the CSV (default 0: not limited)\n",
            LINK_DEFAULT_FORMATS, LINK_DEFAULT_SIZES);
}

/* Takes this program's options out of argv (all ranks see the same argv); exits 2 on a bad
 * one. What remains is for bench_ctx_init. */
static void link_opts_take(int *argc, char **argv, link_opts_t *o)
{
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        bool is_link = false;
        if (strcmp(a, "--formats") == 0)
            dst = &o->formats;
        else if (strcmp(a, "--sizes") == 0)
            dst = &o->sizes;
        else if (strcmp(a, "--model") == 0)
            dst = &o->model;
        else if (strcmp(a, "--link") == 0)
            is_link = true;
        if (dst == NULL && !is_link) {
            if (strcmp(a, "--help") == 0)
                link_usage(stdout);
            argv[kept++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "allreduce_link: %s needs a value\n", a);
            link_usage(stderr);
            exit(2);
        }
        const char *v = argv[++i];
        if (is_link) {
            char *end;
            errno = 0;
            o->link_gbit = strtod(v, &end);
            if (errno != 0 || end == v || *end != '\0' || !(o->link_gbit >= 0.0)) {
                fprintf(stderr, "allreduce_link: --link '%s' is not a speed in Gbit/s\n", v);
                exit(2);
            }
        } else {
            *dst = v;
        }
    }
    argv[kept] = NULL;
    *argc = kept;
}

/* Creates the codecs of the listed formats; one the table does not know is left out, with a
 * line saying so. */
static void link_formats_create(bench_ctx_t *ctx, link_state_t *s, const char *list, uint64_t seed)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        if (s->nformats == LINK_MAX_FORMATS)
            bench_check(
                ctx, tdl_error_raise(TDL_ERR_INVALID_ARG, "more than %d formats", LINK_MAX_FORMATS),
                "--formats");
        link_format_t *f = &s->formats[s->nformats];
        snprintf(f->name, sizeof(f->name), "%s", name);
        f->codec = NULL;
        f->bits_per_coord = 32.0;
        if (strcmp(name, "f32") != 0) {
            tdl_status_t st = train_codec_create(name, false, seed, &f->codec);
            if (st == TDL_ERR_NOT_FOUND) {
                bench_log(ctx,
                          "# format %s: not built (the codec table does not know it); "
                          "skipped",
                          name);
                continue;
            }
            bench_check(ctx, st, name);
        }
        s->nformats++;
    }
    if (s->nformats == 0)
        bench_check(ctx, tdl_error_raise(TDL_ERR_INVALID_ARG, "no format of '%s' is built", list),
                    "--formats");
}

/* One all-reduce of s->send into recv through codec (NULL: exact); *wire_out: the bytes this
 * rank handed to UCX for it. */
static tdl_status_t link_run(link_state_t *s, const train_codec_t *codec, float *recv,
                             uint64_t *wire_out)
{
    gfc_allreduce_opts_t opts = {.algo = GFC_ALLREDUCE_RING,
                                 .codec = codec ? train_codec_hook(codec) : NULL};
    gfc_stats_t before, after;
    gfc_runtime_stats(s->group.rt, &before);
    tdl_status_t st =
        gfc_allreduce(&s->group, s->send, recv, s->count, GFC_DT_F32, GFC_OP_SUM, &opts);
    gfc_runtime_stats(s->group.rt, &after);
    *wire_out = after.bytes_sent - before.bytes_sent;
    return st;
}

static double link_sample(bench_ctx_t *ctx, void *arg, int m, int reps)
{
    link_state_t *s = arg;
    uint64_t t0 = tdl_clock_ns();
    for (int r = 0; r < reps; r++)
        bench_check(ctx, link_run(s, s->formats[m].codec, s->recv, &s->wire[m]),
                    s->formats[m].name);
    return (double)(tdl_clock_ns() - t0) / reps;
}

/* Measures every format at one size; `size_name` goes into the rows. */
static void link_measure(bench_ctx_t *ctx, link_state_t *s, const link_opts_t *o,
                         const char *size_name, float *ref)
{
    int n = ctx->boot.size, nf = s->nformats;
    int iters = ctx->args.iters > 0 ? ctx->args.iters : (ctx->args.quick ? 2 : 5);
    size_t bytes = s->count * sizeof(float);
    double err[LINK_MAX_FORMATS];

    /* The exact sum, which also opens the connections before anything is timed. */
    uint64_t ignored;
    bench_check(ctx, link_run(s, NULL, ref, &ignored), "exact all-reduce");

    for (int m = 0; m < nf; m++) {
        link_format_t *f = &s->formats[m];
        f->bits_per_coord = f->codec ? train_codec_bits_per_coord(f->codec, s->count) : 32.0;
        for (int w = 0; w < TDL_MAX(ctx->args.warmup, 1); w++) {
            bench_check(ctx, bench_mpi_barrier(), "MPI_Barrier");
            bench_check(ctx, link_run(s, f->codec, s->recv, &s->wire[m]), f->name);
        }
        err[m] = sqrt(bench_vnmse(s->recv, ref, s->count));
    }
    double wire[LINK_MAX_FORMATS];
    for (int m = 0; m < nf; m++)
        wire[m] = (double)s->wire[m];
    bench_check(ctx, bench_mpi_max_f64(wire, (size_t)nf), "wire bytes");

    int reps[LINK_MAX_FORMATS];
    for (int m = 0; m < nf; m++)
        reps[m] = 1;
    double *samples = malloc((size_t)nf * (size_t)iters * sizeof(double));
    if (samples == NULL)
        bench_check(ctx, TDL_ERR_NOMEM, "samples");
    bench_samples_interleave(ctx, nf, iters, reps, link_sample, s, samples);

    double f32_med = 0.0;
    for (int m = 0; m < nf; m++)
        if (s->formats[m].codec == NULL)
            f32_med = tdl_median(samples + m * iters, (size_t)iters) / 1e9;
    double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    for (int m = 0; m < nf; m++) {
        const link_format_t *f = &s->formats[m];
        double med = tdl_median(samples + m * iters, (size_t)iters) / 1e9;
        double min = bench_stats_min(samples + m * iters, (size_t)iters) / 1e9;
        double busbw = factor * (double)bytes / med / 1e9;
        double speedup = f32_med > 0.0 ? f32_med / med : 0.0;
        /* the wire's rate: what this rank sent per second (Gbit/s) */
        double wire_gbit = wire[m] * 8.0 / med / 1e9;
        bench_log(ctx,
                  "# np=%d link %g Gbit/s %-10s %-10s %8.4f s  busbw %7.3f GB/s  wire %7.2f MiB "
                  "(%.2f Gbit/s)  %5.2f bits/value  x%.2f vs f32  rel_err %.2e",
                  n, o->link_gbit, size_name, f->name, med, busbw, wire[m] / 1048576.0, wire_gbit,
                  f->bits_per_coord, speedup, err[m]);
        bench_csv_row(ctx, "%g,%s,%s,%zu,%d,%zu,%d,%.6f,%.6f,%.4f,%.3f,%.3f,%.4f,%.4f,%.3e",
                      o->link_gbit, f->name, size_name, bytes, n, s->count, iters, med, min, busbw,
                      wire[m] / 1048576.0, wire_gbit, f->bits_per_coord, speedup, err[m]);
    }
    free(samples);
}

int main(int argc, char **argv)
{
    link_opts_t o = {.formats = LINK_DEFAULT_FORMATS,
                     .sizes = LINK_DEFAULT_SIZES,
                     .model = "fmnist",
                     .link_gbit = 0.0};
    link_opts_take(&argc, argv, &o);
    const bench_args_t defaults = {.warmup = 1, .seed = 1};
    bench_ctx_t ctx;
    bench_ctx_init(&ctx, "allreduce-link", &argc, &argv, &defaults);
    link_state_t s = {0};
    bench_check(&ctx, gfc_group_init(&s.group, ctx.rt, ctx.world_ranks, ctx.boot.size, 1),
                "gfc_group_init");
    link_formats_create(&ctx, &s, o.formats, ctx.args.seed);

    /* the sizes, in values */
    char names[LINK_MAX_SIZES][32];
    size_t counts[LINK_MAX_SIZES], max_count = 0;
    int nsizes = bench_gradient_sizes(&ctx, o.sizes, o.model, names, counts, LINK_MAX_SIZES);
    for (int i = 0; i < nsizes; i++)
        max_count = TDL_MAX(max_count, counts[i]);

    float *send = bench_buf_alloc(&ctx, max_count * sizeof(float));
    float *ref = bench_buf_alloc(&ctx, max_count * sizeof(float));
    s.recv = bench_buf_alloc(&ctx, max_count * sizeof(float));
    bench_fill_gradient(send, max_count, ctx.args.seed, ctx.boot.rank);
    s.send = send;

    bench_csv_header(&ctx, "link_gbit,format,size_name,bytes,np,values,iters,seconds,min_seconds,"
                           "busbw_gbs,wire_mib,wire_gbit_per_s,bits_per_value,speedup_vs_f32,"
                           "rel_err");
    for (int i = 0; i < nsizes; i++) {
        s.count = counts[i];
        link_measure(&ctx, &s, &o, names[i], ref);
    }

    for (int m = 0; m < s.nformats; m++)
        train_codec_free(s.formats[m].codec);
    free(s.recv);
    free(ref);
    free(send);
    bench_ctx_fini(&ctx);
    return 0;
}
