/* Reallocation policies (see realloc.h). slo_first: serving first while its deadlines are at
 * risk or its backlog would not clear within drain_s; ranks go back to training one at a time,
 * and only after serving has needed fewer of them for cooldown_s, so they do not flap. static: a
 * fixed split, the baseline of the colocate benchmark. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord/realloc.h"

static int clamp_serving(const coord_realloc_view_t *v, int want)
{
    if (!v->training)
        return v->workers; /* nothing left to train: everyone serves */
    int hi = TDL_MAX(0, v->workers - v->min_train), lo = TDL_MIN(v->min_serve, hi);
    return TDL_MAX(lo, TDL_MIN(hi, want));
}

typedef struct slo_first {
    coord_realloc_opts_t o;
    double lower_since; /* since when serving has needed fewer ranks; < 0: it has not */
} slo_first_t;

static tdl_status_t slo_first_create(const coord_realloc_opts_t *o, void **out)
{
    slo_first_t *s = calloc(1, sizeof(*s));
    if (!s)
        return tdl_error_raise(TDL_ERR_NOMEM, "realloc: out of memory");
    s->o = *o;
    s->lower_since = -1;
    *out = s;
    return TDL_OK;
}

static int slo_first_decide(void *state, const coord_realloc_view_t *v)
{
    slo_first_t *s = state;
    /* enough ranks to clear the backlog within drain_s, one more per request at risk, and one
     * for every request already running (its ranks are busy) */
    int need = (int)ceil(v->backlog_s / fmax(s->o.drain_s, 1e-3));
    need = TDL_MAX(need, v->running + (v->waiting > 0));
    need += (int)ceil(v->at_risk);
    int want = clamp_serving(v, need);
    if (want >= v->serving) {
        s->lower_since = -1;
        return want;
    }
    if (s->lower_since < 0)
        s->lower_since = v->now;
    if (v->now - s->lower_since < s->o.cooldown_s)
        return v->serving;
    s->lower_since = v->now; /* the next one waits a cooldown again */
    return clamp_serving(v, v->serving - 1);
}

static tdl_status_t static_create(const coord_realloc_opts_t *o, void **out)
{
    coord_realloc_opts_t *s = malloc(sizeof(*s));
    if (!s)
        return tdl_error_raise(TDL_ERR_NOMEM, "realloc: out of memory");
    *s = *o;
    *out = s;
    return TDL_OK;
}

static int static_decide(void *state, const coord_realloc_view_t *v)
{
    const coord_realloc_opts_t *o = state;
    return clamp_serving(v, o->static_serve);
}

static const coord_realloc_ops_t policies[] = {
    {"slo_first",
     "serving first while its backlog or deadlines need it; back to training one rank at a time "
     "after a cooldown",
     slo_first_create, free, slo_first_decide},
    {"static", "a fixed number of serving ranks (--serve-ranks)", static_create, free,
     static_decide},
};

const coord_realloc_ops_t *coord_realloc_find(const char *name)
{
    for (size_t i = 0; name && i < TDL_ARRAY_SIZE(policies); i++)
        if (!strcmp(policies[i].name, name))
            return &policies[i];
    return NULL;
}

const char *coord_realloc_names(void)
{
    return "slo_first, static";
}
