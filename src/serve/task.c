/* Trajectory tasks: a request's life as PREPARE, STEP_CHUNKs and DECODE, each runnable on any gfc
 * group (one rank or a sequence-parallel group), with the state between them explicit and
 * packable, so a request can move to another group at any task boundary (migrate.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/diffusion.h"
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

/* One block of rows of a forward: n images of x at time `time`, with label `label`, followed
 * (twin) by the same images with the null class. */
typedef struct traj_rows {
    const float *x;
    int n, label;
    float time;
    bool twin;
} traj_rows_t;

/* The model's output for the rows of k blocks, in their order, on group g with sequence
 * parallelism (g NULL: this rank alone). Every image is its own matrix products in the DiT, so
 * a block's output does not depend on the blocks beside it. */
static tdl_status_t rows_forward(const dit_model_t *m, gfc_group_t *g, const traj_rows_t *rs,
                                 int k, int channels, int res, uint64_t id, float *out)
{
    size_t per = (size_t)channels * res * res;
    int rows = 0;
    for (int j = 0; j < k; j++)
        rows += (rs[j].twin ? 2 : 1) * rs[j].n;
    float *xin = malloc((size_t)rows * per * sizeof(float));
    float *tt = malloc((size_t)rows * sizeof(float));
    int *yy = malloc((size_t)rows * sizeof(int));
    tdl_status_t st = TDL_OK;
    if (!xin || !tt || !yy) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for a step of %d rows",
                             (unsigned long long)id, rows);
    } else {
        int r = 0;
        for (int j = 0; j < k; j++)
            for (int half = 0; half < (rs[j].twin ? 2 : 1); half++, r += rs[j].n) {
                memcpy(xin + (size_t)r * per, rs[j].x, (size_t)rs[j].n * per * sizeof(float));
                for (int i = 0; i < rs[j].n; i++) {
                    tt[r + i] = rs[j].time;
                    yy[r + i] = half ? m->config.num_classes : rs[j].label;
                }
            }
        dit_sp_comm_t comm;
        if (g && g->size > 1)
            serve_sp_comm(&comm, g);
        st = dit_sp_forward(m, g && g->size > 1 ? &comm : NULL, xin, tt, yy, rows, res, res, out);
    }
    free(xin), free(tt), free(yy);
    return st;
}

static int traj_label(const dit_model_t *m, const serve_traj_t *t)
{
    int null = m->config.num_classes;
    return t->spec.label < 0 || t->spec.label > null ? null : t->spec.label;
}

static bool traj_guided(const serve_traj_t *t)
{
    return serve_guided(t->spec.label, t->spec.cfg);
}

static bool is_diffusion(int sampler)
{
    return sampler == DIT_SAMPLER_DDPM || sampler == DIT_SAMPLER_DDIM;
}

/* The raw outputs (co channels an image) of one trajectory's n images at time `time` with CFG
 * parallelism (an even group, guided): half 0 computes the conditional rows into out[0, n po),
 * half 1 the unconditional ones after them, and member i of each half trades its half's output
 * with member i of the other. */
static tdl_status_t cfg_parallel_outputs(const dit_model_t *m, gfc_group_t *g,
                                         const serve_traj_t *t, const float *x, float time,
                                         float *out)
{
    size_t nv = (size_t)t->n * dit_config_out_channels(&m->config) * t->res * t->res;
    int half = g->size / 2, mine = g->me < half ? 0 : 1;
    gfc_group_t sub;
    tdl_status_t st = gfc_group_init(&sub, g->rt, g->ranks + mine * half, half,
                                     t->spec.id ^ (0x6366677000000000ull + (uint64_t)mine));
    traj_rows_t rs = {.x = x,
                      .n = t->n,
                      .label = mine ? m->config.num_classes : traj_label(m, t),
                      .time = time};
    if (st == TDL_OK)
        st = rows_forward(m, &sub, &rs, 1, t->channels, t->res, t->spec.id, out + mine * nv);
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
    return st;
}

/* The raw outputs of the k active trajectories ts[j] at xs[j] and times[j]: for each in turn, its
 * n images' conditional rows and, guided, their unconditional twins (co channels an image). One
 * forward on the whole group, or for one guided trajectory with cfg_parallel on an even group,
 * its two halves at once. */
static tdl_status_t batch_outputs(const dit_model_t *m, gfc_group_t *g, bool cfg_parallel,
                                  serve_traj_t *const *ts, int k, float *const *xs,
                                  const float *times, traj_rows_t *rs, float *out)
{
    if (k == 1 && cfg_parallel && g && g->size >= 2 && g->size % 2 == 0 && traj_guided(ts[0]))
        return cfg_parallel_outputs(m, g, ts[0], xs[0], times[0], out);
    for (int j = 0; j < k; j++)
        rs[j] = (traj_rows_t){.x = xs[j],
                              .n = ts[j]->n,
                              .label = traj_label(m, ts[j]),
                              .time = times[j],
                              .twin = traj_guided(ts[j])};
    return rows_forward(m, g, rs, k, ts[0]->channels, ts[0]->res, ts[0]->spec.id, out);
}

/* From one trajectory's block of raw outputs: rectified flow's velocity v[n, C, H, W] (the first
 * C of the co channels, v_uncond + cfg (v_cond - v_uncond) when guided), or the diffusion's model
 * output mo[n, co, H, W] as the reference's forward_with_cfg makes it (the conditional rows, their
 * first min(3, co) channels uncond + cfg (cond - uncond) when guided). */
static void combine(const dit_model_t *m, const serve_traj_t *t, const float *out, float *dst)
{
    int co = dit_config_out_channels(&m->config), c = t->channels;
    size_t hw = (size_t)t->res * t->res, po = (size_t)co * hw;
    bool guided = traj_guided(t), diffusion = is_diffusion(t->spec.sampler);
    size_t keep = diffusion ? po : (size_t)c * hw;        /* floats of an image kept */
    size_t mix = diffusion ? (size_t)TDL_MIN(3, co) * hw : keep; /* of them guided */
    float cfg = t->spec.cfg;
    for (int i = 0; i < t->n; i++) {
        const float *cd = out + (size_t)i * po, *un = cd + (size_t)t->n * po;
        float *d = dst + (size_t)i * keep;
        for (size_t e = 0; e < keep; e++)
            d[e] = guided && e < mix ? un[e] + cfg * (cd[e] - un[e]) : cd[e];
    }
}

tdl_status_t serve_task_step_chunk(serve_traj_t *t, const dit_model_t *m, gfc_group_t *g,
                                   bool cfg_parallel, int count)
{
    return serve_task_step_batch(&t, 1, m, g, cfg_parallel, &count);
}

/* Per trajectory of a batched step: its buffers and, for the Gaussian diffusion, its process. */
typedef struct member {
    float *v, *xe, *v2; /* rf: the velocity, Heun's Euler end and its slope; diffusion: v the
                         * model output (co channels), xe the DDPM noise */
    dit_diffusion_t *d;
    int end; /* its chunk's last step + 1 */
} member_t;

tdl_status_t serve_task_step_batch(serve_traj_t *const *ts, int k, const dit_model_t *m,
                                   gfc_group_t *g, bool cfg_parallel, const int *counts)
{
    if (k < 1 || (k > 1 && cfg_parallel))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "a batched step of %d trajectories%s: 1 or more, and CFG "
                               "parallelism only for one",
                               k, cfg_parallel ? " with CFG parallelism" : "");
    int co = dit_config_out_channels(&m->config), sampler = ts[0]->spec.sampler;
    size_t rows_total = 0;
    int rounds = 0;
    for (int j = 0; j < k; j++) {
        const serve_traj_t *t = ts[j];
        if (!t->prepared)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "request %llu: a step before PREPARE",
                                   (unsigned long long)t->spec.id);
        if (t->res != ts[0]->res || t->channels != ts[0]->channels || t->spec.sampler != sampler)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "request %llu: batched with request %llu of another "
                                   "resolution or sampler",
                                   (unsigned long long)t->spec.id,
                                   (unsigned long long)ts[0]->spec.id);
        tdl_status_t cs = dit_sampler_check((dit_sampler_kind_t)t->spec.sampler,
                                            m->config.objective);
        if (cs != TDL_OK)
            return tdl_error_raise(cs, "request %llu: %s", (unsigned long long)t->spec.id,
                                   tdl_error_get());
        rows_total += 2 * (size_t)t->n * co * t->res * t->res;
        rounds = TDL_MAX(rounds, TDL_MIN(t->spec.steps, t->step + counts[j]) - t->step);
    }
    bool heun = sampler == DIT_SAMPLER_HEUN, diffusion = is_diffusion(sampler);
    member_t *mb = calloc((size_t)k, sizeof(*mb));
    float **xs = calloc((size_t)k, sizeof(float *)), *times = calloc((size_t)k, sizeof(float));
    float *tos = calloc((size_t)k, sizeof(float)), *out = malloc(rows_total * sizeof(float));
    serve_traj_t **act = calloc((size_t)k, sizeof(*act));
    int *idx = calloc((size_t)k, sizeof(int));
    traj_rows_t *rs = calloc((size_t)k, sizeof(*rs));
    tdl_status_t st = mb && xs && times && tos && out && act && idx && rs
                          ? TDL_OK
                          : tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for a step",
                                            (unsigned long long)ts[0]->spec.id);
    for (int j = 0; st == TDL_OK && j < k; j++) {
        size_t nv = serve_traj_values(ts[j]), nvo = nv / (size_t)ts[j]->channels * (size_t)co;
        mb[j].end = TDL_MIN(ts[j]->spec.steps, ts[j]->step + counts[j]);
        bool fine = (mb[j].v = malloc((diffusion ? nvo : nv) * sizeof(float))) != NULL;
        if (fine && (heun || sampler == DIT_SAMPLER_DDPM))
            fine = (mb[j].xe = malloc(nv * sizeof(float))) != NULL;
        if (fine && heun)
            fine = (mb[j].v2 = malloc(nv * sizeof(float))) != NULL;
        if (!fine)
            st = tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for a step",
                                 (unsigned long long)ts[j]->spec.id);
        if (st == TDL_OK && diffusion)
            st = dit_diffusion_create(DIT_DIFFUSION_STEPS, ts[j]->spec.steps,
                                      m->config.learn_sigma, &mb[j].d);
    }
    for (int round = 0; st == TDL_OK && round < rounds; round++) {
        int na = 0; /* the trajectories with a step left in their chunk */
        for (int j = 0; j < k; j++) {
            serve_traj_t *t = ts[j];
            if (t->step >= mb[j].end)
                continue;
            act[na] = t, idx[na] = j, xs[na] = t->x;
            if (diffusion) { /* step i is the respaced process's index steps - 1 - i */
                times[na] = dit_diffusion_model_time(mb[j].d, t->spec.steps - 1 - t->step);
            } else { /* from t_from to t_to, the time grid and the updates of dit_sample */
                times[na] = 1.0f - (float)t->step / (float)t->spec.steps;
                tos[na] = 1.0f - (float)(t->step + 1) / (float)t->spec.steps;
            }
            na++;
        }
        if ((st = batch_outputs(m, g, cfg_parallel, act, na, xs, times, rs, out)) != TDL_OK)
            break;
        for (int a = 0, at = 0; a < na; a++) {
            combine(m, act[a], out + (size_t)at * co * act[a]->res * act[a]->res,
                    mb[idx[a]].v);
            at += (traj_guided(act[a]) ? 2 : 1) * act[a]->n;
        }
        for (int a = 0; a < na; a++) {
            serve_traj_t *t = act[a];
            member_t *b = &mb[idx[a]];
            size_t nv = serve_traj_values(t), hw = (size_t)t->res * t->res;
            if (diffusion) {
                int kk = t->spec.steps - 1 - t->step;
                if (sampler == DIT_SAMPLER_DDPM)
                    dit_diffusion_step_noise(b->xe, t->n, nv / (size_t)t->n, t->spec.seed, 0, kk);
                dit_diffusion_step(b->d, (dit_sampler_kind_t)sampler, kk, t->x, b->v,
                                   sampler == DIT_SAMPLER_DDPM ? b->xe : NULL, t->n, t->channels,
                                   hw, t->x);
            } else if (!heun) {
                float dt = tos[a] - times[a];
                for (size_t e = 0; e < nv; e++)
                    t->x[e] += dt * b->v[e];
            } else {
                float dt = tos[a] - times[a];
                for (size_t e = 0; e < nv; e++)
                    b->xe[e] = t->x[e] + dt * b->v[e];
                xs[a] = b->xe;
            }
        }
        if (heun) {
            if ((st = batch_outputs(m, g, cfg_parallel, act, na, xs, tos, rs, out)) != TDL_OK)
                break;
            for (int a = 0, at = 0; a < na; a++) {
                serve_traj_t *t = act[a];
                member_t *b = &mb[idx[a]];
                combine(m, t, out + (size_t)at * co * t->res * t->res, b->v2);
                at += (traj_guided(t) ? 2 : 1) * t->n;
                float dt = tos[a] - times[a];
                for (size_t e = 0; e < serve_traj_values(t); e++)
                    t->x[e] += 0.5f * dt * (b->v[e] + b->v2[e]);
            }
        }
        for (int a = 0; a < na; a++)
            act[a]->step++;
    }
    for (int j = 0; mb && j < k; j++) {
        free(mb[j].v), free(mb[j].xe), free(mb[j].v2);
        dit_diffusion_free(mb[j].d);
    }
    free(mb), free(xs), free(times), free(tos), free(out), free(act), free(idx), free(rs);
    return st;
}

tdl_status_t serve_task_decode(serve_traj_t *t, const dit_vae_t *vae, int ncols)
{
    if (t->step < t->spec.steps)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "request %llu: DECODE after %d of %d steps",
                               (unsigned long long)t->spec.id, t->step, t->spec.steps);
    free(t->png);
    t->png = NULL;
    if (ncols <= 0)
        ncols = serve_grid_cols(t->n);
    int pad = t->n > 1 ? SERVE_GRID_PAD : 0;
    if (!vae)
        return serve_png_encode(t->x, t->n, t->channels, t->res, t->res, ncols, pad, &t->png,
                                &t->png_len);
    /* latents: the VAE's decoder makes the images */
    if (vae->config.latent_channels != t->channels)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "request %llu: latents of %d channels, a VAE of %d",
                               (unsigned long long)t->spec.id, t->channels,
                               vae->config.latent_channels);
    int side = t->res * dit_vae_upscale(&vae->config), oc = vae->config.out_channels;
    float *rgb = malloc((size_t)t->n * oc * side * side * sizeof(float));
    if (!rgb)
        return tdl_error_raise(TDL_ERR_NOMEM, "request %llu: out of memory for its images",
                               (unsigned long long)t->spec.id);
    tdl_status_t st = dit_vae_decode(vae, t->x, t->n, t->res, t->res, rgb);
    if (st == TDL_OK)
        st = serve_png_encode(rgb, t->n, oc, side, side, ncols, pad, &t->png, &t->png_len);
    free(rgb);
    return st;
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
