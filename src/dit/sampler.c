/* Samplers for the rectified-flow DiT: x_1 is noise, x_0 data, and the network predicts the
 * velocity v = noise - x0 = dx/dt, so sampling integrates dx/dt = v from t = 1 down to t = 0 with
 * Euler or Heun steps, optionally with classifier-free guidance. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"

tdl_status_t dit_sampler_parse(const char *name, dit_sampler_kind_t *kind_out)
{
    if (!strcmp(name, "euler")) {
        *kind_out = DIT_SAMPLER_EULER;
        return TDL_OK;
    }
    if (!strcmp(name, "heun")) {
        *kind_out = DIT_SAMPLER_HEUN;
        return TDL_OK;
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "unknown sampler '%s': use euler or heun", name);
}

void dit_sampler_noise(float *x, int n, size_t per_image, uint64_t seed, uint64_t first_index)
{
    for (int i = 0; i < n; i++) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, seed, first_index + (uint64_t)i);
        tdl_rng_fill_normal(&rng, x + (size_t)i * per_image, per_image);
    }
}

/* v[n] = velocity at (x, t), guided: conditional and unconditional rows run in one batch. */
static tdl_status_t sampler_velocity(dit_model_t *m, const float *x, const int *labels, int n,
                                     int h, int w, float t, float cfg, float *v, float *xin,
                                     float *vout, float *tt, int *yy)
{
    size_t per = (size_t)m->config.in_channels * h * w;
    int null = m->config.num_classes;
    bool guided = cfg != 1.0f;
    int chunk = guided ? m->max_batch / 2 : m->max_batch;
    if (chunk < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sampling with guidance needs a model sized for 2 images at least");
    for (int first = 0; first < n; first += chunk) {
        int k = TDL_MIN(chunk, n - first), rows = guided ? 2 * k : k;
        memcpy(xin, x + (size_t)first * per, (size_t)k * per * sizeof(float));
        for (int i = 0; i < k; i++) {
            int y = labels ? labels[first + i] : null;
            yy[i] = (y < 0 || y > null) ? null : y;
            tt[i] = t;
            if (guided) {
                yy[k + i] = null;
                tt[k + i] = t;
            }
        }
        if (guided)
            memcpy(xin + (size_t)k * per, xin, (size_t)k * per * sizeof(float));
        tdl_status_t st = dit_model_forward(m, xin, tt, yy, rows, h, w, vout);
        if (st != TDL_OK)
            return st;
        float *dst = v + (size_t)first * per;
        for (size_t i = 0; i < (size_t)k * per; i++)
            dst[i] = guided ? vout[(size_t)k * per + i] +
                                  cfg * (vout[i] - vout[(size_t)k * per + i])
                            : vout[i];
    }
    return TDL_OK;
}

tdl_status_t dit_sampler_step(dit_model_t *m, float *x, const int *labels, int n, int h, int w,
                              float t_from, float t_to, dit_sampler_kind_t kind, float cfg)
{
    size_t per = (size_t)m->config.in_channels * h * w;
    size_t total = (size_t)n * per, batch = (size_t)m->max_batch * per;
    float dt = t_to - t_from; /* negative: towards the data */
    tdl_status_t st = TDL_OK;
    float *v1 = malloc(total * sizeof(float)), *v2 = NULL, *xe = NULL;
    float *xin = malloc(batch * sizeof(float)), *vout = malloc(batch * sizeof(float));
    float *tt = malloc((size_t)m->max_batch * sizeof(float));
    int *yy = malloc((size_t)m->max_batch * sizeof(int));
    if (kind == DIT_SAMPLER_HEUN) {
        v2 = malloc(total * sizeof(float));
        xe = malloc(total * sizeof(float));
    }
    if (!v1 || !xin || !vout || !tt || !yy || (kind == DIT_SAMPLER_HEUN && (!v2 || !xe))) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "sampler: out of memory for %d images", n);
        goto out;
    }
    if ((st = sampler_velocity(m, x, labels, n, h, w, t_from, cfg, v1, xin, vout, tt, yy)))
        goto out;
    if (kind == DIT_SAMPLER_EULER) {
        for (size_t i = 0; i < total; i++)
            x[i] += dt * v1[i];
        goto out;
    }
    /* Heun: average the slopes at both ends of an Euler step */
    for (size_t i = 0; i < total; i++)
        xe[i] = x[i] + dt * v1[i];
    if ((st = sampler_velocity(m, xe, labels, n, h, w, t_to, cfg, v2, xin, vout, tt, yy)))
        goto out;
    for (size_t i = 0; i < total; i++)
        x[i] += 0.5f * dt * (v1[i] + v2[i]);
out:
    free(yy), free(tt), free(vout), free(xin), free(xe), free(v2), free(v1);
    return st;
}

tdl_status_t dit_sample(dit_model_t *m, const int *labels, int n, int h, int w,
                        const dit_sample_opts_t *opts, float *out)
{
    if (opts->steps < 1 || n < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "sampling needs steps >= 1 and images >= 1 "
                                                    "(got %d steps, %d images)",
                               opts->steps, n);
    size_t per = (size_t)m->config.in_channels * h * w;
    dit_sampler_noise(out, n, per, opts->seed, 0);
    for (int i = 0; i < opts->steps; i++) {
        float t_from = 1.0f - (float)i / (float)opts->steps;
        float t_to = 1.0f - (float)(i + 1) / (float)opts->steps;
        tdl_status_t st =
            dit_sampler_step(m, out, labels, n, h, w, t_from, t_to, opts->kind, opts->cfg_scale);
        if (st != TDL_OK)
            return st;
    }
    return TDL_OK;
}
