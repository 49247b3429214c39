/* Writing a checkpoint (doc/checkpoint.md): /model/<name> and /ema/<name> float32 datasets under
 * PyTorch's state_dict names, chunked with the Fletcher32 checksum, further groups of tensors,
 * and the model configuration as scalar root attributes. Files are written atomically (temporary
 * file, fsync, rename, fsync of the directory). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "ckpt/ckpt_internal.h"

/* ---- argument checks --------------------------------------------------------------------- */

static tdl_status_t ckpt_write_check(const char *path, const ckpt_tensor_t *model,
                                     const ckpt_tensor_t *ema, int count, const ckpt_attr_t *attrs,
                                     int nattrs)
{
    if (!path || !*path)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "ckpt_weights_write: no path given");
    if (count < 0 || (count > 0 && !model) || nattrs < 0 || (nattrs > 0 && !attrs))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cannot write %s: %d tensors at %p, %d attributes at %p", path,
                               count, (const void *)model, nattrs, (const void *)attrs);
    for (int i = 0; i < count; i++) {
        tdl_status_t st = ckpt_tensor_check(&model[i], "write", path, "model", i);
        if (st == TDL_OK && ema)
            st = ckpt_tensor_check(&ema[i], "write", path, "ema", i);
        if (st != TDL_OK)
            return st;
        if (ema) {
            bool same = strcmp(ema[i].name, model[i].name) == 0 && ema[i].ndim == model[i].ndim;
            for (int d = 0; same && d < model[i].ndim; d++)
                same = ema[i].shape[d] == model[i].shape[d];
            if (!same)
                return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                       "cannot write %s: ema[%d] (%s) is not the same tensor as "
                                       "model[%d] (%s): the two lists must match name for name "
                                       "and shape for shape",
                                       path, i, ema[i].name, i, model[i].name);
        }
    }
    for (int i = 0; i < nattrs; i++) {
        const ckpt_attr_t *a = &attrs[i];
        if (!a->key || !*a->key || strcmp(a->key, ".") == 0)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "cannot write %s: attrs[%d] has no key",
                                   path, i);
        if (a->type != CKPT_ATTR_INT && a->type != CKPT_ATTR_DOUBLE && a->type != CKPT_ATTR_STRING)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "cannot write %s: attribute %s has the unknown type %d", path,
                                   a->key, (int)a->type);
        if (a->type == CKPT_ATTR_STRING && !a->s)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "cannot write %s: the string attribute %s is NULL", path,
                                   a->key);
    }
    return TDL_OK;
}

/* ---- writing ----------------------------------------------------------------------------- */

/* Writes every chunk of `data` (the tensor's floats, little-endian on this host) with its
 * checksum; buf has room for a chunk and 4 bytes. */
static bool ckpt_write_chunks(hid_t dset, const ckpt_chunks_t *c, const float *data,
                              unsigned char *buf)
{
    size_t bytes = c->elems * sizeof(float);
    for (size_t k = 0; k < c->outer * c->per; k++) {
        hsize_t offset[4];
        size_t first, valid;
        ckpt_chunk_at(c, k, offset, &first, &valid);
        memcpy(buf, data + first, valid * sizeof(float));
        memset(buf + valid * sizeof(float), 0, bytes - valid * sizeof(float));
        uint32_t f = ckpt_fletcher32(buf, bytes);
        for (int i = 0; i < 4; i++) /* HDF5 stores it little-endian after the data */
            buf[bytes + i] = (unsigned char)(f >> (8 * i));
        if (H5Dwrite_chunk(dset, H5P_DEFAULT, 0, offset, bytes + 4, buf) < 0)
            return false;
    }
    return true;
}

static tdl_status_t ckpt_write_dataset(const char *path, hid_t group, const char *gname,
                                       const ckpt_tensor_t *t, const float *data)
{
    htri_t exists = H5Lexists(group, t->name, H5P_DEFAULT);
    if (exists < 0)
        return ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot look up /%s/%s", path, gname,
                             t->name);
    if (exists > 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cannot write %s: the tensor %s is given twice",
                               path, t->name);
    hsize_t dims[4], chunk[4];
    ckpt_dims(t, dims);
    ckpt_chunk_shape(t->ndim, dims, chunk);
    tdl_status_t st = TDL_OK;
    hid_t dset = H5I_INVALID_HID;
    hid_t space = H5Screate_simple(t->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (space < 0 || dcpl < 0 || H5Pset_chunk(dcpl, t->ndim, chunk) < 0 ||
        H5Pset_fletcher32(dcpl) < 0) {
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot describe /%s/%s", path, gname,
                           t->name);
        goto out;
    }
    dset = H5Dcreate2(group, t->name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dset < 0) {
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot create /%s/%s", path, gname,
                           t->name);
        goto out;
    }
    ckpt_chunks_t ch;
    ckpt_chunks_of(t->ndim, dims, chunk, &ch);
    unsigned char *buf = malloc(ch.elems * sizeof(float) + 4);
    bool written = buf && ckpt_write_chunks(dset, &ch, data, buf);
    free(buf);
    if (!written) {
        st = buf ? ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: writing /%s/%s failed", path, gname,
                                 t->name)
                 : tdl_error_raise(TDL_ERR_NOMEM, "cannot write %s: out of memory", path);
        goto out;
    }
    herr_t rc = H5Dclose(dset);
    dset = H5I_INVALID_HID;
    if (rc < 0)
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: writing /%s/%s failed", path, gname,
                           t->name);
out:
    if (dset >= 0)
        H5Dclose(dset); /* unlike H5Idec_ref, releases the ID even when its flush fails */
    ckpt_h5_close(&dcpl);
    ckpt_h5_close(&space);
    return st;
}

static tdl_status_t ckpt_write_attr(const char *path, hid_t file, const ckpt_attr_t *a)
{
    htri_t exists = H5Aexists(file, a->key);
    if (exists < 0)
        return ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot look up the attribute %s", path,
                             a->key);
    if (exists > 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "cannot write %s: the attribute %s is given twice (format_version, "
                               "tidal_version and created are written by ckpt itself)",
                               path, a->key);
    tdl_status_t st = TDL_OK;
    hid_t attr = H5I_INVALID_HID, strtype = H5I_INVALID_HID;
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t ftype = H5T_STD_I64LE, mtype = H5T_NATIVE_INT64;
    const void *value = &a->i;
    if (a->type == CKPT_ATTR_DOUBLE) {
        ftype = H5T_IEEE_F64LE;
        mtype = H5T_NATIVE_DOUBLE;
        value = &a->d;
    } else if (a->type == CKPT_ATTR_STRING) {
        /* variable length: any size, and h5py reads it as str */
        strtype = H5Tcopy(H5T_C_S1);
        if (strtype < 0 || H5Tset_size(strtype, H5T_VARIABLE) < 0 ||
            H5Tset_cset(strtype, H5T_CSET_UTF8) < 0) {
            st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: no string type for attribute %s", path,
                               a->key);
            goto out;
        }
        ftype = mtype = strtype;
        value = &a->s;
    }
    if (space < 0) {
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: no data space for attribute %s", path,
                           a->key);
        goto out;
    }
    attr = H5Acreate2(file, a->key, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0 || H5Awrite(attr, mtype, value) < 0) {
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot write the attribute %s", path,
                           a->key);
        goto out;
    }
    herr_t rc = H5Aclose(attr);
    attr = H5I_INVALID_HID;
    if (rc < 0)
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot write the attribute %s", path,
                           a->key);
out:
    if (attr >= 0)
        H5Aclose(attr);
    ckpt_h5_close(&space);
    ckpt_h5_close(&strtype);
    return st;
}

/* /<gname>/<name> for every tensor, with data from `data[i].data`, and the group's attributes. */
static tdl_status_t ckpt_write_group(const char *path, hid_t file, const char *gname,
                                     const ckpt_tensor_t *tensors, const ckpt_tensor_t *data,
                                     int count, const ckpt_attr_t *attrs, int nattrs)
{
    /* Nested names ("optim/adamw/m") create their parents. */
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (lcpl >= 0)
        H5Pset_create_intermediate_group(lcpl, 1);
    hid_t group = H5Gcreate2(file, gname, lcpl >= 0 ? lcpl : H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (lcpl >= 0)
        H5Pclose(lcpl);
    if (group < 0)
        return ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot create the group /%s", path,
                             gname);
    /* The group's own path, so that a reader notices groups moved or swapped (/model and /ema
     * hold the same names and shapes) */
    const ckpt_attr_t self = {.key = CKPT_GROUP_ATTR, .type = CKPT_ATTR_STRING, .s = gname};
    tdl_status_t st = ckpt_write_attr(path, group, &self);
    for (int i = 0; i < nattrs && st == TDL_OK; i++)
        st = ckpt_write_attr(path, group, &attrs[i]);
    for (int i = 0; i < count && st == TDL_OK; i++)
        st = ckpt_write_dataset(path, group, gname, &tensors[i], data[i].data);
    if (H5Gclose(group) < 0 && st == TDL_OK)
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot close the group /%s", path, gname);
    return st;
}

static tdl_status_t ckpt_write_contents(const char *path, hid_t file, const ckpt_tensor_t *model,
                                        const ckpt_tensor_t *ema, int count,
                                        const ckpt_group_t *extra, int nextra,
                                        const ckpt_attr_t *attrs, int nattrs)
{
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || !strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(created, sizeof(created), "unknown");
    const ckpt_attr_t own[] = {
        {.key = "format_version", .type = CKPT_ATTR_INT, .i = CKPT_FORMAT_VERSION},
        {.key = "tidal_version", .type = CKPT_ATTR_STRING, .s = tdl_version()},
        {.key = "created", .type = CKPT_ATTR_STRING, .s = created},
    };
    tdl_status_t st = TDL_OK;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(own) && st == TDL_OK; i++)
        st = ckpt_write_attr(path, file, &own[i]);
    for (int i = 0; i < nattrs && st == TDL_OK; i++)
        st = ckpt_write_attr(path, file, &attrs[i]);
    if (st == TDL_OK)
        st = ckpt_write_group(path, file, "model", model, model, count, NULL, 0);
    if (st == TDL_OK && ema)
        st = ckpt_write_group(path, file, "ema", model, ema, count, NULL, 0);
    for (int g = 0; g < nextra && st == TDL_OK; g++)
        st = ckpt_write_group(path, file, extra[g].name, extra[g].tensors, extra[g].tensors,
                              extra[g].count, extra[g].attrs, extra[g].nattrs);
    return st;
}

/* HDF5 1.10 does not survive a failed write at close: when H5Fclose cannot flush (a full disk),
 * the file ID stays registered with its structure freed, and H5close crashes on it at exit. So
 * after any failure (a dataset that could not be written, a name given twice) HDF5's descriptor is
 * pointed at an anonymous memory file before the close; the temporary file is removed anyway, and
 * the close, which flushes, succeeds and frees everything. A failed H5Fflush leaves the metadata
 * cache unable to flush again, hence the reservation below before it. Only the sec2 driver (the
 * default) has a descriptor to move. */
static void ckpt_h5_discard_writes(hid_t file)
{
    hid_t fapl = H5Fget_access_plist(file);
    bool sec2 = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2;
    ckpt_h5_close(&fapl);
    int *hdf5_fd = NULL;
    if (!sec2 || H5Fget_vfd_handle(file, H5P_DEFAULT, (void **)&hdf5_fd) < 0 || !hdf5_fd ||
        *hdf5_fd < 0)
        return;
    int sink = memfd_create("tidal-ckpt-discard", MFD_CLOEXEC);
    if (sink < 0)
        return;
    (void)dup3(sink, *hdf5_fd, O_CLOEXEC);
    close(sink);
}

/* The other half of the defence above: the metadata HDF5 writes at the final flush lies below its
 * end of allocated space, so reserving the file's blocks up to there turns a full disk into our
 * own error, before the flush. KEEP_SIZE: the file's length stays what HDF5 writes, which its
 * truncation check on open relies on. File systems without fallocate go on unreserved. */
static tdl_status_t ckpt_reserve(const char *path, const char *tmp, int fd, hid_t file)
{
    hsize_t size = 0;
    if (H5Fget_filesize(file, &size) < 0)
        return ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: cannot get the size of %s", path, tmp);
    if (size == 0 || fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)size) == 0)
        return TDL_OK;
    if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)
        return TDL_OK;
    return tdl_error_raise(TDL_ERR_IO, "cannot write %s: cannot reserve %llu bytes for %s: %s",
                           path, (unsigned long long)size, tmp, strerror(errno));
}

static tdl_status_t ckpt_file_write_unlocked(const char *path, const ckpt_tensor_t *model,
                                             const ckpt_tensor_t *ema, int count,
                                             const ckpt_group_t *extra, int nextra,
                                             const ckpt_attr_t *attrs, int nattrs)
{
    tdl_status_t st = ckpt_write_check(path, model, ema, count, attrs, nattrs);
    for (int g = 0; g < nextra && st == TDL_OK; g++) {
        if (!extra[g].name || !*extra[g].name || extra[g].count < 0 ||
            (extra[g].count > 0 && !extra[g].tensors))
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "cannot write %s: extra group %d is "
                                   "malformed",
                                   path, g);
        for (int i = 0; i < extra[g].count && st == TDL_OK; i++)
            st = ckpt_tensor_check(&extra[g].tensors[i], "write", path, extra[g].name, i);
    }
    if (st != TDL_OK)
        return st;
    char tmp[PATH_MAX];
    int len = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof(tmp))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "cannot write %s: the path is too long", path);

    /* Our own descriptor gives the exact errno when the file cannot be created, and fsyncs the
     * file after HDF5 has closed it. */
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return tdl_error_raise(TDL_ERR_IO,
                               "cannot write %s: cannot create %s: %s: check that the directory "
                               "exists and is writable",
                               path, tmp, strerror(errno));
    ckpt_h5_quiet_t quiet;
    ckpt_h5_quiet(&quiet);
    /* The 1.8 format and later: object headers, the superblock and the group indexes carry
     * checksums of their own, so a flipped byte in the metadata is found, not only in the data.
     * HDF5 1.8 and later and h5py read it. */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0)
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl >= 0 ? fapl : H5P_DEFAULT);
    ckpt_h5_close(&fapl);
    if (file < 0) {
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: HDF5 cannot create %s", path, tmp);
        goto err_tmp;
    }
    st = ckpt_write_contents(path, file, model, ema, count, extra, nextra, attrs, nattrs);
    if (st == TDL_OK)
        st = ckpt_reserve(path, tmp, fd, file);
    if (st == TDL_OK && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0)
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: flushing %s failed", path, tmp);
    if (st != TDL_OK)
        ckpt_h5_discard_writes(file);
    if (H5Fclose(file) < 0 && st == TDL_OK)
        st = ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: closing %s failed", path, tmp);
    if (st != TDL_OK)
        goto err_tmp;
    st = tdl_file_commit(fd, tmp, path);
    fd = -1;
    if (st != TDL_OK)
        goto err_tmp;
    ckpt_h5_restore(&quiet);
    return TDL_OK;

err_tmp:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    ckpt_h5_restore(&quiet);
    return st;
}

tdl_status_t ckpt_weights_write(const char *path, const ckpt_tensor_t *model,
                                const ckpt_tensor_t *ema, int count, const ckpt_attr_t *attrs,
                                int nattrs)
{
    ckpt_lock();
    tdl_status_t st = ckpt_file_write_unlocked(path, model, ema, count, NULL, 0, attrs, nattrs);
    ckpt_unlock();
    return st;
}

tdl_status_t ckpt_file_write(const char *path, const ckpt_tensor_t *model, const ckpt_tensor_t *ema,
                             int count, const ckpt_group_t *extra, int nextra,
                             const ckpt_attr_t *attrs, int nattrs)
{
    ckpt_lock();
    tdl_status_t st =
        ckpt_file_write_unlocked(path, model, ema, count, extra, nextra, attrs, nattrs);
    ckpt_unlock();
    return st;
}
