/* Benchmark gpu-setup: getting a group of GPU ranks ready for their first collective, gfc against
 * NCCL, on the GPUs of this machine (GF-DiT's comparison: 778 ms for an NCCL communicator, about
 * 60 us for its groups).
 *
 * NCCL refuses two ranks of one communicator on the same GPU, so the NCCL side runs over the
 * first G ranks, G = min(ranks, GPUs), each on its own GPU (local rank mod visible devices); on
 * one GPU that is a communicator of one rank. The same rank list is measured with gfc, and gfc
 * again over every rank of the job, which it can do whether or not they share a GPU.
 *
 *   nccl init:  ncclGetUniqueId on rank 0, its broadcast, ncclCommInitRank, then a first
 *               1-float ncclAllReduce and a stream synchronize (a communicator is ready when it
 *               has carried something); ncclCommDestroy is timed apart
 *   nccl split: ncclCommSplit of a communicator over the same G ranks (color 0, key = rank),
 *               then the same first all-reduce; destroyed after, untimed
 *   gfc:        gfc_group_init with a namespace never used before, then gfc_barrier, as
 *               bench/gfc_setup.c's "new group"
 *
 * A sample's time is the slowest rank's; a measurement's time is the median over samples, the
 * kinds interleaved in rotating order. The first NCCL communicator of the process (NCCL's own
 * start-up) is reported apart and not in the medians. Without a visible GPU the program says so
 * and exits 0 having measured nothing. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "mpi/bench_mpi.h"

enum {
    GS_NCCL_INIT = 0, /* unique id + broadcast + ncclCommInitRank + first all-reduce */
    GS_NCCL_SPLIT,    /* ncclCommSplit + first all-reduce */
    GS_GFC_NEW,       /* gfc_group_init + first gfc_barrier, the NCCL ranks */
    GS_GFC_WORLD,     /* the same over every rank */
    GS_COUNT
};

static const char *const gs_names[GS_COUNT] = {"ncclCommInitRank", "ncclCommSplit", "gfc new group",
                                               "gfc new group (all ranks)"};

typedef struct {
    bench_ctx_t *ctx;
    int gpus;    /* devices this rank sees */
    int nccl_n;  /* ranks in the NCCL communicators: one per GPU */
    bool member; /* this rank is one of the first nccl_n */
    int *ranks;  /* 0 .. nccl_n - 1 as a gfc group list */
    cudaStream_t stream;
    float *d_one;      /* the first all-reduce's one float */
    ncclComm_t parent; /* over the nccl_n ranks, for ncclCommSplit */
    uint64_t next_ns;  /* gfc namespaces of the timed groups: never reused, and the same
                        * sequence on every rank (each takes one per operation, member or not) */
    uint64_t form_ns;  /* namespaces of the groups only formed, never used to communicate */
    double destroy_ns; /* summed ncclCommDestroy time of this rank, and how many */
    int destroys;
} gs_t;

static void gs_check_cuda(const bench_ctx_t *ctx, cudaError_t err, const char *what)
{
    if (err != cudaSuccess)
        bench_check(ctx, tdl_error_raise(TDL_ERR_CUDA, "%s", cudaGetErrorString(err)), what);
}

static void gs_check_nccl(const bench_ctx_t *ctx, ncclResult_t r, const char *what)
{
    if (r != ncclSuccess)
        bench_check(ctx,
                    tdl_error_raise(TDL_ERR_CUDA, "NCCL: %s (%s)", ncclGetErrorString(r),
                                    ncclGetLastError(NULL)),
                    what);
}

/* The first collective on a new communicator, finished. */
static void gs_first_allreduce(gs_t *s, ncclComm_t comm)
{
    gs_check_nccl(s->ctx, ncclAllReduce(s->d_one, s->d_one, 1, ncclFloat, ncclSum, comm, s->stream),
                  "ncclAllReduce");
    gs_check_cuda(s->ctx, cudaStreamSynchronize(s->stream), "cudaStreamSynchronize");
}

/* A communicator over the nccl_n ranks, from a unique id broadcast over the world (every rank
 * takes part in the broadcast; only members create). *comm_out is NULL on the others. */
static void gs_nccl_init(gs_t *s, ncclComm_t *comm_out)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (s->ctx->boot.rank == 0)
        gs_check_nccl(s->ctx, ncclGetUniqueId(&id), "ncclGetUniqueId");
    bench_check(s->ctx, bench_mpi_bcast(&id, sizeof(id), 0), "broadcast of the NCCL unique id");
    *comm_out = NULL;
    if (s->member)
        gs_check_nccl(s->ctx, ncclCommInitRank(comm_out, s->nccl_n, id, s->ctx->boot.rank),
                      "ncclCommInitRank");
}

static void gs_nccl_destroy(gs_t *s, ncclComm_t comm)
{
    uint64_t t0 = tdl_clock_ns();
    gs_check_nccl(s->ctx, ncclCommDestroy(comm), "ncclCommDestroy");
    s->destroy_ns += (double)(tdl_clock_ns() - t0);
    s->destroys++;
}

/* One sample of measurement m: `reps` operations back to back; this rank's ns per operation
 * (0 on a rank outside the measured list). */
static double gs_sample(bench_ctx_t *ctx, void *arg, int m, int reps)
{
    gs_t *s = arg;
    uint64_t ns = 0;
    for (int r = 0; r < reps; r++) {
        ncclComm_t comm = NULL;
        gfc_group_t g;
        uint64_t ns_op = s->next_ns++;
        uint64_t t0 = tdl_clock_ns();
        switch (m) {
        case GS_NCCL_INIT:
            gs_nccl_init(s, &comm);
            if (s->member)
                gs_first_allreduce(s, comm);
            break;
        case GS_NCCL_SPLIT:
            if (s->member) {
                gs_check_nccl(ctx, ncclCommSplit(s->parent, 0, ctx->boot.rank, &comm, NULL),
                              "ncclCommSplit");
                gs_first_allreduce(s, comm);
            }
            break;
        case GS_GFC_NEW:
            if (s->member) {
                bench_check(ctx, gfc_group_init(&g, ctx->rt, s->ranks, s->nccl_n, ns_op),
                            "gfc_group_init");
                bench_check(ctx, gfc_barrier(&g), "gfc_barrier (new group)");
            }
            break;
        case GS_GFC_WORLD:
            bench_check(ctx, gfc_group_init(&g, ctx->rt, ctx->world_ranks, ctx->boot.size, ns_op),
                        "gfc_group_init");
            bench_check(ctx, gfc_barrier(&g), "gfc_barrier (new group, all ranks)");
            break;
        }
        ns += s->member || m == GS_GFC_WORLD ? tdl_clock_ns() - t0 : 0;
        if (comm != NULL)
            gs_nccl_destroy(s, comm);
    }
    return (double)ns / reps;
}

/* Per-call nanoseconds of gfc_group_init over the NCCL ranks: this rank's median batch (0 on a
 * rank outside them, which cannot form their group). */
static double gs_form_ns(gs_t *s)
{
    enum { BATCH = 2000, BATCHES = 51 };
    double per_call[BATCHES];
    volatile uint64_t sink = 0;
    if (!s->member)
        return 0;
    for (int b = 0; b < BATCHES; b++) {
        gfc_group_t g;
        tdl_status_t st = TDL_OK;
        uint64_t t0 = tdl_clock_ns();
        for (int i = 0; i < BATCH; i++) {
            tdl_status_t r = gfc_group_init(&g, s->ctx->rt, s->ranks, s->nccl_n, s->form_ns++);
            st = r != TDL_OK ? r : st;
            sink ^= g.id;
        }
        per_call[b] = (double)(tdl_clock_ns() - t0) / BATCH;
        bench_check(s->ctx, st, "gfc_group_init");
    }
    (void)sink;
    return tdl_median(per_call, BATCHES);
}

/* Takes `iters` samples of the measurements in `which` (count of them), interleaved in rotating
 * order, each after a world barrier; out[k * iters + i] is the slowest rank's ns per operation. */
static void gs_samples(gs_t *s, const int *which, int count, int iters, const int *reps,
                       double *out)
{
    for (int i = 0; i < iters; i++)
        for (int j = 0; j < count; j++) {
            int k = (i + j) % count;
            bench_check(s->ctx, bench_mpi_barrier(), "MPI_Barrier");
            double t = gs_sample(s->ctx, s, which[k], reps[k]);
            bench_check(s->ctx, bench_mpi_max_f64(&t, 1), "max over ranks");
            out[k * iters + i] = t;
        }
}

int main(int argc, char **argv)
{
    const bench_args_t defaults = {.iters = 11, .reps = 0, .warmup = 2, .seed = 1};
    bench_ctx_t ctx;
    bench_ctx_init(&ctx, "gpu-setup", &argc, &argv, &defaults);
    bench_args_t *a = &ctx.args;
    if (a->quick && a->iters == defaults.iters)
        a->iters = 5;
    int n = ctx.boot.size;

    /* Every rank must see a GPU; otherwise nothing is measured, on every rank alike. */
    gs_t s = {.ctx = &ctx, .next_ns = 1ULL << 40, .form_ns = 1ULL << 50};
    cudaError_t err = cudaGetDeviceCount(&s.gpus);
    if (err != cudaSuccess)
        s.gpus = 0;
    double min_gpus = s.gpus;
    bench_check(&ctx, bench_mpi_min_f64(&min_gpus, 1), "min over ranks");
    if (min_gpus < 1) {
        bench_log(&ctx,
                  "gpu-setup: no GPU visible to every rank (cudaGetDeviceCount: %s): "
                  "nothing measured",
                  err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
        bench_kv_print(&ctx, "gpus", "0");
        bench_ctx_fini(&ctx);
        return 0;
    }
    int dev = ctx.boot.local_rank % s.gpus;
    gs_check_cuda(&ctx, cudaSetDevice(dev), "cudaSetDevice");
    gs_check_cuda(&ctx, cudaFree(NULL), "CUDA context"); /* the context, before any timing */
    gs_check_cuda(&ctx, cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
                  "cudaStreamCreate");
    gs_check_cuda(&ctx, cudaMalloc((void **)&s.d_one, sizeof(float)), "cudaMalloc");
    gs_check_cuda(&ctx, cudaMemset(s.d_one, 0, sizeof(float)), "cudaMemset");
    /* One rank per GPU on one node: the first `gpus` ranks. Several nodes are not this
     * benchmark's case (it measures "the GPUs present"). */
    s.nccl_n = n < s.gpus ? n : s.gpus;
    s.member = ctx.boot.rank < s.nccl_n;
    s.ranks = calloc((size_t)s.nccl_n, sizeof(int));
    if (s.ranks == NULL)
        bench_check(&ctx, TDL_ERR_NOMEM, "rank list");
    for (int i = 0; i < s.nccl_n; i++)
        s.ranks[i] = i;
    struct cudaDeviceProp prop;
    gs_check_cuda(&ctx, cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    for (char *c = prop.name; *c; c++)
        if (*c == ' ' || *c == ',')
            *c = '_';
    int nccl_version = 0;
    gs_check_nccl(&ctx, ncclGetVersion(&nccl_version), "ncclGetVersion");
    bench_log(&ctx, "# np=%d: %d GPU(s) per rank (%s), NCCL %d over ranks 0..%d, one per GPU", n,
              s.gpus, prop.name, nccl_version, s.nccl_n - 1);

    /* NCCL's first communicator in the process: its one-time start-up; then the parent of the
     * splits, kept. gfc's first barrier connects the peers, once per process. */
    bench_check(&ctx, bench_mpi_barrier(), "MPI_Barrier");
    uint64_t t0 = tdl_clock_ns();
    ncclComm_t first = NULL;
    gs_nccl_init(&s, &first);
    if (s.member)
        gs_first_allreduce(&s, first);
    double first_ns = (double)(tdl_clock_ns() - t0);
    bench_check(&ctx, bench_mpi_max_f64(&first_ns, 1), "max over ranks");
    if (first != NULL)
        gs_check_nccl(&ctx, ncclCommDestroy(first), "ncclCommDestroy");
    gs_nccl_init(&s, &s.parent);
    gfc_group_t warm;
    bench_check(&ctx, gfc_group_init(&warm, ctx.rt, ctx.world_ranks, n, 1), "gfc_group_init");
    bench_check(&ctx, gfc_barrier(&warm), "first gfc_barrier");

    double form = gs_form_ns(&s);
    bench_check(&ctx, bench_mpi_max_f64(&form, 1), "max over ranks");

    /* NCCL operations take milliseconds, gfc's microseconds: one NCCL operation per sample,
     * many gfc ones, and more gfc samples. */
    int gfc_reps = a->reps ? a->reps : 20, gfc_iters = a->quick ? 21 : 101;
    const int nccl_which[] = {GS_NCCL_INIT, GS_NCCL_SPLIT}, nccl_reps[] = {1, 1};
    const int gfc_which[] = {GS_GFC_NEW, GS_GFC_WORLD}, gfc_reps2[] = {gfc_reps, gfc_reps};
    double *warm_out = malloc(sizeof(double) * 2 * (size_t)TDL_MAX(a->warmup, 1));
    double *nccl = malloc(sizeof(double) * 2 * (size_t)a->iters);
    double *gfc = malloc(sizeof(double) * 2 * (size_t)gfc_iters);
    if (warm_out == NULL || nccl == NULL || gfc == NULL)
        bench_check(&ctx, TDL_ERR_NOMEM, "samples");
    gs_samples(&s, nccl_which, 2, TDL_MAX(a->warmup, 1), nccl_reps, warm_out);
    gs_samples(&s, gfc_which, 2, TDL_MAX(a->warmup, 1), nccl_reps, warm_out);
    s.destroy_ns = 0;
    s.destroys = 0;
    gs_samples(&s, nccl_which, 2, a->iters, nccl_reps, nccl);
    gs_samples(&s, gfc_which, 2, gfc_iters, gfc_reps2, gfc);

    double med[GS_COUNT], min[GS_COUNT];
    for (int m = 0; m < GS_COUNT; m++) {
        const double *v = m < GS_GFC_NEW ? nccl + m * a->iters : gfc + (m - GS_GFC_NEW) * gfc_iters;
        int cnt = m < GS_GFC_NEW ? a->iters : gfc_iters;
        med[m] = tdl_median(v, (size_t)cnt) / 1e3;
        min[m] = bench_stats_min(v, (size_t)cnt) / 1e3;
        bench_log(&ctx, "# np=%d %-26s median %12.2f us  min %12.2f us", n, gs_names[m], med[m],
                  min[m]);
    }
    double destroy = s.destroys ? s.destroy_ns / s.destroys : 0;
    bench_check(&ctx, bench_mpi_max_f64(&destroy, 1), "max over ranks");
    double vs_init = med[GS_GFC_NEW] > 0 ? med[GS_NCCL_INIT] / med[GS_GFC_NEW] : 0;
    double vs_split = med[GS_GFC_NEW] > 0 ? med[GS_NCCL_SPLIT] / med[GS_GFC_NEW] : 0;

    bench_csv_header(&ctx, "np,gpus,nccl_ranks,gpu,nccl_version,nccl_iters,gfc_iters,gfc_reps,"
                           "form_ns,gfc_new_group_us,gfc_new_group_all_us,nccl_first_init_ms,"
                           "nccl_init_us,nccl_split_us,nccl_destroy_us,gfc_new_group_min_us,"
                           "nccl_init_min_us,nccl_split_min_us,speedup_vs_nccl_init,"
                           "speedup_vs_nccl_split");
    bench_csv_row(&ctx,
                  "%d,%d,%d,%s,%d,%d,%d,%d,%.1f,%.3f,%.3f,%.2f,%.1f,%.1f,%.1f,%.3f,%.1f,%.1f,"
                  "%.1f,%.1f",
                  n, s.gpus, s.nccl_n, prop.name, nccl_version, a->iters, gfc_iters, gfc_reps, form,
                  med[GS_GFC_NEW], med[GS_GFC_WORLD], first_ns / 1e6, med[GS_NCCL_INIT],
                  med[GS_NCCL_SPLIT], destroy / 1e3, min[GS_GFC_NEW], min[GS_NCCL_INIT],
                  min[GS_NCCL_SPLIT], vs_init, vs_split);
    bench_kv_print(&ctx, "np", "%d", n);
    bench_kv_print(&ctx, "nccl_ranks", "%d", s.nccl_n);
    bench_kv_print(&ctx, "nccl_init_us", "%.1f", med[GS_NCCL_INIT]);
    bench_kv_print(&ctx, "gfc_new_group_us", "%.3f", med[GS_GFC_NEW]);
    bench_kv_print(&ctx, "speedup_vs_nccl_init", "%.1f", vs_init);
    bench_kv_print(&ctx, "speedup_vs_nccl_split", "%.1f", vs_split);

    free(warm_out);
    free(nccl);
    free(gfc);
    if (s.parent != NULL)
        gs_check_nccl(&ctx, ncclCommDestroy(s.parent), "ncclCommDestroy");
    cudaFree(s.d_one);
    cudaStreamDestroy(s.stream);
    free(s.ranks);
    bench_ctx_fini(&ctx);
    return 0;
}
