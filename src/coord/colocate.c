/* Co-location's edges at rank 0 (job.h): the run's files (timeline.csv, loss.csv), its progress
 * lines and summary, the timeline plot and the sample grid. The decisions are the core's
 * (coord.c); this only writes what they were. doc/colocation.md. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/job.h"
#include "coord/workload.h"

struct coord_colocate {
    coord_colocate_opts_t o;
    char out[1024];
    int workers;
    FILE *timeline, *losses;
    double last_row;
    int64_t last_row_step;
};

tdl_status_t coord_colocate_open(const coord_colocate_opts_t *o, int workers,
                                 coord_colocate_t **out)
{
    coord_colocate_t *k = calloc(1, sizeof(*k));
    if (!k)
        return tdl_error_raise(TDL_ERR_NOMEM, "co-location: out of memory");
    k->o = *o;
    k->workers = workers;
    snprintf(k->out, sizeof(k->out), "%s", o->out);
    k->o.out = k->out;
    char path[1200];
    tdl_status_t st = TDL_OK;
    snprintf(path, sizeof(path), "%s/timeline.csv", k->out);
    if (!(k->timeline = fopen(path, "w")))
        st = tdl_error_raise(TDL_ERR_IO, "%s: %s", path, strerror(errno));
    if (st == TDL_OK) {
        fprintf(k->timeline, "t_s,serving,training,queued,live,step,train_images_per_s,loss,"
                             "done,slo_violations,dead\n");
        snprintf(path, sizeof(path), "%s/loss.csv", k->out);
        if (!(k->losses = fopen(path, "a")))
            st = tdl_error_raise(TDL_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (st != TDL_OK) {
        coord_colocate_close(k);
        return st;
    }
    printf("tidal run: %d workers train the DiT and serve; reallocation %s, at least %d "
           "training\n",
           workers, o->realloc->name, coord_min_train(workers, o->min_train));
    *out = k;
    return TDL_OK;
}

void coord_colocate_close(coord_colocate_t *k)
{
    if (!k)
        return;
    if (k->timeline)
        fclose(k->timeline);
    if (k->losses)
        fclose(k->losses);
    free(k);
}

void coord_colocate_report(coord_colocate_t *k, const serve_wire_report_t *r)
{
    int plen = (int)strnlen(r->path, sizeof(r->path));
    switch (r->kind) {
    case SERVE_REPORT_STEP:
        if (k->losses)
            fprintf(k->losses, "%lld,%.7g,%d\n", (long long)r->step, r->loss, r->members);
        break;
    case SERVE_REPORT_CKPT:
        printf("tidal run: checkpoint %.*s (step %lld)\n", plen, r->path, (long long)r->step);
        break;
    case SERVE_REPORT_DONE:
        printf("tidal run: training finished at step %lld; every rank serves\n",
               (long long)r->step);
        break;
    default: break;
    }
}

void coord_colocate_row(coord_colocate_t *k, coord_t *c, serve_queue_t *q, double now, bool force)
{
    if (!force && now - k->last_row < k->o.row_every)
        return;
    coord_training_t t;
    coord_training_get(c, &t);
    serve_stats_t s;
    serve_queue_stats(q, &s);
    uint64_t done = 0, viol = 0;
    for (int i = 0; i < SERVE_SOURCE_COUNT; i++)
        done += s.by_source[i].done, viol += s.by_source[i].slo_violations;
    double dt = now - k->last_row;
    double ips = dt > 0 ? (double)(t.step - k->last_row_step) * k->o.batch / dt : 0;
    int ranks[SERVE_ROLE_COUNT];
    coord_roles(c, ranks);
    if (k->timeline) {
        fprintf(k->timeline, "%.3f,%d,%d,%d,%d,%lld,%.2f,%.6f,%llu,%llu,%d\n", now, t.serving,
                t.training, s.queued, coord_live(c), (long long)t.step, ips, t.loss,
                (unsigned long long)done, (unsigned long long)viol, ranks[SERVE_ROLE_DEAD]);
        fflush(k->timeline);
    }
    serve_queue_set_ranks(q, ranks);
    k->last_row = now, k->last_row_step = t.step;
}

/* 4 images of each class from the last checkpoint's EMA weights: what training has learned. */
static void sample_grid(const coord_colocate_t *k, const char *latest)
{
    if (!latest[0])
        return;
    dit_model_t *m = NULL;
    tdl_status_t st = train_weights_load(latest, "ema", 20, 0, &m);
    int n = 0, res = 0, ch = 0, classes = 0;
    int *labels = NULL;
    float *img = NULL;
    if (st == TDL_OK) {
        classes = TDL_MIN(m->config.num_classes, 10), n = 4 * classes;
        res = m->config.input_size, ch = m->config.in_channels;
        labels = malloc((size_t)n * sizeof(int));
        img = malloc((size_t)n * ch * res * res * sizeof(float));
        st = labels && img ? TDL_OK : tdl_error_raise(TDL_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; st == TDL_OK && i < n; i++)
        labels[i] = i % classes;
    dit_sample_opts_t o = {.kind = DIT_SAMPLER_HEUN, .steps = 20, .cfg_scale = 3, .seed = 1};
    char path[1200];
    snprintf(path, sizeof(path), "%s/samples.png", k->out);
    if (st == TDL_OK && (st = dit_sample(m, labels, n, res, res, &o, img)) == TDL_OK)
        st = serve_png_write_grid(path, img, n, ch, res, res, classes, 2);
    if (st == TDL_OK)
        printf("tidal run: samples of %s in %s\n", latest, path);
    else
        TDL_WARN("no sample grid: %s", tdl_error_get());
    free(labels), free(img);
    dit_model_free(m);
}

void coord_colocate_finish(coord_colocate_t *k, coord_t *c, serve_queue_t *q, double elapsed)
{
    coord_colocate_row(k, c, q, elapsed, true);
    if (k->timeline)
        fclose(k->timeline);
    if (k->losses)
        fclose(k->losses);
    k->timeline = k->losses = NULL;
    coord_training_t t;
    coord_training_get(c, &t);
    coord_move_stats_t mv;
    coord_move_stats_get(c, &mv);
    size_t n = (size_t)mv.n;
    char loss[32] = "no step in this job";
    if (t.seen_step)
        snprintf(loss, sizeof(loss), "loss %.4f", t.loss);
    printf("tidal run: %d moves to serving, %d to training; realloc to serving p50 %.1f ms, "
           "p95 %.1f ms; training at step %lld, %s; last checkpoint %s\n",
           t.moves_to_serve, t.moves_to_train, serve_quantile(mv.ms, n, 0.5),
           serve_quantile(mv.ms, n, 0.95), (long long)t.step, loss,
           t.latest[0] ? t.latest : "(none)");
    printf("tidal run: moves to serving against the training step they waited for + 10 ms: p50 "
           "%.2f, p95 %.2f, worst %.2f of it (%d moves); against the step before the decision "
           "+ 10 ms: p50 %.2f, p95 %.2f\n",
           serve_quantile(mv.over_budget, n, 0.5), serve_quantile(mv.over_budget, n, 0.95),
           n ? mv.over_budget[n - 1] : 0.0, mv.n, serve_quantile(mv.over_prev, n, 0.5),
           serve_quantile(mv.over_prev, n, 0.95));
    printf("tidal run: training: %lld steps in this job, %.1f images/s over %.1f s\n",
           (long long)(t.step - t.first_step),
           elapsed > 0 ? (double)(t.step - t.first_step) * k->o.batch / elapsed : 0.0, elapsed);
    if (t.regroups || t.restarts)
        printf("tidal run: training lost members: it went on without them %d time%s, and took "
               "up again from a checkpoint %d time%s after every member died\n",
               t.regroups, t.regroups == 1 ? "" : "s", t.restarts, t.restarts == 1 ? "" : "s");
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "gnuplot -e \"set terminal png size 1000,700; set output '%s/timeline.png'; "
             "set datafile separator ','; set multiplot layout 3,1 title 'tidal run'; "
             "set key top left; set ylabel 'ranks'; "
             "plot '%s/timeline.csv' using 1:2 with steps title 'serving', '' using 1:3 with "
             "steps title 'training', '' using 1:11 with steps title 'dead'; "
             "set ylabel 'images/s'; plot '' using 1:7 with lines "
             "title 'training images/s'; set ylabel 'requests'; set xlabel 'seconds'; "
             "plot '' using 1:5 with steps title 'requests in the scheduler', '' using 1:4 with "
             "lines title 'waiting in the queue', '' using 1:10 with steps title "
             "'SLO violations'; unset multiplot\" 2>/dev/null",
             k->out, k->out);
    if (system(cmd) != 0)
        TDL_WARN("gnuplot did not draw %s/timeline.png (install gnuplot-nox); timeline.csv is "
                 "there",
                 k->out);
    else
        printf("tidal run: timeline in %s/timeline.csv and %s/timeline.png\n", k->out, k->out);
    sample_grid(k, t.latest);
}

tdl_status_t coord_colocate_demo_trace(int workers, uint64_t seed, int steps, int max_resolution,
                                       const char *path)
{
    coord_workload_config_t wc;
    coord_workload_config_default(&wc);
    wc.ranks = TDL_MAX(1, workers);
    wc.requests = 0;
    wc.seed = seed;
    wc.mix[0] = 0.8, wc.mix[1] = 0.2, wc.mix[2] = 0; /* 32 and 64 pixels */
    if (max_resolution < 64) /* what the server takes */
        wc.mix[0] = 1, wc.mix[1] = 0;
    wc.steps[0] = wc.steps[1] = steps;
    /* loads of the built-in cost model's capacity (about 5 requests/s of this mix on 3
     * workers), which is several times what a small machine shared with training serves:
     * 0.2 requests/s between bursts of 1.5/s; deadlines 8x the model's single-rank time */
    const double load[] = {0.04, 0.3, 0.04, 0.3, 0.04}, secs[] = {20, 10, 25, 10, 20};
    wc.alpha[0] = wc.alpha[1] = wc.alpha[2] = 8;
    wc.nphases = 5;
    for (int i = 0; i < wc.nphases; i++)
        wc.phase_load[i] = load[i], wc.phase_s[i] = secs[i];
    coord_cost_model_t cost;
    coord_cost_model_default(&cost);
    coord_workload_request_t *reqs = NULL;
    int n = 0;
    tdl_status_t st = coord_workload_generate(&wc, &cost, &reqs, &n);
    if (st == TDL_OK)
        st = coord_workload_write(path, reqs, n);
    free(reqs);
    return st;
}
