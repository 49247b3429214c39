/* The data-parallel DiT trainer: rectified-flow loss over a global batch split among the
 * members of a gfc group, gradients summed with gfc's all-reduce, AdamW on every member. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "dit/dit.h"
#include "gfc/gfc.h"
#include "train/train.h"
#include "train/train_internal.h"

struct train_trainer {
    train_opts_t opts;
    dit_model_t *model;
    float *ema;
    train_adamw_t opt;
    train_dataset_t *data;
    train_dataset_t *val;                  /* held-out images; NULL: data */
    train_sampler_t sampler;
    int resolution;
    int64_t step;
    uint64_t *batch_idx;                   /* [batch] */
    float *x0, *noise, *x_t, *target, *out, *dout, *t; /* [micro_batch, ...] */
    int *y;
    train_codec_t *codec;                  /* NULL: exact f32 all-reduce */
    float loss_hist[TRAIN_LOSS_HISTORY][2]; /* (step, loss) of the last steps, a ring */
    int64_t loss_count;                    /* losses recorded since the start of training */
};

#define TRAIN_STREAM_SAMPLE 0x73616d706c65ull /* "sample": noise, t and label dropout */
#define TRAIN_STREAM_VAL 0x76616cull          /* "val": noise and t of the held-out images */

void train_trainer_free(train_trainer_t *tr)
{
    if (!tr)
        return;
    train_codec_free(tr->codec);
    free(tr->y), free(tr->t), free(tr->dout), free(tr->out), free(tr->target);
    free(tr->x_t), free(tr->noise), free(tr->x0), free(tr->batch_idx);
    train_sampler_free(&tr->sampler);
    train_dataset_free(tr->data);
    train_dataset_free(tr->val);
    train_adamw_free(&tr->opt);
    free(tr->ema);
    dit_model_free(tr->model);
    free(tr);
}

tdl_status_t train_trainer_create(const train_opts_t *o, train_trainer_t **out)
{
    train_dataset_t *data;
    tdl_status_t st = !strcmp(o->data, "fmnist") ? train_dataset_open_fmnist(NULL, true, &data)
                                                 : train_dataset_open_hdf5(o->data, &data);
    if (st != TDL_OK)
        return st;
    if ((st = train_trainer_create_with_data(o, data, out)) != TDL_OK)
        return st;
    if (!strcmp(o->data, "fmnist") &&
        (st = train_dataset_open_fmnist(NULL, false, &(*out)->val)) != TDL_OK) {
        train_trainer_free(*out);
        *out = NULL;
    }
    return st;
}

tdl_status_t train_trainer_create_with_data(const train_opts_t *o, train_dataset_t *data,
                                            train_trainer_t **out)
{
    tdl_status_t st;
    dit_config_t cfg;
    if (o->batch < 1 || o->micro_batch < 1 || o->steps < 0) {
        train_dataset_free(data);
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "training needs batch >= 1 and micro-batch >= 1 (got %d and %d)",
                               o->batch, o->micro_batch);
    }
    if ((st = dit_config_named(o->model, &cfg)) != TDL_OK) {
        train_dataset_free(data);
        return st;
    }
    train_trainer_t *tr = calloc(1, sizeof(*tr));
    if (!tr) {
        train_dataset_free(data);
        return tdl_error_raise(TDL_ERR_NOMEM, "trainer: out of memory");
    }
    tr->opts = *o;
    tr->data = data;
    if (o->allreduce && strcmp(o->allreduce, "f32") != 0) {
        codec_config_t cc = {.round = (codec_round_t)o->allreduce_round,
                             .bits = o->allreduce_bits};
        if ((st = train_codec_create_config(o->allreduce, &cc, o->seed, &tr->codec)) != TDL_OK)
            goto err;
    }
    if (train_dataset_channels(tr->data) != cfg.in_channels ||
        train_dataset_num_classes(tr->data) > cfg.num_classes) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "data set '%s' has %d channels and %d classes; model %s takes %d "
                             "channels and %d classes",
                             o->data, train_dataset_channels(tr->data),
                             train_dataset_num_classes(tr->data), cfg.name, cfg.in_channels,
                             cfg.num_classes);
        goto err;
    }
    tr->resolution = o->resolution ? o->resolution : train_dataset_resolution(tr->data);
    cfg.input_size = tr->resolution; /* saved with the weights: what sampling defaults to */
    struct dit_backend *be;
    if ((st = dit_backend_open(o->device, -1, &be)) != TDL_OK ||
        (st = dit_model_create_on(&cfg, o->micro_batch, tr->resolution, be, &tr->model)) != TDL_OK)
        goto err;
    dit_model_init_weights(tr->model, o->seed);
    size_t np = tr->model->num_params;
    if (tr->codec && o->allreduce_ef && (st = train_codec_error_feedback(tr->codec, np)) != TDL_OK)
        goto err;
    tr->ema = tensor_alloc(np);
    if (!tr->ema) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "trainer: no memory for EMA weights");
        goto err;
    }
    memcpy(tr->ema, tr->model->params, np * sizeof(float));
    if ((st = train_adamw_init(&tr->opt, np, 0.9f, 0.999f, 1e-8f, o->weight_decay)) != TDL_OK)
        goto err;
    if ((st = train_sampler_init(&tr->sampler, train_dataset_count(tr->data),
                                 o->seed ^ 0x5eed5a3d1e5ull)) != TDL_OK)
        goto err;
    size_t per = (size_t)cfg.in_channels * tr->resolution * tr->resolution;
    size_t mb = (size_t)o->micro_batch;
    tr->batch_idx = calloc((size_t)o->batch, sizeof(uint64_t));
    tr->x0 = tensor_alloc(mb * per), tr->noise = tensor_alloc(mb * per);
    tr->x_t = tensor_alloc(mb * per), tr->target = tensor_alloc(mb * per);
    tr->out = tensor_alloc(mb * per), tr->dout = tensor_alloc(mb * per);
    tr->t = tensor_alloc(mb);
    tr->y = calloc(mb, sizeof(int));
    if (!tr->batch_idx || !tr->x0 || !tr->noise || !tr->x_t || !tr->target || !tr->out ||
        !tr->dout || !tr->t || !tr->y) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "trainer: out of memory for micro-batches");
        goto err;
    }
    *out = tr;
    return TDL_OK;
err:
    train_trainer_free(tr);
    return st;
}

/* Sample j of the global batch of `step`: its noise, time and label dropout come from its own
 * stream, so they do not depend on which rank draws them. */
static void trainer_sample_rng(const train_trainer_t *tr, int64_t step, int j, tdl_rng_t *rng)
{
    tdl_rng_init(rng, tr->opts.seed ^ TRAIN_STREAM_SAMPLE,
                 (uint64_t)step * (uint64_t)tr->opts.batch + (uint64_t)j);
}

static tdl_status_t trainer_val_loss(train_trainer_t *tr, gfc_group_t *group, int count,
                                     double *loss_out)
{
    dit_model_t *m = tr->model;
    const dit_config_t *cfg = &m->config;
    const train_dataset_t *ds = tr->val ? tr->val : tr->data;
    int members = group ? group->size : 1, me = group ? group->me : 0;
    count = (int)TDL_MIN((size_t)count, train_dataset_count(ds));
    if (count < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "validation needs at least one image");
    int first = (int)((int64_t)count * me / members), last = (int)((int64_t)count * (me + 1) / members);
    size_t per = (size_t)cfg->in_channels * tr->resolution * tr->resolution;
    double sum = 0;
    tdl_status_t st;
    for (int j0 = first; j0 < last; j0 += tr->opts.micro_batch) {
        int k = TDL_MIN(tr->opts.micro_batch, last - j0);
        for (int i = 0; i < k; i++) {
            if ((st = train_dataset_get(ds, (size_t)(j0 + i), tr->resolution,
                                        tr->x0 + (size_t)i * per, &tr->y[i])) != TDL_OK)
                return st;
            tdl_rng_t rng;
            tdl_rng_init(&rng, tr->opts.seed ^ TRAIN_STREAM_VAL, (uint64_t)(j0 + i));
            tr->t[i] = tdl_rng_uniform(&rng);
            tdl_rng_fill_normal(&rng, tr->noise + (size_t)i * per, per);
        }
        dit_rf_interpolate(tr->x0, tr->noise, tr->t, k, per, tr->x_t, tr->target);
        if ((st = dit_model_forward(m, tr->x_t, tr->t, tr->y, k, tr->resolution, tr->resolution,
                                    tr->out)) != TDL_OK)
            return st;
        sum += dit_mse_loss(tr->out, tr->target, (size_t)k * per, NULL) * k;
    }
    float part = (float)(sum / count), total = part;
    if (group && members > 1 &&
        (st = gfc_allreduce(group, &part, &total, 1, GFC_DT_F32, GFC_OP_SUM, NULL)) != TDL_OK)
        return st;
    *loss_out = total;
    return TDL_OK;
}

tdl_status_t train_trainer_val_loss(train_trainer_t *tr, gfc_group_t *group, int count, bool ema,
                                    double *loss_out)
{
    if (!ema)
        return trainer_val_loss(tr, group, count, loss_out);
    /* the EMA weights stand in for the model's for the forward passes, then the model's return */
    dit_model_t *m = tr->model;
    size_t bytes = m->num_params * sizeof(float);
    float *keep = tensor_alloc(m->num_params);
    if (!keep)
        return tdl_error_raise(TDL_ERR_NOMEM, "validation: no memory for a copy of the weights "
                               "(%zu bytes)", bytes);
    memcpy(keep, m->params, bytes);
    memcpy(m->params, tr->ema, bytes);
    dit_model_params_changed(m);
    tdl_status_t st = trainer_val_loss(tr, group, count, loss_out);
    memcpy(m->params, keep, bytes);
    dit_model_params_changed(m);
    free(keep);
    return st;
}

tdl_status_t train_trainer_step(train_trainer_t *tr, gfc_group_t *group, double *loss_out,
                                bool *skipped_out)
{
    const train_opts_t *o = &tr->opts;
    dit_model_t *m = tr->model;
    const dit_config_t *cfg = &m->config;
    int members = group ? group->size : 1, me = group ? group->me : 0;
    int first = (int)((int64_t)o->batch * me / members);
    int last = (int)((int64_t)o->batch * (me + 1) / members);
    size_t per = (size_t)cfg->in_channels * tr->resolution * tr->resolution;
    tdl_status_t st;

    /* Every member draws the whole global batch, so the data order is the same for any split. */
    train_sampler_take(&tr->sampler, tr->batch_idx, (size_t)o->batch);
    dit_model_zero_grad(m);
    double loss_sum = 0;
    for (int j0 = first; j0 < last; j0 += o->micro_batch) {
        int k = TDL_MIN(o->micro_batch, last - j0);
        for (int i = 0; i < k; i++) {
            int label;
            st = train_dataset_get(tr->data, tr->batch_idx[j0 + i], tr->resolution,
                                   tr->x0 + (size_t)i * per, &label);
            if (st != TDL_OK)
                return st;
            tdl_rng_t rng;
            trainer_sample_rng(tr, tr->step, j0 + i, &rng);
            tr->t[i] = tdl_rng_uniform(&rng);
            bool drop = tdl_rng_uniform(&rng) < (float)cfg->class_dropout_prob;
            tr->y[i] = drop ? cfg->num_classes : label;
            tdl_rng_fill_normal(&rng, tr->noise + (size_t)i * per, per);
        }
        dit_rf_interpolate(tr->x0, tr->noise, tr->t, k, per, tr->x_t, tr->target);
        if ((st = dit_model_forward(m, tr->x_t, tr->t, tr->y, k, tr->resolution, tr->resolution,
                                    tr->out)) != TDL_OK)
            return st;
        double mse = dit_mse_loss(tr->out, tr->target, (size_t)k * per, tr->dout);
        /* d(mean over the global batch)/d(out): the micro-batch mean's gradient times k / batch */
        float scale = (float)k / (float)o->batch;
        for (size_t i = 0; i < (size_t)k * per; i++)
            tr->dout[i] *= scale;
        if ((st = dit_model_backward(m, tr->dout)) != TDL_OK)
            return st;
        loss_sum += mse * k;
    }
    if (o->dump_grads && o->dump_every > 0 && tr->step % o->dump_every == 0) {
        /* Each rank's own gradient, before any sum: the inputs of the all-reduce, for the codec
         * benchmarks. */
        char path[1024];
        int rank = group ? group->ranks[group->me] : 0;
        snprintf(path, sizeof(path), "%s/grads-%08lld-rank%d.h5", o->dump_grads,
                 (long long)tr->step, rank);
        ckpt_tensor_t *gt = train_tensors_of(m, m->grads);
        ckpt_attr_t attrs[TRAIN_CONFIG_ATTRS + 3];
        int na = train_config_attrs(cfg, attrs);
        attrs[na++] = (ckpt_attr_t){.key = "step", .type = CKPT_ATTR_INT, .i = tr->step};
        attrs[na++] = (ckpt_attr_t){.key = "rank", .type = CKPT_ATTR_INT, .i = rank};
        attrs[na++] = (ckpt_attr_t){.key = "members", .type = CKPT_ATTR_INT, .i = members};
        st = gt ? ckpt_weights_write(path, gt, NULL, m->ninfos, attrs, na)
                : tdl_error_raise(TDL_ERR_NOMEM, "gradient dump: out of memory");
        free(gt);
        if (st != TDL_OK)
            return st;
    }
    if (group && members > 1) {
        /* Gradients are checked before they are encoded: a NaN or Inf is reported and the step
         * skipped by every member, never folded into the sum. */
        float bad = 0;
        for (size_t i = 0; i < m->num_params; i++)
            bad += !isfinite(m->grads[i]);
        float any_bad;
        if ((st = gfc_allreduce(group, &bad, &any_bad, 1, GFC_DT_F32, GFC_OP_MAX, NULL)))
            return st;
        if (any_bad > 0) {
            TDL_WARN("step %lld: a gradient on some rank is not finite: step skipped",
                     (long long)tr->step);
            tr->step++;
            if (loss_out)
                *loss_out = NAN;
            if (skipped_out)
                *skipped_out = true;
            return TDL_OK;
        }
        train_codec_apply_residual(tr->codec, m->grads, m->num_params);
        train_codec_set_step(tr->codec, tr->step); /* rounding follows the step, not gfc's count */
        gfc_allreduce_opts_t ar = {.algo = GFC_ALLREDUCE_AUTO,
                                   .codec = tr->codec ? train_codec_hook(tr->codec) : NULL};
        if ((st = gfc_allreduce(group, m->grads, m->grads, m->num_params, GFC_DT_F32, GFC_OP_SUM,
                                &ar)) != TDL_OK)
            return st;
        float l = (float)loss_sum, total;
        if ((st = gfc_allreduce(group, &l, &total, 1, GFC_DT_F32, GFC_OP_SUM, NULL)) != TDL_OK)
            return st;
        loss_sum = total;
    }
    double norm = train_grad_clip(m->grads, m->num_params, o->clip);
    float lr = train_lr_at((uint64_t)tr->step, o->lr, (uint64_t)o->warmup);
    bool skip = !isfinite(norm);
    if (skip) {
        TDL_WARN("step %lld: gradient is not finite (norm %g): step skipped",
                 (long long)tr->step, norm);
    } else {
        train_adamw_step(&tr->opt, m->params, m->grads, lr);
        dit_model_params_changed(m);
        /* EMA warm-up ((1 + n) / (10 + n), as diffusers and timm do): with a fixed 0.999 the
         * average would still weigh the zero-initialized output layer for thousands of steps. */
        float warm = (float)(1 + tr->step) / (float)(10 + tr->step);
        train_ema_update(tr->ema, m->params, m->num_params, TDL_MIN(o->ema_decay, warm));
    }
    tr->step++;
    float *h = tr->loss_hist[tr->loss_count++ % TRAIN_LOSS_HISTORY];
    h[0] = (float)(tr->step - 1), h[1] = (float)(loss_sum / o->batch);
    if (loss_out)
        *loss_out = loss_sum / o->batch;
    if (skipped_out)
        *skipped_out = skip;
    return TDL_OK;
}

int64_t train_trainer_steps_done(const train_trainer_t *tr)
{
    return tr->step;
}

float train_trainer_lr(const train_trainer_t *tr)
{
    return train_lr_at((uint64_t)(tr->step ? tr->step - 1 : 0), tr->opts.lr,
                       (uint64_t)tr->opts.warmup);
}

dit_model_t *train_trainer_model(train_trainer_t *tr)
{
    return tr->model;
}

const float *train_trainer_ema(const train_trainer_t *tr)
{
    return tr->ema;
}

/* ---- elastic membership: a rank joins by taking a member's state over gfc ----------------- */

static uint64_t sync_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull; /* FNV-1a */
    return h;
}

/* Sent first, so a member that could not take the state finds out before any array moves. */
typedef struct trainer_sync_hdr {
    char model[32];
    uint64_t num_params;
    uint64_t run; /* hash of the settings train_trainer_step reads */
    int64_t step, loss_count;
    uint64_t adamw_step, epoch, pos;
} trainer_sync_hdr_t;

static void trainer_sync_header(const train_trainer_t *tr, trainer_sync_hdr_t *h)
{
    const train_opts_t *o = &tr->opts;
    const dit_config_t *c = &tr->model->config;
    memset(h, 0, sizeof(*h));
    snprintf(h->model, sizeof(h->model), "%s", c->name);
    h->num_params = tr->model->num_params;
    /* micro_batch is left out: it only changes the order of a member's own sums. */
    const int64_t ints[] = {c->patch_size,  c->in_channels,      c->hidden_size,  c->depth,
                            c->num_heads,   c->num_classes,      tr->resolution,  o->batch,
                            o->warmup,      o->allreduce_round,  o->allreduce_ef, (int64_t)o->seed,
                            (int64_t)tr->sampler.n};
    const double reals[] = {
        c->mlp_ratio, c->class_dropout_prob, o->lr,         o->weight_decay, o->clip,
        o->ema_decay, o->allreduce_bits,     tr->opt.beta1, tr->opt.beta2,   tr->opt.eps};
    const char *codec = tr->codec ? o->allreduce : "f32";
    uint64_t run = sync_hash(0xcbf29ce484222325ull, ints, sizeof(ints));
    run = sync_hash(run, reals, sizeof(reals));
    h->run = sync_hash(run, codec, strlen(codec));
    h->step = tr->step, h->loss_count = tr->loss_count, h->adamw_step = tr->opt.step;
    train_sampler_cursor(&tr->sampler, &h->epoch, &h->pos);
}

tdl_status_t train_trainer_sync(train_trainer_t *tr, gfc_group_t *group, int root)
{
    if (root < 0 || root >= group->size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "trainer sync: root %d is not a member of a group of %d", root,
                               group->size);
    if (group->size == 1)
        return TDL_OK;
    trainer_sync_hdr_t mine, hdr;
    trainer_sync_header(tr, &mine);
    hdr = mine;
    tdl_status_t st = gfc_bcast(group, &hdr, sizeof(hdr), GFC_DT_BYTE, root);
    if (st != TDL_OK)
        return st;
    /* Every member learns whether any other differs, so all fail together rather than some
     * waiting for arrays that never come. */
    int32_t bad = hdr.num_params != mine.num_params || strcmp(hdr.model, mine.model) != 0 ||
                  hdr.run != mine.run,
            any;
    if ((st = gfc_allreduce(group, &bad, &any, 1, GFC_DT_I32, GFC_OP_MAX, NULL)) != TDL_OK)
        return st;
    int rank = group->ranks[group->me], from = group->ranks[root];
    if (bad)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "rank %d cannot take the training state of rank %d: it trains %s "
                               "with %llu parameters, rank %d %s with %llu%s",
                               rank, from, mine.model, (unsigned long long)mine.num_params, from,
                               hdr.model, (unsigned long long)hdr.num_params,
                               hdr.num_params == mine.num_params && !strcmp(hdr.model, mine.model)
                                   ? " but with another seed, batch, data set, hyperparameters "
                                     "or codec"
                                   : "");
    if (any)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "rank %d: another member of the group trains another model or run "
                               "than rank %d; no state was copied",
                               rank, from);
    dit_model_t *m = tr->model;
    float *const arrays[] = {m->params, tr->ema, tr->opt.m, tr->opt.v, &tr->loss_hist[0][0]};
    const size_t counts[] = {m->num_params, m->num_params, m->num_params, m->num_params,
                             2 * TRAIN_LOSS_HISTORY};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(arrays); i++)
        if ((st = gfc_bcast(group, arrays[i], counts[i], GFC_DT_F32, root)) != TDL_OK)
            return st;
    dit_model_params_changed(m);
    if ((st = train_sampler_seek(&tr->sampler, hdr.epoch, hdr.pos)) != TDL_OK)
        return st;
    /* A residual is its rank's unsent share of past gradients: a member that was not training
     * beside root until now (a joiner, or one coming back) holds no share of this run's. */
    size_t nr;
    float *res = tr->codec ? train_codec_residual(tr->codec, &nr) : NULL;
    if (res && mine.step != hdr.step)
        memset(res, 0, nr * sizeof(float));
    tr->step = hdr.step, tr->loss_count = hdr.loss_count, tr->opt.step = hdr.adamw_step;
    return TDL_OK;
}

/* ---- checkpoints: everything a run needs to continue bit for bit -------------------------- */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "train/train_internal.h"

/* Everything a checkpoint holds, copied out of the trainer at a step boundary: what the
 * background writer writes while training goes on. */
struct train_ckpt_state {
    const dit_model_t *model; /* names and shapes only (they never change) */
    size_t np;
    float *buf;               /* params | ema | adamw m | adamw v, np each */
    float *residual;          /* the sum over ranks of the error-feedback residuals, or NULL */
    float loss[TRAIN_LOSS_HISTORY][2];
    int nloss;
    int64_t step, adamw_step, epoch, pos, world_size;
    uint64_t seed;
    int batch;
    float lr;
    int64_t warmup;
};

static void ckpt_state_free(train_ckpt_state_t *cs)
{
    if (cs) {
        free(cs->buf);
        free(cs->residual);
        free(cs);
    }
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
        ckpt_state_free(cs);
        *out = NULL;
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: no memory for a copy of the state");
    }
    if (residual_sum && !cs->residual && !(cs->residual = malloc(np * sizeof(float)))) {
        ckpt_state_free(cs);
        *out = NULL;
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint: no memory for the residual");
    }
    cs->model = m, cs->np = np;
    memcpy(cs->buf, m->params, np * sizeof(float));
    memcpy(cs->buf + np, tr->ema, np * sizeof(float));
    memcpy(cs->buf + 2 * np, tr->opt.m, np * sizeof(float));
    memcpy(cs->buf + 3 * np, tr->opt.v, np * sizeof(float));
    if (residual_sum)
        memcpy(cs->residual, residual_sum, np * sizeof(float));
    else if (cs->residual)
        free(cs->residual), cs->residual = NULL;
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
    *out = cs;
    return TDL_OK;
}

tdl_status_t train_checkpoint_write(const train_ckpt_state_t *cs, const char *path)
{
    const dit_model_t *m = cs->model;
    size_t np = cs->np;
    ckpt_tensor_t *pt = train_tensors_of(m, cs->buf), *et = train_tensors_of(m, cs->buf + np);
    ckpt_tensor_t *mt = train_tensors_of(m, cs->buf + 2 * np);
    ckpt_tensor_t *vt = train_tensors_of(m, cs->buf + 3 * np);
    ckpt_tensor_t *rt = cs->residual ? train_tensors_of(m, cs->residual) : NULL;
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
        {.key = "lr_at_step", .type = CKPT_ATTR_DOUBLE,
         .d = train_lr_at((uint64_t)cs->step, cs->lr, (uint64_t)cs->warmup)},
        {.key = "rng_sample_stream", .type = CKPT_ATTR_INT,
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
    ckpt_attr_t attrs[TRAIN_CONFIG_ATTRS + 5];
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
    st = ckpt_file_write(path, pt, et, m->ninfos, extra, rt ? 4 : 3, attrs, na);
    free(json);
out:
    free(pt), free(et), free(mt), free(vt), free(rt);
    return st;
}

tdl_status_t train_checkpoint_save(train_trainer_t *tr, const char *path, int world_size)
{
    train_ckpt_state_t *cs = NULL;
    tdl_status_t st = train_checkpoint_capture(tr, world_size, NULL, &cs);
    if (st == TDL_OK)
        st = train_checkpoint_write(cs, path);
    ckpt_state_free(cs);
    return st;
}

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
    static const char *const same[] = {"hidden_size", "depth",       "num_heads",
                                       "patch_size",  "in_channels", "num_classes",
                                       "input_size",  "seed",        "batch"};
    const int64_t got[] = {c.hidden_size, c.depth,      c.num_heads, c.patch_size, c.in_channels,
                           c.num_classes, c.input_size, seed,        batch};
    const int64_t want[] = {
        run->hidden_size, run->depth,       run->num_heads,  run->patch_size,
        run->in_channels, run->num_classes, run->input_size, (int64_t)tr->opts.seed,
        tr->opts.batch};
    char saved[64] = "", has[64] = "";
    const char *what = NULL;
    for (size_t i = 0; !what && i < TDL_ARRAY_SIZE(same); i++)
        if (got[i] != want[i]) {
            what = same[i];
            snprintf(saved, sizeof(saved), "%lld", (long long)got[i]);
            snprintf(has, sizeof(has), "%lld", (long long)want[i]);
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
    ckpt_tensor_t lh = {.name = "loss_history", .ndim = 2, .shape = {(int)TDL_MAX(rows, 1), 2},
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

int train_trainer_loss_history(const train_trainer_t *tr, float (*out)[2], int max)
{
    int64_t first = TDL_MAX(0, tr->loss_count - TRAIN_LOSS_HISTORY);
    int n = (int)TDL_MIN((int64_t)max, tr->loss_count - first);
    for (int i = 0; i < n; i++)
        memcpy(out[i], tr->loss_hist[(first + i) % TRAIN_LOSS_HISTORY], sizeof(out[i]));
    return n;
}

/* Checkpoint files in dir, newest step first: "ckpt-<step>.h5". */
static int ckpt_list(const char *dir, int64_t *steps, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long long s;
        char tail[8];
        if (sscanf(e->d_name, "ckpt-%lld.h%7s", &s, tail) == 2 && !strcmp(tail, "5"))
            steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* few files: insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

/* After dir/ckpt-<step>.h5 is on disk: "latest" names it, and only the newest `keep` stay. */
static tdl_status_t ckpt_publish(const char *dir, const char *path, int keep)
{
    char tmp[1100], latest[1100];
    snprintf(latest, sizeof(latest), "%s/latest", dir);
    snprintf(tmp, sizeof(tmp), "%s/latest.tmp.%ld", dir, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return tdl_error_raise(TDL_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char line[300];
    int len = snprintf(line, sizeof(line), "%s\n", base);
    if (write(fd, line, (size_t)len) != len) {
        close(fd);
        unlink(tmp);
        return tdl_error_raise(TDL_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    }
    tdl_status_t st = tdl_file_commit(fd, tmp, latest);
    if (st != TDL_OK)
        return st;
    /* Keep the newest `keep`; the one just written is among them, so a good file always stays. */
    int64_t steps[4096];
    int n = ckpt_list(dir, steps, (int)TDL_ARRAY_SIZE(steps));
    for (int i = TDL_MAX(keep, 1); i < n; i++) {
        char old[1024];
        snprintf(old, sizeof(old), "%s/ckpt-%08lld.h5", dir, (long long)steps[i]);
        unlink(old);
    }
    return TDL_OK;
}

tdl_status_t train_checkpoint_dir_save_res(train_trainer_t *tr, const char *dir, int keep,
                                           int world_size, const float *residual_sum,
                                           char *path_out, size_t size)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/ckpt-%08lld.h5", dir, (long long)tr->step);
    train_ckpt_state_t *cs = NULL;
    tdl_status_t st = train_checkpoint_capture(tr, world_size, residual_sum, &cs);
    if (st == TDL_OK)
        st = train_checkpoint_write(cs, path);
    ckpt_state_free(cs);
    if (st == TDL_OK)
        st = ckpt_publish(dir, path, keep);
    if (st == TDL_OK && path_out)
        snprintf(path_out, size, "%s", path);
    return st;
}

tdl_status_t train_checkpoint_dir_save(train_trainer_t *tr, const char *dir, int keep,
                                       int world_size, char *path_out, size_t size)
{
    return train_checkpoint_dir_save_res(tr, dir, keep, world_size, NULL, path_out, size);
}

float *train_codec_residual_of(train_trainer_t *tr, size_t *n_out)
{
    return tr->codec ? train_codec_residual(tr->codec, n_out) : (*n_out = 0, NULL);
}

/* ---- the background writer ---------------------------------------------------------------- */

#include <pthread.h>

struct train_ckpt_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy, quit, started;
    train_ckpt_state_t *state;
    char dir[1024], path[1100];
    int keep;
    tdl_status_t status;  /* of the last write */
    char error[512];
};

static void *writer_main(void *arg)
{
    train_ckpt_writer_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy && w->quit)
            break;
        pthread_mutex_unlock(&w->mu);
        tdl_status_t st = train_checkpoint_write(w->state, w->path);
        if (st == TDL_OK)
            st = ckpt_publish(w->dir, w->path, w->keep);
        pthread_mutex_lock(&w->mu);
        w->status = st;
        snprintf(w->error, sizeof(w->error), "%s", st ? tdl_error_get() : "");
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

tdl_status_t train_ckpt_writer_create(train_ckpt_writer_t **out)
{
    train_ckpt_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint writer: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return tdl_error_raise(TDL_ERR_IO, "checkpoint writer: cannot start its thread");
    }
    w->started = true;
    *out = w;
    return TDL_OK;
}

tdl_status_t train_ckpt_writer_wait(train_ckpt_writer_t *w, char *path_out, size_t size)
{
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    tdl_status_t st = w->status;
    if (st != TDL_OK)
        tdl_error_raise(st, "%s", w->error);
    if (path_out)
        snprintf(path_out, size, "%s", w->path);
    w->status = TDL_OK;
    pthread_mutex_unlock(&w->mu);
    return st;
}

tdl_status_t train_checkpoint_dir_save_async(train_trainer_t *tr, train_ckpt_writer_t *w,
                                             const char *dir, int keep, int world_size,
                                             const float *residual_sum, double *copy_s_out)
{
    /* the previous write first: its error is reported here, and its buffer is reused */
    tdl_status_t st = train_ckpt_writer_wait(w, NULL, 0);
    if (st != TDL_OK)
        return st;
    double t0 = tdl_clock_s();
    if ((st = train_checkpoint_capture(tr, world_size, residual_sum, &w->state)) != TDL_OK)
        return st;
    if (copy_s_out)
        *copy_s_out = tdl_clock_s() - t0;
    pthread_mutex_lock(&w->mu);
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    snprintf(w->path, sizeof(w->path), "%s/ckpt-%08lld.h5", dir, (long long)tr->step);
    w->keep = keep;
    w->busy = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return TDL_OK;
}

void train_ckpt_writer_free(train_ckpt_writer_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->started)
        pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    ckpt_state_free(w->state);
    free(w);
}

tdl_status_t train_checkpoint_resume_auto(train_trainer_t *tr, const char *dir, bool residual,
                                          char *path_out, size_t size)
{
    int64_t steps[4096];
    int n = ckpt_list(dir, steps, (int)TDL_ARRAY_SIZE(steps));
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
