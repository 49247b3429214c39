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
#include "coord/workload.h"

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
    {"request-log", TDL_PARAM_STRING, NULL,
     "a JSON line per request (seq, arrival_s, finish_s, latency_s, ok), as tidal serve "
     "--request-log writes",
     NULL, 1, 0},
    {"format", TDL_PARAM_ENUM, "text", "text: one summary line; csv: a header and a row",
     "text|csv", 1, 0},
};

static int sim_run_cmd(tdl_params_t *params, int npos, char **pos)
{
    if (npos)
        return cli_usage_error("'tidal sim' takes no positional argument ('%s')", pos[0]);
    const char *trace = tdl_param_str(params, "trace");
    if (!trace)
        return cli_usage_error("'tidal sim' needs --trace FILE (see 'tidal workload')");
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
                              .cost = &cost,
                              .policy = policy};
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
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    if (!strcmp(tdl_param_str(params, "format"), "csv")) {
        printf("policy,ranks,requests,makespan_s,throughput_rps,goodput_rps,mean_s,p50_s,p95_s,"
               "p99_s,slo_violation_rate,utilization,tasks,migrations,sim_wall_s\n");
        printf("%s,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%ld,%ld,%.3f\n", policy->name,
               cfg.ranks, r.requests, r.makespan_s, r.throughput_rps, r.goodput_rps, r.mean_s,
               r.p50_s, r.p95_s, r.p99_s, r.slo_violation_rate, r.utilization, r.tasks,
               r.migrations, wall);
    } else {
        printf("tidal sim: %s on %d ranks: %d requests in %.3f s (%.3f/s, %.3f met their "
               "deadline/s); latency mean %.4f s, p50 %.4f, p95 %.4f, p99 %.4f; SLO violations "
               "%d of %d (%.1f%%); utilization %.1f%%; %ld tasks, %ld migrations (%.4f s); "
               "simulated in %.2f s\n",
               policy->name, cfg.ranks, r.requests, r.makespan_s, r.throughput_rps, r.goodput_rps,
               r.mean_s, r.p50_s, r.p95_s, r.p99_s, r.slo_violations, r.with_deadline,
               100 * r.slo_violation_rate, 100 * r.utilization, r.tasks, r.migrations,
               r.migration_s, wall);
    }
    return CLI_EXIT_OK;
}

const cli_command_t cli_cmd_sim = {
    .name = "sim",
    .summary = "simulate the serving coordinator: a policy on a trace, with the cost model",
    .usage = "tidal sim --trace FILE [--ranks N] [--policy NAME] [--cost MODEL.json] [--chunk K] "
             "[--format text|csv]",
    .params = sim_params,
    .nparams = TDL_ARRAY_SIZE(sim_params),
    .run = sim_run_cmd,
};
