/* Samplers for the rectified-flow DiT: x_1 is noise, x_0 data, and the network predicts the
 * velocity v = noise - x0 = dx/dt, so sampling integrates dx/dt = v from t = 1 down to t = 0 with
 * Euler or Heun steps, optionally with classifier-free guidance. A Gaussian-diffusion model's
 * DDPM and DDIM trajectories are diffusion.c's. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/diffusion.h"
#include "dit/dit.h"

static const char *const sampler_names[] = {"euler", "heun", "ddpm", "ddim"};

tdl_status_t dit_sampler_parse(const char *name, dit_sampler_kind_t *kind_out)
{
    for (size_t i = 0; i < TDL_ARRAY_SIZE(sampler_names); i++)
        if (!strcmp(name, sampler_names[i])) {
            *kind_out = (dit_sampler_kind_t)i;
            return TDL_OK;
        }
    return tdl_error_raise(TDL_ERR_INVALID_ARG,
                           "unknown sampler '%s': use euler or heun (rectified flow), ddpm or ddim "
                           "(Gaussian diffusion)",
                           name);
}

const char *dit_sampler_name(dit_sampler_kind_t kind)
{
    return (unsigned)kind < TDL_ARRAY_SIZE(sampler_names) ? sampler_names[kind] : "?";
}

tdl_status_t dit_sampler_check(dit_sampler_kind_t kind, dit_objective_t objective)
{
    bool diffusion = kind == DIT_SAMPLER_DDPM || kind == DIT_SAMPLER_DDIM;
    if (diffusion == (objective == DIT_OBJECTIVE_DDPM))
        return TDL_OK;
    return tdl_error_raise(
        TDL_ERR_INVALID_ARG,
        "sampler %s steps a %s model, and this one was trained with objective "
        "%s: use %s",
        dit_sampler_name(kind), diffusion ? "Gaussian-diffusion (ddpm)" : "rectified-flow (rf)",
        dit_objective_name(objective), diffusion ? "euler or heun" : "ddpm or ddim");
}

void dit_sampler_noise(float *x, int n, size_t per_image, uint64_t seed, uint64_t first_index)
{
    for (int i = 0; i < n; i++) {
        tdl_rng_t rng;
        tdl_rng_init(&rng, seed, first_index + (uint64_t)i);
        tdl_rng_fill_normal(&rng, x + (size_t)i * per_image, per_image);
    }
}

/* A learn_sigma model's rows hold the velocity, then what a Gaussian diffusion would read as
 * the variance: the velocity's rows packed to the front of out. */
static void velocity_rows(const dit_model_t *m, float *out, int rows, size_t per)
{
    size_t stride = per / m->config.in_channels * dit_config_out_channels(&m->config);
    for (int r = 1; stride != per && r < rows; r++)
        memmove(out + (size_t)r * per, out + (size_t)r * stride, per * sizeof(float));
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
        velocity_rows(m, vout, rows, per);
        float *dst = v + (size_t)first * per;
        for (size_t i = 0; i < (size_t)k * per; i++)
            dst[i] = guided ? vout[(size_t)k * per + i] +
                                  cfg * (vout[i] - vout[(size_t)k * per + i])
                            : vout[i];
    }
    return TDL_OK;
}

/* Whether `kind` steps the model's ODE from t to t': Euler or Heun, on a rectified-flow model. */
static tdl_status_t ode_step_check(const dit_model_t *m, dit_sampler_kind_t kind)
{
    tdl_status_t check = dit_sampler_check(kind, m->config.objective);
    if (check != TDL_OK || kind <= DIT_SAMPLER_HEUN)
        return check;
    return tdl_error_raise(TDL_ERR_INVALID_ARG,
                           "sampler %s takes whole trajectories (dit_sample), not steps from t to t'",
                           dit_sampler_name(kind));
}

tdl_status_t dit_sampler_step(dit_model_t *m, float *x, const int *labels, int n, int h, int w,
                              float t_from, float t_to, dit_sampler_kind_t kind, float cfg)
{
    tdl_status_t check = ode_step_check(m, kind);
    if (check != TDL_OK)
        return check;
    size_t per = (size_t)m->config.in_channels * h * w;
    size_t total = (size_t)n * per;
    size_t batch = (size_t)m->max_batch * h * w * dit_config_out_channels(&m->config);
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
    if (opts->kind == DIT_SAMPLER_DDPM || opts->kind == DIT_SAMPLER_DDIM ||
        m->config.objective == DIT_OBJECTIVE_DDPM)
        return dit_diffusion_sample(m, labels, n, h, w, opts, out);
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

/* ---- steps of several trajectories at once ---------------------------------------------------
 * Rows of every item (its images, and their unconditional twins when guided) go through the
 * model together, max_batch rows a pass; each row's t is its item's. A row's velocity does not
 * depend on the rows beside it (tests/unit/test_dit_batch checks it byte for byte), so an item
 * steps exactly as dit_sampler_step steps it alone. */

typedef struct batch_row {
    int item, image; /* image of the item */
    bool uncond;     /* the unconditional twin of a guided image */
} batch_row_t;

/* v of every item (v[i] for item i, [n, C, H, W]) at x[i] (xs: the items' states) and t[i]. */
static tdl_status_t batch_velocity(dit_model_t *m, const dit_sample_item_t *items, int nitems,
                                   float *const *xs, const float *t, int h, int w, float *const *v,
                                   const batch_row_t *rows, int nrows, float *xin, float *vout,
                                   float *tt, int *yy)
{
    size_t per = (size_t)m->config.in_channels * h * w;
    int null = m->config.num_classes;
    for (int first = 0; first < nrows; first += m->max_batch) {
        int k = TDL_MIN(m->max_batch, nrows - first);
        for (int r = 0; r < k; r++) {
            const batch_row_t *q = &rows[first + r];
            const dit_sample_item_t *it = &items[q->item];
            int y = it->labels ? it->labels[q->image] : null;
            yy[r] = q->uncond || y < 0 || y > null ? null : y;
            tt[r] = t[q->item];
            memcpy(xin + (size_t)r * per, xs[q->item] + (size_t)q->image * per,
                   per * sizeof(float));
        }
        tdl_status_t st = dit_model_forward(m, xin, tt, yy, k, h, w, vout);
        if (st != TDL_OK)
            return st;
        velocity_rows(m, vout, k, per);
        /* a guided image's v waits for its twin: the conditional row leaves its output in v,
         * the unconditional one combines them as dit_sampler_step does */
        for (int r = 0; r < k; r++) {
            const batch_row_t *q = &rows[first + r];
            float *dst = v[q->item] + (size_t)q->image * per;
            const float *o = vout + (size_t)r * per;
            float cfg = items[q->item].cfg_scale;
            if (cfg == 1.0f || !q->uncond) {
                memcpy(dst, o, per * sizeof(float));
            } else {
                for (size_t i = 0; i < per; i++)
                    dst[i] = o[i] + cfg * (dst[i] - o[i]);
            }
        }
    }
    return TDL_OK;
}

tdl_status_t dit_sampler_step_batch(dit_model_t *m, dit_sample_item_t *items, int nitems, int h,
                                    int w, dit_sampler_kind_t kind)
{
    tdl_status_t check = ode_step_check(m, kind);
    if (check != TDL_OK)
        return check;
    size_t per = (size_t)m->config.in_channels * h * w;
    int nrows = 0;
    for (int i = 0; i < nitems; i++) {
        if (items[i].n < 1 || !items[i].x)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "a batched step: item %d has %d images", i, items[i].n);
        nrows += items[i].cfg_scale != 1.0f ? 2 * items[i].n : items[i].n;
    }
    tdl_status_t st = TDL_OK;
    size_t cap = (size_t)m->max_batch * h * w * dit_config_out_channels(&m->config);
    batch_row_t *rows = calloc((size_t)TDL_MAX(nrows, 1), sizeof(*rows));
    float *xin = malloc(cap * sizeof(float)), *vout = malloc(cap * sizeof(float));
    float *tt = malloc((size_t)m->max_batch * sizeof(float));
    int *yy = malloc((size_t)m->max_batch * sizeof(int));
    float **xs = calloc((size_t)nitems, sizeof(float *)), **v1 = calloc((size_t)nitems, sizeof(float *));
    float **v2 = calloc((size_t)nitems, sizeof(float *)), **xe = calloc((size_t)nitems, sizeof(float *));
    float *t = calloc((size_t)TDL_MAX(nitems, 1), sizeof(float));
    bool ok = rows && xin && vout && tt && yy && xs && v1 && v2 && xe && t;
    for (int i = 0; ok && i < nitems; i++) {
        size_t n = (size_t)items[i].n * per;
        v1[i] = malloc(n * sizeof(float));
        ok = v1[i] != NULL;
        if (ok && kind == DIT_SAMPLER_HEUN) {
            v2[i] = malloc(n * sizeof(float));
            xe[i] = malloc(n * sizeof(float));
            ok = v2[i] && xe[i];
        }
    }
    if (!ok) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "sampler: out of memory for a batch of %d rows", nrows);
        goto out;
    }
    /* an item's conditional rows, then their twins: a twin comes after the row it completes */
    int r = 0;
    for (int i = 0; i < nitems; i++) {
        for (int j = 0; j < items[i].n; j++)
            rows[r++] = (batch_row_t){.item = i, .image = j};
        for (int j = 0; items[i].cfg_scale != 1.0f && j < items[i].n; j++)
            rows[r++] = (batch_row_t){.item = i, .image = j, .uncond = true};
    }
    for (int i = 0; i < nitems; i++)
        xs[i] = items[i].x, t[i] = items[i].t_from;
    if ((st = batch_velocity(m, items, nitems, xs, t, h, w, v1, rows, nrows, xin, vout, tt, yy)))
        goto out;
    if (kind == DIT_SAMPLER_EULER) {
        for (int i = 0; i < nitems; i++) {
            float dt = items[i].t_to - items[i].t_from, *x = items[i].x;
            for (size_t e = 0; e < (size_t)items[i].n * per; e++)
                x[e] += dt * v1[i][e];
        }
        goto out;
    }
    for (int i = 0; i < nitems; i++) { /* Heun: the slope at the end of an Euler step too */
        float dt = items[i].t_to - items[i].t_from;
        for (size_t e = 0; e < (size_t)items[i].n * per; e++)
            xe[i][e] = items[i].x[e] + dt * v1[i][e];
        xs[i] = xe[i], t[i] = items[i].t_to;
    }
    if ((st = batch_velocity(m, items, nitems, xs, t, h, w, v2, rows, nrows, xin, vout, tt, yy)))
        goto out;
    for (int i = 0; i < nitems; i++) {
        float dt = items[i].t_to - items[i].t_from, *x = items[i].x;
        for (size_t e = 0; e < (size_t)items[i].n * per; e++)
            x[e] += 0.5f * dt * (v1[i][e] + v2[i][e]);
    }
out:
    for (int i = 0; xs && i < nitems; i++) {
        if (v1)
            free(v1[i]);
        if (v2)
            free(v2[i]);
        if (xe)
            free(xe[i]);
    }
    free(t), free(xe), free(v2), free(v1), free(xs), free(yy), free(tt), free(vout), free(xin);
    free(rows);
    return st;
}
