/* Attribute lookups (doc/checkpoint.md): root attributes and those of a group ("train/step"),
 * each holding one value of the type asked for. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "ckpt/ckpt_internal.h"

/* Opens the file and its root attribute `key`, which must hold one value, and its type. */
static tdl_status_t ckpt_attr_open(const char *path, const char *key, hid_t *file_out,
                                   hid_t *attr_out, hid_t *type_out, H5T_class_t *class_out)
{
    if (!path || !*path || !key || !*key)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "ckpt attribute lookup: no %s given",
                               !path || !*path ? "path" : "key");
    hid_t file = H5I_INVALID_HID, attr = H5I_INVALID_HID, space = H5I_INVALID_HID;
    hid_t type = H5I_INVALID_HID;
    tdl_status_t st = ckpt_open_read(path, &file);
    if (st != TDL_OK)
        return st;
    /* "train/step": the attribute step of the group /train */
    char obj[256] = ".";
    const char *name = key, *slash = strrchr(key, '/');
    if (slash && (size_t)(slash - key) < sizeof(obj)) {
        snprintf(obj, sizeof(obj), "%.*s", (int)(slash - key), key);
        name = slash + 1;
        htri_t there = H5Lexists(file, obj, H5P_DEFAULT);
        if (there <= 0) {
            st = tdl_error_raise(TDL_ERR_NOT_FOUND, "%s has no group /%s (for the attribute %s)",
                                 path, obj, key);
            goto err;
        }
    }
    htri_t exists = H5Aexists_by_name(file, obj, name, H5P_DEFAULT);
    if (exists < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot look up the attribute %s", path, key);
        goto err;
    }
    if (exists == 0) {
        st = tdl_error_raise(TDL_ERR_NOT_FOUND, "%s has no attribute %s", path, key);
        goto err;
    }
    attr = H5Aopen_by_name(file, obj, name, H5P_DEFAULT, H5P_DEFAULT);
    space = attr >= 0 ? H5Aget_space(attr) : H5I_INVALID_HID;
    if (space < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot open the attribute %s", path, key);
        goto err;
    }
    hssize_t n = H5Sget_simple_extent_npoints(space);
    if (n != 1) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: the attribute %s holds %lld values, not one",
                             path, key, (long long)n);
        goto err;
    }
    ckpt_h5_close(&space);
    type = H5Aget_type(attr);
    if (type < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the type of the attribute %s", path,
                           key);
        goto err;
    }
    *file_out = file;
    *attr_out = attr;
    *type_out = type;
    *class_out = H5Tget_class(type);
    return TDL_OK;

err:
    ckpt_h5_close(&type);
    ckpt_h5_close(&space);
    ckpt_h5_close(&attr);
    ckpt_h5_close(&file);
    return st;
}

/* Reads a numeric root attribute as `mtype`; `want` names the expected kind in messages. */
static tdl_status_t ckpt_attr_read_number(const char *path, const char *key, hid_t mtype,
                                          bool accept_int, bool accept_float, const char *want,
                                          void *out)
{
    ckpt_h5_quiet_t quiet;
    ckpt_h5_quiet(&quiet);
    hid_t file = H5I_INVALID_HID, attr = H5I_INVALID_HID, type = H5I_INVALID_HID;
    H5T_class_t cls;
    tdl_status_t st = ckpt_attr_open(path, key, &file, &attr, &type, &cls);
    if (st != TDL_OK)
        goto out;
    if (!(cls == H5T_INTEGER && accept_int) && !(cls == H5T_FLOAT && accept_float)) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: the attribute %s holds %s data, expected %s",
                             path, key, ckpt_class_str(cls), want);
        goto out;
    }
    if (H5Aread(attr, mtype, out) < 0)
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the attribute %s", path, key);
out:
    ckpt_h5_close(&type);
    ckpt_h5_close(&attr);
    ckpt_h5_close(&file);
    ckpt_h5_restore(&quiet);
    return st;
}

static tdl_status_t ckpt_attr_read_int_unlocked(const char *path, const char *key, int64_t *out)
{
    if (!out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "ckpt_attr_read_int: out is NULL");
    int64_t v;
    tdl_status_t st =
        ckpt_attr_read_number(path, key, H5T_NATIVE_INT64, true, false, "an integer", &v);
    if (st == TDL_OK)
        *out = v;
    return st;
}

static tdl_status_t ckpt_attr_read_double_unlocked(const char *path, const char *key, double *out)
{
    if (!out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "ckpt_attr_read_double: out is NULL");
    double v;
    tdl_status_t st =
        ckpt_attr_read_number(path, key, H5T_NATIVE_DOUBLE, true, true, "a number", &v);
    if (st == TDL_OK)
        *out = v;
    return st;
}

/* Variable-length strings (ours, h5py's str) and fixed-length ones (h5py's numpy.bytes_). */
tdl_status_t ckpt_attr_copy_string(const char *path, const char *key, hid_t attr, hid_t type,
                                   char **out)
{
    tdl_status_t st = TDL_OK;
    char *copy = NULL;
    hid_t mtype = H5Tcopy(H5T_C_S1);
    htri_t vlen = H5Tis_variable_str(type);
    if (mtype < 0 || vlen < 0 || H5Tset_cset(mtype, H5Tget_cset(type)) < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the type of the attribute %s", path,
                           key);
        goto out;
    }
    if (vlen) {
        char *s = NULL;
        if (H5Tset_size(mtype, H5T_VARIABLE) < 0 || H5Aread(attr, mtype, &s) < 0) {
            st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the attribute %s", path, key);
            goto out;
        }
        copy = strdup(s ? s : "");
        H5free_memory(s);
    } else {
        size_t size = H5Tget_size(type);
        copy = size ? calloc(size + 1, 1) : NULL;
        if (copy && (H5Tset_size(mtype, size) < 0 || H5Tset_strpad(mtype, H5T_STR_NULLPAD) < 0 ||
                     H5Aread(attr, mtype, copy) < 0)) {
            st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the attribute %s", path, key);
            goto out;
        }
    }
    if (!copy) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "%s: no memory for the attribute %s", path, key);
        goto out;
    }
    *out = copy;
    copy = NULL;
out:
    free(copy);
    ckpt_h5_close(&mtype);
    return st;
}

static tdl_status_t ckpt_attr_read_string_unlocked(const char *path, const char *key, char **out)
{
    if (!out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "ckpt_attr_read_string: out is NULL");
    ckpt_h5_quiet_t quiet;
    ckpt_h5_quiet(&quiet);
    hid_t file = H5I_INVALID_HID, attr = H5I_INVALID_HID, type = H5I_INVALID_HID;
    H5T_class_t cls;
    tdl_status_t st = ckpt_attr_open(path, key, &file, &attr, &type, &cls);
    if (st != TDL_OK)
        goto out;
    if (cls != H5T_STRING) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s: the attribute %s holds %s data, expected a string", path, key,
                             ckpt_class_str(cls));
        goto out;
    }
    st = ckpt_attr_copy_string(path, key, attr, type, out);
out:
    ckpt_h5_close(&type);
    ckpt_h5_close(&attr);
    ckpt_h5_close(&file);
    ckpt_h5_restore(&quiet);
    return st;
}

tdl_status_t ckpt_attr_read_int(const char *path, const char *key, int64_t *out)
{
    ckpt_lock();
    tdl_status_t st = ckpt_attr_read_int_unlocked(path, key, out);
    ckpt_unlock();
    return st;
}

tdl_status_t ckpt_attr_read_double(const char *path, const char *key, double *out)
{
    ckpt_lock();
    tdl_status_t st = ckpt_attr_read_double_unlocked(path, key, out);
    ckpt_unlock();
    return st;
}

tdl_status_t ckpt_attr_read_string(const char *path, const char *key, char **out)
{
    ckpt_lock();
    tdl_status_t st = ckpt_attr_read_string_unlocked(path, key, out);
    ckpt_unlock();
    return st;
}
