/* safetensors files (Hugging Face's format, as diffusers and most model hubs ship weights): an
 * unsigned 64-bit little-endian header length N, N bytes of a JSON object, then the data. Each
 * member of the object but "__metadata__" (a map of strings) is a tensor,
 *     "name": {"dtype": "F32", "shape": [512, 4, 3, 3], "data_offsets": [begin, end]},
 * with its bytes at [begin, end) of the data, little-endian, C order. A file is read with pread
 * and never mapped: every offset and size is checked against the file first, so a truncated or
 * forged file is refused with a message that names the tensor and what is wrong with it. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

/* The format's own limit on the header (safetensors refuses larger ones too). */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

struct ckpt_st {
    int fd;
    char path[1024];
    uint64_t data_start, data_bytes;
    ckpt_st_entry_t *entries;
    int n;
    json_t *meta; /* "__metadata__", or NULL */
};

static const struct {
    const char *name;
    int bytes;
} st_dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
                 {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
                 {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

static int dtype_bytes(const char *name)
{
    for (size_t i = 0; i < TDL_ARRAY_SIZE(st_dtypes); i++)
        if (!strcmp(name, st_dtypes[i].name))
            return st_dtypes[i].bytes;
    return 0;
}

static tdl_status_t bad(const ckpt_st_t *st, const char *what, const char *name)
{
    return tdl_error_raise(TDL_ERR_CORRUPT, "%s is not a safetensors file tidal can read: %s%s%s%s",
                           st->path, name ? "tensor '" : "", name ? name : "", name ? "': " : "",
                           what);
}

static int cmp_begin(const void *a, const void *b)
{
    const ckpt_st_entry_t *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* One tensor's entry, checked on its own. */
static tdl_status_t entry_of(ckpt_st_t *st, const char *name, json_t *v, ckpt_st_entry_t *e)
{
    char why[160];
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof(e->name))
        return bad(st, "a tensor name of 0 or more than 127 bytes", NULL);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f || name[i] == '/')
            return bad(st, "a control character or '/' in its name", name);
    memset(e, 0, sizeof(*e));
    memcpy(e->name, name, len + 1);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return bad(st, "not {\"dtype\": string, \"shape\": [...], \"data_offsets\": [begin, end]}",
                   name);
    int bytes = dtype_bytes(json_string_value(dt));
    if (!bytes) {
        snprintf(why, sizeof(why), "dtype '%.16s' is not one of safetensors' types",
                 json_string_value(dt));
        return bad(st, why, name);
    }
    snprintf(e->dtype, sizeof(e->dtype), "%s", json_string_value(dt));
    e->dtype_bytes = bytes;
    if (json_array_size(sh) > CKPT_ST_MAX_DIMS) {
        snprintf(why, sizeof(why), "%zu dimensions (at most %d)", json_array_size(sh),
                 CKPT_ST_MAX_DIMS);
        return bad(st, why, name);
    }
    e->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        json_t *x = json_array_get(sh, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > ((int64_t)1 << 40))
            return bad(st, "a dimension that is not an integer from 0 to 2^40", name);
        e->shape[d] = json_integer_value(x);
        numel *= (uint64_t)e->shape[d];
        if (numel > ((uint64_t)1 << 40))
            return bad(st, "more than 2^40 elements", name);
    }
    e->numel = numel;
    json_t *b = json_array_get(off, 0), *f = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(f) || json_integer_value(b) < 0 ||
        json_integer_value(f) < json_integer_value(b))
        return bad(st, "data_offsets that are not integers 0 <= begin <= end", name);
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(f);
    if (e->end > st->data_bytes) {
        snprintf(why, sizeof(why), "its data ends at byte %llu of a data section of %llu",
                 (unsigned long long)e->end, (unsigned long long)st->data_bytes);
        return bad(st, why, name);
    }
    if (e->end - e->begin != numel * (uint64_t)bytes) {
        snprintf(why, sizeof(why), "%llu bytes of data for %llu elements of %s",
                 (unsigned long long)(e->end - e->begin), (unsigned long long)numel, e->dtype);
        return bad(st, why, name);
    }
    return TDL_OK;
}

static tdl_status_t parse(ckpt_st_t *st, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        char why[256];
        snprintf(why, sizeof(why), "its header is not a JSON object (%s)",
                 root ? "another value" : jerr.text);
        json_decref(root);
        return bad(st, why, NULL);
    }
    size_t cap = json_object_size(root);
    st->entries = calloc(cap ? cap : 1, sizeof(*st->entries));
    if (!st->entries) {
        json_decref(root);
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory for its header", st->path);
    }
    tdl_status_t s = TDL_OK;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            bool strings = json_is_object(v);
            json_object_foreach(v, mk, mv) strings = strings && json_is_string(mv);
            if (!strings) {
                s = bad(st, "__metadata__ is not a map of strings", NULL);
                break;
            }
            st->meta = json_incref(v);
            continue;
        }
        if ((s = entry_of(st, key, v, &st->entries[st->n])) != TDL_OK)
            break;
        st->n++;
    }
    json_decref(root);
    if (s != TDL_OK)
        return s;
    /* the tensors tile the data section: no overlap, no hole, nothing after the last */
    ckpt_st_entry_t *by = malloc((st->n ? st->n : 1) * sizeof(*by));
    if (!by)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory for its header", st->path);
    memcpy(by, st->entries, (size_t)st->n * sizeof(*by));
    qsort(by, (size_t)st->n, sizeof(*by), cmp_begin);
    uint64_t at = 0;
    for (int i = 0; i < st->n && s == TDL_OK; i++) {
        if (by[i].begin != at) {
            char why[160];
            snprintf(why, sizeof(why), "its data begins at byte %llu where %s at %llu",
                     (unsigned long long)by[i].begin,
                     by[i].begin < at ? "another tensor's runs: they overlap" : "a hole begins",
                     (unsigned long long)at);
            s = bad(st, why, by[i].name);
        }
        at = by[i].end;
    }
    if (s == TDL_OK && at != st->data_bytes) {
        char why[160];
        snprintf(why, sizeof(why), "%llu bytes after the last tensor's data",
                 (unsigned long long)(st->data_bytes - at));
        s = bad(st, why, NULL);
    }
    free(by);
    return s;
}

tdl_status_t ckpt_st_open(const char *path, ckpt_st_t **out)
{
    ckpt_st_t *st = calloc(1, sizeof(*st));
    if (!st)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory", path);
    snprintf(st->path, sizeof(st->path), "%s", path);
    st->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (st->fd < 0) {
        tdl_status_t s = tdl_error_raise(errno == ENOENT ? TDL_ERR_NOT_FOUND : TDL_ERR_IO,
                                         "cannot read %s: %s", path, strerror(errno));
        free(st);
        return s;
    }
    struct stat sb;
    unsigned char head[8];
    tdl_status_t s = TDL_OK;
    if (fstat(st->fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        s = tdl_error_raise(TDL_ERR_IO, "%s is not a regular file", path);
    else if (pread(st->fd, head, 8, 0) != 8)
        s = bad(st, "shorter than the 8 bytes of its header's length", NULL);
    uint64_t n = 0;
    for (int i = 7; s == TDL_OK && i >= 0; i--)
        n = n << 8 | head[i];
    if (s == TDL_OK && (n < 2 || n > ST_MAX_HEADER || n > (uint64_t)sb.st_size - 8)) {
        char why[160];
        snprintf(why, sizeof(why),
                 "a header of %llu bytes in a file of %lld (2 bytes to 100 MiB, within the file)",
                 (unsigned long long)n, (long long)sb.st_size);
        s = bad(st, why, NULL);
    }
    char *text = s == TDL_OK ? malloc(n) : NULL;
    if (s == TDL_OK && !text)
        s = tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory for its header", path);
    if (s == TDL_OK && pread(st->fd, text, n, 8) != (ssize_t)n)
        s = tdl_error_raise(TDL_ERR_IO, "cannot read the header of %s: %s", path, strerror(errno));
    if (s == TDL_OK) {
        st->data_start = 8 + n;
        st->data_bytes = (uint64_t)sb.st_size - st->data_start;
        s = parse(st, text, n);
    }
    free(text);
    if (s != TDL_OK) {
        ckpt_st_close(st);
        return s;
    }
    *out = st;
    return TDL_OK;
}

void ckpt_st_close(ckpt_st_t *st)
{
    if (!st)
        return;
    if (st->fd >= 0)
        close(st->fd);
    json_decref(st->meta);
    free(st->entries);
    free(st);
}

int ckpt_st_count(const ckpt_st_t *st)
{
    return st->n;
}

const ckpt_st_entry_t *ckpt_st_entry(const ckpt_st_t *st, int i)
{
    return i >= 0 && i < st->n ? &st->entries[i] : NULL;
}

const ckpt_st_entry_t *ckpt_st_find(const ckpt_st_t *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->entries[i].name, name))
            return &st->entries[i];
    return NULL;
}

const char *ckpt_st_metadata(const ckpt_st_t *st, const char *key)
{
    json_t *v = st->meta ? json_object_get(st->meta, key) : NULL;
    return v ? json_string_value(v) : NULL;
}

tdl_status_t ckpt_st_read_f32(const ckpt_st_t *st, const ckpt_st_entry_t *e, float *out,
                              size_t numel)
{
    if (numel != e->numel)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s: tensor '%s' has %llu elements, not %zu",
                               st->path, e->name, (unsigned long long)e->numel, numel);
    bool f32 = !strcmp(e->dtype, "F32"), f16 = !strcmp(e->dtype, "F16");
    bool bf16 = !strcmp(e->dtype, "BF16"), f64 = !strcmp(e->dtype, "F64");
    if (!f32 && !f16 && !bf16 && !f64)
        return tdl_error_raise(TDL_ERR_MISMATCH,
                               "%s: tensor '%s' is %s, not a floating-point type tidal reads (F32, "
                               "F16, BF16, F64)",
                               st->path, e->name, e->dtype);
    /* a slab at a time, converted in place from the end of out where the element is narrower */
    const size_t slab = (size_t)1 << 20;
    unsigned char *buf = malloc(slab * 8);
    if (!buf)
        return tdl_error_raise(TDL_ERR_NOMEM, "%s: out of memory reading '%s'", st->path, e->name);
    tdl_status_t s = TDL_OK;
    for (size_t i0 = 0; i0 < numel && s == TDL_OK; i0 += slab) {
        size_t m = TDL_MIN(slab, numel - i0), bytes = m * (size_t)e->dtype_bytes;
        off_t at = (off_t)(st->data_start + e->begin + i0 * (size_t)e->dtype_bytes);
        size_t got = 0;
        while (got < bytes) {
            ssize_t r = pread(st->fd, buf + got, bytes - got, at + (off_t)got);
            if (r <= 0) {
                s = tdl_error_raise(TDL_ERR_IO, "%s: tensor '%s' cut short: %s", st->path, e->name,
                                    r < 0 ? strerror(errno) : "end of file");
                break;
            }
            got += (size_t)r;
        }
        for (size_t k = 0; s == TDL_OK && k < m; k++) {
            const unsigned char *p = buf + k * (size_t)e->dtype_bytes;
            if (f32) {
                uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24;
                memcpy(&out[i0 + k], &u, 4);
            } else if (f64) {
                uint64_t u = 0;
                for (int b = 7; b >= 0; b--)
                    u = u << 8 | p[b];
                double d;
                memcpy(&d, &u, 8);
                out[i0 + k] = (float)d;
            } else {
                uint16_t h = (uint16_t)(p[0] | p[1] << 8);
                out[i0 + k] = f16 ? tdl_f16_to_f32(h) : tdl_bf16_to_f32(h);
            }
        }
    }
    free(buf);
    return s;
}
