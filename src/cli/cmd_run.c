/* `tidal run`: the main job. Rank 0 coordinates: it serves requests (HTTP, a trace, or a
 * built-in demo trace with bursts) as `tidal serve` does, and a reallocation policy decides
 * how many worker ranks serve; the others train the DiT data-parallel over gfc, and ranks move
 * between the two at training step boundaries (src/coord: coord.c decides, rank0.c, colocate.c
 * and worker.c carry it out). doc/colocation.md. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "coord/job.h"

static const tdl_param_def_t run_params[] = {
    {"train-steps", TDL_PARAM_INT, "600", "optimizer steps of the training run", NULL, 0, 1e12},
    {"batch", TDL_PARAM_INT, "32", "global batch (images per step, whatever the rank count)", NULL,
     1, 1 << 20},
    {"micro-batch", TDL_PARAM_INT, "16", "images per forward pass on one rank", NULL, 1, 1 << 16},
    {"out", TDL_PARAM_STRING, "runs/run",
     "output directory: loss.csv, timeline.csv and timeline.png, samples.png, ckpt/", NULL, 1, 0},
    {"ckpt-every", TDL_PARAM_INT, "100", "checkpoint every N training steps (and at the end)", NULL,
     1, 1e12},
    {"keep", TDL_PARAM_INT, "3", "checkpoints kept", NULL, 1, 1e6},
    {"demo", TDL_PARAM_BOOL, "true",
     "without --trace: replay a built-in trace with two bursts and end when it and training are "
     "done (--no-demo: serve HTTP until SIGTERM)",
     NULL, 0, 0},
    {"timeline-every", TDL_PARAM_DOUBLE, "0.5", "seconds between rows of timeline.csv", NULL, 0.01,
     1e6},
};

static int run_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal run' takes no arguments, found '%s'", pos[0]);
    static cli_colocate_t run; /* read by every rank until the job ends */
    static char out[1024], ckpt_dir[1100];
    memset(&run, 0, sizeof(run));
    int rc = cli_train_opts(params, "train-steps", &run.worker.train);
    if (rc != CLI_EXIT_OK)
        return rc;
    snprintf(out, sizeof(out), "%s", tdl_param_str(params, "out"));
    snprintf(ckpt_dir, sizeof(ckpt_dir), "%s/ckpt", out);
    bool fixed = tdl_param_str(params, "ckpt") != NULL;
    run.worker.ckpt_every = tdl_param_int(params, "ckpt-every");
    run.worker.keep = (int)tdl_param_int(params, "keep");
    run.worker.ckpt_dir = ckpt_dir;
    run.worker.fixed = fixed;
    const coord_realloc_ops_t *ops;
    coord_realloc_opts_t ro;
    int min_train, min_serve;
    if ((rc = cli_realloc_opts(params, true, &ops, &ro, &min_train, &min_serve)) != CLI_EXIT_OK)
        return rc;
    run.colocate = (coord_colocate_opts_t){.realloc = ops,
                                           .realloc_opts = ro,
                                           .min_train = min_train,
                                           .min_serve = min_serve,
                                           .out = out,
                                           .row_every = tdl_param_double(params, "timeline-every"),
                                           .batch = run.worker.train.batch,
                                           .fixed = fixed};
    /* the launcher's word for the world, before MPI starts: mpirun's, or srun's */
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size)
        size = getenv("SLURM_NTASKS");
    int world = size ? atoi(size) : 1;
    if (world < 2)
        return cli_usage_error("'tidal run' needs at least 2 ranks (mpirun -np 4 tidal run): "
                               "rank 0 coordinates, the others train and serve");
    if (world > SERVE_WIRE_MAX_WORKERS + 1)
        return cli_usage_error("'tidal run' takes at most %d ranks for now",
                               SERVE_WIRE_MAX_WORKERS + 1);
    tdl_status_t st = tdl_mkdir_p(ckpt_dir);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: run: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    if (!tdl_param_str(params, "trace") && tdl_param_bool(params, "demo")) {
        /* rank 0 writes it and replays it; every rank names it, as with --trace */
        char trace[1200];
        snprintf(trace, sizeof(trace), "%s/demo-trace.jsonl", out);
        const char *rank = getenv("OMPI_COMM_WORLD_RANK");
        if (!rank)
            rank = getenv("SLURM_PROCID");
        if ((!rank || !strcmp(rank, "0")) &&
            (st = coord_colocate_demo_trace(world - 1, run.worker.train.seed,
                                            (int)tdl_param_int(params, "steps"),
                                            (int)tdl_param_int(params, "max-resolution"),
                                            trace)) !=
                TDL_OK) {
            fprintf(stderr, "tidal: run: demo trace: %s\n", tdl_error_get());
            return CLI_EXIT_FAILURE;
        }
        tdl_params_set(params, "trace", trace, TDL_PARAM_SRC_CMDLINE, "tidal run");
        if (tdl_params_source(params, "exit-after-trace") == TDL_PARAM_SRC_DEFAULT)
            tdl_params_set(params, "exit-after-trace", "true", TDL_PARAM_SRC_CMDLINE, "tidal run");
    }
    return cli_serve_main(params, "run", &run);
}

const cli_command_t cli_cmd_run = {
    .name = "run",
    .summary = "the main job: train the DiT and serve requests on one set of ranks, moving ranks "
               "between the two as load changes",
    .usage = "mpirun -np N tidal run [--train-steps 600] [--listen none] [--trace FILE] "
             "[--realloc slo_first|static] [--out runs/run]",
    .params = run_params,
    .nparams = TDL_ARRAY_SIZE(run_params),
    .shared = {cli_serve_params, cli_train_params, cli_realloc_params},
    .nshared = {CLI_SERVE_NPARAMS, CLI_TRAIN_NPARAMS, CLI_REALLOC_NPARAMS},
    .run = run_run,
};
