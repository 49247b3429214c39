/* The tidal program: subcommands and their shared plumbing. */
#ifndef TIDAL_CLI_H
#define TIDAL_CLI_H

#include "core/core.h"
#include "dit/vae.h"
#include "coord/job.h"
#include "train/train.h"

/* Exit codes that scripts can trust. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILURE = 1, /* the work failed: see the error line */
    CLI_EXIT_USAGE = 2    /* bad arguments, parameters or config: nothing was done */
};

typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *usage;             /* "tidal info [options]" */
    const tdl_param_def_t *params; /* this command's own parameters */
    size_t nparams;
    /* and the tables it shares with other commands (unused entries NULL) */
    const tdl_param_def_t *shared[3];
    size_t nshared[3];
    /* Runs with the registry filled in; positional arguments follow the command name. */
    int (*run)(tdl_params_t *params, int npos, char **pos);
} cli_command_t;

extern const cli_command_t cli_cmd_info;
extern const cli_command_t cli_cmd_train;
extern const cli_command_t cli_cmd_generate;
extern const cli_command_t cli_cmd_encode;
extern const cli_command_t cli_cmd_ckpt;
extern const cli_command_t cli_cmd_serve;
extern const cli_command_t cli_cmd_sim;
extern const cli_command_t cli_cmd_workload;
extern const cli_command_t cli_cmd_profile;
extern const cli_command_t cli_cmd_run;
/* tidal serve's parameters, which tidal run takes too */
#define CLI_SERVE_NPARAMS 29
extern const tdl_param_def_t cli_serve_params[CLI_SERVE_NPARAMS];
/* the training parameters of tidal train and tidal run (each has its own steps, batch,
 * micro-batch and output ones, whose defaults differ) */
#define CLI_TRAIN_NPARAMS 14
extern const tdl_param_def_t cli_train_params[CLI_TRAIN_NPARAMS];
/* Reads them (and batch, micro-batch and the steps parameter named `steps`) into *o, checking
 * the model and resolution: CLI_EXIT_OK, or CLI_EXIT_USAGE after printing why. */
int cli_train_opts(tdl_params_t *params, const char *steps, train_opts_t *o);

/* the reallocation parameters of tidal run and tidal sim --colocate */
#define CLI_REALLOC_NPARAMS 9
extern const tdl_param_def_t cli_realloc_params[CLI_REALLOC_NPARAMS];
/* Reads them into *opts (the policy, its options, the bounds): CLI_EXIT_OK, or CLI_EXIT_USAGE
 * after printing why. wall: --start-hour -1 is the hour of the local clock now (tidal run),
 * else 0 (a simulation starts at midnight). */
int cli_realloc_opts(tdl_params_t *params, bool wall, const coord_realloc_ops_t **ops,
                     coord_realloc_opts_t *opts, int *min_train, int *min_serve);

/* --device, for the commands that run the model (TIDAL_DEVICE sets it, as any parameter). */
#define CLI_DEVICE_PARAM                                                                           \
    {                                                                                              \
        "device", TDL_PARAM_ENUM, "cpu",                                                           \
            "where the model runs: cpu, cuda (one GPU per rank: the node-local rank's, modulo "    \
            "the "                                                                                 \
            "visible GPUs; CUDA_VISIBLE_DEVICES narrows them), or cuda-emulated (the CUDA code "   \
            "run on "                                                                              \
            "the CPU, slowly, for tests)",                                                         \
            "cpu|cuda|cuda-emulated", 1, 0                                                         \
    }

/* What `tidal run` adds to serving: rank 0's co-location and the workers' training. */
typedef struct cli_colocate {
    coord_colocate_opts_t colocate;
    coord_worker_opts_t worker;
} cli_colocate_t;
/* `tidal serve`'s start-up and end on every rank, with co-location when run is not NULL:
 * the exit code every rank shares. */
int cli_serve_main(tdl_params_t *params, const char *what, const cli_colocate_t *run);

/* Prints "tidal: <message>" and returns CLI_EXIT_USAGE. */
/* --vae FILE.h5|random:SEED (src/cli/vae_arg.c): random SEED is the SD configuration with
 * PyTorch's default initialization (for tests: no trained weights can be downloaded here). */
typedef struct cli_vae {
    const char *arg;
    int parts; /* DIT_VAE_ENCODER | DIT_VAE_DECODER */
    bool random;
    uint64_t seed;
    dit_vae_config_t config;
} cli_vae_t;
/* The configuration, checked (the file has the parts asked for): CLI_EXIT_OK, or a usage error
 * printed (exit 2). */
int cli_vae_config(const char *arg, int parts, cli_vae_t *out);
/* The VAE, run on device (dit_backend_open's; NULL or "cpu": the CPU). */
tdl_status_t cli_vae_load(const cli_vae_t *vae, const char *device, dit_vae_t **vae_out);

int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The end of MPI for a command: MPI_Finalize, unless a rank died (deaths, from gfc_verdict)
 * under a launcher that reads TIDAL_EXIT_DIR (tools/mpirun-recover, the job scripts): the
 * fence may then wait for the dead forever (Open MPI 4.1 under --enable-recovery), so every
 * survivor leaves it out alike, and exits. */
void cli_mpi_end(bool deaths);

#endif /* TIDAL_CLI_H */
