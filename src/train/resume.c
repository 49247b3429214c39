/* Resuming a run from a training checkpoint (doc/checkpoint.md): the training state read and
 * checked, everything restored or nothing, and the newest checkpoint of a folder that verifies. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "dit/dit.h"
#include "train/train.h"
#include "train/train_internal.h"

/* What a refusal of the training state tells the user to do. */
#define STATE_ADVICE                                                                               \
    "the file is damaged or was edited; resume from another checkpoint (--resume FILE) or start "  \
    "afresh (--resume none)"

tdl_status_t train_checkpoint_attrs_read(const char *path, train_ckpt_attrs_t *out)
{
    static const char *const keys[] = {
        "train/step",          "train/adamw_step",        "train/data_epoch",
        "train/data_position", "train/loss_history_rows", "step"};
    int64_t v[6];
    for (size_t i = 0; i < TDL_ARRAY_SIZE(keys); i++) {
        tdl_status_t st = ckpt_attr_read_int(path, keys[i], &v[i]);
        if (st != TDL_OK)
            return tdl_error_raise(st == TDL_ERR_IO || st == TDL_ERR_NOMEM ? st : TDL_ERR_CORRUPT,
                                   "%s: %s", tdl_error_get(), STATE_ADVICE);
    }
    /* [lo, hi] for each; hi of adamw_step is the step */
    const int64_t lo[] = {0, 0, 0, 0, 0}, big = (int64_t)1 << 62;
    const int64_t hi[] = {TRAIN_STEPS_MAX, v[0], big, big, TRAIN_LOSS_HISTORY};
    for (size_t i = 0; i < 5; i++)
        if (v[i] < lo[i] || v[i] > hi[i])
            return tdl_error_raise(TDL_ERR_CORRUPT, "%s: /%s is %lld, outside %lld to %lld%s: %s",
                                   path, keys[i], (long long)v[i], (long long)lo[i],
                                   (long long)hi[i],
                                   i == 0   ? " (the most --steps allows)"
                                   : i == 1 ? " (the steps done)"
                                            : "",
                                   STATE_ADVICE);
    if (v[5] != v[0])
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "%s: the root attribute step is %lld but /train/step is %lld: %s",
                               path, (long long)v[5], (long long)v[0], STATE_ADVICE);
    *out = (train_ckpt_attrs_t){
        .step = v[0], .adamw_step = v[1], .epoch = v[2], .pos = v[3], .rows = v[4]};
    return TDL_OK;
}

tdl_status_t train_checkpoint_restore_rank(train_trainer_t *tr, const char *path, bool residual)
{
    dit_model_t *m = tr->model;
    const dit_config_t *run = &m->config;
    /* the same checks of the configuration as every loader, then: is it this run's model? */
    dit_config_t c;
    tdl_status_t st = train_weights_config(path, &c);
    if (st != TDL_OK)
        return st;
    int64_t seed, batch;
    if ((st = ckpt_attr_read_int(path, "seed", &seed)) != TDL_OK ||
        (st = ckpt_attr_read_int(path, "batch", &batch)) != TDL_OK)
        return tdl_error_raise(st == TDL_ERR_IO || st == TDL_ERR_NOMEM ? st : TDL_ERR_CORRUPT,
                               "%s: %s", tdl_error_get(), STATE_ADVICE);
    static const char *const same[] = {"hidden_size", "depth",       "num_heads",  "patch_size",
                                       "in_channels", "num_classes", "input_size", "seed",
                                       "batch",       "learn_sigma", "objective"};
    const int64_t got[] = {c.hidden_size, c.depth,       c.num_heads,  c.patch_size,
                           c.in_channels, c.num_classes, c.input_size, seed,
                           batch,         c.learn_sigma, c.objective};
    const int64_t want[] = {
        run->hidden_size, run->depth,       run->num_heads,  run->patch_size,
        run->in_channels, run->num_classes, run->input_size, (int64_t)tr->opts.seed,
        tr->opts.batch,   run->learn_sigma, run->objective};
    char saved[64] = "", has[64] = "";
    const char *what = NULL;
    for (size_t i = 0; !what && i < TDL_ARRAY_SIZE(same); i++)
        if (got[i] != want[i]) {
            what = same[i];
            snprintf(saved, sizeof(saved), "%lld", (long long)got[i]);
            snprintf(has, sizeof(has), "%lld", (long long)want[i]);
        }
    if (what && !strcmp(what, "objective")) {
        snprintf(saved, sizeof(saved), "%s", dit_objective_name(c.objective));
        snprintf(has, sizeof(has), "%s", dit_objective_name(run->objective));
    }
    const double got_d[] = {c.mlp_ratio, c.class_dropout_prob};
    const double want_d[] = {run->mlp_ratio, run->class_dropout_prob};
    for (int i = 0; !what && i < 2; i++)
        if (got_d[i] != want_d[i]) {
            what = i ? "class_dropout_prob" : "mlp_ratio";
            snprintf(saved, sizeof(saved), "%.17g", got_d[i]);
            snprintf(has, sizeof(has), "%.17g", want_d[i]);
        }
    if (!what && strcmp(c.name, run->name) != 0) {
        what = "model";
        snprintf(saved, sizeof(saved), "%s", c.name);
        snprintf(has, sizeof(has), "%s", run->name);
    }
    if (what)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s was saved with %s = %s, this run has %s: resuming would "
                               "change the run (start a new --ckpt-dir, or use the same "
                               "settings)",
                               path, what, saved, has);
    train_ckpt_attrs_t a;
    if ((st = train_checkpoint_attrs_read(path, &a)) != TDL_OK)
        return st;
    int64_t step = a.step, astep = a.adamw_step, epoch = a.epoch, pos = a.pos, rows = a.rows;
    /* All or nothing: everything is read into scratch first, so a file that fails half-way
     * leaves the trainer as it was (resume falls back to an older file). */
    size_t np = m->num_params;
    float *buf = malloc(5 * np * sizeof(float));
    float hist[TRAIN_LOSS_HISTORY][2];
    ckpt_tensor_t lh = {.name = "loss_history",
                        .ndim = 2,
                        .shape = {(int)TDL_MAX(rows, 1), 2},
                        .data = &hist[0][0]};
    static const char *const groups[] = {"model", "ema", "optim/adamw/m", "optim/adamw/v"};
    bool has_res = false;
    if (!buf)
        st = tdl_error_raise(TDL_ERR_NOMEM, "checkpoint %s: out of memory", path);
    for (size_t g = 0; st == TDL_OK && g < TDL_ARRAY_SIZE(groups); g++)
        st = train_tensors_read(path, groups[g], m, buf + g * np);
    if (st == TDL_OK)
        st = ckpt_weights_read(path, "train", &lh, 1);
    if (st == TDL_OK && residual && tr->codec && train_codec_residual(tr->codec, NULL))
        st = ckpt_weights_has_group(path, "codec", &has_res);
    if (st == TDL_OK && has_res)
        st = train_tensors_read(path, "codec/residual", m, buf + 4 * np);
    if (st == TDL_OK && (st = train_sampler_seek(&tr->sampler, (uint64_t)epoch, (uint64_t)pos)))
        st = tdl_error_raise(st,
                             "%s: the data cursor in /train (data_epoch %lld, data_position "
                             "%lld) does not fit this data set: %s: %s",
                             path, (long long)epoch, (long long)pos, tdl_error_get(), STATE_ADVICE);
    if (st == TDL_OK) {
        memcpy(m->params, buf, np * sizeof(float));
        dit_model_params_changed(m);
        memcpy(tr->ema, buf + np, np * sizeof(float));
        memcpy(tr->opt.m, buf + 2 * np, np * sizeof(float));
        memcpy(tr->opt.v, buf + 3 * np, np * sizeof(float));
        /* the residuals' sum goes to one rank (residual = true): the sum of all is what matters */
        size_t nr;
        float *res = tr->codec ? train_codec_residual(tr->codec, &nr) : NULL;
        if (res)
            for (size_t i = 0; i < TDL_MIN(nr, np); i++)
                res[i] = has_res ? buf[4 * np + i] : 0.0f;
        tr->loss_count = rows;
        for (int64_t i = 0; i < rows; i++)
            memcpy(tr->loss_hist[i], hist[i], sizeof(hist[i]));
    }
    free(buf);
    if (st != TDL_OK)
        return st;
    tr->step = step;
    tr->opt.step = (uint64_t)astep;
    return TDL_OK;
}

tdl_status_t train_checkpoint_restore(train_trainer_t *tr, const char *path)
{
    return train_checkpoint_restore_rank(tr, path, true);
}

tdl_status_t train_checkpoint_resume_auto(train_trainer_t *tr, const char *dir, bool residual,
                                          char *path_out, size_t size)
{
    int64_t steps[4096];
    int n = train_ckpt_dir_list(dir, steps, (int)TDL_ARRAY_SIZE(steps));
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/ckpt-%08lld.h5", dir, (long long)steps[i]);
        tdl_status_t st = train_checkpoint_restore_rank(tr, path, residual);
        if (st == TDL_OK) {
            snprintf(path_out, size, "%s", path);
            return TDL_OK;
        }
        if (st == TDL_ERR_MISMATCH)
            return st;
        TDL_WARN("skipping checkpoint %s: %s; trying an older one", path, tdl_error_get());
    }
    return tdl_error_raise(TDL_ERR_NOT_FOUND, "no checkpoint in %s verifies", dir);
}
