/* tidal: elastic DiT training and serving on MPI clusters. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"

static const tdl_param_def_t global_params[] = {
    {"config", TDL_PARAM_STRING, NULL,
     "config file of 'name = value' lines (parameters below, without the leading --)", NULL, 1, 0},
    {"log-level", TDL_PARAM_ENUM, "warn", "how much to log on stderr",
     "error|warn|info|debug|trace", 1, 0},
};

static const cli_command_t *const commands[] = {
    &cli_cmd_info,  &cli_cmd_train,    &cli_cmd_generate, &cli_cmd_encode,  &cli_cmd_ckpt,
    &cli_cmd_serve, &cli_cmd_workload, &cli_cmd_sim,      &cli_cmd_profile, &cli_cmd_run,
};

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tidal: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

static void print_help(FILE *out)
{
    fprintf(out,
            "tidal %s: elastic training and serving of Diffusion Transformers on MPI clusters\n"
            "\n"
            "usage: tidal [--version] [--help] [--help-params] <command> [options]\n"
            "       mpirun -np N tidal <command> [options]\n"
            "       srun --mpi=pmix tidal <command> [options]\n"
            "\n"
            "commands:\n",
            tdl_version());
    for (size_t i = 0; i < TDL_ARRAY_SIZE(commands); i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(out,
            "\n"
            "Every option is a parameter: --name value on the command line, TIDAL_NAME in the\n"
            "environment, or 'name = value' in a --config file, in that order of precedence.\n"
            "'tidal --help-params' lists them all; 'tidal <command> --help' shows one command.\n"
            "\n"
            "exit status: 0 success, 1 the work failed, 2 bad arguments or parameters.\n");
}

static tdl_status_t register_all(tdl_params_t *params, const cli_command_t *only)
{
    tdl_status_t st = tdl_params_register(params, global_params, TDL_ARRAY_SIZE(global_params));
    if (st == TDL_OK)
        st = tdl_params_register(params, gfc_params, gfc_nparams);
    for (size_t i = 0; st == TDL_OK && i < TDL_ARRAY_SIZE(commands); i++) {
        if (!only || only == commands[i]) {
            st = tdl_params_register(params, commands[i]->params, commands[i]->nparams);
            for (int k = 0; st == TDL_OK && k < 3 && commands[i]->shared[k]; k++)
                st = tdl_params_register(params, commands[i]->shared[k], commands[i]->nshared[k]);
        }
    }
    return st;
}

static int print_help_params(void)
{
    tdl_params_t *global;
    if (tdl_params_create(&global) != TDL_OK)
        return CLI_EXIT_FAILURE;
    tdl_params_register(global, global_params, TDL_ARRAY_SIZE(global_params));
    printf("global parameters (every command):\n");
    tdl_params_print_help(global, stdout);
    tdl_params_destroy(global);
    if (tdl_params_create(&global) != TDL_OK)
        return CLI_EXIT_FAILURE;
    tdl_params_register(global, gfc_params, gfc_nparams);
    printf("\ngroup-free collectives (every command that communicates):\n");
    tdl_params_print_help(global, stdout);
    tdl_params_destroy(global);
    for (size_t i = 0; i < TDL_ARRAY_SIZE(commands); i++) {
        if (!commands[i]->nparams)
            continue;
        tdl_params_t *cmd;
        if (tdl_params_create(&cmd) != TDL_OK)
            break;
        tdl_params_register(cmd, commands[i]->params, commands[i]->nparams);
        for (int k = 0; k < 3 && commands[i]->shared[k]; k++)
            tdl_params_register(cmd, commands[i]->shared[k], commands[i]->nshared[k]);
        printf("\n'tidal %s' parameters:\n", commands[i]->name);
        tdl_params_print_help(cmd, stdout);
        tdl_params_destroy(cmd);
    }
    return CLI_EXIT_OK;
}

static const cli_command_t *find_command(const char *name)
{
    for (size_t i = 0; i < TDL_ARRAY_SIZE(commands); i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

static bool wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    }
    return false;
}

static int run_main(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("no command given: see 'tidal --help'");
    const char *first = argv[1];
    if (!strcmp(first, "--help") || !strcmp(first, "-h") || !strcmp(first, "help")) {
        print_help(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(first, "--version") || !strcmp(first, "version")) {
        printf("tidal %s (%s)\n", tdl_version(), tdl_build_options());
        return CLI_EXIT_OK;
    }
    if (!strcmp(first, "--help-params"))
        return print_help_params();
    const cli_command_t *cmd = find_command(first);
    if (!cmd) {
        if (first[0] == '-')
            return cli_usage_error("unknown option '%s': a command comes first, see 'tidal "
                                   "--help'",
                                   first);
        return cli_usage_error("unknown command '%s': see 'tidal --help'", first);
    }
    if (wants_help(argc - 2, argv + 2)) {
        tdl_params_t *params;
        if (tdl_params_create(&params) != TDL_OK)
            return CLI_EXIT_FAILURE;
        printf("usage: %s\n\n%s\n\nparameters:\n", cmd->usage, cmd->summary);
        register_all(params, cmd);
        tdl_params_print_help(params, stdout);
        tdl_params_destroy(params);
        return CLI_EXIT_OK;
    }

    int rc = CLI_EXIT_USAGE;
    tdl_params_t *params = NULL;
    char **pos = calloc((size_t)argc, sizeof(char *));
    int npos = 0;
    tdl_status_t st = pos ? tdl_params_create(&params) : TDL_ERR_NOMEM;
    if (st == TDL_OK)
        st = register_all(params, cmd);
    /* -o is the one short option: an alias of --output where a command has it. */
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "-o") && tdl_params_has(params, "output"))
            argv[i] = "--output";
    if (st == TDL_OK)
        st = tdl_params_parse_args(params, argc - 2, argv + 2, pos, &npos);
    if (st == TDL_OK)
        st = tdl_params_load_env(params);
    if (st == TDL_OK && tdl_param_str(params, "config"))
        st = tdl_params_load_file(params, tdl_param_str(params, "config"));
    if (st == TDL_OK) {
        tdl_log_level_t level;
        st = tdl_log_level_parse(tdl_param_str(params, "log-level"), &level);
        if (st == TDL_OK)
            tdl_log_set_level(level);
    }
    if (st != TDL_OK) {
        cli_usage_error("%s", tdl_error_get()[0] ? tdl_error_get() : tdl_status_str(st));
        goto out;
    }
    rc = cmd->run(params, npos, pos);
out:
    tdl_params_destroy(params);
    free(pos);
    return rc;
}

void cli_mpi_end(bool deaths)
{
    /* Only under a launcher that takes the exit code from TIDAL_EXIT_DIR: plain mpirun counts a
     * rank that leaves MPI_Finalize out as a failure of the job, and without --enable-recovery
     * it has ended the job at a real death already (what gfc held dead there was slow). */
    const char *dir = getenv("TIDAL_EXIT_DIR");
    if (!deaths || !dir || !*dir) {
        tdl_boot_finalize();
        return;
    }
    fflush(NULL);
    TDL_INFO("a rank died: MPI_Finalize is left out (its fence could wait for the dead)");
}

/* Under `mpirun --enable-recovery` mpirun exits 0 whatever its ranks answer (Open MPI 4.1), so
 * a job that must survive dead ranks cannot tell its outcome by mpirun's code. With
 * TIDAL_EXIT_DIR set, every rank leaves its exit code in DIR/exit.RANK, from which
 * tools/mpirun-recover answers the job's code: rank 0's, else 1 (doc/failures.md). */
static void leave_exit_code(int rc)
{
    const char *dir = getenv("TIDAL_EXIT_DIR");
    if (!dir || !*dir)
        return;
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank)
        rank = getenv("PMIX_RANK");
    if (!rank)
        rank = getenv("SLURM_PROCID");
    char path[4096];
    snprintf(path, sizeof(path), "%s/exit.%s", dir, rank ? rank : "0");
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%d\n", rc) < 0 || fclose(f) != 0)
        fprintf(stderr, "tidal: cannot write the exit code to '%s' (TIDAL_EXIT_DIR)\n", path);
}

int main(int argc, char **argv)
{
    int rc = run_main(argc, argv);
    leave_exit_code(rc);
    return rc;
}
