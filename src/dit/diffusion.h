/* The Gaussian diffusion of the reference DiT (facebookresearch/DiT diffusion/, of the openai
 * improved-diffusion lineage), as create_diffusion makes it: linear betas from 0.0001 to 0.02
 * (scaled by 1000 / T) over T = 1000 steps, the network predicting the noise (epsilon), its
 * variance learned in range (learn_sigma: the output's second half v in [-1, 1] interpolates the
 * log variance between the clipped posterior's and log beta) or, without learn_sigma, fixed large
 * (beta); the loss the reference's MSE (not rescaled): the noise's mean squared error plus, when
 * the variance is learned, the variational bound in bits with the mean's gradient stopped.
 * Sampling respaces the 1000 steps (space_timesteps) and steps DDPM (ancestral) or DDIM (eta 0),
 * denoised x0 not clipped, as the reference's sample.py. The tables are in double, as the
 * reference's float64 numpy ones. */
#ifndef TIDAL_DIT_DIFFUSION_H
#define TIDAL_DIT_DIFFUSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dit/dit.h"

#define DIT_DIFFUSION_STEPS 1000 /* the reference's T */

typedef struct dit_diffusion {
    int steps; /* of this process (respaced from base_steps) */
    int base_steps;
    bool learn_sigma;  /* LEARNED_RANGE; else FIXED_LARGE */
    int *timestep_map; /* [steps]: the base step each one is, what the network sees */
    /* [steps] each, of the (respaced) process */
    double *betas, *log_betas, *alphas_cumprod, *alphas_cumprod_prev;
    double *sqrt_alphas_cumprod, *sqrt_one_minus_alphas_cumprod;
    double *sqrt_recip_alphas_cumprod, *sqrt_recipm1_alphas_cumprod;
    double *posterior_variance, *posterior_log_variance_clipped;
    double *posterior_mean_coef1, *posterior_mean_coef2;
    double *fixed_log_variance; /* FIXED_LARGE: log of [posterior_variance[1], betas[1:]] */
} dit_diffusion_t;

/* The reference's space_timesteps(num_timesteps, [count]): count steps of 0 .. num_timesteps - 1,
 * evenly strided ((num - 1) / (count - 1), each rounded half to even as Python's round), into
 * kept[count] in ascending order. 1 <= count <= num_timesteps, else an error naming both. */
tdl_status_t dit_diffusion_space_timesteps(int num_timesteps, int count, int *kept);
/* The process of base_steps linear betas, respaced to `steps` (== base_steps: none): betas
 * recomputed from alphas_cumprod at the kept steps, as the reference's SpacedDiffusion. */
tdl_status_t dit_diffusion_create(int base_steps, int steps, bool learn_sigma,
                                  dit_diffusion_t **diffusion_out);
void dit_diffusion_free(dit_diffusion_t *diffusion);
/* What the timestep embedder is given for step k: timestep_map[k] / 1000 (embedded times 1000). */
float dit_diffusion_model_time(const dit_diffusion_t *diffusion, int k);

/* x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) noise, sample s at step t[s]; per floats a sample. */
void dit_diffusion_q_sample(const dit_diffusion_t *diffusion, const float *x0, const float *noise,
                            const int *t, int batch, size_t per, float *x_t);
/* The reference's training loss of the model output out[B, C', H, W] (C' = 2C with learn_sigma)
 * for x_t = q_sample(x0, t, noise), averaged over the batch: mse (the noise half against noise)
 * plus, with learn_sigma, the variational bound term (normal KL of the true posterior against the
 * model's, or at t = 0 the discretized Gaussian decoder NLL, in bits, averaged over C*H*W) of the
 * output with its noise half frozen. dout (may be NULL) gets d loss / d out: the mse's on the
 * noise half, the bound's on the variance half. terms (may be NULL) gets the batch means of mse
 * and vb. */
double dit_diffusion_loss(const dit_diffusion_t *diffusion, const float *x0, const float *x_t,
                          const float *noise, const int *t, const float *out, int batch,
                          int channels, size_t hw, float *dout, double terms[2]);
/* One step from respaced step k to k - 1 of n images x[n, C, H, W] given the model's output
 * out[n, C', H, W] at (x, k): DDPM (the model's mean, plus exp(log variance / 2) noise[n, C, H, W]
 * but at k = 0) or DDIM (eta 0; noise unused, may be NULL). x_next may be x. */
void dit_diffusion_step(const dit_diffusion_t *diffusion, dit_sampler_kind_t kind, int k,
                        const float *x, const float *out, const float *noise, int n, int channels,
                        size_t hw, float *x_next);
/* The DDPM noise of respaced step k for images first_index .. first_index + n - 1 of a seed. */
void dit_diffusion_step_noise(float *z, int n, size_t per, uint64_t seed, uint64_t first_index,
                              int k);
/* The model's output out[n, C', H, W] at x and `time`, guided as the reference's
 * forward_with_cfg when cfg_scale != 1: conditional and unconditional rows in one batch, the first
 * min(3, C') channels uncond + s (cond - uncond), the others the conditional row's. labels[i] < 0
 * or == num_classes: unconditional. */
tdl_status_t dit_diffusion_model_out(dit_model_t *model, const float *x, const int *labels, int n,
                                     int height, int width, float time, float cfg_scale,
                                     float *out);
/* Noise (dit_sampler_noise's), then opts->steps respaced DDPM or DDIM steps (opts->kind) with
 * guidance opts->cfg_scale: out[n, C, H, W]. Deterministic per seed. */
tdl_status_t dit_diffusion_sample(dit_model_t *model, const int *labels, int n, int height,
                                  int width, const dit_sample_opts_t *opts, float *out);

#endif /* TIDAL_DIT_DIFFUSION_H */
