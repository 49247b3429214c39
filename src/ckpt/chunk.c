/* How ckpt lays out the chunks of a dataset, which its writer and its reader both follow: row
 * slabs of up to CKPT_CHUNK_BYTES, each one contiguous run of the C-order array. */
#include "config.h"

#include "ckpt/ckpt_internal.h"

/* Largest chunk: big enough for sequential I/O, small enough for HDF5's default 1 MiB chunk
 * cache, which a chunk must fit to be cached. */
#define CKPT_CHUNK_BYTES ((size_t)1 << 20)

/* Row slabs: the trailing dimensions stay whole while a chunk fits in CKPT_CHUNK_BYTES, so each
 * chunk is one contiguous run of the C-order array. The split dimension is cut into equal parts:
 * HDF5 stores an edge chunk at full size, so [600, 500] is two chunks of 300 rows, not 524 + 76
 * padded to 524. */
void ckpt_chunk_shape(int ndim, const hsize_t *dims, hsize_t *chunk)
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

void ckpt_chunks_of(int ndim, const hsize_t *dims, const hsize_t *chunk, ckpt_chunks_t *c)
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

void ckpt_chunk_at(const ckpt_chunks_t *c, size_t k, hsize_t *offset, size_t *first, size_t *valid)
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
