/* Butterfly all-reduce (Rabenseifner): a reduce-scatter by recursive halving, where each round
 * swaps half of the remaining range with the partner one bit away, then an all-gather by
 * recursive doubling. Non-power-of-two groups fold the surplus members in first and out last.
 *
 * With a codec (f32 sum) each halving round sends the encoded half and accumulates the decoded
 * half received; the owner of a final block encodes it once and decodes its own encoding, and the
 * doubling rounds forward those encodings unchanged, so every member decodes the same bytes. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

enum { BF_FOLD, BF_HALVE, BF_FINAL, BF_DOUBLE, BF_UNFOLD, BF_DONE };
enum { PEND_NONE, PEND_ACCUM, PEND_UNPACK };
#define BF_STEP_FOLD 0
#define BF_STEP_UNFOLD 1
#define BF_STEP_HALVE 2  /* + round */
#define BF_STEP_DOUBLE 40 /* + round */

typedef struct {
    const unsigned char *src; /* this member's values until the first reduction */
    unsigned char *buf, *tmp;
    size_t count, esize;
    gfc_dtype_t dtype;
    gfc_redop_t op;
    gfc_pof2_t f;
    int phase, mask;
    int lo, hi;              /* range of blocks (of p) this member holds */
    int recv_lo, recv_hi;    /* range arriving in the current round */
    int round;
    int pending;             /* what the receive into tmp awaits: PEND_* */
    const gfc_codec_t *codec;
    size_t enc_block_max;    /* bound for one block's encoding */
    unsigned char *enc;      /* codec: p encodings of final blocks, enc_block_max apart */
    size_t *enc_len;         /* codec: their lengths */
    unsigned char *sendbuf;  /* codec: message being sent */
    size_t tmp_bytes;
} bf_state_t;

static size_t bf_off(const bf_state_t *s, int block)
{
    return gfc_block_offset(s->count, s->f.p, block);
}

/* Elements in blocks [lo, hi). */
static size_t bf_span(const bf_state_t *s, int lo, int hi)
{
    return bf_off(s, hi) - bf_off(s, lo);
}

/* How many members' values virtual rank v's partial sums hold after the halving rounds above
 * `mask` (members folded into v count twice). */
static int bf_contributions(const bf_state_t *s, int v, int mask)
{
    int c = 0;
    for (int u = 0; u < s->f.p; u++)
        if ((u & (mask - 1)) == (v & (mask - 1)))
            c += u < s->f.rem ? 2 : 1;
    return c;
}

static gfc_codec_hop_t bf_hop(const gfc_request_t *req, int contributions, uint64_t chunk,
                              size_t offset)
{
    gfc_codec_hop_t h = {.rank = req->rt->rank,
                         .hop = contributions - 1,
                         .contributions = contributions,
                         .group_size = req->group.size,
                         .chunk = chunk,
                         .offset = offset,
                         .group_id = req->group.id,
                         .seq = req->seq};
    return h;
}

static tdl_status_t bf_codec_err(const bf_state_t *s, tdl_status_t st, const char *what)
{
    return tdl_error_raise(st, "codec %s: %s failed: %s", s->codec->ops->name, what,
                           tdl_error_get());
}

/* Codec all-gather message for blocks [lo, hi): their lengths (u64 each), then the bytes. */
static size_t bf_pack(bf_state_t *s, int lo, int hi, unsigned char *out)
{
    size_t pos = (size_t)(hi - lo) * 8;
    for (int b = lo; b < hi; b++) {
        uint64_t len = s->enc_len[b]; /* the buffer has no alignment to speak of: memcpy */
        memcpy(out + (size_t)(b - lo) * 8, &len, 8);
        memcpy(out + pos, s->enc + (size_t)b * s->enc_block_max, s->enc_len[b]);
        pos += s->enc_len[b];
    }
    return pos;
}

static tdl_status_t bf_unpack(bf_state_t *s, int lo, int hi, const unsigned char *in, size_t n)
{
    size_t pos = (size_t)(hi - lo) * 8;
    for (int b = lo; b < hi; b++) {
        uint64_t len;
        if (pos > n)
            return tdl_error_raise(TDL_ERR_CORRUPT, "butterfly: malformed codec message");
        memcpy(&len, in + (size_t)(b - lo) * 8, 8);
        if (len > s->enc_block_max || len > n - pos)
            return tdl_error_raise(TDL_ERR_CORRUPT, "butterfly: malformed codec message");
        s->enc_len[b] = len;
        memcpy(s->enc + (size_t)b * s->enc_block_max, in + pos, s->enc_len[b]);
        tdl_status_t st =
            s->codec->ops->decode(s->codec->ctx, in + pos, s->enc_len[b],
                                  (float *)(s->buf + bf_off(s, b) * 4), bf_span(s, b, b + 1));
        if (st != TDL_OK)
            return bf_codec_err(s, st, "decode");
        pos += s->enc_len[b];
    }
    return TDL_OK;
}

/* Applies what the last receive into tmp brought. */
static tdl_status_t bf_post_step(gfc_request_t *req, int kind, size_t received)
{
    bf_state_t *s = req->state;
    float *dst = (float *)(s->buf + bf_off(s, s->recv_lo) * s->esize);
    size_t n = bf_span(s, s->recv_lo, s->recv_hi);
    if (kind == PEND_UNPACK)
        return bf_unpack(s, s->recv_lo, s->recv_hi, s->tmp, received);
    const unsigned char *local = s->src + bf_off(s, s->recv_lo) * s->esize;
    tdl_status_t st;
    if (s->codec) {
        if (local != (const unsigned char *)dst)
            memcpy(dst, local, n * 4);
        st = s->codec->ops->decode_accumulate(s->codec->ctx, s->tmp, received, dst, n);
        if (st != TDL_OK)
            return bf_codec_err(s, st, "decode-accumulate");
    } else if ((st = gfc_reduce3(dst, local, s->tmp, n, s->dtype, s->op)) != TDL_OK) {
        return st;
    }
    s->src = s->buf; /* from here on buf holds every value this member still needs */
    return TDL_OK;
}

static tdl_status_t bf_last_received(gfc_request_t *req, const gfc_xfer_t *x)
{
    if (x->recv)
        req->received = x->bytes;
    return TDL_OK;
}

/* Sends blocks [lo, hi): raw, encoded with `contributions` (> 0), or as a packed message of
 * final encodings (contributions == 0). */
static tdl_status_t bf_send(gfc_request_t *req, int peer, uint32_t step, int lo, int hi,
                            int contributions)
{
    bf_state_t *s = req->state;
    /* Doubling rounds (contributions 0) send finished blocks, which live in buf. */
    const unsigned char *from = contributions > 0 ? s->src : s->buf;
    if (!s->codec)
        return gfc_post_send(req, peer, step, from + bf_off(s, lo) * s->esize,
                             bf_span(s, lo, hi) * s->esize, -1);
    size_t len;
    if (contributions > 0) {
        gfc_codec_hop_t hop = bf_hop(req, contributions, (uint64_t)lo, bf_off(s, lo));
        tdl_status_t st =
            s->codec->ops->encode(s->codec->ctx, &hop, (const float *)(from + bf_off(s, lo) * 4),
                                  bf_span(s, lo, hi), s->sendbuf, &len);
        if (st != TDL_OK)
            return bf_codec_err(s, st, "encode");
    } else {
        len = bf_pack(s, lo, hi, s->sendbuf);
    }
    return gfc_post_send(req, peer, step, s->sendbuf, len, -1);
}

/* Receives the partner's blocks [lo, hi): into tmp for a post-step of `kind`, or straight into
 * place (raw doubling, kind PEND_NONE). */
static tdl_status_t bf_recv(gfc_request_t *req, int peer, uint32_t step, int lo, int hi, int kind)
{
    bf_state_t *s = req->state;
    s->recv_lo = lo;
    s->recv_hi = hi;
    s->pending = kind;
    if (kind == PEND_NONE)
        return gfc_post_recv(req, peer, step, s->buf + bf_off(s, lo) * s->esize,
                             bf_span(s, lo, hi) * s->esize, -1);
    size_t bytes = !s->codec ? bf_span(s, lo, hi) * s->esize
                   : kind == PEND_UNPACK ? (size_t)(hi - lo) * (8 + s->enc_block_max)
                                         : s->tmp_bytes;
    return gfc_post_recv(req, peer, step, s->tmp, bytes, -1);
}

static tdl_status_t bf_progress(gfc_request_t *req)
{
    bf_state_t *s = req->state;
    int p = s->f.p, v = s->f.vrank;
    tdl_status_t st;
    for (;;) {
        bool idle;
        if ((st = gfc_xfers_poll(req, bf_last_received, &idle)) != TDL_OK || !idle)
            return st;
        if (s->pending != PEND_NONE) {
            int kind = s->pending;
            s->pending = PEND_NONE;
            if ((st = bf_post_step(req, kind, req->received)) != TDL_OK)
                return st;
        }
        TDL_TRACE("butterfly seq %llu: v %d phase %d mask %d range [%d, %d)",
                  (unsigned long long)req->seq, v, s->phase, s->mask, s->lo, s->hi);
        switch (s->phase) {
        case BF_FOLD:
            s->phase = BF_HALVE;
            if (s->f.buddy < 0)
                break;
            if (v < 0) {
                /* Hand everything to the buddy, then wait for the result. */
                s->phase = BF_UNFOLD;
                if ((st = bf_send(req, s->f.buddy, BF_STEP_FOLD, 0, p, 1)) != TDL_OK)
                    return st;
            } else if ((st = bf_recv(req, s->f.buddy, BF_STEP_FOLD, 0, p, PEND_ACCUM))) {
                return st;
            }
            break;
        case BF_HALVE:
            if (s->mask == 0) {
                s->phase = BF_FINAL;
                break;
            }
            {
                int half = (s->hi - s->lo) / 2, partner = gfc_pof2_member(&s->f, v ^ s->mask);
                int keep_lo = (v & s->mask) ? s->lo + half : s->lo;
                int send_lo = (v & s->mask) ? s->lo : s->lo + half;
                uint32_t step = BF_STEP_HALVE + (uint32_t)s->round++;
                int contrib = bf_contributions(s, v, s->mask * 2);
                if ((st = bf_recv(req, partner, step, keep_lo, keep_lo + half, PEND_ACCUM)) ||
                    (st = bf_send(req, partner, step, send_lo, send_lo + half, contrib)))
                    return st;
                s->lo = keep_lo;
                s->hi = keep_lo + half;
                s->mask >>= 1;
            }
            break;
        case BF_FINAL:
            s->phase = BF_DOUBLE;
            s->mask = 1;
            s->round = 0;
            if (s->codec) {
                /* Encode the owned block once; decode it like everyone else will. */
                size_t n = bf_span(s, v, v + 1);
                float *blk = (float *)(s->buf + bf_off(s, v) * 4);
                gfc_codec_hop_t hop = bf_hop(req, req->group.size, (uint64_t)v, bf_off(s, v));
                unsigned char *e = s->enc + (size_t)v * s->enc_block_max;
                if ((st = s->codec->ops->encode(s->codec->ctx, &hop, blk, n, e, &s->enc_len[v])))
                    return bf_codec_err(s, st, "encode");
                if ((st = s->codec->ops->decode(s->codec->ctx, e, s->enc_len[v], blk, n)))
                    return bf_codec_err(s, st, "decode");
            }
            break;
        case BF_DOUBLE:
            if (s->mask == p) {
                s->phase = BF_UNFOLD;
                break;
            }
            {
                int span = s->hi - s->lo, partner = gfc_pof2_member(&s->f, v ^ s->mask);
                int plo = (v & s->mask) ? s->lo - span : s->lo + span;
                uint32_t step = BF_STEP_DOUBLE + (uint32_t)s->round++;
                if ((st = bf_recv(req, partner, step, plo, plo + span,
                                  s->codec ? PEND_UNPACK : PEND_NONE)) ||
                    (st = bf_send(req, partner, step, s->lo, s->hi, 0)))
                    return st;
                s->lo = TDL_MIN(s->lo, plo);
                s->hi = s->lo + 2 * span;
                s->mask <<= 1;
            }
            break;
        case BF_UNFOLD:
            s->phase = BF_DONE;
            if (s->f.buddy >= 0) {
                /* Results travel raw: the buddy gets exactly the decoded values. */
                st = v < 0 ? gfc_post_recv(req, s->f.buddy, BF_STEP_UNFOLD, s->buf,
                                           s->count * s->esize, -1)
                           : gfc_post_send(req, s->f.buddy, BF_STEP_UNFOLD, s->buf,
                                           s->count * s->esize, -1);
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

static void bf_cleanup(gfc_request_t *req)
{
    bf_state_t *s = req->state;
    free(s->enc_len);
}

tdl_status_t gfc_allreduce_butterfly_start(gfc_group_t *g, const void *send, void *recv,
                                           size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                           const gfc_codec_t *codec, gfc_request_t **req_out)
{
    gfc_request_t *req;
    tdl_status_t st =
        gfc_request_create(g, codec ? "allreduce/butterfly+codec" : "allreduce/butterfly",
                           bf_progress, sizeof(bf_state_t), &req);
    if (st != TDL_OK)
        return st;
    bf_state_t *s = req->state;
    s->src = send;
    s->buf = recv;
    s->count = count;
    s->esize = gfc_dtype_size(dtype);
    s->dtype = dtype;
    s->op = op;
    s->codec = codec;
    s->f = gfc_pof2_of(g->size, g->me);
    s->lo = 0;
    s->hi = s->f.p;
    s->mask = s->f.p / 2;
    req->cleanup = bf_cleanup;
    size_t max_block = gfc_block_count(count, s->f.p, 0);
    size_t tmp_bytes = count * s->esize;
    if (codec) {
        s->enc_block_max = codec->ops->max_encoded_bytes(codec->ctx, max_block);
        size_t msg = (size_t)s->f.p * (8 + s->enc_block_max);
        /* The fold sends the whole vector as one encoding. */
        size_t whole = codec->ops->max_encoded_bytes(codec->ctx, count);
        tmp_bytes = TDL_MAX(TDL_MAX(msg, whole), tmp_bytes);
        s->enc_len = calloc((size_t)s->f.p, sizeof(size_t));
        gfc_request_scratch(req, 1, (size_t)s->f.p * s->enc_block_max + 2 * tmp_bytes + 64);
        if (!s->enc_len || !req->scratch2) {
            gfc_request_free(req);
            return tdl_error_raise(TDL_ERR_NOMEM, "gfc allreduce/butterfly: out of memory");
        }
        s->enc = req->scratch2;
        s->sendbuf = s->enc + (size_t)s->f.p * s->enc_block_max;
        s->tmp = s->sendbuf + tmp_bytes;
        s->tmp_bytes = tmp_bytes;
    } else {
        s->tmp_bytes = tmp_bytes;
        s->tmp = gfc_request_scratch(req, 0, tmp_bytes);
        if (!s->tmp) {
            gfc_request_free(req);
            return tdl_error_raise(TDL_ERR_NOMEM, "gfc allreduce/butterfly: out of memory");
        }
    }
    if ((st = bf_progress(req)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}
