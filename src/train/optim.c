/* AdamW, learning-rate warm-up, gradient clipping and EMA weights. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "train/train.h"

tdl_status_t train_adamw_init(train_adamw_t *opt, size_t n, float beta1, float beta2, float eps,
                              float weight_decay)
{
    train_adamw_t o = {.n = n, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                       .weight_decay = weight_decay};
    o.m = tensor_alloc(n);
    o.v = tensor_alloc(n);
    if (!o.m || !o.v) {
        free(o.m);
        free(o.v);
        return tdl_error_raise(TDL_ERR_NOMEM, "AdamW: cannot hold the moments of %zu parameters",
                               n);
    }
    *opt = o;
    return TDL_OK;
}

void train_adamw_free(train_adamw_t *opt)
{
    free(opt->m);
    free(opt->v);
    memset(opt, 0, sizeof(*opt));
}

void train_adamw_step(train_adamw_t *opt, float *params, const float *grads, float lr)
{
    opt->step++;
    float b1 = opt->beta1, b2 = opt->beta2;
    float c1 = 1.0f - powf(b1, (float)opt->step), c2 = 1.0f - powf(b2, (float)opt->step);
    float decay = 1.0f - lr * opt->weight_decay;
    for (size_t i = 0; i < opt->n; i++) {
        float g = grads[i];
        float m = opt->m[i] = b1 * opt->m[i] + (1.0f - b1) * g;
        float v = opt->v[i] = b2 * opt->v[i] + (1.0f - b2) * g * g;
        float mhat = m / c1, vhat = v / c2;
        params[i] = params[i] * decay - lr * mhat / (sqrtf(vhat) + opt->eps);
    }
}

float train_lr_at(uint64_t step, float lr, uint64_t warmup)
{
    if (warmup == 0 || step >= warmup)
        return lr;
    return lr * (float)(step + 1) / (float)warmup;
}

double train_grad_clip(float *grads, size_t n, double max_norm)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)grads[i] * grads[i];
    double norm = sqrt(ss);
    if (max_norm > 0 && isfinite(norm) && norm > max_norm) {
        float s = (float)(max_norm / (norm + 1e-6));
        for (size_t i = 0; i < n; i++)
            grads[i] *= s;
    }
    return norm;
}

void train_ema_update(float *ema, const float *params, size_t n, float decay)
{
    for (size_t i = 0; i < n; i++)
        ema[i] = decay * ema[i] + (1.0f - decay) * params[i];
}
