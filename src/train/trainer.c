/* The data-parallel DiT trainer: the rectified-flow loss (or the Gaussian diffusion's,
 * diffusion.h) over a global batch split among the members of a gfc group, gradients summed with
 * gfc's all-reduce, AdamW on every member. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "dit/diffusion.h"
#include "dit/dit.h"
#include "gfc/gfc.h"
#include "train/train.h"
#include "train/train_internal.h"

void train_trainer_free(train_trainer_t *tr)
{
    if (!tr)
        return;
    train_codec_free(tr->codec);
    dit_diffusion_free(tr->diffusion);
    free(tr->tk);
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
    if (o->latent && !train_dataset_is_latent(tr->data)) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "--latent: data set '%s' holds images, not latents; make a latent "
                             "data set of it with `tidal encode --data %s --vae VAE.h5 -o "
                             "latents.h5` (doc/vae.md) and train on that",
                             o->data, o->data);
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
    cfg.objective = o->objective;
    if (o->learn_sigma)
        cfg.learn_sigma = o->learn_sigma > 0;
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
    size_t po = per / cfg.in_channels * dit_config_out_channels(&cfg);
    size_t mb = (size_t)o->micro_batch;
    if (o->objective == DIT_OBJECTIVE_DDPM &&
        (st = dit_diffusion_create(DIT_DIFFUSION_STEPS, DIT_DIFFUSION_STEPS, cfg.learn_sigma,
                                   &tr->diffusion)) != TDL_OK)
        goto err;
    tr->batch_idx = calloc((size_t)o->batch, sizeof(uint64_t));
    tr->x0 = tensor_alloc(mb * per), tr->noise = tensor_alloc(mb * per);
    tr->x_t = tensor_alloc(mb * per), tr->target = tensor_alloc(mb * per);
    tr->out = tensor_alloc(mb * po), tr->dout = tensor_alloc(mb * po);
    tr->t = tensor_alloc(mb);
    tr->y = calloc(mb, sizeof(int));
    tr->tk = calloc(mb, sizeof(int));
    if (!tr->batch_idx || !tr->x0 || !tr->noise || !tr->x_t || !tr->target || !tr->out ||
        !tr->dout || !tr->t || !tr->y || !tr->tk) {
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

/* Sample i's time from the uniform u: rectified flow's t = u, or the diffusion step
 * floor(u * T) (the reference's randint), embedded as the model sees it. */
static void trainer_time(train_trainer_t *tr, int i, float u)
{
    tr->t[i] = u;
    if (tr->diffusion) {
        int T = tr->diffusion->steps;
        tr->tk[i] = TDL_MIN((int)(u * (float)T), T - 1);
        tr->t[i] = dit_diffusion_model_time(tr->diffusion, tr->tk[i]);
    }
}

/* x_t of the k samples of x0 and noise at their times. */
static void trainer_inputs(train_trainer_t *tr, int k, size_t per)
{
    if (tr->diffusion)
        dit_diffusion_q_sample(tr->diffusion, tr->x0, tr->noise, tr->tk, k, per, tr->x_t);
    else
        dit_rf_interpolate(tr->x0, tr->noise, tr->t, k, per, tr->x_t, tr->target);
}

/* The objective's mean loss of the k samples' outputs; dout (may be NULL) gets its gradient. */
static double trainer_loss(const train_trainer_t *tr, int k, size_t per, float *dout)
{
    const dit_config_t *c = &tr->model->config;
    if (tr->diffusion)
        return dit_diffusion_loss(tr->diffusion, tr->x0, tr->x_t, tr->noise, tr->tk, tr->out, k,
                                  c->in_channels, per / c->in_channels, dout, NULL);
    if (c->learn_sigma) /* rectified flow reads the first half only */
        return dit_mse_loss_strided(tr->out, tr->target, k, per, 2 * per, dout);
    return dit_mse_loss(tr->out, tr->target, (size_t)k * per, dout);
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
            trainer_time(tr, i, tdl_rng_uniform(&rng));
            tdl_rng_fill_normal(&rng, tr->noise + (size_t)i * per, per);
        }
        trainer_inputs(tr, k, per);
        if ((st = dit_model_forward(m, tr->x_t, tr->t, tr->y, k, tr->resolution, tr->resolution,
                                    tr->out)) != TDL_OK)
            return st;
        sum += trainer_loss(tr, k, per, NULL) * k;
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

static tdl_status_t trainer_step(train_trainer_t *tr, gfc_group_t *group, double *loss_out,
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
            trainer_time(tr, i, tdl_rng_uniform(&rng));
            bool drop = tdl_rng_uniform(&rng) < (float)cfg->class_dropout_prob;
            tr->y[i] = drop ? cfg->num_classes : label;
            tdl_rng_fill_normal(&rng, tr->noise + (size_t)i * per, per);
        }
        trainer_inputs(tr, k, per);
        if ((st = dit_model_forward(m, tr->x_t, tr->t, tr->y, k, tr->resolution, tr->resolution,
                                    tr->out)) != TDL_OK)
            return st;
        double mse = trainer_loss(tr, k, per, tr->dout);
        /* d(mean over the global batch)/d(out): the micro-batch mean's gradient times k / batch */
        float scale = (float)k / (float)o->batch;
        size_t nout = (size_t)k * per / cfg->in_channels * dit_config_out_channels(cfg);
        for (size_t i = 0; i < nout; i++)
            tr->dout[i] *= scale;
        tdl_fault_point("train.backward"); /* for the failure tests */
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

tdl_status_t train_trainer_step(train_trainer_t *tr, gfc_group_t *group, double *loss_out,
                                bool *skipped_out)
{
    /* Nothing of the state changes before the last collective but the data cursor: put back,
     * it leaves a failed step to be done again, by this group or a smaller one. */
    uint64_t epoch, pos;
    train_sampler_cursor(&tr->sampler, &epoch, &pos);
    tdl_status_t st = trainer_step(tr, group, loss_out, skipped_out);
    if (st != TDL_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", tdl_error_get());
        if (train_sampler_seek(&tr->sampler, epoch, pos) == TDL_OK)
            tdl_error_set("%s", why);
    }
    return st;
}

double train_trainer_last_loss(const train_trainer_t *tr)
{
    return tr->loss_count ? tr->loss_hist[(tr->loss_count - 1) % TRAIN_LOSS_HISTORY][1] : NAN;
}

void train_trainer_drop_residual(train_trainer_t *tr)
{
    size_t n;
    float *res = tr->codec ? train_codec_residual(tr->codec, &n) : NULL;
    if (res)
        memset(res, 0, n * sizeof(float));
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

const char *const *train_trainer_class_names(const train_trainer_t *tr)
{
    /* a data set of fewer classes than the model leaves some unnamed: none are written */
    if (train_dataset_num_classes(tr->data) != tr->model->config.num_classes)
        return NULL;
    return train_dataset_class_names(tr->data);
}

int train_trainer_loss_history(const train_trainer_t *tr, float (*out)[2], int max)
{
    int64_t first = TDL_MAX(0, tr->loss_count - TRAIN_LOSS_HISTORY);
    int n = (int)TDL_MIN((int64_t)max, tr->loss_count - first);
    for (int i = 0; i < n; i++)
        memcpy(out[i], tr->loss_hist[(first + i) % TRAIN_LOSS_HISTORY], sizeof(out[i]));
    return n;
}

float *train_codec_residual_of(train_trainer_t *tr, size_t *n_out)
{
    return tr->codec ? train_codec_residual(tr->codec, n_out) : (*n_out = 0, NULL);
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
    const int64_t kind[] = {c->learn_sigma, (int64_t)c->objective}; /* what the output means */
    const double reals[] = {
        c->mlp_ratio, c->class_dropout_prob, o->lr,         o->weight_decay, o->clip,
        o->ema_decay, o->allreduce_bits,     tr->opt.beta1, tr->opt.beta2,   tr->opt.eps};
    const char *codec = tr->codec ? o->allreduce : "f32";
    uint64_t run = sync_hash(0xcbf29ce484222325ull, ints, sizeof(ints));
    run = sync_hash(run, reals, sizeof(reals));
    run = sync_hash(run, kind, sizeof(kind));
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
