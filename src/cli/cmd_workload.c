/* `tidal workload`: a trace of timed requests (JSON lines that `tidal serve --trace` reads). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "coord/cost.h"
#include "coord/workload.h"

static const tdl_param_def_t workload_params[] = {
    {"output", TDL_PARAM_STRING, "-", "where the trace goes (-o; '-': standard output)", NULL, 1,
     0},
    {"ranks", TDL_PARAM_INT, "8", "ranks of the cluster the load is relative to", NULL, 1, 1 << 20},
    {"load", TDL_PARAM_DOUBLE, "1.0",
     "arrival rate as a fraction of the cluster's single-rank capacity", NULL, 1e-6, 1e6},
    {"requests", TDL_PARAM_INT, "1000", "requests (0 with --phases: until the phases end)", NULL, 0,
     1e8},
    {"phases", TDL_PARAM_STRING, NULL,
     "piecewise Poisson: LOAD:SECONDS,... (e.g. 0.5:60,1.5:30), repeated until --requests", NULL, 1,
     0},
    {"mix", TDL_PARAM_STRING, "0.5,0.3,0.2", "shares of classes S, M, L (32, 64, 128 pixels)", NULL,
     1, 0},
    {"alpha", TDL_PARAM_STRING, "1.5,2,6",
     "deadline per class S, M, L: arrival + alpha x single-rank time (0: no deadline)", NULL, 1, 0},
    {"class-steps", TDL_PARAM_STRING, "20,30,50", "denoising steps of classes S, M, L", NULL, 1, 0},
    {"class-priority", TDL_PARAM_STRING, "2,1,0", "priority of classes S, M, L", NULL, 1, 0},
    {"seed", TDL_PARAM_INT, "1", "seed of the arrivals, classes, labels and request seeds", NULL, 0,
     9.2e18},
    {"cost", TDL_PARAM_STRING, NULL,
     "cost model JSON for the single-rank times (default: the built-in model)", NULL, 1, 0},
};

/* Three comma-separated numbers. */
static bool parse3(const char *text, double out[3])
{
    const char *p = text;
    for (int k = 0; k < 3; k++) {
        char *end;
        out[k] = strtod(p, &end);
        if (end == p || (k < 2 && *end != ',') || (k == 2 && *end))
            return false;
        p = end + 1;
    }
    return true;
}

static int workload_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos)
        return cli_usage_error("'tidal workload' takes no positional argument ('%s')", pos[0]);
    coord_workload_config_t c;
    coord_workload_config_default(&c);
    c.ranks = (int)tdl_param_int(params, "ranks");
    c.load = tdl_param_double(params, "load");
    c.requests = (int)tdl_param_int(params, "requests");
    c.seed = (uint64_t)tdl_param_int(params, "seed");
    double v[3];
    static const char *const lists[] = {"mix", "alpha", "class-steps", "class-priority"};
    for (int i = 0; i < 4; i++) {
        if (!parse3(tdl_param_str(params, lists[i]), v))
            return cli_usage_error("--%s '%s': want three numbers for S, M, L, e.g. 1,2,3",
                                   lists[i], tdl_param_str(params, lists[i]));
        for (int k = 0; k < 3; k++) {
            if (i == 0 || i == 1) {
                if (v[k] < 0)
                    return cli_usage_error("--%s: values must be >= 0", lists[i]);
                (i == 0 ? c.mix : c.alpha)[k] = v[k];
            } else if (i == 2) {
                if (v[k] < 1 || v[k] > 1000 || v[k] != (int)v[k])
                    return cli_usage_error("--class-steps: integers in 1..1000");
                c.steps[k] = (int)v[k];
            } else {
                if (v[k] < -1e6 || v[k] > 1e6 || v[k] != (int)v[k])
                    return cli_usage_error("--class-priority: integers in -1000000..1000000");
                c.priority[k] = (int)v[k];
            }
        }
    }
    if (c.mix[0] + c.mix[1] + c.mix[2] <= 0)
        return cli_usage_error("--mix: at least one share must be positive");
    const char *ph = tdl_param_str(params, "phases");
    if (ph) {
        const char *p = ph;
        while (*p) {
            char *end;
            if (c.nphases == COORD_WORKLOAD_MAX_PHASES)
                return cli_usage_error("--phases: at most %d phases", COORD_WORKLOAD_MAX_PHASES);
            double l = strtod(p, &end);
            if (end == p || *end != ':' || !(l >= 0))
                return cli_usage_error("--phases '%s': want LOAD:SECONDS,...", ph);
            p = end + 1;
            double sec = strtod(p, &end);
            if (end == p || (*end && *end != ',') || !(sec > 0))
                return cli_usage_error("--phases '%s': want LOAD:SECONDS,... with SECONDS > 0", ph);
            c.phase_load[c.nphases] = l;
            c.phase_s[c.nphases++] = sec;
            p = *end ? end + 1 : end;
        }
        if (!c.nphases)
            return cli_usage_error("--phases: empty");
    } else if (c.requests == 0) {
        return cli_usage_error("--requests 0 needs --phases");
    }
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
    if (coord_workload_generate(&c, &cost, &reqs, &n) != TDL_OK)
        return cli_usage_error("%s", tdl_error_get());
    tdl_status_t st = coord_workload_write(tdl_param_str(params, "output"), reqs, n);
    free(reqs);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: workload: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    if (strcmp(tdl_param_str(params, "output"), "-"))
        fprintf(stderr,
                "tidal workload: %d requests to %s (capacity %.3f requests/s at %d ranks)\n", n,
                tdl_param_str(params, "output"), coord_workload_capacity_rps(&c, &cost), c.ranks);
    return CLI_EXIT_OK;
}

const cli_command_t cli_cmd_workload = {
    .name = "workload",
    .summary = "write a trace of timed requests (classes S, M, L; Poisson or piecewise arrivals)",
    .usage = "tidal workload [-o FILE] [--ranks N] [--load L | --phases L:S,...] [--requests K] "
             "[--mix S,M,L] [--alpha S,M,L] [--seed N] [--cost MODEL.json]",
    .params = workload_params,
    .nparams = TDL_ARRAY_SIZE(workload_params),
    .run = workload_run,
};
