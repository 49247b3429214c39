/* gfc: group-free collectives over UCX.
 *
 * After one start-up exchange of UCX worker addresses, any ordered list of distinct world ranks
 * is a group, and a group can run any collective at once: there is no communicator to create
 * and nothing to free. A group is a value: forming one sends no message and allocates no network
 * resource. Messages are told apart by 64-bit UCX tags derived from (group, namespace, sequence
 * number, step, sender), so collectives on overlapping groups can run at the same time; see
 * doc/gfc.md for the protocol and its guarantees. */
#ifndef TIDAL_GFC_H
#define TIDAL_GFC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime ----------------------------------------------------------------------------- */

typedef struct gfc_runtime gfc_runtime_t;

/* The start-up exchange: every rank contributes `len` bytes and receives every rank's. tidal
 * passes the MPI bootstrap's tdl_boot_allgatherv; gfc itself never calls MPI. */
typedef tdl_status_t (*gfc_allgather_fn_t)(const void *mine, size_t len, tdl_blobs_t *all_out);

typedef enum {
    GFC_ALLREDUCE_AUTO = 0,
    GFC_ALLREDUCE_RING,               /* reduce-scatter + all-gather, pipelined in chunks */
    GFC_ALLREDUCE_BUTTERFLY,          /* Rabenseifner: recursive halving, then doubling */
    GFC_ALLREDUCE_RECURSIVE_DOUBLING, /* whole vector each round: small messages */
    GFC_ALLREDUCE_HIER,               /* f32 within each host, rings between hosts */
    GFC_ALLREDUCE_COUNT
} gfc_allreduce_algo_t;

typedef struct gfc_runtime_config {
    int rank;                    /* world rank of this process */
    int size;                    /* world size */
    gfc_allgather_fn_t allgather;
    int64_t timeout_ms;          /* every blocking call gives up after this long */
    gfc_allreduce_algo_t allreduce_algo; /* AUTO: chosen by size */
    size_t small_msg_bytes;      /* AUTO uses recursive doubling at or below this */
    size_t ring_chunk_bytes;     /* pipelining unit of the ring */
    size_t ring_codec_chunk_bytes; /* the same with a codec, in bytes of f32 values */
    int64_t idle_sleep_us;       /* > 0: a waiting rank sleeps this long once idle as long */
    int64_t keepalive_ms;        /* how often each rank tells every peer it is alive */
    int64_t dead_after_ms;       /* a peer silent this long is declared dead (0: no keep-alive) */
    bool cma;                    /* UCX's CMA within a host (off: a dead peer can crash UCX) */
    size_t single_copy_min;      /* gfc's own single copy within a host from this size (0: off) */
    size_t hier_min_bytes;       /* AUTO takes hier at or above this on groups across hosts */
    size_t hier_piece_bytes;     /* hier pipelines its phases over pieces of about this size */
    char hosts[256];             /* "" or each world rank's host, "0,0,1,1": gfc-hosts (tests) */
    char keepalive_cgroup[256];  /* "" or a cgroup the keep-alive thread joins (tools/cluster) */
} gfc_runtime_config_t;

/* The gfc parameters (gfc-timeout-ms, gfc-allreduce, ...) for the registry. */
extern const tdl_param_def_t gfc_params[];
extern const size_t gfc_nparams;
/* Fills everything but rank, size and allgather from the registry. */
tdl_status_t gfc_runtime_config_from_params(const tdl_params_t *params,
                                            gfc_runtime_config_t *config_out);
void gfc_runtime_config_default(gfc_runtime_config_t *config_out);

/* Creates the UCX context and worker and runs the address exchange (collective over the world). */
tdl_status_t gfc_runtime_create(const gfc_runtime_config_t *config, gfc_runtime_t **rt_out);
/* Local: closes endpoints and the worker. Outstanding requests must be waited for first. */
void gfc_runtime_destroy(gfc_runtime_t *rt);
int gfc_runtime_rank(const gfc_runtime_t *rt);
int gfc_runtime_size(const gfc_runtime_t *rt);
/* Where the ranks run, learnt from the start-up exchange (each rank's host name and boot id, or
 * gfc-hosts): hosts are numbered 0.. in the order of their lowest world rank. */
int gfc_runtime_hosts(const gfc_runtime_t *rt);
int gfc_runtime_host(const gfc_runtime_t *rt, int rank);
/* One pass of the progress engine: UCX, then one step of every outstanding request. Tests and
 * waits make the same pass, whichever request they are given (MPI's progress rule). */
void gfc_runtime_progress(gfc_runtime_t *rt);

typedef struct gfc_stats {
    size_t endpoints;          /* endpoints to other ranks created so far (<= size - 1) */
    size_t requests_live;      /* gfc requests allocated and not yet freed */
    size_t ucx_requests_live;  /* UCX requests not yet completed and released */
    uint64_t collectives;      /* collectives started */
    uint64_t bytes_sent;
    uint64_t single_copies;    /* messages received by single copy (--gfc-single-copy) */
    uint64_t single_copy_fallbacks; /* single copies this rank could not read: sent again */
} gfc_stats_t;
void gfc_runtime_stats(const gfc_runtime_t *rt, gfc_stats_t *stats_out);

/* ---- liveness -----------------------------------------------------------------------------
 * A thread of each runtime tells every peer every keepalive_ms that it is alive. A peer is
 * declared dead once and for good when it has been silent for dead_after_ms (killed, stopped,
 * hung, cut off), when its process is gone (same host), or when UCX reports its connection
 * failed; the rank that declares it tells the others. From then on every collective and
 * transfer whose group holds it fails on every member with TDL_ERR_PEER naming it, whatever
 * the member was waiting for. A rank that learns others hold it dead is fenced: every gfc call
 * fails. A destroyed runtime tells its peers it has left (not dead). See doc/gfc.md. */

/* True while `peer` is neither declared dead nor gone. */
bool gfc_peer_alive(gfc_runtime_t *rt, int peer);
/* Why `peer` is not alive ("no keep-alive for 2.1 s ...", "its process (pid 123) has exited",
 * "declared dead by rank 2", "has left ..."); "" while it is. */
const char *gfc_peer_why(const gfc_runtime_t *rt, int peer);
/* The ranks declared dead so far, ascending: writes up to max of them, returns how many. */
int gfc_dead_ranks(gfc_runtime_t *rt, int *ranks, int max);
/* How many peers have been declared dead: cheap to poll for a change. */
int gfc_runtime_dead_count(gfc_runtime_t *rt);
/* The rank that declared this one dead (every gfc call fails from then on), or -1. */
int gfc_runtime_fenced_by(gfc_runtime_t *rt);
/* The end of a job, on every rank, in place of MPI collectives that would hang on a dead peer:
 * each live rank sends its exit code to rank 0, which answers each with the verdict: rank 0's
 * code, else 1 when a rank that lived to the end failed, else 0. Ranks dead before or during
 * the exchange are passed over. A rank that cannot hear rank 0 answers its own code (1 for 0).
 * *deaths: whether any rank of the job died (rank 0's word, the same on every survivor): then
 * MPI_Finalize, whose fence may wait for the dead, must be left out by all of them. */
int gfc_verdict(gfc_runtime_t *rt, int code, bool *deaths);

/* ---- groups ------------------------------------------------------------------------------ */

/* A group value. `ranks` is the caller's array and must stay valid and unchanged while the
 * group is in use. `ns` is the caller's namespace (a task id, a training step): every member
 * must form the group with the same ranks in the same order and the same namespace, and run the
 * same collectives on it in the same order. Two values with equal (ranks, ns) are the same
 * conversation: do not use them at the same time. */
typedef struct gfc_group {
    gfc_runtime_t *rt;
    const int *ranks;  /* world ranks, in group order */
    int size;
    int me;            /* this process's index in ranks */
    uint64_t ns;
    uint64_t id;       /* hash of (ranks, ns): the same on every member */
    uint64_t seq;      /* collectives started on this value so far */
} gfc_group_t;

/* Checks the list (distinct, in range, contains the caller) and fills *group_out. Sends
 * nothing. Errors name the offending entry. */
tdl_status_t gfc_group_init(gfc_group_t *group_out, gfc_runtime_t *rt, const int *ranks, int size,
                            uint64_t ns);
/* The hosts a group spans, and (max_local_out, may be NULL) the most members on one of them:
 * read from the runtime's host table in O(size), nothing sent, nothing allocated. */
int gfc_group_hosts(const gfc_group_t *g, int *max_local_out);

/* ---- data types and reductions ----------------------------------------------------------- */

typedef enum {
    GFC_DT_F32 = 0,
    GFC_DT_BF16,
    GFC_DT_F16,
    GFC_DT_I32,
    GFC_DT_I64,
    GFC_DT_BYTE,
    GFC_DT_COUNT
} gfc_dtype_t;

typedef enum { GFC_OP_SUM = 0, GFC_OP_MAX, GFC_OP_MIN, GFC_OP_COUNT } gfc_redop_t;

size_t gfc_dtype_size(gfc_dtype_t dtype);
const char *gfc_dtype_name(gfc_dtype_t dtype);
const char *gfc_redop_name(gfc_redop_t op);
const char *gfc_allreduce_algo_name(gfc_allreduce_algo_t algo);
tdl_status_t gfc_allreduce_algo_parse(const char *name, gfc_allreduce_algo_t *algo_out);
/* inout[i] = op(inout[i], in[i]) for n elements; sum is not defined for GFC_DT_BYTE. */
tdl_status_t gfc_reduce_local(void *inout, const void *in, size_t n, gfc_dtype_t dtype,
                              gfc_redop_t op);

/* ---- the codec hook ---------------------------------------------------------------------- */

/* Where an encoding happens, so a codec can make its output a function of (seed, rank, hop)
 * and adapt to partial sums. In hier the encodings are those of the rings between hosts: hop
 * counts them along a ring, contributions counts the members whose values the data sums (its
 * first encoding already holds a host's), and group_size, offset, group_id and seq are those of
 * the whole all-reduce. */
typedef struct gfc_codec_hop {
    int rank;            /* world rank doing the encoding */
    int hop;             /* 0 for a rank's own values, +1 at every accumulation */
    int contributions;   /* how many ranks' values the encoded data sums */
    int group_size;
    uint64_t chunk;      /* index of the chunk within the collective */
    uint64_t offset;     /* index of the first encoded value in the collective's vector */
    uint64_t group_id;   /* gfc_group_t.id */
    uint64_t seq;        /* gfc_group_t.seq of the collective */
} gfc_codec_hop_t;

/* Compresses f32 sums at every hop of the ring and butterfly all-reduce, and between hosts in
 * hier (within a host hier sums in f32 and encodes nothing). Encoded sizes may vary
 * up to max_encoded_bytes; the final encoded chunk is forwarded unchanged in the all-gather, so
 * every member decodes the same bytes. */
typedef struct gfc_codec_ops {
    const char *name;
    size_t (*max_encoded_bytes)(void *ctx, size_t n);
    tdl_status_t (*encode)(void *ctx, const gfc_codec_hop_t *hop, const float *in, size_t n,
                           void *out, size_t *out_bytes);
    tdl_status_t (*decode)(void *ctx, const void *in, size_t in_bytes, float *out, size_t n);
    /* out = encode(local + decode(in)) in one pass. */
    tdl_status_t (*decode_accumulate_encode)(void *ctx, const gfc_codec_hop_t *hop,
                                             const void *in, size_t in_bytes, const float *local,
                                             size_t n, void *out, size_t *out_bytes);
    /* acc += decode(in) */
    tdl_status_t (*decode_accumulate)(void *ctx, const void *in, size_t in_bytes, float *acc,
                                      size_t n);
} gfc_codec_ops_t;

typedef struct gfc_codec {
    const gfc_codec_ops_t *ops;
    void *ctx;
} gfc_codec_t;

typedef struct gfc_allreduce_opts {
    gfc_allreduce_algo_t algo;  /* AUTO: the runtime's choice */
    const gfc_codec_t *codec;   /* NULL: exact; otherwise f32 sum only, not recursive doubling */
} gfc_allreduce_opts_t;

/* ---- requests ---------------------------------------------------------------------------- */

typedef struct gfc_request gfc_request_t;

/* Progresses (every outstanding request, as each wait does) and reports whether this one is
 * complete; on error the request is finished (done is true). */
tdl_status_t gfc_request_test(gfc_request_t *req, bool *done);
/* Progresses until done or the runtime's timeout; frees the request in every case. Errors name
 * the collective and the ranks not heard from. */
tdl_status_t gfc_request_wait(gfc_request_t *req);
/* Waits for all; frees all; returns the first error. */
tdl_status_t gfc_request_wait_all(gfc_request_t **reqs, size_t count);
/* Cancels what is still pending and frees. */
void gfc_request_free(gfc_request_t *req);
/* Bytes received by a finished receive request. */
size_t gfc_request_received_bytes(const gfc_request_t *req);

/* ---- operations: *_start returns a request, the plain name waits for it --------------------
 * Counts are in elements of `dtype`; `peer` and `root` are indices into the group. send == recv
 * is allowed (in place) where it makes sense. */

tdl_status_t gfc_send_start(gfc_group_t *g, int peer, uint64_t tag, const void *buf, size_t bytes,
                            gfc_request_t **req_out);
tdl_status_t gfc_recv_start(gfc_group_t *g, int peer, uint64_t tag, void *buf, size_t bytes,
                            gfc_request_t **req_out);
tdl_status_t gfc_send(gfc_group_t *g, int peer, uint64_t tag, const void *buf, size_t bytes);
tdl_status_t gfc_recv(gfc_group_t *g, int peer, uint64_t tag, void *buf, size_t bytes,
                      size_t *received_out);

tdl_status_t gfc_barrier_start(gfc_group_t *g, gfc_request_t **req_out);
tdl_status_t gfc_barrier(gfc_group_t *g);

tdl_status_t gfc_bcast_start(gfc_group_t *g, void *buf, size_t count, gfc_dtype_t dtype, int root,
                             gfc_request_t **req_out);
tdl_status_t gfc_bcast(gfc_group_t *g, void *buf, size_t count, gfc_dtype_t dtype, int root);

/* recv (count * size elements, in group order) matters at root only. */
tdl_status_t gfc_gather_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                              gfc_dtype_t dtype, int root, gfc_request_t **req_out);
tdl_status_t gfc_gather(gfc_group_t *g, const void *send, void *recv, size_t count,
                        gfc_dtype_t dtype, int root);

tdl_status_t gfc_allgather_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                 gfc_dtype_t dtype, gfc_request_t **req_out);
tdl_status_t gfc_allgather(gfc_group_t *g, const void *send, void *recv, size_t count,
                           gfc_dtype_t dtype);

/* Member i contributes counts[i] elements, placed at recv + displs[i] elements. */
tdl_status_t gfc_allgatherv_start(gfc_group_t *g, const void *send, void *recv,
                                  const size_t *counts, const size_t *displs, gfc_dtype_t dtype,
                                  gfc_request_t **req_out);
tdl_status_t gfc_allgatherv(gfc_group_t *g, const void *send, void *recv, const size_t *counts,
                            const size_t *displs, gfc_dtype_t dtype);

/* `count` elements to and from every member; block i of send goes to member i. */
tdl_status_t gfc_alltoall_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                gfc_dtype_t dtype, gfc_request_t **req_out);
tdl_status_t gfc_alltoall(gfc_group_t *g, const void *send, void *recv, size_t count,
                          gfc_dtype_t dtype);

tdl_status_t gfc_alltoallv_start(gfc_group_t *g, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, gfc_dtype_t dtype,
                                 gfc_request_t **req_out);
tdl_status_t gfc_alltoallv(gfc_group_t *g, const void *send, const size_t *send_counts,
                           const size_t *send_displs, void *recv, const size_t *recv_counts,
                           const size_t *recv_displs, gfc_dtype_t dtype);

/* send holds size * count elements; member i receives the reduction of block i (as
 * MPI_Reduce_scatter_block). */
tdl_status_t gfc_reduce_scatter_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                      gfc_dtype_t dtype, gfc_redop_t op, gfc_request_t **req_out);
tdl_status_t gfc_reduce_scatter(gfc_group_t *g, const void *send, void *recv, size_t count,
                                gfc_dtype_t dtype, gfc_redop_t op);

/* opts may be NULL. After it returns, every member holds bit-identical results. */
tdl_status_t gfc_allreduce_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                 gfc_dtype_t dtype, gfc_redop_t op,
                                 const gfc_allreduce_opts_t *opts, gfc_request_t **req_out);
tdl_status_t gfc_allreduce(gfc_group_t *g, const void *send, void *recv, size_t count,
                           gfc_dtype_t dtype, gfc_redop_t op, const gfc_allreduce_opts_t *opts);

/* ---- machine facts ----------------------------------------------------------------------- */

/* The UCX transports this process can use ("cma,posix,self,sysv,tcp"), sorted and without
 * duplicates, read from UCX's own component and memory-domain tables. */
tdl_status_t gfc_transports_query(char *buf, size_t size);
/* The UCX transports that carry tag messages (every gfc send) to world rank `peer`, as UCX
 * names them: the distinct "tl/device" of the endpoint's lanes, in lane order, joined by '+':
 * "sysv/memory+cma/memory" (eager by shared memory, rendezvous by CMA), "tcp/eth0",
 * "sysv/memory+gfc/copy" (large messages by gfc's own single copy, --gfc-single-copy),
 * "self/memory0+cma/memory" to the caller itself. Read from ucp_ep_print_info: the lanes its
 * protocol table for tagged messages names (protocol v2, gfc's default), else
 * (UCX_PROTO_ENABLE=n) those marked for active messages or tag offload and the first rendezvous
 * lane; a lane set up but never chosen (wire-up, a spare rendezvous lane) is left out. Creates
 * the endpoint if needed, then flushes it so that wire-up is complete, up to the runtime's
 * timeout: `peer` must be progressing its runtime meanwhile (waiting in a gfc call, or in this
 * one towards the caller). Errors name the peer. */
tdl_status_t gfc_peer_transport(gfc_runtime_t *rt, int peer, char *buf, size_t size);
/* "1.13.1" */
const char *gfc_ucx_version(void);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_GFC_H */
