/* Trace generation, writing and reading. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/workload.h"

static const int class_resolution[COORD_POLICY_NCLASSES] = {32, 64, 128};

void coord_workload_config_default(coord_workload_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->ranks = 8;
    c->load = 1.0;
    c->requests = 1000;
    c->seed = 1;
    const double mix[] = {0.5, 0.3, 0.2}, alpha[] = {1.5, 2.0, 6.0};
    const int steps[] = {20, 30, 50}, prio[] = {2, 1, 0};
    for (int k = 0; k < COORD_POLICY_NCLASSES; k++) {
        c->mix[k] = mix[k];
        c->alpha[k] = alpha[k];
        c->steps[k] = steps[k];
        c->priority[k] = prio[k];
    }
    c->labels = 10;
    c->diurnal = (coord_workload_diurnal_t){.day_s = 86400,
                                            .peak_to_trough = 4,
                                            .peak_hour = 14,
                                            .burst_height = 3,
                                            .burst_minutes = 10};
}

static double mix_total(const coord_workload_config_t *c)
{
    double t = 0;
    for (int k = 0; k < COORD_POLICY_NCLASSES; k++)
        t += c->mix[k];
    return t;
}

double coord_workload_capacity_rps(const coord_workload_config_t *c, const coord_cost_model_t *cost)
{
    double mean = 0, tot = mix_total(c);
    for (int k = 0; k < COORD_POLICY_NCLASSES; k++)
        mean +=
            c->mix[k] / tot *
            coord_policy_single_rank_s(cost, class_resolution[k], 1, 2.0 * c->steps[k] /* Heun */);
    return mean > 0 ? c->ranks / mean : 0;
}

#define BAD(...) tdl_error_raise(TDL_ERR_INVALID_ARG, "workload: " __VA_ARGS__)

static tdl_status_t diurnal_check(const coord_workload_config_t *c)
{
    const coord_workload_diurnal_t *d = &c->diurnal;
    if (c->nphases)
        return BAD("--diurnal and --phases: choose one");
    if (!(d->day_s >= 1 && d->day_s <= 1e9))
        return BAD("--day-seconds %g: want 1 .. 1e9", d->day_s);
    if (!(d->peak_to_trough >= 1 && d->peak_to_trough <= 1e6))
        return BAD("--peak-to-trough %g: want a ratio in 1 .. 1e6", d->peak_to_trough);
    if (!(d->peak_hour >= 0 && d->peak_hour <= 24))
        return BAD("--peak-hour %g: want an hour in 0 .. 24", d->peak_hour);
    if (d->nbursts < 0 || d->nbursts > COORD_WORKLOAD_MAX_BURSTS)
        return BAD("--bursts %d: want 0 .. %d", d->nbursts, COORD_WORKLOAD_MAX_BURSTS);
    if (!(d->burst_height >= 1 && d->burst_height <= 100))
        return BAD("--burst-height %g: want a factor in 1 .. 100", d->burst_height);
    if (!(d->burst_minutes > 0 && d->burst_minutes <= 1440))
        return BAD("--burst-minutes %g: want more than 0, at most 1440 (a day)", d->burst_minutes);
    double last = 24 - d->burst_minutes / 60;
    for (int i = 0; d->burst_hours_given && i < d->nbursts; i++)
        if (!(d->burst_hour[i] >= 0 && d->burst_hour[i] <= last))
            return BAD("--burst-hours: %g: want an hour in 0 .. %g (a burst of --burst-minutes %g "
                       "ends by midnight)",
                       d->burst_hour[i], last, d->burst_minutes);
    return TDL_OK;
}

tdl_status_t coord_workload_config_check(const coord_workload_config_t *c)
{
    if (c->ranks < 1)
        return BAD("--ranks %d: want at least 1", c->ranks);
    if (c->requests < 0 || c->requests > COORD_WORKLOAD_MAX_REQUESTS)
        return BAD("--requests %d: want 0 .. %d", c->requests, COORD_WORKLOAD_MAX_REQUESTS);
    if (c->requests == 0 && c->nphases == 0 && !c->diurnal.on)
        return BAD("--requests 0 needs --phases or --diurnal");
    if (!(mix_total(c) > 0))
        return BAD("--mix: at least one share must be positive");
    for (int k = 0; k < COORD_POLICY_NCLASSES; k++) {
        const char *name = coord_policy_class_name((coord_policy_class_t)k);
        if (!(c->mix[k] >= 0))
            return BAD("--mix: class %s: a share must be >= 0", name);
        if (!(c->alpha[k] >= 0))
            return BAD("--alpha: class %s: must be >= 0", name);
        if (c->steps[k] < 1 || c->steps[k] > 1000)
            return BAD("--class-steps: class %s: %d: want 1 .. 1000", name, c->steps[k]);
    }
    if (c->nphases < 0 || c->nphases > COORD_WORKLOAD_MAX_PHASES)
        return BAD("--phases: at most %d phases", COORD_WORKLOAD_MAX_PHASES);
    if (c->nphases == 0 && !(c->load > 0 && isfinite(c->load)))
        return BAD("--load %g: want more than 0", c->load);
    double phase_loads = 0;
    for (int i = 0; i < c->nphases; i++) {
        if (!(c->phase_load[i] >= 0 && isfinite(c->phase_load[i])) ||
            !(c->phase_s[i] > 0 && isfinite(c->phase_s[i])))
            return BAD("--phases: phase %d (%g:%g): want LOAD >= 0, SECONDS > 0", i + 1,
                       c->phase_load[i], c->phase_s[i]);
        phase_loads += c->phase_load[i];
    }
    /* the phases repeat until the count is reached, which would never happen */
    if (c->nphases && c->requests && phase_loads == 0)
        return BAD("--phases: every phase has load 0, so --requests %d cannot be reached",
                   c->requests);
    return c->diurnal.on ? diurnal_check(c) : TDL_OK;
}

/* The cosine's integral over [t0, t1] seconds after midnight, in units of the base rate. */
static double curve_integral(const coord_workload_curve_t *k, double t0, double t1)
{
    double w = 2 * M_PI / k->day_s, ph = 2 * M_PI * k->peak_hour / 24;
    return (t1 - t0) + k->amplitude / w * (sin(w * t1 - ph) - sin(w * t0 - ph));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

tdl_status_t coord_workload_curve_init(const coord_workload_config_t *c,
                                       const coord_cost_model_t *cost, coord_workload_curve_t *out)
{
    tdl_status_t st = coord_workload_config_check(c);
    if (st != TDL_OK)
        return st;
    if (!c->diurnal.on)
        return BAD("a curve needs --diurnal");
    const coord_workload_diurnal_t *d = &c->diurnal;
    double cap = coord_workload_capacity_rps(c, cost);
    if (!(cap > 0) || !isfinite(cap))
        return BAD("the cost model gives no single-rank time");
    coord_workload_curve_t k = {.day_s = d->day_s,
                                .peak_hour = d->peak_hour,
                                .burst_height = d->burst_height,
                                .amplitude = (d->peak_to_trough - 1) / (d->peak_to_trough + 1),
                                .nbursts = d->nbursts};
    /* its own stream, so that the bursts' hours do not move the arrivals */
    tdl_rng_t rng;
    tdl_rng_init(&rng, c->seed, 0x42525354 /* "BRST" */);
    double last = 24 - d->burst_minutes / 60, starts[COORD_WORKLOAD_MAX_BURSTS];
    for (int i = 0; i < k.nbursts; i++) {
        k.burst_hour[i] =
            d->burst_hours_given ? d->burst_hour[i] : tdl_rng_uniform_f64(&rng) * last;
        starts[i] = k.burst_hour[i] / 24 * k.day_s;
    }
    qsort(starts, (size_t)k.nbursts, sizeof(*starts), cmp_double);
    double len = d->burst_minutes / 1440 * k.day_s, in_bursts = 0;
    for (int i = 0; i < k.nbursts; i++) {
        double e = fmin(starts[i] + len, k.day_s);
        if (k.nwindows && starts[i] <= k.window_end_s[k.nwindows - 1]) {
            k.window_end_s[k.nwindows - 1] = fmax(k.window_end_s[k.nwindows - 1], e);
        } else {
            k.window_start_s[k.nwindows] = starts[i];
            k.window_end_s[k.nwindows++] = e;
        }
    }
    for (int i = 0; i < k.nwindows; i++)
        in_bursts += curve_integral(&k, k.window_start_s[i], k.window_end_s[i]);
    /* the day's mean, bursts included, is load x capacity: the cosine alone integrates to
     * day_s, and each burst adds (height - 1) x its own integral */
    k.base_rps = c->load * cap * k.day_s / (k.day_s + (k.burst_height - 1) * in_bursts);
    k.peak_rps = k.base_rps * (1 + k.amplitude) * k.burst_height;
    *out = k;
    return TDL_OK;
}

double coord_workload_curve_rate(const coord_workload_curve_t *k, double t_s)
{
    double t = fmod(t_s, k->day_s), h = t / k->day_s * 24;
    double r = k->base_rps * (1 + k->amplitude * cos(2 * M_PI * (h - k->peak_hour) / 24));
    for (int i = 0; i < k->nwindows && k->window_start_s[i] <= t; i++)
        if (t < k->window_end_s[i])
            return r * k->burst_height;
    return r;
}

/* The arrival process: next() gives the time of the next arrival, or false when the trace
 * ends there. */
typedef struct arrivals {
    const coord_workload_config_t *c;
    double cap, t, rate, phase_end;
    int phase;
    coord_workload_curve_t curve;
} arrivals_t;

static bool arrivals_next(arrivals_t *a, tdl_rng_t *rng, double *t_out)
{
    const coord_workload_config_t *c = a->c;
    if (c->diurnal.on) { /* Lewis-Shedler: candidates at the peak rate, kept at rate(t) / peak */
        for (;;) {
            a->t += -log(1.0 - tdl_rng_uniform_f64(rng)) / a->curve.peak_rps;
            if (!c->requests && a->t >= a->curve.day_s)
                return false;
            if (tdl_rng_uniform_f64(rng) * a->curve.peak_rps <
                coord_workload_curve_rate(&a->curve, a->t)) {
                *t_out = a->t;
                return true;
            }
        }
    }
    for (;;) {
        double gap = a->rate > 0 ? -log(1.0 - tdl_rng_uniform_f64(rng)) / a->rate : INFINITY;
        if (a->t + gap > a->phase_end) { /* memoryless: start over at the phase boundary */
            a->t = a->phase_end;
            if (++a->phase >= c->nphases) {
                if (!c->requests)
                    return false;
                a->phase = 0;
            }
            a->rate = c->phase_load[a->phase] * a->cap;
            a->phase_end = a->t + c->phase_s[a->phase];
            continue;
        }
        a->t += gap;
        *t_out = a->t;
        return true;
    }
}

/* One request arriving at t: its class, label and seed from the stream. */
static void request_draw(const coord_workload_config_t *c, const coord_cost_model_t *cost,
                         tdl_rng_t *rng, double t, coord_workload_request_t *q)
{
    double u = tdl_rng_uniform_f64(rng) * mix_total(c), acc = 0;
    int k = COORD_POLICY_NCLASSES - 1;
    for (int j = 0; j < COORD_POLICY_NCLASSES; j++) {
        acc += c->mix[j];
        if (u < acc && c->mix[j] > 0) {
            k = j;
            break;
        }
    }
    *q = (coord_workload_request_t){.euler = 0}; /* Heun, as tidal serve samples by default */
    q->at_ms = (int64_t)llround(t * 1000);
    q->label = c->labels > 0 ? (int)tdl_rng_below(rng, (uint64_t)c->labels) : -1;
    q->n = 1;
    q->resolution = class_resolution[k];
    q->steps = c->steps[k];
    q->cfg = 1.0;
    q->seed = tdl_rng_u64(rng) >> 11; /* within 2^53: exact as a JSON number */
    q->priority = c->priority[k];
    double t1 = coord_policy_single_rank_s(cost, q->resolution, q->n,
                                           (double)q->steps * coord_workload_step_evals(q));
    q->deadline_ms = c->alpha[k] > 0 ? (int64_t)ceil(c->alpha[k] * t1 * 1000) : 0;
    if (q->deadline_ms > 86400000)
        q->deadline_ms = 86400000;
}

tdl_status_t coord_workload_generate(const coord_workload_config_t *c,
                                     const coord_cost_model_t *cost,
                                     coord_workload_request_t **reqs_out, int *n_out)
{
    tdl_status_t st = coord_workload_config_check(c);
    if (st != TDL_OK)
        return st;
    arrivals_t a = {.c = c, .cap = coord_workload_capacity_rps(c, cost), .phase_end = INFINITY};
    if (!(a.cap > 0) || !isfinite(a.cap))
        return BAD("the cost model gives no single-rank time");
    a.rate = c->load * a.cap;
    if (c->nphases) {
        a.rate = c->phase_load[0] * a.cap;
        a.phase_end = c->phase_s[0];
        double phases_n = 0;
        for (int i = 0; i < c->nphases; i++)
            phases_n += c->phase_load[i] * a.cap * c->phase_s[i];
        if (!c->requests && phases_n > COORD_WORKLOAD_MAX_REQUESTS)
            return BAD("--phases: about %.3g requests at %.4g requests/s of capacity, more than "
                       "%d: shorten them or give --requests",
                       phases_n, a.cap, COORD_WORKLOAD_MAX_REQUESTS);
    }
    if (c->diurnal.on) {
        if ((st = coord_workload_curve_init(c, cost, &a.curve)) != TDL_OK)
            return st;
        double day_n = c->load * a.cap * c->diurnal.day_s;
        if (!c->requests && day_n > COORD_WORKLOAD_MAX_REQUESTS)
            return BAD("--diurnal: --load %g at %.4g requests/s of capacity over --day-seconds %g "
                       "is about %.3g requests, more than %d: lower one or give --requests",
                       c->load, a.cap, c->diurnal.day_s, day_n, COORD_WORKLOAD_MAX_REQUESTS);
    }
    int cap_n = c->requests ? c->requests : 1024, n = 0;
    coord_workload_request_t *r = malloc((size_t)cap_n * sizeof(*r));
    if (!r)
        return tdl_error_raise(TDL_ERR_NOMEM, "workload: out of memory");
    tdl_rng_t rng;
    tdl_rng_init(&rng, c->seed, 0x574b4c44 /* "WKLD" */);
    double t;
    while ((!c->requests || n < c->requests) && arrivals_next(&a, &rng, &t)) {
        if (n == cap_n) {
            cap_n *= 2;
            coord_workload_request_t *p = realloc(r, (size_t)cap_n * sizeof(*r));
            if (!p) {
                free(r);
                return tdl_error_raise(TDL_ERR_NOMEM, "workload: out of memory");
            }
            r = p;
        }
        request_draw(c, cost, &rng, t, &r[n++]);
    }
    *reqs_out = r;
    *n_out = n;
    return TDL_OK;
}

tdl_status_t coord_workload_write(const char *path, const coord_workload_request_t *r, int n)
{
    bool std = !strcmp(path, "-");
    FILE *f = std ? stdout : fopen(path, "w");
    if (!f)
        return tdl_error_raise(TDL_ERR_IO, "workload: cannot write %s: %s", path, strerror(errno));
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"at_ms\": %lld, \"label\": %d, \"n\": %d, \"resolution\": %d, \"steps\": %d, "
                "\"cfg\": %g, \"seed\": %llu, \"priority\": %d, \"deadline_ms\": %lld%s}\n",
                (long long)r[i].at_ms, r[i].label, r[i].n, r[i].resolution, r[i].steps, r[i].cfg,
                (unsigned long long)r[i].seed, r[i].priority, (long long)r[i].deadline_ms,
                r[i].diffusion == 1   ? ", \"sampler\": \"ddpm\""
                : r[i].diffusion == 2 ? ", \"sampler\": \"ddim\""
                : r[i].euler          ? ", \"sampler\": \"euler\""
                                      : "");
    int bad = ferror(f);
    if (std)
        bad |= fflush(f);
    else
        bad |= fclose(f);
    if (bad)
        return tdl_error_raise(TDL_ERR_IO, "workload: cannot write %s", path);
    return TDL_OK;
}

/* ---- reading ---------------------------------------------------------------------------- */

static const char *const known_fields[] = {"at_ms",      "id",          "label",  "n",
                                           "resolution", "steps",       "cfg",    "seed",
                                           "priority",   "deadline_ms", "sampler"};

static tdl_status_t get_int(json_t *o, const char *path, int line, const char *key, int64_t lo,
                            int64_t hi, int64_t def, bool required, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s:%d: field '%s': required", path, line,
                                   key);
        *out = def;
        return TDL_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "%s:%d: field '%s': must be an integer in %lld .. %lld", path, line,
                               key, (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return TDL_OK;
}

static int cmp_at(const void *a, const void *b)
{
    const coord_workload_request_t *x = a, *y = b;
    if (x->at_ms != y->at_ms)
        return x->at_ms < y->at_ms ? -1 : 1;
    /* file order: seed holds it during the sort (restored after) */
    return x->seed < y->seed ? -1 : x->seed > y->seed;
}

tdl_status_t coord_workload_read(const char *path, coord_workload_request_t **reqs_out, int *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO, "%s: %s", path,
                               strerror(errno));
    tdl_status_t st = TDL_OK;
    coord_workload_request_t *r = NULL;
    uint64_t *seeds = NULL;
    int n = 0, cap = 0, line = 0;
    char *buf = NULL;
    size_t bufcap = 0;
    ssize_t len;
    while ((len = getline(&buf, &bufcap, f)) >= 0) {
        line++;
        size_t i = 0;
        while (i < (size_t)len &&
               (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
            i++;
        if (i == (size_t)len)
            continue;
        json_error_t jerr;
        json_t *o = json_loadb(buf, (size_t)len, JSON_REJECT_DUPLICATES, &jerr);
        if (!o || !json_is_object(o)) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG, "%s:%d: field 'body': %s", path, line,
                                 o ? "not a JSON object" : jerr.text);
            json_decref(o);
            goto out;
        }
        const char *key;
        json_t *v;
        json_object_foreach(o, key, v)
        {
            bool known = false;
            for (size_t k = 0; k < TDL_ARRAY_SIZE(known_fields); k++)
                known |= !strcmp(key, known_fields[k]);
            if (!known) {
                st = tdl_error_raise(TDL_ERR_INVALID_ARG, "%s:%d: field '%s': unknown field", path,
                                     line, key);
                json_decref(o);
                goto out;
            }
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            coord_workload_request_t *p = realloc(r, (size_t)cap * sizeof(*r));
            uint64_t *s = realloc(seeds, (size_t)cap * sizeof(*s));
            if (p)
                r = p;
            if (s)
                seeds = s;
            if (!p || !s) {
                st = tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory", path);
                json_decref(o);
                goto out;
            }
        }
        int64_t at, label, nimg, res, steps, seed, prio, dl;
        double cfg = 4.0;
        if ((st = get_int(o, path, line, "at_ms", 0, INT64_C(1) << 53, 0, true, &at)) ||
            (st = get_int(o, path, line, "label", -1, 1 << 30, -1, false, &label)) ||
            (st = get_int(o, path, line, "n", 1, 16, 1, false, &nimg)) ||
            (st = get_int(o, path, line, "resolution", 32, 128, 32, false, &res)) ||
            (st = get_int(o, path, line, "steps", 1, 1000, 50, false, &steps)) ||
            (st = get_int(o, path, line, "seed", 0, INT64_C(1) << 53, 0, false, &seed)) ||
            (st = get_int(o, path, line, "priority", -1000000, 1000000, 0, false, &prio)) ||
            (st = get_int(o, path, line, "deadline_ms", 0, 86400000, 0, false, &dl))) {
            json_decref(o);
            goto out;
        }
        if (res != 32 && res != 64 && res != 128) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "%s:%d: field 'resolution': must be 32, 64 "
                                 "or 128",
                                 path, line);
            json_decref(o);
            goto out;
        }
        if ((v = json_object_get(o, "cfg")) && !json_is_null(v)) {
            cfg = json_is_number(v) ? json_number_value(v) : -1;
            if (!(cfg >= 0 && cfg <= 20)) {
                st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                     "%s:%d: field 'cfg': must be a number in 0 .. 20", path, line);
                json_decref(o);
                goto out;
            }
        }
        int euler = 0, diffusion = 0;
        if ((v = json_object_get(o, "sampler")) && !json_is_null(v)) {
            const char *sv = json_is_string(v) ? json_string_value(v) : "";
            if (strcmp(sv, "euler") && strcmp(sv, "heun") && strcmp(sv, "ddpm") &&
                strcmp(sv, "ddim")) {
                st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                     "%s:%d: field 'sampler': must be "
                                     "\"euler\", \"heun\", \"ddpm\" or \"ddim\"",
                                     path, line);
                json_decref(o);
                goto out;
            }
            euler = strcmp(sv, "heun") != 0; /* one model evaluation a step */
            diffusion = !strcmp(sv, "ddpm") ? 1 : !strcmp(sv, "ddim") ? 2 : 0;
        }
        json_decref(o);
        r[n] = (coord_workload_request_t){.at_ms = at,
                                          .label = (int)label,
                                          .n = (int)nimg,
                                          .resolution = (int)res,
                                          .steps = (int)steps,
                                          .cfg = cfg,
                                          .seed = (uint64_t)n,
                                          .priority = (int)prio,
                                          .euler = euler,
                                          .diffusion = diffusion,
                                          .deadline_ms = dl};
        seeds[n] = (uint64_t)seed;
        n++;
    }
    if (ferror(f)) {
        st = tdl_error_raise(TDL_ERR_IO, "%s: read error", path);
        goto out;
    }
    if (n)
        qsort(r, (size_t)n, sizeof(*r), cmp_at);
    for (int i = 0; i < n; i++)
        r[i].seed = seeds[r[i].seed];
out:
    free(buf);
    free(seeds);
    fclose(f);
    if (st != TDL_OK) {
        free(r);
        return st;
    }
    *reqs_out = r;
    *n_out = n;
    return TDL_OK;
}

void coord_workload_params(const coord_workload_request_t *q, serve_request_params_t *out)
{
    *out = (serve_request_params_t){.label = q->label,
                                    .n = q->n,
                                    .resolution = q->resolution,
                                    .steps = q->steps,
                                    .cfg = q->cfg,
                                    .has_seed = true,
                                    .seed = q->seed,
                                    .priority = q->priority,
                                    .deadline_ms = q->deadline_ms,
                                    .sampler = q->diffusion == 1   ? DIT_SAMPLER_DDPM
                                               : q->diffusion == 2 ? DIT_SAMPLER_DDIM
                                               : q->euler          ? DIT_SAMPLER_EULER
                                                                   : DIT_SAMPLER_HEUN};
}
