/* `tidal profile`: the cost model of serving, measured on the machine at hand. Under mpirun
 * with N ranks, for every degree P (1, 2, 4, ... up to N) and resolution the model takes, the
 * first P ranks time one image's PREPARE (noise), one denoising step (the sequence-parallel
 * forward over a gfc group) and DECODE (the PNG); each (stage, degree) gets the least-squares
 * fit a x^2 + b x + c in tokens, with its largest relative error printed, and the state
 * migration between two ranks gets a latency and a bandwidth. Written as the JSON of
 * doc/scheduler.md, which tidal sim and the scheduler read. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "coord/cost.h"
#include "dit/dit.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"
#include "serve/serve.h"

static const tdl_param_def_t profile_params[] = {
    {"model", TDL_PARAM_STRING, "fmnist", "DiT configuration to profile (random weights)", NULL, 1,
     0},
    {"out", TDL_PARAM_STRING, "cost.json", "where the cost model goes", NULL, 1, 0},
    {"reps", TDL_PARAM_INT, "5", "timed repetitions per point (the median is kept)", NULL, 1, 1000},
    {"sides", TDL_PARAM_STRING, "32,48,64,96,128",
     "image sides to measure (pixels, multiples of the patch size)", NULL, 1, 0},
};

/* The slowest member's median of `reps` timings of one stage of one image on group g (members
 * only; the others pass g == NULL and get 0 back). Every member of the world calls it. */
static double time_stage(const dit_model_t *m, gfc_group_t *g, coord_cost_stage_t stage, int side,
                         int reps, tdl_status_t *st)
{
    double t[1000] = {0}, worst = 0;
    if (g) {
        size_t n = (size_t)m->config.in_channels * side * side;
        float *x = calloc(n, sizeof(float)), *out = calloc(n, sizeof(float));
        float tt = 0.5f;
        int y = 0;
        dit_sp_comm_t comm;
        serve_sp_comm(&comm, g);
        for (int r = 0; r <= reps && *st == TDL_OK; r++) { /* the first run warms up */
            if ((*st = gfc_barrier(g)) != TDL_OK)
                break;
            double t0 = tdl_clock_s();
            if (stage == COORD_COST_STEP) {
                *st = dit_sp_forward(m, g->size > 1 ? &comm : NULL, x, &tt, &y, 1, side, side, out);
            } else if (stage == COORD_COST_PREPARE) {
                dit_sampler_noise(x, 1, n, (uint64_t)r, 0);
            } else {
                unsigned char *png = NULL;
                size_t len;
                *st = serve_png_encode(x, 1, m->config.in_channels, side, side, 1, 0, &png, &len);
                free(png);
            }
            float dt = (float)(tdl_clock_s() - t0), slowest = dt;
            if (*st == TDL_OK && g->size > 1)
                *st = gfc_allreduce(g, &dt, &slowest, 1, GFC_DT_F32, GFC_OP_MAX, NULL);
            if (r > 0)
                t[r - 1] = slowest;
        }
        free(x), free(out);
        worst = tdl_median(t, reps);
    }
    return worst;
}

static int profile_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal profile' takes no arguments, found '%s'", pos[0]);
    dit_config_t cfg;
    if (dit_config_named(tdl_param_str(params, "model"), &cfg) != TDL_OK)
        return cli_usage_error("--model: %s", tdl_error_get());
    int sides[16], nsides = 0, reps = (int)tdl_param_int(params, "reps");
    for (const char *p = tdl_param_str(params, "sides"); *p && nsides < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < cfg.patch_size || v > 512 || v % cfg.patch_size)
            return cli_usage_error("--sides '%s': sides are multiples of %d up to 512, "
                                   "comma-separated",
                                   tdl_param_str(params, "sides"), cfg.patch_size);
        sides[nsides++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    tdl_boot_info_t me;
    tdl_status_t st = tdl_boot_init(NULL, NULL, &me);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: profile: cannot start MPI: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    tdl_log_set_rank(me.size > 1 ? me.rank : -1);
    int rc = CLI_EXIT_FAILURE, maxside = 0;
    for (int i = 0; i < nsides; i++)
        maxside = sides[i] > maxside ? sides[i] : maxside;
    gfc_runtime_t *rt = NULL;
    dit_model_t *m = NULL;
    int *world = malloc((size_t)me.size * sizeof(int));
    for (int r = 0; r < me.size; r++)
        world[r] = r;
    gfc_runtime_config_t gc;
    if ((st = gfc_runtime_config_from_params(params, &gc)) == TDL_OK) {
        gc.rank = me.rank, gc.size = me.size, gc.allgather = tdl_boot_allgatherv;
        st = gfc_runtime_create(&gc, &rt);
    }
    if (st == TDL_OK && (st = dit_model_create(&cfg, 1, maxside, &m)) == TDL_OK) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, 1, 1);
        for (size_t i = 0; i < m->num_params; i++)
            m->params[i] = 0.05f * tdl_rng_normal(&rng);
        dit_model_params_changed(m);
    }
    coord_cost_model_t cost;
    coord_cost_model_default(&cost);
    snprintf(cost.name, sizeof(cost.name), "%s", cfg.name);
    cost.patch = cfg.patch_size;
    for (int s = 0; s < COORD_COST_NSTAGES; s++)
        cost.nfits[s] = 0;
    if (me.rank == 0 && st == TDL_OK)
        printf("tidal profile: %s on %d rank%s, sides", cfg.name, me.size, me.size > 1 ? "s" : "");
    for (int i = 0; me.rank == 0 && st == TDL_OK && i < nsides; i++)
        printf(" %d", sides[i]);
    if (me.rank == 0 && st == TDL_OK)
        printf(", %d repetitions\n", reps);
    for (int P = 1; P <= me.size && st == TDL_OK; P *= 2) {
        gfc_group_t g;
        bool in = me.rank < P;
        if (in && (st = gfc_group_init(&g, rt, world, P, 0x70726f66ull + (uint64_t)P)) != TDL_OK)
            break;
        for (int s = 0; s < COORD_COST_NSTAGES && st == TDL_OK; s++) {
            double xs[16], ys[16];
            int n = 0;
            for (int i = 0; i < nsides && st == TDL_OK; i++) {
                if (dit_sp_check(m, sides[i], sides[i], P) != TDL_OK)
                    continue; /* this degree cannot split this size */
                double t =
                    time_stage(m, in ? &g : NULL, (coord_cost_stage_t)s, sides[i], reps, &st);
                int tokens = (sides[i] / cfg.patch_size) * (sides[i] / cfg.patch_size);
                xs[n] = tokens, ys[n] = t, n++;
                if (me.rank == 0)
                    printf("  %-7s SP%d %4dx%-4d (%5d tokens): %9.3f ms\n",
                           coord_cost_stage_name((coord_cost_stage_t)s), P, sides[i], sides[i],
                           tokens, t * 1e3);
            }
            double a, b, c, err;
            if (st == TDL_OK && n > 0 && me.rank == 0 &&
                (st = coord_cost_fit_quadratic(xs, ys, n, &a, &b, &c, &err)) == TDL_OK) {
                st = coord_cost_model_set_fit(&cost, (coord_cost_stage_t)s, P, a, b, c, err);
                printf("  %-7s SP%d fit: %.4g x^2 + %.4g x + %.4g s, largest relative error "
                       "%.1f%%\n",
                       coord_cost_stage_name((coord_cost_stage_t)s), P, a, b, c, err * 100);
            }
        }
        tdl_boot_barrier();
    }
    /* migration: rank 0 to rank 1, the latents of one image at two sizes */
    if (st == TDL_OK && me.size > 1 && me.rank < 2) {
        gfc_group_t pair;
        int two[2] = {0, 1};
        double secs[2];
        size_t bytes[2] = {4096, (size_t)4 << 20};
        st = gfc_group_init(&pair, rt, two, 2, 0x6d696772ull);
        for (int k = 0; k < 2 && st == TDL_OK; k++) {
            unsigned char *buf = calloc(bytes[k], 1);
            double t[1000];
            for (int r = 0; r <= reps && st == TDL_OK; r++) {
                double t0 = tdl_clock_s();
                st = me.rank == 0
                         ? gfc_send(&pair, 1, (uint64_t)(k * 1000 + r), buf, bytes[k])
                         : gfc_recv(&pair, 0, (uint64_t)(k * 1000 + r), buf, bytes[k], NULL);
                if (st == TDL_OK)
                    st = gfc_barrier(&pair);
                if (r > 0)
                    t[r - 1] = tdl_clock_s() - t0;
            }
            secs[k] = tdl_median(t, reps);
            free(buf);
        }
        if (st == TDL_OK && me.rank == 0) {
            double bw = (double)(bytes[1] - bytes[0]) / fmax(secs[1] - secs[0], 1e-9);
            cost.migration_bytes_per_s = bw;
            cost.migration_latency_s = fmax(secs[0] - (double)bytes[0] / bw, 0);
            printf("  migration: %.1f us + %.2f GB/s\n", cost.migration_latency_s * 1e6, bw / 1e9);
        }
    }
    cost.state_bytes_per_token =
        (double)cfg.patch_size * cfg.patch_size * cfg.in_channels * sizeof(float);
    if (st == TDL_OK && me.rank == 0) {
        const char *out = tdl_param_str(params, "out");
        if ((st = coord_cost_model_save(&cost, out)) == TDL_OK)
            printf("tidal profile: wrote %s\n", out);
    }
    int64_t bad = st != TDL_OK;
    if (me.size > 1)
        tdl_boot_allreduce_sum_i64(&bad);
    rc = bad ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
    if (st != TDL_OK)
        fprintf(stderr, "tidal[%d]: profile: %s\n", me.rank, tdl_error_get());
    dit_model_free(m);
    if (rt) {
        tdl_boot_barrier();
        gfc_runtime_destroy(rt);
    }
    free(world);
    tdl_boot_finalize();
    return rc;
}

const cli_command_t cli_cmd_profile = {
    .name = "profile",
    .summary = "measure the cost model of serving (per stage, resolution and degree) as JSON",
    .usage = "[mpirun -np N] tidal profile [--model fmnist] [--out cost.json]",
    .params = profile_params,
    .nparams = TDL_ARRAY_SIZE(profile_params),
    .run = profile_run,
};
