/* Moving state between two groups of ranks at a task boundary: each tensor is declared owner-only
 * (one member holds it), replicated (every member holds all of it) or sharded (member i of P
 * holds rows [rows i / P, rows (i + 1) / P)), in the group it leaves and in the group it joins;
 * the schedule of point-to-point messages follows from the two layouts, every rank computing the
 * same one without a message. The messages run over gfc on the union of the two groups (formed
 * for the occasion, which costs nothing), so the groups may have any sizes and overlap or not. A
 * rank that holds rows it will hold again copies them locally. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gfc/gfc.h"
#include "serve/serve.h"

/* Rows [*lo, *hi) that member i of a group of p holds under layout l. */
static void held(serve_layout_t l, int i, int p, size_t rows, size_t *lo, size_t *hi)
{
    switch (l.kind) {
    case SERVE_LAYOUT_REPLICATED:
        *lo = 0, *hi = rows;
        return;
    case SERVE_LAYOUT_OWNER:
        *lo = 0, *hi = i == l.owner ? rows : 0;
        return;
    default:
        *lo = rows * (size_t)i / (size_t)p, *hi = rows * (size_t)(i + 1) / (size_t)p;
    }
}

static int index_of(const int *ranks, int n, int rank)
{
    for (int i = 0; i < n; i++)
        if (ranks[i] == rank)
            return i;
    return -1;
}

int serve_reshard_schedule(const int *a, int na, serve_layout_t from, const int *b, int nb,
                           serve_layout_t to, size_t rows, serve_move_msg_t *msgs, int max)
{
    int count = 0;
    for (int j = 0; j < nb; j++) {
        size_t need_lo, need_hi;
        held(to, j, nb, rows, &need_lo, &need_hi);
        size_t at = need_lo;
        while (at < need_hi) {
            /* a source for rows from `at`: this very rank if it holds them, else the member of A
             * that does (for replicated data, member j mod na, spreading the senders) */
            int src = -1;
            size_t src_hi = need_hi;
            int self = index_of(a, na, b[j]);
            if (self >= 0) {
                size_t lo, hi;
                held(from, self, na, rows, &lo, &hi);
                if (lo <= at && at < hi)
                    src = self, src_hi = TDL_MIN(hi, need_hi);
            }
            for (int k = 0; src < 0 && k < na; k++) {
                int i = (j + k) % na;
                size_t lo, hi;
                held(from, i, na, rows, &lo, &hi);
                if (lo <= at && at < hi)
                    src = i, src_hi = TDL_MIN(hi, need_hi);
            }
            if (src < 0)
                return -1; /* nobody holds these rows: a bad layout */
            if (count < max)
                msgs[count] = (serve_move_msg_t){.src = a[src], .dst = b[j], .row0 = at,
                                                 .nrows = src_hi - at};
            count++;
            at = src_hi;
        }
    }
    return count;
}

tdl_status_t serve_reshard(gfc_runtime_t *rt, int me, const int *a, int na, const int *b, int nb,
                           uint64_t ns, const serve_tensor_move_t *moves, int nmoves)
{
    /* the union: A in order, then the members of B that are not in A */
    int *u = malloc((size_t)(na + nb) * sizeof(int)), nu = 0;
    if (!u)
        return tdl_error_raise(TDL_ERR_NOMEM, "migration: out of memory");
    for (int i = 0; i < na; i++)
        u[nu++] = a[i];
    for (int j = 0; j < nb; j++)
        if (index_of(a, na, b[j]) < 0)
            u[nu++] = b[j];
    tdl_status_t st = TDL_OK;
    if (index_of(u, nu, me) < 0) {
        free(u);
        return TDL_OK; /* in neither group: nothing to do */
    }
    gfc_group_t g;
    if ((st = gfc_group_init(&g, rt, u, nu, ns)) != TDL_OK) {
        free(u);
        return st;
    }
    int ia = index_of(a, na, me), ib = index_of(b, nb, me);
    size_t cap = 0;
    for (int t = 0; t < nmoves; t++)
        cap += (size_t)(na + nb) * (size_t)(na + 2);
    serve_move_msg_t *msgs = malloc(TDL_MAX(cap, (size_t)1) * sizeof(*msgs));
    gfc_request_t **reqs = malloc(TDL_MAX(cap, (size_t)1) * sizeof(*reqs));
    size_t nreq = 0;
    uint64_t tag = 0;
    if (!msgs || !reqs)
        st = tdl_error_raise(TDL_ERR_NOMEM, "migration: out of memory");
    for (int t = 0; t < nmoves && st == TDL_OK; t++) {
        const serve_tensor_move_t *mv = &moves[t];
        int n = serve_reshard_schedule(a, na, mv->from, b, nb, mv->to, mv->rows, msgs, (int)cap);
        if (n < 0 || (size_t)n > cap) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG,
                                 "migration: tensor %d: no member of the old group holds some of "
                                 "its rows under its layout",
                                 t);
            break;
        }
        size_t src_lo = 0, src_hi = 0, dst_lo = 0, dst_hi = 0;
        if (ia >= 0)
            held(mv->from, ia, na, mv->rows, &src_lo, &src_hi);
        if (ib >= 0)
            held(mv->to, ib, nb, mv->rows, &dst_lo, &dst_hi);
        for (int k = 0; k < n && st == TDL_OK; k++, tag++) {
            const serve_move_msg_t *msg = &msgs[k];
            size_t bytes = msg->nrows * mv->row_bytes;
            const unsigned char *from = mv->src ? mv->src + (msg->row0 - src_lo) * mv->row_bytes
                                                : NULL;
            unsigned char *to = mv->dst ? mv->dst + (msg->row0 - dst_lo) * mv->row_bytes : NULL;
            if (msg->src == me && msg->dst == me) {
                if (from != to)
                    memmove(to, from, bytes);
            } else if (msg->src == me) {
                st = gfc_send_start(&g, index_of(u, nu, msg->dst), tag, from, bytes,
                                    &reqs[nreq]);
                nreq += st == TDL_OK;
            } else if (msg->dst == me) {
                st = gfc_recv_start(&g, index_of(u, nu, msg->src), tag, to, bytes, &reqs[nreq]);
                nreq += st == TDL_OK;
            }
        }
        (void)dst_hi, (void)src_hi;
    }
    tdl_status_t wst = nreq ? gfc_request_wait_all(reqs, nreq) : TDL_OK;
    if (st == TDL_OK)
        st = wst;
    free(reqs), free(msgs), free(u);
    return st;
}

tdl_status_t serve_traj_migrate(gfc_runtime_t *rt, int me, const int *a, int na, const int *b,
                                int nb, uint64_t ns, serve_traj_t *t)
{
    /* the step and PREPARE's flag, then the latents: replicated in both groups. A rank joining
     * has initialized t from the request's spec, so it knows the sizes. */
    int32_t head[2] = {t->step, t->prepared};
    size_t per = (size_t)t->channels * t->res * t->res * sizeof(float);
    serve_layout_t rep = {.kind = SERVE_LAYOUT_REPLICATED};
    bool in_a = index_of(a, na, me) >= 0, in_b = index_of(b, nb, me) >= 0;
    serve_tensor_move_t moves[2] = {
        {.rows = 1, .row_bytes = sizeof(head), .from = rep, .to = rep,
         .src = in_a ? (const unsigned char *)head : NULL, .dst = in_b ? (unsigned char *)head : NULL},
        {.rows = (size_t)t->n, .row_bytes = per, .from = rep, .to = rep,
         .src = in_a ? (const unsigned char *)t->x : NULL, .dst = in_b ? (unsigned char *)t->x : NULL},
    };
    tdl_status_t st = serve_reshard(rt, me, a, na, b, nb, ns, moves, 2);
    if (st == TDL_OK && in_b) {
        t->step = head[0];
        t->prepared = head[1] != 0;
    }
    return st;
}
