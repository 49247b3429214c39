/* The tidal program: subcommands and their shared plumbing. */
#ifndef TIDAL_CLI_H
#define TIDAL_CLI_H

#include "core/core.h"

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
    const tdl_param_def_t *params2; /* and those it shares with another command (or NULL) */
    size_t nparams2;
    /* Runs with the registry filled in; positional arguments follow the command name. */
    int (*run)(tdl_params_t *params, int npos, char **pos);
} cli_command_t;

extern const cli_command_t cli_cmd_info;
extern const cli_command_t cli_cmd_train;
extern const cli_command_t cli_cmd_generate;
extern const cli_command_t cli_cmd_ckpt;
extern const cli_command_t cli_cmd_serve;
extern const cli_command_t cli_cmd_sim;
extern const cli_command_t cli_cmd_workload;
extern const cli_command_t cli_cmd_profile;
extern const cli_command_t cli_cmd_run;
/* tidal serve's parameters, which tidal run takes too */
#define CLI_SERVE_NPARAMS 25
extern const tdl_param_def_t cli_serve_params[CLI_SERVE_NPARAMS];

/* --device, for the commands that run the model (TIDAL_DEVICE sets it, as any parameter). */
#define CLI_DEVICE_PARAM                                                                           \
    {"device", TDL_PARAM_ENUM, "cpu",                                                              \
     "where the model runs: cpu, cuda (one GPU per rank: the node-local rank's, modulo the "       \
     "visible GPUs; CUDA_VISIBLE_DEVICES narrows them), or cuda-emulated (the CUDA code run on "   \
     "the CPU, slowly, for tests)",                                                                \
     "cpu|cuda|cuda-emulated", 1, 0}

/* Prints "tidal: <message>" and returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* TIDAL_CLI_H */
