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
    {"requests", TDL_PARAM_INT, "1000",
     "requests (0 with --phases: until the phases end; with --diurnal: one day unless given, and "
     "a count beyond the day's repeats the day)",
     NULL, 0, 1e8},
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
    {"diurnal", TDL_PARAM_BOOL, "false",
     "a day-long trace: Poisson arrivals whose rate follows a daily cosine with bursts, --load its "
     "mean over the day (bursts included); at_ms 0 is midnight",
     NULL, 1, 0},
    {"day-seconds", TDL_PARAM_DOUBLE, "86400",
     "with --diurnal: seconds a day lasts (less: a compressed day, the same shape in less time)",
     NULL, 1, 1e9},
    {"peak-to-trough", TDL_PARAM_DOUBLE, "4",
     "with --diurnal: the peak rate over the trough rate (1: flat), bursts aside", NULL, 1, 1e6},
    {"peak-hour", TDL_PARAM_DOUBLE, "14",
     "with --diurnal: the hour of the day of the peak, 0 .. 24 (the trough is 12 hours away)", NULL,
     0, 24},
    {"bursts", TDL_PARAM_INT, "0",
     "with --diurnal: bursts in the day, at hours drawn from --seed (or --burst-hours)", NULL, 0,
     COORD_WORKLOAD_MAX_BURSTS},
    {"burst-height", TDL_PARAM_DOUBLE, "3",
     "with --diurnal: the rate is multiplied by this during a burst (overlaps do not compound)",
     NULL, 1, 100},
    {"burst-minutes", TDL_PARAM_DOUBLE, "10",
     "with --diurnal: minutes of day-time a burst lasts (scaled with --day-seconds), over 0 and at "
     "most 1440",
     NULL, 0, 1440},
    {"burst-hours", TDL_PARAM_STRING, NULL,
     "with --diurnal: the bursts' start hours H,... (e.g. 9.5,17), instead of drawn ones; each "
     "burst ends by midnight",
     NULL, 1, 0},
};

static const char *const diurnal_only[] = {"day-seconds",  "peak-to-trough", "peak-hour",  "bursts",
                                           "burst-height", "burst-minutes",  "burst-hours"};

/* --diurnal and its options into c->diurnal: CLI_EXIT_OK or CLI_EXIT_USAGE. */
static int diurnal_opts(tdl_params_t *params, coord_workload_config_t *c)
{
    coord_workload_diurnal_t *d = &c->diurnal;
    d->on = tdl_param_bool(params, "diurnal");
    if (!d->on) {
        /* on the command line they would be ignored unnoticed; from the environment or a config
         * file they may be meant for another command (tidal run shares --day-seconds) */
        for (size_t i = 0; i < TDL_ARRAY_SIZE(diurnal_only); i++)
            if (tdl_params_source(params, diurnal_only[i]) == TDL_PARAM_SRC_CMDLINE)
                return cli_usage_error("--%s needs --diurnal", diurnal_only[i]);
        return CLI_EXIT_OK;
    }
    if (tdl_params_source(params, "requests") == TDL_PARAM_SRC_DEFAULT)
        c->requests = 0;
    d->day_s = tdl_param_double(params, "day-seconds");
    d->peak_to_trough = tdl_param_double(params, "peak-to-trough");
    d->peak_hour = tdl_param_double(params, "peak-hour");
    d->nbursts = (int)tdl_param_int(params, "bursts");
    d->burst_height = tdl_param_double(params, "burst-height");
    d->burst_minutes = tdl_param_double(params, "burst-minutes");
    const char *hours = tdl_param_str(params, "burst-hours");
    if (hours) {
        int nh = 0;
        for (const char *p = hours;;) {
            char *end;
            if (nh == COORD_WORKLOAD_MAX_BURSTS)
                return cli_usage_error("--burst-hours: at most %d bursts",
                                       COORD_WORKLOAD_MAX_BURSTS);
            d->burst_hour[nh] = strtod(p, &end);
            if (end == p || (*end && *end != ','))
                return cli_usage_error("--burst-hours '%s': want hours H,... e.g. 9.5,17", hours);
            nh++;
            if (!*end)
                break;
            p = end + 1;
        }
        if (tdl_params_source(params, "bursts") != TDL_PARAM_SRC_DEFAULT && d->nbursts != nh)
            return cli_usage_error("--bursts %d but --burst-hours names %d", d->nbursts, nh);
        d->nbursts = nh;
        d->burst_hours_given = 1;
    }
    return CLI_EXIT_OK;
}

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
    }
    int rc = diurnal_opts(params, &c);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (coord_workload_config_check(&c) != TDL_OK)
        return cli_usage_error("%s", tdl_error_get());
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
    if (strcmp(tdl_param_str(params, "output"), "-")) {
        fprintf(stderr, "tidal workload: %d requests to %s (capacity %.3f requests/s at %d ranks)",
                n, tdl_param_str(params, "output"), coord_workload_capacity_rps(&c, &cost),
                c.ranks);
        coord_workload_curve_t k;
        if (c.diurnal.on && coord_workload_curve_init(&c, &cost, &k) == TDL_OK) {
            fprintf(stderr, "; a day of %g s, %.3f requests/s at the trough to %.3f at %g h",
                    k.day_s, k.base_rps * (1 - k.amplitude), k.base_rps * (1 + k.amplitude),
                    k.peak_hour);
            for (int i = 0; i < k.nbursts; i++)
                fprintf(stderr, "%s%.2f", i ? ", " : "; bursts at hours ", k.burst_hour[i]);
        }
        fprintf(stderr, "\n");
    }
    return CLI_EXIT_OK;
}

const cli_command_t cli_cmd_workload = {
    .name = "workload",
    .summary = "write a trace of timed requests (classes S, M, L; Poisson, piecewise or diurnal "
               "arrivals)",
    .usage = "tidal workload [-o FILE] [--ranks N] [--load L | --phases L:S,...] [--requests K] "
             "[--diurnal [--day-seconds S] [--peak-to-trough R] [--peak-hour H] [--bursts N] "
             "[--burst-height X] [--burst-minutes M] [--burst-hours H,...]] [--mix S,M,L] "
             "[--alpha S,M,L] [--seed N] [--cost MODEL.json]",
    .params = workload_params,
    .nparams = TDL_ARRAY_SIZE(workload_params),
    .run = workload_run,
};
