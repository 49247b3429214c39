/* static: a fixed split, the baseline of the colocate benchmark. */
#include "config.h"

#include <stdlib.h>

#include "coord/realloc_internal.h"

static tdl_status_t static_create(const coord_realloc_opts_t *o, void **out)
{
    coord_realloc_opts_t *s = tdl_malloc(sizeof(*s));
    if (!s)
        return tdl_error_raise(TDL_ERR_NOMEM, "realloc static: out of memory");
    *s = *o;
    *out = s;
    return TDL_OK;
}

static int static_decide(void *state, const coord_realloc_view_t *v)
{
    const coord_realloc_opts_t *o = state;
    return coord_realloc_clamp(v, o->static_serve);
}

const coord_realloc_ops_t coord_realloc_static = {
    .name = "static",
    .summary = "a fixed number of serving ranks (--serve-ranks)",
    .create = static_create,
    .destroy = free,
    .split_only = true,
    .decide = static_decide};
