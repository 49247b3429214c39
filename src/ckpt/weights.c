/* Model weights in an HDF5 file (doc/checkpoint.md): /model/<name> and /ema/<name> float32
 * datasets under PyTorch's state_dict names, chunked with the Fletcher32 checksum, and the model
 * configuration as scalar root attributes. Files are written atomically (temporary file, fsync,
 * rename, fsync of the directory).
 *
 * HDF5 is the parallel build, used serially with default property lists, which it allows without
 * MPI_Init. Every public function silences HDF5's automatic error printing and turns a failed
 * HDF5 call into a tdl error naming the file and the object, with HDF5's own innermost reason. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>
#include <pthread.h>

#include "ckpt/ckpt.h"

/* Largest chunk: big enough for sequential I/O, small enough for HDF5's default 1 MiB chunk
 * cache, which a chunk must fit to be cached. */
#define CKPT_CHUNK_BYTES ((size_t)1 << 20)

/* ---- HDF5 errors ------------------------------------------------------------------------- */

typedef struct {
    H5E_auto2_t func;
    void *data;
} ckpt_h5_quiet_t;

static void ckpt_h5_quiet(ckpt_h5_quiet_t *saved)
{
    H5Eget_auto2(H5E_DEFAULT, &saved->func, &saved->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void ckpt_h5_restore(const ckpt_h5_quiet_t *saved)
{
    H5Eset_auto2(H5E_DEFAULT, saved->func, saved->data);
}

typedef struct {
    hid_t io_major, lock_minor; /* H5E_IO, H5E_CANTLOCKFILE, looked up before the walk */
    char desc[320];             /* the innermost error: where the failure started */
    bool os; /* the operating system refused (read, write, lock), not the file's bytes */
} ckpt_h5_why_t;

static herr_t ckpt_h5_walk(unsigned n, const H5E_error2_t *err, void *data)
{
    ckpt_h5_why_t *why = data;
    /* Only the innermost error tells: HDF5 files a failed checksum under "Low-level I/O" on the
     * way up. */
    if (n == 0) {
        snprintf(why->desc, sizeof(why->desc), "%s", err->desc ? err->desc : "no detail");
        for (char *c = why->desc; *c; c++)
            if ((unsigned char)*c < ' ')
                *c = ' '; /* the time in a failed write's detail ends in a newline */
        why->os = err->maj_num == why->io_major;
    }
    if (err->min_num == why->lock_minor)
        why->os = true;
    return 0;
}

/* Raises `status` with the message and HDF5's reason for the call that just failed; an error of
 * the operating system becomes TDL_ERR_IO whatever `status` says. Call it before any other HDF5
 * call, which would clear the error stack. */
static tdl_status_t ckpt_h5_raise(tdl_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tdl_status_t ckpt_h5_raise(tdl_status_t status, const char *fmt, ...)
{
    ckpt_h5_why_t why = {
        .io_major = H5E_IO, .lock_minor = H5E_CANTLOCKFILE, .desc = "no detail", .os = false};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, ckpt_h5_walk, &why);
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return tdl_error_raise(why.os ? TDL_ERR_IO : status, "%s (HDF5: %s)", msg, why.desc);
}

static void ckpt_h5_close(hid_t *id)
{
    if (*id >= 0)
        H5Idec_ref(*id);
    *id = H5I_INVALID_HID;
}

/* ---- argument checks --------------------------------------------------------------------- */

/* A link name inside a group: HDF5 would read '/' as a path and "." as the group itself. */
static bool ckpt_name_ok(const char *name)
{
    return name && *name && !strchr(name, '/') && strcmp(name, ".") != 0;
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

static void ckpt_dims(const ckpt_tensor_t *t, hsize_t *dims)
{
    for (int d = 0; d < t->ndim; d++)
        dims[d] = (hsize_t)t->shape[d];
}

/* The tensor's own fields; messages start "cannot <verb> <path>: <list>[<i>]". */
static tdl_status_t ckpt_tensor_check(const ckpt_tensor_t *t, const char *verb, const char *path,
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

/* Row slabs: the trailing dimensions stay whole while a chunk fits in CKPT_CHUNK_BYTES, so each
 * chunk is one contiguous run of the C-order array. The split dimension is cut into equal parts:
 * HDF5 stores an edge chunk at full size, so [600, 500] is two chunks of 300 rows, not 524 + 76
 * padded to 524. */
static void ckpt_chunk_shape(int ndim, const hsize_t *dims, hsize_t *chunk)
{
    for (int d = 0; d < ndim; d++)
        chunk[d] = dims[d];
    for (int d = 0; d < ndim; d++) {
        size_t step = sizeof(float); /* bytes of one index along d */
        for (int e = d + 1; e < ndim; e++)
            step *= (size_t)dims[e];
        if (step * (size_t)dims[d] <= CKPT_CHUNK_BYTES)
            return;
        if (step <= CKPT_CHUNK_BYTES) {
            hsize_t most = CKPT_CHUNK_BYTES / step;
            hsize_t parts = (dims[d] + most - 1) / most;
            chunk[d] = (dims[d] + parts - 1) / parts;
            return;
        }
        chunk[d] = 1;
    }
}

/* ---- direct chunk I/O ------------------------------------------------------------------------
 * HDF5's Fletcher32 filter reads the data a byte at a time and copies every chunk through its
 * pipeline; at checkpoint sizes that is most of the time spent. tidal computes the same checksum
 * itself, in the same blocks of 360 words (so every intermediate sum is the one HDF5's algorithm
 * reaches, bit for bit), and moves whole chunks with H5Dwrite_chunk and H5Dread_chunk. The files
 * are the same: any HDF5 reader applies the filter and checks the checksum as usual
 * (tests/unit/test_ckpt_weights compares with the library's own filter). */

/* The Fletcher32 checksum of HDF5 (H5_checksum_fletcher32): big-endian 16-bit words, sums
 * folded every 360 words, an odd last byte as the high byte of a word. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default"), optimize("O3")))
#endif
uint32_t ckpt_fletcher32(const void *data, size_t len)
{
    const uint8_t *d = data;
    size_t words = len / 2;
    uint64_t sum1 = 0, sum2 = 0;
    while (words) {
        size_t t = words > 360 ? 360 : words;
        words -= t;
        /* sum1 += w_i; sum2 += sum1 after each: over the block, sum2 gains t * sum1 (from
         * before) plus sum_i (t - i) w_i, all below 2^32 as HDF5's 32-bit sums are */
        uint32_t a = 0, b = 0;
        for (size_t i = 0; i < t; i++) {
            uint32_t w = (uint32_t)d[2 * i] << 8 | d[2 * i + 1];
            a += w;
            b += (uint32_t)(t - i) * w;
        }
        d += 2 * t;
        sum2 += t * sum1 + b;
        sum1 += a;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (len % 2) {
        sum1 += (uint32_t)*d << 8;
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (uint32_t)(sum2 << 16 | sum1);
}

/* The chunks of a tensor laid out by ckpt_chunk_shape: dims before `split` are cut to 1, `split`
 * into slabs of chunk[split], the rest whole, so every chunk is one contiguous run of the array;
 * the last slab may hang past the end (HDF5 stores it whole, padded with zeros). */
typedef struct ckpt_chunks {
    int ndim, split;
    hsize_t dims[4], chunk[4];
    size_t inner;    /* elements of one index along `split` (the trailing dims) */
    size_t outer;    /* chunks before the split's: product of dims before it */
    size_t per;      /* slabs along the split */
    size_t elems;    /* elements in a whole chunk */
} ckpt_chunks_t;

static void ckpt_chunks_of(int ndim, const hsize_t *dims, const hsize_t *chunk, ckpt_chunks_t *c)
{
    c->ndim = ndim;
    c->split = 0; /* the last dim cut (a whole tensor: 0, in one slab) */
    for (int d = 0; d < ndim; d++) {
        c->dims[d] = dims[d], c->chunk[d] = chunk[d];
        if (chunk[d] != dims[d])
            c->split = d;
    }
    c->inner = 1, c->outer = 1;
    for (int d = c->split + 1; d < ndim; d++)
        c->inner *= (size_t)dims[d];
    for (int d = 0; d < c->split; d++)
        c->outer *= (size_t)dims[d];
    c->per = (size_t)((dims[c->split] + chunk[c->split] - 1) / chunk[c->split]);
    c->elems = (size_t)chunk[c->split] * c->inner;
}

/* Chunk k (0 <= k < outer * per): its offset in the dataspace, its first element in the flat
 * array, and how many of its elements lie inside the tensor. */
static void ckpt_chunk_at(const ckpt_chunks_t *c, size_t k, hsize_t *offset, size_t *first,
                          size_t *valid)
{
    size_t o = k / c->per, p = k % c->per;
    size_t rem = o;
    for (int d = c->split - 1; d >= 0; d--) {
        offset[d] = rem % c->dims[d];
        rem /= c->dims[d];
    }
    offset[c->split] = (hsize_t)p * c->chunk[c->split];
    for (int d = c->split + 1; d < c->ndim; d++)
        offset[d] = 0;
    size_t rows = (size_t)c->dims[c->split];
    *first = (o * rows + (size_t)offset[c->split]) * c->inner;
    size_t left = rows - (size_t)offset[c->split];
    *valid = (left < c->chunk[c->split] ? left : (size_t)c->chunk[c->split]) * c->inner;
}

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
        st = buf ? ckpt_h5_raise(TDL_ERR_IO, "cannot write %s: writing /%s/%s failed", path,
                                 gname, t->name)
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

static tdl_status_t ckpt_write_attr(const char *path, hid_t file, const ckpt_attr_t *a);

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
                                             const ckpt_attr_t *attrs, int nattrs);

tdl_status_t ckpt_weights_write(const char *path, const ckpt_tensor_t *model,
                                const ckpt_tensor_t *ema, int count, const ckpt_attr_t *attrs,
                                int nattrs)
{
    ckpt_lock();
    tdl_status_t st = ckpt_file_write_unlocked(path, model, ema, count, NULL, 0, attrs, nattrs);
    ckpt_unlock();
    return st;
}

static tdl_status_t ckpt_file_write_unlocked(const char *path, const ckpt_tensor_t *model,
                             const ckpt_tensor_t *ema, int count, const ckpt_group_t *extra,
                             int nextra, const ckpt_attr_t *attrs, int nattrs)
{
    tdl_status_t st = ckpt_write_check(path, model, ema, count, attrs, nattrs);
    for (int g = 0; g < nextra && st == TDL_OK; g++) {
        if (!extra[g].name || !*extra[g].name || extra[g].count < 0 ||
            (extra[g].count > 0 && !extra[g].tensors))
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "cannot write %s: extra group %d is "
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

/* ---- reading ----------------------------------------------------------------------------- */

/* Opens a checkpoint read-only; the caller has silenced HDF5's error printing. */
static tdl_status_t ckpt_open_read(const char *path, hid_t *file_out)
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

/* What a dataset or attribute holds, for messages. */
static const char *ckpt_class_str(H5T_class_t c)
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

/* Opens /<group>; a missing one is TDL_ERR_NOT_FOUND. */
static tdl_status_t ckpt_open_group(const char *path, hid_t file, const char *group,
                                    hid_t *group_out)
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

static tdl_status_t ckpt_attr_copy_string(const char *path, const char *key, hid_t attr, hid_t type,
                                          char **out);

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
                H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, t->ndim, chunk) == t->ndim &&
                H5Pget_nfilters(dcpl) == 1 &&
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

static tdl_status_t ckpt_weights_read_unlocked(const char *path, const char *group, ckpt_tensor_t *tensors,
                               int count)
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

/* ---- root attributes and groups ---------------------------------------------------------- */

/* Opens the file and its root attribute `key`, which must hold one value. */
static tdl_status_t ckpt_attr_open(const char *path, const char *key, hid_t *file_out,
                                   hid_t *attr_out)
{
    if (!path || !*path || !key || !*key)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "ckpt attribute lookup: no %s given",
                               !path || !*path ? "path" : "key");
    hid_t file = H5I_INVALID_HID, attr = H5I_INVALID_HID, space = H5I_INVALID_HID;
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
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s: the attribute %s holds %lld values, not one", path, key,
                             (long long)n);
        goto err;
    }
    ckpt_h5_close(&space);
    *file_out = file;
    *attr_out = attr;
    return TDL_OK;

err:
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
    tdl_status_t st = ckpt_attr_open(path, key, &file, &attr);
    if (st != TDL_OK)
        goto out;
    type = H5Aget_type(attr);
    if (type < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the type of the attribute %s",
                           path, key);
        goto out;
    }
    H5T_class_t cls = H5Tget_class(type);
    if (!(cls == H5T_INTEGER && accept_int) && !(cls == H5T_FLOAT && accept_float)) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s: the attribute %s holds %s data, expected %s", path, key,
                             ckpt_class_str(cls), want);
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
static tdl_status_t ckpt_attr_copy_string(const char *path, const char *key, hid_t attr, hid_t type,
                                          char **out)
{
    tdl_status_t st = TDL_OK;
    char *copy = NULL;
    hid_t mtype = H5Tcopy(H5T_C_S1);
    htri_t vlen = H5Tis_variable_str(type);
    if (mtype < 0 || vlen < 0 || H5Tset_cset(mtype, H5Tget_cset(type)) < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the type of the attribute %s",
                           path, key);
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
    tdl_status_t st = ckpt_attr_open(path, key, &file, &attr);
    if (st != TDL_OK)
        goto out;
    type = H5Aget_type(attr);
    if (type < 0) {
        st = ckpt_h5_raise(TDL_ERR_CORRUPT, "%s: cannot read the type of the attribute %s",
                           path, key);
        goto out;
    }
    H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_STRING) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s: the attribute %s holds %s data, expected a string", path,
                             key, ckpt_class_str(cls));
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

/* ---- one caller at a time: HDF5 is built without thread safety ---------------------------- */

static pthread_mutex_t ckpt_mutex = PTHREAD_MUTEX_INITIALIZER;

void ckpt_lock(void)
{
    pthread_mutex_lock(&ckpt_mutex);
}

void ckpt_unlock(void)
{
    pthread_mutex_unlock(&ckpt_mutex);
}

tdl_status_t ckpt_file_write(const char *path, const ckpt_tensor_t *model,
                             const ckpt_tensor_t *ema, int count, const ckpt_group_t *extra,
                             int nextra, const ckpt_attr_t *attrs, int nattrs)
{
    ckpt_lock();
    tdl_status_t st = ckpt_file_write_unlocked(path, model, ema, count, extra, nextra, attrs, nattrs);
    ckpt_unlock();
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

tdl_status_t ckpt_weights_has_group(const char *path, const char *group, bool *out)
{
    ckpt_lock();
    tdl_status_t st = ckpt_weights_has_group_unlocked(path, group, out);
    ckpt_unlock();
    return st;
}
