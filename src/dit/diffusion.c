/* The reference DiT's Gaussian diffusion (diffusion.h): its schedule and respacing, q_sample, the
 * MSE + variational-bound loss with its gradient written by hand (tidal's backward is), and the
 * DDPM and DDIM steps. Element-wise arithmetic is in double, from the float32 model output. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/diffusion.h"

tdl_status_t dit_diffusion_space_timesteps(int num_timesteps, int count, int *kept)
{
    if (num_timesteps < 1 || count < 1 || count > num_timesteps)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cannot respace %d diffusion steps to %d (1 to %d steps)",
                               num_timesteps, count, num_timesteps);
    /* the reference accumulates the stride in a Python float and rounds half to even */
    double stride = count <= 1 ? 1.0 : (double)(num_timesteps - 1) / (double)(count - 1);
    double cur = 0.0;
    for (int i = 0; i < count; i++) {
        kept[i] = (int)nearbyint(cur);
        cur += stride;
    }
    return TDL_OK;
}

void dit_diffusion_free(dit_diffusion_t *d)
{
    if (!d)
        return;
    free(d->timestep_map);
    free(d->betas); /* every table lives in this one block */
    free(d);
}

tdl_status_t dit_diffusion_create(int base_steps, int steps, bool learn_sigma,
                                  dit_diffusion_t **diffusion_out)
{
    if (base_steps < 2)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "a diffusion of %d steps (2 at least)",
                               base_steps);
    dit_diffusion_t *d = calloc(1, sizeof(*d));
    double *base = malloc(2 * (size_t)base_steps * sizeof(double));
    int *kept = malloc((size_t)base_steps * sizeof(int));
    double *tables = malloc(13 * (size_t)base_steps * sizeof(double));
    tdl_status_t st = TDL_OK;
    if (!d || !base || !kept || !tables) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "diffusion: out of memory for %d steps", base_steps);
        goto err;
    }
    if ((st = dit_diffusion_space_timesteps(base_steps, steps, kept)) != TDL_OK)
        goto err;
    d->steps = steps, d->base_steps = base_steps, d->learn_sigma = learn_sigma;
    d->timestep_map = kept;
    double **t[] = {&d->betas,
                    &d->log_betas,
                    &d->alphas_cumprod,
                    &d->alphas_cumprod_prev,
                    &d->sqrt_alphas_cumprod,
                    &d->sqrt_one_minus_alphas_cumprod,
                    &d->sqrt_recip_alphas_cumprod,
                    &d->sqrt_recipm1_alphas_cumprod,
                    &d->posterior_variance,
                    &d->posterior_log_variance_clipped,
                    &d->posterior_mean_coef1,
                    &d->posterior_mean_coef2,
                    &d->fixed_log_variance};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(t); i++)
        *t[i] = tables + i * (size_t)steps;
    /* get_named_beta_schedule("linear"): np.linspace(start, end, T) */
    double scale = 1000.0 / base_steps, b0 = scale * 0.0001, b1 = scale * 0.02;
    double *abar = base + base_steps, prod = 1.0;
    for (int i = 0; i < base_steps; i++) {
        /* numpy's linspace: start + i * step, the last one exactly `end` */
        base[i] = i == base_steps - 1 ? b1 : b0 + i * ((b1 - b0) / (base_steps - 1));
        prod *= 1.0 - base[i];
        abar[i] = prod;
    }
    /* SpacedDiffusion: the kept steps' betas from alphas_cumprod */
    double last = 1.0;
    for (int k = 0; k < steps; k++) {
        double a = abar[kept[k]];
        d->betas[k] = 1.0 - a / last;
        last = a;
    }
    prod = 1.0;
    for (int k = 0; k < steps; k++) {
        double beta = d->betas[k];
        d->alphas_cumprod_prev[k] = prod;
        prod *= 1.0 - beta;
        double ab = prod, abp = d->alphas_cumprod_prev[k];
        d->alphas_cumprod[k] = ab;
        d->log_betas[k] = log(beta);
        d->sqrt_alphas_cumprod[k] = sqrt(ab);
        d->sqrt_one_minus_alphas_cumprod[k] = sqrt(1.0 - ab);
        d->sqrt_recip_alphas_cumprod[k] = sqrt(1.0 / ab);
        d->sqrt_recipm1_alphas_cumprod[k] = sqrt(1.0 / ab - 1.0);
        d->posterior_variance[k] = beta * (1.0 - abp) / (1.0 - ab);
        d->posterior_mean_coef1[k] = beta * sqrt(abp) / (1.0 - ab);
        d->posterior_mean_coef2[k] = (1.0 - abp) * sqrt(1.0 - beta) / (1.0 - ab);
    }
    /* the posterior's variance is 0 at step 0: its log is clipped to step 1's (with one step
     * only, where the reference has no table, to log beta) */
    for (int k = 0; k < steps; k++) {
        int j = k ? k : 1;
        d->posterior_log_variance_clipped[k] =
            steps > 1 ? log(d->posterior_variance[j]) : d->log_betas[0];
        d->fixed_log_variance[k] = k           ? d->log_betas[k]
                                   : steps > 1 ? log(d->posterior_variance[1])
                                               : d->log_betas[0];
    }
    free(base);
    *diffusion_out = d;
    return TDL_OK;
err:
    free(tables), free(kept), free(base), free(d);
    return st;
}

float dit_diffusion_model_time(const dit_diffusion_t *d, int k)
{
    return (float)d->timestep_map[k] / 1000.0f;
}

void dit_diffusion_q_sample(const dit_diffusion_t *d, const float *x0, const float *noise,
                            const int *t, int batch, size_t per, float *x_t)
{
    for (int s = 0; s < batch; s++) {
        double a = d->sqrt_alphas_cumprod[t[s]], b = d->sqrt_one_minus_alphas_cumprod[t[s]];
        for (size_t i = 0; i < per; i++) {
            size_t k = (size_t)s * per + i;
            x_t[k] = (float)(a * x0[k] + b * noise[k]);
        }
    }
}

/* ---- the variational bound ----------------------------------------------------------------- */

/* The reference's approx_standard_normal_cdf and its derivative. */
static double approx_cdf(double x, double *dcdf)
{
    const double k = sqrt(2.0 / M_PI);
    double u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    *dcdf = 0.5 * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + th);
}

/* -log p(x0) of discretized_gaussian_log_likelihood (bins of 2/255 on [-1, 1]) under N(mean,
 * exp(logvar)), and its derivative in logvar (clamped ends have none, as torch's clamp). */
static double decoder_nll(double x0, double mean, double logvar, double *dnll)
{
    double inv = exp(-0.5 * logvar), c = x0 - mean;
    double plus_in = inv * (c + 1.0 / 255.0), min_in = inv * (c - 1.0 / 255.0);
    double dplus, dmin;
    double cdf_plus = approx_cdf(plus_in, &dplus), cdf_min = approx_cdf(min_in, &dmin);
    /* d(in)/d(logvar) = -in / 2 */
    double gp = dplus * -0.5 * plus_in, gm = dmin * -0.5 * min_in, v, g;
    if (x0 < -0.999) {
        v = cdf_plus, g = gp;
    } else if (x0 > 0.999) {
        v = 1.0 - cdf_min, g = -gm;
    } else {
        v = cdf_plus - cdf_min, g = gp - gm;
    }
    if (v < 1e-12) {
        *dnll = 0.0;
        return -log(1e-12);
    }
    *dnll = -g / v;
    return -log(v);
}

double dit_diffusion_loss(const dit_diffusion_t *d, const float *x0, const float *x_t,
                          const float *noise, const int *t, const float *out, int batch,
                          int channels, size_t hw, float *dout, double terms[2])
{
    size_t per = (size_t)channels * hw, stride = d->learn_sigma ? 2 * per : per;
    double mse = 0, vb = 0, nb = (double)batch, np = (double)per;
    for (int s = 0; s < batch; s++) {
        int k = t[s];
        const float *eps = out + (size_t)s * stride, *var = eps + per;
        const float *xs = x0 + (size_t)s * per, *xt = x_t + (size_t)s * per;
        const float *ns = noise + (size_t)s * per;
        double sum = 0, bound = 0;
        for (size_t i = 0; i < per; i++) {
            double e = (double)eps[i] - ns[i];
            sum += e * e;
            if (dout)
                dout[(size_t)s * stride + i] = (float)(2.0 * e / (np * nb));
        }
        mse += sum / np;
        if (!d->learn_sigma)
            continue;
        /* the bound of the output with its noise half frozen: the gradient reaches v only */
        double c1 = d->posterior_mean_coef1[k], c2 = d->posterior_mean_coef2[k];
        double sra = d->sqrt_recip_alphas_cumprod[k], srm1 = d->sqrt_recipm1_alphas_cumprod[k];
        double min_log = d->posterior_log_variance_clipped[k], max_log = d->log_betas[k];
        double true_logvar = d->posterior_log_variance_clipped[k];
        for (size_t i = 0; i < per; i++) {
            double pred_x0 = sra * xt[i] - srm1 * eps[i];
            double mean = c1 * pred_x0 + c2 * xt[i];
            double frac = ((double)var[i] + 1.0) / 2.0;
            double logvar = frac * max_log + (1.0 - frac) * min_log, g;
            if (k == 0) {
                bound += decoder_nll(xs[i], mean, logvar, &g);
            } else {
                double true_mean = c1 * xs[i] + c2 * xt[i], dm = true_mean - mean;
                double r = exp(true_logvar - logvar), q = dm * dm * exp(-logvar);
                bound += 0.5 * (-1.0 + logvar - true_logvar + r + q);
                g = 0.5 * (1.0 - r - q);
            }
            if (dout) /* d logvar / d v = (max_log - min_log) / 2; bits: / log 2 */
                dout[(size_t)s * stride + per + i] =
                    (float)(g * 0.5 * (max_log - min_log) / (M_LN2 * np * nb));
        }
        vb += bound / (M_LN2 * np);
    }
    if (terms) {
        terms[0] = mse / nb;
        terms[1] = vb / nb;
    }
    return (mse + vb) / nb;
}

/* ---- sampling ------------------------------------------------------------------------------ */

void dit_diffusion_step(const dit_diffusion_t *d, dit_sampler_kind_t kind, int k, const float *x,
                        const float *out, const float *noise, int n, int channels, size_t hw,
                        float *x_next)
{
    size_t per = (size_t)channels * hw, stride = d->learn_sigma ? 2 * per : per;
    double sra = d->sqrt_recip_alphas_cumprod[k], srm1 = d->sqrt_recipm1_alphas_cumprod[k];
    double c1 = d->posterior_mean_coef1[k], c2 = d->posterior_mean_coef2[k];
    double abp = d->alphas_cumprod_prev[k];
    for (int s = 0; s < n; s++) {
        const float *eps = out + (size_t)s * stride, *var = eps + per;
        for (size_t i = 0; i < per; i++) {
            size_t e = (size_t)s * per + i;
            double xi = x[e], pred_x0 = sra * xi - srm1 * eps[i];
            if (kind == DIT_SAMPLER_DDIM) {
                /* eps re-derived from x0, as the reference does */
                double eps2 = (sra * xi - pred_x0) / srm1;
                x_next[e] = (float)(pred_x0 * sqrt(abp) + sqrt(1.0 - abp) * eps2);
                continue;
            }
            double mean = c1 * pred_x0 + c2 * xi;
            if (k == 0) {
                x_next[e] = (float)mean;
                continue;
            }
            double logvar = d->fixed_log_variance[k];
            if (d->learn_sigma) {
                double frac = ((double)var[i] + 1.0) / 2.0;
                logvar =
                    frac * d->log_betas[k] + (1.0 - frac) * d->posterior_log_variance_clipped[k];
            }
            x_next[e] = (float)(mean + exp(0.5 * logvar) * noise[e]);
        }
    }
}

void dit_diffusion_step_noise(float *z, int n, size_t per, uint64_t seed, uint64_t first_index,
                              int k)
{
    for (int i = 0; i < n; i++) {
        tdl_rng_t rng;
        /* a key of its own, so that no step's stream is an image's starting noise */
        tdl_rng_init(&rng, seed ^ 0x6464706d6e6f6973ull /* "ddpmnois" */,
                     ((uint64_t)k << 32) + first_index + (uint64_t)i);
        tdl_rng_fill_normal(&rng, z + (size_t)i * per, per);
    }
}

tdl_status_t dit_diffusion_model_out(dit_model_t *m, const float *x, const int *labels, int n,
                                     int h, int w, float time, float cfg, float *out)
{
    const dit_config_t *c = &m->config;
    size_t per = (size_t)c->in_channels * h * w, hw = (size_t)h * w;
    int co = dit_config_out_channels(c), null = c->num_classes;
    size_t po = (size_t)co * hw;
    size_t guided_floats = (size_t)TDL_MIN(3, co) * hw; /* forward_with_cfg's model_out[:, :3] */
    bool guided = cfg != 1.0f;
    int chunk = guided ? m->max_batch / 2 : m->max_batch;
    if (chunk < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sampling with guidance needs a model sized for 2 images at least");
    size_t rows = (size_t)m->max_batch;
    float *xin = malloc(rows * per * sizeof(float)), *o = malloc(rows * po * sizeof(float));
    float *tt = malloc(rows * sizeof(float));
    int *yy = malloc(rows * sizeof(int));
    tdl_status_t st = TDL_OK;
    if (!xin || !o || !tt || !yy) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "sampler: out of memory for %d images", n);
        goto out;
    }
    for (int first = 0; first < n && st == TDL_OK; first += chunk) {
        int k = TDL_MIN(chunk, n - first), nr = guided ? 2 * k : k;
        memcpy(xin, x + (size_t)first * per, (size_t)k * per * sizeof(float));
        if (guided)
            memcpy(xin + (size_t)k * per, xin, (size_t)k * per * sizeof(float));
        for (int i = 0; i < nr; i++) {
            int y = labels ? labels[first + i % k] : null;
            yy[i] = i >= k || y < 0 || y > null ? null : y;
            tt[i] = time;
        }
        if ((st = dit_model_forward(m, xin, tt, yy, nr, h, w, o)) != TDL_OK)
            break;
        float *dst = out + (size_t)first * po;
        memcpy(dst, o, (size_t)k * po * sizeof(float));
        for (int i = 0; guided && i < k; i++) {
            float *cd = dst + (size_t)i * po;
            const float *un = o + (size_t)(k + i) * po;
            for (size_t e = 0; e < guided_floats; e++)
                cd[e] = un[e] + cfg * (cd[e] - un[e]);
        }
    }
out:
    free(yy), free(tt), free(o), free(xin);
    return st;
}

tdl_status_t dit_diffusion_sample(dit_model_t *m, const int *labels, int n, int h, int w,
                                  const dit_sample_opts_t *opts, float *out)
{
    const dit_config_t *c = &m->config;
    tdl_status_t st = dit_sampler_check(opts->kind, c->objective);
    if (st != TDL_OK)
        return st;
    if (opts->steps < 1 || n < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "sampling needs steps >= 1 and images >= 1 "
                               "(got %d steps, %d images)",
                               opts->steps, n);
    dit_diffusion_t *d;
    if ((st = dit_diffusion_create(DIT_DIFFUSION_STEPS, opts->steps, c->learn_sigma, &d)))
        return st;
    size_t hw = (size_t)h * w, per = (size_t)c->in_channels * hw;
    float *mo = malloc((size_t)n * dit_config_out_channels(c) * hw * sizeof(float));
    float *z = opts->kind == DIT_SAMPLER_DDPM ? malloc((size_t)n * per * sizeof(float)) : NULL;
    if (!mo || (opts->kind == DIT_SAMPLER_DDPM && !z)) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "sampler: out of memory for %d images", n);
        goto out;
    }
    dit_sampler_noise(out, n, per, opts->seed, 0);
    for (int k = d->steps - 1; k >= 0 && st == TDL_OK; k--) {
        st = dit_diffusion_model_out(m, out, labels, n, h, w, dit_diffusion_model_time(d, k),
                                     opts->cfg_scale, mo);
        if (st != TDL_OK)
            break;
        if (z)
            dit_diffusion_step_noise(z, n, per, opts->seed, 0, k);
        dit_diffusion_step(d, opts->kind, k, out, mo, z, n, c->in_channels, hw, out);
    }
out:
    free(z), free(mo);
    dit_diffusion_free(d);
    return st;
}
