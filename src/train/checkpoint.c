/* Training checkpoints (doc/checkpoint.md): everything a run needs to continue bit for bit,
 * copied out of the trainer at a step boundary and written as one HDF5 file. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "dit/dit.h"
#include "train/train.h"
#include "train/train_internal.h"

/* Everything a checkpoint holds at a step boundary: copied out of the trainer for the background
 * writer, which writes while training goes on; the trainer's own arrays for a write in the
 * foreground, where a copy would add 4 times the parameters to the run's peak memory. */
struct train_ckpt_state {
    const dit_model_t *model; /* names and shapes only (they never change) */
    float *arrays[4];         /* params, ema, adamw m, adamw v: into buf, or the trainer's */
    const float *residual;    /* the sum over ranks of the error-feedback residuals, or NULL */
    float *buf;               /* a copy: params | ema | adamw m | adamw v; or NULL */
    float *res_buf;           /* a copy of the residual, or NULL */
    float loss[TRAIN_LOSS_HISTORY][2];
    int nloss;
    int64_t step, adamw_step, epoch, pos, world_size;
    uint64_t seed;
    int batch;
    float lr;
    int64_t warmup;
    char *class_names; /* the attribute's JSON, or NULL: the data set has no names */
};

void train_ckpt_state_free(train_ckpt_state_t *cs)
{
    if (cs) {
        free(cs->buf);
        free(cs->res_buf);
        free(cs->class_names);
        free(cs);
    }
}

/* The small part of the state, the same for a copy and a view: loss ring, cursor, settings. */
static void checkpoint_scalars(train_ckpt_state_t *cs, const train_trainer_t *tr, int world_size)
{
    cs->model = tr->model;
    /* the loss ring, oldest first */
    int64_t first = TDL_MAX(0, tr->loss_count - TRAIN_LOSS_HISTORY);
    cs->nloss = (int)(tr->loss_count - first);
    for (int i = 0; i < cs->nloss; i++)
        memcpy(cs->loss[i], tr->loss_hist[(first + i) % TRAIN_LOSS_HISTORY], sizeof(cs->loss[i]));
    uint64_t epoch, pos;
    train_sampler_cursor(&tr->sampler, &epoch, &pos);
    cs->step = tr->step, cs->adamw_step = (int64_t)tr->opt.step;
    cs->epoch = (int64_t)epoch, cs->pos = (int64_t)pos, cs->world_size = world_size;
    cs->seed = tr->opts.seed, cs->batch = tr->opts.batch;
    cs->lr = tr->opts.lr, cs->warmup = tr->opts.warmup;
}

tdl_status_t train_checkpoint_capture(train_trainer_t *tr, int world_size,
                                      const float *residual_sum, train_ckpt_state_t **out)
{
    dit_model_t *m = tr->model;
    size_t np = m->num_params;
    train_ckpt_state_t *cs = *out;
    if (!cs && !(cs = calloc(1, sizeof(*cs))))
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: out of memory");
    if (!cs->buf && !(cs->buf = malloc(4 * np * sizeof(float)))) {
        train_ckpt_state_free(cs);
        *out = NULL;
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: no memory for a copy of the state");
    }
    if (residual_sum && !cs->res_buf && !(cs->res_buf = malloc(np * sizeof(float)))) {
        train_ckpt_state_free(cs);
        *out = NULL;
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: no memory for the residual");
    }
    /* the names never change in a run: made once, as the buffers are */
    const char *const *names = train_trainer_class_names(tr);
    if (names && !cs->class_names &&
        !(cs->class_names = train_class_names_json(names, m->config.num_classes))) {
        train_ckpt_state_free(cs);
        *out = NULL;
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: no memory for the class names");
    }
    const float *const from[4] = {m->params, tr->ema, tr->opt.m, tr->opt.v};
    for (int k = 0; k < 4; k++) {
        memcpy(cs->buf + k * np, from[k], np * sizeof(float));
        cs->arrays[k] = cs->buf + k * np;
    }
    if (residual_sum)
        memcpy(cs->res_buf, residual_sum, np * sizeof(float));
    else if (cs->res_buf)
        free(cs->res_buf), cs->res_buf = NULL;
    cs->residual = cs->res_buf;
    checkpoint_scalars(cs, tr, world_size);
    *out = cs;
    return TDL_OK;
}

tdl_status_t train_checkpoint_write(const train_ckpt_state_t *cs, const char *path)
{
    const dit_model_t *m = cs->model;
    ckpt_tensor_t *pt = train_tensors_of(m, cs->arrays[0]);
    ckpt_tensor_t *et = train_tensors_of(m, cs->arrays[1]);
    ckpt_tensor_t *mt = train_tensors_of(m, cs->arrays[2]);
    ckpt_tensor_t *vt = train_tensors_of(m, cs->arrays[3]);
    /* ckpt only reads the data of the tensors it writes */
    ckpt_tensor_t *rt = cs->residual ? train_tensors_of(m, (float *)cs->residual) : NULL;
    tdl_status_t st;
    if (!pt || !et || !mt || !vt || (cs->residual && !rt)) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "checkpoint %s: out of memory", path);
        goto out;
    }
    /* /train: where training stands. Every random stream is counter-based (Philox keyed by the
     * seed and a stream id, or a hash of the step), so its position follows from the step: the
     * attributes name the streams and their next counters. */
    float loss_empty[1][2] = {{0, 0}};
    ckpt_tensor_t lh = {.name = "loss_history",
                        .ndim = 2,
                        .shape = {TDL_MAX(cs->nloss, 1), 2},
                        .data = cs->nloss ? (float *)cs->loss : (float *)loss_empty};
    const ckpt_attr_t train_attrs[] = {
        {.key = "step", .type = CKPT_ATTR_INT, .i = cs->step},
        {.key = "adamw_step", .type = CKPT_ATTR_INT, .i = cs->adamw_step},
        {.key = "data_epoch", .type = CKPT_ATTR_INT, .i = cs->epoch},
        {.key = "data_position", .type = CKPT_ATTR_INT, .i = cs->pos},
        {.key = "lr", .type = CKPT_ATTR_DOUBLE, .d = cs->lr},
        {.key = "lr_schedule", .type = CKPT_ATTR_STRING, .s = "linear warm-up, then constant"},
        {.key = "lr_warmup_steps", .type = CKPT_ATTR_INT, .i = cs->warmup},
        {.key = "lr_at_step",
         .type = CKPT_ATTR_DOUBLE,
         .d = train_lr_at((uint64_t)cs->step, cs->lr, (uint64_t)cs->warmup)},
        {.key = "rng_sample_stream",
         .type = CKPT_ATTR_INT,
         .i = (int64_t)(cs->seed ^ TRAIN_STREAM_SAMPLE)},
        {.key = "rng_sample_next", .type = CKPT_ATTR_INT, .i = cs->step * cs->batch},
        {.key = "rng_data_order_epoch", .type = CKPT_ATTR_INT, .i = cs->epoch},
        {.key = "rng_codec_step", .type = CKPT_ATTR_INT, .i = cs->step},
        {.key = "loss_history_rows", .type = CKPT_ATTR_INT, .i = cs->nloss},
    };
    ckpt_group_t extra[4] = {
        {"optim/adamw/m", mt, m->ninfos, NULL, 0},
        {"optim/adamw/v", vt, m->ninfos, NULL, 0},
        {"train", &lh, 1, train_attrs, (int)TDL_ARRAY_SIZE(train_attrs)},
        {"codec/residual", rt, m->ninfos, NULL, 0},
    };
    ckpt_attr_t attrs[TRAIN_CONFIG_ATTRS + 6];
    int na = train_config_attrs(&m->config, attrs);
    /* as in a weights file: one reader for both */
    char *json = train_config_json(&m->config);
    if (!json) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "checkpoint %s: out of memory", path);
        goto out;
    }
    attrs[na++] = (ckpt_attr_t){.key = "config_json", .type = CKPT_ATTR_STRING, .s = json};
    const ckpt_attr_t state[] = {
        /* also at the root, where older tidal and simple scripts look */
        {.key = "step", .type = CKPT_ATTR_INT, .i = cs->step},
        {.key = "seed", .type = CKPT_ATTR_INT, .i = (int64_t)cs->seed},
        {.key = "batch", .type = CKPT_ATTR_INT, .i = cs->batch},
        {.key = "world_size", .type = CKPT_ATTR_INT, .i = cs->world_size},
    };
    memcpy(attrs + na, state, sizeof(state));
    na += (int)TDL_ARRAY_SIZE(state);
    if (cs->class_names) /* what tidal serve --ckpt reads from a checkpoint too */
        attrs[na++] = (ckpt_attr_t){
            .key = TRAIN_CLASS_NAMES_ATTR, .type = CKPT_ATTR_STRING, .s = cs->class_names};
    st = ckpt_file_write(path, pt, et, m->ninfos, extra, rt ? 4 : 3, attrs, na);
    free(json);
out:
    free(pt), free(et), free(mt), free(vt), free(rt);
    return st;
}

tdl_status_t train_checkpoint_write_now(train_trainer_t *tr, int world_size,
                                        const float *residual_sum, const char *path)
{
    /* nothing changes the trainer while this writes: its arrays are written as they are */
    dit_model_t *m = tr->model;
    train_ckpt_state_t cs = {
        .arrays = {m->params, tr->ema, tr->opt.m, tr->opt.v},
        .residual = residual_sum,
    };
    checkpoint_scalars(&cs, tr, world_size);
    const char *const *names = train_trainer_class_names(tr);
    if (names && !(cs.class_names = train_class_names_json(names, m->config.num_classes)))
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: no memory for the class names");
    tdl_status_t st = train_checkpoint_write(&cs, path);
    free(cs.class_names);
    return st;
}

tdl_status_t train_checkpoint_save(train_trainer_t *tr, const char *path, int world_size)
{
    return train_checkpoint_write_now(tr, world_size, NULL, path);
}
