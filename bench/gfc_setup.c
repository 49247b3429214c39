/* Benchmark gfc-setup: what it costs to get a group of ranks ready to talk, per request.
 *
 * gfc: forming a group value (gfc_group_init) alone; a warm group's barrier; a new group's first
 * barrier, where every barrier runs on a freshly formed value with a namespace never used
 * before, as a serving rank does for every task. MPI: MPI_Comm_split, and MPI_Group_incl +
 * MPI_Comm_create_group, each followed by the same barrier and MPI_Comm_free. The group is the
 * whole world; bench/run runs this at 2, 4 and 8 ranks.
 *
 * Every timed sample is `reps` operations back to back after a world barrier, the four
 * measurements interleaved in rotating order so that noise from an oversubscribed machine falls
 * on all of them alike; a sample's time is the slowest rank's, and a measurement's is the
 * median over samples. */
#include "config.h"

#include <stdlib.h>

#include "bench/bench_common.h"
#include "mpi/bench_mpi.h"

enum {
    SETUP_WARM = 0, /* gfc_barrier on one group value, again and again */
    SETUP_NEW,      /* gfc_group_init with a new namespace, then gfc_barrier */
    SETUP_SPLIT,    /* MPI_Comm_split + MPI_Barrier + MPI_Comm_free */
    SETUP_CREATE,   /* MPI_Group_incl + MPI_Comm_create_group + MPI_Barrier + MPI_Comm_free */
    SETUP_COUNT
};

static const char *const setup_names[SETUP_COUNT] = {"gfc warm barrier", "gfc new group barrier",
                                                     "MPI_Comm_split", "MPI_Comm_create_group"};

/* Forming is local and costs tens of nanoseconds: batches short against a scheduler slice, so
 * that the median batch of each rank ran undisturbed even with 4 ranks per core. */
#define SETUP_FORM_BATCH   2000
#define SETUP_FORM_BATCHES 101

/* Namespaces of the "new" groups: never reused within a run, as a serving coordinator's task
 * ids would not be. */
static uint64_t setup_next_ns = 1ULL << 40;

/* Per-call nanoseconds of gfc_group_init over the world: this rank's median batch. */
static double setup_form_ns(bench_ctx_t *ctx)
{
    int n = ctx->boot.size;
    double per_call[SETUP_FORM_BATCHES];
    volatile uint64_t sink = 0; /* keeps the calls' results observable */
    gfc_group_t g;
    for (int b = 0; b < SETUP_FORM_BATCHES; b++) {
        tdl_status_t st = TDL_OK;
        uint64_t t0 = tdl_clock_ns();
        for (int i = 0; i < SETUP_FORM_BATCH; i++) {
            tdl_status_t s = gfc_group_init(&g, ctx->rt, ctx->world_ranks, n, setup_next_ns++);
            st = s != TDL_OK ? s : st;
            sink ^= g.id;
        }
        uint64_t t1 = tdl_clock_ns();
        bench_check(ctx, st, "gfc_group_init");
        per_call[b] = (double)(t1 - t0) / SETUP_FORM_BATCH;
    }
    (void)sink;
    return tdl_median(per_call, SETUP_FORM_BATCHES);
}

/* Runs `reps` operations of kind m back to back; returns this rank's nanoseconds per op. */
static double setup_sample(bench_ctx_t *ctx, void *arg, int m, int reps)
{
    gfc_group_t *warm = arg;
    int n = ctx->boot.size;
    uint64_t t0 = tdl_clock_ns(), ns = 0;
    switch (m) {
    case SETUP_WARM:
        for (int r = 0; r < reps; r++)
            bench_check(ctx, gfc_barrier(warm), "gfc_barrier (warm group)");
        ns = tdl_clock_ns() - t0;
        break;
    case SETUP_NEW:
        for (int r = 0; r < reps; r++) {
            gfc_group_t g;
            bench_check(ctx, gfc_group_init(&g, ctx->rt, ctx->world_ranks, n, setup_next_ns++),
                        "gfc_group_init");
            bench_check(ctx, gfc_barrier(&g), "gfc_barrier (new group)");
        }
        ns = tdl_clock_ns() - t0;
        break;
    case SETUP_SPLIT:
        bench_check(
            ctx, bench_mpi_setup_time(BENCH_MPI_SETUP_COMM_SPLIT, ctx->world_ranks, n, reps, &ns),
            "MPI_Comm_split baseline");
        break;
    case SETUP_CREATE:
        bench_check(
            ctx,
            bench_mpi_setup_time(BENCH_MPI_SETUP_COMM_CREATE_GROUP, ctx->world_ranks, n, reps, &ns),
            "MPI_Comm_create_group baseline");
        break;
    }
    return (double)ns / reps;
}

int main(int argc, char **argv)
{
    const bench_args_t defaults = {.iters = 101, .reps = 0, .warmup = 20, .seed = 1};
    bench_ctx_t ctx;
    bench_ctx_init(&ctx, "gfc-setup", &argc, &argv, &defaults);
    bench_args_t *a = &ctx.args;
    if (a->quick && a->iters == defaults.iters)
        a->iters = 21;
    int n = ctx.boot.size;
    /* gfc operations are microseconds, MPI communicator creation tens of them and more: fewer
     * MPI operations per sample keep the two sides' shares of the run comparable. */
    int gfc_reps = a->reps ? a->reps : (a->quick ? 20 : 50);
    int mpi_reps = a->reps ? a->reps : (a->quick ? 5 : 10);

    /* The very first barrier on a fresh runtime: it pays for connecting to the peers, once per
     * process lifetime; reported, not part of the targets. */
    gfc_group_t warm;
    bench_check(&ctx, gfc_group_init(&warm, ctx.rt, ctx.world_ranks, n, 1), "gfc_group_init");
    bench_check(&ctx, bench_mpi_barrier(), "MPI_Barrier");
    uint64_t t0 = tdl_clock_ns();
    bench_check(&ctx, gfc_barrier(&warm), "first gfc_barrier");
    double first_contact = (double)(tdl_clock_ns() - t0);
    bench_check(&ctx, bench_mpi_max_f64(&first_contact, 1), "max over ranks");

    bench_check(&ctx, bench_mpi_barrier(), "MPI_Barrier");
    double form = setup_form_ns(&ctx);
    bench_check(&ctx, bench_mpi_max_f64(&form, 1), "max over ranks");

    for (int m = 0; m < SETUP_COUNT; m++)
        setup_sample(&ctx, &warm, m, m >= SETUP_SPLIT ? TDL_MAX(1, a->warmup / 4) : a->warmup);

    int iters = a->iters;
    const int reps[SETUP_COUNT] = {gfc_reps, gfc_reps, mpi_reps, mpi_reps};
    double *samples = malloc((size_t)SETUP_COUNT * (size_t)iters * sizeof(double));
    if (samples == NULL)
        bench_check(&ctx, TDL_ERR_NOMEM, "samples");
    bench_samples_interleave(&ctx, SETUP_COUNT, iters, reps, setup_sample, &warm, samples);

    double med[SETUP_COUNT], min[SETUP_COUNT];
    for (int m = 0; m < SETUP_COUNT; m++) {
        med[m] = tdl_median(samples + m * iters, iters) / 1e3;
        min[m] = bench_stats_min(samples + m * iters, iters) / 1e3;
        bench_log(&ctx, "# np=%d %-24s median %10.2f us  min %10.2f us", n, setup_names[m], med[m],
                  min[m]);
    }
    free(samples);
    double over_warm = med[SETUP_NEW] / med[SETUP_WARM];
    double vs_split = med[SETUP_SPLIT] / med[SETUP_NEW];
    double vs_create = med[SETUP_CREATE] / med[SETUP_NEW];

    bench_csv_header(&ctx, "np,iters,gfc_reps,mpi_reps,form_ns,first_contact_us,warm_barrier_us,"
                           "new_group_barrier_us,comm_split_us,comm_create_group_us,"
                           "warm_barrier_min_us,new_group_barrier_min_us,comm_split_min_us,"
                           "comm_create_group_min_us,first_barrier_over_warm,"
                           "speedup_vs_comm_split,speedup_vs_comm_create_group");
    bench_csv_row(
        &ctx, "%d,%d,%d,%d,%.1f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.2f", n,
        iters, gfc_reps, mpi_reps, form, first_contact / 1e3, med[SETUP_WARM], med[SETUP_NEW],
        med[SETUP_SPLIT], med[SETUP_CREATE], min[SETUP_WARM], min[SETUP_NEW], min[SETUP_SPLIT],
        min[SETUP_CREATE], over_warm, vs_split, vs_create);
    bench_kv_print(&ctx, "np", "%d", n);
    bench_kv_print(&ctx, "form_us", "%.4f", form / 1e3);
    bench_kv_print(&ctx, "first_contact_us", "%.2f", first_contact / 1e3);
    bench_kv_print(&ctx, "first_barrier_over_warm", "%.3f", over_warm);
    bench_kv_print(&ctx, "speedup_vs_comm_split", "%.2f", vs_split);
    bench_kv_print(&ctx, "speedup_vs_comm_create_group", "%.2f", vs_create);
    bench_ctx_fini(&ctx);
    return 0;
}
