/* Image data sets in memory: Fashion-MNIST from its IDX files, data sets built from memory, and
 * the float view the model trains on (scaled to [-1, 1], padded, upsampled by nearest
 * neighbour). The HDF5 loader is in data_hdf5.c, the one file here that may include hdf5.h. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "train/train.h"

struct train_dataset {
    size_t n;
    int channels, height, width;
    int pad; /* background pixels added on every side before upsampling */
    int num_classes;
    const char *const *class_names; /* num_classes names (static storage), or NULL */
    uint8_t *pixels;                /* [n, channels, height, width], or NULL for latents */
    float *latents;                 /* [n, channels, height, width] of a latent data set, or NULL */
    int32_t *labels; /* [n] */
};

/* Large enough for 4x upsampling of any image and a float buffer the caller can index. */
#define DATASET_MAX_SIDE 8192

/* The pixel and label buffers, uninitialised; pad and num_classes are 0. */
static tdl_status_t dataset_alloc(size_t n, int channels, int height, int width,
                                  train_dataset_t **out)
{
    size_t per_image = (size_t)channels * (size_t)height * (size_t)width;
    if (n > SIZE_MAX / per_image)
        return tdl_error_raise(TDL_ERR_NOMEM, "data set: %zu images of %zu bytes overflow memory",
                               n, per_image);
    train_dataset_t *ds = calloc(1, sizeof(*ds));
    if (!ds)
        goto err_nomem;
    ds->pixels = malloc(n * per_image);
    if (!ds->pixels)
        goto err_ds;
    ds->labels = malloc(n * sizeof(*ds->labels));
    if (!ds->labels)
        goto err_pixels;
    ds->n = n;
    ds->channels = channels;
    ds->height = height;
    ds->width = width;
    *out = ds;
    return TDL_OK;

err_pixels:
    free(ds->pixels);
err_ds:
    free(ds);
err_nomem:
    return tdl_error_raise(TDL_ERR_NOMEM, "data set: cannot allocate %zu images of %zu bytes", n,
                           per_image);
}

void train_dataset_free(train_dataset_t *ds)
{
    if (!ds)
        return;
    free(ds->labels);
    free(ds->latents);
    free(ds->pixels);
    free(ds);
}

tdl_status_t train_dataset_create_latents(size_t n, int channels, int height, int width,
                                          int num_classes, float *latents, int32_t *labels,
                                          train_dataset_t **out)
{
    tdl_status_t st = TDL_OK;
    if (!latents || !labels || !out)
        st = tdl_error_raise(TDL_ERR_INVALID_ARG, "train_dataset_create_latents: NULL argument");
    else if (n == 0 || channels < 1 || channels > 64 || height < 1 || height > 1024 ||
             width != height || num_classes < 1)
        st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                             "latent data set: %zu latents of %d x %d x %d, %d classes: it "
                             "needs at least one, 1 to 64 channels, square, up to 1024",
                             n, channels, height, width, num_classes);
    for (size_t i = 0; st == TDL_OK && i < n; i++)
        if (labels[i] < 0 || labels[i] >= num_classes)
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "latent data set: label %d of latent %zu is outside [0, %d)",
                                 (int)labels[i], i, num_classes);
    train_dataset_t *ds = st == TDL_OK ? tdl_calloc(1, sizeof(*ds)) : NULL;
    if (st == TDL_OK && !ds)
        st = tdl_error_raise(TDL_ERR_NOMEM, "latent data set: out of memory");
    if (st != TDL_OK) {
        free(latents);
        free(labels);
        return st;
    }
    *ds = (train_dataset_t){.n = n,
                            .channels = channels,
                            .height = height,
                            .width = width,
                            .num_classes = num_classes,
                            .latents = latents,
                            .labels = labels};
    *out = ds;
    return TDL_OK;
}

bool train_dataset_is_latent(const train_dataset_t *ds)
{
    return ds->latents != NULL;
}

int32_t train_dataset_label(const train_dataset_t *ds, size_t index)
{
    return index < ds->n ? ds->labels[index] : -1;
}

const uint8_t *train_dataset_pixels(const train_dataset_t *ds, size_t index)
{
    if (!ds->pixels || index >= ds->n)
        return NULL;
    return ds->pixels + index * (size_t)ds->channels * ds->height * ds->width;
}

tdl_status_t train_dataset_create(size_t n, int channels, int height, int width, int num_classes,
                                  const uint8_t *pixels, const int32_t *labels,
                                  train_dataset_t **out)
{
    if (!pixels || !labels || !out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "train_dataset_create: NULL argument");
    if (n == 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "data set: no images (n = 0)");
    if (channels != 1 && channels != 3)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "data set: %d channels; images have 1 (grayscale) or 3 (RGB)",
                               channels);
    if (height < 1 || height > DATASET_MAX_SIDE || width != height)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "data set: images of %d x %d pixels; they must be square, "
                               "between 1 x 1 and %d x %d",
                               height, width, DATASET_MAX_SIDE, DATASET_MAX_SIDE);
    if (num_classes < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "data set: num_classes %d; it must be >= 1",
                               num_classes);
    for (size_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= num_classes)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "data set: label %d of image %zu is outside [0, %d)",
                                   (int)labels[i], i, num_classes);
    train_dataset_t *ds;
    tdl_status_t st = dataset_alloc(n, channels, height, width, &ds);
    if (st != TDL_OK)
        return st;
    memcpy(ds->pixels, pixels, n * (size_t)channels * (size_t)height * (size_t)width);
    memcpy(ds->labels, labels, n * sizeof(*labels));
    ds->num_classes = num_classes;
    *out = ds;
    return TDL_OK;
}

size_t train_dataset_count(const train_dataset_t *ds)
{
    return ds->n;
}

int train_dataset_num_classes(const train_dataset_t *ds)
{
    return ds->num_classes;
}

const char *const *train_dataset_class_names(const train_dataset_t *ds)
{
    return ds->class_names;
}

int train_dataset_channels(const train_dataset_t *ds)
{
    return ds->channels;
}

void train_dataset_shape(const train_dataset_t *ds, int *height_out, int *width_out)
{
    if (height_out)
        *height_out = ds->height;
    if (width_out)
        *width_out = ds->width;
}

int train_dataset_resolution(const train_dataset_t *ds)
{
    return ds->height + 2 * ds->pad;
}

tdl_status_t train_dataset_get(const train_dataset_t *ds, size_t index, int resolution,
                               float *img_out, int *label_out)
{
    if (!ds || !img_out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "train_dataset_get: NULL argument");
    if (index >= ds->n)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "image index %zu is out of range: the data set holds %zu images",
                               index, ds->n);
    if (ds->latents) {
        /* latents are served as they are: no resampling makes sense in the VAE's space */
        size_t per = (size_t)ds->channels * ds->height * ds->width;
        if (resolution != ds->height)
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "resolution %d is not available for this latent data set: its "
                                   "latents are %dx%d, served only at %d",
                                   resolution, ds->height, ds->width, ds->height);
        memcpy(img_out, ds->latents + index * per, per * sizeof(float));
        if (label_out)
            *label_out = ds->labels[index];
        return TDL_OK;
    }
    const int base = ds->height + 2 * ds->pad;
    const int scale = resolution == base       ? 1
                      : resolution == 2 * base ? 2
                      : resolution == 4 * base ? 4
                                               : 0;
    if (scale == 0) {
        char padded[48] = "";
        if (ds->pad > 0)
            snprintf(padded, sizeof(padded), " padded to %dx%d", base, base);
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "resolution %d is not available for this data set: use %d, %d or "
                               "%d (its %dx%d images%s, upsampled x1, x2 or x4)",
                               resolution, base, 2 * base, 4 * base, ds->height, ds->width, padded);
    }

    const int h = ds->height, w = ds->width, pad = ds->pad;
    const size_t plane = (size_t)h * (size_t)w;
    const uint8_t *src = ds->pixels + index * (size_t)ds->channels * plane;
    float *dst = img_out;
    for (int c = 0; c < ds->channels; c++, src += plane) {
        for (int y = 0; y < resolution; y++, dst += resolution) {
            const int sy = y / scale - pad;
            if (sy < 0 || sy >= h) {
                for (int x = 0; x < resolution; x++)
                    dst[x] = -1.0f;
                continue;
            }
            const uint8_t *row = src + (size_t)sy * (size_t)w;
            for (int x = 0; x < resolution; x++) {
                const int sx = x / scale - pad;
                dst[x] = sx < 0 || sx >= w ? -1.0f : (float)row[sx] / 127.5f - 1.0f;
            }
        }
    }
    if (label_out)
        *label_out = ds->labels[index];
    return TDL_OK;
}

/* ---- Fashion-MNIST IDX files ---------------------------------------------------------------- */

#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */
#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define FMNIST_SIDE      28
#define FMNIST_PAD       2 /* 28 + 2 + 2 = 32, which patch sizes 2, 4 and 8 divide */
#define FMNIST_CLASSES   TRAIN_FMNIST_CLASSES
#define FMNIST_HINT                                                                                \
    "reinstall the Debian package 'dataset-fashion-mnist' or download the file again"

/* Fashion-MNIST's classes, label 0 to 9, as its README names them. */
const char *const train_fmnist_class_names[TRAIN_FMNIST_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* dir/name.gz if it exists, else dir/name. */
static tdl_status_t fmnist_find(const char *dir, const char *name, char *path, size_t size)
{
    int len = snprintf(path, size, "%s/%s.gz", dir, name);
    if (len < 0 || (size_t)len >= size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "Fashion-MNIST directory name too long: %s",
                               dir);
    if (access(path, F_OK) == 0)
        return TDL_OK;
    snprintf(path, size, "%s/%s", dir, name);
    if (access(path, F_OK) == 0)
        return TDL_OK;
    return tdl_error_raise(TDL_ERR_NOT_FOUND,
                           "Fashion-MNIST: neither %s.gz nor %s exists: install the Debian "
                           "package 'dataset-fashion-mnist' or give the directory holding the "
                           "IDX files",
                           path, path);
}

/* Reads exactly len bytes at offset `done` of the file; `total` is what the whole file should
 * hold, for the message when it does not. gzread reads plain files as they are. */
static tdl_status_t idx_read(gzFile gz, const char *path, void *buf, size_t len, size_t done,
                             size_t total)
{
    size_t got = 0;
    while (got < len) {
        size_t want = TDL_MIN(len - got, (size_t)1 << 30);
        int r = gzread(gz, (unsigned char *)buf + got, (unsigned)want);
        if (r < 0) {
            int errnum;
            const char *msg = gzerror(gz, &errnum);
            if (errnum == Z_ERRNO)
                return tdl_error_raise(TDL_ERR_IO, "cannot read %s: %s", path, strerror(errno));
            return tdl_error_raise(TDL_ERR_CORRUPT, "%s is not a valid gzip file (%s): %s", path,
                                   msg, FMNIST_HINT);
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    if (got < len)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "%s is truncated: expected %zu bytes, found only %zu: %s", path,
                               total, done + got, FMNIST_HINT);
    return TDL_OK;
}

static tdl_status_t idx_open(const char *path, gzFile *gz_out)
{
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO,
                               "cannot open %s: %s", path, errno ? strerror(errno) : "no memory");
    gzbuffer(gz, 1u << 18);
    *gz_out = gz;
    return TDL_OK;
}

/* The label file: its count and the labels (malloc'd), each checked to be in [0, 10). */
static tdl_status_t fmnist_read_labels(const char *path, uint32_t *n_out, int32_t **labels_out)
{
    gzFile gz;
    tdl_status_t st = idx_open(path, &gz);
    if (st != TDL_OK)
        return st;
    unsigned char hdr[8];
    uint8_t *raw = NULL;
    int32_t *labels = NULL;
    st = idx_read(gz, path, hdr, sizeof(hdr), 0, sizeof(hdr));
    if (st != TDL_OK)
        goto out;
    uint32_t magic = be32(hdr), n = be32(hdr + 4);
    if (magic != IDX_MAGIC_LABELS) {
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s is not an IDX label file (magic 0x%08x, want 0x%08x): %s", path,
                             magic, IDX_MAGIC_LABELS, FMNIST_HINT);
        goto out;
    }
    if (n == 0) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s holds no labels", path);
        goto out;
    }
    raw = malloc(n);
    labels = malloc((size_t)n * sizeof(*labels));
    if (!raw || !labels) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "cannot allocate %u labels for %s", n, path);
        goto out;
    }
    st = idx_read(gz, path, raw, n, sizeof(hdr), sizeof(hdr) + (size_t)n);
    if (st != TDL_OK)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        if (raw[i] >= FMNIST_CLASSES) {
            st = tdl_error_raise(TDL_ERR_CORRUPT, "%s: label %u of image %u is outside [0, %d): %s",
                                 path, raw[i], i, FMNIST_CLASSES, FMNIST_HINT);
            goto out;
        }
        labels[i] = raw[i];
    }
    *n_out = n;
    *labels_out = labels;
    labels = NULL;
out:
    free(labels);
    free(raw);
    gzclose(gz);
    return st;
}

tdl_status_t train_dataset_open_fmnist(const char *dir, bool train_split, train_dataset_t **out)
{
    if (!out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "train_dataset_open_fmnist: NULL argument");
    if (!dir)
        dir = TRAIN_FMNIST_DIR;
    const char *prefix = train_split ? "train" : "t10k";
    char name[64], img_path[PATH_MAX], lab_path[PATH_MAX];
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
    tdl_status_t st = fmnist_find(dir, name, img_path, sizeof(img_path));
    if (st != TDL_OK)
        return st;
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
    st = fmnist_find(dir, name, lab_path, sizeof(lab_path));
    if (st != TDL_OK)
        return st;

    uint32_t nlab = 0;
    int32_t *labels = NULL;
    st = fmnist_read_labels(lab_path, &nlab, &labels);
    if (st != TDL_OK)
        return st;
    gzFile gz;
    st = idx_open(img_path, &gz);
    if (st != TDL_OK)
        goto err_labels;
    unsigned char hdr[16];
    st = idx_read(gz, img_path, hdr, sizeof(hdr), 0, sizeof(hdr));
    if (st != TDL_OK)
        goto err_gz;
    uint32_t magic = be32(hdr), n = be32(hdr + 4), rows = be32(hdr + 8), cols = be32(hdr + 12);
    if (magic != IDX_MAGIC_IMAGES) {
        st = tdl_error_raise(TDL_ERR_CORRUPT,
                             "%s is not an IDX image file (magic 0x%08x, want 0x%08x): %s",
                             img_path, magic, IDX_MAGIC_IMAGES, FMNIST_HINT);
        goto err_gz;
    }
    if (rows != FMNIST_SIDE || cols != FMNIST_SIDE) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s holds %ux%u images; Fashion-MNIST images are %dx%d", img_path,
                             rows, cols, FMNIST_SIDE, FMNIST_SIDE);
        goto err_gz;
    }
    if (n != nlab) {
        st = tdl_error_raise(TDL_ERR_MISMATCH,
                             "%s holds %u images but %s holds %u labels: the two files come "
                             "from different downloads",
                             img_path, n, lab_path, nlab);
        goto err_gz;
    }
    train_dataset_t *ds;
    st = dataset_alloc(n, 1, FMNIST_SIDE, FMNIST_SIDE, &ds);
    if (st != TDL_OK)
        goto err_gz;
    size_t bytes = (size_t)n * FMNIST_SIDE * FMNIST_SIDE;
    st = idx_read(gz, img_path, ds->pixels, bytes, sizeof(hdr), sizeof(hdr) + bytes);
    if (st != TDL_OK)
        goto err_ds;
    memcpy(ds->labels, labels, (size_t)n * sizeof(*labels));
    ds->pad = FMNIST_PAD;
    ds->num_classes = FMNIST_CLASSES;
    ds->class_names = train_fmnist_class_names;
    gzclose(gz);
    free(labels);
    *out = ds;
    return TDL_OK;

err_ds:
    train_dataset_free(ds);
err_gz:
    gzclose(gz);
err_labels:
    free(labels);
    return st;
}
