/* The DiT with learn_sigma and the Gaussian diffusion (src/dit/diffusion.c) driven from files, for
 * tests/cli/test_ddpm_torch.sh (its PyTorch reference); not a test by itself. The model is the
 * tiny configuration (8x8, patch 2, hidden 32, depth 2, 4 heads, 10 classes) with C channels.
 * Files are raw: float32, int32 for steps and labels, float64 for losses.
 *   ddpm_ref names C SIGMA
 *       one line a tensor: its name and shape, in the order of a weights file
 *   ddpm_ref forward C SIGMA DIR N H W
 *       DIR/weights.bin, x.bin [N,C,H,W], t.bin [N], y.bin [N] -> out.bin (dit_model_forward of
 *       the training model) and out_sp.bin (an inference model's, sp.c's forward) [N,C',H,W]
 *   ddpm_ref loss C SIGMA DIR N H W
 *       x0.bin, noise.bin, t.bin (steps), out.bin [N,C',H,W] -> loss.bin (loss, mse, vb) and
 *       dout.bin [N,C',H,W]; x_t.bin gets q_sample(x0, t, noise)
 *   ddpm_ref step C SIGMA DIR N H W KIND STEPS K
 *       x.bin, out.bin, noise.bin -> next.bin: one step (ddpm|ddim) of the process respaced to
 *       STEPS, from respaced step K; map.bin gets its timestep map (int32)
 *   ddpm_ref sample C SIGMA DIR N H W KIND STEPS CFG SEED
 *       weights.bin, y.bin -> sample.bin; noise.bin (the start) and z<k>.bin (each DDPM step's)
 *       are written for the reference to use */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit/diffusion.h"
#include "dit/dit.h"

static int fail(const char *what)
{
    fprintf(stderr, "ddpm_ref: %s: %s\n", what, tdl_error_get());
    return 1;
}

static void *read_file(const char *dir, const char *name, size_t bytes)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(bytes ? bytes : 1);
    size_t got = f && p ? fread(p, 1, bytes, f) : 0;
    int extra = f ? fgetc(f) != EOF : 0;
    if (f)
        fclose(f);
    if (!f || got != bytes || extra) {
        fprintf(stderr, "ddpm_ref: %s: not %zu bytes\n", path, bytes);
        free(p);
        return NULL;
    }
    return p;
}

static int write_file(const char *dir, const char *name, const void *p, size_t bytes)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(p, 1, bytes, f) != bytes;
    if (f)
        bad |= fclose(f) != 0;
    if (bad)
        fprintf(stderr, "ddpm_ref: cannot write %s\n", path);
    return bad;
}

static dit_config_t tiny(int channels, int sigma)
{
    dit_config_t c;
    dit_config_named("tiny", &c);
    c.in_channels = channels;
    c.learn_sigma = sigma;
    c.objective = DIT_OBJECTIVE_DDPM;
    return c;
}

static int load_weights(dit_model_t *m, const char *dir)
{
    float *w = read_file(dir, "weights.bin", m->num_params * sizeof(float));
    if (!w)
        return 1;
    memcpy(m->params, w, m->num_params * sizeof(float));
    dit_model_params_changed(m);
    free(w);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ddpm_ref names|forward|loss|step|sample C SIGMA ...\n");
        return 2;
    }
    const char *cmd = argv[1];
    dit_config_t c = tiny(atoi(argv[2]), atoi(argv[3]));
    int co = dit_config_out_channels(&c);
    if (!strcmp(cmd, "names")) {
        dit_model_t *m;
        if (dit_model_create(&c, 1, 8, &m) != TDL_OK)
            return fail("model");
        for (int i = 0; i < m->ninfos; i++) {
            printf("%s", m->infos[i].name);
            for (int d = 0; d < m->infos[i].ndim; d++)
                printf(" %d", m->infos[i].shape[d]);
            printf("\n");
        }
        dit_model_free(m);
        return 0;
    }
    if (argc < 8)
        return 2;
    const char *dir = argv[4];
    int n = atoi(argv[5]), h = atoi(argv[6]), w = atoi(argv[7]);
    size_t hw = (size_t)h * w, per = (size_t)c.in_channels * hw, po = (size_t)co * hw;
    int rc = 1;
    if (!strcmp(cmd, "forward")) {
        dit_model_t *m = NULL, *inf = NULL;
        float *x = read_file(dir, "x.bin", n * per * sizeof(float));
        float *t = read_file(dir, "t.bin", n * sizeof(float));
        int *y = read_file(dir, "y.bin", n * sizeof(int));
        float *out = malloc(n * po * sizeof(float)), *out2 = malloc(n * po * sizeof(float));
        int side = h > w ? h : w;
        if (x && t && y && out && out2 && dit_model_create(&c, n, side, &m) == TDL_OK &&
            dit_model_create_inference(&c, n, side, NULL, &inf) == TDL_OK &&
            !load_weights(m, dir) && !load_weights(inf, dir)) {
            if (dit_model_forward(m, x, t, y, n, h, w, out) != TDL_OK ||
                dit_model_forward(inf, x, t, y, n, h, w, out2) != TDL_OK)
                rc = fail("forward");
            else
                rc = write_file(dir, "out.bin", out, n * po * sizeof(float)) ||
                     write_file(dir, "out_sp.bin", out2, n * po * sizeof(float));
        }
        dit_model_free(inf), dit_model_free(m);
        free(out2), free(out), free(y), free(t), free(x);
        return rc;
    }
    if (!strcmp(cmd, "loss")) {
        dit_diffusion_t *d = NULL;
        float *x0 = read_file(dir, "x0.bin", n * per * sizeof(float));
        float *noise = read_file(dir, "noise.bin", n * per * sizeof(float));
        int *t = read_file(dir, "t.bin", n * sizeof(int));
        float *out = read_file(dir, "out.bin", n * po * sizeof(float));
        float *xt = malloc(n * per * sizeof(float)), *dout = malloc(n * po * sizeof(float));
        if (x0 && noise && t && out && xt && dout &&
            dit_diffusion_create(DIT_DIFFUSION_STEPS, DIT_DIFFUSION_STEPS, c.learn_sigma, &d) ==
                TDL_OK) {
            double r[3];
            dit_diffusion_q_sample(d, x0, noise, t, n, per, xt);
            r[0] = dit_diffusion_loss(d, x0, xt, noise, t, out, n, c.in_channels, hw, dout, r + 1);
            rc = write_file(dir, "loss.bin", r, sizeof(r)) ||
                 write_file(dir, "dout.bin", dout, n * po * sizeof(float)) ||
                 write_file(dir, "x_t.bin", xt, n * per * sizeof(float));
        }
        dit_diffusion_free(d);
        free(dout), free(xt), free(out), free(t), free(noise), free(x0);
        return rc;
    }
    if (argc < 11)
        return 2;
    dit_sampler_kind_t kind;
    if (dit_sampler_parse(argv[8], &kind) != TDL_OK)
        return fail("kind");
    int steps = atoi(argv[9]);
    if (!strcmp(cmd, "step")) {
        int k = atoi(argv[10]);
        dit_diffusion_t *d = NULL;
        float *x = read_file(dir, "x.bin", n * per * sizeof(float));
        float *out = read_file(dir, "out.bin", n * po * sizeof(float));
        float *z = read_file(dir, "noise.bin", n * per * sizeof(float));
        float *next = malloc(n * per * sizeof(float));
        if (x && out && z && next &&
            dit_diffusion_create(DIT_DIFFUSION_STEPS, steps, c.learn_sigma, &d) == TDL_OK) {
            dit_diffusion_step(d, kind, k, x, out, z, n, c.in_channels, hw, next);
            rc = write_file(dir, "next.bin", next, n * per * sizeof(float)) ||
                 write_file(dir, "map.bin", d->timestep_map, (size_t)steps * sizeof(int));
        }
        dit_diffusion_free(d);
        free(next), free(z), free(out), free(x);
        return rc;
    }
    if (!strcmp(cmd, "sample") && argc >= 12) {
        dit_sample_opts_t o = {.kind = kind,
                               .steps = steps,
                               .cfg_scale = (float)atof(argv[10]),
                               .seed = strtoull(argv[11], NULL, 10)};
        dit_model_t *m = NULL;
        int *y = read_file(dir, "y.bin", n * sizeof(int));
        float *x = malloc(n * per * sizeof(float));
        if (y && x && dit_model_create(&c, 2 * n, h > w ? h : w, &m) == TDL_OK &&
            !load_weights(m, dir)) {
            if (dit_sample(m, y, n, h, w, &o, x) != TDL_OK) {
                rc = fail("sample");
            } else {
                rc = write_file(dir, "sample.bin", x, n * per * sizeof(float));
                dit_sampler_noise(x, n, per, o.seed, 0);
                rc |= write_file(dir, "noise.bin", x, n * per * sizeof(float));
                for (int k = 1; kind == DIT_SAMPLER_DDPM && k < steps; k++) {
                    char name[32];
                    snprintf(name, sizeof(name), "z%d.bin", k);
                    dit_diffusion_step_noise(x, n, per, o.seed, 0, k);
                    rc |= write_file(dir, name, x, n * per * sizeof(float));
                }
            }
        }
        dit_model_free(m);
        free(x), free(y);
        return rc;
    }
    fprintf(stderr, "ddpm_ref: unknown command %s\n", cmd);
    return 2;
}
