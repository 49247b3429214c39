/* The checks of the tensors a caller lists (doc/checkpoint.md): names, ranks, sizes and data,
 * made before any file is created or read. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

/* A link name inside a group: HDF5 would read '/' as a path and "." as the group itself. */
bool ckpt_name_ok(const char *name)
{
    return name && *name && !strchr(name, '/') && strcmp(name, ".") != 0;
}

void ckpt_dims(const ckpt_tensor_t *t, hsize_t *dims)
{
    for (int d = 0; d < t->ndim; d++)
        dims[d] = (hsize_t)t->shape[d];
}

tdl_status_t ckpt_tensor_check(const ckpt_tensor_t *t, const char *verb, const char *path,
                               const char *list, int i)
{
    if (!ckpt_name_ok(t->name))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cannot %s %s: %s[%d] has the name '%s'; a tensor name is not "
                               "empty, not '.' and has no '/'",
                               verb, path, list, i, t->name ? t->name : "(null)");
    if (t->ndim < 1 || t->ndim > 4)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cannot %s %s: %s[%d] (%s) has %d dimensions; it must have 1 to 4",
                               verb, path, list, i, t->name, t->ndim);
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 1)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "cannot %s %s: %s[%d] (%s) has size %d in dimension %d; sizes "
                                   "must be >= 1",
                                   verb, path, list, i, t->name, t->shape[d], d);
        if (numel > SIZE_MAX / sizeof(float) / (size_t)t->shape[d])
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "cannot %s %s: %s[%d] (%s) is too large for memory", verb, path,
                                   list, i, t->name);
        numel *= (size_t)t->shape[d];
    }
    if (!t->data)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cannot %s %s: %s[%d] (%s) has no data (NULL)",
                               verb, path, list, i, t->name);
    return TDL_OK;
}
