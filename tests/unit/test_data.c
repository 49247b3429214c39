/* Data sets and data order: Fashion-MNIST IDX files (gzip and plain) written here with known
 * pixels, the float view (scaling, padding, nearest upsampling) against hand-computed pixels,
 * malformed files refused with a message naming the file, the HDF5 user format, the real
 * Fashion-MNIST when installed, and the sampler's reproducible order. */
#include "config.h"

#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <hdf5.h>

#include "core/core.h"
#include "train/train.h"
#include "tap.h"

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
    return p;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* Writes len bytes to tmpdir/sub/name (sub is created), gzip-compressed when gz. */
static void write_file(const char *sub, const char *name, const void *data, size_t len, bool gz)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/%s%s", tmpdir, sub, name, gz ? ".gz" : "");
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (len)
            gzwrite(f, data, (unsigned)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

#define SIDE 28
#define NIMG 3

/* Image i, row y, column x of the test images; a few pixels are set to known values. */
static uint8_t pix(int i, int y, int x)
{
    if (i == 0 && y == 0 && x == 0)
        return 0;
    if (i == 0 && y == 0 && x == 1)
        return 255;
    if (i == 0 && y == 27 && x == 27)
        return 255;
    if (i == 0 && y == 13 && x == 14)
        return 51;
    return (uint8_t)((i * 31 + y * 7 + x * 3) & 0xff);
}

static const uint8_t test_labels[NIMG] = {3, 0, 9};

/* An IDX image file of n images (header claims n_hdr) into buf; returns its length. */
static size_t make_images(unsigned char *buf, uint32_t magic, uint32_t n_hdr, int n, int rows,
                          int cols)
{
    put_be32(buf, magic);
    put_be32(buf + 4, n_hdr);
    put_be32(buf + 8, (uint32_t)rows);
    put_be32(buf + 12, (uint32_t)cols);
    size_t k = 16;
    for (int i = 0; i < n; i++)
        for (int y = 0; y < rows; y++)
            for (int x = 0; x < cols; x++)
                buf[k++] = pix(i, y, x);
    return k;
}

static size_t make_labels(unsigned char *buf, uint32_t magic, uint32_t n, const uint8_t *labels)
{
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    memcpy(buf + 8, labels, n);
    return 8 + n;
}

static unsigned char img_file[16 + NIMG * SIDE * SIDE], lab_file[8 + 16];

/* A set in tmpdir/sub; image and label files given as bytes. */
static void write_set(const char *sub, const char *prefix, bool gz, const unsigned char *img,
                      size_t img_len, const unsigned char *lab, size_t lab_len)
{
    char name[64];
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
    write_file(sub, name, img, img_len, gz);
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
    write_file(sub, name, lab, lab_len, gz);
}

static float expect(uint8_t v)
{
    return (float)v / 127.5f - 1.0f;
}

static void check_fmnist_values(train_dataset_t *ds, int n, const char *what)
{
    float *img = malloc(32 * 32 * sizeof(float));
    int bad_border = 0, bad_inner = 0, bad_label = 0;
    for (int i = 0; i < n; i++) {
        int label = -1;
        if (train_dataset_get(ds, (size_t)i, 32, img, &label) != TDL_OK) {
            bad_inner++;
            continue;
        }
        bad_label += label != test_labels[i];
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                float v = img[y * 32 + x];
                if (y < 2 || y >= 30 || x < 2 || x >= 30)
                    bad_border += v != -1.0f;
                else
                    bad_inner += fabsf(v - expect(pix(i, y - 2, x - 2))) > 1e-6f;
            }
    }
    is_int(bad_border, 0, "%s: 2-pixel border of -1 on every side at 32x32", what);
    is_int(bad_inner, 0, "%s: every pixel v is v / 127.5 - 1 at its padded place", what);
    is_int(bad_label, 0, "%s: labels 3, 0, 9", what);
    free(img);
}

static bool has(const char *haystack, const char *needle)
{
    return strstr(haystack, needle) != NULL;
}

/* The open fails with `want`, and the message holds both needles. */
static void refused(tdl_status_t want, const char *sub, bool train, const char *needle1,
                    const char *needle2, const char *what)
{
    train_dataset_t *ds = NULL;
    tdl_error_clear();
    tdl_status_t st = train_dataset_open_fmnist(tmp_path(sub), train, &ds);
    const char *msg = tdl_error_get();
    if (!ok(st == want && ds == NULL && has(msg, needle1) && has(msg, needle2), "%s: %s", what,
            msg))
        diag("status %s, want %s", tdl_status_str(st), tdl_status_str(want));
    train_dataset_free(ds);
}

static void test_fmnist(void)
{
    size_t img_len = make_images(img_file, 0x803, NIMG, NIMG, SIDE, SIDE);
    size_t lab_len = make_labels(lab_file, 0x801, NIMG, test_labels);

    /* gzip-compressed train split */
    write_set("gz", "train", true, img_file, img_len, lab_file, lab_len);
    train_dataset_t *ds = NULL;
    tdl_status_t st = train_dataset_open_fmnist(tmp_path("gz"), true, &ds);
    if (!ok(st == TDL_OK && ds, "gzip IDX train split opens")) {
        diag("%s", tdl_error_get());
        return;
    }
    int h = 0, w = 0;
    train_dataset_shape(ds, &h, &w);
    ok(train_dataset_count(ds) == NIMG && h == 28 && w == 28 && train_dataset_channels(ds) == 1,
       "3 images, 1 channel, 28x28");
    is_int(train_dataset_num_classes(ds), 10, "10 classes");
    is_int(train_dataset_resolution(ds), 32, "served at 32 (28 padded by 2 on every side)");
    check_fmnist_values(ds, NIMG, "gz");

    /* hand-computed pixels of image 0: (0,0) = 0, (0,1) = 255, (27,27) = 255, (13,14) = 51 */
    float i32[32 * 32], i64[64 * 64], i128[128 * 128];
    int label = -1;
    ok(train_dataset_get(ds, 0, 32, i32, &label) == TDL_OK && label == 3, "image 0 at 32, label 3");
    ok(i32[0] == -1.0f && i32[1 * 32 + 1] == -1.0f && i32[31 * 32 + 31] == -1.0f &&
           i32[2 * 32 + 1] == -1.0f && i32[1 * 32 + 2] == -1.0f,
       "32: corners and the pixels just outside the image are -1");
    ok(i32[2 * 32 + 2] == -1.0f, "32: pixel 0 at (2,2) is -1 (0 -> -1)");
    ok(i32[2 * 32 + 3] == 1.0f, "32: pixel 255 at (2,3) is 1 (255 -> 1)");
    ok(i32[29 * 32 + 29] == 1.0f, "32: pixel 255 at (29,29) is 1");
    is_near(i32[15 * 32 + 16], -0.6, 1e-6, "32: pixel 51 at (15,16) is 51/127.5 - 1 = -0.6");

    ok(train_dataset_get(ds, 0, 64, i64, NULL) == TDL_OK, "image 0 at 64 (label_out NULL)");
    ok(i64[4 * 64 + 6] == 1.0f && i64[4 * 64 + 7] == 1.0f && i64[5 * 64 + 6] == 1.0f &&
           i64[5 * 64 + 7] == 1.0f,
       "64: padded pixel (2,3) = 255 fills the 2x2 block rows 4-5, columns 6-7");
    ok(i64[4 * 64 + 8] != 1.0f && i64[3 * 64 + 6] == -1.0f,
       "64: the neighbours (4,8) and (3,6) belong to other pixels");
    is_near(i64[30 * 64 + 32], -0.6, 1e-6, "64: pixel 51 -> block at rows 30-31, columns 32-33");
    is_near(i64[31 * 64 + 33], -0.6, 1e-6, "64: ... its other corner");
    ok(i64[59 * 64 + 59] == 1.0f && i64[60 * 64 + 60] == -1.0f,
       "64: (59,59) is image pixel (27,27) = 255, (60,60) is border");
    int bad = 0;
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 64; x++)
            bad += i64[y * 64 + x] != i32[(y / 2) * 32 + x / 2];
    is_int(bad, 0, "64: every pixel replicates its 32x32 pixel exactly");

    ok(train_dataset_get(ds, 0, 128, i128, &label) == TDL_OK && label == 3, "image 0 at 128");
    bad = 0;
    for (int y = 8; y < 12; y++)
        for (int x = 12; x < 16; x++)
            bad += i128[y * 128 + x] != 1.0f;
    is_int(bad, 0, "128: padded pixel (2,3) = 255 fills rows 8-11, columns 12-15");
    ok(i128[7 * 128 + 12] == -1.0f && i128[8 * 128 + 11] == -1.0f,
       "128: (7,12) and (8,11) are outside that block (-1)");
    ok(i128[119 * 128 + 119] == 1.0f && i128[120 * 128 + 120] == -1.0f,
       "128: (119,119) is image pixel (27,27), (120,120) is border");
    bad = 0;
    for (int y = 0; y < 128; y++)
        for (int x = 0; x < 128; x++)
            bad += i128[y * 128 + x] != i32[(y / 4) * 32 + x / 4];
    is_int(bad, 0, "128: every pixel replicates its 32x32 pixel exactly");

    int bad_res[] = {48, 16, 28, 0, -32, 256, 96};
    for (size_t k = 0; k < TDL_ARRAY_SIZE(bad_res); k++) {
        char needle[32];
        snprintf(needle, sizeof(needle), "resolution %d ", bad_res[k]);
        label = 77;
        st = train_dataset_get(ds, 1, bad_res[k], i128, &label);
        ok(st == TDL_ERR_INVALID_ARG && has(tdl_error_get(), needle) && label == 77,
           "resolution %d refused, naming it: %s", bad_res[k], tdl_error_get());
    }
    st = train_dataset_get(ds, NIMG, 32, i32, &label);
    ok(st == TDL_ERR_INVALID_ARG && has(tdl_error_get(), "index 3"), "index 3 refused: %s",
       tdl_error_get());
    train_dataset_free(ds);

    /* plain test split */
    write_set("plain", "t10k", false, img_file, img_len, lab_file, lab_len);
    ds = NULL;
    st = train_dataset_open_fmnist(tmp_path("plain"), false, &ds);
    if (ok(st == TDL_OK && ds && train_dataset_count(ds) == NIMG, "plain IDX test split opens"))
        check_fmnist_values(ds, NIMG, "plain");
    else
        diag("%s", tdl_error_get());
    train_dataset_free(ds);
    refused(TDL_ERR_NOT_FOUND, "plain", true, "train-images-idx3-ubyte", "dataset-fashion-mnist",
            "only t10k files: the train split is not found");

    /* malformed files */
    unsigned char bad_img[sizeof(img_file)], bad_lab[sizeof(lab_file)];
    make_images(bad_img, 0x802, NIMG, NIMG, SIDE, SIDE);
    write_set("magic", "train", true, bad_img, img_len, lab_file, lab_len);
    refused(TDL_ERR_CORRUPT, "magic", true, "magic/train-images-idx3-ubyte.gz",
            "is not an IDX image file (magic 0x00000802", "bad image magic");
    make_labels(bad_lab, 0x803, NIMG, test_labels);
    write_set("labmagic", "train", false, img_file, img_len, bad_lab, lab_len);
    refused(TDL_ERR_CORRUPT, "labmagic", true, "labmagic/train-labels-idx1-ubyte",
            "is not an IDX label file (magic 0x00000803", "bad label magic");

    size_t cut = 16 + 2 * SIDE * SIDE + SIDE * SIDE / 2; /* 2.5 images of 3 */
    write_set("trunc", "train", false, img_file, cut, lab_file, lab_len);
    refused(TDL_ERR_CORRUPT, "trunc", true, "trunc/train-images-idx3-ubyte",
            "truncated: expected 2368 bytes, found only 1976", "truncated plain image file");
    write_set("truncgz", "train", true, img_file, cut, lab_file, lab_len);
    refused(TDL_ERR_CORRUPT, "truncgz", true, "truncgz/train-images-idx3-ubyte.gz",
            "truncated: expected 2368 bytes", "truncated data in a gzip image file");
    write_set("trunchdr", "train", false, img_file, img_len, lab_file, 5);
    refused(TDL_ERR_CORRUPT, "trunchdr", true, "trunchdr/train-labels-idx1-ubyte",
            "truncated: expected 8 bytes, found only 5", "label file shorter than its header");

    /* a gzip stream cut in the middle */
    write_set("cutgz", "train", true, img_file, img_len, lab_file, lab_len);
    {
        const char *p = tmp_path("cutgz/train-images-idx3-ubyte.gz");
        struct stat sb;
        stat(p, &sb);
        ok(truncate(p, sb.st_size / 2) == 0, "cut the gzip image file in half");
        refused(TDL_ERR_CORRUPT, "cutgz", true, "cutgz/train-images-idx3-ubyte.gz", "truncated",
                "gzip stream cut in the middle");
    }

    make_labels(bad_lab, 0x801, 2, test_labels);
    write_set("count", "train", true, img_file, img_len, bad_lab, 8 + 2);
    refused(TDL_ERR_MISMATCH, "count", true, "holds 3 images but",
            "count/train-labels-idx1-ubyte.gz holds 2 labels", "3 images but 2 labels");

    const uint8_t labels_out_of_range[NIMG] = {3, 10, 9};
    make_labels(bad_lab, 0x801, NIMG, labels_out_of_range);
    write_set("range", "train", true, img_file, img_len, bad_lab, lab_len);
    refused(TDL_ERR_CORRUPT, "range", true, "range/train-labels-idx1-ubyte.gz",
            "label 10 of image 1 is outside [0, 10)", "label 10 refused");

    make_images(bad_img, 0x803, NIMG, NIMG, SIDE, SIDE);
    put_be32(bad_img + 8, 27);
    write_set("size", "train", false, bad_img, img_len, lab_file, lab_len);
    refused(TDL_ERR_MISMATCH, "size", true, "size/train-images-idx3-ubyte", "27x28",
            "27x28 images refused");

    write_file("missing", "train-labels-idx1-ubyte", lab_file, lab_len, true);
    refused(TDL_ERR_NOT_FOUND, "missing", true, "missing/train-images-idx3-ubyte.gz",
            "dataset-fashion-mnist", "missing image file");
    refused(TDL_ERR_NOT_FOUND, "nonexistent-dir", false, "nonexistent-dir/t10k-images-idx3-ubyte",
            "dataset-fashion-mnist", "missing directory");
}

/* ---- HDF5 ------------------------------------------------------------------------------- */

typedef struct {
    int irank;
    hsize_t idims[4];
    hid_t itype; /* file type of /images; the memory type is uint8 */
    const uint8_t *pixels;
    hsize_t nlabels; /* 0: no /labels */
    hid_t ltype;     /* file type of /labels */
    const int64_t *labels;
    long long num_classes; /* < 0: no attribute */
} h5_spec_t;

static void h5_write(const char *path, const h5_spec_t *sp)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t s = H5Screate_simple(sp->irank, sp->idims, NULL);
    hid_t d = H5Dcreate2(f, "images", sp->itype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, sp->pixels);
    H5Dclose(d);
    H5Sclose(s);
    if (sp->nlabels) {
        s = H5Screate_simple(1, &sp->nlabels, NULL);
        d = H5Dcreate2(f, "labels", sp->ltype, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sp->labels);
        H5Dclose(d);
        H5Sclose(s);
    }
    if (sp->num_classes >= 0) {
        s = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(f, "num_classes", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_LLONG, &sp->num_classes);
        H5Aclose(a);
        H5Sclose(s);
    }
    H5Fclose(f);
}

static void h5_refused(const h5_spec_t *sp, const char *name, tdl_status_t want, const char *needle,
                       const char *what)
{
    const char *path = tmp_path(name);
    h5_write(path, sp);
    train_dataset_t *ds = NULL;
    tdl_status_t st = train_dataset_open_hdf5(path, &ds);
    const char *msg = tdl_error_get();
    if (!ok(st == want && !ds && has(msg, path) && has(msg, needle), "%s: %s", what, msg))
        diag("status %s, want %s", tdl_status_str(st), tdl_status_str(want));
    train_dataset_free(ds);
}

static void test_hdf5(void)
{
    /* [N, H, W]: 4 grayscale 8x8 images, labels 0 2 1 2, no num_classes attribute */
    uint8_t px[4 * 8 * 8];
    for (int k = 0; k < 4 * 8 * 8; k++)
        px[k] = (uint8_t)(k * 7 + 3);
    px[2 * 64 + 0] = 0;   /* image 2, (0, 0) */
    px[2 * 64 + 9] = 255; /* image 2, (1, 1) */
    const int64_t labels[4] = {0, 2, 1, 2};
    h5_spec_t g = {3, {4, 8, 8}, H5T_NATIVE_UINT8, px, 4, H5T_STD_I32LE, labels, -1};
    const char *path = tmp_path("gray.h5");
    h5_write(path, &g);
    train_dataset_t *ds = NULL;
    tdl_status_t st = train_dataset_open_hdf5(path, &ds);
    if (!ok(st == TDL_OK && ds, "HDF5 [N, H, W] opens")) {
        diag("%s", tdl_error_get());
        return;
    }
    int h, w;
    train_dataset_shape(ds, &h, &w);
    ok(train_dataset_count(ds) == 4 && train_dataset_channels(ds) == 1 && h == 8 && w == 8,
       "4 images, 1 channel, 8x8");
    is_int(train_dataset_num_classes(ds), 3, "num_classes = max label + 1 without the attribute");
    is_int(train_dataset_resolution(ds), 8, "served at 8 (no padding)");
    float i8[8 * 8], i16[16 * 16], i32[32 * 32];
    int label = -1, bad = 0;
    ok(train_dataset_get(ds, 2, 8, i8, &label) == TDL_OK && label == 1, "image 2 at 8, label 1");
    for (int k = 0; k < 64; k++)
        bad += fabsf(i8[k] - expect(px[2 * 64 + k])) > 1e-6f;
    is_int(bad, 0, "image 2 round-trips: v / 127.5 - 1 everywhere");
    ok(i8[0] == -1.0f && i8[9] == 1.0f, "0 -> -1 at (0,0), 255 -> 1 at (1,1)");
    ok(train_dataset_get(ds, 2, 16, i16, NULL) == TDL_OK && i16[2 * 16 + 2] == 1.0f &&
           i16[3 * 16 + 3] == 1.0f && i16[1 * 16 + 1] == -1.0f && i16[2 * 16 + 1] != 1.0f,
       "at 16: pixel (1,1) fills rows 2-3, columns 2-3");
    ok(train_dataset_get(ds, 2, 32, i32, NULL) == TDL_OK && i32[4 * 32 + 4] == 1.0f &&
           i32[7 * 32 + 7] == 1.0f && i32[3 * 32 + 3] == -1.0f && i32[8 * 32 + 8] != 1.0f,
       "at 32: pixel (1,1) fills rows 4-7, columns 4-7");
    bad = 0;
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++)
            bad += i32[y * 32 + x] != i8[(y / 4) * 8 + x / 4];
    is_int(bad, 0, "at 32: every pixel replicates its 8x8 pixel exactly");
    st = train_dataset_get(ds, 0, 24, i32, NULL);
    ok(st == TDL_ERR_INVALID_ARG && has(tdl_error_get(), "resolution 24") &&
           has(tdl_error_get(), "8, 16 or 32"),
       "resolution 24 refused, listing 8, 16 or 32: %s", tdl_error_get());
    ok(train_dataset_get(ds, 0, 64, i32, NULL) == TDL_ERR_INVALID_ARG, "resolution 64 refused");
    train_dataset_free(ds);

    /* [N, C, H, W]: 2 RGB 4x4 images, int64 labels, num_classes attribute 7 */
    uint8_t rgb[2 * 3 * 4 * 4];
    for (int k = 0; k < (int)sizeof(rgb); k++)
        rgb[k] = (uint8_t)(255 - k);
    const int64_t rgb_labels[2] = {5, 0};
    h5_spec_t c = {4, {2, 3, 4, 4}, H5T_NATIVE_UINT8, rgb, 2, H5T_STD_I64BE, rgb_labels, 7};
    path = tmp_path("rgb.h5");
    h5_write(path, &c);
    ds = NULL;
    st = train_dataset_open_hdf5(path, &ds);
    if (ok(st == TDL_OK && ds, "HDF5 [N, C, H, W] opens")) {
        ok(train_dataset_count(ds) == 2 && train_dataset_channels(ds) == 3 &&
               train_dataset_num_classes(ds) == 7,
           "2 images, 3 channels, num_classes 7 from the attribute");
        float o[3 * 8 * 8];
        ok(train_dataset_get(ds, 1, 8, o, &label) == TDL_OK && label == 0, "image 1 at 8, label 0");
        /* image 1, channel 2, (3, 1): byte 48 + 32 + 12 + 1 = 93, value 255 - 93 = 162 */
        is_near(o[2 * 64 + 6 * 8 + 2], 162 / 127.5 - 1, 1e-6, "channel 2, (6,2) is pixel (3,1)");
        is_near(o[2 * 64 + 7 * 8 + 3], 162 / 127.5 - 1, 1e-6, "channel 2, (7,3) is pixel (3,1)");
        is_near(o[0], (255 - 48) / 127.5 - 1, 1e-6, "channel 0, (0,0) is byte 48");
        train_dataset_free(ds);
    } else {
        diag("%s", tdl_error_get());
    }

    /* malformed */
    h5_spec_t m = g;
    m.irank = 2;
    m.idims[0] = 4, m.idims[1] = 64;
    h5_refused(&m, "rank2.h5", TDL_ERR_MISMATCH, "/images has rank 2", "images of rank 2");
    m = g;
    m.nlabels = 3;
    h5_refused(&m, "nlabels.h5", TDL_ERR_MISMATCH, "/labels holds 3 labels but /images holds 4",
               "3 labels for 4 images");
    m = g;
    m.num_classes = 2;
    h5_refused(&m, "range.h5", TDL_ERR_CORRUPT, "/labels[1] is 2, outside [0, 2)",
               "label 2 with num_classes 2");
    const int64_t negative[4] = {0, -1, 1, 2};
    m = g;
    m.labels = negative;
    h5_refused(&m, "negative.h5", TDL_ERR_CORRUPT, "/labels[1] is -1", "label -1");
    m = g;
    m.nlabels = 0;
    h5_refused(&m, "nolabels.h5", TDL_ERR_NOT_FOUND, "no dataset /labels", "no /labels");
    m = g;
    m.itype = H5T_IEEE_F32LE;
    h5_refused(&m, "float.h5", TDL_ERR_MISMATCH, "/images does not hold integers", "float images");
    m = g;
    m.itype = H5T_STD_U16LE;
    h5_refused(&m, "u16.h5", TDL_ERR_MISMATCH, "/images holds 2-byte", "uint16 images");
    m = g;
    m.idims[0] = 2, m.idims[1] = 8, m.idims[2] = 16;
    h5_refused(&m, "nonsquare.h5", TDL_ERR_MISMATCH, "8 x 16", "non-square images");
    m = g;
    m.irank = 4;
    m.idims[0] = 2, m.idims[1] = 2, m.idims[2] = 4, m.idims[3] = 4;
    h5_refused(&m, "twochan.h5", TDL_ERR_MISMATCH, "2 channels", "2-channel images");
    m = g;
    m.num_classes = 0;
    h5_refused(&m, "zeroclasses.h5", TDL_ERR_MISMATCH, "num_classes is 0", "num_classes 0");

    path = tmp_path("text.h5");
    FILE *f = fopen(path, "w");
    fputs("not HDF5\n", f);
    fclose(f);
    ds = NULL;
    st = train_dataset_open_hdf5(path, &ds);
    ok(st == TDL_ERR_CORRUPT && !ds && has(tdl_error_get(), path) &&
           has(tdl_error_get(), "is not an HDF5 file"),
       "a text file is refused: %s", tdl_error_get());
    path = tmp_path("absent.h5");
    st = train_dataset_open_hdf5(path, &ds);
    ok(st == TDL_ERR_NOT_FOUND && !ds && has(tdl_error_get(), path), "a missing file: %s",
       tdl_error_get());
}

/* ---- the real Fashion-MNIST, when installed ---------------------------------------------- */

static void test_real(void)
{
    if (access(TRAIN_FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0 &&
        access(TRAIN_FMNIST_DIR "/train-images-idx3-ubyte", R_OK) != 0) {
        for (int k = 0; k < 4; k++)
            ok(1, "real Fashion-MNIST # SKIP " TRAIN_FMNIST_DIR
                  " not installed (Debian package dataset-fashion-mnist)");
        return;
    }
    train_dataset_t *ds = NULL;
    double t0 = tdl_clock_s();
    tdl_status_t st = train_dataset_open_fmnist(NULL, true, &ds);
    if (!ok(st == TDL_OK, "real Fashion-MNIST train split opens (%.2f s)", tdl_clock_s() - t0)) {
        diag("%s", tdl_error_get());
        return;
    }
    int h, w;
    train_dataset_shape(ds, &h, &w);
    ok(train_dataset_count(ds) == 60000 && h == 28 && w == 28 && train_dataset_channels(ds) == 1,
       "60000 images of 28x28, 1 channel");
    int hist[10] = {0}, bad = 0, border = 0;
    float *img = malloc(32 * 32 * sizeof(float));
    for (size_t i = 0; i < 60000; i++) {
        int label = -1;
        if (train_dataset_get(ds, i, 32, img, &label) != TDL_OK || label < 0 || label >= 10) {
            bad++;
            continue;
        }
        hist[label]++;
        border += img[0] != -1.0f || img[32 * 32 - 1] != -1.0f;
    }
    free(img);
    ok(bad == 0 && border == 0, "every label in [0, 10), every corner padded with -1");
    int even = 1;
    for (int k = 0; k < 10; k++)
        even &= hist[k] == 6000;
    ok(even, "6000 images of each class");
    train_dataset_free(ds);
}

/* ---- sampler ----------------------------------------------------------------------------- */

static int is_permutation(const uint64_t *v, uint64_t n)
{
    char *seen = calloc(n, 1);
    int okay = 1;
    for (uint64_t i = 0; i < n; i++) {
        if (v[i] >= n || seen[v[i]])
            okay = 0;
        else
            seen[v[i]] = 1;
    }
    free(seen);
    return okay;
}

static void test_sampler(void)
{
    enum { N = 10, EPOCHS = 5 };
    train_sampler_t a, b;
    ok(train_sampler_init(&a, N, 42) == TDL_OK && train_sampler_init(&b, N, 42) == TDL_OK,
       "two samplers, n = 10, seed 42");
    uint64_t va[EPOCHS][N], vb[EPOCHS][N];
    const uint64_t *perm = NULL;
    int perms = 1, same_buffer = 1;
    for (int e = 0; e < EPOCHS; e++) {
        uint64_t epoch, pos;
        train_sampler_cursor(&a, &epoch, &pos);
        perms &= epoch == (uint64_t)e && pos == 0;
        train_sampler_take(&a, va[e], N);
        for (int i = 0; i < N; i++)
            vb[e][i] = train_sampler_next(&b);
        perms &= is_permutation(va[e], N);
        if (!perm)
            perm = a.perm;
        same_buffer &= a.perm == perm;
    }
    ok(perms, "each of 5 epochs visits 0..9 exactly once, and the cursor moves to (e + 1, 0)");
    ok(same_buffer, "the order buffer is allocated once");
    ok(memcmp(va, vb, sizeof(va)) == 0, "the same seed gives the same stream");
    int differ = 0;
    for (int e = 1; e < EPOCHS; e++)
        differ += memcmp(va[e], va[0], sizeof(va[0])) != 0;
    is_int(differ, EPOCHS - 1, "each epoch's order differs from epoch 0's");
    train_sampler_free(&b);
    train_sampler_init(&b, N, 43);
    uint64_t other[N];
    train_sampler_take(&b, other, N);
    ok(memcmp(other, va[0], sizeof(other)) != 0, "another seed gives another order");
    train_sampler_free(&b);

    /* the contract: epoch e is Fisher-Yates driven by tdl_rng(seed, stream = e) */
    int contract = 1;
    for (int e = 0; e < EPOCHS; e++) {
        uint64_t p[N];
        for (int i = 0; i < N; i++)
            p[i] = (uint64_t)i;
        tdl_rng_t r;
        tdl_rng_init(&r, 42, (uint64_t)e);
        for (int i = N - 1; i > 0; i--) {
            uint64_t j = tdl_rng_below(&r, (uint64_t)i + 1), t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        contract &= memcmp(p, va[e], sizeof(p)) == 0;
    }
    ok(contract, "epoch e is a Fisher-Yates shuffle on tdl_rng(42, stream e)");

    /* seek and cursor: mid-epoch, at the boundary, and jumping straight to a later epoch */
    train_sampler_t c;
    train_sampler_init(&c, N, 42);
    uint64_t epoch, pos, x[40], y[40];
    train_sampler_free(&a);
    train_sampler_init(&a, N, 42);
    train_sampler_take(&a, x, 13);
    train_sampler_cursor(&a, &epoch, &pos);
    ok(epoch == 1 && pos == 3, "after 13 draws the cursor is (1, 3)");
    ok(train_sampler_seek(&c, epoch, pos) == TDL_OK, "seek (1, 3)");
    train_sampler_take(&a, x, 40);
    train_sampler_take(&c, y, 40);
    ok(memcmp(x, y, sizeof(x)) == 0 && x[0] == va[1][3] && x[7] == va[2][0],
       "a sampler restored at (1, 3) continues exactly, into epoch 2");
    ok(train_sampler_seek(&c, 3, N) == TDL_OK, "seek (3, 10)");
    train_sampler_cursor(&c, &epoch, &pos);
    ok(epoch == 4 && pos == 0, "(3, 10) is the start of epoch 4");
    ok(train_sampler_next(&c) == va[4][0], "and draws epoch 4's first index");
    ok(train_sampler_seek(&c, 2, 9) == TDL_OK && train_sampler_next(&c) == va[2][9] &&
           train_sampler_next(&c) == va[3][0],
       "the last index of epoch 2, then the first of epoch 3");
    ok(train_sampler_seek(&c, 0, 0) == TDL_OK && train_sampler_next(&c) == va[0][0],
       "seeking back to (0, 0) starts over");
    tdl_error_clear();
    ok(train_sampler_seek(&c, 0, N + 1) == TDL_ERR_INVALID_ARG && has(tdl_error_get(), "11"),
       "position 11 of 10 refused: %s", tdl_error_get());
    ok(train_sampler_seek(&c, UINT64_MAX, 0) == TDL_ERR_INVALID_ARG, "epoch UINT64_MAX refused");
    train_sampler_cursor(&c, &epoch, &pos);
    ok(epoch == 0 && pos == 1, "a refused seek leaves the cursor where it was");
    train_sampler_free(&c);
    train_sampler_free(&a);

    /* the stream does not depend on how it is consumed */
    enum { M = 97, TOTAL = 7 * 60 };
    static uint64_t one[TOTAL], by7[TOTAL], by3[TOTAL];
    train_sampler_init(&a, M, 7);
    for (int i = 0; i < TOTAL; i++)
        one[i] = train_sampler_next(&a);
    train_sampler_free(&a);
    train_sampler_init(&a, M, 7);
    for (int i = 0; i < TOTAL; i += 7)
        train_sampler_take(&a, by7 + i, 7);
    train_sampler_free(&a);
    train_sampler_init(&a, M, 7);
    for (int i = 0; i < TOTAL; i += 3)
        train_sampler_take(&a, by3 + i, 3);
    train_sampler_free(&a);
    ok(!memcmp(one, by7, sizeof(one)) && !memcmp(one, by3, sizeof(one)),
       "one at a time, 7 at a time and 3 at a time give the same %d indices", TOTAL);
    /* 4 ranks of a global batch of 12, each taking its share, see the 1-rank order */
    train_sampler_init(&a, M, 7);
    int same = 1;
    for (int step = 0; step < TOTAL / 12; step++) {
        uint64_t batch[12];
        train_sampler_take(&a, batch, 12);
        for (int r = 0; r < 4; r++)
            same &= !memcmp(batch + 3 * r, one + 12 * step + 3 * r, 3 * sizeof(uint64_t));
    }
    ok(same, "4 ranks' shares of each global batch are the 1-rank order");
    train_sampler_free(&a);

    train_sampler_init(&a, 1, 5);
    ok(train_sampler_next(&a) == 0 && train_sampler_next(&a) == 0 && a.epoch == 2,
       "n = 1: always 0, one epoch per draw");
    train_sampler_free(&a);
    memset(&a, 0x5a, sizeof(a));
    ok(train_sampler_init(&a, 0, 1) == TDL_ERR_INVALID_ARG && a.n == 0x5a5a5a5a5a5a5a5aull,
       "n = 0 refused, the sampler untouched: %s", tdl_error_get());
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/tidal-test-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temporary directory\n");
        return 1;
    }
    test_fmnist();
    test_hdf5();
    test_real();
    test_sampler();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return done_testing();
}
