/* Gather: every member sends its block straight to the root, which posts all receives at once. */
#include "config.h"

#include <string.h>

#include "gfc/gfc_internal.h"

static tdl_status_t gather_progress(gfc_request_t *req)
{
    bool idle;
    tdl_status_t st = gfc_xfers_poll(req, NULL, &idle);
    if (st == TDL_OK && idle)
        req->finished = true;
    return st;
}

tdl_status_t gfc_gather_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                              gfc_dtype_t dtype, int root, gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("gather", count, dtype);
    if (st != TDL_OK)
        return st;
    if (root < 0 || root >= g->size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc gather: root %d outside the group of %d",
                               root, g->size);
    size_t bytes = count * gfc_dtype_size(dtype);
    if (g->me == root && bytes && (char *)recv + (size_t)root * bytes != (const char *)send)
        memmove((char *)recv + (size_t)root * bytes, send, bytes);
    if (g->size == 1 || bytes == 0)
        return gfc_request_create_done(g, "gather", req_out);
    gfc_request_t *req;
    if ((st = gfc_request_create(g, "gather", gather_progress, 0, &req)) != TDL_OK)
        return st;
    if (g->me == root) {
        for (int i = 0; i < g->size && st == TDL_OK; i++)
            if (i != root)
                st = gfc_post_recv(req, i, 0, (char *)recv + (size_t)i * bytes, bytes, -1);
    } else {
        st = gfc_post_send(req, root, 0, send, bytes, -1);
    }
    if (st != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_gather(gfc_group_t *g, const void *send, void *recv, size_t count,
                        gfc_dtype_t dtype, int root)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_gather_start(g, send, recv, count, dtype, root, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
