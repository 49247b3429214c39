/* Recursive-doubling all-reduce for small vectors: log2(p) rounds, each exchanging the whole
 * vector with the partner whose virtual rank differs in one bit. Every member computes the same
 * operands in a different order; the operators are commutative, so results are bit-identical. */
#include "config.h"

#include <stdlib.h>

#include "gfc/gfc_internal.h"

enum { RD_FOLD, RD_CORE, RD_UNFOLD, RD_DONE };
#define RD_STEP_FOLD 0
#define RD_STEP_UNFOLD 1
#define RD_STEP_CORE 2

typedef struct {
    const unsigned char *src; /* this member's values until the first reduction */
    unsigned char *buf, *tmp;
    size_t count, bytes;
    gfc_dtype_t dtype;
    gfc_redop_t op;
    gfc_pof2_t f;
    int phase, mask;
    bool reduce_pending; /* a receive into tmp awaits reduction */
} rd_state_t;

static tdl_status_t rd_progress(gfc_request_t *req)
{
    rd_state_t *s = req->state;
    tdl_status_t st;
    for (;;) {
        bool idle;
        if ((st = gfc_xfers_poll(req, NULL, &idle)) != TDL_OK || !idle)
            return st;
        if (s->reduce_pending) {
            s->reduce_pending = false;
            if ((st = gfc_reduce3(s->buf, s->src, s->tmp, s->count, s->dtype, s->op)) != TDL_OK)
                return st;
            s->src = s->buf;
        }
        switch (s->phase) {
        case RD_FOLD:
            s->phase = RD_CORE;
            if (s->f.buddy >= 0) {
                if (s->f.vrank < 0) {
                    st = gfc_post_send(req, s->f.buddy, RD_STEP_FOLD, s->src, s->bytes, -1);
                    s->phase = RD_UNFOLD;
                } else {
                    st = gfc_post_recv(req, s->f.buddy, RD_STEP_FOLD, s->tmp, s->bytes, -1);
                    s->reduce_pending = true;
                }
                if (st != TDL_OK)
                    return st;
            }
            break;
        case RD_CORE:
            if (s->mask >= s->f.p) {
                s->phase = RD_UNFOLD;
                break;
            }
            {
                int partner = gfc_pof2_member(&s->f, s->f.vrank ^ s->mask);
                uint32_t step = RD_STEP_CORE + (uint32_t)__builtin_ctz((unsigned)s->mask);
                if ((st = gfc_post_recv(req, partner, step, s->tmp, s->bytes, -1)) ||
                    (st = gfc_post_send(req, partner, step, s->src, s->bytes, -1)))
                    return st;
                s->reduce_pending = true;
                s->mask <<= 1;
            }
            break;
        case RD_UNFOLD:
            s->phase = RD_DONE;
            if (s->f.buddy >= 0) {
                st = s->f.vrank < 0
                         ? gfc_post_recv(req, s->f.buddy, RD_STEP_UNFOLD, s->buf, s->bytes, -1)
                         : gfc_post_send(req, s->f.buddy, RD_STEP_UNFOLD, s->buf, s->bytes, -1);
                if (st != TDL_OK)
                    return st;
            }
            break;
        default:
            req->finished = true;
            return TDL_OK;
        }
    }
}

tdl_status_t gfc_allreduce_recursive_doubling_start(gfc_group_t *g, const void *send, void *recv,
                                                    size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                                    const gfc_codec_t *codec,
                                                    gfc_request_t **req_out)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_request_create(g, "allreduce/recursive_doubling", rd_progress,
                                         sizeof(rd_state_t), &req);
    if (st != TDL_OK)
        return st;
    rd_state_t *s = req->state;
    s->src = send;
    s->buf = recv;
    s->count = count;
    s->bytes = count * gfc_dtype_size(dtype);
    s->dtype = dtype;
    s->op = op;
    s->f = gfc_pof2_of(g->size, g->me);
    s->mask = 1;
    s->tmp = gfc_request_scratch(req, 0, s->bytes);
    if (!s->tmp) {
        gfc_request_free(req);
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc allreduce: cannot allocate %zu bytes",
                               s->bytes);
    }
    if ((st = rd_progress(req)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}
