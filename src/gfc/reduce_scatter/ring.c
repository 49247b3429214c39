/* Reduce-scatter (as MPI_Reduce_scatter_block) by the ring of allreduce/ring.c: it reads the
 * caller's input and reduces into a work buffer of the same size, so the input is left alone;
 * member i keeps block i. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

tdl_status_t gfc_reduce_scatter_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                      gfc_dtype_t dtype, gfc_redop_t op, gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("reduce_scatter", count, dtype);
    if (st != TDL_OK)
        return st;
    if (dtype == GFC_DT_BYTE && op == GFC_OP_SUM)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc reduce_scatter: no sum over bytes");
    size_t es = gfc_dtype_size(dtype), total = count * (size_t)g->size;
    if (g->size == 1 || count == 0) {
        if (count && recv != send)
            memmove(recv, send, count * es);
        return gfc_request_create_done(g, "reduce_scatter", req_out);
    }
    void *work = malloc(total * es);
    if (!work)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc reduce_scatter: cannot allocate %zu bytes",
                               total * es);
    /* Equal blocks of `count`: the ring's block split matches MPI's when total divides evenly. */
    st = gfc_ring_reduce_scatter_start(g, "reduce_scatter/ring", send, work, total, dtype, op, 0,
                                       recv, req_out);
    if (st != TDL_OK) {
        free(work);
        return st;
    }
    /* The request owns the work buffer from here on. */
    (*req_out)->scratch2 = work;
    (*req_out)->scratch_cap[1] = total * es;
    return TDL_OK;
}

tdl_status_t gfc_reduce_scatter(gfc_group_t *g, const void *send, void *recv, size_t count,
                                gfc_dtype_t dtype, gfc_redop_t op)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_reduce_scatter_start(g, send, recv, count, dtype, op, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
