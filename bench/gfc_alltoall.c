/* Benchmark gfc-alltoall: bus bandwidth of gfc_alltoall against MPI_Alltoall over the world,
 * from 4 KiB to 256 MiB per rank. bench/run runs it at 2 and 4 ranks.
 *
 * `bytes` is what each rank sends in all (bytes / n to each member, itself included), as in
 * nccl-tests; busbw = (n - 1) / n * bytes / time, the part that crosses links. Samples are
 * taken as in gfc-allreduce: back-to-back calls after a world barrier, the slowest rank,
 * gfc and MPI interleaved, medians. Before the timing, gfc's result is checked once per size
 * byte for byte against the expected pattern (and so against MPI's, which is checked too). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "mpi/bench_mpi.h"

enum { A2A_MPI = 0, A2A_GFC, A2A_COUNT };

static const char *const a2a_names[A2A_COUNT] = {"MPI_Alltoall", "gfc_alltoall"};

typedef struct a2a_state {
    gfc_group_t group;
    unsigned char *send, *recv;
    size_t per_peer; /* bytes to each member */
} a2a_state_t;

/* Byte i of the block that rank `from` sends to rank `to`: different for every (from, to) and
 * not periodic in any power of two, so a misplaced block or chunk shows. */
static unsigned char a2a_byte(int from, int to, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ULL + (uint64_t)from * 0x632be59bd9b4e019ULL +
                 (uint64_t)to * 0x85ebca6bULL;
    return (unsigned char)((x >> 56) ^ (x >> 29));
}

static void a2a_fill(unsigned char *send, size_t per_peer, int me, int n)
{
    for (int to = 0; to < n; to++)
        for (size_t i = 0; i < per_peer; i++)
            send[(size_t)to * per_peer + i] = a2a_byte(me, to, i);
}

static tdl_status_t a2a_run(a2a_state_t *s, int m)
{
    if (m == A2A_MPI)
        return bench_mpi_alltoall(s->send, s->recv, s->per_peer);
    return gfc_alltoall(&s->group, s->send, s->recv, s->per_peer, GFC_DT_BYTE);
}

static double a2a_sample(bench_ctx_t *ctx, void *arg, int m, int reps)
{
    a2a_state_t *s = arg;
    uint64_t ns;
    if (m == A2A_MPI) {
        bench_check(ctx, bench_mpi_alltoall_time(s->send, s->recv, s->per_peer, reps, &ns),
                    "MPI_Alltoall");
    } else {
        uint64_t t0 = tdl_clock_ns();
        for (int r = 0; r < reps; r++)
            bench_check(ctx, a2a_run(s, m), a2a_names[m]);
        ns = tdl_clock_ns() - t0;
    }
    return (double)ns / reps;
}

/* Whether side m delivers every block where it belongs, on every rank. */
static bool a2a_verify(bench_ctx_t *ctx, a2a_state_t *s, int m)
{
    int n = ctx->boot.size, me = ctx->boot.rank;
    memset(s->recv, 0, s->per_peer * (size_t)n);
    bench_check(ctx, a2a_run(s, m), a2a_names[m]);
    int64_t bad = 0;
    for (int from = 0; from < n; from++) {
        const unsigned char *block = s->recv + (size_t)from * s->per_peer;
        for (size_t i = 0; i < s->per_peer; i++) {
            if (block[i] != a2a_byte(from, me, i)) {
                if (bad == 0)
                    fprintf(stderr,
                            "gfc-alltoall: rank %d: %s: byte %zu of the block from %d "
                            "is %u, expected %u\n",
                            me, a2a_names[m], i, from, block[i], a2a_byte(from, me, i));
                bad++;
            }
        }
    }
    bench_check(ctx, bench_mpi_sum_i64(&bad, 1), "verification count");
    if (bad != 0) {
        char sz[32];
        bench_log(ctx, "# np=%d %s %s: VERIFY FAILED (%lld bytes wrong)", n,
                  bench_size_format(s->per_peer * (size_t)n, sz, sizeof(sz)), a2a_names[m],
                  (long long)bad);
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
    bench_ctx_init(&ctx, "gfc-alltoall", &argc, &argv, &defaults);
    bench_args_t *a = &ctx.args;
    if (a->quick && a->max_bytes == defaults.max_bytes)
        a->max_bytes = (size_t)16 << 20;
    int n = ctx.boot.size;

    a2a_state_t s = {0};
    bench_check(&ctx, gfc_group_init(&s.group, ctx.rt, ctx.world_ranks, n, 1), "gfc_group_init");
    s.send = bench_buf_alloc(&ctx, a->max_bytes);
    s.recv = bench_buf_alloc(&ctx, a->max_bytes);

    bench_csv_header(&ctx, "np,bytes,iters,reps,mpi_us,gfc_us,mpi_min_us,gfc_min_us,"
                           "mpi_busbw_gbs,gfc_busbw_gbs,ratio,mpi_ok,gfc_ok");
    double worst = INFINITY;
    double factor = n > 1 ? (double)(n - 1) / n : 1.0;
    for (size_t bytes = a->min_bytes; bytes <= a->max_bytes && bytes > 0;
         bytes *= (size_t)a->size_factor) {
        s.per_peer = bytes / (size_t)n;
        if (s.per_peer == 0)
            continue;
        size_t real_bytes = s.per_peer * (size_t)n;
        int iters = bench_iters_for_size(&ctx, real_bytes);
        int reps = bench_reps_for_size(&ctx, real_bytes);

        a2a_fill(s.send, s.per_peer, ctx.boot.rank, n);
        bool ok[A2A_COUNT];
        for (int m = 0; m < A2A_COUNT; m++)
            ok[m] = a2a_verify(&ctx, &s, m);

        const int reps_all[A2A_COUNT] = {reps, reps};
        double *samples = malloc((size_t)A2A_COUNT * (size_t)iters * sizeof(double));
        if (samples == NULL)
            bench_check(&ctx, TDL_ERR_NOMEM, "samples");
        for (int w = 0; w < a->warmup; w++)
            for (int m = 0; m < A2A_COUNT; m++)
                a2a_sample(&ctx, &s, m, reps);
        bench_samples_interleave(&ctx, A2A_COUNT, iters, reps_all, a2a_sample, &s, samples);

        double med[A2A_COUNT], min[A2A_COUNT], busbw[A2A_COUNT];
        for (int m = 0; m < A2A_COUNT; m++) {
            med[m] = tdl_median(samples + m * iters, iters);
            min[m] = bench_stats_min(samples + m * iters, iters);
            busbw[m] = factor * (double)real_bytes / med[m];
        }
        free(samples);
        double ratio = ok[A2A_GFC] ? med[A2A_MPI] / med[A2A_GFC] : 0.0;
        if (real_bytes >= ((size_t)1 << 20))
            worst = TDL_MIN(worst, ratio);
        char sz[32];
        bench_log(&ctx, "# np=%d %8s  busbw GB/s: mpi %7.3f gfc %7.3f  ratio %.3f", n,
                  bench_size_format(real_bytes, sz, sizeof(sz)), busbw[A2A_MPI], busbw[A2A_GFC],
                  ratio);
        bench_csv_row(&ctx, "%d,%zu,%d,%d,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%d,%d", n, real_bytes,
                      iters, reps, med[A2A_MPI] / 1e3, med[A2A_GFC] / 1e3, min[A2A_MPI] / 1e3,
                      min[A2A_GFC] / 1e3, busbw[A2A_MPI], busbw[A2A_GFC], ratio, ok[A2A_MPI],
                      ok[A2A_GFC]);
    }

    bench_kv_print(&ctx, "np", "%d", n);
    if (isfinite(worst))
        bench_kv_print(&ctx, "ratio_vs_mpi_alltoall_min_ge_1MiB", "%.3f", worst);
    free(s.recv);
    free(s.send);
    bench_ctx_fini(&ctx);
    return 0;
}
