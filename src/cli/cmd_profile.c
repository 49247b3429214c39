/* `tidal profile`: the cost models of the machine at hand, measured under mpirun with N ranks.
 *
 * Serving (by default): for every degree P (1, 2, 4, ... up to N) and resolution the model takes,
 * the first P ranks time one image's PREPARE (noise), one denoising step (the sequence-parallel
 * forward over a gfc group) and DECODE (the PNG); each (stage, degree) gets the least-squares
 * fit a x^2 + b x + c in tokens, with its largest relative error printed, and the state
 * migration between two ranks gets a latency and a bandwidth. Rank 0 alone times a step of each
 * of --step-batches images together at every side: the cost model's batch dimension, its factor
 * a step's seconds per image over one image's alone. Written as the JSON of
 * doc/scheduler.md, which tidal sim and the scheduler read.
 *
 * Training (--train, after serving; --train-only, alone): for each member count n the first n
 * ranks time data-parallel steps of tidal train's trainer, and the step's collectives alone, at
 * the global batch --batch and twice it; coord_train_model_fit makes the cost model of
 * coord/train_model.h from them, written as the "train" object of the same file
 * (doc/colocation.md), which tidal sim --colocate reads. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "codec/codec.h"
#include "coord/cost.h"
#include "coord/train_model.h"
#include "dit/dit.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"
#include "serve/serve.h"
#include "train/train.h"

/* --model and the other training parameters are tidal train's (cli_train_params, shared); the
 * serving part reads --model only. */
static const tdl_param_def_t profile_params[] = {
    {"out", TDL_PARAM_STRING, "cost.json", "where the cost model goes", NULL, 1, 0},
    {"reps", TDL_PARAM_INT, "5",
     "timed repetitions per point, after one to warm up (the median is kept): of a serving stage "
     "and of a training step (of its all-reduce alone, four times as many)",
     NULL, 1, 1000},
    {"sides", TDL_PARAM_STRING, "32,48,64,96,128",
     "image sides to measure (pixels, multiples of the patch size)", NULL, 1, 0},
    {"step-batches", TDL_PARAM_STRING, "1,2,4,8",
     "images a denoising step takes together, measured on rank 0 at every side: the batch "
     "dimension of the cost model (each a step's seconds per image over one image's alone), "
     "which decides when the scheduler batches chunks",
     NULL, 1, 0},
    {"train", TDL_PARAM_BOOL, "false",
     "after serving, measure data-parallel training too (tidal train's trainer at every member "
     "count, at --batch and twice it) and write its fit as the \"train\" object of --out",
     NULL, 0, 0},
    {"train-only", TDL_PARAM_BOOL, "false",
     "measure training only, adding the \"train\" object to --out and keeping what the file "
     "holds (the serving cost model of an earlier run)",
     NULL, 0, 0},
    {"batch", TDL_PARAM_INT, "32", "training: the global batch measured, and twice it", NULL, 1,
     1 << 19},
    {"micro-batch", TDL_PARAM_INT, "32", "training: images per forward pass on one rank", NULL, 1,
     1 << 16},
    CLI_DEVICE_PARAM,
};

/* Weights of normal(0, 0.05), the same every run: the times do not depend on what they are. */
static void random_weights(dit_model_t *m)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, 1, 1);
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] = 0.05f * tdl_rng_normal(&rng);
    dit_model_params_changed(m);
}

/* The slowest member's median of `reps` timings of one stage of one image on group g (members
 * only; the others pass g == NULL and get 0 back). Every member of the world calls it. */
static double time_stage(const dit_model_t *m, gfc_group_t *g, coord_cost_stage_t stage, int side,
                         int reps, tdl_status_t *st)
{
    double t[1000] = {0}, worst = 0;
    if (g) {
        size_t n = (size_t)m->config.in_channels * side * side;
        size_t nout = n / m->config.in_channels * dit_config_out_channels(&m->config);
        float *x = calloc(n, sizeof(float)), *out = calloc(nout, sizeof(float));
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

/* The median of `reps` timings (after one to warm up) of a step of b images at side x side on
 * this rank alone, with their own times and labels as a batch of requests has them. */
static double time_batch(const dit_model_t *m, int side, int b, int reps, tdl_status_t *st)
{
    size_t n = (size_t)b * m->config.in_channels * side * side;
    float *x = calloc(n, sizeof(float)), *out = calloc(n, sizeof(float));
    float *tt = calloc((size_t)b, sizeof(float));
    int *y = calloc((size_t)b, sizeof(int));
    double t[1000] = {0};
    if (!x || !out || !tt || !y)
        *st = tdl_error_raise(TDL_ERR_NOMEM, "profile: out of memory for a batch of %d", b);
    for (int i = 0; *st == TDL_OK && i < b; i++)
        tt[i] = 1.0f - (float)i / (float)b, y[i] = i % m->config.num_classes;
    for (int r = 0; r <= reps && *st == TDL_OK; r++) {
        double t0 = tdl_clock_s();
        *st = dit_sp_forward(m, NULL, x, tt, y, b, side, side, out);
        if (r > 0)
            t[r - 1] = tdl_clock_s() - t0;
    }
    free(x), free(out), free(tt), free(y);
    return tdl_median(t, reps);
}

/* The batch dimension: on rank 0, a step of each count of `batches` images at every side, as a
 * share of one image's; the tables go into cost. */
static tdl_status_t profile_batches(const dit_config_t *cfg, const int *sides, int nsides,
                                    const int *batches, int nb, int reps, coord_cost_model_t *cost)
{
    int maxside = 0, maxb = 1;
    for (int i = 0; i < nsides; i++)
        maxside = TDL_MAX(maxside, sides[i]);
    for (int i = 0; i < nb; i++)
        maxb = TDL_MAX(maxb, batches[i]);
    dit_model_t *m = NULL;
    tdl_status_t st = dit_model_create_inference(cfg, maxb, maxside, NULL, &m);
    if (st == TDL_OK)
        random_weights(m);
    for (int i = 0; i < nsides && st == TDL_OK; i++) {
        int tokens = (sides[i] / cfg->patch_size) * (sides[i] / cfg->patch_size);
        double one = time_batch(m, sides[i], 1, reps, &st);
        double factor[COORD_COST_MAX_BATCH_POINTS];
        int images[COORD_COST_MAX_BATCH_POINTS], np = 0;
        printf("  step    SP1 %4dx%-4d batches:", sides[i], sides[i]);
        for (int k = 0; k < nb && st == TDL_OK && np < COORD_COST_MAX_BATCH_POINTS; k++) {
            double tb = batches[k] == 1 ? one : time_batch(m, sides[i], batches[k], reps, &st);
            images[np] = batches[k];
            factor[np++] = tb / (batches[k] * fmax(one, 1e-12));
            printf(" %d: %.3f ms an image (x%.3f)", batches[k], tb / batches[k] * 1e3,
                   factor[np - 1]);
        }
        printf("\n");
        if (st == TDL_OK)
            st = coord_cost_model_set_batch(cost, tokens, images, factor, np);
    }
    dit_model_free(m);
    return st;
}

/* The serving cost model: every stage at every degree and side, the batch dimension, the
 * migration, saved to out. */
static tdl_status_t profile_serve(const dit_config_t *cfg, const int *sides, int nsides,
                                  const int *batches, int nb, int reps, const tdl_boot_info_t *me,
                                  gfc_runtime_t *rt, const int *world, const char *out)
{
    int maxside = 0;
    for (int i = 0; i < nsides; i++)
        maxside = sides[i] > maxside ? sides[i] : maxside;
    dit_model_t *m = NULL;
    tdl_status_t st = dit_model_create(cfg, 1, maxside, &m);
    if (st == TDL_OK)
        random_weights(m);
    coord_cost_model_t cost;
    coord_cost_model_default(&cost);
    snprintf(cost.name, sizeof(cost.name), "%s", cfg->name);
    cost.patch = cfg->patch_size;
    for (int s = 0; s < COORD_COST_NSTAGES; s++)
        cost.nfits[s] = 0;
    if (me->rank == 0 && st == TDL_OK)
        printf("tidal profile: %s on %d rank%s, sides", cfg->name, me->size,
               me->size > 1 ? "s" : "");
    for (int i = 0; me->rank == 0 && st == TDL_OK && i < nsides; i++)
        printf(" %d", sides[i]);
    if (me->rank == 0 && st == TDL_OK)
        printf(", %d repetitions\n", reps);
    for (int P = 1; P <= me->size && st == TDL_OK; P *= 2) {
        gfc_group_t g;
        bool in = me->rank < P;
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
                int tokens = (sides[i] / cfg->patch_size) * (sides[i] / cfg->patch_size);
                xs[n] = tokens, ys[n] = t, n++;
                if (me->rank == 0)
                    printf("  %-7s SP%d %4dx%-4d (%5d tokens): %9.3f ms\n",
                           coord_cost_stage_name((coord_cost_stage_t)s), P, sides[i], sides[i],
                           tokens, t * 1e3);
            }
            double a, b, c, err;
            if (st == TDL_OK && n > 0 && me->rank == 0 &&
                (st = coord_cost_fit_quadratic(xs, ys, n, &a, &b, &c, &err)) == TDL_OK) {
                st = coord_cost_model_set_fit(&cost, (coord_cost_stage_t)s, P, a, b, c, err);
                printf("  %-7s SP%d fit: %.4g x^2 + %.4g x + %.4g s, largest relative error "
                       "%.1f%%\n",
                       coord_cost_stage_name((coord_cost_stage_t)s), P, a, b, c, err * 100);
            }
        }
        tdl_boot_barrier();
    }
    if (st == TDL_OK && me->rank == 0 && nb > 0)
        st = profile_batches(cfg, sides, nsides, batches, nb, reps, &cost);
    tdl_boot_barrier();
    /* migration: rank 0 to rank 1, the latents of one image at two sizes */
    if (st == TDL_OK && me->size > 1 && me->rank < 2) {
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
                st = me->rank == 0
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
        if (st == TDL_OK && me->rank == 0) {
            double bw = (double)(bytes[1] - bytes[0]) / fmax(secs[1] - secs[0], 1e-9);
            cost.migration_bytes_per_s = bw;
            cost.migration_latency_s = fmax(secs[0] - (double)bytes[0] / bw, 0);
            printf("  migration: %.1f us + %.2f GB/s\n", cost.migration_latency_s * 1e6, bw / 1e9);
        }
    }
    cost.state_bytes_per_token =
        (double)cfg->patch_size * cfg->patch_size * cfg->in_channels * sizeof(float);
    if (st == TDL_OK && me->rank == 0 && (st = coord_cost_model_save(&cost, out)) == TDL_OK)
        printf("tidal profile: wrote %s\n", out);
    dit_model_free(m);
    return st;
}

/* ---- training ---------------------------------------------------------------------------- */

/* The member counts measured: every one from 1 to N up to 16 ranks, else the powers of two and
 * N, so that two batches of them fit COORD_TRAIN_MAX_POINTS. */
static int train_member_counts(int size, int *counts)
{
    int n = 0;
    for (int c = 1; c <= size; c = size <= 16 ? c + 1 : 2 * c)
        counts[n++] = c;
    if (counts[n - 1] != size)
        counts[n++] = size;
    return n;
}

/* Every rank's word at the end of a phase that some ranks sat out: the members say how it went,
 * the others wait for them asleep (a spinning wait takes a core from the members on a machine
 * with fewer cores than ranks: the oversubscribed tests), and all learn whether any failed. */
static tdl_status_t train_world_agree(gfc_group_t *world, bool member, tdl_status_t st)
{
    int32_t bad = st != TDL_OK, any = bad;
    tdl_status_t ws = TDL_OK;
    if (world->size > 1 && member) {
        ws = gfc_allreduce(world, &bad, &any, 1, GFC_DT_I32, GFC_OP_MAX, NULL);
    } else if (world->size > 1) {
        gfc_request_t *req = NULL;
        bool done = false;
        ws = gfc_allreduce_start(world, &bad, &any, 1, GFC_DT_I32, GFC_OP_MAX, NULL, &req);
        while (ws == TDL_OK && (ws = gfc_request_test(req, &done)) == TDL_OK && !done)
            usleep(1000);
        gfc_request_free(req);
    }
    if (st != TDL_OK)
        return st;
    if (ws != TDL_OK)
        return ws;
    return any ? tdl_error_raise(TDL_ERR_CANCELED, "stopped: another rank failed (its own line "
                                                   "says why)")
               : TDL_OK;
}

/* The collectives of one step of tr on g, as train/trainer.c runs them after the backward pass:
 * the finiteness check, the gradient (grad, in place) through the trainer's codec, the loss. */
static tdl_status_t train_step_collectives(gfc_group_t *g, train_codec_t *codec, float *grad,
                                           size_t n, int64_t step)
{
    float flag = 0, any, loss = 1, total;
    tdl_status_t st = gfc_allreduce(g, &flag, &any, 1, GFC_DT_F32, GFC_OP_MAX, NULL);
    train_codec_set_step(codec, step);
    gfc_allreduce_opts_t ar = {.algo = GFC_ALLREDUCE_AUTO,
                               .codec = codec ? train_codec_hook(codec) : NULL};
    if (st == TDL_OK)
        st = gfc_allreduce(g, grad, grad, n, GFC_DT_F32, GFC_OP_SUM, &ar);
    if (st == TDL_OK)
        st = gfc_allreduce(g, &loss, &total, 1, GFC_DT_F32, GFC_OP_SUM, NULL);
    return st;
}

/* The slowest member's median seconds of `reps` steps of tr on g after one to warm up, and of
 * the step's collectives alone (0 for one member) on a copy of tr's last gradient in grad: four
 * times as many of those, which are short beside a step and the noisier for it. */
#define TRAIN_AR_REPS(reps) TDL_MIN(4 * (reps), 1000)
static tdl_status_t train_time_point(train_trainer_t *tr, gfc_group_t *g, train_codec_t *codec,
                                     float *grad, int reps, double *step_s, double *allreduce_s)
{
    double steps[1000], ars[1000];
    dit_model_t *m = train_trainer_model(tr);
    tdl_status_t st = TDL_OK;
    for (int k = 0; k < 2 && st == TDL_OK; k++) { /* k = 0: whole steps; 1: collectives */
        int n = k == 0 ? reps : g->size > 1 ? TRAIN_AR_REPS(reps) : 0;
        for (int r = 0; r <= n && st == TDL_OK && n > 0; r++) {
            if (k == 1)
                memcpy(grad, m->grads, m->num_params * sizeof(float));
            if (g->size > 1 && (st = gfc_barrier(g)) != TDL_OK)
                break;
            double t0 = tdl_clock_s(), loss;
            st = k == 0 ? train_trainer_step(tr, g, &loss, NULL)
                        : train_step_collectives(g, codec, grad, m->num_params, r);
            float dt = (float)(tdl_clock_s() - t0), slowest = dt;
            if (st == TDL_OK && g->size > 1)
                st = gfc_allreduce(g, &dt, &slowest, 1, GFC_DT_F32, GFC_OP_MAX, NULL);
            if (r > 0)
                (k == 0 ? steps : ars)[r - 1] = slowest;
        }
    }
    if (st == TDL_OK) {
        *step_s = tdl_median(steps, (size_t)reps);
        *allreduce_s = g->size > 1 ? tdl_median(ars, (size_t)TRAIN_AR_REPS(reps)) : 0;
    }
    return st;
}

/* Rank 0's table of the points, with the fit's column when it has one. */
static void train_print_points(const coord_train_model_t *tm, bool fitted)
{
    printf("  %7s %6s %6s %10s %14s %10s %7s\n", "members", "batch", "local", "step ms",
           "all-reduce ms", "fit ms", "error");
    for (int i = 0; i < tm->npoints; i++) {
        const coord_train_point_t *p = &tm->points[i];
        coord_train_model_t at = *tm;
        at.batch = p->batch;
        double fit = coord_train_step_s(&at, p->members);
        printf("  %7d %6d %6d %10.3f %14.3f", p->members, p->batch,
               (p->batch + p->members - 1) / p->members, p->step_s * 1e3, p->allreduce_s * 1e3);
        if (fitted)
            printf(" %10.3f %+6.1f%%\n", fit * 1e3, (fit - p->step_s) / p->step_s * 100);
        else
            printf(" %10s %7s\n", "-", "-");
    }
}

/* The training cost model: tidal train's trainer (o) at --batch and twice it, on the first n
 * ranks for every member count n, fitted and added to out by rank 0. */
static tdl_status_t profile_train(const train_opts_t *o, int reps, const tdl_boot_info_t *me,
                                  gfc_runtime_t *rt, const int *world, const char *out)
{
    coord_train_model_t tm;
    int counts[COORD_TRAIN_MAX_POINTS / 2], ncounts = train_member_counts(me->size, counts);
    memset(&tm, 0, sizeof(tm));
    snprintf(tm.name, sizeof(tm.name), "%s", o->model);
    snprintf(tm.codec, sizeof(tm.codec), "%s", o->allreduce ? o->allreduce : "f32");
    tm.batch = o->batch;
    gfc_group_t world_g;
    tdl_status_t st = gfc_group_init(&world_g, rt, world, me->size, 0x74726e77ull);
    for (int b = 0; b < 2 && st == TDL_OK; b++) {
        train_opts_t ob = *o;
        ob.batch = o->batch << b;
        train_trainer_t *tr = NULL;
        train_codec_t *codec = NULL;
        float *grad = NULL;
        st = train_trainer_create(&ob, &tr);
        size_t np = st == TDL_OK ? train_trainer_model(tr)->num_params : 0;
        if (st == TDL_OK && strcmp(tm.codec, "f32") != 0) {
            /* the trainer's codec, made as train/trainer.c makes it, for the collectives alone */
            codec_config_t cc = {.round = (codec_round_t)o->allreduce_round,
                                 .bits = o->allreduce_bits};
            st = train_codec_create_config(o->allreduce, &cc, o->seed, &codec);
            if (st == TDL_OK && o->allreduce_ef)
                st = train_codec_error_feedback(codec, np);
        }
        if (st == TDL_OK && !(grad = malloc(np * sizeof(float))))
            st = tdl_error_raise(TDL_ERR_NOMEM, "profile: no memory for a gradient (%zu values)",
                                 np);
        if (b == 0 && st == TDL_OK) {
            /* on the wire: the codec's bits a value (metadata included), f32's 32 */
            double bits = codec ? train_codec_bits_per_coord(codec, np) : 32;
            tm.grad_bytes = (double)np * bits / 8;
            /* what train_trainer_sync sends a joiner: weights, EMA, the AdamW moments, losses */
            tm.state_bytes = (4.0 * (double)np + 2.0 * TRAIN_LOSS_HISTORY) * sizeof(float);
            if (me->rank == 0)
                printf("tidal profile --train: %s (%zu parameters) on %d rank%s, batch %d and %d "
                       "(micro-batch %d), all-reduce %s (%.3g bytes a value), %d steps and "
                       "%d all-reduces a point\n",
                       o->model, np, me->size, me->size > 1 ? "s" : "", o->batch, 2 * o->batch,
                       o->micro_batch, tm.codec, bits / 8, reps, TRAIN_AR_REPS(reps));
        }
        st = train_world_agree(&world_g, true, st);
        for (int i = 0; i < ncounts && st == TDL_OK; i++) {
            int n = counts[i];
            bool in = me->rank < n;
            gfc_group_t g;
            double step_s = 0, allreduce_s = 0;
            if (in && (st = gfc_group_init(&g, rt, world, n,
                                           0x74726e00ull + (uint64_t)(b << 16 | n))) == TDL_OK)
                st = train_time_point(tr, &g, codec, grad, reps, &step_s, &allreduce_s);
            st = train_world_agree(&world_g, in, st);
            if (st == TDL_OK && me->rank == 0)
                tm.points[tm.npoints++] = (coord_train_point_t){
                    .members = n, .batch = ob.batch, .step_s = step_s, .allreduce_s = allreduce_s};
        }
        free(grad);
        train_codec_free(codec);
        train_trainer_free(tr);
    }
    if (st != TDL_OK || me->rank != 0)
        return st;
    st = coord_train_model_fit(&tm);
    train_print_points(&tm, st == TDL_OK);
    if (st != TDL_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", tdl_error_get());
        return tdl_error_raise(st, "the training fit failed: %s%s; %s was not changed", why,
                               me->size < 3 ? " (on 3 ranks or more, two group sizes above 1 "
                                              "tell the all-reduce's bytes from its hops)"
                                            : "",
                               out);
    }
    printf("  train fit: %.4g ms an image + %.4g ms a step; all-reduce of %.0f bytes over %.4g "
           "GB/s + %.4g us a hop; joiner %.0f bytes; largest relative error %.1f%%\n",
           tm.image_s * 1e3, tm.fixed_s * 1e3, tm.grad_bytes, tm.link_bytes_per_s / 1e9,
           tm.hop_s * 1e6, tm.state_bytes, tm.step_rel_err * 100);
    if ((st = coord_train_model_save(&tm, out)) == TDL_OK)
        printf("tidal profile: wrote the \"train\" object of %s\n", out);
    return st;
}

static int profile_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal profile' takes no arguments, found '%s'", pos[0]);
    bool train_only = tdl_param_bool(params, "train-only");
    bool train = train_only || tdl_param_bool(params, "train");
    dit_config_t cfg;
    if (dit_config_named(tdl_param_str(params, "model"), &cfg) != TDL_OK)
        return cli_usage_error("--model: %s", tdl_error_get());
    int sides[16], nsides = 0, reps = (int)tdl_param_int(params, "reps");
    for (const char *p = tdl_param_str(params, "sides"); !train_only && *p && nsides < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < cfg.patch_size || v > 512 || v % cfg.patch_size)
            return cli_usage_error("--sides '%s': sides are multiples of %d up to 512, "
                                   "comma-separated",
                                   tdl_param_str(params, "sides"), cfg.patch_size);
        sides[nsides++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    int batches[COORD_COST_MAX_BATCH_POINTS], nb = 0;
    for (const char *p = tdl_param_str(params, "step-batches"); !train_only && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        bool again = false;
        for (int i = 0; i < nb; i++)
            again |= batches[i] == v;
        if (end == p || v < 1 || v > 256 || again || nb == COORD_COST_MAX_BATCH_POINTS)
            return cli_usage_error("--step-batches '%s': up to %d distinct image counts from 1 to "
                                   "256, comma-separated",
                                   tdl_param_str(params, "step-batches"),
                                   COORD_COST_MAX_BATCH_POINTS);
        batches[nb++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    train_opts_t o;
    if (train) {
        int rc0 = cli_train_opts(params, "reps", &o);
        if (rc0 != CLI_EXIT_OK)
            return rc0;
        if (strcmp(o.data, "fmnist") != 0 && access(o.data, R_OK) != 0)
            return cli_usage_error("--data %s: %s", o.data, strerror(errno));
    }
    const char *out = tdl_param_str(params, "out");
    tdl_boot_info_t me;
    tdl_status_t st = tdl_boot_init(NULL, NULL, &me);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: profile: cannot start MPI: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    tdl_log_set_rank(me.size > 1 ? me.rank : -1);
    gfc_runtime_t *rt = NULL;
    int *world = malloc((size_t)me.size * sizeof(int));
    for (int r = 0; r < me.size; r++)
        world[r] = r;
    gfc_runtime_config_t gc;
    if ((st = gfc_runtime_config_from_params(params, &gc)) == TDL_OK) {
        gc.rank = me.rank, gc.size = me.size, gc.allgather = tdl_boot_allgatherv;
        st = gfc_runtime_create(&gc, &rt);
    }
    if (st == TDL_OK && !train_only)
        st = profile_serve(&cfg, sides, nsides, batches, nb, reps, &me, rt, world, out);
    if (st == TDL_OK && train)
        st = profile_train(&o, reps, &me, rt, world, out);
    int64_t bad = st != TDL_OK;
    if (me.size > 1)
        tdl_boot_allreduce_sum_i64(&bad);
    int rc = bad ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
    if (st != TDL_OK)
        fprintf(stderr, "tidal[%d]: profile: %s\n", me.rank, tdl_error_get());
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
    .summary = "measure the cost model of serving (per stage, resolution and degree) and, with "
               "--train, of data-parallel training, as JSON",
    .usage = "[mpirun -np N] tidal profile [--model fmnist] [--out cost.json] [--train | "
             "--train-only [--batch B] [--micro-batch M] [--allreduce f32]]",
    .params = profile_params,
    .nparams = TDL_ARRAY_SIZE(profile_params),
    .shared = {cli_train_params},
    .nshared = {CLI_TRAIN_NPARAMS},
    .run = profile_run,
};
