/* The Gaussian diffusion (src/dit/diffusion.c) without PyTorch (tests/cli/test_ddpm_torch.sh
 * holds it to the reference's formulas): the linear schedule's endpoints and alphas_cumprod,
 * space_timesteps against the stride worked out in integers, the respaced process keeping the
 * base process's alphas_cumprod at its steps, q_sample, DDIM and DDPM steps landing on x0 when
 * the model's noise is the true one, the loss's gradient against central differences (the noise
 * half's the MSE's alone, the bound's gradient stopped there as the reference's), and samplers of
 * the wrong objective refused by name. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/diffusion.h"
#include "tap.h"

static void test_schedule(void)
{
    dit_diffusion_t *d;
    if (!ok(dit_diffusion_create(1000, 1000, true, &d) == TDL_OK, "the 1000-step process"))
        return;
    /* as the reference's SpacedDiffusion, which create_diffusion always makes, the betas come
     * back from alphas_cumprod: 1 - (1 - 0.0001) / 1 is 0.0001 to a rounding */
    ok(fabs(d->betas[0] - 0.0001) < 1e-16 && fabs(d->betas[999] - 0.02) < 1e-15,
       "linear betas from 0.0001 to 0.02 (got %.17g, %.17g)", d->betas[0], d->betas[999]);
    is_near(d->betas[500] - d->betas[499], (0.02 - 0.0001) / 999, 1e-15, "evenly spaced");
    bool down = true;
    for (int i = 1; i < 1000; i++)
        down &= d->alphas_cumprod[i] < d->alphas_cumprod[i - 1] && d->alphas_cumprod[i] > 0;
    ok(down && d->alphas_cumprod[0] == 1.0 - 0.0001, "alphas_cumprod decreases from 1 - beta_0");
    /* prod(1 - beta) of the linear schedule: about 4.04e-5 at T (DDPM's x_T is nearly noise) */
    ok(d->alphas_cumprod[999] > 4.0e-5 && d->alphas_cumprod[999] < 4.1e-5,
       "alphas_cumprod[999] = %.4g", d->alphas_cumprod[999]);
    ok(d->posterior_log_variance_clipped[0] == d->posterior_log_variance_clipped[1] &&
           d->posterior_variance[0] == 0,
       "the posterior's variance is 0 at step 0, its log clipped to step 1's");
    ok(d->fixed_log_variance[0] == log(d->posterior_variance[1]) &&
           d->fixed_log_variance[7] == log(d->betas[7]),
       "fixed large: log of [posterior_variance[1], betas[1:]]");
    for (int i = 0; i < 1000; i++)
        if (d->timestep_map[i] != i) {
            ok(0, "no respacing: step %d is %d", i, d->timestep_map[i]);
            break;
        }
    dit_diffusion_free(d);
}

static void test_respacing(void)
{
    int kept[1000];
    ok(dit_diffusion_space_timesteps(1000, 250, kept) == TDL_OK, "1000 steps respaced to 250");
    /* round(i * 999 / 249), in integers (no i gives a tie) */
    int bad = -1;
    for (int i = 0; i < 250 && bad < 0; i++)
        if (kept[i] != (2 * i * 999 + 249) / 498)
            bad = i;
    ok(bad < 0, "250 steps: round(i * 999 / 249)%s", bad < 0 ? "" : " fails");
    ok(kept[0] == 0 && kept[1] == 4 && kept[2] == 8 && kept[3] == 12 && kept[125] == 502 &&
           kept[249] == 999,
       "0, 4, 8, 12, ..., 502 (step 125), ..., 999 as the reference's space_timesteps");
    ok(dit_diffusion_space_timesteps(1000, 10, kept) == TDL_OK && kept[1] == 111 && kept[9] == 999,
       "10 steps: a stride of 111");
    ok(dit_diffusion_space_timesteps(1000, 1001, kept) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "1001"),
       "1001 of 1000 steps refused, named (%s)", tdl_error_get());
    ok(dit_diffusion_space_timesteps(1000, 0, kept) == TDL_ERR_INVALID_ARG, "0 steps refused");
    dit_diffusion_t *base, *d;
    if (dit_diffusion_create(1000, 1000, true, &base) != TDL_OK ||
        dit_diffusion_create(1000, 250, true, &d) != TDL_OK)
        return;
    double worst = 0;
    for (int k = 0; k < 250; k++)
        worst =
            fmax(worst, fabs(d->alphas_cumprod[k] / base->alphas_cumprod[d->timestep_map[k]] - 1));
    ok(worst < 1e-12, "respaced alphas_cumprod are the base's at the kept steps (%.2g)", worst);
    ok(d->betas[1] > 3 * base->betas[4] && d->timestep_map[249] == 999,
       "respaced betas span their strides; the map ends at 999");
    is_near(dit_diffusion_model_time(d, 125), 0.502f, 1e-7, "the model sees step 502 as 0.502");
    dit_diffusion_free(d);
    dit_diffusion_free(base);
}

/* x = q_sample(x0, k, e) stepped with the model's noise the true one lands on x0 */
static void test_steps(void)
{
    dit_diffusion_t *d;
    if (dit_diffusion_create(1000, 50, true, &d) != TDL_OK)
        return;
    enum { N = 64 };
    float x0[N], e[N], x[N], out[2 * N], nx[N], z[N];
    tdl_rng_t rng;
    tdl_rng_init(&rng, 3, 0);
    for (int i = 0; i < N; i++) {
        x0[i] = 2 * tdl_rng_uniform(&rng) - 1;
        e[i] = tdl_rng_normal(&rng);
        z[i] = tdl_rng_normal(&rng);
    }
    int k = 30;
    dit_diffusion_q_sample(d, x0, e, &k, 1, N, x);
    memcpy(out, e, sizeof(e));
    for (int i = 0; i < N; i++)
        out[N + i] = 0.5f;
    dit_diffusion_step(d, DIT_SAMPLER_DDIM, k, x, out, NULL, 1, 1, N, nx);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double want =
            sqrt(d->alphas_cumprod_prev[k]) * x0[i] + sqrt(1 - d->alphas_cumprod_prev[k]) * e[i];
        worst = fmax(worst, fabs(nx[i] - want));
    }
    ok(worst < 1e-5, "DDIM with the true noise: x_{k-1} = q_sample(x0, k - 1, e) (%.2g)", worst);
    int k0 = 0;
    dit_diffusion_q_sample(d, x0, e, &k0, 1, N, x);
    dit_diffusion_step(d, DIT_SAMPLER_DDPM, 0, x, out, z, 1, 1, N, nx);
    worst = 0;
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fabs(nx[i] - x0[i]));
    ok(worst < 1e-5, "DDPM's last step with the true noise: x0, no noise added (%.2g)", worst);
    /* v = 1: the variance is beta (log); v = -1: the clipped posterior's */
    dit_diffusion_q_sample(d, x0, e, &k, 1, N, x);
    float lo[N], hi[N];
    for (int i = 0; i < N; i++)
        out[N + i] = 1.0f;
    dit_diffusion_step(d, DIT_SAMPLER_DDPM, k, x, out, z, 1, 1, N, hi);
    for (int i = 0; i < N; i++)
        out[N + i] = -1.0f;
    dit_diffusion_step(d, DIT_SAMPLER_DDPM, k, x, out, z, 1, 1, N, lo);
    double r = hi[5] - lo[5]; /* both are the same mean + sigma z */
    double want =
        (exp(0.5 * d->log_betas[k]) - exp(0.5 * d->posterior_log_variance_clipped[k])) * z[5];
    is_near(r, want, 1e-5, "learned range: v = 1 gives sigma^2 = beta, v = -1 the posterior's");
    dit_diffusion_free(d);
}

static double loss_of(const dit_diffusion_t *d, const float *x0, const float *xt, const float *e,
                      const int *t, const float *out, int n, size_t hw, int term)
{
    double terms[2];
    double l = dit_diffusion_loss(d, x0, xt, e, t, out, n, 2, hw, NULL, terms);
    return term < 0 ? l : terms[term];
}

static void test_loss_gradient(void)
{
    dit_diffusion_t *d;
    if (dit_diffusion_create(1000, 1000, true, &d) != TDL_OK)
        return;
    enum { B = 4, C = 2, HW = 9, PER = C * HW };
    int t[B] = {0, 1, 500, 999};
    float x0[B * PER], e[B * PER], xt[B * PER], out[B * 2 * PER], dout[B * 2 * PER];
    tdl_rng_t rng;
    tdl_rng_init(&rng, 5, 0);
    for (int i = 0; i < B * PER; i++) {
        x0[i] = i % 7 == 0 ? -1.0f : i % 11 == 0 ? 1.0f : 2 * tdl_rng_uniform(&rng) - 1;
        e[i] = tdl_rng_normal(&rng);
    }
    for (int s = 0; s < B; s++)
        for (int i = 0; i < PER; i++) {
            out[s * 2 * PER + i] = e[s * PER + i] + 0.3f * tdl_rng_normal(&rng);
            out[s * 2 * PER + PER + i] = 2 * tdl_rng_uniform(&rng) - 1;
        }
    dit_diffusion_q_sample(d, x0, e, t, B, PER, xt);
    double terms[2];
    double l = dit_diffusion_loss(d, x0, xt, e, t, out, B, C, HW, dout, terms);
    ok(isfinite(l) && terms[1] > 0 && fabs(l - terms[0] - terms[1]) < 1e-12,
       "loss %.6g = mse %.6g + vb %.6g", l, terms[0], terms[1]);
    double worst_eps = 0, worst_v = 0, vb_eps = 0;
    for (int s = 0; s < B; s++)
        for (int i = 0; i < PER; i += 2)
            for (int half = 0; half < 2; half++) {
                int j = s * 2 * PER + half * PER + i;
                float keep = out[j], h = 1e-3f;
                out[j] = keep + h;
                double lp = loss_of(d, x0, xt, e, t, out, B, HW, half ? -1 : 0);
                double vp = loss_of(d, x0, xt, e, t, out, B, HW, 1);
                out[j] = keep - h;
                double lm = loss_of(d, x0, xt, e, t, out, B, HW, half ? -1 : 0);
                double vm = loss_of(d, x0, xt, e, t, out, B, HW, 1);
                out[j] = keep;
                double fd = (lp - lm) / (2.0 * h);
                double err = fabs(fd - dout[j]) / fmax(fabs(fd), 1e-3);
                if (half)
                    worst_v = fmax(worst_v, err);
                else
                    worst_eps = fmax(worst_eps, err),
                    vb_eps = fmax(vb_eps, fabs(vp - vm) / (2 * h));
            }
    ok(worst_eps < 1e-2, "d/d eps is the mse's: central differences (worst rel. error %.2g)",
       worst_eps);
    ok(vb_eps > 1e-4, "the bound depends on eps (d vb / d eps up to %.2g), its gradient stopped",
       vb_eps);
    ok(worst_v < 1e-2,
       "d/d v of the whole loss, KL at steps 1, 500, 999 and the decoder NLL at 0: central "
       "differences (worst rel. error %.2g)",
       worst_v);
    dit_diffusion_free(d);
    /* fixed variance: the mse alone */
    if (dit_diffusion_create(1000, 1000, false, &d) != TDL_OK)
        return;
    l = dit_diffusion_loss(d, x0, xt, e, t, out, B, C, HW, dout, terms);
    double mse = 0;
    for (int s = 0; s < B; s++)
        for (int i = 0; i < PER; i++) {
            double r = (double)out[s * PER + i] - e[s * PER + i];
            mse += r * r / (B * PER);
        }
    ok(fabs(l - mse) < 1e-12 && terms[1] == 0, "fixed large variance: the loss is the mse alone");
    dit_diffusion_free(d);
}

static void test_mismatch(void)
{
    ok(dit_sampler_check(DIT_SAMPLER_DDPM, DIT_OBJECTIVE_RF) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "ddpm") && strstr(tdl_error_get(), "rf"),
       "ddpm refused for a rectified-flow model: %s", tdl_error_get());
    ok(dit_sampler_check(DIT_SAMPLER_HEUN, DIT_OBJECTIVE_DDPM) == TDL_ERR_INVALID_ARG &&
           strstr(tdl_error_get(), "heun"),
       "heun refused for a ddpm model: %s", tdl_error_get());
    ok(dit_sampler_check(DIT_SAMPLER_DDIM, DIT_OBJECTIVE_DDPM) == TDL_OK &&
           dit_sampler_check(DIT_SAMPLER_EULER, DIT_OBJECTIVE_RF) == TDL_OK,
       "ddim for ddpm, euler for rf");
    dit_config_t c;
    dit_config_named("tiny", &c);
    c.objective = DIT_OBJECTIVE_DDPM;
    dit_model_t *m;
    if (dit_model_create(&c, 2, 8, &m) != TDL_OK)
        return;
    float x[64];
    memset(x, 0, sizeof(x));
    ok(dit_sampler_step(m, x, NULL, 1, 8, 8, 1.0f, 0.5f, DIT_SAMPLER_EULER, 1.0f) ==
           TDL_ERR_INVALID_ARG,
       "an Euler step of a ddpm model refused");
    dit_sample_opts_t o = {.kind = DIT_SAMPLER_DDIM, .steps = 3, .cfg_scale = 2, .seed = 1};
    dit_model_init_weights(m, 1);
    ok(dit_sample(m, NULL, 1, 8, 8, &o, x) == TDL_OK && isfinite(x[0]),
       "a ddim trajectory of a ddpm model runs");
    dit_model_free(m);
}

int main(void)
{
    test_schedule();
    test_respacing();
    test_steps();
    test_loss_gradient();
    test_mismatch();
    return done_testing();
}
