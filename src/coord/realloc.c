/* The reallocation policies by name (realloc.h); each one is a file of src/coord/realloc/. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "coord/realloc_internal.h"

static const coord_realloc_ops_t *const policies[] = {
    &coord_realloc_slo_first, &coord_realloc_static, &coord_realloc_schedule};

const coord_realloc_ops_t *coord_realloc_find(const char *name)
{
    for (size_t i = 0; name && i < TDL_ARRAY_SIZE(policies); i++)
        if (!strcmp(policies[i]->name, name))
            return policies[i];
    return NULL;
}

const char *coord_realloc_names(void)
{
    return "slo_first, static, schedule";
}

tdl_status_t coord_realloc_schedule_parse(const char *text, coord_realloc_opts_t *o)
{
    o->nperiods = 0;
    const char *p = text ? text : "";
    while (*p) {
        char *end;
        double h = strtod(p, &end);
        if (end == p || *end != ':')
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "schedule '%s': want HOUR:SHARE,... (e.g. 0:0.2,8:0.6,20:0.2)",
                                   text);
        p = end + 1;
        double share = strtod(p, &end);
        if (end == p || (*end && *end != ','))
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "schedule '%s': no share after hour %g",
                                   text, h);
        p = *end ? end + 1 : end;
        int i = o->nperiods;
        if (i == COORD_REALLOC_MAX_PERIODS)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "schedule '%s': at most %d periods", text,
                                   COORD_REALLOC_MAX_PERIODS);
        if (!(h >= 0 && h < 24) || (i == 0 && h != 0) || (i > 0 && h <= o->from_h[i - 1]))
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "schedule '%s': hour %g: the hours begin at 0 and ascend below "
                                   "24",
                                   text, h);
        if (!(share >= 0 && share <= 1))
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "schedule '%s': share %g at hour %g is not within 0 .. 1", text,
                                   share, h);
        o->from_h[i] = h, o->serve[i] = share;
        o->nperiods++;
    }
    if (!o->nperiods)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "schedule: empty (want HOUR:SHARE,...)");
    return TDL_OK;
}
