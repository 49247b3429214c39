/* All-gather(v) around a ring: in round r member i forwards block i - r to its right and
 * receives block i - r - 1 from its left, straight into place. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

typedef struct {
    unsigned char *recv;
    size_t *off, *len; /* bytes, per member */
    int round;
} allgather_state_t;

static tdl_status_t allgather_progress(gfc_request_t *req)
{
    allgather_state_t *s = req->state;
    int n = req->group.size, me = req->group.me;
    for (;;) {
        bool idle;
        tdl_status_t st = gfc_xfers_poll(req, NULL, &idle);
        if (st != TDL_OK || !idle)
            return st;
        if (s->round == n - 1) {
            req->finished = true;
            return TDL_OK;
        }
        int sb = gfc_mod(me - s->round, n), rb = gfc_mod(me - s->round - 1, n);
        if ((st = gfc_post_recv(req, gfc_mod(me - 1, n), (uint32_t)s->round, s->recv + s->off[rb],
                                s->len[rb], -1)) ||
            (st = gfc_post_send(req, (me + 1) % n, (uint32_t)s->round, s->recv + s->off[sb],
                                s->len[sb], -1)))
            return st;
        s->round++;
    }
}

static void allgather_cleanup(gfc_request_t *req)
{
    allgather_state_t *s = req->state;
    free(s->off);
}

tdl_status_t gfc_allgatherv_start(gfc_group_t *g, const void *send, void *recv,
                                  const size_t *counts, const size_t *displs, gfc_dtype_t dtype,
                                  gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("allgatherv", 0, dtype);
    if (st != TDL_OK)
        return st;
    size_t es = gfc_dtype_size(dtype);
    unsigned char *mine = (unsigned char *)recv + displs[g->me] * es;
    if (counts[g->me] && mine != send)
        memmove(mine, send, counts[g->me] * es);
    if (g->size == 1)
        return gfc_request_create_done(g, "allgatherv", req_out);
    gfc_request_t *req;
    if ((st = gfc_request_create(g, "allgatherv", allgather_progress, sizeof(allgather_state_t),
                                 &req)))
        return st;
    allgather_state_t *s = req->state;
    s->recv = recv;
    s->off = malloc(2 * (size_t)g->size * sizeof(size_t));
    if (!s->off) {
        gfc_request_free(req);
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc allgatherv: out of memory");
    }
    req->cleanup = allgather_cleanup;
    s->len = s->off + g->size;
    for (int i = 0; i < g->size; i++) {
        s->off[i] = displs[i] * es;
        s->len[i] = counts[i] * es;
    }
    if ((st = allgather_progress(req)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_allgatherv(gfc_group_t *g, const void *send, void *recv, const size_t *counts,
                            const size_t *displs, gfc_dtype_t dtype)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_allgatherv_start(g, send, recv, counts, displs, dtype, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}

tdl_status_t gfc_allgather_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                 gfc_dtype_t dtype, gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("allgather", count, dtype);
    if (st != TDL_OK)
        return st;
    size_t *cd = gfc_uniform_layout(g->size, count);
    if (!cd)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc allgather: out of memory");
    st = gfc_allgatherv_start(g, send, recv, cd, cd + g->size, dtype, req_out);
    free(cd);
    return st;
}

tdl_status_t gfc_allgather(gfc_group_t *g, const void *send, void *recv, size_t count,
                           gfc_dtype_t dtype)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_allgather_start(g, send, recv, count, dtype, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
