/* A training job (job.h): the trainer on every rank of the world, progress lines and loss.csv
 * on rank 0, checkpoints as it goes (in the background when asked), a stop on a signal after the
 * same step everywhere, and the weights and the loss plot at the end. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/elastic.h"
#include "train/job.h"
#include "train/train.h"

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
        TDL_WARN("gnuplot did not draw %s/loss.png (install gnuplot-nox); loss.csv is there", dir);
}

tdl_status_t train_job_run(const train_job_opts_t *J, gfc_runtime_t *rt, int rank, int size,
                           volatile sig_atomic_t *stop)
{
    train_opts_t o = J->train;
    const char *out_dir = J->out_dir, *ckpt_dir = J->ckpt_dir, *resume = J->resume;
    int log_every = J->log_every, val_images = J->val_images, keep = J->keep;
    int64_t val_every = J->val_every, ckpt_every = J->ckpt_every;
    bool ckpt_async = J->ckpt_async;
    tdl_status_t st = TDL_OK;
    train_trainer_t *tr = NULL;
    FILE *csv = NULL;
    int *ranks = NULL;
    train_members_t *mem = NULL; /* the members, while they can regroup after a death */
    train_ckpt_writer_t *writer = NULL;
    bool stopped = false;
    int regroups = 0;       /* after deaths */
    bool regrouped = false; /* no step done since the last one */
    gfc_group_t group, *g = NULL;
    if (size > 1) {
        ranks = malloc((size_t)size * sizeof(int));
        if (size <= TRAIN_MEMBERS_MAX)
            mem = calloc(1, sizeof(*mem));
        if (!ranks || (size <= TRAIN_MEMBERS_MAX && !mem)) {
            st = tdl_error_raise(TDL_ERR_NOMEM, "train: out of memory");
            goto out;
        }
        for (int r = 0; r < size; r++)
            ranks[r] = r;
        if (mem) {
            mem->n = (uint32_t)size;
            for (int r = 0; r < size; r++)
                mem->ranks[r] = r;
        }
        if ((st = gfc_group_init(&group, rt, ranks, size, 0x747261696eull)) != TDL_OK)
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
        st = train_checkpoint_resume_auto(tr, ckpt_dir, rank == 0, from, sizeof(from));
        if (st == TDL_ERR_NOT_FOUND)
            st = TDL_OK, from[0] = '\0';
    } else if (strcmp(resume, "none") != 0) {
        st = train_checkpoint_restore_rank(tr, resume, rank == 0);
        snprintf(from, sizeof(from), "%s", resume);
    }
    if (st != TDL_OK)
        goto out;
    if (rank == 0) {
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
               m->config.name, m->num_params, o.data, (long long)o.steps, o.batch, size,
               size > 1 ? "s" : "");
        if (m->config.objective != DIT_OBJECTIVE_RF || m->config.learn_sigma)
            printf("tidal train: objective %s, learn_sigma %s\n",
                   dit_objective_name(m->config.objective), m->config.learn_sigma ? "on" : "off");
        if (dit_backend_gpu(m->be) >= 0)
            printf("tidal train: the model runs on the GPU (%s, device %d on rank 0)\n",
                   dit_backend_name(m->be), dit_backend_gpu(m->be));
        fflush(stdout);
    }
    if (rank == 0 && ckpt_async && (st = train_ckpt_writer_create(&writer)) != TDL_OK)
        goto out;
    double t0 = tdl_clock_s(), t_last = t0, ema_loss = 0;
    int64_t first_step = train_trainer_steps_done(tr), last_step = first_step;
    for (int64_t s = first_step; s < o.steps; s++) {
        double loss = NAN;
        bool logged = false;
    again:
        /* after a regroup the step may be done already (taken from a member that finished it) */
        if (train_trainer_steps_done(tr) == s) {
            bool skipped;
            if ((st = train_trainer_step(tr, g, &loss, &skipped)) != TDL_OK)
                goto failed;
            if (regrouped && rank == 0)
                TDL_WARN("training went on: step %lld done by %d members after the regroup",
                         (long long)s + 1, g->size);
            regrouped = false;
        } else if (isnan(loss)) {
            loss = train_trainer_last_loss(tr);
        }
        bool val_now = val_every > 0 && ((s + 1) % val_every == 0 || s + 1 == o.steps);
        double val = NAN, val_ema = NAN;
        if (val_now && ((st = train_trainer_val_loss(tr, g, val_images, false, &val)) != TDL_OK ||
                        (st = train_trainer_val_loss(tr, g, val_images, true, &val_ema)) != TDL_OK))
            goto failed;
        if (!logged)
            ema_loss = s == first_step ? loss : 0.95 * ema_loss + 0.05 * loss;
        if (rank == 0 && !logged && ((s + 1) % log_every == 0 || s + 1 == o.steps || val_now)) {
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
        logged = true;
        /* a signal on any rank stops every rank after the same step */
        int32_t mine = *stop, any = mine;
        if (g && (st = gfc_allreduce(g, &mine, &any, 1, GFC_DT_I32, GFC_OP_MAX, NULL)))
            goto failed;
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
                    goto failed;
                }
            }
            tdl_fault_point("train.ckpt"); /* every rank, as rank 0 begins to write */
            if (rank == 0) {
                int members = g ? g->size : 1;
                char saved[1100];
                double copy_s = 0;
                if (!last && ckpt_async && writer) {
                    st = train_checkpoint_dir_save_async(tr, writer, ckpt_dir, keep, members,
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
                    st = train_checkpoint_dir_save_res(tr, ckpt_dir, keep, members,
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
            if (rank == 0)
                printf("tidal train: stopped after step %lld on %s; resume with the same "
                       "command\n",
                       (long long)(s + 1), any == SIGTERM ? "SIGTERM" : "SIGUSR1");
            stopped = true;
            break;
        }
        continue;
    failed:
        /* a member died: the survivors regroup and do the step again, or finish it */
        if (!g || !mem || !train_elastic_recoverable(rt, st))
            goto out;
        {
            char why[512];
            snprintf(why, sizeof(why), "%s", tdl_error_get());
            uint32_t before = mem->n;
            if ((st = train_elastic_regroup(tr, rt, rank, 0, mem, &group)) != TDL_OK) {
                if (st == TDL_ERR_PEER && !gfc_peer_alive(rt, 0))
                    st = tdl_error_raise(TDL_ERR_PEER,
                                         "rank 0, which writes the checkpoints, died (%s): "
                                         "training ends; resume from the last checkpoint in %s",
                                         gfc_peer_why(rt, 0), ckpt_dir);
                goto out;
            }
            regroups++;
            regrouped = true;
            if (rank == 0) {
                printf("tidal train: %u of %u ranks lost at step %lld (%s); %u go on from step "
                       "%lld with the same global batch of %d\n",
                       before - mem->n, before, (long long)(s + 1), why, mem->n,
                       (long long)train_trainer_steps_done(tr) + 1, o.batch);
                fflush(stdout);
            }
            st = TDL_OK;
            goto again;
        }
    }
    if (rank == 0 && stopped) {
        fclose(csv);
        csv = NULL;
    } else if (rank == 0) {
        double secs = tdl_clock_s() - t0;
        char path[1100];
        snprintf(path, sizeof(path), "%s/model.h5", out_dir);
        if ((st = train_weights_save(path, train_trainer_model(tr), train_trainer_ema(tr),
                                     train_trainer_steps_done(tr),
                                     train_trainer_class_names(tr))) != TDL_OK)
            goto out;
        int64_t ran = o.steps - first_step;
        printf("tidal train: %lld steps, %.1f images/s, final loss %.4f; wrote %s/loss.csv, %s "
               "and checkpoints in %s\n",
               (long long)ran, secs > 0 && ran > 0 ? (double)ran * o.batch / secs : 0.0, ema_loss,
               out_dir, path, ckpt_dir);
        if (regroups) {
            int dead[64], n = gfc_dead_ranks(rt, dead, (int)TDL_ARRAY_SIZE(dead));
            printf("tidal train: %d rank%s died and training went on %d time%s without a restart:",
                   n, n == 1 ? "" : "s", regroups, regroups == 1 ? "" : "s");
            for (int i = 0; i < n && i < (int)TDL_ARRAY_SIZE(dead); i++)
                printf("%s rank %d (%s)", i ? ";" : "", dead[i], gfc_peer_why(rt, dead[i]));
            printf("\n");
        }
        fclose(csv);
        csv = NULL;
        plot_loss(out_dir);
    }
out:
    if (writer) {
        tdl_status_t wst = train_ckpt_writer_wait(writer, NULL, 0);
        if (wst != TDL_OK && st == TDL_OK)
            st = wst;
        train_ckpt_writer_free(writer);
    }
    if (csv)
        fclose(csv);
    train_trainer_free(tr);
    free(mem);
    free(ranks);
    return st;
}
