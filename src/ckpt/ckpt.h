/* ckpt: checkpoints as HDF5 files (doc/checkpoint.md). This first part saves and loads model
 * weights as named float32 tensors under their PyTorch state_dict names, with the model
 * configuration as root attributes. The interface is generic so that ckpt needs neither the DiT
 * nor the trainer: callers list their tensors. Only src/ckpt includes hdf5.h. HDF5 is built
 * without thread safety: one thread at a time calls into ckpt. */
#ifndef TIDAL_CKPT_H
#define TIDAL_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The root attribute format_version of the files this code writes. */
#define CKPT_FORMAT_VERSION 1

/* The string attribute of every group of tensors ckpt writes: the group's own path ("model",
 * "optim/adamw/m"), which a read checks, so that moved or swapped groups are noticed. */
#define CKPT_GROUP_ATTR "group"

/* One named tensor, C order (row-major), as PyTorch stores it. */
typedef struct ckpt_tensor {
    const char *name; /* "blocks.3.attn.qkv.weight" (PyTorch state_dict name); no '/' */
    int ndim;         /* 1..4 */
    int shape[4];     /* each >= 1; entries past ndim are ignored */
    float *data;      /* numel floats: read from on save, written to on load */
} ckpt_tensor_t;

typedef enum { CKPT_ATTR_INT, CKPT_ATTR_DOUBLE, CKPT_ATTR_STRING } ckpt_attr_type_t;

/* A scalar root attribute: i, d or s according to type. */
typedef struct ckpt_attr {
    const char *key;
    ckpt_attr_type_t type;
    int64_t i;
    double d;
    const char *s; /* UTF-8, stored as a variable-length string */
} ckpt_attr_t;

/* Writes /model/<name> for every tensor, /ema/<name> when ema != NULL (ema[i] must carry the
 * same name and shape as model[i]; its data is ema[i].data), and root attributes:
 * format_version (int, CKPT_FORMAT_VERSION), tidal_version (string), created (string, ISO 8601
 * UTC), plus the caller's attrs (the model configuration, one per field, and "config_json").
 * Datasets are float32 little-endian, chunked (one chunk up to 1 MiB, a slab of leading rows),
 * with HDF5's Fletcher32 checksum filter, shaped exactly as given.
 *
 * Arguments are checked before anything is created (TDL_ERR_INVALID_ARG). The write is atomic:
 * the file is written as "<path>.tmp.<pid>" in the same directory, flushed and closed, fsync'ed,
 * renamed over path, then the directory is fsync'ed; on any failure (a name or key given twice,
 * an I/O error) the temporary file is removed and nothing at path changes. */
tdl_status_t ckpt_weights_write(const char *path, const ckpt_tensor_t *model,
                                const ckpt_tensor_t *ema, int count, const ckpt_attr_t *attrs,
                                int nattrs);

/* A further group of tensors in the same file: "optim/adamw/m" (parents are created). */
typedef struct ckpt_group {
    const char *name;
    const ckpt_tensor_t *tensors;
    int count;
    const ckpt_attr_t *attrs; /* attributes of the group itself (may be NULL) */
    int nattrs;
} ckpt_group_t;

/* ckpt_weights_write plus further groups (optimizer moments, ...), under the same guarantees. */
tdl_status_t ckpt_file_write(const char *path, const ckpt_tensor_t *model,
                             const ckpt_tensor_t *ema, int count, const ckpt_group_t *extra,
                             int nextra, const ckpt_attr_t *attrs, int nattrs);

/* Reads /<group>/<name> (group "model" or "ema") into each tensor's data. EVERY dataset is
 * checked against the tensors before any data is read: its existence, its type (float32, either
 * byte order; no other type is converted), rank and shape, and its storage: chunked with the
 * Fletcher32 filter, every chunk written with the checksum applied (HDF5 would read a chunk
 * never written as zeros). A missing group or dataset is TDL_ERR_NOT_FOUND, a shape or type that
 * does not fit TDL_ERR_MISMATCH ("model.h5: /model/blocks.3.attn.qkv.weight has shape [96, 32],
 * expected [192, 64]"); a file that is not HDF5, truncated or damaged, a dataset without a
 * checksum or with chunks missing, a group found under another path than the one it was written
 * as (CKPT_GROUP_ATTR), or data failing its checksum is TDL_ERR_CORRUPT; messages name the file
 * and the dataset. Values are not judged (NaN and Inf come back as stored). Extra datasets in
 * the file are ignored. When the data of a dataset cannot be read, the tensors before it have
 * been filled already. */
tdl_status_t ckpt_weights_read(const char *path, const char *group, ckpt_tensor_t *tensors,
                               int count);

/* Attribute lookups for the loader: a key "train/step" names the attribute step of the group
 * /train, a key without '/' a root attribute. An int attribute must hold an integer; a double one
 * a floating-point number or an integer; a string attribute (variable or fixed length) comes
 * back as a malloc'd copy for the caller to free. A missing key is TDL_ERR_NOT_FOUND naming the
 * key and the file; another type TDL_ERR_MISMATCH. *out is written only on success. */
tdl_status_t ckpt_attr_read_int(const char *path, const char *key, int64_t *out);
tdl_status_t ckpt_attr_read_double(const char *path, const char *key, double *out);
tdl_status_t ckpt_attr_read_string(const char *path, const char *key, char **out);

/* Every function here takes one process-wide lock around its HDF5 calls (HDF5 is built without
 * thread safety), so a background checkpoint writer and the trainer can both call them. Other
 * code that calls HDF5 directly (the HDF5 data loader) holds it too. */
void ckpt_lock(void);
void ckpt_unlock(void);

/* HDF5's Fletcher32 checksum of len bytes, as its filter computes it (computed here, faster:
 * checkpoints write and read their chunks directly). */
uint32_t ckpt_fletcher32(const void *data, size_t len);

/* The names of the members of /<group> (datasets and groups alike), sorted: a NULL-terminated
 * malloc'd array for ckpt_names_free, and their count. Errors as ckpt_weights_read's. */
tdl_status_t ckpt_group_names(const char *path, const char *group, char ***names_out,
                              int *count_out);
void ckpt_names_free(char **names);

/* Whether the file has the group /<group> ("ema"). */
tdl_status_t ckpt_weights_has_group(const char *path, const char *group, bool *out);

/* ---- safetensors (src/ckpt/safetensors.c) --------------------------------------------------
 * Hugging Face's format, in which diffusers and the model hubs ship weights: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the data. Opening checks the whole header against the file (sizes, offsets that tile the
 * data section with no overlap or hole, known dtypes, names without control characters or '/')
 * and refuses a truncated or forged file with TDL_ERR_CORRUPT naming the tensor at fault. */

#define CKPT_ST_MAX_DIMS 8

typedef struct ckpt_st_entry {
    char name[128];
    char dtype[8]; /* "F32", "F16", "BF16", "F64", "I64", ... */
    int dtype_bytes;
    int ndim;
    int64_t shape[CKPT_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* within the data section */
} ckpt_st_entry_t;

typedef struct ckpt_st ckpt_st_t;

tdl_status_t ckpt_st_open(const char *path, ckpt_st_t **out);
void ckpt_st_close(ckpt_st_t *st);
int ckpt_st_count(const ckpt_st_t *st);
const ckpt_st_entry_t *ckpt_st_entry(const ckpt_st_t *st, int i); /* in the header's order */
const ckpt_st_entry_t *ckpt_st_find(const ckpt_st_t *st, const char *name);
/* A string of the header's "__metadata__", or NULL. */
const char *ckpt_st_metadata(const ckpt_st_t *st, const char *key);
/* The tensor as numel floats (F32 as it is; F16, BF16 and F64 converted, F64 rounded); another
 * dtype is TDL_ERR_MISMATCH, a numel that is not the tensor's TDL_ERR_INVALID_ARG. */
tdl_status_t ckpt_st_read_f32(const ckpt_st_t *st, const ckpt_st_entry_t *e, float *out,
                              size_t numel);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_CKPT_H */
