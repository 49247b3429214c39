/* Benchmark serve-steps: the time of one denoising step (one forward of the DiT on one image)
 * by resolution and sequence-parallel degree, like GF-DiT's per-stage cost table. For degree P
 * the first P ranks form a gfc group and run dit_sp_forward; the others wait at the barrier.
 * Samples are interleaved over the degrees (bench_samples_interleave), slowest member, median.
 * Rows: model,res,tokens,sp,np,step_ms,min_ms,speedup_vs_sp1. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "dit/dit.h"
#include "serve/serve.h"

typedef struct steps_state {
    dit_model_t *model;
    int side, degrees[8], ndeg;
    gfc_group_t groups[8];
    float *x, *out, t[1];
    int y[1];
} steps_state_t;

static double steps_sample(bench_ctx_t *ctx, void *arg, int m, int reps)
{
    steps_state_t *s = arg;
    int P = s->degrees[m];
    if (ctx->boot.rank >= P)
        return 0; /* not a member: the barrier after the sample waits for the members */
    dit_sp_comm_t comm;
    serve_sp_comm(&comm, &s->groups[m]);
    uint64_t t0 = tdl_clock_ns();
    for (int r = 0; r < reps; r++)
        bench_check(ctx, dit_sp_forward(s->model, &comm, s->x, s->t, s->y, 1, s->side, s->side,
                                        s->out),
                    "sequence-parallel forward");
    return (double)(tdl_clock_ns() - t0) / reps;
}

int main(int argc, char **argv)
{
    bench_ctx_t ctx;
    bench_args_t defaults = {.iters = 7, .reps = 1, .seed = 1};
    bench_ctx_init(&ctx, "serve-steps", &argc, &argv, &defaults);
    const char *name = "fmnist";
    dit_config_t cfg;
    bench_check(&ctx, dit_config_named(name, &cfg), "model");
    steps_state_t s = {.t = {0.5f}, .y = {3}};
    bench_check(&ctx, dit_model_create(&cfg, 1, 128, &s.model), "model");
    dit_model_init_weights(s.model, 1);
    tdl_rng_t rng;
    tdl_rng_init(&rng, 9, 9); /* random weights everywhere: the cost does not depend on them */
    for (size_t i = 0; i < s.model->num_params; i++)
        s.model->params[i] = 0.05f * tdl_rng_normal(&rng);
    for (int P = 1; P <= ctx.boot.size && s.ndeg < 8; P *= 2)
        s.degrees[s.ndeg++] = P;
    for (int m = 0; m < s.ndeg; m++) /* members only: forming a group sends nothing */
        if (ctx.boot.rank < s.degrees[m])
            bench_check(&ctx, gfc_group_init(&s.groups[m], ctx.rt, ctx.world_ranks,
                                             s.degrees[m], 0x73746570ull + (uint64_t)m),
                        "group");
    bench_csv_header(&ctx, "model,res,tokens,sp,np,step_ms,min_ms,speedup_vs_sp1");
    static const int sides[] = {32, 64, 128};
    int iters = ctx.args.quick ? 3 : ctx.args.iters;
    for (size_t si = 0; si < TDL_ARRAY_SIZE(sides); si++) {
        s.side = sides[si];
        size_t n = (size_t)cfg.in_channels * s.side * s.side;
        s.x = bench_buf_alloc(&ctx, n * sizeof(float));
        s.out = bench_buf_alloc(&ctx, n * sizeof(float));
        tdl_rng_init(&rng, ctx.args.seed, (uint64_t)s.side);
        tdl_rng_fill_normal(&rng, s.x, n);
        int reps[8];
        for (int m = 0; m < s.ndeg; m++)
            reps[m] = s.side <= 32 ? 5 : 1;
        double *samples = malloc((size_t)s.ndeg * iters * sizeof(double));
        bench_samples_interleave(&ctx, s.ndeg, iters, reps, steps_sample, &s, samples);
        double sp1 = tdl_median(samples, (size_t)iters);
        int tokens = (s.side / cfg.patch_size) * (s.side / cfg.patch_size);
        for (int m = 0; m < s.ndeg; m++) {
            double med = tdl_median(samples + (size_t)m * iters, (size_t)iters);
            double mn = bench_stats_min(samples + (size_t)m * iters, (size_t)iters);
            bench_csv_row(&ctx, "%s,%d,%d,%d,%d,%.4f,%.4f,%.3f", name, s.side, tokens,
                          s.degrees[m], ctx.boot.size, med / 1e6, mn / 1e6, sp1 / med);
            bench_log(&ctx, "%3dx%-3d (%4d tokens) SP%d: %8.2f ms per step (x%.2f vs SP1)",
                      s.side, s.side, tokens, s.degrees[m], med / 1e6, sp1 / med);
        }
        free(samples);
        free(s.x), free(s.out);
    }
    dit_model_free(s.model);
    bench_ctx_fini(&ctx);
    return 0;
}
