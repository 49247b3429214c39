/* Checkpoint weights: tensors of 1 to 4 dimensions (one spanning two chunks) with and without
 * EMA, and int/double/string attributes, come back bit for bit; the file is inspected with the
 * HDF5 C API on its own (float32, shapes, chunks of at most 1 MiB, Fletcher32) and with h5ls and
 * h5dump; wrong shapes, missing datasets and groups, files that are not HDF5, truncated or with a
 * flipped data byte are refused with the right status and a message naming the file and the
 * dataset, as are datasets stored in a way tidal cannot check (contiguous, without Fletcher32,
 * chunks never written, float64) and groups swapped; failed writes (bad tensors, a name given
 * twice, a full disk) leave the old file as it was and no temporary file behind. */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "ckpt/ckpt.h"
#include "core/core.h"
#include "tap.h"

static char tmpdir[64];

/* A path in the test directory, in a buffer of the caller's. */
#define TMP_PATH(var, name)                                                                        \
    char var[256];                                                                                 \
    snprintf(var, sizeof(var), "%s/%s", tmpdir, name)

/* Whether the test directory holds a "<something>.tmp.<pid>" file. */
static bool tmp_left(void)
{
    DIR *dir = opendir(tmpdir);
    if (!dir)
        return false;
    bool found = false;
    struct dirent *e;
    while ((e = readdir(dir)))
        found |= strstr(e->d_name, ".tmp.") != NULL;
    closedir(dir);
    return found;
}

/* The whole file, malloc'd. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    *len = fread(buf, 1, (size_t)size, f);
    fclose(f);
    return buf;
}

static void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

static bool same_file(const char *path, const unsigned char *want, size_t want_len)
{
    size_t len = 0;
    unsigned char *got = slurp(path, &len);
    bool same = got && len == want_len && memcmp(got, want, len) == 0;
    free(got);
    return same;
}

static bool says(const char *fragment)
{
    bool found = strstr(tdl_error_get(), fragment) != NULL;
    if (!found)
        diag("message: %s", tdl_error_get());
    return found;
}

/* ---- a small model under PyTorch's names ------------------------------------------------- */

enum { NT = 7, FC1 = 4, BIG = 5, QKV = 3 };

static const struct {
    const char *name;
    int ndim;
    int shape[4];
} specs[NT] = {
    {"x_embedder.proj.weight", 4, {8, 1, 2, 2}},
    {"x_embedder.proj.bias", 1, {8}},
    {"pos_embed", 3, {1, 16, 8}},
    {"blocks.0.attn.qkv.weight", 2, {24, 8}},
    {"blocks.0.mlp.fc1.weight", 2, {600, 500}}, /* 1.2 MB: two chunks of 300 rows */
    {"final_layer.bias", 1, {300000}},          /* 1.2 MB: two chunks */
    {"t_embedder.scale", 1, {1}},
};

typedef struct {
    ckpt_tensor_t t[NT];
} model_t;

static size_t numel(const ckpt_tensor_t *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* Normal values with awkward ones mixed in: -0, infinities, a NaN with a payload, a subnormal. */
static void model_make(model_t *m, uint64_t seed)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed, 0);
    for (int i = 0; i < NT; i++) {
        ckpt_tensor_t *t = &m->t[i];
        t->name = specs[i].name;
        t->ndim = specs[i].ndim;
        memcpy(t->shape, specs[i].shape, sizeof(t->shape));
        size_t n = numel(t);
        t->data = malloc(n * sizeof(float));
        tdl_rng_fill_normal(&rng, t->data, n);
        if (n >= 8) {
            uint32_t nan_bits = 0x7fc12345u;
            t->data[1] = -0.0f;
            t->data[2] = INFINITY;
            t->data[3] = -INFINITY;
            memcpy(&t->data[4], &nan_bits, sizeof(float));
            t->data[5] = 1e-40f;
        }
    }
}

/* Same names and shapes as `like`, every float set to `fill`. */
static void model_blank(model_t *m, const model_t *like, float fill)
{
    for (int i = 0; i < NT; i++) {
        m->t[i] = like->t[i];
        size_t n = numel(&m->t[i]);
        m->t[i].data = malloc(n * sizeof(float));
        for (size_t k = 0; k < n; k++)
            m->t[i].data[k] = fill;
    }
}

static void model_free(model_t *m)
{
    for (int i = 0; i < NT; i++)
        free(m->t[i].data);
}

static bool model_equal(const model_t *a, const model_t *b)
{
    for (int i = 0; i < NT; i++)
        if (memcmp(a->t[i].data, b->t[i].data, numel(&a->t[i]) * sizeof(float)) != 0)
            return false;
    return true;
}

/* Whether every float of the model is still `fill` (nothing was read into it). */
static bool model_untouched(const model_t *m, float fill)
{
    for (int i = 0; i < NT; i++)
        for (size_t k = 0; k < numel(&m->t[i]); k++)
            if (m->t[i].data[k] != fill)
                return false;
    return true;
}

static const char *config_json = "{\"depth\": 2, \"hidden_size\": 8, \"name\": \"na\xc3\xafve\"}";

static const ckpt_attr_t attrs[] = {
    {.key = "depth", .type = CKPT_ATTR_INT, .i = 2},
    {.key = "hidden_size", .type = CKPT_ATTR_INT, .i = 8},
    {.key = "big", .type = CKPT_ATTR_INT, .i = -((int64_t)1 << 40) - 3},
    {.key = "mlp_ratio", .type = CKPT_ATTR_DOUBLE, .d = 4.0 / 3.0},
    {.key = "class_dropout_prob", .type = CKPT_ATTR_DOUBLE, .d = 0.1},
    {.key = "empty", .type = CKPT_ATTR_STRING, .s = ""},
    {.key = "config_json", .type = CKPT_ATTR_STRING, .s = NULL}, /* set in main */
};
enum { NATTRS = TDL_ARRAY_SIZE(attrs) };
static ckpt_attr_t the_attrs[NATTRS];

static model_t model, ema;

/* ---- round trip -------------------------------------------------------------------------- */

static void test_roundtrip(void)
{
    TMP_PATH(a, "a.h5");
    TMP_PATH(b, "b.h5");
    TMP_PATH(none, "none.h5");
    tdl_status_t st = ckpt_weights_write(a, model.t, ema.t, NT, the_attrs, NATTRS);
    if (!ok(st == TDL_OK, "write model and EMA with 7 attributes"))
        diag("%s", tdl_error_get());
    st = ckpt_weights_write(b, model.t, NULL, NT, the_attrs, NATTRS);
    if (!ok(st == TDL_OK, "write the model alone"))
        diag("%s", tdl_error_get());
    ok(!tmp_left(), "no temporary file left after success");

    model_t got;
    model_blank(&got, &model, 7.0f);
    st = ckpt_weights_read(a, "model", got.t, NT);
    ok(st == TDL_OK && model_equal(&got, &model),
       "/model reads back bit for bit (1-D to 4-D, two-chunk tensors, -0, inf, NaN payload, "
       "subnormal)");
    st = ckpt_weights_read(a, "ema", got.t, NT);
    ok(st == TDL_OK && model_equal(&got, &ema), "/ema reads back bit for bit");
    model_free(&got);
    model_blank(&got, &model, 7.0f);
    st = ckpt_weights_read(b, "model", got.t, NT);
    ok(st == TDL_OK && model_equal(&got, &model), "the model-only file reads back bit for bit");
    model_free(&got);

    ckpt_tensor_t two[2] = {model.t[QKV], model.t[BIG]};
    float *qkv = calloc(numel(&two[0]), sizeof(float)), *big = calloc(numel(&two[1]), 4);
    two[0].data = qkv;
    two[1].data = big;
    st = ckpt_weights_read(a, "model", two, 2);
    ok(st == TDL_OK && memcmp(qkv, model.t[QKV].data, numel(&two[0]) * 4) == 0 &&
           memcmp(big, model.t[BIG].data, numel(&two[1]) * 4) == 0,
       "reading 2 of the 7 tensors, in another order: extra datasets are ignored");
    free(qkv);
    free(big);

    bool has = false;
    ok(ckpt_weights_has_group(a, "ema", &has) == TDL_OK && has, "the EMA file has /ema");
    has = true;
    ok(ckpt_weights_has_group(b, "ema", &has) == TDL_OK && !has, "the model-only file has no /ema");
    ok(ckpt_weights_has_group(b, "model", &has) == TDL_OK && has, "and has /model");
    is_int(ckpt_weights_has_group(none, "ema", &has), TDL_ERR_NOT_FOUND,
           "has_group on a missing file: TDL_ERR_NOT_FOUND");

    int64_t i64 = 0;
    double d = 0;
    char *s = NULL;
    ok(ckpt_attr_read_int(a, "depth", &i64) == TDL_OK && i64 == 2, "int attribute depth = 2");
    ok(ckpt_attr_read_int(a, "big", &i64) == TDL_OK && i64 == -((int64_t)1 << 40) - 3,
       "int attribute big = -2^40 - 3 (64 bits)");
    ok(ckpt_attr_read_int(a, "format_version", &i64) == TDL_OK && i64 == CKPT_FORMAT_VERSION,
       "format_version = 1");
    ok(ckpt_attr_read_double(a, "mlp_ratio", &d) == TDL_OK && d == 4.0 / 3.0,
       "double attribute mlp_ratio = 4/3 exactly");
    ok(ckpt_attr_read_double(a, "depth", &d) == TDL_OK && d == 2.0,
       "an int attribute reads as a double too");
    ok(ckpt_attr_read_string(a, "config_json", &s) == TDL_OK && s && strcmp(s, config_json) == 0,
       "string attribute config_json, UTF-8 intact");
    free(s);
    s = NULL;
    ok(ckpt_attr_read_string(a, "empty", &s) == TDL_OK && s && !*s, "an empty string attribute");
    free(s);
    s = NULL;
    ok(ckpt_attr_read_string(b, "tidal_version", &s) == TDL_OK && s &&
           strcmp(s, tdl_version()) == 0,
       "tidal_version is the library's version");
    free(s);
    s = NULL;
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    bool iso = ckpt_attr_read_string(a, "created", &s) == TDL_OK && s && strlen(s) == 20 &&
               strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm) == s + 20;
    ok(iso && llabs((long long)(timegm(&tm) - time(NULL))) < 600,
       "created is ISO 8601 UTC and about now (%s)", s ? s : "(none)");
    free(s);
    s = NULL;

    i64 = 99;
    is_int(ckpt_attr_read_int(a, "learning_rate", &i64), TDL_ERR_NOT_FOUND,
           "a missing attribute: TDL_ERR_NOT_FOUND");
    ok(says("a.h5 has no attribute learning_rate") && i64 == 99,
       "naming the file and the key; the output untouched");
    is_int(ckpt_attr_read_int(a, "mlp_ratio", &i64), TDL_ERR_MISMATCH,
           "a double attribute read as an int: TDL_ERR_MISMATCH");
    ok(says("attribute mlp_ratio holds floating-point data, expected an integer"),
       "naming the attribute and both types");
    is_int(ckpt_attr_read_double(a, "config_json", &d), TDL_ERR_MISMATCH,
           "a string attribute read as a double: TDL_ERR_MISMATCH");
    is_int(ckpt_attr_read_string(a, "depth", &s), TDL_ERR_MISMATCH,
           "an int attribute read as a string: TDL_ERR_MISMATCH");
    ok(s == NULL, "no string returned on failure");
    is_int(ckpt_attr_read_string(none, "depth", &s), TDL_ERR_NOT_FOUND,
           "an attribute of a missing file: TDL_ERR_NOT_FOUND");
}

/* ---- the file as HDF5 sees it ------------------------------------------------------------ */

static bool has_fletcher32(hid_t dcpl)
{
    int n = H5Pget_nfilters(dcpl);
    for (int k = 0; k < n; k++) {
        unsigned flags, config;
        size_t ncd = 0;
        char name[64];
        if (H5Pget_filter2(dcpl, (unsigned)k, &flags, &ncd, NULL, sizeof(name), name, &config) ==
            H5Z_FILTER_FLETCHER32)
            return true;
    }
    return false;
}

static void test_layout(void)
{
    TMP_PATH(a, "a.h5");
    hid_t file = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (!ok(file >= 0, "the HDF5 C API opens the file"))
        return;
    int types = 0, shapes = 0, chunked = 0, small_chunks = 0, fletcher = 0, counted = 0;
    for (int g = 0; g < 2; g++) {
        const char *gname = g ? "ema" : "model";
        hid_t grp = H5Gopen2(file, gname, H5P_DEFAULT);
        H5G_info_t info;
        counted += grp >= 0 && H5Gget_info(grp, &info) >= 0 && info.nlinks == NT;
        for (int i = 0; i < NT && grp >= 0; i++) {
            hid_t dset = H5Dopen2(grp, specs[i].name, H5P_DEFAULT);
            hid_t type = H5Dget_type(dset), space = H5Dget_space(dset);
            hid_t dcpl = H5Dget_create_plist(dset);
            types += H5Tequal(type, H5T_IEEE_F32LE) > 0;
            hsize_t dims[8], chunk[8];
            int rank = H5Sget_simple_extent_dims(space, dims, NULL);
            bool same = rank == specs[i].ndim;
            for (int d = 0; same && d < rank; d++)
                same = dims[d] == (hsize_t)specs[i].shape[d];
            shapes += same;
            int crank = H5Pget_layout(dcpl) == H5D_CHUNKED ? H5Pget_chunk(dcpl, 8, chunk) : -1;
            chunked += crank == rank;
            size_t bytes = sizeof(float);
            bool within = crank == rank;
            for (int d = 0; within && d < crank; d++) {
                bytes *= chunk[d];
                within = chunk[d] >= 1 && chunk[d] <= dims[d];
            }
            small_chunks += within && bytes <= ((size_t)1 << 20);
            fletcher += has_fletcher32(dcpl);
            if (g == 0 && i == FC1) {
                hsize_t nchunks = 0;
                H5Dget_num_chunks(dset, space, &nchunks);
                ok(chunk[0] == 300 && chunk[1] == 500 && nchunks == 2,
                   "[600, 500] (1.2 MB) is stored as 2 equal chunks of [300, 500]");
            }
            if (g == 0 && i == BIG)
                ok(chunk[0] == 150000, "[300000] has 2 equal chunks of [150000]");
            if (g == 0 && i == QKV)
                ok(chunk[0] == 24 && chunk[1] == 8, "a small tensor is one chunk of its shape");
            H5Pclose(dcpl);
            H5Sclose(space);
            H5Tclose(type);
            H5Dclose(dset);
        }
        if (grp >= 0)
            H5Gclose(grp);
    }
    is_int(counted, 2, "/model and /ema each hold exactly the 7 datasets");
    is_int(types, 2 * NT, "every dataset is float32 little-endian (H5T_IEEE_F32LE)");
    is_int(shapes, 2 * NT, "every dataset has the tensor's shape");
    is_int(chunked, 2 * NT, "every dataset is chunked");
    is_int(small_chunks, 2 * NT, "every chunk fits in the dataset and in 1 MiB");
    is_int(fletcher, 2 * NT, "every dataset has the Fletcher32 filter");
    for (int g = 0; g < 2; g++) {
        const char *gname = g ? "ema" : "model";
        char *self = NULL;
        char key[32];
        snprintf(key, sizeof(key), "%s/%s", gname, CKPT_GROUP_ATTR);
        ok(ckpt_attr_read_string(a, key, &self) == TDL_OK && self && !strcmp(self, gname),
           "/%s names itself in its attribute %s", gname, CKPT_GROUP_ATTR);
        free(self);
    }

    hid_t attr = H5Aopen(file, "format_version", H5P_DEFAULT);
    hid_t atype = H5Aget_type(attr);
    int64_t v = 0;
    ok(H5Tget_class(atype) == H5T_INTEGER && H5Aread(attr, H5T_NATIVE_INT64, &v) >= 0 && v == 1,
       "root attribute format_version: the integer 1");
    H5Tclose(atype);
    H5Aclose(attr);
    attr = H5Aopen(file, "config_json", H5P_DEFAULT);
    atype = H5Aget_type(attr);
    ok(H5Tget_class(atype) == H5T_STRING && H5Tis_variable_str(atype) > 0 &&
           H5Tget_cset(atype) == H5T_CSET_UTF8,
       "root attribute config_json: a variable-length UTF-8 string");
    H5Tclose(atype);
    H5Aclose(attr);
    H5Fclose(file);
}

/* ---- refusals ---------------------------------------------------------------------------- */

/* A copy of a.h5 with one byte flipped inside the first chunk of /model/<name>. */
static bool flip_chunk_byte(const char *src, const char *dst, const char *name)
{
    size_t len = 0;
    unsigned char *bytes = slurp(src, &len);
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    hid_t file = H5Fopen(src, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t grp = H5Gopen2(file, "model", H5P_DEFAULT);
    hid_t dset = H5Dopen2(grp, name, H5P_DEFAULT);
    hsize_t offset[4];
    unsigned mask;
    hid_t space = H5Dget_space(dset);
    herr_t rc = H5Dget_chunk_info(dset, space, 0, offset, &mask, &addr, &size);
    H5Sclose(space);
    H5Dclose(dset);
    H5Gclose(grp);
    H5Fclose(file);
    bool done = bytes && rc >= 0 && addr != HADDR_UNDEF && addr + 41 < len && size > 41;
    if (done) {
        bytes[addr + 41] ^= 0x10;
        spit(dst, bytes, len);
    }
    free(bytes);
    return done;
}

/* An HDF5 file written here, not by ckpt: an int dataset, a group, a float64 dataset and a
 * fixed-length string attribute (what h5py writes for numpy.bytes_). */
static void write_foreign(const char *path)
{
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t grp = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {2, 3};
    hid_t space = H5Screate_simple(2, dims, NULL);
    int ints[6] = {1, 2, 3, 4, 5, 6};
    double dbl[6] = {0.5, -1.25, 3.0, 1e30, -0.0, 1e-300};
    hid_t d1 = H5Dcreate2(grp, "ints", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d1, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, ints);
    hid_t d2 =
        H5Dcreate2(grp, "doubles", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d2, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, dbl);
    hid_t sub = H5Gcreate2(grp, "sub", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t stype = H5Tcopy(H5T_C_S1);
    H5Tset_size(stype, 8);
    H5Tset_strpad(stype, H5T_STR_NULLPAD);
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, "fixed", stype, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, stype, "abcdefgh");
    H5Aclose(attr);
    H5Sclose(scalar);
    H5Tclose(stype);
    H5Gclose(sub);
    H5Dclose(d2);
    H5Dclose(d1);
    H5Sclose(space);
    H5Gclose(grp);
    H5Fclose(file);
}

static void test_read_errors(void)
{
    TMP_PATH(a, "a.h5");
    TMP_PATH(b, "b.h5");
    TMP_PATH(none, "none.h5");
    TMP_PATH(text, "text.h5");
    TMP_PATH(empty, "empty.h5");
    TMP_PATH(trunc, "trunc.h5");
    TMP_PATH(flip, "flip.h5");
    TMP_PATH(foreign, "foreign.h5");
    model_t got;
    model_blank(&got, &model, 7.0f);

    got.t[QKV].shape[0] = 48;
    got.t[QKV].shape[1] = 16;
    got.t[QKV].data = realloc(got.t[QKV].data, 48 * 16 * sizeof(float));
    for (int k = 0; k < 48 * 16; k++)
        got.t[QKV].data[k] = 7.0f;
    is_int(ckpt_weights_read(a, "model", got.t, NT), TDL_ERR_MISMATCH,
           "a shape mismatch: TDL_ERR_MISMATCH");
    ok(says("a.h5: /model/blocks.0.attn.qkv.weight has shape [24, 8], expected [48, 16]"),
       "naming the file, the dataset and both shapes");
    ok(model_untouched(&got, 7.0f), "no tensor was read, also those before the mismatch");
    got.t[QKV].ndim = 3;
    got.t[QKV].shape[0] = 24;
    got.t[QKV].shape[1] = 8;
    got.t[QKV].shape[2] = 1;
    is_int(ckpt_weights_read(a, "ema", got.t, NT), TDL_ERR_MISMATCH,
           "a rank mismatch: TDL_ERR_MISMATCH");
    ok(says("a.h5: /ema/blocks.0.attn.qkv.weight has shape [24, 8], expected [24, 8, 1]"),
       "naming the dataset in /ema and both shapes");
    got.t[QKV].ndim = 2;

    got.t[NT - 1].name = "blocks.9.attn.qkv.weight";
    is_int(ckpt_weights_read(a, "model", got.t, NT), TDL_ERR_NOT_FOUND,
           "a missing dataset: TDL_ERR_NOT_FOUND");
    ok(says("a.h5 has no dataset /model/blocks.9.attn.qkv.weight"),
       "naming the file and the dataset");
    ok(model_untouched(&got, 7.0f), "no tensor was read");
    got.t[NT - 1].name = specs[NT - 1].name;

    is_int(ckpt_weights_read(b, "ema", got.t, NT), TDL_ERR_NOT_FOUND,
           "/ema of a file without EMA: TDL_ERR_NOT_FOUND");
    ok(says("b.h5 has no group /ema"), "naming the file and the group");
    is_int(ckpt_weights_read(a, "optimizer", got.t, NT), TDL_ERR_NOT_FOUND,
           "an unknown group: TDL_ERR_NOT_FOUND");
    is_int(ckpt_weights_read(none, "model", got.t, NT), TDL_ERR_NOT_FOUND,
           "a file that does not exist: TDL_ERR_NOT_FOUND");
    ok(says("none.h5: No such file"), "naming the file");

    spit(text, "this is not HDF5\n", 17);
    is_int(ckpt_weights_read(text, "model", got.t, NT), TDL_ERR_CORRUPT,
           "a text file: TDL_ERR_CORRUPT");
    ok(says("text.h5 is not an HDF5 file"), "naming the file");
    spit(empty, "", 0);
    is_int(ckpt_weights_read(empty, "model", got.t, NT), TDL_ERR_CORRUPT,
           "an empty file: TDL_ERR_CORRUPT");

    size_t len = 0;
    unsigned char *bytes = slurp(a, &len);
    const size_t cuts[] = {100, 4096, len / 2, len - 1};
    for (size_t c = 0; c < TDL_ARRAY_SIZE(cuts); c++) {
        spit(trunc, bytes, cuts[c]);
        is_int(ckpt_weights_read(trunc, "model", got.t, NT), TDL_ERR_CORRUPT,
               "a copy truncated to %zu of %zu bytes: TDL_ERR_CORRUPT", cuts[c], len);
        ok(says("trunc.h5"), "naming the file");
    }
    free(bytes);
    ok(model_untouched(&got, 7.0f), "no tensor was filled by any of these");

    if (ok(flip_chunk_byte(a, flip, specs[QKV].name),
           "a copy with one byte flipped inside the data of /model/%s", specs[QKV].name)) {
        is_int(ckpt_weights_read(flip, "model", got.t, NT), TDL_ERR_CORRUPT,
               "Fletcher32 catches it: TDL_ERR_CORRUPT");
        ok(says("flip.h5: cannot read /model/blocks.0.attn.qkv.weight") &&
               says("Fletcher32 checksum"),
           "naming the file, the dataset and the checksum");
        ok(ckpt_weights_read(flip, "ema", got.t, NT) == TDL_OK && model_equal(&got, &ema),
           "/ema of the same file is intact and reads");
    }
    model_free(&got);

    write_foreign(foreign);
    float buf[6] = {0};
    ckpt_tensor_t one = {.name = "ints", .ndim = 2, .shape = {2, 3}, .data = buf};
    is_int(ckpt_weights_read(foreign, "model", &one, 1), TDL_ERR_MISMATCH,
           "an int dataset: TDL_ERR_MISMATCH");
    ok(says("foreign.h5: /model/ints holds integer data, expected float32"), "naming the dataset");
    one.name = "sub";
    is_int(ckpt_weights_read(foreign, "model", &one, 1), TDL_ERR_MISMATCH,
           "a group where a dataset should be: TDL_ERR_MISMATCH");
    ok(says("/model/sub is not a dataset"), "naming it");
    one.name = "doubles";
    is_int(ckpt_weights_read(foreign, "model", &one, 1), TDL_ERR_MISMATCH,
           "a float64 dataset: TDL_ERR_MISMATCH (converting would round it)");
    ok(says("foreign.h5: /model/doubles holds 64-bit floating-point data, expected float32"),
       "naming the dataset and the width");
    char *s = NULL;
    ok(ckpt_attr_read_string(foreign, "fixed", &s) == TDL_OK && s && strcmp(s, "abcdefgh") == 0,
       "a fixed-length string attribute (h5py's bytes) reads whole");
    free(s);
    /* nested group paths are names ("optim/adamw/m"); malformed paths are refused */
    is_int(ckpt_weights_read(foreign, "model/sub", &one, 1), TDL_ERR_NOT_FOUND,
           "a nested group that is not there: TDL_ERR_NOT_FOUND");
    is_int(ckpt_weights_read(foreign, "/model", &one, 1), TDL_ERR_INVALID_ARG,
           "a group path with a leading '/': TDL_ERR_INVALID_ARG");
    is_int(ckpt_weights_read(foreign, "model//x", &one, 1), TDL_ERR_INVALID_ARG,
           "a group path with an empty component: TDL_ERR_INVALID_ARG");

    model_blank(&got, &model, 7.0f);
    struct {
        const char *what;
        int i, ndim, dim0;
        bool null_data;
    } bad[] = {
        {"ndim 0", 2, 0, 8, false},
        {"ndim 5", 2, 5, 8, false},
        {"a size of 0", 6, 1, 0, false},
        {"NULL data", 6, 1, 1, true},
    };
    for (size_t k = 0; k < TDL_ARRAY_SIZE(bad); k++) {
        ckpt_tensor_t saved = got.t[bad[k].i];
        got.t[bad[k].i].ndim = bad[k].ndim;
        got.t[bad[k].i].shape[0] = bad[k].dim0;
        if (bad[k].null_data)
            got.t[bad[k].i].data = NULL;
        is_int(ckpt_weights_read(a, "model", got.t, NT), TDL_ERR_INVALID_ARG,
               "reading into a tensor with %s: TDL_ERR_INVALID_ARG", bad[k].what);
        got.t[bad[k].i] = saved;
    }
    is_int(ckpt_weights_read(NULL, "model", got.t, NT), TDL_ERR_INVALID_ARG,
           "a NULL path: TDL_ERR_INVALID_ARG");
    model_free(&got);
}

/* ---- how a dataset is stored ------------------------------------------------------------
 * Files made here with the HDF5 C API, as h5py would make them: every dataset tidal reads is
 * chunked with the Fletcher32 filter and every chunk written, else HDF5 would read zeros. */

enum { ST_ROWS = 8, ST_COLS = 4, ST_N = ST_ROWS * ST_COLS };

/* /model/<name>: [8, 4] float32 (big_endian: stored big-endian); chunk_rows 0: contiguous;
 * fletcher: the filter; write_rows: how many leading rows are written (whole chunks); early:
 * H5D_ALLOC_TIME_EARLY; bare: the first chunk written directly with the filter marked skipped. */
typedef struct {
    const char *name;
    bool big_endian;
    int chunk_rows;
    bool fletcher;
    int write_rows;
    bool early, bare;
} stored_t;

static void write_stored(hid_t grp, const stored_t *d, const float *x)
{
    hsize_t dims[2] = {ST_ROWS, ST_COLS}, chunk[2] = {(hsize_t)d->chunk_rows, ST_COLS};
    hid_t space = H5Screate_simple(2, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (d->chunk_rows)
        H5Pset_chunk(dcpl, 2, chunk);
    if (d->fletcher)
        H5Pset_fletcher32(dcpl);
    if (d->early)
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    hid_t dset = H5Dcreate2(grp, d->name, d->big_endian ? H5T_IEEE_F32BE : H5T_IEEE_F32LE, space,
                            H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d->bare) {
        unsigned char raw[ST_N * 4 + 4] = {0};
        memcpy(raw, x, ST_N * 4);
        hsize_t off[2] = {0, 0};
        H5Dwrite_chunk(dset, H5P_DEFAULT, 1, off, sizeof(raw), raw);
    } else if (d->write_rows) {
        hsize_t start[2] = {0, 0}, count[2] = {(hsize_t)d->write_rows, ST_COLS};
        hid_t mem = H5Screate_simple(2, count, NULL);
        H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
        H5Dwrite(dset, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, x);
        H5Sclose(mem);
    }
    H5Dclose(dset);
    H5Pclose(dcpl);
    H5Sclose(space);
}

static void test_storage(void)
{
    TMP_PATH(path, "stored.h5");
    float x[ST_N], got[ST_N], keep[ST_N];
    for (int i = 0; i < ST_N; i++)
        x[i] = (float)i * 0.25f - 3.0f;
    static const struct {
        stored_t d;
        const char *says; /* NULL: reads back as written */
    } cases[] = {
        {{"contiguous", false, 0, false, ST_ROWS, false, false},
         "has no Fletcher32 checksum (a contiguous dataset)"},
        {{"contiguous_unwritten", false, 0, false, 0, false, false},
         "has no Fletcher32 checksum (a contiguous dataset)"},
        {{"chunked", false, 4, false, ST_ROWS, false, false},
         "has no Fletcher32 checksum (chunked without the filter)"},
        {{"unwritten", false, 4, true, 0, false, false},
         "was never written: 2 of its 2 chunks hold no data (the first: chunk 0)"},
        {{"half", false, 4, true, 4, false, false},
         "was not written in full: 1 of its 2 chunks hold no data (the first: chunk 1)"},
        {{"early", false, 4, true, 0, true, false},
         "was allocated when it was created (H5D_ALLOC_TIME_EARLY)"},
        {{"bare", false, ST_ROWS, true, 0, false, true},
         "1 of its 1 chunks stored without the Fletcher32 checksum"},
        {{"other_chunks", false, 2, true, ST_ROWS, false, false}, NULL},
        {{"big_endian", true, 4, true, ST_ROWS, false, false}, NULL},
    };
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t grp = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (size_t k = 0; k < TDL_ARRAY_SIZE(cases); k++)
        write_stored(grp, &cases[k].d, x);
    H5Gclose(grp);
    H5Fclose(file);
    for (size_t k = 0; k < TDL_ARRAY_SIZE(cases); k++) {
        /* a good dataset listed first: a refusal comes before any data is read */
        for (int i = 0; i < ST_N; i++)
            got[i] = keep[i] = 7.0f;
        ckpt_tensor_t two[2] = {
            {.name = "other_chunks", .ndim = 2, .shape = {ST_ROWS, ST_COLS}, .data = keep},
            {.name = cases[k].d.name, .ndim = 2, .shape = {ST_ROWS, ST_COLS}, .data = got}};
        tdl_status_t st = ckpt_weights_read(path, "model", two, 2);
        if (cases[k].says) {
            is_int(st, TDL_ERR_CORRUPT, "/model/%s: TDL_ERR_CORRUPT", cases[k].d.name);
            char want[160];
            snprintf(want, sizeof(want), "stored.h5: /model/%s %s", cases[k].d.name, cases[k].says);
            if (!strstr(tdl_error_get(), want))
                snprintf(want, sizeof(want), "stored.h5: /model/%s: %s", cases[k].d.name,
                         cases[k].says);
            ok(says(want), "the message names the file and the dataset: '%s'", cases[k].says);
            ok(keep[0] == 7.0f && got[0] == 7.0f, "and nothing was read");
        } else {
            ok(st == TDL_OK && !memcmp(got, x, sizeof(x)) && !memcmp(keep, x, sizeof(x)),
               "/model/%s (h5py's way: checksummed, every chunk written) reads back exactly",
               cases[k].d.name);
        }
    }

    /* groups name themselves: swapped ones are noticed, and files from before still read */
    TMP_PATH(a, "a.h5");
    TMP_PATH(swap, "swap.h5");
    size_t len = 0;
    unsigned char *bytes = slurp(a, &len);
    spit(swap, bytes, len);
    free(bytes);
    file = H5Fopen(swap, H5F_ACC_RDWR, H5P_DEFAULT);
    H5Lmove(file, "model", file, "x", H5P_DEFAULT, H5P_DEFAULT);
    H5Lmove(file, "ema", file, "model", H5P_DEFAULT, H5P_DEFAULT);
    H5Lmove(file, "x", file, "ema", H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(file);
    model_t m;
    model_blank(&m, &model, 7.0f);
    is_int(ckpt_weights_read(swap, "model", m.t, NT), TDL_ERR_CORRUPT,
           "/model and /ema swapped: TDL_ERR_CORRUPT");
    ok(says("swap.h5: /model holds the tensors tidal wrote as /ema (its attribute group)"),
       "naming the file, where the group is and what it was written as");
    ok(model_untouched(&m, 7.0f), "nothing was read");
    file = H5Fopen(swap, H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete_by_name(file, "model", CKPT_GROUP_ATTR, H5P_DEFAULT);
    H5Adelete_by_name(file, "ema", CKPT_GROUP_ATTR, H5P_DEFAULT);
    H5Fclose(file);
    ok(ckpt_weights_read(swap, "model", m.t, NT) == TDL_OK && model_equal(&m, &ema),
       "groups without the attribute (files of tidal before it) read as they are");
    model_free(&m);
}

/* ---- a disk that fills up ----------------------------------------------------------------
 * The test's own pwrite and fallocate take the place of libc's for HDF5 and ckpt (the program's
 * definitions come first in symbol lookup). On files named "*.tmp.*", pwrite fails with ENOSPC
 * once disk_left bytes have been written (and from then on), and fallocate fails with
 * fallocate_errno when it is set. */
#if !defined(_FILE_OFFSET_BITS) || _FILE_OFFSET_BITS != 64
#define FULL_DISK 1

static long long disk_left = -1;
static int fallocate_errno;

static bool is_tmp_file(int fd)
{
    char link[64], target[512];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n <= 0)
        return false;
    target[n] = '\0';
    return strstr(target, ".tmp.") != NULL;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pwrite");
    if (disk_left >= 0 && is_tmp_file(fd)) {
        if ((long long)n > disk_left) {
            disk_left = 0;
            errno = ENOSPC;
            return -1;
        }
        disk_left -= (long long)n;
    }
    return real(fd, buf, n, off);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    static int (*real)(int, int, off_t, off_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "fallocate");
    if (fallocate_errno && is_tmp_file(fd)) {
        errno = fallocate_errno;
        return -1;
    }
    return real(fd, mode, off, len);
}
#else
#define FULL_DISK 0
#endif

/* ---- atomic writes ----------------------------------------------------------------------- */

/* One failed write over path: the status, then the old bytes and no temporary file. */
static void refused(const char *path, const unsigned char *old, size_t old_len, tdl_status_t st,
                    tdl_status_t want, const char *what, const char *fragment)
{
    is_int(st, want, "%s: %s", what, tdl_status_str(want));
    if (fragment)
        ok(says(fragment), "the message says '%s'", fragment);
    ok(same_file(path, old, old_len) && !tmp_left(),
       "the old file is unchanged and no temporary file is left");
}

static void test_atomic(void)
{
    TMP_PATH(nodir, "nodir/m.h5");
    TMP_PATH(c, "c.h5");
    TMP_PATH(adir, "adir");
    is_int(ckpt_weights_write(nodir, model.t, NULL, NT, NULL, 0), TDL_ERR_IO,
           "a write into a missing directory: TDL_ERR_IO");
    ok(says("nodir/m.h5") && says("No such file or directory"), "naming the file and why");
    ok(!tmp_left(), "no temporary file left");

    model_t v2;
    model_make(&v2, 2);
    ok(ckpt_weights_write(c, model.t, NULL, NT, NULL, 0) == TDL_OK, "write version 1");
    ok(ckpt_weights_write(c, v2.t, v2.t, NT, the_attrs, NATTRS) == TDL_OK,
       "write version 2 over it");
    model_t got;
    model_blank(&got, &model, 7.0f);
    ok(ckpt_weights_read(c, "ema", got.t, NT) == TDL_OK && model_equal(&got, &v2),
       "the file holds version 2");
    model_free(&got);
    size_t old_len = 0;
    unsigned char *old = slurp(c, &old_len);

    /* bad tensors at the end of the list */
    ckpt_tensor_t saved = v2.t[NT - 2];
    v2.t[NT - 2].ndim = 0;
    refused(c, old, old_len, ckpt_weights_write(c, v2.t, NULL, NT, the_attrs, NATTRS),
            TDL_ERR_INVALID_ARG, "a tensor with ndim 0 after 5 good ones", "model[5]");
    v2.t[NT - 2] = saved;
    saved = v2.t[NT - 1];
    v2.t[NT - 1].data = NULL;
    refused(c, old, old_len, ckpt_weights_write(c, model.t, v2.t, NT, the_attrs, NATTRS),
            TDL_ERR_INVALID_ARG, "an EMA tensor with NULL data", "ema[6] (t_embedder.scale)");
    v2.t[NT - 1] = saved;
    v2.t[NT - 1].shape[0] = 2;
    refused(c, old, old_len, ckpt_weights_write(c, model.t, v2.t, NT, NULL, 0), TDL_ERR_INVALID_ARG,
            "an EMA tensor of another shape", "not the same tensor");
    v2.t[NT - 1].shape[0] = 1;

    /* failures while the file is being written: HDF5 finds them */
    v2.t[NT - 1].name = v2.t[1].name;
    refused(c, old, old_len, ckpt_weights_write(c, v2.t, v2.t, NT, the_attrs, NATTRS),
            TDL_ERR_INVALID_ARG, "a tensor name given twice (found after 6 tensors were written)",
            "the tensor x_embedder.proj.bias is given twice");
    v2.t[NT - 1].name = specs[NT - 1].name;
    ckpt_attr_t twice[2] = {attrs[0], attrs[0]};
    refused(c, old, old_len, ckpt_weights_write(c, v2.t, NULL, NT, twice, 2), TDL_ERR_INVALID_ARG,
            "an attribute key given twice", "the attribute depth is given twice");
    ckpt_attr_t own = {.key = "format_version", .type = CKPT_ATTR_INT, .i = 7};
    refused(c, old, old_len, ckpt_weights_write(c, v2.t, NULL, NT, &own, 1), TDL_ERR_INVALID_ARG,
            "the key format_version, which ckpt writes", "format_version is given twice");

    /* a disk that fills up: while the data is written, then when the end is reserved */
#if FULL_DISK
    disk_left = 1500000;
    refused(c, old, old_len, ckpt_weights_write(c, v2.t, v2.t, NT, the_attrs, NATTRS), TDL_ERR_IO,
            "a disk that fills up after 1.5 MB of data", "No space left on device");
    diag("%s", tdl_error_get());
    disk_left = -1;
    fallocate_errno = ENOSPC;
    refused(c, old, old_len, ckpt_weights_write(c, v2.t, v2.t, NT, the_attrs, NATTRS), TDL_ERR_IO,
            "a disk too full for the metadata (fallocate refused)", "No space left on device");
    diag("%s", tdl_error_get());
    fallocate_errno = EOPNOTSUPP;
    ok(ckpt_weights_write(c, v2.t, NULL, NT, NULL, 0) == TDL_OK && !tmp_left(),
       "a file system without fallocate: the write goes on");
    fallocate_errno = 0;
    ok(ckpt_weights_write(c, v2.t, v2.t, NT, the_attrs, NATTRS) == TDL_OK,
       "the same write once there is space again");
#else
    ok(1, "# SKIP the disk-full simulation needs a 64-bit off_t without redirected pwrite");
#endif

    mkdir(adir, 0755);
    is_int(ckpt_weights_write(adir, v2.t, NULL, NT, NULL, 0), TDL_ERR_IO,
           "a path that is a directory: TDL_ERR_IO (the rename fails)");
    ok(!tmp_left(), "no temporary file left");
    is_int(ckpt_weights_write(NULL, v2.t, NULL, NT, NULL, 0), TDL_ERR_INVALID_ARG,
           "a NULL path: TDL_ERR_INVALID_ARG");
    ckpt_tensor_t slash = v2.t[0];
    slash.name = "blocks/0";
    is_int(ckpt_weights_write(c, &slash, NULL, 1, NULL, 0), TDL_ERR_INVALID_ARG,
           "a tensor name with '/': TDL_ERR_INVALID_ARG");
    free(old);
    model_free(&v2);
}

/* ---- h5ls and h5dump --------------------------------------------------------------------- */

/* The output of a command, malloc'd; NULL when it fails. */
static char *run(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    size_t n;
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024)
            out = realloc(out, cap *= 2);
    }
    out[len] = '\0';
    if (pclose(p) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

static void test_tools(void)
{
    if (system("command -v h5ls >/dev/null 2>&1 && command -v h5dump >/dev/null 2>&1") != 0) {
        ok(1, "# SKIP h5ls or h5dump not installed (Debian: hdf5-tools)");
        return;
    }
    TMP_PATH(a, "a.h5");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "h5ls -r %s 2>&1", a);
    char *out = run(cmd);
    ok(out && strstr(out, "/model/blocks.0.attn.qkv.weight Dataset {24, 8}") &&
           strstr(out, "/ema/x_embedder.proj.weight Dataset {8, 1, 2, 2}"),
       "h5ls -r lists the datasets with their shapes");
    free(out);
    snprintf(cmd, sizeof(cmd), "h5dump -H -p %s 2>&1", a);
    out = run(cmd);
    ok(out && strstr(out, "H5T_IEEE_F32LE") && strstr(out, "CHECKSUM FLETCHER32") &&
           strstr(out, "ATTRIBUTE \"config_json\""),
       "h5dump -H -p shows float32, the Fletcher32 filter and the attributes");
    free(out);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

/* HDF5's Fletcher32 as its source describes it: a byte at a time, big-endian words, sums folded
 * every 360 words (the independent reference for ckpt_fletcher32). */
static uint32_t fletcher_ref(const uint8_t *data, size_t len)
{
    size_t words = len / 2;
    uint32_t sum1 = 0, sum2 = 0;
    while (words) {
        size_t t = words > 360 ? 360 : words;
        words -= t;
        do {
            sum1 += (uint32_t)((uint16_t)data[0] << 8 | data[1]);
            data += 2;
            sum2 += sum1;
        } while (--t);
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (len % 2) {
        sum1 += (uint32_t)*data << 8;
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return sum2 << 16 | sum1;
}

/* tidal writes and reads chunks itself with its own checksum: it must be HDF5's, bit for bit. */
static void test_fletcher(void)
{
    int same = 1;
    static const size_t lens[] = {0, 1, 2, 3, 719, 720, 721, 722, 4096, 100001, 1 << 20};
    uint8_t *b = malloc((1 << 20) + 1);
    tdl_rng_t rng;
    tdl_rng_init(&rng, 3, 3);
    for (size_t i = 0; i < (1 << 20) + 1; i++)
        b[i] = (uint8_t)tdl_rng_u32(&rng);
    for (size_t k = 0; k < TDL_ARRAY_SIZE(lens); k++)
        same &= ckpt_fletcher32(b, lens[k]) == fletcher_ref(b, lens[k]);
    memset(b, 0xff, 1 << 20); /* the largest sums */
    same &= ckpt_fletcher32(b, 1 << 20) == fletcher_ref(b, 1 << 20);
    ok(same, "ckpt_fletcher32 equals HDF5's algorithm on random and all-ones data, odd lengths too");

    /* and the checksum HDF5's own filter stores next to a chunk it wrote */
    char path[512];
    snprintf(path, sizeof(path), "%s/f.h5", tmpdir);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[1] = {1000}, chunk[1] = {1000};
    hid_t space = H5Screate_simple(1, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    H5Pset_fletcher32(dcpl);
    hid_t dset = H5Dcreate2(file, "x", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    float x[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = (float)i * 0.37f - 100.0f;
    H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
    H5Dclose(dset);
    dset = H5Dopen2(file, "x", H5P_DEFAULT);
    unsigned char raw[4004];
    hsize_t off[1] = {0};
    uint32_t mask = 0;
    int read_ok = H5Dread_chunk(dset, H5P_DEFAULT, off, &mask, raw) >= 0 && mask == 0;
    uint32_t stored = (uint32_t)raw[4000] | (uint32_t)raw[4001] << 8 | (uint32_t)raw[4002] << 16 |
                      (uint32_t)raw[4003] << 24;
    ok(read_ok && stored == ckpt_fletcher32(raw, 4000),
       "the checksum HDF5's filter stores (little-endian after the chunk) is ckpt_fletcher32's");
    H5Dclose(dset), H5Pclose(dcpl), H5Sclose(space), H5Fclose(file);
    free(b);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/tidal-test-ckpt-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temporary directory\n");
        return 1;
    }
    memcpy(the_attrs, attrs, sizeof(attrs));
    the_attrs[NATTRS - 1].s = config_json;
    model_make(&model, 1);
    model_make(&ema, 11);
    test_roundtrip();
    test_layout();
    test_read_errors();
    test_storage();
    test_atomic();
    test_tools();
    test_fletcher();
    model_free(&ema);
    model_free(&model);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return done_testing();
}
