/* What the files of src/ckpt share and other modules do not use: HDF5 error capture, the checks
 * of the tensors a caller lists, the chunk layout, and opening a file, a group and a string
 * attribute for reading. It includes hdf5.h, which only src/ckpt includes. */
#ifndef TIDAL_CKPT_INTERNAL_H
#define TIDAL_CKPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <hdf5.h>

#include "ckpt/ckpt.h"

/* ==== HDF5 errors (src/ckpt/error.c) ======================================================== */

/* HDF5's automatic error printing as it was before ckpt_h5_quiet. */
typedef struct {
    H5E_auto2_t func;
    void *data;
} ckpt_h5_quiet_t;

/* Silences HDF5's automatic error printing until ckpt_h5_restore. */
void ckpt_h5_quiet(ckpt_h5_quiet_t *saved);
void ckpt_h5_restore(const ckpt_h5_quiet_t *saved);
/* Raises `status` with the message and HDF5's reason for the call that just failed; an error of
 * the operating system becomes TDL_ERR_IO whatever `status` says. Call it before any other HDF5
 * call, which would clear the error stack. */
tdl_status_t ckpt_h5_raise(tdl_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Releases an HDF5 ID (file, group, dataset, type, space, property list) when it is valid, and
 * marks it invalid. */
void ckpt_h5_close(hid_t *id);

/* ==== the tensors a caller lists (src/ckpt/tensor.c) ======================================== */

/* A link name inside a group: not empty, not ".", no '/'. */
bool ckpt_name_ok(const char *name);
/* The tensor's shape as HDF5 dimensions (t->ndim of them). */
void ckpt_dims(const ckpt_tensor_t *t, hsize_t *dims);
/* The tensor's own fields; messages start "cannot <verb> <path>: <list>[<i>]". */
tdl_status_t ckpt_tensor_check(const ckpt_tensor_t *t, const char *verb, const char *path,
                               const char *list, int i);

/* ==== the chunk layout (src/ckpt/chunk.c) =================================================== */

/* The chunk shape of a tensor of `dims`: row slabs of up to CKPT_CHUNK_BYTES. */
void ckpt_chunk_shape(int ndim, const hsize_t *dims, hsize_t *chunk);

/* The chunks of a tensor laid out by ckpt_chunk_shape: dims before `split` are cut to 1, `split`
 * into slabs of chunk[split], the rest whole, so every chunk is one contiguous run of the array;
 * the last slab may hang past the end (HDF5 stores it whole, padded with zeros). */
typedef struct ckpt_chunks {
    int ndim, split;
    hsize_t dims[4], chunk[4];
    size_t inner; /* elements of one index along `split` (the trailing dims) */
    size_t outer; /* chunks before the split's: product of dims before it */
    size_t per;   /* slabs along the split */
    size_t elems; /* elements in a whole chunk */
} ckpt_chunks_t;

void ckpt_chunks_of(int ndim, const hsize_t *dims, const hsize_t *chunk, ckpt_chunks_t *c);
/* Chunk k (0 <= k < outer * per): its offset in the dataspace, its first element in the flat
 * array, and how many of its elements lie inside the tensor. */
void ckpt_chunk_at(const ckpt_chunks_t *c, size_t k, hsize_t *offset, size_t *first, size_t *valid);

/* ==== reading (src/ckpt/read.c, src/ckpt/attrs.c) =========================================== */

/* Opens a checkpoint read-only; the caller has silenced HDF5's error printing. */
tdl_status_t ckpt_open_read(const char *path, hid_t *file_out);
/* Opens /<group>; a missing one is TDL_ERR_NOT_FOUND. */
tdl_status_t ckpt_open_group(const char *path, hid_t file, const char *group, hid_t *group_out);
/* What a dataset or attribute holds, for messages: "integer", "floating-point", ... */
const char *ckpt_class_str(H5T_class_t c);
/* The string attribute `attr` of HDF5 type `type` (variable or fixed length) as a malloc'd copy;
 * `key` names it in messages. */
tdl_status_t ckpt_attr_copy_string(const char *path, const char *key, hid_t attr, hid_t type,
                                   char **out);

#endif /* TIDAL_CKPT_INTERNAL_H */
