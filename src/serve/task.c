/* Trajectory tasks: a request's life as PREPARE, STEP_CHUNKs and DECODE, each runnable on any gfc
 * group (one rank or a sequence-parallel group), with the state between them explicit and
 * packable, so a request can move to another group at any task boundary (migrate.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "serve/serve.h"

const char *serve_task_name(serve_task_kind_t kind)
{
    static const char *const names[] = {"prepare", "step_chunk", "decode", "finalize"};
    return (unsigned)kind < TDL_ARRAY_SIZE(names) ? names[kind] : "unknown";
}

size_t serve_traj_values(const serve_traj_t *t)
{
    return (size_t)t->n * t->channels * t->res * t->res;
}

tdl_status_t serve_traj_init(serve_traj_t *t, const serve_traj_spec_t *spec, int channels)
{
    memset(t, 0, sizeof(*t));
    if (spec->n < 1 || spec->n > SERVE_MAX_IMAGES || spec->steps < 1 ||
        (spec->res != 32 && spec->res != 64 && spec->res != 128) || spec->cfg < 0 || channels < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "request %llu: %d images of %d pixels in %d steps (guidance %g): "
                               "images 1 to %d, resolution 32, 64 or 128, steps >= 1",
                               (unsigned long long)spec->id, spec->n, spec->res, spec->steps,
                               (double)spec->cfg, SERVE_MAX_IMAGES);
    t->spec = *spec;
    t->channels = channels;
    t->n = spec->n, t->res = spec->res;
    t->x = calloc(serve_traj_values(t), sizeof(float));
    if (!t->x)
        return tdl_error_raise(TDL_ERR_NOMEM, "request %llu: no memory for its latents",
                               (unsigned long long)spec->id);
    return TDL_OK;
}

void serve_traj_free(serve_traj_t *t)
{
    free(t->x);
    free(t->png);
    memset(t, 0, sizeof(*t));
}

/* PREPARE: the noise of image i is Philox stream (seed, i), as dit_sample draws it. */
tdl_status_t serve_task_prepare(serve_traj_t *t)
{
    size_t per = (size_t)t->channels * t->res * t->res;
    dit_sampler_noise(t->x, t->n, per, t->spec.seed, 0);
    t->step = 0;
    t->prepared = true;
    return TDL_OK;
}

/* The model's output for `rows` rows (x repeated for the unconditional half when both are
 * asked) on group g with sequence parallelism (g NULL: this rank alone). */
static tdl_status_t traj_forward(const dit_model_t *m, gfc_group_t *g, const serve_traj_t *t,
                                 const float *x, float time, int first_label, int label2,
                                 int halves, float *out)
{
    int n = t->n, rows = halves * n;
    size_t per = (size_t)t->channels * t->res * t->res;
    float *xin = malloc((size_t)rows * per * sizeof(float));
    float *tt = malloc((size_t)rows * sizeof(float));
    int *yy = malloc((size_t)rows * sizeof(int));
    tdl_status_t st = TDL_OK;
    if (!xin || !tt || !yy) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for a step",
                             (unsigned long long)t->spec.id);
    } else {
        for (int i = 0; i < rows; i++) {
            tt[i] = time;
            yy[i] = i < n ? first_label : label2;
        }
        for (int hh = 0; hh < halves; hh++)
            memcpy(xin + (size_t)hh * n * per, x, (size_t)n * per * sizeof(float));
        dit_sp_comm_t comm;
        if (g && g->size > 1)
            serve_sp_comm(&comm, g);
        st = dit_sp_forward(m, g && g->size > 1 ? &comm : NULL, xin, tt, yy, rows, t->res, t->res,
                            out);
    }
    free(xin), free(tt), free(yy);
    return st;
}

/* The guided velocity of all n images at time `time`. The conditional and unconditional rows run
 * in one batch on the whole group, or with CFG parallelism (an even group, guided) on its two
 * halves at once, member i of each half then trading its half's output with member i of the
 * other. */
static tdl_status_t traj_velocity(const dit_model_t *m, gfc_group_t *g, bool cfg_parallel,
                                  const serve_traj_t *t, const float *x, float time, float *v)
{
    int n = t->n, null = m->config.num_classes;
    bool guided = serve_guided(t->spec.label, t->spec.cfg);
    size_t per = (size_t)t->channels * t->res * t->res, nv = (size_t)n * per;
    int label = t->spec.label < 0 || t->spec.label > null ? null : t->spec.label;
    float *out = malloc(2 * nv * sizeof(float));
    if (!out)
        return tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for a step",
                               (unsigned long long)t->spec.id);
    tdl_status_t st;
    if (guided && cfg_parallel && g && g->size >= 2 && g->size % 2 == 0) {
        int half = g->size / 2, mine = g->me < half ? 0 : 1;
        gfc_group_t sub;
        st = gfc_group_init(&sub, g->rt, g->ranks + mine * half, half,
                            t->spec.id ^ (0x6366677000000000ull + (uint64_t)mine));
        /* half 0 computes the conditional rows into out[0, nv), half 1 the unconditional ones
         * into out[nv, 2 nv) */
        if (st == TDL_OK)
            st = traj_forward(m, &sub, t, x, time, mine ? null : label, null, 1, out + mine * nv);
        int partner = mine ? g->me - half : g->me + half;
        gfc_request_t *reqs[2];
        uint64_t tag = 0x63666770ull ^ (uint64_t)t->step;
        if (st == TDL_OK && (st = gfc_recv_start(g, partner, tag, out + (1 - mine) * nv,
                                                 nv * sizeof(float), &reqs[0])) == TDL_OK) {
            if ((st = gfc_send_start(g, partner, tag, out + mine * nv, nv * sizeof(float),
                                     &reqs[1])) == TDL_OK)
                st = gfc_request_wait_all(reqs, 2);
            else
                gfc_request_free(reqs[0]);
        }
    } else {
        st = traj_forward(m, g, t, x, time, label, null, guided ? 2 : 1, out);
    }
    if (st == TDL_OK)
        for (size_t i = 0; i < nv; i++)
            v[i] = guided ? out[nv + i] + t->spec.cfg * (out[i] - out[nv + i]) : out[i];
    free(out);
    return st;
}

tdl_status_t serve_task_step_chunk(serve_traj_t *t, const dit_model_t *m, gfc_group_t *g,
                                   bool cfg_parallel, int count)
{
    if (!t->prepared)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "request %llu: a step before PREPARE",
                               (unsigned long long)t->spec.id);
    size_t total = serve_traj_values(t);
    float *v = malloc(total * sizeof(float));
    if (!v)
        return tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for a step",
                               (unsigned long long)t->spec.id);
    float *xe = NULL, *v2 = NULL;
    bool heun = t->spec.sampler == DIT_SAMPLER_HEUN;
    if (heun && (!(xe = malloc(total * sizeof(float))) || !(v2 = malloc(total * sizeof(float))))) {
        free(v), free(xe);
        return tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for a step",
                               (unsigned long long)t->spec.id);
    }
    tdl_status_t st = TDL_OK;
    int end = TDL_MIN(t->spec.steps, t->step + count);
    for (int i = t->step; i < end && st == TDL_OK; i++) {
        /* from t_from to t_to, the time grid and the updates of dit_sample */
        float from = 1.0f - (float)i / (float)t->spec.steps;
        float to = 1.0f - (float)(i + 1) / (float)t->spec.steps, dt = to - from;
        if ((st = traj_velocity(m, g, cfg_parallel, t, t->x, from, v)) != TDL_OK)
            break;
        if (!heun) {
            for (size_t k = 0; k < total; k++)
                t->x[k] += dt * v[k];
        } else {
            for (size_t k = 0; k < total; k++)
                xe[k] = t->x[k] + dt * v[k];
            if ((st = traj_velocity(m, g, cfg_parallel, t, xe, to, v2)) != TDL_OK)
                break;
            for (size_t k = 0; k < total; k++)
                t->x[k] += 0.5f * dt * (v[k] + v2[k]);
        }
        t->step = i + 1;
    }
    free(v), free(xe), free(v2);
    return st;
}

tdl_status_t serve_task_decode(serve_traj_t *t, int ncols)
{
    if (t->step < t->spec.steps)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "request %llu: DECODE after %d of %d steps",
                               (unsigned long long)t->spec.id, t->step, t->spec.steps);
    free(t->png);
    t->png = NULL;
    if (ncols <= 0)
        ncols = serve_grid_cols(t->n);
    return serve_png_encode(t->x, t->n, t->channels, t->res, t->res, ncols,
                            t->n > 1 ? SERVE_GRID_PAD : 0, &t->png, &t->png_len);
}

/* ---- the state between tasks, as bytes ---------------------------------------------------- */

/* [u32 magic][u32 version][spec][u32 channels][i32 step][u8 prepared][3 pad][latents f32] */
#define TRAJ_MAGIC 0x6a617274u /* "traj" */

size_t serve_traj_packed_bytes(const serve_traj_t *t)
{
    return 16 + sizeof(serve_traj_spec_t) + 4 + serve_traj_values(t) * sizeof(float);
}

void serve_traj_pack(const serve_traj_t *t, unsigned char *buf)
{
    uint32_t head[4] = {TRAJ_MAGIC, 1, (uint32_t)t->channels, (uint32_t)t->step};
    memcpy(buf, head, 16);
    memcpy(buf + 16, &t->spec, sizeof(t->spec));
    uint32_t flags = t->prepared;
    memcpy(buf + 16 + sizeof(t->spec), &flags, 4);
    memcpy(buf + 20 + sizeof(t->spec), t->x, serve_traj_values(t) * sizeof(float));
}

tdl_status_t serve_traj_unpack(serve_traj_t *t, const unsigned char *buf, size_t bytes)
{
    uint32_t head[4];
    serve_traj_spec_t spec;
    if (bytes < 20 + sizeof(spec))
        return tdl_error_raise(TDL_ERR_CORRUPT, "trajectory state of %zu bytes: too short", bytes);
    memcpy(head, buf, 16);
    memcpy(&spec, buf + 16, sizeof(spec));
    if (head[0] != TRAJ_MAGIC || head[1] != 1)
        return tdl_error_raise(TDL_ERR_CORRUPT, "trajectory state: bad magic or version %u",
                               head[1]);
    tdl_status_t st = serve_traj_init(t, &spec, (int)head[2]);
    if (st != TDL_OK)
        return st;
    if (bytes != serve_traj_packed_bytes(t) || head[3] > (uint32_t)spec.steps) {
        serve_traj_free(t);
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "trajectory state of request %llu: %zu bytes or step %u do not fit",
                               (unsigned long long)spec.id, bytes, head[3]);
    }
    uint32_t flags;
    memcpy(&flags, buf + 16 + sizeof(spec), 4);
    t->step = (int)head[3];
    t->prepared = flags & 1;
    memcpy(t->x, buf + 20 + sizeof(spec), serve_traj_values(t) * sizeof(float));
    return TDL_OK;
}
