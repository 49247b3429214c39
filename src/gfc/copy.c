/* Single copy within a host: a large message to a peer on this host travels as a descriptor
 * (where the data lies in the sender), the receiver reads it straight into its buffer with
 * process_vm_readv and answers; the sender's request completes on the answer.
 *
 * UCX 1.13 has the same single copy (its cma transport), but a peer dying under one of its
 * transfers trips an assertion inside UCX and kills the survivor too. Here a read from a dead
 * peer is a failed system call, reported as that peer's failure like any other.
 *
 *   sender                                    receiver (its receive ignores GFC_TAG_DESC)
 *   tag T | DESC: {magic, addr, len, id} --->  reads len bytes at addr of the sender's pid
 *   (its buffer stays put)               <---  ACK(T, id): OK, or TRUNCATED (its buffer was short)
 *   done                                       done once the answer has left
 * A receiver that cannot read this sender (no permission, another pid namespace: a probe of the
 * sender's cookie tells) answers NACK; the sender then sends the data itself, on DATA(T, id), and
 * sends to that peer as usual from then on. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "gfc/gfc_internal.h"

#define COPY_DESC_MAGIC 0x67666331636f7079ull /* "gfc1copy" */

/* A receiver reads at most this much per pass of the progress engine, so that its other
 * transfers move between pieces however large a message is. Pieces of 512 KiB read 7-25% slower
 * than 8 MiB on the 8-device all-to-all (bench/run gfc-alltoall, 64 and 256 MiB, 3 runs each,
 * doc/gfc.md); 8 MiB read as fast as whole messages. */
#define COPY_PIECE (8u << 20)

enum { COPY_ACK_OK = 1, COPY_ACK_TRUNCATED = 2, COPY_ACK_NACK = 3 };

typedef struct copy_desc {
    uint64_t magic;
    uint64_t addr;
    uint64_t len;
    uint64_t id; /* the sender's count of single copies: its answer's and data's tags */
} copy_desc_t;
_Static_assert(sizeof(copy_desc_t) == GFC_COPY_DESC_BYTES, "GFC_COPY_DESC_BYTES");

/* What one transfer by single copy holds apart from gfc_xfer_t (which moves as its request's
 * array grows): the buffers UCX reads and writes, and the second UCX request. */
struct gfc_copy {
    copy_desc_t desc;
    uint64_t word; /* the answer, sent or received */
    void *side;    /* the descriptor's send (sender), the answer's send (receiver), or NULL */
    enum {
        COPY_RECV_READING,  /* receiver: reads piece by piece (done bytes so far) */
        COPY_SEND_WAIT,     /* sender: x->ucx receives the answer */
        COPY_SEND_FALLBACK, /* sender: x->ucx sends the data itself after a NACK */
        COPY_RECV_ANSWER,   /* receiver: the data is in; waits for side (the answer) */
        COPY_RECV_FALLBACK, /* receiver: x->ucx receives the data on DATA(T) after its NACK */
    } phase;
    int sys_errno; /* a failed read: why */
    size_t done;   /* COPY_RECV_READING: bytes read */
};

/* Answers and fallback data travel on tags of the message's tag and the descriptor's id: two
 * messages on one tag (point-to-point allows it) are read in any order, and each answer must
 * reach the send it belongs to. */
static uint64_t copy_ack_tag(uint64_t tag, uint64_t id)
{
    return (gfc_mix64(tag ^ gfc_mix64(id ^ 0x61636b6e6f776c65ull)) & GFC_TAG_MASK) | GFC_TAG_CTRL;
}

static uint64_t copy_data_tag(uint64_t tag, uint64_t id)
{
    return (gfc_mix64(tag ^ gfc_mix64(id ^ 0x6461746166616c6cull)) & GFC_TAG_MASK) | GFC_TAG_CTRL;
}

static void copy_track(gfc_runtime_t *rt, void **slot, void *r, ucs_status_t *status)
{
    *slot = NULL;
    if (r == NULL) {
        *status = UCS_OK;
    } else if (UCS_PTR_IS_ERR(r)) {
        *status = UCS_PTR_STATUS(r);
    } else {
        *slot = r;
        *status = UCS_INPROGRESS;
        rt->ucx_requests_live++;
    }
}

/* Checks a tracked request: UCS_INPROGRESS, or its end (the request then released). */
static ucs_status_t copy_check(gfc_runtime_t *rt, void **slot, ucp_tag_recv_info_t *info)
{
    if (!*slot)
        return UCS_OK;
    ucs_status_t s = info ? ucp_tag_recv_request_test(*slot, info)
                          : ucp_request_check_status(*slot);
    if (s != UCS_INPROGRESS) {
        ucp_request_free(*slot);
        *slot = NULL;
        rt->ucx_requests_live--;
    }
    return s;
}

bool gfc_copy_applies(const gfc_runtime_t *rt, int peer, size_t bytes)
{
    return rt->config.single_copy_min > 0 && bytes >= rt->config.single_copy_min &&
           bytes >= sizeof(copy_desc_t) && peer != rt->rank && rt->peer_local[peer] &&
           !(rt->peer_copy[peer] & GFC_COPY_SEND_OFF);
}

tdl_status_t gfc_copy_send(gfc_runtime_t *rt, gfc_xfer_t *x, ucp_ep_h ep, const void *buf,
                           size_t bytes, uint64_t tag)
{
    struct gfc_copy *c = calloc(1, sizeof(*c));
    if (!c)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
    c->desc = (copy_desc_t){COPY_DESC_MAGIC, (uint64_t)(uintptr_t)buf, bytes, ++rt->copy_seq};
    c->phase = COPY_SEND_WAIT;
    x->copy = c;
    ucs_status_t s;
    /* the answer's receive first: it cannot arrive before the descriptor has left anyway */
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                                              UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                              .datatype = ucp_dt_make_contig(1)};
    copy_track(rt, &x->ucx, ucp_tag_recv_nbx(rt->worker, &c->word, sizeof(c->word),
                                              copy_ack_tag(tag, c->desc.id), (ucp_tag_t)-1,
                                              &rp),
               &s);
    if (s != UCS_INPROGRESS) {
        x->done = true;
        x->status = s == UCS_OK ? UCS_ERR_IO_ERROR : s;
        return TDL_OK;
    }
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    copy_track(rt, &c->side,
               ucp_tag_send_nbx(ep, &c->desc, sizeof(c->desc), tag | GFC_TAG_DESC, &sp), &s);
    if (s != UCS_OK && s != UCS_INPROGRESS) {
        x->done = true;
        x->status = s; /* gfc_copy_release cancels the answer's receive */
    }
    return TDL_OK;
}

/* Whether this rank can read `peer`'s memory: once per peer, by reading the cookie the peer
 * published at start-up from where it said it keeps it. Fails on no permission, on a pid of
 * another namespace, or on a pid that is not the peer's process. */
static bool copy_probe(gfc_runtime_t *rt, int peer)
{
    if (rt->peer_copy[peer] & (GFC_COPY_READ_OK | GFC_COPY_READ_NO))
        return rt->peer_copy[peer] & GFC_COPY_READ_OK;
    uint64_t got = 0;
    struct iovec l = {&got, sizeof(got)};
    struct iovec r = {(void *)(uintptr_t)rt->peer_cookie_addr[peer], sizeof(got)};
    ssize_t n = process_vm_readv(rt->peer_pid[peer], &l, 1, &r, 1, 0);
    bool ok = n == (ssize_t)sizeof(got) && got == rt->peer_cookie[peer];
    if (!ok)
        TDL_DEBUG("gfc: rank %d cannot read rank %d's memory (%s): messages from it come by "
                  "shared memory's copies",
                  rt->rank, peer, n < 0 ? strerror(errno) : "another process at its pid");
    rt->peer_copy[peer] |= ok ? GFC_COPY_READ_OK : GFC_COPY_READ_NO;
    return ok;
}

/* Reads len bytes at the peer's addr into buf: 0, or the errno of the failure. */
static int copy_read(gfc_runtime_t *rt, int peer, void *buf, uint64_t addr, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct iovec l = {(char *)buf + done, len - done};
        struct iovec r = {(void *)(uintptr_t)(addr + done), len - done};
        ssize_t n = process_vm_readv(rt->peer_pid[peer], &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EFAULT;
        done += (size_t)n;
    }
    return 0;
}

static void copy_answer(gfc_runtime_t *rt, gfc_xfer_t *x, uint64_t word)
{
    struct gfc_copy *c = x->copy;
    ucp_ep_h ep;
    c->word = word;
    if (gfc_ep_get(rt, x->peer, &ep) != TDL_OK) {
        x->status = UCS_ERR_UNREACHABLE;
        return;
    }
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                              .datatype = ucp_dt_make_contig(1)};
    ucs_status_t s;
    copy_track(rt, &c->side,
               ucp_tag_send_nbx(ep, &c->word, sizeof(c->word), copy_ack_tag(x->tag, c->desc.id),
                                &sp),
               &s);
    if (s != UCS_OK && s != UCS_INPROGRESS)
        x->status = s;
}

void gfc_copy_arrived(gfc_runtime_t *rt, gfc_xfer_t *x)
{
    copy_desc_t d;
    if (x->bytes != sizeof(d)) {
        x->done = true;
        x->status = UCS_ERR_INVALID_PARAM;
        return;
    }
    memcpy(&d, x->bounce ? x->bounce : x->buf, sizeof(d));
    struct gfc_copy *c = calloc(1, sizeof(*c));
    if (!c || d.magic != COPY_DESC_MAGIC) {
        free(c);
        x->done = true;
        x->status = c ? UCS_ERR_INVALID_PARAM : UCS_ERR_NO_MEMORY;
        return;
    }
    x->copy = c;
    x->done = false;
    x->status = UCS_OK;
    c->desc = d;
    if (d.len > x->cap) {
        /* as UCX does: the sender's send completes, this receive fails as truncated */
        copy_answer(rt, x, COPY_ACK_TRUNCATED);
        if (x->status == UCS_OK)
            x->status = UCS_ERR_MESSAGE_TRUNCATED;
        c->phase = COPY_RECV_ANSWER;
        return;
    }
    if (!copy_probe(rt, x->peer)) {
        rt->single_copy_fallbacks++;
        copy_answer(rt, x, COPY_ACK_NACK);
        c->phase = COPY_RECV_FALLBACK;
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE |
                                                  UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                                  .datatype = ucp_dt_make_contig(1)};
        ucs_status_t s;
        copy_track(rt, &x->ucx, ucp_tag_recv_nbx(rt->worker, x->buf, x->cap,
                                                  copy_data_tag(x->tag, d.id), (ucp_tag_t)-1,
                                                  &rp),
                   &s);
        if (s != UCS_INPROGRESS && x->status == UCS_OK)
            x->status = s == UCS_OK ? UCS_ERR_IO_ERROR : s;
        return;
    }
    x->bytes = d.len;
    c->phase = COPY_RECV_READING;
    gfc_copy_step(rt, x); /* the first piece at once */
}

/* The next piece of a single copy's read; the answer once all of it is in. */
static void copy_read_piece(gfc_runtime_t *rt, gfc_xfer_t *x)
{
    struct gfc_copy *c = x->copy;
    size_t n = TDL_MIN((size_t)COPY_PIECE, c->desc.len - c->done);
    int err = copy_read(rt, x->peer, (char *)x->buf + c->done, c->desc.addr + c->done, n);
    if (err) {
        /* the sender has died, or freed its buffer (its request failed): no answer is owed */
        c->sys_errno = err;
        c->phase = COPY_RECV_ANSWER;
        x->status = UCS_ERR_CONNECTION_RESET;
        return;
    }
    c->done += n;
    if (c->done < c->desc.len)
        return;
    rt->single_copies++;
    c->phase = COPY_RECV_ANSWER;
    copy_answer(rt, x, COPY_ACK_OK);
}

void gfc_copy_step(gfc_runtime_t *rt, gfc_xfer_t *x)
{
    struct gfc_copy *c = x->copy;
    if (c->phase == COPY_RECV_READING) {
        copy_read_piece(rt, x);
        if (c->phase == COPY_RECV_READING)
            return;
    }
    ucs_status_t side = copy_check(rt, &c->side, NULL);
    /* a receiver is done once its answer has left: the sender waits for it */
    if (side == UCS_INPROGRESS && c->phase == COPY_RECV_ANSWER)
        return;
    if (side != UCS_OK && side != UCS_INPROGRESS && x->status == UCS_OK)
        x->status = side;
    if (x->status != UCS_OK || c->phase == COPY_RECV_ANSWER) {
        x->done = true;
        return;
    }
    ucp_tag_recv_info_t info = {0};
    ucs_status_t s = copy_check(rt, &x->ucx, c->phase == COPY_RECV_FALLBACK ? &info : NULL);
    if (s == UCS_INPROGRESS)
        return;
    if (s != UCS_OK) {
        x->status = s;
        x->done = true;
        return;
    }
    if (c->phase == COPY_RECV_FALLBACK) {
        x->bytes = info.length;
        c->phase = COPY_RECV_ANSWER;
        x->done = !c->side;
        return;
    }
    if (c->phase == COPY_SEND_WAIT && c->word == COPY_ACK_NACK) {
        /* this peer cannot read us: the data goes by UCX, now and from here on */
        rt->peer_copy[x->peer] |= GFC_COPY_SEND_OFF;
        c->phase = COPY_SEND_FALLBACK;
        ucp_ep_h ep;
        if (gfc_ep_get(rt, x->peer, &ep) != TDL_OK) {
            x->status = UCS_ERR_UNREACHABLE;
            x->done = true;
            return;
        }
        ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE,
                                  .datatype = ucp_dt_make_contig(1)};
        copy_track(rt, &x->ucx,
                   ucp_tag_send_nbx(ep, (const void *)(uintptr_t)c->desc.addr, c->desc.len,
                                    copy_data_tag(x->tag, c->desc.id), &sp),
                   &s);
        if (s == UCS_INPROGRESS)
            return;
        x->status = s;
    } else if (c->phase == COPY_SEND_WAIT && c->word != COPY_ACK_OK &&
               c->word != COPY_ACK_TRUNCATED) {
        x->status = UCS_ERR_INVALID_PARAM;
    }
    /* the descriptor's send, if still going, finishes in a moment: the answer came after it */
    x->done = x->status != UCS_OK || !c->side;
}

int gfc_copy_errno(const gfc_xfer_t *x)
{
    return x->copy ? x->copy->sys_errno : 0;
}

void gfc_copy_release(gfc_runtime_t *rt, gfc_xfer_t *x, bool cancel)
{
    struct gfc_copy *c = x->copy;
    if (!c)
        return;
    if (cancel) {
        if (c->side)
            ucp_request_cancel(rt->worker, c->side);
        if (x->ucx)
            ucp_request_cancel(rt->worker, x->ucx);
        /* bounded, as request_cancel_all is: a wedged transport cannot hang */
        uint64_t deadline = tdl_clock_ns() + 100000000ull;
        while ((c->side && ucp_request_check_status(c->side) == UCS_INPROGRESS) ||
               (x->ucx && ucp_request_check_status(x->ucx) == UCS_INPROGRESS)) {
            if (tdl_clock_ns() > deadline)
                break;
            ucp_worker_progress(rt->worker);
        }
    }
    void *reqs[2] = {c->side, x->ucx};
    for (int i = 0; i < 2; i++) {
        if (reqs[i]) {
            ucp_request_free(reqs[i]);
            rt->ucx_requests_live--;
        }
    }
    x->ucx = NULL;
    free(c);
    x->copy = NULL;
}
