/* The replay of a coordinator's event log (coord.h, coord_replay): the log's header builds the
 * same coordinator (configuration, reallocation options, the cost model as the job used it);
 * its events are fed in order at their times; its commands are taken where the job took them.
 * The new coordinator writes its own log as it goes, so that the two logs can be compared. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/coord.h"

/* The text after "key=" in line (up to the next space, or to the line's end when last). */
static const char *field(const char *line, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = strstr(line, key); p; p = strstr(p + 1, key))
        if ((p == line || p[-1] == ' ') && p[n] == '=')
            return p + n + 1;
    return NULL;
}

static bool get_d(const char *line, const char *key, double *out)
{
    const char *v = field(line, key);
    char *end;
    if (!v)
        return false;
    *out = strtod(v, &end);
    return end != v && (*end == ' ' || *end == '\0');
}

static bool get_i(const char *line, const char *key, long long *out)
{
    const char *v = field(line, key);
    char *end;
    if (!v)
        return false;
    *out = strtoll(v, &end, 10);
    return end != v && (*end == ' ' || *end == '\0');
}

static bool get_u(const char *line, const char *key, uint64_t *out)
{
    const char *v = field(line, key);
    char *end;
    if (!v)
        return false;
    *out = strtoull(v, &end, 10);
    return end != v && (*end == ' ' || *end == '\0');
}

/* The word after "key=", into buf. */
static bool get_s(const char *line, const char *key, char *buf, size_t size)
{
    const char *v = field(line, key);
    if (!v)
        return false;
    size_t n = strcspn(v, " ");
    snprintf(buf, size, "%.*s", (int)TDL_MIN(n, size - 1), v);
    return n > 0;
}

/* The rest of the line after "key=" (a text with spaces, last on its line). */
static const char *rest(const char *line, const char *key)
{
    const char *v = field(line, key);
    return v && strcmp(v, "-") ? v : "";
}

static bool starts(const char *line, const char *prefix)
{
    return !strncmp(line, prefix, strlen(prefix));
}

static tdl_status_t bad(const char *path, long ln, const char *what)
{
    return tdl_error_raise(TDL_ERR_CORRUPT, "%s:%ld: %s", path, ln, what);
}

/* The header's lines into *cfg, *cost and the names of the policies. */
static tdl_status_t header(const char *path, long ln, const char *line, coord_config_t *cfg,
                           coord_cost_model_t *cost, char *policy, char *realloc)
{
    long long v[9];
    double d[5];
    if (starts(line, "# tidal coordinator events 1:")) {
        if (!get_i(line, "workers", &v[0]) || !get_i(line, "chunk", &v[1]) ||
            !get_i(line, "max_degree", &v[2]) || !get_i(line, "cfg_parallel", &v[3]) ||
            !get_i(line, "admit_max", &v[4]) || !get_i(line, "min_train", &v[5]) ||
            !get_i(line, "min_serve", &v[6]) || !get_i(line, "fixed_weights", &v[7]) ||
            !get_s(line, "policy", policy, 64) || !get_s(line, "realloc", realloc, 64))
            return bad(path, ln, "a header missing a field");
        cfg->workers = (int)v[0], cfg->chunk = (int)v[1], cfg->max_degree = (int)v[2];
        cfg->cfg_parallel = v[3] != 0, cfg->admit_max = (int)v[4], cfg->min_train = (int)v[5];
        cfg->min_serve = (int)v[6], cfg->fixed_weights = v[7] != 0;
    } else if (starts(line, "# realloc ")) {
        coord_realloc_opts_t *o = &cfg->realloc_opts;
        if (!get_d(line, "drain", &o->drain_s) || !get_d(line, "cooldown", &o->cooldown_s) ||
            !get_i(line, "static_serve", &v[0]) || !get_d(line, "day_s", &o->day_s) ||
            !get_d(line, "start_h", &o->start_h))
            return bad(path, ln, "a realloc line missing a field");
        o->static_serve = (int)v[0];
    } else if (starts(line, "# period ")) {
        coord_realloc_opts_t *o = &cfg->realloc_opts;
        if (o->nperiods == COORD_REALLOC_MAX_PERIODS || !get_d(line, "from_h", &d[0]) ||
            !get_d(line, "serve", &d[1]))
            return bad(path, ln, "a period line missing a field (or too many)");
        o->from_h[o->nperiods] = d[0], o->serve[o->nperiods++] = d[1];
    } else if (starts(line, "# cost ")) {
        if (!get_i(line, "patch", &v[0]) || !get_i(line, "per_image", &v[1]) ||
            !get_d(line, "migration_latency_s", &cost->migration_latency_s) ||
            !get_d(line, "migration_bytes_per_s", &cost->migration_bytes_per_s) ||
            !get_d(line, "state_bytes_per_token", &cost->state_bytes_per_token))
            return bad(path, ln, "a cost line missing a field");
        cost->patch = (int)v[0], cost->per_image = v[1] != 0;
    } else if (starts(line, "# pixel_scale=")) {
        if (!get_i(line, "pixel_scale", &v[0]) || v[0] < 2 || v[0] > 256)
            return bad(path, ln, "a pixel_scale line outside 2..256");
        cfg->pixel_scale = (int)v[0];
    } else if (starts(line, "# batch ")) {
        if (!get_i(line, "rows", &v[0]) || v[0] < 2 || v[0] > 1 << 20)
            return bad(path, ln, "a batch line without rows in 2..2^20");
        cfg->batch_rows = (int)v[0];
    } else if (starts(line, "# step_batch ")) {
        /* one point a line, added to its table (coord_cost_model_set_batch keeps them sorted) */
        if (!get_i(line, "tokens", &v[0]) || !get_i(line, "images", &v[1]) ||
            !get_d(line, "factor", &d[0]) || v[0] < 1 || v[0] > 1 << 30 || v[1] < 1 ||
            v[1] > 1 << 20)
            return bad(path, ln, "a step_batch line missing a field or out of range");
        const coord_cost_batch_t *b = NULL;
        for (int i = 0; i < cost->nbatch && !b; i++)
            if (cost->batch[i].tokens == v[0])
                b = &cost->batch[i];
        int images[COORD_COST_MAX_BATCH_POINTS], np = b ? b->npoints : 0;
        double factor[COORD_COST_MAX_BATCH_POINTS];
        if (np == COORD_COST_MAX_BATCH_POINTS)
            return bad(path, ln, "a step_batch table of too many points");
        for (int i = 0; i < np; i++)
            images[i] = b->images[i], factor[i] = b->factor[i];
        images[np] = (int)v[1], factor[np] = d[0];
        if (coord_cost_model_set_batch(cost, (int)v[0], images, factor, np + 1) != TDL_OK)
            return bad(path, ln, "a step_batch line it cannot take");
    } else if (starts(line, "# fit ")) {
        if (!get_i(line, "stage", &v[0]) || !get_i(line, "degree", &v[1]) ||
            !get_d(line, "a", &d[0]) || !get_d(line, "b", &d[1]) || !get_d(line, "c", &d[2]) ||
            !get_d(line, "rel_err", &d[3]) ||
            coord_cost_model_set_fit(cost, (coord_cost_stage_t)v[0], (int)v[1], d[0], d[1], d[2],
                                     d[3]) != TDL_OK)
            return bad(path, ln, "a fit line it cannot take");
    }
    return TDL_OK;
}

/* One event line, fed to the coordinator; what it returns is the job's business, not the
 * replay's (the job may have ended on it). */
static tdl_status_t event(const char *path, long ln, const char *line, coord_t *c)
{
    char kind[16];
    double t;
    if (sscanf(line, "%15s %lf", kind, &t) != 2)
        return bad(path, ln, "an event without a kind and a time");
    long long v[8];
    uint64_t u[2];
    double d;
    tdl_status_t st = TDL_OK;
    if (!strcmp(kind, "arrive")) {
        serve_request_params_t p = {0};
        if (!get_i(line, "label", &v[0]) || !get_d(line, "cfg", &p.cfg) ||
            !get_i(line, "n", &v[1]) || !get_i(line, "res", &v[2]) ||
            !get_i(line, "steps", &v[3]) || !get_i(line, "sampler", &v[4]) ||
            !get_i(line, "priority", &v[5]) || !get_i(line, "deadline_ms", &v[6]) ||
            !get_u(line, "seed", &u[0]))
            return bad(path, ln, "an arrival missing a field");
        p.label = (int)v[0], p.n = (int)v[1], p.resolution = (int)v[2], p.steps = (int)v[3];
        p.sampler = (dit_sampler_kind_t)v[4], p.priority = (int)v[5], p.deadline_ms = v[6];
        p.seed = u[0], p.has_seed = true;
        double arrived = t;
        get_d(line, "arrived", &arrived); /* (a log of before it: the time itself) */
        st = coord_request_arrive_at(c, t, arrived, &p, NULL);
    } else if (!strcmp(kind, "finish")) {
        if (!get_u(line, "req", &u[0]) || !get_i(line, "ok", &v[0]))
            return bad(path, ln, "a finish missing a field");
        st = coord_task_finished(c, t, u[0], v[0] != 0, NULL, 0);
    } else if (!strcmp(kind, "cancel")) {
        if (!get_u(line, "req", &u[0]))
            return bad(path, ln, "a cancel missing its request");
        st = coord_request_cancel(c, t, u[0]);
    } else if (!strcmp(kind, "lost")) {
        if (!get_u(line, "req", &u[0]))
            return bad(path, ln, "a lost task missing its request");
        st = coord_task_lost(c, t, u[0]);
    } else if (!strcmp(kind, "dead")) {
        if (!get_i(line, "worker", &v[0]))
            return bad(path, ln, "a death missing its worker");
        st = coord_rank_lost(c, t, (int)v[0], rest(line, "why"));
    } else if (!strcmp(kind, "report")) {
        serve_wire_report_t r = {0};
        if (!get_i(line, "worker", &v[0]) || !get_i(line, "kind", &v[1]) ||
            !get_i(line, "members", &v[2]) || !get_i(line, "step", &v[3]) ||
            !get_d(line, "loss", &d))
            return bad(path, ln, "a report missing a field");
        r.kind = (uint32_t)v[1], r.rank = (int)v[0], r.members = (int)v[2], r.step = v[3];
        r.loss = d;
        const char *p = field(line, "path");
        snprintf(r.path, sizeof(r.path), "%s", p ? p : "");
        st = coord_report(c, t, (int)v[0], &r);
    } else if (!strcmp(kind, "tick")) {
        if (!get_i(line, "queued", &v[0]))
            return bad(path, ln, "a tick missing its queue");
        st = coord_tick(c, t, (int)v[0]);
    } else if (!strcmp(kind, "shutdown")) {
        coord_shutdown(c, t, rest(line, "why"));
    } else {
        return bad(path, ln, "an event of no known kind");
    }
    (void)st;
    return TDL_OK;
}

tdl_status_t coord_replay(const char *path, const coord_config_t *tmpl)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO, "%s: %s", path,
                               strerror(errno));
    coord_config_t cfg = *tmpl;
    coord_cost_model_t cost = {0};
    cfg.realloc_opts = (coord_realloc_opts_t){0};
    char policy[64] = "", realloc[64] = "", line[4096];
    coord_t *c = NULL;
    tdl_status_t st = TDL_OK;
    long ln = 0;
    while (st == TDL_OK && fgets(line, sizeof(line), f)) {
        ln++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n')
            line[--len] = '\0';
        else if (!feof(f))
            st = bad(path, ln, "a line over 4 KiB");
        if (st != TDL_OK || !len)
            continue;
        if (line[0] == '#') {
            if (c)
                st = bad(path, ln, "a header line after the events");
            else
                st = header(path, ln, line, &cfg, &cost, policy, realloc);
            continue;
        }
        if (!c) { /* the header is complete: the same coordinator */
            cfg.cost = &cost;
            cfg.policy = coord_policy_find(policy);
            cfg.realloc = strcmp(realloc, "none") ? coord_realloc_find(realloc) : NULL;
            if (!cfg.policy || (strcmp(realloc, "none") && !cfg.realloc) || !cfg.workers)
                st = tdl_error_raise(TDL_ERR_MISMATCH,
                                     "%s: a header naming policy '%s' and realloc '%s' (or no "
                                     "workers) this tidal does not have",
                                     path, policy, realloc);
            else
                st = coord_create(&cfg, &c);
            if (st != TDL_OK)
                continue;
        }
        if (line[0] == '>') /* a command the job took here: this one takes its own */
            coord_command_next(c);
        else
            st = event(path, ln, line, c);
    }
    if (st == TDL_OK && ferror(f))
        st = tdl_error_raise(TDL_ERR_IO, "%s: %s", path, strerror(errno));
    if (st == TDL_OK && !c)
        st = bad(path, ln, "no event after the header");
    fclose(f);
    coord_free(c);
    return st;
}
