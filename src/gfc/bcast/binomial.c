/* Broadcast down a binomial tree rooted at `root`, cut into chunks so that large messages
 * pipeline down the tree instead of crossing it whole at every level. A small message to a small
 * group goes from the root to every member at once (a flat tree): one hop instead of log2(n),
 * for n - 1 small sends from the root. That is training's decision after every step (2 KiB),
 * whose last hop is what a rank leaving training for serving waits for. */
#include "config.h"

#include "gfc/gfc_internal.h"

#define BCAST_FLAT_BYTES   8192 /* messages up to this size, */
#define BCAST_FLAT_MEMBERS 32   /* to groups up to this size, go flat */

typedef struct {
    unsigned char *buf;
    size_t bytes, chunk_bytes;
    int nchunks, root, vrank, parent;
    int received;       /* chunks that arrived from the parent */
    bool posted, flat;
} bcast_state_t;

/* Children of virtual rank v in a tree of n: v + m for every power of two m below v's lowest
 * set bit (all powers for the root), while v + m < n; in a flat tree, every v > 0 of the root. */
static tdl_status_t bcast_forward(gfc_request_t *req, int chunk)
{
    bcast_state_t *s = req->state;
    int n = req->group.size;
    int low = s->vrank ? (s->vrank & -s->vrank) : (1 << 30);
    if (s->flat && s->vrank)
        return TDL_OK; /* a leaf */
    size_t off = (size_t)chunk * s->chunk_bytes;
    size_t len = TDL_MIN(s->chunk_bytes, s->bytes - off);
    for (int m = 1; m < low && s->vrank + m < n; m = s->flat ? m + 1 : m << 1) {
        int child = (s->vrank + m + s->root) % n;
        tdl_status_t st = gfc_post_send(req, child, (uint32_t)chunk, s->buf + off, len, -1);
        if (st != TDL_OK)
            return st;
    }
    return TDL_OK;
}

static tdl_status_t bcast_on_done(gfc_request_t *req, const gfc_xfer_t *x)
{
    bcast_state_t *s = req->state;
    if (!x->recv)
        return TDL_OK;
    s->received++;
    return bcast_forward(req, x->slot);
}

static tdl_status_t bcast_progress(gfc_request_t *req)
{
    bcast_state_t *s = req->state;
    tdl_status_t st;
    if (!s->posted) {
        s->posted = true;
        for (int c = 0; c < s->nchunks; c++) {
            if (s->vrank == 0) {
                st = bcast_forward(req, c);
            } else {
                size_t off = (size_t)c * s->chunk_bytes;
                st = gfc_post_recv(req, s->parent, (uint32_t)c, s->buf + off,
                                   TDL_MIN(s->chunk_bytes, s->bytes - off), c);
            }
            if (st != TDL_OK)
                return st;
        }
    }
    bool idle;
    st = gfc_xfers_poll(req, bcast_on_done, &idle);
    if (st == TDL_OK && idle)
        req->finished = true;
    return st;
}

tdl_status_t gfc_bcast_start(gfc_group_t *g, void *buf, size_t count, gfc_dtype_t dtype, int root,
                             gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("bcast", count, dtype);
    if (st != TDL_OK)
        return st;
    if (root < 0 || root >= g->size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc bcast: root %d outside the group of %d",
                               root, g->size);
    size_t bytes = count * gfc_dtype_size(dtype);
    if (g->size == 1 || bytes == 0)
        return gfc_request_create_done(g, "bcast", req_out);
    gfc_request_t *req;
    if ((st = gfc_request_create(g, "bcast", bcast_progress, sizeof(bcast_state_t), &req)))
        return st;
    bcast_state_t *s = req->state;
    s->buf = buf;
    s->bytes = bytes;
    s->root = root;
    s->vrank = gfc_mod(g->me - root, g->size);
    s->chunk_bytes = TDL_MAX(g->rt->config.ring_chunk_bytes, (bytes + GFC_MAX_CHUNKS - 1) /
                                                                 GFC_MAX_CHUNKS);
    s->nchunks = (int)((bytes + s->chunk_bytes - 1) / s->chunk_bytes);
    s->flat = s->nchunks == 1 && bytes <= BCAST_FLAT_BYTES && g->size <= BCAST_FLAT_MEMBERS;
    s->parent = s->flat ? root : (s->vrank - (s->vrank & -s->vrank) + root) % g->size;
    if ((st = bcast_progress(req)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}

tdl_status_t gfc_bcast(gfc_group_t *g, void *buf, size_t count, gfc_dtype_t dtype, int root)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_bcast_start(g, buf, count, dtype, root, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
