/* gfc internals shared by the runtime and the algorithm files; not installed. */
#ifndef TIDAL_GFC_INTERNAL_H
#define TIDAL_GFC_INTERNAL_H

#include <stdatomic.h>

#include <ucp/api/ucp.h>

#include "gfc/gfc.h"

/* Most chunks a ring pipelines per block: keeps (round, chunk) inside a 32-bit step id. */
#define GFC_MAX_CHUNKS 64

/* What each rank publishes at start-up ahead of its UCX worker address. */
#define GFC_CARD_MAGIC 0x67666333u /* "gfc3" */
typedef struct gfc_peer_card {
    uint32_t magic;
    uint32_t pid;
    unsigned char host[16]; /* hash of host name and boot id */
    uint32_t addr_len;      /* the worker address, right after the card */
    uint32_t live_len;      /* the keep-alive worker's address after it (0: no keep-alive) */
    uint64_t cookie;        /* a random word, kept at cookie_addr in the rank's memory: a peer */
    uint64_t cookie_addr;   /* that reads it back there can read this rank (copy.c) */
} gfc_peer_card_t;

/* Tags: the algorithms' tags use the low 62 bits; a single copy's descriptor travels on the tag
 * with GFC_TAG_DESC added (receives ignore that bit), its answers on tags with GFC_TAG_CTRL. */
#define GFC_TAG_MASK ((1ull << 62) - 1)
#define GFC_TAG_DESC (1ull << 63)
#define GFC_TAG_CTRL (1ull << 62)

/* gfc_runtime.peer_copy: what single copy (copy.c) has learnt of a peer on this host. */
enum {
    GFC_COPY_READ_OK = 1,  /* this rank read the peer's cookie back */
    GFC_COPY_READ_NO = 2,  /* it could not: the peer's descriptors are answered NACK */
    GFC_COPY_SEND_OFF = 4, /* the peer answered NACK: send to it by UCX alone */
};

/* What this rank knows of a peer (gfc_runtime.peer_state); a peer is declared once and for good. */
enum {
    GFC_PEER_ALIVE = 0,
    GFC_PEER_DECLARING, /* being declared dead: its reason is being written */
    GFC_PEER_DEAD,      /* dead: killed, stopped, cut off, or its connection failed */
    GFC_PEER_LEFT,      /* destroyed its runtime on purpose */
};

typedef struct gfc_live gfc_live_t; /* liveness.c: the keep-alive thread */

struct gfc_runtime {
    gfc_runtime_config_t config;
    int rank, size;
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h *eps;               /* [size], created on first use */
    tdl_blobs_t addrs;           /* every rank's worker address */
    ucs_status_t *peer_status;   /* [size]: UCS_OK, or why the peer's endpoint failed */
    _Atomic int *peer_state;     /* [size]: GFC_PEER_*, written by both threads */
    char (*peer_why)[160];       /* [size]: why a peer is not alive, written once */
    atomic_int dead_count;       /* peers declared dead so far */
    atomic_int fenced_by;        /* the rank that declared this one dead, or -1 */
    int deaths_seen;             /* dead_count (+1 once fenced) the requests were checked at */
    _Atomic uint64_t *ep_failed_ns; /* [size]: when UCX reported a peer's endpoint failed, or 0;
                                     * the keep-alive thread declares it dead a moment later unless
                                     * it said BYE meanwhile (a peer that ends reads as failed) */
    struct gfc_left {            /* [size]: of a peer that has left (GFC_PEER_LEFT) */
        bool busy;               /* it left with collectives unfinished (its BYE said so) */
        uint64_t seen_ns, seen_idle; /* main thread: when a request was first found owed by it
                                      * (0: not yet), and idle_passes then */
    } *left;
    uint64_t idle_passes;        /* progress passes in which UCX had nothing to do */
    gfc_live_t *live;            /* NULL: no keep-alive (one rank, or dead_after_ms 0) */
    bool ending;                 /* gfc_runtime_destroy is running: peers' endpoints fail as
                                  * they close, which declares nothing */
    const unsigned char **live_addrs; /* [size]: each keep-alive worker's address */
    int *peer_pid;               /* [size] */
    bool *peer_local;            /* [size]: runs on this host */
    uint64_t *peer_cookie;       /* [size]: each peer's cookie and where it keeps it (its card) */
    uint64_t *peer_cookie_addr;
    unsigned char *peer_copy;    /* [size]: GFC_COPY_* bits */
    uint64_t cookie;             /* this rank's own, published at start-up */
    uint64_t copy_seq;           /* single copies sent so far (their descriptors' ids) */
    int *host_of;                /* [size]: each rank's host, by its lowest rank (topo.c) */
    int nhosts;
    unsigned *host_mark;         /* [nhosts]: gfc_group_hosts' scratch, stamped, never cleared */
    int *host_count;             /* [nhosts] */
    unsigned host_stamp;
    size_t endpoints;
    unsigned yield_after;        /* idle polls before a waiting rank yields its core */
    struct {
        void *buf;
        size_t cap;
    } cache[8];                  /* scratch buffers kept for reuse (hier runs several rings) */
    /* Requests started and not yet seen finished, oldest first: every test, wait and progress
     * call steps each of them once (MPI's progress rule), so no order of starts and waits
     * among members can deadlock. */
    gfc_request_t *active_head, *active_tail;
    gfc_request_t *advance_next; /* the pass's next request (kept right when one leaves) */
    bool advancing;              /* a pass over the active list is running */
    size_t requests_live;
    size_t ucx_requests_live;
    uint64_t collectives;
    uint64_t bytes_sent;
    uint64_t single_copies, single_copy_fallbacks;
};

/* One UCX send or receive of a request. */
typedef struct gfc_xfer {
    void *ucx;          /* UCX request, NULL once complete */
    int peer;           /* world rank */
    bool recv;
    bool done;
    ucs_status_t status;
    size_t bytes;       /* receives: bytes that arrived */
    int slot;           /* algorithm's own index (chunk), -1 when unused */
    uint64_t tag;       /* the message's tag (without GFC_TAG_DESC) */
    void *buf;          /* receives: where the data goes, and its room */
    size_t cap;
    void *bounce;       /* a receive of less room than a descriptor: where UCX puts what comes
                         * (GFC_COPY_DESC_BYTES, heap), copied to buf or read as a descriptor */
    struct gfc_copy *copy; /* a single copy's state (copy.c), or NULL */
} gfc_xfer_t;

typedef tdl_status_t (*gfc_progress_fn_t)(gfc_request_t *req);

struct gfc_request {
    gfc_runtime_t *rt;
    const char *name;         /* "allreduce/ring": for errors */
    gfc_group_t group;        /* copy of the group value at start */
    uint64_t seq;             /* the collective's sequence number */
    uint64_t tag_base;
    gfc_progress_fn_t progress;
    void (*cleanup)(gfc_request_t *req);
    bool finished;
    tdl_status_t status;
    char error[512];
    gfc_xfer_t *xfers;
    int nxfers, cap_xfers;
    size_t received;          /* p2p receive: bytes that arrived */
    void *state;              /* the algorithm's own state, freed with the request */
    void *scratch;            /* scratch memory (gfc_request_scratch), freed with the request */
    void *scratch2;
    size_t scratch_cap[2];
    bool active;              /* linked in the runtime's active list */
    bool stepping;            /* inside its own progress function: never re-entered */
    gfc_request_t *active_prev, *active_next;
};

/* ---- runtime services for algorithms ---------------------------------------------------- */

/* A new collective on g: takes the next sequence number and derives its tags. The algorithm's
 * state of state_size bytes is zeroed. */
tdl_status_t gfc_request_create(gfc_group_t *g, const char *name, gfc_progress_fn_t progress,
                                size_t state_size, gfc_request_t **req_out);
/* A start that failed once its request existed (a post to a peer whose endpoint has failed, its
 * plan out of memory): the error is named as a failure in flight names it ("gfc NAME (group of
 * N, ns, seq): ..."), the request is freed, and st is returned. Every algorithm's start uses it,
 * so that an error names its collective whichever moment it met the dead peer. */
tdl_status_t gfc_request_fail_start(gfc_request_t *req, tdl_status_t st);
/* A request that is already complete (size-1 groups, zero counts). */
tdl_status_t gfc_request_create_done(gfc_group_t *g, const char *name, gfc_request_t **req_out);
/* A point-to-point request: its tags come from the user tag, not from a sequence number. */
tdl_status_t gfc_p2p_request_create(gfc_group_t *g, const char *name, uint64_t tag,
                                    gfc_request_t **req_out);
/* Scratch memory for a request, freed with it. Freed buffers are kept (a few, up to a byte cap)
 * for the next collective: large fresh allocations page-fault on every call. */
void *gfc_request_scratch(gfc_request_t *req, int which, size_t bytes);
/* One pass of the progress engine: UCX, then one step of every active request. */
void gfc_runtime_advance(gfc_runtime_t *rt);
/* Waits like gfc_request_wait but leaves the request to the caller. */
tdl_status_t gfc_request_wait_keep(gfc_request_t *req);
/* Tags: step ids are the algorithm's (round, chunk, phase) encoding; src is a world rank. */
uint64_t gfc_tag(uint64_t tag_base, uint32_t step, int src_world);
tdl_status_t gfc_post_send(gfc_request_t *req, int peer_index, uint32_t step, const void *buf,
                           size_t bytes, int slot);
tdl_status_t gfc_post_recv(gfc_request_t *req, int peer_index, uint32_t step, void *buf,
                           size_t bytes, int slot);
/* Checks every outstanding transfer. Calls on_done(req, xfer) for each one that finished since
 * the last call (may be NULL), drops finished ones, and reports whether none is left. A failed
 * transfer fails the request with an error naming the peer. */
tdl_status_t gfc_xfers_poll(gfc_request_t *req,
                            tdl_status_t (*on_done)(gfc_request_t *req, const gfc_xfer_t *x),
                            bool *all_done);
/* ---- single copy within a host (copy.c) ---------------------------------------------------- */

/* Whether a send of `bytes` to `peer` goes by single copy (a peer on this host, at or above
 * config.single_copy_min, and not refused by it). */
bool gfc_copy_applies(const gfc_runtime_t *rt, int peer, size_t bytes);
/* Posts the descriptor of buf and the answer's receive, into x (peer and tag already set). */
tdl_status_t gfc_copy_send(gfc_runtime_t *rt, gfc_xfer_t *x, ucp_ep_h ep, const void *buf,
                           size_t bytes, uint64_t tag);
/* The bytes of a single copy's descriptor. A receive with less room than this takes what comes
 * in a bounce buffer of this size, so that a descriptor too large for it is still read and
 * answered (TRUNCATED) rather than left to UCX's truncation, which would leave its sender waiting
 * for an answer until the timeout. */
#define GFC_COPY_DESC_BYTES 32
/* A receive completed with a descriptor (its sender tag had GFC_TAG_DESC; x->bytes is what
 * arrived, x->ucx released): starts reading the data into x->buf (its first piece at once);
 * gfc_copy_step reads the rest and answers. */
void gfc_copy_arrived(gfc_runtime_t *rt, gfc_xfer_t *x);
/* Advances a transfer that has a copy state; sets x->done, status and bytes at its end. */
void gfc_copy_step(gfc_runtime_t *rt, gfc_xfer_t *x);
/* The errno of a failed read of the peer's memory, or 0. */
int gfc_copy_errno(const gfc_xfer_t *x);
/* Releases the copy state and its UCX requests (cancelled first when `cancel`). */
void gfc_copy_release(gfc_runtime_t *rt, gfc_xfer_t *x, bool cancel);

/* The world rank of group member i. */
static inline int gfc_member(const gfc_request_t *req, int i)
{
    return req->group.ranks[i];
}

tdl_status_t gfc_ep_get(gfc_runtime_t *rt, int peer, ucp_ep_h *ep_out);
/* False once the peer is known dead or gone: declared so (keep-alive, its connection, its pid
 * on this host), or its main endpoint failed. */
bool gfc_peer_check(gfc_runtime_t *rt, int peer);
/* Declares `peer` (never the caller) in `state` (GFC_PEER_DEAD or GFC_PEER_LEFT) for the reason
 * given, if it is still alive; true if this call did it. `tell`: this rank found it out itself,
 * and the keep-alive thread tells the other ranks. Either thread may call it. */
bool gfc_peer_declare(gfc_runtime_t *rt, int peer, int state, bool tell, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* UCX reported `peer`'s endpoint failed: declared dead at once without a keep-alive thread, else
 * by the thread a moment later unless the peer has said BYE by then. Either thread may call it. */
void gfc_peer_endpoint_failed(gfc_runtime_t *rt, int peer, ucs_status_t status);
/* Raises TDL_ERR_PEER for a peer gfc_peer_check refused, saying why: this rank is fenced, the
 * peer is dead (and why), it has left, or its endpoint failed. */
tdl_status_t gfc_peer_error(gfc_runtime_t *rt, int peer);
/* GFC_PEER_ALIVE, _DEAD (also while being declared) or _LEFT (the reason: gfc_peer_why). */
int gfc_peer_state(const gfc_runtime_t *rt, int peer);
/* A UCX context and a worker for one thread (tag messages); `tuned`: gfc's protocol settings
 * (rendezvous by put, the second protocol set) where the environment does not choose. */
tdl_status_t gfc_ucx_open(const char *name, bool tuned, bool cma, ucp_context_h *context_out,
                          ucp_worker_h *worker_out);
/* liveness.c: the keep-alive worker (its address for the start-up exchange, malloc'd), then
 * its thread once every rank's address is known, and the end of both (BYE to the peers). */
tdl_status_t gfc_live_create(gfc_runtime_t *rt, void **addr_out, size_t *len_out);
tdl_status_t gfc_live_start(gfc_runtime_t *rt);
void gfc_live_destroy(gfc_runtime_t *rt);
/* out[i] = op(a[i], b[i]); out may be a, never b. */
tdl_status_t gfc_reduce3(void *out, const void *a, const void *b, size_t n, gfc_dtype_t dtype,
                         gfc_redop_t op);
tdl_status_t gfc_check_count(const char *what, size_t count, gfc_dtype_t dtype);

/* ---- hosts (topo.c) ----------------------------------------------------------------------- */

/* The host table from the start-up exchange's cards (host name and boot id), or from
 * config.hosts where set. Fills rt->host_of, nhosts and the scratch of gfc_group_hosts. */
tdl_status_t gfc_hosts_build(gfc_runtime_t *rt, const unsigned char (*host_ids)[16]);
void gfc_hosts_free(gfc_runtime_t *rt);

/* A group's host structure, computed when an algorithm needs it (hier's start), not when the
 * group is formed. Hosts are numbered in the order of their first member in the group. */
typedef struct gfc_topo {
    int hosts;     /* hosts the group spans */
    int max_local; /* most members on one host */
    int *host_of;  /* [size]: the host of each member */
    int *local_of; /* [size]: each member's index among its host's members (group order) */
    int *first;    /* [hosts + 1]: host h's members are members[first[h] .. first[h + 1]) */
    int *members;  /* [size]: group indices by host, in group order within a host */
} gfc_topo_t;
tdl_status_t gfc_topo_of(const gfc_group_t *g, gfc_topo_t *topo_out);
void gfc_topo_free(gfc_topo_t *topo);

/* counts[i] = count and displs[i] = i * count for a group of n, in one malloc'd array
 * (counts first, then displs); NULL when out of memory. */
size_t *gfc_uniform_layout(int n, size_t count);

/* Splits n elements into `parts` blocks that differ by at most one element. */
static inline size_t gfc_block_offset(size_t n, int parts, int i)
{
    size_t base = n / (size_t)parts, extra = n % (size_t)parts;
    return base * (size_t)i + ((size_t)i < extra ? (size_t)i : extra);
}
static inline size_t gfc_block_count(size_t n, int parts, int i)
{
    return gfc_block_offset(n, parts, i + 1) - gfc_block_offset(n, parts, i);
}
/* splitmix64's finalizer: a bijection with full avalanche (group ids, tags, namespaces). */
static inline uint64_t gfc_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static inline int gfc_mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* Non-power-of-two groups in recursive algorithms: with p the largest power of two <= n and
 * rem = n - p, member 2j (j < rem) hands its data to member 2j+1 and sits out; the others take
 * part as virtual ranks 0..p-1. */
typedef struct gfc_pof2 {
    int p, rem;
    int vrank;   /* -1: sits out */
    int buddy;   /* group index of the partner in the fold, or -1 */
} gfc_pof2_t;

static inline gfc_pof2_t gfc_pof2_of(int n, int me)
{
    gfc_pof2_t f = {1, 0, -1, -1};
    while (f.p * 2 <= n)
        f.p *= 2;
    f.rem = n - f.p;
    if (me < 2 * f.rem) {
        f.vrank = (me % 2) ? me / 2 : -1;
        f.buddy = (me % 2) ? me - 1 : me + 1;
    } else {
        f.vrank = me - f.rem;
    }
    return f;
}

/* Group index of virtual rank v. */
static inline int gfc_pof2_member(const gfc_pof2_t *f, int v)
{
    return v < f->rem ? 2 * v + 1 : v + f->rem;
}

/* ---- algorithm entry points (one file each) --------------------------------------------- */

/* The algorithm an all-reduce of `bytes` over `size` members runs (allreduce/allreduce.c's
 * allreduce_algs[]): asked unless AUTO, else the configured one unless AUTO, else the best of
 * those that apply. A forced one may not apply (gfc_allreduce_start then refuses it). */
gfc_allreduce_algo_t gfc_allreduce_select(const gfc_runtime_config_t *config, int size,
                                          size_t bytes, gfc_allreduce_algo_t asked, bool codec);
/* The same for a group that spans `hosts` hosts with at most `max_local` members on one
 * (gfc_allreduce_select: one host). */
gfc_allreduce_algo_t gfc_allreduce_select_hosts(const gfc_runtime_config_t *config, int size,
                                                size_t bytes, gfc_allreduce_algo_t asked,
                                                bool codec, int hosts, int max_local);

/* send holds this member's values, recv receives the result; they may be the same buffer. The
 * algorithms read send and write recv without copying one into the other first. codec is NULL
 * for exact sums (and always for an algorithm that takes none). */
typedef tdl_status_t (*gfc_allreduce_start_fn_t)(gfc_group_t *g, const void *send, void *recv,
                                                 size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                                 const gfc_codec_t *codec, gfc_request_t **req_out);
tdl_status_t gfc_allreduce_ring_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                      gfc_dtype_t dtype, gfc_redop_t op, const gfc_codec_t *codec,
                                      gfc_request_t **req_out);
tdl_status_t gfc_allreduce_butterfly_start(gfc_group_t *g, const void *send, void *recv,
                                           size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                           const gfc_codec_t *codec, gfc_request_t **req_out);
tdl_status_t gfc_allreduce_recursive_doubling_start(gfc_group_t *g, const void *send, void *recv,
                                                    size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                                    const gfc_codec_t *codec,
                                                    gfc_request_t **req_out);
tdl_status_t gfc_allreduce_hier_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                      gfc_dtype_t dtype, gfc_redop_t op, const gfc_codec_t *codec,
                                      gfc_request_t **req_out);

/* A ring all-reduce run on behalf of another collective (hier's rings between hosts): what its
 * codec hops report, and a tap called once for every chunk when its final value is known on this
 * member (in buf at [first, first + len) of the ring's vector; with a codec also as the final
 * encoding, which the caller may forward unchanged). */
typedef struct gfc_ring_view {
    uint64_t offset;   /* added to every hop's offset: where the ring's vector starts */
    uint64_t chunk;    /* added to every hop's chunk index */
    int group_size;    /* the hops' group_size */
    const int *weight; /* [ring size]: group members whose values each ring member brings */
    uint64_t group_id, seq;
    tdl_status_t (*tap)(void *arg, int block, int chunk, size_t first, size_t len,
                        const void *enc, size_t enc_len);
    void *arg;
} gfc_ring_view_t;
/* The ring all-reduce (shift 1) of src into buf (which may be src) with `view` (kept by pointer:
 * it must outlive the request). */
tdl_status_t gfc_ring_rail_start(gfc_group_t *g, const char *name, const void *src, void *buf,
                                 size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                 const gfc_codec_t *codec, const gfc_ring_view_t *view,
                                 gfc_request_t **req_out);
/* How the ring cuts `count` elements over n members: elements per chunk and chunks per block. */
void gfc_ring_chunking(const gfc_runtime_config_t *config, int n, size_t count, size_t esize,
                       bool codec, size_t *chunk_elems_out, int *nchunks_out);
/* Elements [first, first + len) of chunk c of block `block` of such a ring. */
void gfc_ring_chunk_range(size_t count, int n, size_t chunk_elems, int block, int c,
                          size_t *first, size_t *len);

/* Ring reduce-scatter over group-size blocks of src, reducing into buf (which may be src; it need
 * not be initialized otherwise): member i ends holding the reduction of block (i + shift) mod
 * size, copied to out (when not NULL) at the end. */
tdl_status_t gfc_ring_reduce_scatter_start(gfc_group_t *g, const char *name, const void *src,
                                           void *buf,
                                           size_t count, gfc_dtype_t dtype, gfc_redop_t op,
                                           int shift, void *out, gfc_request_t **req_out);

#endif /* TIDAL_GFC_INTERNAL_H */
