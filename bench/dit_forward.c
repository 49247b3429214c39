/* Benchmark dit-xl-forward, tidal's side: one forward of a DiT of the reference's configurations
 * (DiT-XL/2 by default) on an inference model, as guided sampling runs it: batch 2, every row
 * at t = 0.5, labels 1 and the null class, by dit_sp_forward on one rank (comm NULL).
 *
 *   dit_forward [--model DiT-XL/2] [--batch 2] [--latent 32] [--repeats 3] [--seed 1] [--dump DIR]
 *
 * The weights are the reference's initialization (dit_model_init_weights) plus uniform noise of
 * +-0.02 on every parameter, so that the zero-initialized adaLN and output layers do not make the
 * output zero; the latents are normal. All of it is reproducible from --seed. Without --dump:
 * one untimed forward, then --repeats timed ones; prints the median, the best and OpenBLAS's
 * kernels. With --dump DIR: no timing; DIR gets names.txt (a tensor a line: name and shape, in
 * the order of weights.bin), weights.bin (raw float32), x.bin, t.bin (float32), y.bin (int32)
 * and out.bin (float32, one forward's output), for bench/dit_forward.py to load and check. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"

/* OpenBLAS's name of the kernels it chose for this CPU, where the BLAS is OpenBLAS. */
extern char *openblas_get_corename(void) __attribute__((weak));

typedef struct fwd_opts {
    const char *model, *dump;
    int batch, latent, repeats;
    uint64_t seed;
} fwd_opts_t;

static int fwd_fail(const char *what)
{
    fprintf(stderr, "dit_forward: %s: %s\n", what, tdl_error_get());
    return 1;
}

/* splitmix64: the driver's own stream, so that the weights do not depend on another module's. */
static uint64_t fwd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double fwd_uniform(uint64_t *s) { return (double)(fwd_next(s) >> 11) * 0x1.0p-53; }

static int fwd_write(const char *dir, const char *name, const void *p, size_t bytes)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(p, 1, bytes, f) != bytes;
    if (f)
        bad |= fclose(f) != 0;
    if (bad)
        fprintf(stderr, "dit_forward: cannot write %s\n", path);
    return bad;
}

static int fwd_dump(const dit_model_t *m, const fwd_opts_t *o, const float *x, const float *t,
                    const int *y, const float *out, size_t nx, size_t nout)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/names.txt", o->dump);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "dit_forward: cannot write %s\n", path);
        return 1;
    }
    for (int i = 0; i < m->ninfos; i++) {
        fprintf(f, "%s", m->infos[i].name);
        for (int d = 0; d < m->infos[i].ndim; d++)
            fprintf(f, " %d", m->infos[i].shape[d]);
        fprintf(f, "\n");
    }
    if (fclose(f) != 0)
        return 1;
    /* the tensors in the order of names.txt, wherever they lie in the flat array */
    snprintf(path, sizeof(path), "%s/weights.bin", o->dump);
    f = fopen(path, "wb");
    int bad = !f;
    for (int i = 0; !bad && i < m->ninfos; i++)
        bad = fwrite(m->params + m->infos[i].offset, sizeof(float), m->infos[i].numel, f) !=
              m->infos[i].numel;
    if (f)
        bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "dit_forward: cannot write %s\n", path);
        return 1;
    }
    return fwd_write(o->dump, "x.bin", x, nx * sizeof(float)) ||
           fwd_write(o->dump, "t.bin", t, (size_t)o->batch * sizeof(float)) ||
           fwd_write(o->dump, "y.bin", y, (size_t)o->batch * sizeof(int)) ||
           fwd_write(o->dump, "out.bin", out, nout * sizeof(float));
}

static int fwd_parse(int argc, char **argv, fwd_opts_t *o)
{
    *o = (fwd_opts_t){.model = "DiT-XL/2", .batch = 2, .latent = 32, .repeats = 3, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            goto usage;
        if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--dump"))
            o->dump = v;
        else if (!strcmp(a, "--batch"))
            o->batch = atoi(v);
        else if (!strcmp(a, "--latent"))
            o->latent = atoi(v);
        else if (!strcmp(a, "--repeats"))
            o->repeats = atoi(v);
        else if (!strcmp(a, "--seed"))
            o->seed = strtoull(v, NULL, 10);
        else
            goto usage;
        i++;
    }
    if (o->batch >= 1 && o->latent >= 1 && o->repeats >= 1)
        return 0;
usage:
    fprintf(stderr, "usage: dit_forward [--model DiT-XL/2] [--batch 2] [--latent 32] "
                    "[--repeats 3] [--seed 1] [--dump DIR]\n");
    return 2;
}

int main(int argc, char **argv)
{
    fwd_opts_t o;
    int rc = fwd_parse(argc, argv, &o);
    if (rc)
        return rc;
    dit_config_t c;
    if (dit_config_named(o.model, &c) != TDL_OK)
        return fwd_fail(o.model);
    c.objective = DIT_OBJECTIVE_DDPM; /* the reference's: what guided DDPM sampling runs */
    dit_model_t *m = NULL;
    if (dit_model_create_inference(&c, o.batch, o.latent, NULL, &m) != TDL_OK)
        return fwd_fail("model");
    dit_model_init_weights(m, o.seed);
    uint64_t s = o.seed ^ 0x646974666f727764ull; /* "ditforwd" */
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] += (float)(0.04 * fwd_uniform(&s) - 0.02);
    dit_model_params_changed(m);

    int co = dit_config_out_channels(&c), hw = o.latent * o.latent;
    size_t nx = (size_t)o.batch * c.in_channels * hw, nout = (size_t)o.batch * co * hw;
    float *x = malloc(nx * sizeof(float)), *out = malloc(nout * sizeof(float));
    float *t = malloc((size_t)o.batch * sizeof(float));
    int *y = malloc((size_t)o.batch * sizeof(int));
    double *ms = malloc((size_t)o.repeats * sizeof(double));
    rc = 1;
    if (!x || !out || !t || !y || !ms) {
        fprintf(stderr, "dit_forward: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < nx; i += 2) { /* Box-Muller pairs */
        double u = 1.0 - fwd_uniform(&s), v = fwd_uniform(&s), r = sqrt(-2.0 * log(u));
        x[i] = (float)(r * cos(6.283185307179586 * v));
        if (i + 1 < nx)
            x[i + 1] = (float)(r * sin(6.283185307179586 * v));
    }
    for (int i = 0; i < o.batch; i++) {
        t[i] = 0.5f;
        y[i] = i % 2 ? c.num_classes : 1; /* conditional and unconditional rows, as guidance */
    }
    if (o.dump) {
        if (dit_sp_forward(m, NULL, x, t, y, o.batch, o.latent, o.latent, out) != TDL_OK) {
            fwd_fail("forward");
            goto out;
        }
        rc = fwd_dump(m, &o, x, t, y, out, nx, nout);
        goto out;
    }
    for (int r = -1; r < o.repeats; r++) { /* r = -1: the untimed warm-up */
        double t0 = tdl_clock_s();
        if (dit_sp_forward(m, NULL, x, t, y, o.batch, o.latent, o.latent, out) != TDL_OK) {
            fwd_fail("forward");
            goto out;
        }
        if (r >= 0)
            ms[r] = 1e3 * (tdl_clock_s() - t0);
    }
    double best = ms[0];
    for (int r = 1; r < o.repeats; r++)
        best = ms[r] < best ? ms[r] : best;
    printf("forward %s, batch %d at %dx%d (%d tokens): %.1f ms (median of %d), %zu parameters, "
           "%.1f MiB of workspace\n",
           c.name, o.batch, o.latent, o.latent, hw / (c.patch_size * c.patch_size),
           tdl_median(ms, (size_t)o.repeats), o.repeats, m->num_params,
           (double)dit_model_activation_bytes(m) / (1 << 20));
    printf("best: %.1f ms\nblas core: %s\n", best,
           openblas_get_corename ? openblas_get_corename() : "unknown");
    rc = 0;
out:
    free(ms), free(y), free(t), free(out), free(x);
    dit_model_free(m);
    return rc;
}
