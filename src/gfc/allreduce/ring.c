/* Ring all-reduce: a reduce-scatter then an all-gather around the group, each block cut into
 * chunks that travel the ring independently, so one chunk's reduction overlaps the next
 * chunk's transfer (pipelining).
 *
 * With n members and blocks numbered mod n, in reduce-scatter round r member i sends block
 * i+shift-1-r and receives block i+shift-2-r, which it reduces and forwards in round r+1; after
 * n-1 rounds it owns block i+shift. In all-gather round r it sends block i+shift-r and receives
 * block i+shift-1-r, forwarding it next round.
 *
 * With a codec (f32 sum only) every hop carries encoded bytes: a member's first send encodes its
 * own values, each later one is decode(received) + local, encoded again in one fused pass, and the
 * owner's final encoding travels the all-gather unchanged, so every member decodes the same bytes
 * and holds bit-identical results.
 *
 * hier runs this ring between hosts on its share of a larger vector (gfc_ring_rail_start): a view
 * makes the codec hops name the whole all-reduce (its offsets, group size, identity and sequence
 * number, and the members' values each ring member's data sums), and a tap hands hier every
 * chunk's final value (and final encoding) as it is known here, for the host's other members. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

typedef struct ring_chunk {
    int round;            /* round of the receive in flight: 0..n-2 RS, n-1..2n-3 AG */
    int rs_sends;         /* reduce-scatter sends not yet complete (no codec) */
    int busy[2];          /* codec: sends in flight from enc[k] */
    int ag_busy[2];       /* codec: sends in flight from ag[k] */
    bool blocked;         /* the next receive waits for a buffer to be free */
    bool done;
    unsigned char *tmp;   /* receive buffer: raw elements or encoded bytes */
    unsigned char *enc[2];/* codec: alternating encoded send buffers */
    unsigned char *ag[2]; /* codec: alternating all-gather buffers */
    size_t enc_len[2];
} ring_chunk_t;

typedef struct ring_state {
    const gfc_ring_view_t *view; /* NULL, or what a collective that runs this ring wants (hier) */
    int *contrib;         /* view: [n + 1]: members' values in a sum of c ring members */
    const unsigned char *src; /* this member's contributions (may be buf) */
    unsigned char *buf;   /* the result; blocks are written before they are read */
    size_t count, esize, chunk_elems;
    gfc_dtype_t dtype;
    gfc_redop_t op;
    int shift, nchunks, done_chunks;
    int first_next;       /* codec: the next chunk whose first send is still to be encoded */
    bool rs_only;
    void *out;            /* rs_only: where the owned block goes at the end (may be NULL) */
    const gfc_codec_t *codec;
    size_t enc_max;
    ring_chunk_t *chunks;
} ring_state_t;

void gfc_ring_chunking(const gfc_runtime_config_t *config, int n, size_t count, size_t esize,
                       bool codec, size_t *chunk_elems_out, int *nchunks_out)
{
    size_t max_block = gfc_block_count(count, n, 0);
    /* With a codec each chunk is one encoding, and dynamiq's budget split among super-groups
     * works within it: larger chunks spend the bits better but pipeline less (doc/gfc.md). */
    size_t unit = codec ? config->ring_codec_chunk_bytes : config->ring_chunk_bytes;
    size_t chunk = TDL_MAX(unit / esize, (size_t)1);
    chunk = TDL_MAX(chunk, (max_block + GFC_MAX_CHUNKS - 1) / GFC_MAX_CHUNKS);
    chunk = TDL_MAX(TDL_MIN(chunk, max_block), (size_t)1);
    int nchunks = (int)((max_block + chunk - 1) / chunk);
    *chunk_elems_out = chunk;
    *nchunks_out = nchunks == 0 ? 1 : nchunks;
}

void gfc_ring_chunk_range(size_t count, int n, size_t chunk_elems, int block, int c,
                          size_t *first, size_t *len)
{
    size_t boff = gfc_block_offset(count, n, block), bcnt = gfc_block_count(count, n, block);
    size_t lo = TDL_MIN((size_t)c * chunk_elems, bcnt);
    size_t hi = TDL_MIN(lo + chunk_elems, bcnt);
    *first = boff + lo;
    *len = hi - lo;
}

/* Elements [first, first + len) of chunk c of block b. */
static void chunk_range(const gfc_request_t *req, int block, int c, size_t *first, size_t *len)
{
    const ring_state_t *s = req->state;
    gfc_ring_chunk_range(s->count, req->group.size, s->chunk_elems, block, c, first, len);
}

static uint32_t ring_step(int round, int c)
{
    return (uint32_t)(round * GFC_MAX_CHUNKS + c);
}

/* Slot ids tell on_done which chunk and which buffer a transfer used. */
enum { SLOT_RAW = 0, SLOT_ENC0, SLOT_ENC1, SLOT_AG0, SLOT_AG1 };
static int slot_make(int c, int kind)
{
    return c * 8 + kind;
}

/* An encoding of a sum of `members` ring members (this one and those before it). */
static gfc_codec_hop_t ring_hop(const gfc_request_t *req, int c, int members, size_t first)
{
    const ring_state_t *s = req->state;
    const gfc_ring_view_t *v = s->view;
    gfc_codec_hop_t h = {
        .rank = req->rt->rank,
        .hop = members - 1,
        .contributions = v ? s->contrib[members] : members,
        .group_size = v ? v->group_size : req->group.size,
        .chunk = (v ? v->chunk : 0) + (uint64_t)c,
        .offset = (v ? v->offset : 0) + first,
        .group_id = v ? v->group_id : req->group.id,
        .seq = v ? v->seq : req->seq,
    };
    return h;
}

/* Chunk c of `block` holds its final value here: in buf (raw) or as the encoding `enc`. */
static tdl_status_t ring_tap(gfc_request_t *req, int block, int c, const void *enc,
                             size_t enc_len)
{
    const ring_state_t *s = req->state;
    if (!s->view || !s->view->tap)
        return TDL_OK;
    size_t first, len;
    chunk_range(req, block, c, &first, &len);
    return s->view->tap(s->view->arg, block, c, first, len, enc, enc_len);
}

static int right(const gfc_request_t *req)
{
    return (req->group.me + 1) % req->group.size;
}

static int left(const gfc_request_t *req)
{
    return gfc_mod(req->group.me - 1, req->group.size);
}

/* Block sent and received in round r (reduce-scatter rounds first, then all-gather rounds). */
static int send_block(const gfc_request_t *req, int r)
{
    const ring_state_t *s = req->state;
    int n = req->group.size, me = req->group.me;
    return r < n - 1 ? gfc_mod(me + s->shift - 1 - r, n) : gfc_mod(me + s->shift - (r - (n - 1)), n);
}

static int recv_block(const gfc_request_t *req, int r)
{
    const ring_state_t *s = req->state;
    int n = req->group.size, me = req->group.me;
    return r < n - 1 ? gfc_mod(me + s->shift - 2 - r, n)
                     : gfc_mod(me + s->shift - 1 - (r - (n - 1)), n);
}

/* ---- without a codec ---------------------------------------------------------------------- */

static tdl_status_t raw_send(gfc_request_t *req, int c, int r)
{
    ring_state_t *s = req->state;
    size_t first, len;
    chunk_range(req, send_block(req, r), c, &first, &len);
    bool rs = r < req->group.size - 1;
    if (rs)
        s->chunks[c].rs_sends++;
    /* Round 0 sends the member's own values; later rounds forward sums kept in buf. */
    const unsigned char *from = r == 0 ? s->src : s->buf;
    return gfc_post_send(req, right(req), ring_step(r, c), from + first * s->esize,
                         len * s->esize, slot_make(c, rs ? SLOT_RAW : SLOT_AG0));
}

/* Posts chunk c's receive for its current round, or marks it blocked. */
static tdl_status_t raw_recv(gfc_request_t *req, int c)
{
    ring_state_t *s = req->state;
    ring_chunk_t *ch = &s->chunks[c];
    int n = req->group.size, r = ch->round;
    size_t first, len;
    chunk_range(req, recv_block(req, r), c, &first, &len);
    if (r < n - 1)
        return gfc_post_recv(req, left(req), ring_step(r, c), ch->tmp, len * s->esize,
                             slot_make(c, SLOT_RAW));
    /* All-gather writes in place: not while a reduce-scatter send may still read there. */
    if (ch->rs_sends > 0) {
        ch->blocked = true;
        return TDL_OK;
    }
    ch->blocked = false;
    return gfc_post_recv(req, left(req), ring_step(r, c), s->buf + first * s->esize,
                         len * s->esize, slot_make(c, SLOT_RAW));
}

static tdl_status_t chunk_finish(gfc_request_t *req, int c)
{
    ring_state_t *s = req->state;
    s->chunks[c].done = true;
    s->done_chunks++;
    return TDL_OK;
}

static tdl_status_t raw_on_done(gfc_request_t *req, const gfc_xfer_t *x)
{
    ring_state_t *s = req->state;
    int c = x->slot / 8, n = req->group.size;
    ring_chunk_t *ch = &s->chunks[c];
    if (!x->recv) {
        /* Only reduce-scatter sends are counted; all-gather sends read settled blocks. */
        if (x->slot % 8 == SLOT_RAW) {
            ch->rs_sends--;
            if (ch->blocked && ch->rs_sends == 0)
                return raw_recv(req, c);
        }
        return TDL_OK;
    }
    int r = ch->round;
    tdl_status_t st;
    if (r < n - 1) {
        size_t first, len;
        chunk_range(req, recv_block(req, r), c, &first, &len);
        if ((st = gfc_reduce3(s->buf + first * s->esize, s->src + first * s->esize, ch->tmp,
                              len, s->dtype, s->op)))
            return st;
    }
    /* the owned block's final sum (end of the reduce-scatter), or a final block arrived */
    if (r >= n - 2 && !s->rs_only &&
        (st = ring_tap(req, recv_block(req, r), c, NULL, 0)) != TDL_OK)
        return st;
    if (r == n - 2 && s->rs_only)
        return chunk_finish(req, c);
    if (r == 2 * n - 3)
        return chunk_finish(req, c);
    ch->round = r + 1;
    if ((st = raw_send(req, c, r + 1)) != TDL_OK)
        return st;
    return raw_recv(req, c);
}

/* ---- with a codec ------------------------------------------------------------------------- */

static tdl_status_t codec_fail(tdl_status_t st, const gfc_codec_t *codec, const char *what)
{
    return tdl_error_raise(st, "codec %s: %s failed: %s", codec->ops->name, what,
                           tdl_error_get());
}

/* Sends enc[k] of chunk c in round r. */
static tdl_status_t enc_send(gfc_request_t *req, int c, int r, int k)
{
    ring_state_t *s = req->state;
    ring_chunk_t *ch = &s->chunks[c];
    ch->busy[k]++;
    return gfc_post_send(req, right(req), ring_step(r, c), ch->enc[k], ch->enc_len[k],
                         slot_make(c, SLOT_ENC0 + k));
}

static tdl_status_t codec_recv(gfc_request_t *req, int c)
{
    ring_state_t *s = req->state;
    ring_chunk_t *ch = &s->chunks[c];
    int n = req->group.size, r = ch->round;
    if (r < n - 1) {
        return gfc_post_recv(req, left(req), ring_step(r, c), ch->tmp, s->enc_max,
                             slot_make(c, SLOT_RAW));
    }
    /* All-gather: receive into ag[k] once its previous forward has left. */
    int k = (r - (n - 1)) % 2;
    if (ch->ag_busy[k] > 0) {
        ch->blocked = true;
        return TDL_OK;
    }
    ch->blocked = false;
    return gfc_post_recv(req, left(req), ring_step(r, c), ch->ag[k], s->enc_max,
                         slot_make(c, SLOT_AG0 + k));
}

/* Reduce-scatter receive of round r done: fuse and forward, or finish the owned block. */
static tdl_status_t codec_rs_step(gfc_request_t *req, int c, size_t in_bytes)
{
    ring_state_t *s = req->state;
    ring_chunk_t *ch = &s->chunks[c];
    int n = req->group.size, r = ch->round;
    int k = (r + 1) % 2;
    if (ch->busy[k] > 0) {
        /* enc[k] still being sent: retry when that send completes */
        ch->blocked = true;
        ch->enc_len[k] = in_bytes; /* remembers the received length meanwhile */
        return TDL_OK;
    }
    ch->blocked = false;
    size_t first, len;
    chunk_range(req, recv_block(req, r), c, &first, &len);
    const float *local = (const float *)(s->src + first * 4);
    float *result = (float *)(s->buf + first * 4);
    gfc_codec_hop_t hop = ring_hop(req, c, r + 2, first);
    tdl_status_t st = s->codec->ops->decode_accumulate_encode(
        s->codec->ctx, &hop, ch->tmp, in_bytes, local, len, ch->enc[k], &ch->enc_len[k]);
    if (st != TDL_OK)
        return codec_fail(st, s->codec, "decode-accumulate-encode");
    if (r == n - 2) {
        /* Final sum of the owned block: decode our own encoding, as every other member will. */
        if ((st = s->codec->ops->decode(s->codec->ctx, ch->enc[k], ch->enc_len[k], result, len)))
            return codec_fail(st, s->codec, "decode");
        if (s->rs_only)
            return chunk_finish(req, c);
        if ((st = ring_tap(req, recv_block(req, r), c, ch->enc[k], ch->enc_len[k])) != TDL_OK)
            return st;
    }
    ch->round = r + 1;
    if ((st = enc_send(req, c, r + 1, k)) != TDL_OK)
        return st;
    return codec_recv(req, c);
}

static tdl_status_t codec_on_done(gfc_request_t *req, const gfc_xfer_t *x)
{
    ring_state_t *s = req->state;
    int c = x->slot / 8, kind = x->slot % 8, n = req->group.size;
    ring_chunk_t *ch = &s->chunks[c];
    tdl_status_t st;
    if (!x->recv) {
        if (kind == SLOT_ENC0 || kind == SLOT_ENC1) {
            ch->busy[kind - SLOT_ENC0]--;
            if (ch->blocked && ch->round < n - 1)
                return codec_rs_step(req, c, ch->enc_len[(ch->round + 1) % 2]);
        } else {
            ch->ag_busy[kind - SLOT_AG0]--;
        }
        if (ch->blocked && ch->round >= n - 1)
            return codec_recv(req, c);
        return TDL_OK;
    }
    int r = ch->round;
    if (r < n - 1)
        return codec_rs_step(req, c, x->bytes);
    /* All-gather: decode into place, forward the same bytes. */
    int k = kind - SLOT_AG0;
    size_t first, len;
    chunk_range(req, recv_block(req, r), c, &first, &len);
    if ((st = s->codec->ops->decode(s->codec->ctx, ch->ag[k], x->bytes,
                                    (float *)(s->buf + first * 4), len)))
        return codec_fail(st, s->codec, "decode");
    if ((st = ring_tap(req, recv_block(req, r), c, ch->ag[k], x->bytes)) != TDL_OK)
        return st;
    if (r == 2 * n - 3)
        return chunk_finish(req, c);
    ch->round = r + 1;
    ch->ag_busy[k]++;
    if ((st = gfc_post_send(req, right(req), ring_step(r + 1, c), ch->ag[k], x->bytes,
                            slot_make(c, SLOT_AG0 + k))))
        return st;
    return codec_recv(req, c);
}

/* ---- driver -------------------------------------------------------------------------------- */

static tdl_status_t codec_first_send(gfc_request_t *req, int c);

static tdl_status_t ring_progress(gfc_request_t *req)
{
    ring_state_t *s = req->state;
    bool idle;
    tdl_status_t st = TDL_OK;
    if (s->codec && s->first_next < s->nchunks)
        st = codec_first_send(req, s->first_next++);
    if (st == TDL_OK)
        st = gfc_xfers_poll(req, s->codec ? codec_on_done : raw_on_done, &idle);
    if (st != TDL_OK)
        return st;
    if (idle && s->done_chunks == s->nchunks && s->first_next == s->nchunks) {
        if (s->out) {
            int n = req->group.size, owned = gfc_mod(req->group.me + s->shift, n);
            memcpy(s->out, s->buf + gfc_block_offset(s->count, n, owned) * s->esize,
                   gfc_block_count(s->count, n, owned) * s->esize);
        }
        req->finished = true;
    }
    return TDL_OK;
}

/* Encodes chunk c's own values, sends them and posts the chunk's first receive. */
static tdl_status_t codec_first_send(gfc_request_t *req, int c)
{
    ring_state_t *s = req->state;
    ring_chunk_t *ch = &s->chunks[c];
    size_t first, len;
    chunk_range(req, send_block(req, 0), c, &first, &len);
    gfc_codec_hop_t hop = ring_hop(req, c, 1, first);
    tdl_status_t st = s->codec->ops->encode(s->codec->ctx, &hop,
                                            (const float *)(s->src + first * 4), len, ch->enc[0],
                                            &ch->enc_len[0]);
    if (st != TDL_OK)
        return codec_fail(st, s->codec, "encode");
    if ((st = enc_send(req, c, 0, 0)) == TDL_OK)
        st = codec_recv(req, c);
    return st;
}

/* Without a codec every chunk's first send leaves at once. With one, the first chunk is encoded
 * here and each later one in a progress call of its own, between which UCX moves what is
 * already encoded: encoding every chunk before the first progress call left the link idle for
 * that long (10 ms of 140 for 64 MiB in dynamiq on 4 ranks at 1 Gbit/s). */
static tdl_status_t ring_first_sends(gfc_request_t *req)
{
    ring_state_t *s = req->state;
    tdl_status_t st = TDL_OK;
    if (s->codec) {
        s->first_next = 1;
        return codec_first_send(req, 0);
    }
    s->first_next = s->nchunks;
    for (int c = 0; c < s->nchunks && st == TDL_OK; c++) {
        st = raw_send(req, c, 0);
        if (st == TDL_OK)
            st = raw_recv(req, c);
    }
    return st;
}

static tdl_status_t gfc_ring_start(gfc_group_t *g, const char *name, const void *src, void *buf,
                                   size_t count, gfc_dtype_t dtype, gfc_redop_t op, int shift,
                                   bool rs_only, void *out, const gfc_codec_t *codec,
                                   const gfc_ring_view_t *view, gfc_request_t **req_out)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_request_create(g, name, ring_progress, sizeof(ring_state_t), &req);
    if (st != TDL_OK)
        return st;
    ring_state_t *s = req->state;
    int n = g->size;
    s->src = src;
    s->buf = buf;
    s->count = count;
    s->dtype = dtype;
    s->op = op;
    s->esize = gfc_dtype_size(dtype);
    s->shift = shift;
    s->rs_only = rs_only;
    s->out = out;
    s->codec = codec;
    s->view = view;
    gfc_ring_chunking(&g->rt->config, n, count, s->esize, codec != NULL, &s->chunk_elems,
                      &s->nchunks);
    s->enc_max = codec ? codec->ops->max_encoded_bytes(codec->ctx, s->chunk_elems) : 0;
    size_t tmp_bytes = codec ? s->enc_max : s->chunk_elems * s->esize;
    size_t per_chunk = codec ? 5 * s->enc_max : tmp_bytes;
    s->chunks = calloc((size_t)s->nchunks, sizeof(ring_chunk_t));
    gfc_request_scratch(req, 0, (size_t)s->nchunks * per_chunk + 64);
    if (view) {
        /* ring member me - k contributes the values of view->weight[me - k] group members */
        s->contrib = calloc((size_t)n + 1, sizeof(int));
        for (int c = 1; s->contrib && c <= n; c++)
            s->contrib[c] = s->contrib[c - 1] +
                            (view->weight ? view->weight[gfc_mod(g->me - (c - 1), n)] : 1);
    }
    if (!s->chunks || !req->scratch || (view && !s->contrib)) {
        free(s->chunks);
        free(s->contrib);
        gfc_request_free(req);
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc %s: cannot allocate %zu bytes of chunks", name,
                               (size_t)s->nchunks * per_chunk);
    }
    unsigned char *p = req->scratch;
    for (int c = 0; c < s->nchunks; c++) {
        ring_chunk_t *ch = &s->chunks[c];
        ch->tmp = p;
        p += tmp_bytes;
        if (codec) {
            ch->enc[0] = p, p += s->enc_max;
            ch->enc[1] = p, p += s->enc_max;
            ch->ag[0] = p, p += s->enc_max;
            ch->ag[1] = p, p += s->enc_max;
        }
    }
    req->cleanup = NULL;
    if ((st = ring_first_sends(req)) != TDL_OK) {
        free(s->chunks);
        free(s->contrib);
        s->chunks = NULL;
        return gfc_request_fail_start(req, st);
    }
    *req_out = req;
    return TDL_OK;
}

static void ring_cleanup(gfc_request_t *req)
{
    ring_state_t *s = req->state;
    free(s->chunks);
    free(s->contrib);
    s->chunks = NULL;
    s->contrib = NULL;
}

tdl_status_t gfc_allreduce_ring_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                      gfc_dtype_t dtype, gfc_redop_t op, const gfc_codec_t *codec,
                                      gfc_request_t **req_out)
{
    tdl_status_t st = gfc_ring_start(g, codec ? "allreduce/ring+codec" : "allreduce/ring", send,
                                     recv, count, dtype, op, 1, false, NULL, codec, NULL, req_out);
    if (st == TDL_OK)
        (*req_out)->cleanup = ring_cleanup;
    return st;
}

tdl_status_t gfc_ring_reduce_scatter_start(gfc_group_t *g, const char *name, const void *src,
                                           void *buf, size_t count, gfc_dtype_t dtype,
                                           gfc_redop_t op, int shift, void *out,
                                           gfc_request_t **req_out)
{
    tdl_status_t st = gfc_ring_start(g, name, src, buf, count, dtype, op, shift, true, out, NULL,
                                     NULL, req_out);
    if (st == TDL_OK)
        (*req_out)->cleanup = ring_cleanup;
    return st;
}

tdl_status_t gfc_ring_rail_start(gfc_group_t *g, const char *name, const void *src, void *buf,
                                 size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                 const gfc_codec_t *codec, const gfc_ring_view_t *view,
                                 gfc_request_t **req_out)
{
    tdl_status_t st = gfc_ring_start(g, name, src, buf, count, dtype, op, 1, false, NULL, codec,
                                     view, req_out);
    if (st == TDL_OK)
        (*req_out)->cleanup = ring_cleanup;
    return st;
}
