/* All-to-all(v): receives from every member are posted first, then sends in pairwise order
 * (member i sends to i+1, i+2, ...), so that no two members start on the same target. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

static tdl_status_t alltoall_progress(gfc_request_t *req)
{
    bool idle;
    tdl_status_t st = gfc_xfers_poll(req, NULL, &idle);
    if (st == TDL_OK && idle)
        req->finished = true;
    return st;
}

tdl_status_t gfc_alltoallv_start(gfc_group_t *g, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, gfc_dtype_t dtype,
                                 gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("alltoallv", 0, dtype);
    if (st != TDL_OK)
        return st;
    int n = g->size, me = g->me;
    size_t es = gfc_dtype_size(dtype);
    if (send_counts[me] != recv_counts[me])
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc alltoallv: member %d sends itself %zu elements but expects %zu",
                               me, send_counts[me], recv_counts[me]);
    if (send == recv)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc alltoallv: in-place is not supported");
    if (n == 1) {
        if (send_counts[me])
            memcpy((char *)recv + recv_displs[me] * es, (const char *)send + send_displs[me] * es,
                   send_counts[me] * es);
        return gfc_request_create_done(g, "alltoallv", req_out);
    }
    gfc_request_t *req;
    if ((st = gfc_request_create(g, "alltoallv", alltoall_progress, 0, &req)) != TDL_OK)
        return st;
    for (int k = 1; k < n && st == TDL_OK; k++) {
        int from = gfc_mod(me - k, n);
        st = gfc_post_recv(req, from, 0, (char *)recv + recv_displs[from] * es,
                           recv_counts[from] * es, -1);
    }
    for (int k = 1; k < n && st == TDL_OK; k++) {
        int to = (me + k) % n;
        st = gfc_post_send(req, to, 0, (const char *)send + send_displs[to] * es,
                           send_counts[to] * es, -1);
    }
    if (st != TDL_OK)
        return gfc_request_fail_start(req, st);
    /* The member's own block is copied while the transfers are under way. */
    if (send_counts[me])
        memcpy((char *)recv + recv_displs[me] * es, (const char *)send + send_displs[me] * es,
               send_counts[me] * es);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_alltoallv(gfc_group_t *g, const void *send, const size_t *send_counts,
                           const size_t *send_displs, void *recv, const size_t *recv_counts,
                           const size_t *recv_displs, gfc_dtype_t dtype)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_alltoallv_start(g, send, send_counts, send_displs, recv, recv_counts,
                                          recv_displs, dtype, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}

tdl_status_t gfc_alltoall_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                gfc_dtype_t dtype, gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("alltoall", count, dtype);
    if (st != TDL_OK)
        return st;
    size_t *cd = gfc_uniform_layout(g->size, count);
    if (!cd)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc alltoall: out of memory");
    st = gfc_alltoallv_start(g, send, cd, cd + g->size, recv, cd, cd + g->size, dtype, req_out);
    free(cd);
    return st;
}

tdl_status_t gfc_alltoall(gfc_group_t *g, const void *send, void *recv, size_t count,
                          gfc_dtype_t dtype)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_alltoall_start(g, send, recv, count, dtype, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
