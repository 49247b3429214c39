/* `tidal train`: the DiT on Fashion-MNIST (or an HDF5 data set), alone or data-parallel under
 * mpirun, with progress lines, a loss curve (CSV and gnuplot PNG) and the weights at the end. */
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
#include "train/train.h"

static const tdl_param_def_t train_params[] = {
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

/* After a resume from step `step`: loss.csv keeps only the rows up to it (a crash after the
 * checkpoint leaves rows the resumed run writes again). */
static void loss_csv_truncate(const char *path, int64_t step)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char tmp[1200], line[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *o = fopen(tmp, "w");
    if (!o) {
        fclose(f);
        return;
    }
    while (fgets(line, sizeof(line), f)) {
        long long k;
        if (sscanf(line, "%lld,", &k) == 1 && k > step)
            continue;
        fputs(line, o);
    }
    fclose(f);
    if (fclose(o) == 0)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* The loss curve as a PNG, drawn by gnuplot where it is installed. */
static void plot_loss(const char *dir)
{
    char cmd[2300];
    snprintf(cmd, sizeof(cmd),
             "gnuplot -e \"set terminal png size 800,500; set output '%s/loss.png'; "
             "set datafile separator ','; set key autotitle columnhead; set xlabel 'step'; "
             "set ylabel 'loss'; set logscale y; plot '%s/loss.csv' using 1:2 with lines "
             "title 'training loss (rectified flow MSE)', '' using 1:6 with linespoints "
             "title 'validation loss (held-out images)'\" 2>/dev/null",
             dir, dir);
    if (system(cmd) != 0)
        TDL_WARN("gnuplot did not draw %s/loss.png (install gnuplot-nox); loss.csv is there",
                 dir);
}

static int train_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal train' takes no arguments, found '%s'", pos[0]);
    train_opts_t o;
    int rc0 = cli_train_opts(params, "steps", &o);
    if (rc0 != CLI_EXIT_OK)
        return rc0;
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
    int rc = CLI_EXIT_FAILURE;
    gfc_runtime_t *rt = NULL;
    train_trainer_t *tr = NULL;
    FILE *csv = NULL;
    int *ranks = NULL;
    train_ckpt_writer_t *writer = NULL;
    bool stopped = false;
    gfc_group_t group, *g = NULL;
    if (me.size > 1) {
        gfc_runtime_config_t gc;
        if ((st = gfc_runtime_config_from_params(params, &gc)) != TDL_OK)
            goto out;
        gc.rank = me.rank, gc.size = me.size, gc.allgather = tdl_boot_allgatherv;
        if ((st = gfc_runtime_create(&gc, &rt)) != TDL_OK)
            goto out;
        ranks = malloc((size_t)me.size * sizeof(int));
        for (int r = 0; r < me.size; r++)
            ranks[r] = r;
        if ((st = gfc_group_init(&group, rt, ranks, me.size, 0x747261696eull)) != TDL_OK)
            goto out;
        g = &group;
    }
    if ((st = train_trainer_create(&o, &tr)) != TDL_OK)
        goto out;
    /* every rank writes its own gradient files */
    if (o.dump_grads && (st = tdl_mkdir_p(o.dump_grads)) != TDL_OK)
        goto out;
    char from[1100] = "";
    if (!strcmp(resume, "auto")) {
        st = train_checkpoint_resume_auto(tr, ckpt_dir, me.rank == 0, from, sizeof(from));
        if (st == TDL_ERR_NOT_FOUND)
            st = TDL_OK, from[0] = '\0';
    } else if (strcmp(resume, "none") != 0) {
        st = train_checkpoint_restore_rank(tr, resume, me.rank == 0);
        snprintf(from, sizeof(from), "%s", resume);
    }
    if (st != TDL_OK)
        goto out;
    if (me.rank == 0) {
        if ((st = tdl_mkdir_p(out_dir)) != TDL_OK || (st = tdl_mkdir_p(ckpt_dir)) != TDL_OK)
            goto out;
        if (from[0])
            printf("tidal train: resumed from %s at step %lld\n", from,
                   (long long)train_trainer_steps_done(tr));
        char path[1100];
        snprintf(path, sizeof(path), "%s/loss.csv", out_dir);
        if (from[0])
            loss_csv_truncate(path, train_trainer_steps_done(tr));
        if (!(csv = fopen(path, from[0] ? "a" : "w"))) {
            st = tdl_error_raise(TDL_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
            goto out;
        }
        if (!from[0] || ftell(csv) == 0)
            fprintf(csv, "step,loss,lr,images_per_s,seconds,val_loss,val_loss_ema\n");
        dit_model_t *m = train_trainer_model(tr);
        printf("tidal train: %s (%zu parameters), %s, %lld steps of %d images on %d rank%s\n",
               m->config.name, m->num_params, o.data, (long long)o.steps, o.batch, me.size,
               me.size > 1 ? "s" : "");
        if (dit_backend_gpu(m->be) >= 0)
            printf("tidal train: the model runs on the GPU (%s, device %d on rank 0)\n",
                   dit_backend_name(m->be), dit_backend_gpu(m->be));
        fflush(stdout);
    }
    install_stop_signals();
    if (me.rank == 0 && ckpt_async && (st = train_ckpt_writer_create(&writer)) != TDL_OK)
        goto out;
    double t0 = tdl_clock_s(), t_last = t0, ema_loss = 0;
    int64_t first_step = train_trainer_steps_done(tr), last_step = first_step;
    for (int64_t s = first_step; s < o.steps; s++) {
        double loss;
        bool skipped;
        if ((st = train_trainer_step(tr, g, &loss, &skipped)) != TDL_OK)
            goto out;
        ema_loss = s == first_step ? loss : 0.95 * ema_loss + 0.05 * loss;
        bool val_now = val_every > 0 && ((s + 1) % val_every == 0 || s + 1 == o.steps);
        double val = NAN, val_ema = NAN;
        if (val_now && ((st = train_trainer_val_loss(tr, g, val_images, false, &val)) != TDL_OK ||
                        (st = train_trainer_val_loss(tr, g, val_images, true, &val_ema)) != TDL_OK))
            goto out;
        if (me.rank == 0 && ((s + 1) % log_every == 0 || s + 1 == o.steps || val_now)) {
            double now = tdl_clock_s();
            double ips = (double)(s + 1 - last_step) * o.batch / (now - t_last);
            double eta = (now - t0) / (double)(s + 1 - first_step) * (double)(o.steps - s - 1);
            char vtext[64] = "", vcsv[64] = ",";
            if (val_now) {
                snprintf(vtext, sizeof(vtext), "  val %.4f (ema %.4f)", val, val_ema);
                snprintf(vcsv, sizeof(vcsv), "%.6f,%.6f", val, val_ema);
            }
            printf("step %6lld/%lld  loss %.4f (avg %.4f)%s  %.1f img/s  lr %.2e  eta %.0f s\n",
                   (long long)(s + 1), (long long)o.steps, loss, ema_loss, vtext, ips,
                   train_trainer_lr(tr), eta);
            fflush(stdout);
            fprintf(csv, "%lld,%.6f,%.3e,%.2f,%.3f,%s\n", (long long)(s + 1), loss,
                    train_trainer_lr(tr), ips, now - t0, vcsv);
            fflush(csv);
            t_last = now;
            last_step = s + 1;
        }
        /* a signal on any rank stops every rank after the same step */
        int32_t stop = stop_signal, any = stop;
        if (g && (st = gfc_allreduce(g, &stop, &any, 1, GFC_DT_I32, GFC_OP_MAX, NULL)))
            goto out;
        bool last = s + 1 == o.steps || any;
        if (last || (ckpt_every > 0 && (s + 1) % ckpt_every == 0)) {
            /* error-feedback residuals: their sum over the ranks is what a resume needs */
            size_t nres = 0;
            float *res = train_codec_residual_of(tr, &nres), *sum = NULL;
            if (res && g) {
                sum = malloc(nres * sizeof(float));
                if (!sum || (st = gfc_allreduce(g, res, sum, nres, GFC_DT_F32, GFC_OP_SUM, NULL))) {
                    free(sum);
                    if (st == TDL_OK)
                        st = tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: out of memory");
                    goto out;
                }
            }
            if (me.rank == 0) {
                char saved[1100];
                double copy_s = 0;
                if (!last && ckpt_async && writer) {
                    st = train_checkpoint_dir_save_async(tr, writer, ckpt_dir, keep, me.size,
                                                         sum ? sum : res, &copy_s);
                    if (st == TDL_OK)
                        printf("checkpoint %s/ckpt-%08lld.h5 (writing in the background; "
                               "training stalled %.1f ms for the copy)\n",
                               ckpt_dir, (long long)(s + 1), copy_s * 1e3);
                } else {
                    if (writer && (st = train_ckpt_writer_wait(writer, NULL, 0)) != TDL_OK) {
                        free(sum);
                        goto out;
                    }
                    st = train_checkpoint_dir_save_res(tr, ckpt_dir, keep, me.size,
                                                       sum ? sum : res, saved, sizeof(saved));
                    if (st == TDL_OK && (!last || any))
                        printf("checkpoint %s\n", saved);
                }
                fflush(stdout);
            }
            free(sum);
            if (st != TDL_OK)
                goto out;
        }
        if (any) {
            if (me.rank == 0)
                printf("tidal train: stopped after step %lld on %s; resume with the same "
                       "command\n",
                       (long long)(s + 1), any == SIGTERM ? "SIGTERM" : "SIGUSR1");
            stopped = true;
            break;
        }
    }
    if (me.rank == 0 && stopped) {
        fclose(csv);
        csv = NULL;
    } else if (me.rank == 0) {
        double secs = tdl_clock_s() - t0;
        char path[1100];
        snprintf(path, sizeof(path), "%s/model.h5", out_dir);
        if ((st = train_weights_save(path, train_trainer_model(tr), train_trainer_ema(tr),
                                     train_trainer_steps_done(tr))) != TDL_OK)
            goto out;
        int64_t ran = o.steps - first_step;
        printf("tidal train: %lld steps, %.1f images/s, final loss %.4f; wrote %s/loss.csv, %s "
               "and checkpoints in %s\n",
               (long long)ran, secs > 0 && ran > 0 ? (double)ran * o.batch / secs : 0.0, ema_loss,
               out_dir, path, ckpt_dir);
        fclose(csv);
        csv = NULL;
        plot_loss(out_dir);
    }
    rc = CLI_EXIT_OK;
out:
    if (writer) {
        tdl_status_t wst = train_ckpt_writer_wait(writer, NULL, 0);
        if (wst != TDL_OK && st == TDL_OK) {
            st = wst;
            rc = CLI_EXIT_FAILURE;
        }
        train_ckpt_writer_free(writer);
    }
    if (st != TDL_OK)
        fprintf(stderr, "tidal[%d]: train: %s\n", me.rank, tdl_error_get());
    if (csv)
        fclose(csv);
    train_trainer_free(tr);
    if (rt) {
        tdl_boot_barrier();
        gfc_runtime_destroy(rt);
    }
    free(ranks);
    tdl_boot_finalize();
    return rc;
}

const cli_command_t cli_cmd_train = {
    .name = "train",
    .summary = "train a DiT (rectified flow), alone or data-parallel under mpirun",
    .usage = "[mpirun -np N] tidal train [--model fmnist] [--steps N] [--batch B] [--out DIR]",
    .params = train_params,
    .nparams = TDL_ARRAY_SIZE(train_params),
    .shared = {cli_train_params},
    .nshared = {CLI_TRAIN_NPARAMS},
    .run = train_run,
};
