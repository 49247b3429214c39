/* Barrier by dissemination (Hensgen, Finkel, Manber): ceil(log2 n) rounds; in round k member i
 * signals i + 2^k and waits for i - 2^k. No member leaves before every member has arrived. */
#include "config.h"

#include "gfc/gfc_internal.h"

typedef struct {
    int dist;
    char token_out, token_in;
} barrier_state_t;

static tdl_status_t barrier_progress(gfc_request_t *req)
{
    barrier_state_t *s = req->state;
    int n = req->group.size, me = req->group.me;
    for (;;) {
        bool idle;
        tdl_status_t st = gfc_xfers_poll(req, NULL, &idle);
        if (st != TDL_OK || !idle)
            return st;
        if (s->dist >= n) {
            req->finished = true;
            return TDL_OK;
        }
        uint32_t step = (uint32_t)__builtin_ctz((unsigned)s->dist);
        if ((st = gfc_post_recv(req, gfc_mod(me - s->dist, n), step, &s->token_in, 1, -1)) ||
            (st = gfc_post_send(req, (me + s->dist) % n, step, &s->token_out, 1, -1)))
            return st;
        s->dist *= 2;
    }
}

tdl_status_t gfc_barrier_start(gfc_group_t *g, gfc_request_t **req_out)
{
    if (g->size == 1)
        return gfc_request_create_done(g, "barrier", req_out);
    gfc_request_t *req;
    tdl_status_t st =
        gfc_request_create(g, "barrier", barrier_progress, sizeof(barrier_state_t), &req);
    if (st != TDL_OK)
        return st;
    ((barrier_state_t *)req->state)->dist = 1;
    if ((st = barrier_progress(req)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_barrier(gfc_group_t *g)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_barrier_start(g, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
