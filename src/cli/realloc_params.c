/* The reallocation parameters that tidal run and tidal sim --colocate share (cli.h). */
#include "config.h"

#include <time.h>

#include "cli/cli.h"

const tdl_param_def_t cli_realloc_params[CLI_REALLOC_NPARAMS] = {
    {"realloc", TDL_PARAM_STRING, "slo_first",
     "how many ranks serve: slo_first (serving first while it needs them, hysteresis), static "
     "(--serve-ranks) or schedule (--schedule, a share per hour of the day)",
     NULL, 1, 0},
    {"serve-ranks", TDL_PARAM_INT, "1", "with --realloc static: ranks that always serve", NULL, 0,
     1 << 20},
    {"min-train", TDL_PARAM_INT, "0",
     "ranks that always train while training runs (0: a tenth of the workers, at least 1: the "
     "global batch is fixed, so fewer members take longer steps, and a rank moving either way "
     "waits for the step under way)",
     NULL, 0, 1 << 20},
    {"min-serve", TDL_PARAM_INT, "0", "ranks that always serve", NULL, 0, 1 << 20},
    {"drain", TDL_PARAM_DOUBLE, "2",
     "slo_first: serving gets enough ranks to clear its backlog within this many seconds", NULL,
     0.01, 1e6},
    {"cooldown", TDL_PARAM_DOUBLE, "3",
     "slo_first: seconds serving must need fewer ranks before one goes back to training", NULL, 0,
     1e6},
    {"schedule", TDL_PARAM_STRING, "0:0.2,8:0.6,20:0.2",
     "with --realloc schedule: HOUR:SHARE,... the share of the workers serving from each hour of "
     "the day on (serving by day, training by night)",
     NULL, 1, 0},
    {"day-seconds", TDL_PARAM_DOUBLE, "86400",
     "with --realloc schedule: seconds a day lasts (less: a compressed day, as tidal workload "
     "--diurnal writes)",
     NULL, 1, 1e9},
    {"start-hour", TDL_PARAM_DOUBLE, "-1",
     "with --realloc schedule: the hour of the day at the start (-1: tidal run the local clock's, "
     "tidal sim 0)",
     NULL, -1, 24},
};

int cli_realloc_opts(tdl_params_t *params, bool wall, const coord_realloc_ops_t **ops,
                     coord_realloc_opts_t *opts, int *min_train, int *min_serve)
{
    const char *name = tdl_param_str(params, "realloc");
    *ops = coord_realloc_find(name);
    if (!*ops)
        return cli_usage_error("unknown --realloc '%s': use one of %s", name,
                               coord_realloc_names());
    *opts = (coord_realloc_opts_t){.drain_s = tdl_param_double(params, "drain"),
                                   .cooldown_s = tdl_param_double(params, "cooldown"),
                                   .static_serve = (int)tdl_param_int(params, "serve-ranks"),
                                   .day_s = tdl_param_double(params, "day-seconds"),
                                   .start_h = tdl_param_double(params, "start-hour")};
    if (coord_realloc_schedule_parse(tdl_param_str(params, "schedule"), opts) != TDL_OK)
        return cli_usage_error("--%s", tdl_error_get());
    if (opts->start_h < 0 && wall) {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        opts->start_h = tm.tm_hour + tm.tm_min / 60.0 + tm.tm_sec / 3600.0;
    } else if (opts->start_h < 0) {
        opts->start_h = 0;
    }
    if (opts->start_h >= 24)
        return cli_usage_error("--start-hour %g: want 0 .. 24 (or -1)", opts->start_h);
    *min_train = (int)tdl_param_int(params, "min-train");
    *min_serve = (int)tdl_param_int(params, "min-serve");
    return CLI_EXIT_OK;
}
