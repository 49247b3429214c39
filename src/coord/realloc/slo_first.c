/* slo_first: serving first while its deadlines are at risk or its backlog would not clear
 * within drain_s; ranks go back to training only after serving has needed fewer of them for
 * cooldown_s, so they do not flap, and then all that serving does not need, in one resize: one
 * at a time, a burst's ranks took a cooldown each to come back (seven ranks, 18 s at the default
 * 3 s), and each return cost training a resize of its own. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "coord/realloc_internal.h"

typedef struct slo_first {
    coord_realloc_opts_t o;
    double lower_since; /* since when serving has needed fewer ranks; < 0: it has not */
} slo_first_t;

static tdl_status_t slo_first_create(const coord_realloc_opts_t *o, void **out)
{
    slo_first_t *s = tdl_calloc(1, sizeof(*s));
    if (!s)
        return tdl_error_raise(TDL_ERR_NOMEM, "realloc slo_first: out of memory");
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
    int want = coord_realloc_clamp(v, need);
    if (want >= v->serving) {
        s->lower_since = -1;
        return want;
    }
    if (s->lower_since < 0)
        s->lower_since = v->now;
    if (v->now - s->lower_since < s->o.cooldown_s)
        return v->serving;
    s->lower_since = -1; /* a further return waits a cooldown again */
    return want;
}

const coord_realloc_ops_t coord_realloc_slo_first = {
    .name = "slo_first",
    .summary = "serving first while its backlog or deadlines need it; back to training, all "
               "that serving no longer needs, after a cooldown",
    .create = slo_first_create,
    .destroy = free,
    .decide = slo_first_decide};
