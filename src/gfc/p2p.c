/* Tagged point-to-point messages within a group. Sizes above UCX's rendezvous threshold go
 * zero-copy; a receive buffer smaller than the message is an error, not a truncation. */
#include "config.h"

#include "gfc/gfc_internal.h"

static tdl_status_t p2p_check(const gfc_group_t *g, int peer, const void *buf, size_t bytes,
                              const char *what)
{
    if (peer < 0 || peer >= g->size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc %s: peer index %d outside the group of %d",
                               what, peer, g->size);
    if (!buf && bytes)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc %s: NULL buffer of %zu bytes", what,
                               bytes);
    return TDL_OK;
}

tdl_status_t gfc_send_start(gfc_group_t *g, int peer, uint64_t tag, const void *buf, size_t bytes,
                            gfc_request_t **req_out)
{
    tdl_status_t st = p2p_check(g, peer, buf, bytes, "send");
    gfc_request_t *req;
    if (st != TDL_OK || (st = gfc_p2p_request_create(g, "send", tag, &req)) != TDL_OK)
        return st;
    if ((st = gfc_post_send(req, peer, 0, buf, bytes, -1)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_recv_start(gfc_group_t *g, int peer, uint64_t tag, void *buf, size_t bytes,
                            gfc_request_t **req_out)
{
    tdl_status_t st = p2p_check(g, peer, buf, bytes, "recv");
    gfc_request_t *req;
    if (st != TDL_OK || (st = gfc_p2p_request_create(g, "recv", tag, &req)) != TDL_OK)
        return st;
    if ((st = gfc_post_recv(req, peer, 0, buf, bytes, -1)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_send(gfc_group_t *g, int peer, uint64_t tag, const void *buf, size_t bytes)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_send_start(g, peer, tag, buf, bytes, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}

tdl_status_t gfc_recv(gfc_group_t *g, int peer, uint64_t tag, void *buf, size_t bytes,
                      size_t *received_out)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_recv_start(g, peer, tag, buf, bytes, &req);
    if (st != TDL_OK)
        return st;
    st = gfc_request_wait_keep(req);
    if (st == TDL_OK && received_out)
        *received_out = gfc_request_received_bytes(req);
    gfc_request_free(req);
    return st;
}
