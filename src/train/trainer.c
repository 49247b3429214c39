/* The data-parallel DiT trainer: rectified-flow loss over a global batch split among the
 * members of a gfc group, gradients summed with gfc's all-reduce, AdamW on every member. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "gfc/gfc.h"
#include "train/train.h"

struct train_trainer {
    train_opts_t opts;
    dit_model_t *model;
    float *ema;
    train_adamw_t opt;
    train_dataset_t *data;
    train_sampler_t sampler;
    int resolution;
    int64_t step;
    uint64_t *batch_idx;                   /* [batch] */
    float *x0, *noise, *x_t, *target, *out, *dout, *t; /* [micro_batch, ...] */
    int *y;
};

#define TRAIN_STREAM_SAMPLE 0x73616d706c65ull /* "sample": noise, t and label dropout */

void train_trainer_free(train_trainer_t *tr)
{
    if (!tr)
        return;
    free(tr->y), free(tr->t), free(tr->dout), free(tr->out), free(tr->target);
    free(tr->x_t), free(tr->noise), free(tr->x0), free(tr->batch_idx);
    train_sampler_free(&tr->sampler);
    train_dataset_free(tr->data);
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
    return train_trainer_create_with_data(o, data, out);
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
    if ((st = dit_model_create(&cfg, o->micro_batch, tr->resolution, &tr->model)) != TDL_OK)
        goto err;
    dit_model_init_weights(tr->model, o->seed);
    size_t np = tr->model->num_params;
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
    if (group && members > 1) {
        if ((st = gfc_allreduce(group, m->grads, m->grads, m->num_params, GFC_DT_F32, GFC_OP_SUM,
                                NULL)) != TDL_OK)
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
        /* EMA warm-up ((1 + n) / (10 + n), as diffusers and timm do): with a fixed 0.999 the
         * average would still weigh the zero-initialized output layer for thousands of steps. */
        float warm = (float)(1 + tr->step) / (float)(10 + tr->step);
        train_ema_update(tr->ema, m->params, m->num_params, TDL_MIN(o->ema_decay, warm));
    }
    tr->step++;
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
