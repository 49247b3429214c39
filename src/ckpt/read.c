/* Reading tensors of a checkpoint (doc/checkpoint.md): every dataset checked against the tensors
 * (type, shape, how it is stored) before any data is read, then read chunk by chunk with each
 * chunk's Fletcher32 checksum checked. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hdf5.h>

#include "ckpt/ckpt_internal.h"

tdl_status_t ckpt_open_read(const char *path, hid_t *file_out)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO,
                               "cannot read the checkpoint %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return tdl_error_raise(TDL_ERR_IO, "cannot read the checkpoint %s: not a regular file",
                               path);
    htri_t is_hdf5 = H5Fis_hdf5(path);
    if (is_hdf5 < 0)
        return ckpt_h5_raise(TDL_ERR_CORRUPT, "cannot read the checkpoint %s", path);
    if (is_hdf5 == 0)
        return tdl_error_raise(
            TDL_ERR_CORRUPT, "%s is not an HDF5 file (no HDF5 signature): not a checkpoint", path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0)
        return ckpt_h5_raise(TDL_ERR_CORRUPT,
                             "cannot open the checkpoint %s: the HDF5 file is truncated or damaged",
                             path);
    *file_out = file;
    return TDL_OK;
}

const char *ckpt_class_str(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating-point";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

/* "[96, 32]" */
static const char *ckpt_shape_str(char *buf, size_t size, int ndim, const hsize_t *dims)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%llu", d ? ", " : "",
                                (unsigned long long)dims[d]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
    return buf;
}

/* Whether a dataset holds data tidal wrote and can check: chunked with the Fletcher32 filter
 * (contiguous data carries no checksum, so a change to it could not be found) and every chunk
 * written, with the checksum applied. HDF5 reads a dataset or chunk that was never written as
 * its fill value, zeros, without a word; a chunk allocated when the dataset was created
 * (H5D_ALLOC_TIME_EARLY) holds the fill value with a valid checksum, so that is refused too.
 * Looks at metadata only. */
static tdl_status_t ckpt_dataset_stored(const char *path, const char *gname, const char *name,
                                        hid_t dset, int rank, const hsize_t *dims)
{
    static const char advice[] = "tidal reads only datasets it can check, chunked with the "
                                 "Fletcher32 filter as it writes them; store it that way (h5py: "
                                 "create_dataset(name, data=..., fletcher32=True))";
    tdl_status_t st = TDL_OK;
    hid_t dcpl = H5Dget_create_plist(dset);
    H5D_layout_t layout = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    H5D_alloc_time_t alloc = H5D_ALLOC_TIME_ERROR;
    hsize_t chunk[4];
    if (layout < 0 || H5Pget_alloc_time(dcpl, &alloc) < 0 ||
        (layout == H5D_CHUNKED && H5Pget_chunk(dcpl, rank, chunk) != rank)) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read how /%s/%s is stored", path, gname,
                           name);
        goto out;
    }
    int nfilters = layout == H5D_CHUNKED ? H5Pget_nfilters(dcpl) : 0, fletcher = -1;
    for (int k = 0; k < nfilters && fletcher < 0; k++) {
        unsigned flags;
        size_t ncd = 0;
        if (H5Pget_filter2(dcpl, (unsigned)k, &flags, &ncd, NULL, 0, NULL, NULL) ==
            H5Z_FILTER_FLETCHER32)
            fletcher = k;
    }
    if (fletcher < 0) {
        st = tdl_error_raise(TDL_ERR_CORRUPT, "%s: /%s/%s has no Fletcher32 checksum (%s): %s",
                             path, gname, name,
                             layout == H5D_CHUNKED   ? "chunked without the filter"
                             : layout == H5D_COMPACT ? "a compact dataset"
                             : layout == H5D_VIRTUAL ? "a virtual dataset"
                                                     : "a contiguous dataset",
                             advice);
        goto out;
    }
    if (alloc == H5D_ALLOC_TIME_EARLY) {
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: /%s/%s was allocated when it was created (H5D_ALLOC_TIME_EARLY), "
                             "so its chunks may hold the fill value instead of data: %s",
                             path, gname, name, advice);
        goto out;
    }
    /* Every chunk by its coordinates: a count could include chunks outside the extent. */
    size_t total = 1, missing = 0, unchecked = 0, first_bad = 0;
    hsize_t offset[4] = {0, 0, 0, 0};
    for (int d = 0; d < rank; d++)
        total *= (size_t)((dims[d] + chunk[d] - 1) / chunk[d]);
    for (size_t k = 0; k < total; k++) {
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(dset, offset, &mask, &addr, &size) < 0) {
            st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot look up the chunks of /%s/%s", path,
                               gname, name);
            goto out;
        }
        bool absent = addr == HADDR_UNDEF || size == 0;
        bool bare = !absent && (mask & (1u << fletcher)); /* the filter was skipped for it */
        if ((absent || bare) && !missing && !unchecked)
            first_bad = k;
        missing += absent;
        unchecked += bare;
        for (int d = rank - 1; d >= 0; d--) { /* the next chunk, C order */
            offset[d] += chunk[d];
            if (offset[d] < dims[d])
                break;
            offset[d] = 0;
        }
    }
    if (missing)
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: /%s/%s was %s: %zu of its %zu chunks hold no data (the "
                             "first: chunk %zu), which HDF5 would read as zeros: the file is "
                             "incomplete or was edited; use another checkpoint",
                             path, gname, name,
                             missing == total ? "never written" : "not written in full", missing,
                             total, first_bad);
    else if (unchecked)
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: /%s/%s: %zu of its %zu chunks stored without the Fletcher32 "
                             "checksum (the filter skipped; the first: chunk %zu): %s",
                             path, gname, name, unchecked, total, first_bad, advice);
out:
    ckpt_h5_close(&dcpl);
    return st;
}

/* Opens /<gname>/<t->name> and checks it against the tensor, without reading data. */
static tdl_status_t ckpt_open_dataset(const char *path, hid_t group, const char *gname,
                                      const ckpt_tensor_t *t, hid_t *dset_out)
{
    htri_t exists = H5Lexists(group, t->name, H5P_DEFAULT);
    if (exists < 0)
        return ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot look up /%s/%s", path, gname, t->name);
    if (exists == 0)
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "%s has no dataset /%s/%s", path, gname, t->name);
    tdl_status_t st = TDL_OK;
    hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID;
    hid_t obj = H5Oopen(group, t->name, H5P_DEFAULT);
    if (obj < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot open /%s/%s", path, gname, t->name);
        goto err;
    }
    if (H5Iget_type(obj) != H5I_DATASET) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: /%s/%s is not a dataset", path, gname, t->name);
        goto err;
    }
    type = H5Dget_type(obj);
    space = H5Dget_space(obj);
    if (type < 0 || space < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the type and shape of /%s/%s", path,
                           gname, t->name);
        goto err;
    }
    H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_FLOAT) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: /%s/%s holds %s data, expected float32", path,
                             gname, t->name, ckpt_class_str(cls));
        goto err;
    }
    /* Only float32, in either byte order (swapping bytes is exact): a float64 tensor would be
     * rounded, a float16 or bfloat16 one is not the weights that were trained. */
    if (H5Tequal(type, H5T_IEEE_F32LE) <= 0 && H5Tequal(type, H5T_IEEE_F32BE) <= 0) {
        size_t bits = 8 * H5Tget_size(type);
        char what[64];
        if (bits == 32)
            snprintf(what, sizeof(what), "a 32-bit floating-point type that is not IEEE float32");
        else
            snprintf(what, sizeof(what), "%zu-bit floating-point data", bits);
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s: /%s/%s holds %s, expected float32: tidal converts no other "
                             "type; store the tensor as float32 (numpy: .astype('float32'))",
                             path, gname, t->name, what);
        goto err;
    }
    hsize_t dims[H5S_MAX_RANK], want[4];
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0 || rank > H5S_MAX_RANK || H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the shape of /%s/%s", path, gname,
                           t->name);
        goto err;
    }
    ckpt_dims(t, want);
    bool same = rank == t->ndim;
    for (int d = 0; same && d < rank; d++)
        same = dims[d] == want[d];
    if (!same) {
        char got_s[200], want_s[100];
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: /%s/%s has shape %s, expected %s", path, gname,
                             t->name, ckpt_shape_str(got_s, sizeof(got_s), rank, dims),
                             ckpt_shape_str(want_s, sizeof(want_s), t->ndim, want));
        goto err;
    }
    if ((st = ckpt_dataset_stored(path, gname, t->name, obj, rank, dims)) != TDL_OK)
        goto err;
    ckpt_h5_close(&space);
    ckpt_h5_close(&type);
    *dset_out = obj;
    return TDL_OK;

err:
    ckpt_h5_close(&space);
    ckpt_h5_close(&type);
    ckpt_h5_close(&obj);
    return st;
}

static tdl_status_t ckpt_read_check(const char *path, const char *group,
                                    const ckpt_tensor_t *tensors, int count)
{
    if (!path || !*path)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "ckpt_weights_read: no path given");
    /* A group path: "model", "ema", "optim/adamw/m"; no empty or dot components. */
    bool group_ok = group && *group && group[0] != '/' && group[strlen(group) - 1] != '/' &&
                    !strstr(group, "//");
    for (const char *c = group; group_ok && c; c = strchr(c, '/')) {
        c += *c == '/';
        group_ok = !(c[0] == '.' && (c[1] == '/' || c[1] == '\0'));
    }
    if (!group_ok)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cannot read %s: '%s' is not a group name (\"model\", \"ema\", "
                               "\"optim/adamw/m\", ...)",
                               path, group ? group : "(null)");
    if (count < 0 || (count > 0 && !tensors))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cannot read %s: %d tensors at %p", path, count,
                               (const void *)tensors);
    for (int i = 0; i < count; i++) {
        tdl_status_t st = ckpt_tensor_check(&tensors[i], "read", path, "tensors", i);
        if (st != TDL_OK)
            return st;
    }
    return TDL_OK;
}

tdl_status_t ckpt_open_group(const char *path, hid_t file, const char *group, hid_t *group_out)
{
    htri_t exists = H5Lexists(file, group, H5P_DEFAULT);
    if (exists < 0)
        return ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot look up the group /%s", path, group);
    if (exists == 0)
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "%s has no group /%s", path, group);
    hid_t obj = H5Oopen(file, group, H5P_DEFAULT);
    if (obj < 0)
        return ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot open /%s", path, group);
    if (H5Iget_type(obj) != H5I_GROUP) {
        H5Oclose(obj);
        return tdl_error_raise(TDL_ERR_MISMATCH, "%s: /%s is not a group", path, group);
    }
    *group_out = obj;
    return TDL_OK;
}

/* A group tidal wrote names itself (CKPT_GROUP_ATTR): one found under another path was moved
 * there, as when /model and /ema are swapped. Groups without the attribute (files of tidal
 * before it, or made by hand) are taken as they are. */
static tdl_status_t ckpt_group_identity(const char *path, hid_t grp, const char *group)
{
    htri_t exists = H5Aexists(grp, CKPT_GROUP_ATTR);
    if (exists < 0)
        return ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot look up the attribute %s of /%s", path,
                             CKPT_GROUP_ATTR, group);
    if (exists == 0)
        return TDL_OK;
    char key[300], *name = NULL;
    snprintf(key, sizeof(key), "%s/%s", group, CKPT_GROUP_ATTR);
    tdl_status_t st = TDL_OK;
    hid_t attr = H5Aopen(grp, CKPT_GROUP_ATTR, H5P_DEFAULT);
    hid_t type = attr >= 0 ? H5Aget_type(attr) : H5I_INVALID_HID;
    if (type < 0)
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot open the attribute %s", path, key);
    else if (H5Tget_class(type) != H5T_STRING)
        st = tdl_error_raise(TDL_ERR_CORRUPT, "%s: the attribute %s is not a string", path, key);
    else
        st = ckpt_attr_copy_string(path, key, attr, type, &name);
    if (st == TDL_OK && strcmp(name, group) != 0)
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s: /%s holds the tensors tidal wrote as /%s (its attribute %s): the "
                             "groups were moved or swapped; move them back (h5py: f.move(a, b)) or "
                             "use another checkpoint",
                             path, group, name, CKPT_GROUP_ATTR);
    free(name);
    ckpt_h5_close(&type);
    ckpt_h5_close(&attr);
    return st;
}

/* Reads a dataset written the way ckpt_write_dataset writes (float32 little-endian, our chunk
 * shape, the Fletcher32 filter alone) chunk by chunk, checking each checksum itself; answers
 * false (untouched) for any other layout, which H5Dread then reads. *st gets the error. */
static bool ckpt_read_direct(const char *path, const char *gname, hid_t dset,
                             const ckpt_tensor_t *t, tdl_status_t *st)
{
    *st = TDL_OK;
    hid_t dcpl = H5Dget_create_plist(dset), type = H5Dget_type(dset);
    hsize_t dims[4], chunk[4], want[4];
    ckpt_dims(t, dims);
    ckpt_chunk_shape(t->ndim, dims, want);
    unsigned flags, cd[8];
    size_t ncd = 8;
    bool ours = dcpl >= 0 && type >= 0 && H5Tequal(type, H5T_IEEE_F32LE) > 0 &&
                H5Pget_layout(dcpl) == H5D_CHUNKED &&
                H5Pget_chunk(dcpl, t->ndim, chunk) == t->ndim && H5Pget_nfilters(dcpl) == 1 &&
                H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, 0, NULL, NULL) == H5Z_FILTER_FLETCHER32;
    for (int d = 0; ours && d < t->ndim; d++)
        ours = chunk[d] == want[d];
    ckpt_h5_close(&dcpl);
    ckpt_h5_close(&type);
    if (!ours)
        return false;
    ckpt_chunks_t c;
    ckpt_chunks_of(t->ndim, dims, chunk, &c);
    size_t bytes = c.elems * sizeof(float);
    unsigned char *buf = malloc(bytes + 4);
    if (!buf) {
        *st = tdl_error_raise(TDL_ERR_NOMEM, "cannot read %s: out of memory", path);
        return true;
    }
    for (size_t k = 0; k < c.outer * c.per && *st == TDL_OK; k++) {
        hsize_t offset[4], stored = 0;
        size_t first, valid;
        uint32_t mask = 0;
        ckpt_chunk_at(&c, k, offset, &first, &valid);
        if (H5Dget_chunk_storage_size(dset, offset, &stored) < 0 || stored != bytes + 4 ||
            H5Dread_chunk(dset, H5P_DEFAULT, offset, &mask, buf) < 0 || mask != 0) {
            *st = ckpt_h5_raise(TDL_ERR_CORRUPT,
                                "%s: cannot read /%s/%s: a chunk is missing or of the wrong size "
                                "(%llu bytes, expected %zu): the file is damaged",
                                path, gname, t->name, (unsigned long long)stored, bytes + 4);
            break;
        }
        uint32_t f = ckpt_fletcher32(buf, bytes);
        uint32_t got = (uint32_t)buf[bytes] | (uint32_t)buf[bytes + 1] << 8 |
                       (uint32_t)buf[bytes + 2] << 16 | (uint32_t)buf[bytes + 3] << 24;
        uint32_t swapped = __builtin_bswap32(f); /* what HDF5 before 1.6.3 stored; it accepts it */
        if (got != f && got != swapped) {
            *st = tdl_error_raise(TDL_ERR_CORRUPT,
                                  "%s: cannot read /%s/%s: the data fails its Fletcher32 checksum "
                                  "(chunk %zu): the file is damaged",
                                  path, gname, t->name, k);
            break;
        }
        memcpy(t->data + first, buf, valid * sizeof(float));
    }
    free(buf);
    return true;
}

static tdl_status_t ckpt_weights_read_unlocked(const char *path, const char *group,
                                               ckpt_tensor_t *tensors, int count)
{
    tdl_status_t st = ckpt_read_check(path, group, tensors, count);
    if (st != TDL_OK)
        return st;
    hid_t *dsets = malloc((size_t)TDL_MAX(count, 1) * sizeof(*dsets));
    if (!dsets)
        return tdl_error_raise(TDL_ERR_NOMEM, "cannot read %s: no memory for %d datasets", path,
                               count);
    int nopen = 0;
    hid_t file = H5I_INVALID_HID, grp = H5I_INVALID_HID;
    ckpt_h5_quiet_t quiet;
    ckpt_h5_quiet(&quiet);
    st = ckpt_open_read(path, &file);
    if (st == TDL_OK)
        st = ckpt_open_group(path, file, group, &grp);
    if (st == TDL_OK)
        st = ckpt_group_identity(path, grp, group);
    /* Every shape first: a model that does not fit is refused before any tensor changes. */
    for (int i = 0; st == TDL_OK && i < count; i++) {
        st = ckpt_open_dataset(path, grp, group, &tensors[i], &dsets[i]);
        if (st == TDL_OK)
            nopen++;
    }
    for (int i = 0; st == TDL_OK && i < count; i++) {
        if (ckpt_read_direct(path, group, dsets[i], &tensors[i], &st))
            continue;
        if (H5Dread(dsets[i], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensors[i].data) < 0)
            st = ckpt_h5_raise(TDL_ERR_CORRUPT,
                               "%s: cannot read /%s/%s: the data fails its Fletcher32 checksum "
                               "or the file is damaged",
                               path, group, tensors[i].name);
    }
    while (nopen > 0)
        ckpt_h5_close(&dsets[--nopen]);
    ckpt_h5_close(&grp);
    ckpt_h5_close(&file);
    ckpt_h5_restore(&quiet);
    free(dsets);
    return st;
}

static tdl_status_t ckpt_weights_has_group_unlocked(const char *path, const char *group, bool *out)
{
    if (!path || !*path || !ckpt_name_ok(group) || !out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "ckpt_weights_has_group: needs a path, a group name and out");
    ckpt_h5_quiet_t quiet;
    ckpt_h5_quiet(&quiet);
    hid_t file = H5I_INVALID_HID, grp = H5I_INVALID_HID;
    bool has = false;
    tdl_status_t st = ckpt_open_read(path, &file);
    if (st == TDL_OK) {
        st = ckpt_open_group(path, file, group, &grp);
        has = st == TDL_OK;
        if (st == TDL_ERR_NOT_FOUND)
            st = TDL_OK;
    }
    ckpt_h5_close(&grp);
    ckpt_h5_close(&file);
    ckpt_h5_restore(&quiet);
    if (st == TDL_OK)
        *out = has;
    return st;
}

tdl_status_t ckpt_weights_read(const char *path, const char *group, ckpt_tensor_t *tensors,
                               int count)
{
    ckpt_lock();
    tdl_status_t st = ckpt_weights_read_unlocked(path, group, tensors, count);
    ckpt_unlock();
    return st;
}

tdl_status_t ckpt_weights_has_group(const char *path, const char *group, bool *out)
{
    ckpt_lock();
    tdl_status_t st = ckpt_weights_has_group_unlocked(path, group, out);
    ckpt_unlock();
    return st;
}

static tdl_status_t ckpt_group_names_unlocked(const char *path, const char *group, char ***out,
                                              int *count_out)
{
    ckpt_h5_quiet_t quiet;
    ckpt_h5_quiet(&quiet);
    hid_t file = H5I_INVALID_HID, grp = H5I_INVALID_HID;
    char **names = NULL;
    int n = 0;
    H5G_info_t info;
    tdl_status_t st = ckpt_open_read(path, &file);
    if (st == TDL_OK)
        st = ckpt_open_group(path, file, group, &grp);
    if (st == TDL_OK && H5Gget_info(grp, &info) < 0)
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot list /%s", path, group);
    if (st == TDL_OK && info.nlinks > 100000)
        st = tdl_error_raise(TDL_ERR_CORRUPT, "%s: /%s has %llu members", path, group,
                             (unsigned long long)info.nlinks);
    if (st == TDL_OK && !(names = calloc(info.nlinks + 1, sizeof(*names))))
        st = tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory listing /%s", path, group);
    for (hsize_t i = 0; st == TDL_OK && i < info.nlinks; i++, n++) {
        ssize_t len =
            H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
        if (len < 0 || !(names[i] = malloc((size_t)len + 1)) ||
            H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, names[i], (size_t)len + 1,
                               H5P_DEFAULT) < 0)
            st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the name of member %llu of /%s",
                               path, (unsigned long long)i, group);
    }
    ckpt_h5_close(&grp);
    ckpt_h5_close(&file);
    ckpt_h5_restore(&quiet);
    if (st != TDL_OK) {
        ckpt_names_free(names);
        return st;
    }
    *out = names;
    *count_out = n;
    return TDL_OK;
}

tdl_status_t ckpt_group_names(const char *path, const char *group, char ***names_out,
                              int *count_out)
{
    ckpt_lock();
    tdl_status_t st = ckpt_group_names_unlocked(path, group, names_out, count_out);
    ckpt_unlock();
    return st;
}

void ckpt_names_free(char **names)
{
    for (size_t i = 0; names && names[i]; i++)
        free(names[i]);
    free(names);
}
