/* `tidal sim`: the coordinator's policies on a trace, in a discrete-event simulation. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "coord/cost.h"
#include "coord/policy.h"
#include "coord/sim.h"
#include "coord/train_model.h"
#include "coord/workload.h"
#include "serve/wire.h"

static const tdl_param_def_t sim_params[] = {
    {"ranks", TDL_PARAM_INT, "8", "serving ranks simulated", NULL, 1, 1 << 20},
    {"policy", TDL_PARAM_STRING, "edf_best_fit",
     "placement policy: static_sp1, static_sp2, static_sp4, static_sp8, fcfs, sjf, srtf, "
     "edf_greedy, edf_best_fit, edf_priority",
     NULL, 1, 0},
    {"trace", TDL_PARAM_STRING, NULL, "JSON-lines trace (tidal workload, or serve's --trace)", NULL,
     1, 0},
    {"cost", TDL_PARAM_STRING, NULL,
     "cost model JSON (tidal profile; doc/scheduler.md); default: the built-in model", NULL, 1, 0},
    {"chunk", TDL_PARAM_INT, "1", "denoising steps per STEP_CHUNK task (tidal serve's default too)",
     NULL, 1, 1000},
    {"max-batch", TDL_PARAM_INT, "8",
     "batched chunks: waiting requests of one resolution and sampler join a chunk while all "
     "their images fit in this many rows, as tidal serve --max-batch batches them",
     NULL, 2, 4096},
    {"batching", TDL_PARAM_BOOL, "true",
     "batched chunks as tidal serve under mpirun takes them (--no-batching: one request a "
     "task)",
     NULL, 0, 0},
    {"request-log", TDL_PARAM_STRING, NULL,
     "a JSON line per request (seq, arrival_s, finish_s, latency_s, ok), as tidal serve "
     "--request-log writes",
     NULL, 1, 0},
    {"format", TDL_PARAM_ENUM, "text", "text: one summary line; csv: a header and a row",
     "text|csv", 1, 0},
    {"replay", TDL_PARAM_STRING, NULL,
     "instead of simulating: feed the events of a coordinator's --event-log (tidal serve, tidal "
     "run, tidal sim) to the same coordinator code, writing its own log to --event-log",
     NULL, 1, 0},
    {"event-log", TDL_PARAM_STRING, NULL,
     "the coordinator's events and commands, a line each (as tidal run --event-log writes)", NULL,
     1, 0},
    {"colocate", TDL_PARAM_BOOL, "false",
     "the ranks are tidal run's workers: all train at first, and the reallocation policy "
     "(--realloc) moves them to serving and back, training costed by --train-model",
     NULL, 0, 0},
    {"train-model", TDL_PARAM_STRING, NULL,
     "with --colocate: JSON with a \"train\" object (tidal profile --train); default: --cost's, "
     "else the built-in model of the tiny DiT",
     NULL, 1, 0},
    {"train-batch", TDL_PARAM_INT, "0",
     "with --colocate: the global batch of a training step (0: the training model's); more ranks "
     "than images a step cannot all train",
     NULL, 0, 1 << 30},
    {"train-steps", TDL_PARAM_INT, "0",
     "with --colocate: training's last step (0: it goes on until the trace is served)", NULL, 0,
     1e15},
    {"timeline", TDL_PARAM_STRING, NULL,
     "with --colocate: a CSV row every --timeline-every simulated seconds (ranks per role, "
     "training images/s, arrivals/s)",
     NULL, 1, 0},
    {"timeline-every", TDL_PARAM_DOUBLE, "60", "simulated seconds between timeline rows", NULL,
     0.001, 1e9},
};

/* The timeline as a picture beside it (FILE.png for FILE.csv), drawn by gnuplot where it is
 * installed: ranks serving and training over the hours of the day, the arrival rate on the right
 * axis, and training's images/s below. */
static void timeline_plot(const char *csv, double day_s, int ranks)
{
    char png[4096];
    size_t len = strlen(csv);
    if (len > 4 && strcmp(csv + len - 4, ".csv") == 0)
        snprintf(png, sizeof(png), "%.*s.png", (int)(len - 4), csv);
    else
        snprintf(png, sizeof(png), "%s.png", csv);
    if (strpbrk(csv, "'\"\\$`") || strpbrk(png, "'\"\\$`")) {
        TDL_WARN("--timeline %s: no plot of a path with quotes in it", csv);
        return;
    }
    double h = day_s > 0 ? 24 / day_s : 1 / 3600.0; /* hours of the day per simulated second */
    char cmd[16384];
    snprintf(cmd, sizeof(cmd),
             "gnuplot -e \"set terminal png size 1100,800; set output '%s'; "
             "set datafile separator ','; set multiplot layout 2,1 title 'tidal sim --colocate, "
             "%d ranks'; set key below horizontal; set lmargin 10; set rmargin 10; "
             "set xrange [0:%s]; set ylabel 'ranks'; set yrange [0:%d]; "
             "set y2label 'arrivals/s'; set y2tics; set ytics nomirror; "
             "plot '%s' using (\\$1*%.12g):2 with steps title 'serving', '' using "
             "(\\$1*%.12g):3 with steps title 'training', '' using (\\$1*%.12g):7 axes x1y2 "
             "with lines title 'arrivals/s (right)'; unset y2tics; unset y2label; "
             "set yrange [*:*]; set ytics mirror; set ylabel 'training images/s'; "
             "set xlabel 'hour of the day'; plot '' using (\\$1*%.12g):6 with lines notitle; "
             "unset multiplot\" 2>/dev/null",
             png, ranks, day_s > 0 ? "24" : "*", ranks, csv, h, h, h, h);
    if (system(cmd) != 0)
        TDL_WARN("gnuplot did not draw %s (install gnuplot-nox); %s is there", png, csv);
    else
        fprintf(stderr, "tidal sim: timeline in %s and %s\n", csv, png);
}

static int sim_run_cmd(tdl_params_t *params, int npos, char **pos)
{
    if (npos)
        return cli_usage_error("'tidal sim' takes no positional argument ('%s')", pos[0]);
    const char *replay = tdl_param_str(params, "replay"),
               *elog = tdl_param_str(params, "event-log");
    FILE *ef = NULL;
    if (!replay && !tdl_param_str(params, "trace"))
        return cli_usage_error("'tidal sim' needs --trace FILE (see 'tidal workload') or --replay "
                               "LOG");
    if (replay) { /* the log's header says the rest */
        if (elog && !(ef = fopen(elog, "w"))) {
            fprintf(stderr, "tidal: --event-log %s: %s\n", elog, strerror(errno));
            return CLI_EXIT_FAILURE;
        }
        coord_config_t cc = {.event_log = ef};
        tdl_status_t st = coord_replay(replay, &cc);
        if (ef && fclose(ef) != 0 && st == TDL_OK)
            st = tdl_error_raise(TDL_ERR_IO, "--event-log %s: %s", elog, strerror(errno));
        if (st != TDL_OK) {
            fprintf(stderr, "tidal: --replay: %s\n", tdl_error_get());
            return st == TDL_ERR_CORRUPT || st == TDL_ERR_NOT_FOUND || st == TDL_ERR_MISMATCH
                       ? CLI_EXIT_USAGE
                       : CLI_EXIT_FAILURE;
        }
        printf("tidal sim: replayed %s%s%s\n", replay, elog ? " into " : "", elog ? elog : "");
        return CLI_EXIT_OK;
    }
    const char *trace = tdl_param_str(params, "trace");
    const char *pname = tdl_param_str(params, "policy");
    const coord_policy_ops_t *policy = coord_policy_find(pname);
    if (!policy)
        return cli_usage_error("unknown --policy '%s': use one of %s", pname, coord_policy_names());
    coord_cost_model_t cost;
    const char *cpath = tdl_param_str(params, "cost");
    if (cpath) {
        if (coord_cost_model_load(cpath, &cost) != TDL_OK)
            return cli_usage_error("%s", tdl_error_get());
    } else {
        coord_cost_model_default(&cost);
    }
    coord_workload_request_t *reqs = NULL;
    int n = 0;
    if (coord_workload_read(trace, &reqs, &n) != TDL_OK)
        return cli_usage_error("%s", tdl_error_get());
    coord_sim_config_t cfg = {.ranks = (int)tdl_param_int(params, "ranks"),
                              .chunk = (int)tdl_param_int(params, "chunk"),
                              .batch_rows = tdl_param_bool(params, "batching")
                                                ? (int)tdl_param_int(params, "max-batch")
                                                : 0,
                              .cost = &cost,
                              .policy = policy};
    coord_train_model_t tm;
    FILE *timeline = NULL;
    bool colocate = tdl_param_bool(params, "colocate");
    if (colocate) {
        int rc = cli_realloc_opts(params, false, &cfg.realloc, &cfg.realloc_opts, &cfg.min_train,
                                  &cfg.min_serve);
        if (rc != CLI_EXIT_OK) {
            free(reqs);
            return rc;
        }
        if (cfg.ranks > SERVE_WIRE_MAX_WORKERS ||
            cfg.ranks <= coord_min_train(cfg.ranks, cfg.min_train)) {
            free(reqs);
            return cli_usage_error("--colocate: --ranks %d: want more than --min-train %d and at "
                                   "most %d",
                                   cfg.ranks, coord_min_train(cfg.ranks, cfg.min_train),
                                   SERVE_WIRE_MAX_WORKERS);
        }
        const char *tpath = tdl_param_str(params, "train-model");
        tdl_status_t ts = TDL_ERR_NOT_FOUND;
        if (tpath || cpath)
            ts = coord_train_model_load(tpath ? tpath : cpath, &tm);
        if (ts == TDL_ERR_NOT_FOUND && !tpath) {
            coord_train_model_default(&tm);
        } else if (ts != TDL_OK) {
            free(reqs);
            return cli_usage_error("--train-model: %s", tdl_error_get());
        }
        if (tdl_param_int(params, "train-batch") > 0)
            tm.batch = (int)tdl_param_int(params, "train-batch");
        cfg.train = &tm;
        cfg.train_steps = tdl_param_int(params, "train-steps");
        const char *tl = tdl_param_str(params, "timeline");
        if (tl && !(timeline = fopen(tl, "w"))) {
            free(reqs);
            fprintf(stderr, "tidal: --timeline %s: %s\n", tl, strerror(errno));
            return CLI_EXIT_FAILURE;
        }
        cfg.timeline = timeline;
        cfg.row_s = tdl_param_double(params, "timeline-every");
    }
    if (elog && !(ef = fopen(elog, "w"))) {
        fprintf(stderr, "tidal: --event-log %s: %s\n", elog, strerror(errno));
        free(reqs);
        if (timeline)
            fclose(timeline);
        return CLI_EXIT_FAILURE;
    }
    cfg.event_log = ef;
    coord_sim_result_t r;
    double t0 = tdl_clock_s();
    double *finish = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    tdl_status_t st = finish ? coord_sim_run(&cfg, reqs, n, &r, finish)
                             : tdl_error_raise(TDL_ERR_NOMEM, "sim: out of memory");
    double wall = tdl_clock_s() - t0;
    const char *log_path = tdl_param_str(params, "request-log");
    if (st == TDL_OK && log_path) {
        FILE *f = fopen(log_path, "w");
        if (!f)
            st = tdl_error_raise(TDL_ERR_IO, "--request-log %s: %s", log_path, strerror(errno));
        for (int i = 0; f && i < n; i++) {
            double at = reqs[i].at_ms / 1000.0;
            fprintf(f,
                    "{\"seq\": %d, \"resolution\": %d, \"arrival_s\": %.6f, \"finish_s\": "
                    "%.6f, \"latency_s\": %.6f, \"ok\": true}\n",
                    i, reqs[i].resolution, at, finish[i], finish[i] - at);
        }
        if (f && fclose(f) != 0)
            st = tdl_error_raise(TDL_ERR_IO, "--request-log %s: %s", log_path, strerror(errno));
    }
    free(finish);
    free(reqs);
    if (timeline && fclose(timeline) != 0 && st == TDL_OK)
        st = tdl_error_raise(TDL_ERR_IO, "--timeline: %s", strerror(errno));
    if (timeline && st == TDL_OK)
        timeline_plot(tdl_param_str(params, "timeline"), cfg.realloc_opts.day_s, cfg.ranks);
    if (ef && fclose(ef) != 0 && st == TDL_OK)
        st = tdl_error_raise(TDL_ERR_IO, "--event-log %s: %s", elog, strerror(errno));
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    bool csv = !strcmp(tdl_param_str(params, "format"), "csv");
    if (colocate && csv) {
        printf("policy,realloc,ranks,requests,end_s,mean_s,p50_s,p95_s,p99_s,slo_violation_rate,"
               "train_device_h,train_steps,train_images_per_s,moves_to_serve,moves_to_train,"
               "moves_per_h,sim_wall_s,with_deadline,slo_violations\n");
        printf("%s,%s,%d,%d,%.3f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f,%lld,%.4f,%d,%d,%.3f,%.3f,%d,%d\n",
               policy->name, cfg.realloc->name, cfg.ranks, r.requests, r.end_s, r.mean_s, r.p50_s,
               r.p95_s, r.p99_s, r.slo_violation_rate, r.train_device_h, (long long)r.train_steps,
               r.train_images_per_s, r.moves_to_serve, r.moves_to_train, r.moves_per_h, wall,
               r.with_deadline, r.slo_violations);
        return CLI_EXIT_OK;
    }
    if (colocate)
        printf("tidal sim: %s co-located on %d ranks over %.1f s: training %.2f device-hours, "
               "%lld steps (%.1f images/s); %d moves to serving, %d to training (%.1f an hour)\n",
               cfg.realloc->name, cfg.ranks, r.end_s, r.train_device_h, (long long)r.train_steps,
               r.train_images_per_s, r.moves_to_serve, r.moves_to_train, r.moves_per_h);
    if (csv) {
        printf("policy,ranks,requests,makespan_s,throughput_rps,goodput_rps,mean_s,p50_s,p95_s,"
               "p99_s,slo_violation_rate,utilization,tasks,migrations,sim_wall_s,batches,"
               "batched\n");
        printf("%s,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%ld,%ld,%.3f,%ld,%ld\n",
               policy->name, cfg.ranks, r.requests, r.makespan_s, r.throughput_rps, r.goodput_rps,
               r.mean_s, r.p50_s, r.p95_s, r.p99_s, r.slo_violation_rate, r.utilization, r.tasks,
               r.migrations, wall, r.batches, r.batched);
    } else {
        printf("tidal sim: %s on %d ranks: %d requests in %.3f s (%.3f/s, %.3f met their "
               "deadline/s); latency mean %.4f s, p50 %.4f, p95 %.4f, p99 %.4f; SLO violations "
               "%d of %d (%.1f%%); utilization %.1f%%; %ld tasks, %ld migrations (%.4f s), "
               "%ld batched chunks (%ld requests); simulated in %.2f s\n",
               policy->name, cfg.ranks, r.requests, r.makespan_s, r.throughput_rps, r.goodput_rps,
               r.mean_s, r.p50_s, r.p95_s, r.p99_s, r.slo_violations, r.with_deadline,
               100 * r.slo_violation_rate, 100 * r.utilization, r.tasks, r.migrations,
               r.migration_s, r.batches, r.batched, wall);
    }
    return CLI_EXIT_OK;
}

const cli_command_t cli_cmd_sim = {
    .name = "sim",
    .summary = "simulate the serving coordinator: a policy on a trace, with the cost model; "
               "with --colocate, tidal run's training and reallocation too",
    .usage = "tidal sim --trace FILE [--ranks N] [--policy NAME] [--cost MODEL.json] [--chunk K] "
             "[--format text|csv] [--colocate [--realloc NAME] [--train-model FILE] "
             "[--timeline FILE]]",
    .params = sim_params,
    .nparams = TDL_ARRAY_SIZE(sim_params),
    .shared = {cli_realloc_params},
    .nshared = {CLI_REALLOC_NPARAMS},
    .run = sim_run_cmd,
};
