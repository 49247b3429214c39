/* The reallocation policies by name (realloc.h); each one is a file of src/coord/realloc/. */
#include "config.h"

#include <string.h>

#include "coord/realloc_internal.h"

static const coord_realloc_ops_t *const policies[] = {&coord_realloc_slo_first,
                                                      &coord_realloc_static};

const coord_realloc_ops_t *coord_realloc_find(const char *name)
{
    for (size_t i = 0; name && i < TDL_ARRAY_SIZE(policies); i++)
        if (!strcmp(policies[i]->name, name))
            return policies[i];
    return NULL;
}

const char *coord_realloc_names(void)
{
    return "slo_first, static";
}
