/* Benchmark gfc-allreduce: bus bandwidth of an f32 sum over the world, gfc's ring and butterfly
 * against MPI_Allreduce, from 4 KiB to 256 MiB. bench/run runs it at 2 and 4 ranks.
 *
 * busbw = 2 (n - 1) / n * bytes / time, as nccl-tests define it: the traffic each rank's links
 * carry in a bandwidth-optimal all-reduce, comparable across rank counts. A sample is `reps`
 * calls back to back after a world barrier, the slowest rank's time; the three sides are
 * interleaved sample by sample and each size reports medians. Before the timing, each gfc
 * algorithm's result is checked once per size against MPI's (within float tolerance) and for
 * bit-identity across ranks: an algorithm that fails posts a ratio of 0. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "mpi/bench_mpi.h"

enum { AR_MPI = 0, AR_RING, AR_BUTTERFLY, AR_COUNT };

static const char *const ar_names[AR_COUNT] = {"mpi", "ring", "butterfly"};
static const gfc_allreduce_algo_t ar_algos[AR_COUNT] = {GFC_ALLREDUCE_AUTO, GFC_ALLREDUCE_RING,
                                                        GFC_ALLREDUCE_BUTTERFLY};

/* The input repeats with a prime period, so that no power-of-two chunk boundary of an
 * algorithm lines up with it and a misplaced chunk shows; each repetition is shifted so that a
 * chunk moved by whole periods shows too. */
#define AR_PERIOD 262147

typedef struct ar_state {
    gfc_group_t group;
    float *send, *recv;
    size_t count;
} ar_state_t;

static void ar_fill(float *x, size_t count, uint64_t seed, int rank)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, (uint64_t)rank);
    size_t base = TDL_MIN(count, (size_t)AR_PERIOD);
    tdl_rng_fill_normal(&rng, x, base);
    for (size_t i = base; i < count; i++)
        x[i] = x[i % AR_PERIOD] + 0.125f * (float)((i / AR_PERIOD) % 8);
}

static tdl_status_t ar_run(ar_state_t *s, int m, float *recv)
{
    if (m == AR_MPI)
        return bench_mpi_allreduce_f32(s->send, recv, s->count);
    gfc_allreduce_opts_t opts = {.algo = ar_algos[m], .codec = NULL};
    return gfc_allreduce(&s->group, s->send, recv, s->count, GFC_DT_F32, GFC_OP_SUM, &opts);
}

static double ar_sample(bench_ctx_t *ctx, void *arg, int m, int reps)
{
    ar_state_t *s = arg;
    uint64_t ns;
    if (m == AR_MPI) {
        bench_check(ctx, bench_mpi_allreduce_f32_time(s->send, s->recv, s->count, reps, &ns),
                    "MPI_Allreduce");
    } else {
        uint64_t t0 = tdl_clock_ns();
        for (int r = 0; r < reps; r++)
            bench_check(ctx, ar_run(s, m, s->recv), ar_names[m]);
        ns = tdl_clock_ns() - t0;
    }
    return (double)ns / reps;
}

/* Whether algorithm m gives MPI's sums (ref) within float rounding on every rank, and the
 * same bits on every rank. */
static bool ar_verify(bench_ctx_t *ctx, ar_state_t *s, int m, const float *ref)
{
    /* All-ones bytes are NaN: a result the algorithm never wrote cannot pass. */
    memset(s->recv, 0xff, s->count * sizeof(float));
    bench_check(ctx, ar_run(s, m, s->recv), ar_names[m]);
    /* Each rank adds n values: the orders of the two sums differ by at most n roundings. */
    float tol = 1e-5f * (float)ctx->boot.size;
    int64_t bad = 0;
    for (size_t i = 0; i < s->count; i++) {
        float diff = fabsf(s->recv[i] - ref[i]);
        if (!(diff <= tol * (1.0f + fabsf(ref[i])))) {
            if (bad == 0)
                fprintf(stderr,
                        "gfc-allreduce: rank %d: %s: element %zu of %zu is %g, MPI says %g\n",
                        ctx->boot.rank, ar_names[m], i, s->count, s->recv[i], ref[i]);
            bad++;
        }
    }
    bool agree = bench_digest_agree(ctx, bench_digest(s->recv, s->count * sizeof(float)));
    bench_check(ctx, bench_mpi_sum_i64(&bad, 1), "verification count");
    if (bad != 0 || !agree) {
        char sz[32];
        bench_log(ctx, "# np=%d %s %s: VERIFY FAILED (%lld elements differ from MPI%s)",
                  ctx->boot.size, bench_size_format(s->count * sizeof(float), sz, sizeof(sz)),
                  ar_names[m], (long long)bad, agree ? "" : ", ranks disagree");
        return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    const bench_args_t defaults = {.min_bytes = 4 << 10,
                                   .max_bytes = (size_t)256 << 20,
                                   .size_factor = 4,
                                   .warmup = 1,
                                   .seed = 1};
    bench_ctx_t ctx;
    bench_ctx_init(&ctx, "gfc-allreduce", &argc, &argv, &defaults);
    bench_args_t *a = &ctx.args;
    if (a->quick && a->max_bytes == defaults.max_bytes)
        a->max_bytes = (size_t)16 << 20;
    int n = ctx.boot.size;
    size_t max_count = a->max_bytes / sizeof(float);

    ar_state_t s = {0};
    bench_check(&ctx, gfc_group_init(&s.group, ctx.rt, ctx.world_ranks, n, 1), "gfc_group_init");
    s.send = bench_buf_alloc(&ctx, max_count * sizeof(float));
    s.recv = bench_buf_alloc(&ctx, max_count * sizeof(float));
    float *ref = bench_buf_alloc(&ctx, max_count * sizeof(float));
    ar_fill(s.send, max_count, a->seed, ctx.boot.rank);

    bench_csv_header(&ctx, "np,bytes,iters,reps,mpi_us,ring_us,butterfly_us,mpi_min_us,"
                           "ring_min_us,butterfly_min_us,mpi_busbw_gbs,ring_busbw_gbs,"
                           "butterfly_busbw_gbs,ring_ratio,butterfly_ratio,best_ratio,ring_ok,"
                           "butterfly_ok");
    double worst[AR_COUNT] = {INFINITY, INFINITY, INFINITY}; /* [AR_MPI]: the best of both */
    double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    for (size_t bytes = a->min_bytes; bytes <= a->max_bytes && bytes > 0;
         bytes *= (size_t)a->size_factor) {
        s.count = bytes / sizeof(float);
        if (s.count == 0)
            continue;
        size_t real_bytes = s.count * sizeof(float);
        int iters = bench_iters_for_size(&ctx, real_bytes);
        int reps = bench_reps_for_size(&ctx, real_bytes);

        bench_check(&ctx, ar_run(&s, AR_MPI, ref), "MPI_Allreduce (reference)");
        bool ok[AR_COUNT] = {true, true, true};
        for (int m = AR_RING; m < AR_COUNT; m++)
            ok[m] = ar_verify(&ctx, &s, m, ref);

        const int reps_all[AR_COUNT] = {reps, reps, reps};
        double *samples = malloc((size_t)AR_COUNT * (size_t)iters * sizeof(double));
        if (samples == NULL)
            bench_check(&ctx, TDL_ERR_NOMEM, "samples");
        for (int w = 0; w < a->warmup; w++)
            for (int m = 0; m < AR_COUNT; m++)
                ar_sample(&ctx, &s, m, reps);
        bench_samples_interleave(&ctx, AR_COUNT, iters, reps_all, ar_sample, &s, samples);

        double med[AR_COUNT], min[AR_COUNT], busbw[AR_COUNT], ratio[AR_COUNT];
        for (int m = 0; m < AR_COUNT; m++) {
            med[m] = tdl_median(samples + m * iters, iters);
            min[m] = bench_stats_min(samples + m * iters, iters);
            busbw[m] = factor * (double)real_bytes / med[m]; /* bytes per ns = GB/s */
            ratio[m] = ok[m] ? med[AR_MPI] / med[m] : 0.0;
        }
        free(samples);
        double best = TDL_MAX(ratio[AR_RING], ratio[AR_BUTTERFLY]);
        if (real_bytes >= ((size_t)1 << 20)) {
            worst[AR_RING] = TDL_MIN(worst[AR_RING], ratio[AR_RING]);
            worst[AR_BUTTERFLY] = TDL_MIN(worst[AR_BUTTERFLY], ratio[AR_BUTTERFLY]);
            worst[AR_MPI] = TDL_MIN(worst[AR_MPI], best);
        }
        char sz[32];
        bench_log(&ctx, "# np=%d %8s  busbw GB/s: mpi %7.3f ring %7.3f butterfly %7.3f  ratio %.3f",
                  n, bench_size_format(real_bytes, sz, sizeof(sz)), busbw[AR_MPI], busbw[AR_RING],
                  busbw[AR_BUTTERFLY], best);
        bench_csv_row(&ctx,
                      "%d,%zu,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,"
                      "%d,%d",
                      n, real_bytes, iters, reps, med[AR_MPI] / 1e3, med[AR_RING] / 1e3,
                      med[AR_BUTTERFLY] / 1e3, min[AR_MPI] / 1e3, min[AR_RING] / 1e3,
                      min[AR_BUTTERFLY] / 1e3, busbw[AR_MPI], busbw[AR_RING], busbw[AR_BUTTERFLY],
                      ratio[AR_RING], ratio[AR_BUTTERFLY], best, ok[AR_RING], ok[AR_BUTTERFLY]);
    }

    bench_kv_print(&ctx, "np", "%d", n);
    if (isfinite(worst[AR_MPI])) {
        bench_kv_print(&ctx, "ratio_vs_mpi_allreduce_min_ge_1MiB", "%.3f", worst[AR_MPI]);
        bench_kv_print(&ctx, "ratio_ring_vs_mpi_min_ge_1MiB", "%.3f", worst[AR_RING]);
        bench_kv_print(&ctx, "ratio_butterfly_vs_mpi_min_ge_1MiB", "%.3f", worst[AR_BUTTERFLY]);
    }
    free(ref);
    free(s.recv);
    free(s.send);
    bench_ctx_fini(&ctx);
    return 0;
}
