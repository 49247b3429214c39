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

tdl_status_t coord_workload_generate(const coord_workload_config_t *c,
                                     const coord_cost_model_t *cost,
                                     coord_workload_request_t **reqs_out, int *n_out)
{
    if (c->ranks < 1 || c->requests < 0 || (c->requests == 0 && c->nphases == 0) ||
        mix_total(c) <= 0 || (c->nphases == 0 && !(c->load > 0)))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "workload: need ranks >= 1, a load > 0, a mix with a positive "
                               "share and a request count or phases");
    for (int k = 0; k < COORD_POLICY_NCLASSES; k++)
        if (c->mix[k] < 0 || c->alpha[k] < 0 || c->steps[k] < 1 || c->steps[k] > 1000)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "workload: class %s: share and alpha must be >= 0, steps "
                                   "1..1000",
                                   coord_policy_class_name((coord_policy_class_t)k));
    double cap = coord_workload_capacity_rps(c, cost);
    if (!(cap > 0) || !isfinite(cap))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "workload: the cost model gives no single-rank time");
    double phase_end = INFINITY;
    int phase = 0;
    double rate = c->load * cap;
    if (c->nphases) {
        rate = c->phase_load[0] * cap;
        phase_end = c->phase_s[0];
    }
    int cap_n = c->requests ? c->requests : 1024, n = 0;
    coord_workload_request_t *r = malloc((size_t)cap_n * sizeof(*r));
    if (!r)
        return tdl_error_raise(TDL_ERR_NOMEM, "workload: out of memory");
    tdl_rng_t rng;
    tdl_rng_init(&rng, c->seed, 0x574b4c44 /* "WKLD" */);
    double t = 0, tot = mix_total(c);
    while (!c->requests || n < c->requests) {
        double gap = rate > 0 ? -log(1.0 - tdl_rng_uniform_f64(&rng)) / rate : INFINITY;
        if (t + gap > phase_end) { /* memoryless: start over at the phase boundary */
            t = phase_end;
            if (++phase >= c->nphases) {
                if (!c->requests)
                    break;
                phase = 0;
            }
            rate = c->phase_load[phase] * cap;
            phase_end = t + c->phase_s[phase];
            continue;
        }
        t += gap;
        if (n == cap_n) {
            cap_n *= 2;
            coord_workload_request_t *p = realloc(r, (size_t)cap_n * sizeof(*r));
            if (!p) {
                free(r);
                return tdl_error_raise(TDL_ERR_NOMEM, "workload: out of memory");
            }
            r = p;
        }
        double u = tdl_rng_uniform_f64(&rng) * tot, acc = 0;
        int k = COORD_POLICY_NCLASSES - 1;
        for (int j = 0; j < COORD_POLICY_NCLASSES; j++) {
            acc += c->mix[j];
            if (u < acc && c->mix[j] > 0) {
                k = j;
                break;
            }
        }
        coord_workload_request_t *q = &r[n++];
        *q = (coord_workload_request_t){.euler = 0}; /* Heun, as tidal serve samples by default */
        q->at_ms = (int64_t)llround(t * 1000);
        q->label = c->labels > 0 ? (int)tdl_rng_below(&rng, (uint64_t)c->labels) : -1;
        q->n = 1;
        q->resolution = class_resolution[k];
        q->steps = c->steps[k];
        q->cfg = 1.0;
        q->seed = tdl_rng_u64(&rng) >> 11; /* within 2^53: exact as a JSON number */
        q->priority = c->priority[k];
        double t1 = coord_policy_single_rank_s(cost, q->resolution, q->n,
                                               (double)q->steps * coord_workload_step_evals(q));
        q->deadline_ms = c->alpha[k] > 0 ? (int64_t)ceil(c->alpha[k] * t1 * 1000) : 0;
        if (q->deadline_ms > 86400000)
            q->deadline_ms = 86400000;
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
                r[i].euler ? ", \"sampler\": \"euler\"" : "");
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
        int euler = 0;
        if ((v = json_object_get(o, "sampler")) && !json_is_null(v)) {
            const char *sv = json_is_string(v) ? json_string_value(v) : "";
            if (strcmp(sv, "euler") && strcmp(sv, "heun")) {
                st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                     "%s:%d: field 'sampler': must be "
                                     "\"euler\" or \"heun\"",
                                     path, line);
                json_decref(o);
                goto out;
            }
            euler = !strcmp(sv, "euler");
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
                                    .sampler = q->euler ? DIT_SAMPLER_EULER : DIT_SAMPLER_HEUN};
}
