/* The DiT on a device backend against the same model on the CPU: forward outputs and parameter
 * gradients, relative to the CPU's (the GPU's own rounding and summation order differ).
 * Included by tests/unit/test_dit_emu.c (the CUDA backend's code under emulation, on any
 * machine) and tests/cuda/dit_gpu.c (the real one, on a GPU); each defines
 * open_device_backend(). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dit/backend.h"
#include "dit/dit.h"
#include "tap.h"
#include "randn.h"

static tdl_status_t open_device_backend(dit_backend_t **be_out);

/* max |a - b| / max(max |b|, tiny) */
static double rel_err(const float *a, const float *b, size_t n)
{
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return diff / scale;
}

static int all_finite(const float *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return 0;
    return 1;
}

/* One configuration: forward at b x h x w, backward with a random output gradient, twice (the
 * gradients accumulate), every parameter tensor compared. "NAME+sigma": NAME with learn_sigma,
 * "NAME-sigma" without (the output's channels follow). */
static void compare(const char *config, int b, int h, int w, int max_res, double tol)
{
    dit_config_t cfg;
    char cname[32];
    snprintf(cname, sizeof(cname), "%.*s", (int)strcspn(config, "+-"), config);
    if (!strncmp(config, "DiT-", 4)) /* its own dash */
        snprintf(cname, sizeof(cname), "%.*s", (int)(4 + strcspn(config + 4, "+-")), config);
    if (!ok(dit_config_named(cname, &cfg) == TDL_OK, "%s: configuration", config))
        return;
    if (strstr(config + strlen(cname), "sigma"))
        cfg.learn_sigma = config[strlen(cname)] == '+';
    dit_backend_t *be;
    tdl_status_t st = open_device_backend(&be);
    if (!ok(st == TDL_OK, "%s: the device backend opens%s%s", config, st ? ": " : "",
            st ? tdl_error_get() : ""))
        return;
    dit_model_t *cpu, *dev;
    if (!ok(dit_model_create(&cfg, b, max_res, &cpu) == TDL_OK, "%s: CPU model", config)) {
        dit_backend_close(be);
        return;
    }
    const char *name = be->name; /* the model owns the backend from here */
    st = dit_model_create_on(&cfg, b, max_res, be, &dev);
    if (!ok(st == TDL_OK, "%s: %s model%s%s", config, name, st ? ": " : "",
            st ? tdl_error_get() : "")) {
        dit_model_free(cpu);
        return;
    }
    for (size_t i = 0; i < cpu->num_params; i++)
        cpu->params[i] = 0.1f * tdl_rng_normal(&rng);
    memcpy(dev->params, cpu->params, cpu->num_params * sizeof(float));
    dit_model_params_changed(dev);
    size_t nx = (size_t)b * cfg.in_channels * h * w;
    size_t n = (size_t)b * dit_config_out_channels(&cfg) * h * w; /* the output's */
    float *x = randn(nx, 1.0f), *dout = randn(n, 1.0f);
    float *out_cpu = tensor_alloc(n), *out_dev = tensor_alloc(n);
    float *t = tensor_alloc((size_t)b);
    int *y = calloc((size_t)b, sizeof(int));
    for (int s = 0; s < b; s++) {
        t[s] = (float)(s + 1) / (float)(b + 1);
        y[s] = s == b - 1 ? cfg.num_classes : (s / 2) % cfg.num_classes; /* repeats, and null */
    }
    ok(dit_model_forward(cpu, x, t, y, b, h, w, out_cpu) == TDL_OK, "%s: CPU forward", config);
    st = dit_model_forward(dev, x, t, y, b, h, w, out_dev);
    ok(st == TDL_OK, "%s %dx%dx%d: %s forward runs (%s)", config, b, h, w, be->name,
       st ? tdl_error_get() : "ok");
    double e = rel_err(out_dev, out_cpu, n);
    ok(all_finite(out_dev, n) && e <= tol, "%s %dx%dx%d: forward within %g of the CPU (%.2e)",
       config, b, h, w, tol, e);

    dit_model_zero_grad(cpu);
    dit_model_zero_grad(dev);
    for (int pass = 0; pass < 2; pass++) {
        if (pass) { /* a second micro-batch: gradients add up */
            for (size_t i = 0; i < n; i++)
                dout[i] = -0.5f * dout[i] + 0.1f;
            dit_model_forward(cpu, x, t, y, b, h, w, out_cpu);
            dit_model_forward(dev, x, t, y, b, h, w, out_dev);
        }
        ok(dit_model_backward(cpu, dout) == TDL_OK, "%s: CPU backward", config);
        st = dit_model_backward(dev, dout);
        ok(st == TDL_OK, "%s: %s backward %d runs (%s)", config, be->name, pass + 1,
           st ? tdl_error_get() : "ok");
    }
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < cpu->ninfos; i++) {
        const dit_param_info_t *pi = &cpu->infos[i];
        double ei = rel_err(dev->grads + pi->offset, cpu->grads + pi->offset, pi->numel);
        if (!(ei <= worst)) {
            worst = ei;
            worst_name = pi->name;
        }
    }
    ok(all_finite(dev->grads, dev->num_params) && worst <= tol,
       "%s: every parameter's gradient within %g of the CPU (worst %.2e, %s)", config, tol, worst,
       worst_name);

    /* new weights reach the device only through dit_model_params_changed */
    for (size_t i = 0; i < cpu->num_params; i++)
        cpu->params[i] *= 0.5f;
    memcpy(dev->params, cpu->params, cpu->num_params * sizeof(float));
    dit_model_params_changed(dev);
    dit_model_forward(cpu, x, t, y, b, h, w, out_cpu);
    dit_model_forward(dev, x, t, y, b, h, w, out_dev);
    e = rel_err(out_dev, out_cpu, n);
    ok(e <= tol, "%s: changed weights reach the device (%.2e)", config, e);

    /* a smaller batch and grid than the model was sized for */
    if (b > 1 && h > cfg.patch_size) {
        int b2 = b - 1, h2 = h - cfg.patch_size;
        size_t n2 = (size_t)b2 * dit_config_out_channels(&cfg) * h2 * w;
        dit_model_forward(cpu, x, t, y, b2, h2, w, out_cpu);
        dit_model_forward(dev, x, t, y, b2, h2, w, out_dev);
        e = rel_err(out_dev, out_cpu, n2);
        ok(e <= tol, "%s %dx%dx%d: forward within %g (%.2e)", config, b2, h2, w, tol, e);
    }
    /* bad input is refused before anything runs on the device */
    y[0] = cfg.num_classes + 1;
    ok(dit_model_forward(dev, x, t, y, b, h, w, out_dev) == TDL_ERR_INVALID_ARG,
       "%s: a label out of range is refused", config);
    free(x), free(dout), free(out_cpu), free(out_dev), free(t), free(y);
    dit_model_free(cpu);
    dit_model_free(dev);
}
