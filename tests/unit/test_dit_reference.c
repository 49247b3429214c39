/* The C DiT against PyTorch: tests/reference/dit_tiny.h5 (made by make_dit_reference.py from
 * the reference model in float64) holds parameters, inputs, the output, the loss and every
 * gradient. Forward within 1e-5 and gradients within 1e-4, relative, per tensor. */
#include "config.h"

#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "tap.h"

static hid_t file;

/* Reads a dataset as doubles (whatever its stored type); returns NULL if absent. */
static double *read_f64(const char *name, size_t *n_out)
{
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
        return NULL;
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    hid_t sp = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    double *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    H5Sclose(sp);
    H5Dclose(ds);
    if (n_out)
        *n_out = (size_t)n;
    return buf;
}

static long attr_int(const char *name)
{
    long v = -1;
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_LONG, &v);
    H5Aclose(a);
    return v;
}

static double rel_err(const float *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

static float *to_f32(const double *v, size_t n)
{
    float *f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        f[i] = (float)v[i];
    return f;
}

/* Runs one case (group "inputs"/"outputs" or "res16"); returns the model's loss. */
static void run_case(dit_model_t *m, const char *in, const char *outg, int b, int side,
                     bool check_grads)
{
    char nm[128];
    size_t n;
    snprintf(nm, sizeof(nm), "/%s/x0", in);
    double *x0 = read_f64(nm, &n);
    snprintf(nm, sizeof(nm), "/%s/noise", in);
    double *noise = read_f64(nm, NULL);
    snprintf(nm, sizeof(nm), "/%s/t", in);
    double *t = read_f64(nm, NULL);
    snprintf(nm, sizeof(nm), "/%s/y", in);
    double *y = read_f64(nm, NULL);
    snprintf(nm, sizeof(nm), "/%s/out", outg);
    double *want_out = read_f64(nm, NULL);
    snprintf(nm, sizeof(nm), "/%s/x_t", outg);
    double *want_xt = read_f64(nm, NULL);
    snprintf(nm, sizeof(nm), "/%s/loss", outg);
    double *want_loss = read_f64(nm, NULL);
    if (!ok(x0 && noise && t && y && want_out && want_xt && want_loss, "%s: reference data present",
            in))
        return;
    float *fx0 = to_f32(x0, n), *fnoise = to_f32(noise, n), ft[8];
    int iy[8];
    for (int s = 0; s < b; s++) {
        ft[s] = (float)t[s];
        iy[s] = (int)y[s];
    }
    float *xt = malloc(n * 4), *target = malloc(n * 4), *out = malloc(n * 4), *dout = malloc(n * 4);
    dit_rf_interpolate(fx0, fnoise, ft, b, n / (size_t)b, xt, target);
    is_near(rel_err(xt, want_xt, n), 0, 1e-6, "%s: rectified-flow interpolation", in);
    ok(dit_model_forward(m, xt, ft, iy, b, side, side, out) == TDL_OK, "%s: forward %dx%d", in,
       side, side);
    double err = rel_err(out, want_out, n);
    ok(err <= 1e-5, "%s: output within 1e-5 of PyTorch (relative error %.2e)", in, err);
    double loss = dit_mse_loss(out, target, n, dout);
    is_near(loss, *want_loss, 1e-5 * fabs(*want_loss), "%s: loss %.9f vs PyTorch %.9f", in, loss,
            *want_loss);
    if (check_grads) {
        dit_model_zero_grad(m);
        ok(dit_model_backward(m, dout) == TDL_OK, "backward");
        double worst = 0;
        const char *worst_name = "";
        for (int i = 0; i < m->ninfos; i++) {
            const dit_param_info_t *pi = &m->infos[i];
            snprintf(nm, sizeof(nm), "/grads/%s", pi->name);
            size_t gn;
            double *g = read_f64(nm, &gn);
            if (!ok(g && gn == pi->numel, "gradient of %s present with %zu values", pi->name,
                    pi->numel)) {
                free(g);
                continue;
            }
            double e = rel_err(m->grads + pi->offset, g, gn);
            ok(e <= 1e-4, "d loss / d %s within 1e-4 of PyTorch (%.2e)", pi->name, e);
            if (e > worst) {
                worst = e;
                worst_name = pi->name;
            }
            free(g);
        }
        diag("worst gradient error %.2e (%s)", worst, worst_name);
    }
    free(x0), free(noise), free(t), free(y), free(want_out), free(want_xt), free(want_loss);
    free(fx0), free(fnoise), free(xt), free(target), free(out), free(dout);
}

int main(void)
{
    const char *srcdir = getenv("srcdir");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/reference/dit_tiny.h5", srcdir ? srcdir : ".");
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (!ok(file >= 0, "open %s", path))
        return done_testing();
    dit_config_t cfg;
    dit_config_named("tiny", &cfg);
    is_int(attr_int("input_size"), cfg.input_size, "reference input size is tiny's");
    is_int(attr_int("hidden_size"), cfg.hidden_size, "reference hidden size is tiny's");
    is_int(attr_int("depth"), cfg.depth, "reference depth is tiny's");
    is_int(attr_int("num_heads"), cfg.num_heads, "reference heads are tiny's");
    dit_model_t *m;
    if (!ok(dit_model_create(&cfg, 3, 16, &m) == TDL_OK, "create tiny"))
        return done_testing();
    int loaded = 0;
    for (int i = 0; i < m->ninfos; i++) {
        char nm[128];
        size_t n;
        snprintf(nm, sizeof(nm), "/params/%s", m->infos[i].name);
        double *v = read_f64(nm, &n);
        if (v && n == m->infos[i].numel) {
            for (size_t k = 0; k < n; k++)
                m->params[m->infos[i].offset + k] = (float)v[k];
            loaded++;
        }
        free(v);
    }
    is_int(loaded, m->ninfos, "every parameter loads by its PyTorch name and size");
    run_case(m, "inputs", "outputs", 3, 8, true);
    run_case(m, "res16", "res16", 2, 16, false);
    dit_model_free(m);
    H5Fclose(file);
    return done_testing();
}
