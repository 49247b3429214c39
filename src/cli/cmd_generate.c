/* `tidal generate`: images from a weights file, as a PNG grid. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dit/diffusion.h"
#include "serve/serve.h"
#include "train/train.h"

static const tdl_param_def_t generate_params[] = {
    {"ckpt", TDL_PARAM_STRING, NULL, "weights file written by tidal train (HDF5)", NULL, 1, 0},
    {"class", TDL_PARAM_INT, "-1",
     "class label of every image, 0 to the model's classes - 1 (-1: cycle through the classes)",
     NULL, -1, 1e6},
    {"n", TDL_PARAM_INT, "16", "number of images", NULL, 1, 4096},
    {"steps", TDL_PARAM_INT, "50",
     "sampler steps (ddpm, ddim: the 1000 diffusion steps respaced to this many, at most 1000)",
     NULL, 1, 10000},
    {"cfg", TDL_PARAM_DOUBLE, "4.0", "classifier-free guidance scale (1: none)", NULL, 0, 100},
    {"seed", TDL_PARAM_INT, "1", "noise seed: the same seed gives the same images", NULL, 0,
     9.2e18},
    {"sampler", TDL_PARAM_ENUM, "auto",
     "euler or heun (ODE integrators) for a model trained with --objective rf, ddpm (ancestral) "
     "or ddim (eta 0) for one trained with --objective ddpm; auto: heun, or ddpm",
     "auto|euler|heun|ddpm|ddim", 1, 0},
    {"weights", TDL_PARAM_ENUM, "ema", "which weights of the file", "ema|model", 1, 0},
    {"resolution", TDL_PARAM_INT, "0", "image side (0: the training resolution; with --vae, of "
     "the decoded images, the VAE's upscale times the model's)", NULL, 0, 4096},
    {"vae", TDL_PARAM_STRING, NULL,
     "a latent model's VAE (a weights file with its decoder, or random:SEED for the SD "
     "configuration with random weights): the samples are latents, its decoder makes the RGB "
     "images",
     NULL, 1, 0},
    {"output", TDL_PARAM_STRING, "grid.png", "PNG grid to write (also -o)", NULL, 1, 0},
    CLI_DEVICE_PARAM,
};

static int generate_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal generate' takes no arguments, found '%s'", pos[0]);
    const char *ckpt = tdl_param_str(params, "ckpt");
    if (!ckpt)
        return cli_usage_error("'tidal generate' needs --ckpt FILE (a weights file from tidal "
                               "train)");
    int n = (int)tdl_param_int(params, "n"), label = (int)tdl_param_int(params, "class");
    dit_sample_opts_t o = {.steps = (int)tdl_param_int(params, "steps"),
                           .cfg_scale = (float)tdl_param_double(params, "cfg"),
                           .seed = (uint64_t)tdl_param_int(params, "seed")};
    const char *sampler = tdl_param_str(params, "sampler");
    int res = (int)tdl_param_int(params, "resolution");
    const char *output = tdl_param_str(params, "output");
    int batch = TDL_MIN(2 * n, 64);
    /* the configuration first: a label the model does not know is refused before the weights
     * are read and a device is opened */
    dit_config_t cfg;
    tdl_status_t st = train_weights_config(ckpt, &cfg);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: generate: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    cli_vae_t va;
    const char *vae_path = tdl_param_str(params, "vae");
    int scale = 1;
    if (vae_path) {
        int vrc = cli_vae_config(vae_path, DIT_VAE_DECODER, &va);
        if (vrc != CLI_EXIT_OK)
            return vrc;
        if (va.config.latent_channels != cfg.in_channels)
            return cli_usage_error("--vae %s decodes latents of %d channels; %s's model has %d",
                                   vae_path, va.config.latent_channels, ckpt, cfg.in_channels);
        scale = dit_vae_upscale(&va.config);
        if (res % scale)
            return cli_usage_error("--resolution %d is not a multiple of %d, the VAE's upscale",
                                   res, scale);
        res /= scale;
    }
    if (res) {
        dit_config_t at = cfg;
        at.input_size = res;
        if (dit_config_check(&at) != TDL_OK)
            return cli_usage_error("--resolution %d: %s", res, tdl_error_get());
    }
    if (!strcmp(sampler, "auto"))
        sampler = cfg.objective == DIT_OBJECTIVE_DDPM ? "ddpm" : "heun";
    dit_sampler_parse(sampler, &o.kind);
    if (dit_sampler_check(o.kind, cfg.objective) != TDL_OK)
        return cli_usage_error("--sampler %s: %s (%s)", sampler, tdl_error_get(), ckpt);
    if (cfg.objective == DIT_OBJECTIVE_DDPM && o.steps > DIT_DIFFUSION_STEPS)
        return cli_usage_error("--steps %d: a ddpm model's %d diffusion steps can be respaced to "
                               "1 to %d steps",
                               o.steps, DIT_DIFFUSION_STEPS, DIT_DIFFUSION_STEPS);
    if (label >= cfg.num_classes)
        return cli_usage_error("--class %d is outside -1 to %d: %s (%s) has %d classes, 0 to %d "
                               "(-1 cycles through them)",
                               label, cfg.num_classes - 1, ckpt, cfg.name, cfg.num_classes,
                               cfg.num_classes - 1);
    dit_model_t *m;
    struct dit_backend *be;
    st = dit_backend_open(tdl_param_str(params, "device"), -1, &be);
    if (st == TDL_OK)
        st = train_weights_load_on(ckpt, tdl_param_str(params, "weights"), batch, res, be, &m);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: generate: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    int rc = CLI_EXIT_FAILURE;
    const dit_config_t *c = &m->config;
    if (!res)
        res = c->input_size;
    int *labels = malloc((size_t)n * sizeof(int));
    float *img = malloc((size_t)n * c->in_channels * res * res * sizeof(float));
    if (!labels || !img) {
        fprintf(stderr, "tidal: generate: out of memory for %d images\n", n);
        free(labels), free(img);
        goto out;
    }
    for (int i = 0; i < n; i++)
        labels[i] = label >= 0 ? label : i % c->num_classes;
    double t0 = tdl_clock_s();
    st = dit_sample(m, labels, n, res, res, &o, img);
    dit_vae_t *vae = NULL;
    float *rgb = NULL;
    int side = res * scale, channels = c->in_channels;
    /* the latents decode on the DiT's device */
    const char *device = tdl_param_str(params, "device");
    if (st == TDL_OK && vae_path && (st = cli_vae_load(&va, device, &vae)) == TDL_OK) {
        channels = vae->config.out_channels;
        if (!(rgb = malloc((size_t)n * channels * side * side * sizeof(float))))
            st = tdl_error_raise(TDL_ERR_NOMEM, "out of memory for %d images of %d", n, side);
        if (st == TDL_OK)
            st = dit_vae_decode(vae, img, n, res, res, rgb);
    }
    if (st == TDL_OK) {
        /* Cycling through the classes: one column per class. */
        int cols = label < 0 && n >= c->num_classes ? c->num_classes : (int)ceil(sqrt((double)n));
        st = serve_png_write_grid(output, rgb ? rgb : img, n, channels, side, side, cols, 2);
    }
    free(rgb);
    dit_vae_free(vae);
    if (st == TDL_OK) {
        printf("tidal generate: %d images of %dx%d (%s, %d %s steps, cfg %.1f, seed %llu%s) in "
               "%.2f s -> %s\n",
               n, side, side, c->name, o.steps, sampler, o.cfg_scale, (unsigned long long)o.seed,
               vae_path ? ", latents decoded by the VAE" : "", tdl_clock_s() - t0, output);
        rc = CLI_EXIT_OK;
    } else {
        fprintf(stderr, "tidal: generate: %s\n", tdl_error_get());
    }
    free(labels), free(img);
out:
    dit_model_free(m);
    return rc;
}

const cli_command_t cli_cmd_generate = {
    .name = "generate",
    .summary = "sample images from a weights file into a PNG grid",
    .usage = "tidal generate --ckpt FILE [--class K] [--n 16] [--steps 50] [--cfg 4] [--seed 1] "
             "[--sampler auto|euler|heun|ddpm|ddim] [-o grid.png]",
    .params = generate_params,
    .nparams = TDL_ARRAY_SIZE(generate_params),
    .run = generate_run,
};
