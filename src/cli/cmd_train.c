/* `tidal train`: the DiT on Fashion-MNIST (or an HDF5 data set), alone or data-parallel under
 * mpirun, with progress lines, a loss curve (CSV and gnuplot PNG) and the weights at the end
 * (the run itself: src/train/job.c). */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "codec/codec.h"
#include "gfc/gfc.h"
#include "mpi/bootstrap.h"
#include "train/job.h"
#include "train/train.h"

static const tdl_param_def_t train_params[] = {
    {"objective", TDL_PARAM_ENUM, "rf",
     "what the network learns: rf (rectified flow, the velocity; sample with euler or heun) or "
     "ddpm (the reference DiT's Gaussian diffusion: the noise, and its variance with learn_sigma; "
     "sample with ddpm or ddim)",
     "rf|ddpm", 1, 0},
    {"learn-sigma", TDL_PARAM_ENUM, "model",
     "whether the output's second half learns the variance: model (the configuration's: on for "
     "DiT-S/2 ... DiT-XL/8, off for tiny and fmnist), on, off",
     "model|on|off", 1, 0},
    {"steps", TDL_PARAM_INT, "1500", "optimizer steps", NULL, 0, 1e12},
    {"batch", TDL_PARAM_INT, "64", "global batch (images per step, whatever the rank count)", NULL,
     1, 1 << 20},
    {"micro-batch", TDL_PARAM_INT, "32", "images per forward pass on one rank", NULL, 1, 1 << 16},
    {"dump-grads", TDL_PARAM_STRING, NULL,
     "directory where each rank writes its own gradient (grads-<step>-rank<r>.h5, under the "
     "PyTorch names) every --dump-grads-every steps, for the codec benchmarks",
     NULL, 1, 0},
    {"dump-grads-every", TDL_PARAM_INT, "100", "steps between gradient dumps", NULL, 1, 1e12},
    CLI_DEVICE_PARAM,
    {"val-every", TDL_PARAM_INT, "100",
     "steps between validation losses on held-out images (0: never): loss.csv's val_loss (the "
     "trained weights) and val_loss_ema (the EMA weights, those sampled from)",
     NULL, 0, 1e12},
    {"val-images", TDL_PARAM_INT, "256",
     "held-out images per validation (Fashion-MNIST's test split), each with a fixed time and "
     "noise",
     NULL, 1, 1 << 20},
    {"log-every", TDL_PARAM_INT, "25", "progress line every N steps", NULL, 1, 1e9},
    {"ckpt-dir", TDL_PARAM_STRING, NULL,
     "where checkpoints go (default: OUT/ckpt): ckpt-<step>.h5 and a 'latest' pointer", NULL, 1,
     0},
    {"ckpt-every", TDL_PARAM_INT, "500", "checkpoint every N steps (0: only at the end)", NULL, 0,
     1e12},
    {"ckpt-async", TDL_PARAM_BOOL, "true",
     "write periodic checkpoints from a background thread (training stalls only for a copy of "
     "the state); the last one and one on a signal are written before exiting",
     NULL, 0, 0},
    {"keep", TDL_PARAM_INT, "3", "checkpoints kept (the newest; never fewer than one)", NULL, 1,
     1e6},
    {"resume", TDL_PARAM_STRING, "auto",
     "auto (the newest checkpoint in --ckpt-dir that verifies, if any), none, or a FILE", NULL, 1,
     0},
    {"out", TDL_PARAM_STRING, "runs/train",
     "output directory (loss.csv, loss.png, model.h5 with model and EMA weights)", NULL, 1, 0},
};

/* SIGTERM and SIGUSR1 (Slurm's --signal=B:USR1@60 before a preemption): finish the step, write
 * a checkpoint, exit 0. A second signal exits at once; checkpoints on disk are complete files
 * or the previous ones, whatever moment it comes. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    if (stop_signal)
        _exit(128 + sig);
    stop_signal = sig;
}

static void install_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

static int train_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal train' takes no arguments, found '%s'", pos[0]);
    train_opts_t o;
    int rc0 = cli_train_opts(params, "steps", &o);
    if (rc0 != CLI_EXIT_OK)
        return rc0;
    dit_objective_parse(tdl_param_str(params, "objective"), &o.objective);
    const char *sigma = tdl_param_str(params, "learn-sigma");
    o.learn_sigma = !strcmp(sigma, "on") ? 1 : !strcmp(sigma, "off") ? -1 : 0;
    o.dump_grads = tdl_param_str(params, "dump-grads");
    o.dump_every = tdl_param_int(params, "dump-grads-every");
    const char *out_dir = tdl_param_str(params, "out");
    int log_every = (int)tdl_param_int(params, "log-every");
    int64_t val_every = tdl_param_int(params, "val-every");
    int val_images = (int)tdl_param_int(params, "val-images");
    char ckpt_dir[1024];
    snprintf(ckpt_dir, sizeof(ckpt_dir), "%s",
             tdl_param_str(params, "ckpt-dir") ? tdl_param_str(params, "ckpt-dir") : "");
    if (!ckpt_dir[0])
        snprintf(ckpt_dir, sizeof(ckpt_dir), "%s/ckpt", out_dir);
    int64_t ckpt_every = tdl_param_int(params, "ckpt-every");
    bool ckpt_async = tdl_param_bool(params, "ckpt-async");
    int keep = (int)tdl_param_int(params, "keep");
    const char *resume = tdl_param_str(params, "resume");
    tdl_boot_info_t me;
    tdl_status_t st = tdl_boot_init(NULL, NULL, &me);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: cannot start MPI: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    tdl_log_set_rank(me.size > 1 ? me.rank : -1);
    gfc_runtime_t *rt = NULL;
    if (me.size > 1) {
        gfc_runtime_config_t gc;
        if ((st = gfc_runtime_config_from_params(params, &gc)) == TDL_OK) {
            gc.rank = me.rank, gc.size = me.size, gc.allgather = tdl_boot_allgatherv;
            st = gfc_runtime_create(&gc, &rt);
        }
    }
    if (st == TDL_OK) {
        install_stop_signals();
        train_job_opts_t jo = {.train = o,
                               .out_dir = out_dir,
                               .ckpt_dir = ckpt_dir,
                               .resume = resume,
                               .log_every = log_every,
                               .val_every = val_every,
                               .val_images = val_images,
                               .ckpt_every = ckpt_every,
                               .ckpt_async = ckpt_async,
                               .keep = keep};
        st = train_job_run(&jo, rt, me.rank, me.size, &stop_signal);
    }
    if (st != TDL_OK)
        fprintf(stderr, "tidal[%d]: train: %s\n", me.rank, tdl_error_get());
    int rc = st == TDL_OK ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
    bool deaths = false;
    if (rt) { /* over gfc, which passes over dead ranks, where an MPI barrier would hang */
        rc = gfc_verdict(rt, rc, &deaths);
        gfc_runtime_destroy(rt);
    }
    cli_mpi_end(deaths);
    return rc;
}

const cli_command_t cli_cmd_train = {
    .name = "train",
    .summary = "train a DiT (rectified flow or Gaussian diffusion), alone or data-parallel under "
               "mpirun",
    .usage = "[mpirun -np N] tidal train [--model fmnist] [--objective rf|ddpm] [--steps N] "
             "[--batch B] [--out DIR]",
    .params = train_params,
    .nparams = TDL_ARRAY_SIZE(train_params),
    .shared = {cli_train_params},
    .nshared = {CLI_TRAIN_NPARAMS},
    .run = train_run,
};
