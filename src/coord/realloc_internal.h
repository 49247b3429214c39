/* What the reallocation policies (one file each in src/coord/realloc/) share. */
#ifndef TIDAL_COORD_REALLOC_INTERNAL_H
#define TIDAL_COORD_REALLOC_INTERNAL_H

#include "coord/realloc.h"

/* `want` serving ranks within the view's bounds: [min_serve, workers - min_train] while
 * training runs, every worker once it has finished. */
static inline int coord_realloc_clamp(const coord_realloc_view_t *v, int want)
{
    if (!v->training)
        return v->workers; /* nothing left to train: everyone serves */
    int hi = TDL_MAX(0, v->workers - v->min_train), lo = TDL_MIN(v->min_serve, hi);
    return TDL_MAX(lo, TDL_MIN(hi, want));
}

extern const coord_realloc_ops_t coord_realloc_slo_first, coord_realloc_static,
    coord_realloc_schedule;

#endif /* TIDAL_COORD_REALLOC_INTERNAL_H */
