/* schedule: a fixed split per hour of the day, what operators do by hand ("serving by day,
 * training by night"); the baseline of the colocate-sim benchmark. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "coord/realloc_internal.h"

static tdl_status_t schedule_create(const coord_realloc_opts_t *o, void **out)
{
    if (o->nperiods < 1 || !(o->day_s > 0))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "realloc schedule: needs a schedule (HOUR:SHARE,...) and a day "
                               "of more than 0 s");
    coord_realloc_opts_t *s = tdl_malloc(sizeof(*s));
    if (!s)
        return tdl_error_raise(TDL_ERR_NOMEM, "realloc schedule: out of memory");
    *s = *o;
    *out = s;
    return TDL_OK;
}

static int schedule_decide(void *state, const coord_realloc_view_t *v)
{
    const coord_realloc_opts_t *o = state;
    double hour = fmod(o->start_h / 24 * o->day_s + fmax(v->now, 0), o->day_s) / o->day_s * 24;
    int i = 0;
    while (i + 1 < o->nperiods && o->from_h[i + 1] <= hour)
        i++;
    return coord_realloc_clamp(v, (int)lround(o->serve[i] * v->workers));
}

const coord_realloc_ops_t coord_realloc_schedule = {
    .name = "schedule",
    .summary = "a fixed share of the workers serving per hour of the day (--schedule)",
    .create = schedule_create,
    .destroy = free,
    .split_only = true,
    .decide = schedule_decide};
