/* A user image data set, or a latent data set from tidal encode, in one HDF5 file (also
 * described in doc/data.md):
 *
 *   /images      uint8 [N, H, W] (grayscale, C = 1) or uint8 [N, C, H, W] with C = 1 or 3
 *                (RGB); square images (H == W), pixel values 0..255, 0 the background.
 *   /labels      any integer type, [N]: the class of each image, in [0, num_classes).
 *   num_classes  optional integer attribute on the root group; without it, max label + 1.
 *
 * or, in place of /images, /latents float32 [N, C, H, W] (H == W): a VAE's latents, served as
 * they are. Images of size S are served at resolutions S, 2S and 4S (nearest-neighbour
 * upsampling).
 * Chunking, compression and the file's other contents do not matter. In h5py:
 *
 *   with h5py.File("faces.h5", "w") as f:
 *       f["images"] = images.astype("uint8")   # [N, 64, 64] or [N, 3, 64, 64]
 *       f["labels"] = labels.astype("int32")   # [N]
 *       f.attrs["num_classes"] = 10
 *
 * The only file of src/train that includes hdf5.h (DESIGN.md: hdf5.h stays in src/ckpt and this
 * loader). The file is read with the serial API and default property lists, which parallel HDF5
 * allows without MPI_Init. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "ckpt/ckpt.h"

#include "train/train.h"

#define H5_HINT "see doc/data.md for the format"

typedef struct {
    const char *path;
    hid_t file;
    hid_t dimages, dlabels;
    hid_t itype, ispace, ltype, lspace;
    hid_t attr, atype, aspace;
    uint8_t *pixels;
    float *latents;
    int64_t *raw_labels;
    int32_t *labels32;
} h5_load_t;

static void h5_load_close(h5_load_t *ld)
{
    free(ld->labels32);
    free(ld->raw_labels);
    free(ld->latents);
    free(ld->pixels);
    /* in reverse order of opening, the file last */
    hid_t ids[] = {ld->aspace, ld->atype, ld->attr,    ld->lspace, ld->ltype,
                   ld->ispace, ld->itype, ld->dlabels, ld->dimages};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(ids); i++)
        if (ids[i] >= 0)
            H5Idec_ref(ids[i]);
    if (ld->file >= 0)
        H5Fclose(ld->file);
}

/* Opens dataset /name with its type and data space; a missing one is TDL_ERR_NOT_FOUND. */
static tdl_status_t h5_open_dataset(h5_load_t *ld, const char *name, hid_t *dset, hid_t *type,
                                    hid_t *space)
{
    htri_t exists = H5Lexists(ld->file, name, H5P_DEFAULT);
    if (exists <= 0)
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "%s has no dataset /%s: %s", ld->path, name,
                               H5_HINT);
    *dset = H5Dopen2(ld->file, name, H5P_DEFAULT);
    if (*dset < 0)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: /%s is not a readable dataset: %s", ld->path,
                               name, H5_HINT);
    *type = H5Dget_type(*dset);
    *space = H5Dget_space(*dset);
    if (*type < 0 || *space < 0)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: cannot read the type and shape of /%s",
                               ld->path, name);
    if (H5Tget_class(*type) != H5T_INTEGER)
        return tdl_error_raise(TDL_ERR_MISMATCH, "%s: /%s does not hold integers: %s", ld->path,
                               name, H5_HINT);
    return TDL_OK;
}

/* /images: shape and uint8 pixels. */
static tdl_status_t h5_read_images(h5_load_t *ld, size_t *n_out, int *c_out, int *side_out)
{
    tdl_status_t st = h5_open_dataset(ld, "images", &ld->dimages, &ld->itype, &ld->ispace);
    if (st != TDL_OK)
        return st;
    if (H5Tget_size(ld->itype) != 1 || H5Tget_sign(ld->itype) != H5T_SGN_NONE)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: /images holds %zu-byte %s integers; it must be uint8 (pixel "
                               "values 0..255): %s",
                               ld->path, H5Tget_size(ld->itype),
                               H5Tget_sign(ld->itype) == H5T_SGN_NONE ? "unsigned" : "signed",
                               H5_HINT);
    int rank = H5Sget_simple_extent_ndims(ld->ispace);
    if (rank != 3 && rank != 4)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: /images has rank %d; it must be [N, H, W] or [N, C, H, W]: %s",
                               ld->path, rank, H5_HINT);
    hsize_t dims[4];
    H5Sget_simple_extent_dims(ld->ispace, dims, NULL);
    hsize_t n = dims[0], c = rank == 4 ? dims[1] : 1, h = dims[rank - 2], w = dims[rank - 1];
    if (n == 0)
        return tdl_error_raise(TDL_ERR_MISMATCH, "%s: /images holds no images", ld->path);
    if (c != 1 && c != 3)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: /images has %llu channels; it must have 1 (grayscale) or 3 "
                               "(RGB): %s",
                               ld->path, (unsigned long long)c, H5_HINT);
    if (h != w || h == 0 || h > 8192)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: /images holds %llu x %llu images; they must be square, at "
                               "most 8192 x 8192: %s",
                               ld->path, (unsigned long long)h, (unsigned long long)w, H5_HINT);
    size_t per_image = (size_t)(c * h * w);
    if (n > SIZE_MAX / per_image)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: /images is too large for memory", ld->path);
    ld->pixels = malloc((size_t)n * per_image);
    if (!ld->pixels)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: cannot allocate %llu bytes for /images",
                               ld->path, (unsigned long long)(n * per_image));
    if (H5Dread(ld->dimages, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, ld->pixels) < 0)
        return tdl_error_raise(TDL_ERR_IO, "%s: cannot read /images (damaged file?)", ld->path);
    *n_out = (size_t)n;
    *c_out = (int)c;
    *side_out = (int)h;
    return TDL_OK;
}

/* /latents: float32 [N, C, H, W], H == W; read as float whatever its float type. */
static tdl_status_t h5_read_latents(h5_load_t *ld, size_t *n_out, int *c_out, int *side_out)
{
    ld->dimages = H5Dopen2(ld->file, "latents", H5P_DEFAULT);
    if (ld->dimages < 0)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: /latents is not a readable dataset: %s",
                               ld->path, H5_HINT);
    ld->itype = H5Dget_type(ld->dimages);
    ld->ispace = H5Dget_space(ld->dimages);
    if (ld->itype < 0 || ld->ispace < 0 || H5Tget_class(ld->itype) != H5T_FLOAT)
        return tdl_error_raise(TDL_ERR_MISMATCH, "%s: /latents does not hold floats: %s", ld->path,
                               H5_HINT);
    int rank = H5Sget_simple_extent_ndims(ld->ispace);
    hsize_t d[4] = {0};
    if (rank == 4)
        H5Sget_simple_extent_dims(ld->ispace, d, NULL);
    if (rank != 4 || d[0] == 0 || d[1] < 1 || d[1] > 64 || d[2] != d[3] || d[2] < 1 || d[2] > 1024)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: /latents must be [N, C, H, W] with N >= 1, C 1 to 64, H == W "
                               "up to 1024 (rank %d, [%llu, %llu, %llu, %llu]): %s",
                               ld->path, rank, (unsigned long long)d[0], (unsigned long long)d[1],
                               (unsigned long long)d[2], (unsigned long long)d[3], H5_HINT);
    size_t per = (size_t)(d[1] * d[2] * d[3]);
    if (d[0] > SIZE_MAX / per / sizeof(float) ||
        !(ld->latents = tdl_malloc((size_t)d[0] * per * sizeof(float))))
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: cannot allocate /latents", ld->path);
    if (H5Dread(ld->dimages, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, ld->latents) < 0)
        return tdl_error_raise(TDL_ERR_IO, "%s: cannot read /latents (damaged file?)", ld->path);
    for (size_t i = 0; i < (size_t)d[0] * per; i++)
        if (!isfinite(ld->latents[i]))
            return tdl_error_raise(TDL_ERR_CORRUPT, "%s: /latents[%zu] (flat) is %g", ld->path,
                                   i / per, (double)ld->latents[i]);
    *n_out = (size_t)d[0];
    *c_out = (int)d[1];
    *side_out = (int)d[2];
    return TDL_OK;
}

/* /labels: n integers, read as int64 whatever their stored type. */
static tdl_status_t h5_read_labels(h5_load_t *ld, size_t n)
{
    tdl_status_t st = h5_open_dataset(ld, "labels", &ld->dlabels, &ld->ltype, &ld->lspace);
    if (st != TDL_OK)
        return st;
    int rank = H5Sget_simple_extent_ndims(ld->lspace);
    if (rank != 1)
        return tdl_error_raise(TDL_ERR_MISMATCH, "%s: /labels has rank %d; it must be [N]: %s",
                               ld->path, rank, H5_HINT);
    hsize_t len;
    H5Sget_simple_extent_dims(ld->lspace, &len, NULL);
    if (len != n)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: /labels holds %llu labels but /images holds %zu images; "
                               "there must be one label per image",
                               ld->path, (unsigned long long)len, n);
    ld->raw_labels = malloc(n * sizeof(*ld->raw_labels));
    if (!ld->raw_labels)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: cannot allocate %zu labels", ld->path, n);
    if (H5Dread(ld->dlabels, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ld->raw_labels) < 0)
        return tdl_error_raise(TDL_ERR_IO, "%s: cannot read /labels (damaged file?)", ld->path);
    return TDL_OK;
}

/* The root attribute num_classes, or 0 when there is none. */
static tdl_status_t h5_read_num_classes(h5_load_t *ld, int64_t *num_classes_out)
{
    htri_t exists = H5Aexists(ld->file, "num_classes");
    if (exists < 0)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: cannot read the root group's attributes",
                               ld->path);
    if (exists == 0) {
        *num_classes_out = 0;
        return TDL_OK;
    }
    ld->attr = H5Aopen(ld->file, "num_classes", H5P_DEFAULT);
    if (ld->attr < 0)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s: cannot open the attribute num_classes",
                               ld->path);
    ld->atype = H5Aget_type(ld->attr);
    ld->aspace = H5Aget_space(ld->attr);
    if (ld->atype < 0 || ld->aspace < 0 || H5Tget_class(ld->atype) != H5T_INTEGER ||
        H5Sget_simple_extent_npoints(ld->aspace) != 1)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: the root attribute num_classes must be one integer: %s",
                               ld->path, H5_HINT);
    int64_t v;
    if (H5Aread(ld->attr, H5T_NATIVE_INT64, &v) < 0)
        return tdl_error_raise(TDL_ERR_IO, "%s: cannot read the attribute num_classes", ld->path);
    if (v < 1 || v > INT32_MAX)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: the root attribute num_classes is %lld; it must be in [1, %d]",
                               ld->path, (long long)v, INT32_MAX);
    *num_classes_out = v;
    return TDL_OK;
}

static tdl_status_t h5_load(h5_load_t *ld, train_dataset_t **out)
{
    if (H5Fis_hdf5(ld->path) <= 0)
        return tdl_error_raise(TDL_ERR_CORRUPT, "%s is not an HDF5 file: %s", ld->path, H5_HINT);
    ld->file = H5Fopen(ld->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (ld->file < 0)
        return tdl_error_raise(TDL_ERR_IO, "cannot open the HDF5 file %s", ld->path);
    size_t n = 0;
    int channels = 0, side = 0;
    bool latent = H5Lexists(ld->file, "latents", H5P_DEFAULT) > 0;
    tdl_status_t st = latent ? h5_read_latents(ld, &n, &channels, &side)
                             : h5_read_images(ld, &n, &channels, &side);
    if (st != TDL_OK)
        return st;
    st = h5_read_labels(ld, n);
    if (st != TDL_OK)
        return st;
    int64_t num_classes = 0;
    st = h5_read_num_classes(ld, &num_classes);
    if (st != TDL_OK)
        return st;

    int64_t max_label = -1;
    for (size_t i = 0; i < n; i++) {
        int64_t v = ld->raw_labels[i];
        if (num_classes > 0 && (v < 0 || v >= num_classes))
            return tdl_error_raise(TDL_ERR_CORRUPT,
                                   "%s: /labels[%zu] is %lld, outside [0, %lld) (num_classes "
                                   "from the root attribute)",
                                   ld->path, i, (long long)v, (long long)num_classes);
        if (v < 0 || v >= INT32_MAX)
            return tdl_error_raise(TDL_ERR_CORRUPT,
                                   "%s: /labels[%zu] is %lld; labels are class numbers in [0, "
                                   "%d)",
                                   ld->path, i, (long long)v, INT32_MAX);
        max_label = TDL_MAX(max_label, v);
    }
    if (num_classes == 0)
        num_classes = max_label + 1;
    ld->labels32 = malloc(n * sizeof(*ld->labels32));
    if (!ld->labels32)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: cannot allocate %zu labels", ld->path, n);
    for (size_t i = 0; i < n; i++)
        ld->labels32[i] = (int32_t)ld->raw_labels[i];
    if (latent) {
        st = train_dataset_create_latents(n, channels, side, side, (int)num_classes, ld->latents,
                                          ld->labels32, out);
        ld->latents = NULL; /* taken, on failure too */
        ld->labels32 = NULL;
    } else
        st = train_dataset_create(n, channels, side, side, (int)num_classes, ld->pixels,
                                  ld->labels32, out);
    if (st != TDL_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", tdl_error_get());
        return tdl_error_raise(st, "%s: %s", ld->path, why);
    }
    return TDL_OK;
}

tdl_status_t train_dataset_open_hdf5(const char *path, train_dataset_t **out)
{
    if (!path || !out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "train_dataset_open_hdf5: NULL argument");
    if (access(path, R_OK) != 0)
        return tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO,
                               "cannot read the data set %s: %s: check the path", path,
                               strerror(errno));
    h5_load_t ld = {
        .path = path,
        .file = H5I_INVALID_HID,
        .dimages = H5I_INVALID_HID,
        .dlabels = H5I_INVALID_HID,
        .itype = H5I_INVALID_HID,
        .ispace = H5I_INVALID_HID,
        .ltype = H5I_INVALID_HID,
        .lspace = H5I_INVALID_HID,
        .attr = H5I_INVALID_HID,
        .atype = H5I_INVALID_HID,
        .aspace = H5I_INVALID_HID,
    };
    /* Our messages name the file and the dataset; HDF5's own error stack on stderr would only
     * repeat them in its words. */
    H5E_auto2_t efunc;
    void *edata;
    ckpt_lock(); /* one HDF5 caller at a time, a background checkpoint writer included */
    H5Eget_auto2(H5E_DEFAULT, &efunc, &edata);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    train_dataset_t *ds;
    tdl_status_t st = h5_load(&ld, &ds);
    h5_load_close(&ld);
    H5Eset_auto2(H5E_DEFAULT, efunc, edata);
    ckpt_unlock();
    if (st == TDL_OK)
        *out = ds;
    return st;
}

/* ---- latent data sets: the writer of tidal encode ------------------------------------------ */

struct train_latent_writer {
    char *path, *tmp;
    size_t n;
    train_latent_info_t info;
    char *sample, *source;
    hid_t file, dlat, dlab;
};

static void writer_free(train_latent_writer_t *w, bool remove_tmp)
{
    if (w->dlab >= 0)
        H5Dclose(w->dlab);
    if (w->dlat >= 0)
        H5Dclose(w->dlat);
    if (w->file >= 0)
        H5Fclose(w->file);
    if (remove_tmp && w->tmp)
        unlink(w->tmp);
    free(w->source);
    free(w->sample);
    free(w->tmp);
    free(w->path);
    free(w);
}

/* A chunked dataset of the given type and dims, one latent (or 4096 labels) a chunk. */
static hid_t writer_dataset(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims)
{
    hsize_t chunk[4];
    memcpy(chunk, dims, (size_t)rank * sizeof(hsize_t));
    chunk[0] = rank == 1 ? TDL_MIN(dims[0], (hsize_t)4096) : 1;
    hid_t space = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = H5I_INVALID_HID;
    if (space >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0 &&
        H5Pset_fletcher32(dcpl) >= 0)
        d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    return d;
}

tdl_status_t train_latent_writer_open(const char *path, size_t n, const train_latent_info_t *info,
                                      train_latent_writer_t **out)
{
    if (!path || !info || !out || n == 0 || info->channels < 1 || info->height < 1 ||
        info->width < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "train_latent_writer_open: bad arguments");
    train_latent_writer_t *w = tdl_calloc(1, sizeof(*w));
    if (!w)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory", path);
    w->file = w->dlat = w->dlab = H5I_INVALID_HID;
    w->n = n;
    w->info = *info;
    size_t len = strlen(path) + 32;
    w->path = tdl_strdup(path);
    w->tmp = tdl_malloc(len);
    w->sample = tdl_strdup(info->sample ? info->sample : "");
    w->source = tdl_strdup(info->source ? info->source : "");
    if (!w->path || !w->tmp || !w->sample || !w->source) {
        writer_free(w, false);
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp, len, "%s.tmp.%ld", path, (long)getpid());
    ckpt_lock();
    H5E_auto2_t efunc;
    void *edata;
    H5Eget_auto2(H5E_DEFAULT, &efunc, &edata);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    tdl_status_t st = TDL_OK;
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0)
        st = tdl_error_raise(TDL_ERR_IO, "cannot create %s (is its folder writable?)", w->tmp);
    hsize_t dl[4] = {n, (hsize_t)info->channels, (hsize_t)info->height, (hsize_t)info->width};
    if (st == TDL_OK &&
        ((w->dlat = writer_dataset(w->file, "latents", H5T_IEEE_F32LE, 4, dl)) < 0 ||
         (w->dlab = writer_dataset(w->file, "labels", H5T_STD_I32LE, 1, dl)) < 0))
        st = tdl_error_raise(TDL_ERR_IO, "%s: cannot create /latents and /labels", w->tmp);
    H5Eset_auto2(H5E_DEFAULT, efunc, edata);
    ckpt_unlock();
    if (st != TDL_OK) {
        writer_free(w, true);
        return st;
    }
    *out = w;
    return TDL_OK;
}

tdl_status_t train_latent_writer_put(train_latent_writer_t *w, size_t first, size_t count,
                                     const float *latents, const int32_t *labels)
{
    if (count == 0)
        return TDL_OK;
    if (first > w->n || count > w->n - first)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s: latents %zu to %zu of %zu", w->path, first,
                               first + count - 1, w->n);
    ckpt_lock();
    hsize_t start[4] = {first, 0, 0, 0};
    hsize_t cnt[4] = {count, (hsize_t)w->info.channels, (hsize_t)w->info.height,
                      (hsize_t)w->info.width};
    bool good = true;
    hid_t ds[2] = {w->dlat, w->dlab}, types[2] = {H5T_NATIVE_FLOAT, H5T_NATIVE_INT32};
    const void *bufs[2] = {latents, labels};
    for (int k = 0; k < 2 && good; k++) {
        int rank = k == 0 ? 4 : 1;
        hid_t fs = H5Dget_space(ds[k]), ms = H5Screate_simple(rank, cnt, NULL);
        good = fs >= 0 && ms >= 0 &&
               H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
               H5Dwrite(ds[k], types[k], ms, fs, H5P_DEFAULT, bufs[k]) >= 0;
        if (ms >= 0)
            H5Sclose(ms);
        if (fs >= 0)
            H5Sclose(fs);
    }
    ckpt_unlock();
    if (!good)
        return tdl_error_raise(TDL_ERR_IO, "%s: cannot write latents %zu to %zu (disk full?)",
                               w->tmp, first, first + count - 1);
    return TDL_OK;
}

static bool attr_write(hid_t obj, const char *key, hid_t type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp >= 0 ? H5Acreate2(obj, key, type, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    bool good = a >= 0 && H5Awrite(a, type, v) >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return good;
}

static bool attr_string(hid_t obj, const char *key, const char *s)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    /* variable length, as ckpt writes its strings: h5py reads them as str */
    bool good = t >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 && H5Tset_cset(t, H5T_CSET_UTF8) >= 0 &&
                attr_write(obj, key, t, &s);
    if (t >= 0)
        H5Tclose(t);
    return good;
}

tdl_status_t train_latent_writer_close(train_latent_writer_t *w, int num_classes)
{
    ckpt_lock();
    int64_t nc = num_classes, seed = (int64_t)w->info.seed, res = w->info.resolution;
    bool good = attr_write(w->file, "num_classes", H5T_NATIVE_INT64, &nc) &&
                attr_write(w->file, "scaling_factor", H5T_NATIVE_DOUBLE, &w->info.scaling_factor) &&
                attr_write(w->file, "seed", H5T_NATIVE_INT64, &seed) &&
                attr_write(w->file, "resolution", H5T_NATIVE_INT64, &res) &&
                attr_string(w->file, "kind", "latents") &&
                attr_string(w->file, "latent_sample", w->sample) &&
                attr_string(w->file, "source", w->source);
    H5Dclose(w->dlab);
    H5Dclose(w->dlat);
    w->dlab = w->dlat = H5I_INVALID_HID;
    good = H5Fclose(w->file) >= 0 && good;
    w->file = H5I_INVALID_HID;
    ckpt_unlock();
    tdl_status_t st = TDL_OK;
    if (!good)
        st = tdl_error_raise(TDL_ERR_IO, "%s: cannot write its attributes and close it", w->tmp);
    else if (rename(w->tmp, w->path) != 0)
        st = tdl_error_raise(TDL_ERR_IO, "cannot rename %s to %s: %s", w->tmp, w->path,
                             strerror(errno));
    writer_free(w, st != TDL_OK);
    return st;
}

void train_latent_writer_abort(train_latent_writer_t *w)
{
    if (!w)
        return;
    ckpt_lock();
    writer_free(w, true);
    ckpt_unlock();
}
