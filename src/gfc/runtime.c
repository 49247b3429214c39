/* The gfc runtime: one UCX context and worker per process, every rank's worker address from a
 * single start-up exchange, endpoints created on first use, and a polling progress engine. */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>

#include "gfc/gfc_internal.h"

const tdl_param_def_t gfc_params[] = {
    {"gfc-timeout-ms", TDL_PARAM_INT, "60000",
     "a collective or message not complete after this many ms fails, naming the silent ranks",
     NULL, 1, 86400000},
    {"gfc-allreduce", TDL_PARAM_ENUM, "auto",
     "all-reduce algorithm (auto: by message and group size, and hier across hosts)",
     "auto|ring|butterfly|recursive_doubling|hier", 1, 0},
    {"gfc-small-msg", TDL_PARAM_INT, "16k",
     "auto all-reduce uses recursive doubling up to this many bytes", NULL, 0, 1 << 30},
    {"gfc-ring-chunk", TDL_PARAM_INT, "256k", "pipelining unit of the ring all-reduce, bytes",
     NULL, 1024, 1 << 30},
    {"gfc-ring-codec-chunk", TDL_PARAM_INT, "256k",
     "pipelining unit of the ring all-reduce with a gradient codec, bytes of f32 values (each "
     "chunk is encoded on its own: dynamiq spreads its bits within a chunk)",
     NULL, 1024, 1 << 30},
    {"gfc-idle-sleep-us", TDL_PARAM_INT, "0",
     "a rank waiting on a collective sleeps this many us at a time once nothing has arrived for "
     "as long, instead of polling (0: always poll); a device of tools/cluster then spends none "
     "of its share of a core on waiting, as a GPU would not",
     NULL, 0, 100000},
    {"gfc-keepalive-ms", TDL_PARAM_INT, "200",
     "each rank tells every peer this often that it is alive (a thread of its own, whatever the "
     "rank is doing)",
     NULL, 10, 60000},
    {"gfc-dead-after-ms", TDL_PARAM_INT, "1500",
     "a peer not heard from for this long (killed, stopped, hung, cut off) is declared dead and "
     "every collective that includes it fails, naming it (0: no keep-alive; a dead peer is then "
     "found from its connection or its pid on this host, or by gfc-timeout-ms)",
     NULL, 0, 86400000},
    {"gfc-hier-min", TDL_PARAM_INT, "1m",
     "auto all-reduce takes hier (f32 sums within each host, one ring per local rank between "
     "hosts, with the codec if any) at or above this many bytes, on groups that span hosts and "
     "have more than one member on some host (doc/gfc.md)",
     NULL, 0, 1e15},
    {"gfc-hier-piece", TDL_PARAM_INT, "16m",
     "hier pipelines its phases (sum within the host, rings between hosts, copy back) over "
     "pieces of about this many bytes, at most 16",
     NULL, 65536, 1e15},
    {"gfc-hosts", TDL_PARAM_STRING, NULL,
     "each world rank's host as gfc's topology sees it, comma separated (\"0,0,1,1\"), in place "
     "of the ranks' host names: tests and measurements of hier on one machine (transports and "
     "liveness still follow the real hosts)",
     NULL, 0, 0},
    {"gfc-keepalive-cgroup", TDL_PARAM_STRING, NULL,
     "a cgroup (v1, a folder with a tasks file) the keep-alive thread moves into, apart from "
     "the rank's own: tools/cluster sets it, so that the CPU quota of an emulated device, which "
     "the rank can owe for seconds after long kernel work, does not silence its keep-alive as "
     "it never would a GPU's host",
     NULL, 0, 0},
    {"gfc-single-copy", TDL_PARAM_INT, "64k",
     "messages of at least this many bytes to a rank on the same host go by a single copy: the "
     "receiver reads them from the sender's memory (process_vm_readv), where shared memory "
     "copies twice; a rank that cannot read its peer falls back by itself (0: off; doc/gfc.md)",
     NULL, 0, 1e15},
    {"gfc-cma", TDL_PARAM_BOOL, "false",
     "UCX's own single copy (its cma transport) between ranks of one host, in place of "
     "--gfc-single-copy: a rank dying under one can crash its peer inside UCX 1.13 "
     "(doc/failures.md)",
     NULL, 0, 0},
};
const size_t gfc_nparams = TDL_ARRAY_SIZE(gfc_params);

void gfc_runtime_config_default(gfc_runtime_config_t *config_out)
{
    gfc_runtime_config_t c = {0};
    c.rank = 0;
    c.size = 1;
    c.timeout_ms = 60000;
    c.allreduce_algo = GFC_ALLREDUCE_AUTO;
    c.small_msg_bytes = 16 << 10;
    c.ring_chunk_bytes = 256 << 10;
    c.ring_codec_chunk_bytes = 256 << 10;
    c.keepalive_ms = 200;
    c.dead_after_ms = 1500;
    c.hier_min_bytes = 1 << 20;
    c.hier_piece_bytes = 16 << 20;
    c.single_copy_min = 64 << 10;
    *config_out = c;
}

tdl_status_t gfc_runtime_config_from_params(const tdl_params_t *params,
                                            gfc_runtime_config_t *config_out)
{
    gfc_runtime_config_t c;
    gfc_runtime_config_default(&c);
    c.timeout_ms = tdl_param_int(params, "gfc-timeout-ms");
    tdl_status_t st = gfc_allreduce_algo_parse(tdl_param_str(params, "gfc-allreduce"),
                                               &c.allreduce_algo);
    if (st != TDL_OK)
        return st;
    c.small_msg_bytes = (size_t)tdl_param_int(params, "gfc-small-msg");
    c.ring_chunk_bytes = (size_t)tdl_param_int(params, "gfc-ring-chunk");
    c.ring_codec_chunk_bytes = (size_t)tdl_param_int(params, "gfc-ring-codec-chunk");
    c.idle_sleep_us = tdl_param_int(params, "gfc-idle-sleep-us");
    c.keepalive_ms = tdl_param_int(params, "gfc-keepalive-ms");
    c.dead_after_ms = tdl_param_int(params, "gfc-dead-after-ms");
    c.cma = tdl_param_bool(params, "gfc-cma");
    c.single_copy_min = c.cma ? 0 : (size_t)tdl_param_int(params, "gfc-single-copy");
    c.hier_min_bytes = (size_t)tdl_param_int(params, "gfc-hier-min");
    c.hier_piece_bytes = (size_t)tdl_param_int(params, "gfc-hier-piece");
    const char *hosts = tdl_param_str(params, "gfc-hosts");
    if (hosts && strlen(hosts) >= sizeof(c.hosts))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "--gfc-hosts: at most %zu characters",
                               sizeof(c.hosts) - 1);
    snprintf(c.hosts, sizeof(c.hosts), "%s", hosts ? hosts : "");
    const char *kcg = tdl_param_str(params, "gfc-keepalive-cgroup");
    if (kcg && strlen(kcg) >= sizeof(c.keepalive_cgroup))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "--gfc-keepalive-cgroup: at most %zu characters",
                               sizeof(c.keepalive_cgroup) - 1);
    snprintf(c.keepalive_cgroup, sizeof(c.keepalive_cgroup), "%s", kcg ? kcg : "");
    if (c.dead_after_ms > 0 && c.dead_after_ms < 3 * c.keepalive_ms)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "--gfc-dead-after-ms %lld is under 3 x --gfc-keepalive-ms %lld: "
                               "a peer would be declared dead after one late keep-alive; raise "
                               "it or lower the other",
                               (long long)c.dead_after_ms, (long long)c.keepalive_ms);
    *config_out = c;
    return TDL_OK;
}

/* Identifies this host: its name and boot id, so that two containers or two boots of one host
 * name never look alike. */
static void runtime_card_fill(gfc_peer_card_t *card)
{
    memset(card, 0, sizeof(*card));
    card->magic = GFC_CARD_MAGIC;
    card->pid = (uint32_t)getpid();
    char id[512] = "";
    if (gethostname(id, 255) != 0)
        id[0] = '\0';
    size_t n = strlen(id);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(id + n, (int)(sizeof(id) - n), f))
            id[n] = '\0';
        fclose(f);
    }
    /* Two FNV-1a streams make 16 bytes of identity. */
    uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
    for (const unsigned char *c = (const unsigned char *)id; *c; c++) {
        h1 = (h1 ^ *c) * 0x100000001b3ull;
        h2 = (h2 ^ *c) * 0x100000001b3ull ^ (h2 >> 29);
    }
    memcpy(card->host, &h1, 8);
    memcpy(card->host + 8, &h2, 8);
}

/* A word no other process holds at the same address: what a peer reads back to know it can
 * read this rank's memory (copy.c). */
static uint64_t runtime_cookie(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
        v = tdl_clock_ns() ^ ((uint64_t)getpid() << 32);
    return gfc_mix64(v) | 1;
}

static tdl_status_t ucx_error(ucs_status_t s, const char *what)
{
    return tdl_error_raise(TDL_ERR_UCX, "%s: %s", what, ucs_status_string(s));
}

tdl_status_t gfc_ucx_open(const char *name, bool tuned, bool cma, ucp_context_h *context_out,
                          ucp_worker_h *worker_out)
{
    ucp_config_t *ucfg;
    ucs_status_t us = ucp_config_read(NULL, NULL, &ucfg);
    if (us != UCS_OK)
        return ucx_error(us, "ucp_config_read");
    if (tuned) {
        /* Rendezvous by put: the receiver owes the sender nothing once its data has arrived, so
         * a rank that stops calling gfc after a collective cannot hold back its peers' sends
         * (with get, the receiver's acknowledgement waits for its next progress call).
         * UCX_RNDV_SCHEME still wins when set. */
        if (!getenv("UCX_RNDV_SCHEME"))
            ucp_config_modify(ucfg, "RNDV_SCHEME", "put_zcopy");
        /* UCX's second protocol set (its default from 1.16; opt-in in Debian 12's 1.13): over
         * TCP the first set's rendezvous moves a ring's pipelined chunks of one round together,
         * so no chunk arrives before the whole round has crossed the link and the rounds do not
         * overlap (bench/run allreduce-link: 4 ranks at 1 Gbit/s, 64 MiB in dynamiq, 0.19 s ->
         * 0.15 s; the wire alone takes 0.126 s). A UCX without the setting ignores it;
         * UCX_PROTO_ENABLE wins. */
        if (!getenv("UCX_PROTO_ENABLE"))
            (void)ucp_config_modify(ucfg, "PROTO_ENABLE", "y");
        /* A longer receive FIFO for shared memory (1024 elements of 8 KiB where UCX has 64):
         * a large message within a host streams through the receiver's FIFO, and with 64
         * elements (512 KiB) the sender stops as soon as the receiver stops calling UCX (a
         * throttled device, a host thread busy elsewhere); with 8 MiB it can leave a whole ring
         * chunk or butterfly half and go on. bench/run gfc-allreduce on 8 devices of 0.22 core
         * (doc/gfc.md): 4 MiB from 0.10 to 0.17-0.20 GB/s of bus bandwidth. A UCX_*_FIFO_SIZE
         * of the user's wins. */
        if (!getenv("UCX_MM_FIFO_SIZE") && !getenv("UCX_SYSV_FIFO_SIZE") &&
            !getenv("UCX_POSIX_FIFO_SIZE")) {
            ucs_status_t fs = ucp_config_modify(ucfg, "MM_FIFO_SIZE", "1024");
            if (fs != UCS_OK)
                TDL_DEBUG("UCX takes no MM_FIFO_SIZE (%s): its default FIFO stays",
                          ucs_status_string(fs));
        }
    }
    /* CMA (process_vm_readv, UCX's single copy between processes of one host) to a peer that
     * died under a transfer trips an assertion inside UCX 1.13 and kills this rank too
     * (same-host endpoints have no UCX error mode, see gfc_ep_get): left out unless asked for
     * (--gfc-cma) or UCX_TLS says otherwise. Large messages within a host then take shared
     * memory's copies. */
    if (!cma && !getenv("UCX_TLS"))
        (void)ucp_config_modify(ucfg, "TLS", "^cma");
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_TAG,
        .name = name,
    };
    ucp_context_h context;
    us = ucp_init(&params, ucfg, &context);
    ucp_config_release(ucfg);
    if (us != UCS_OK)
        return ucx_error(us, "ucp_init");
    /* each worker is driven by one thread: the caller's */
    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    us = ucp_worker_create(context, &wparams, worker_out);
    if (us != UCS_OK) {
        ucp_cleanup(context);
        return ucx_error(us, "ucp_worker_create");
    }
    *context_out = context;
    return TDL_OK;
}

tdl_status_t gfc_runtime_create(const gfc_runtime_config_t *config, gfc_runtime_t **rt_out)
{
    if (config->size < 1 || config->rank < 0 || config->rank >= config->size)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc: rank %d of world size %d is invalid",
                               config->rank, config->size);
    if (!config->allgather)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc: no start-up exchange function given");
    tdl_status_t st;
    ucs_status_t us;
    gfc_runtime_t *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc: cannot allocate the runtime");
    rt->config = *config;
    rt->rank = config->rank;
    rt->size = config->size;
    rt->eps = calloc((size_t)rt->size, sizeof(*rt->eps));
    rt->peer_status = calloc((size_t)rt->size, sizeof(*rt->peer_status));
    rt->peer_state = calloc((size_t)rt->size, sizeof(*rt->peer_state));
    rt->peer_why = calloc((size_t)rt->size, sizeof(*rt->peer_why));
    rt->live_addrs = calloc((size_t)rt->size, sizeof(*rt->live_addrs));
    rt->ep_failed_ns = calloc((size_t)rt->size, sizeof(*rt->ep_failed_ns));
    rt->left = calloc((size_t)rt->size, sizeof(*rt->left));
    atomic_init(&rt->dead_count, 0);
    atomic_init(&rt->fenced_by, -1);
    if (!rt->eps || !rt->peer_status || !rt->peer_state || !rt->peer_why || !rt->live_addrs ||
        !rt->ep_failed_ns || !rt->left) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "gfc: cannot allocate %d endpoints", rt->size);
        goto err_free;
    }

    if ((st = gfc_ucx_open("tidal-gfc", true, rt->config.cma, &rt->context, &rt->worker)) != TDL_OK)
        goto err_free;
    ucp_address_t *addr;
    size_t addr_len;
    us = ucp_worker_get_address(rt->worker, &addr, &addr_len);
    if (us != UCS_OK) {
        st = ucx_error(us, "ucp_worker_get_address");
        goto err_worker;
    }
    /* The keep-alive worker's address travels in the same exchange. */
    void *live_addr = NULL;
    size_t live_len = 0;
    if (rt->size > 1 && config->dead_after_ms > 0 &&
        (st = gfc_live_create(rt, &live_addr, &live_len)) != TDL_OK) {
        ucp_worker_release_address(rt->worker, addr);
        goto err_worker;
    }
    /* The one exchange: from here on gfc needs nothing from MPI. Each rank publishes where it
     * runs (host identity, pid) ahead of its worker addresses. */
    gfc_peer_card_t card;
    runtime_card_fill(&card);
    card.addr_len = (uint32_t)addr_len;
    card.live_len = (uint32_t)live_len;
    rt->cookie = runtime_cookie();
    card.cookie = rt->cookie;
    card.cookie_addr = (uint64_t)(uintptr_t)&rt->cookie;
    if (getenv("TIDAL_GFC_TEST_COOKIE_SKEW")) /* tests: every peer's probe of this rank fails */
        card.cookie ^= 1;
    /* Yama's ptrace_scope 1 lets only ancestors read a process: a peer's single copy needs
     * more (Open MPI's vader does the same). Harmless where Yama is absent. */
    if (rt->config.single_copy_min > 0)
        (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    unsigned char *blob = malloc(sizeof(card) + addr_len + live_len);
    if (!blob) {
        ucp_worker_release_address(rt->worker, addr);
        free(live_addr);
        st = tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
        goto err_live;
    }
    memcpy(blob, &card, sizeof(card));
    memcpy(blob + sizeof(card), addr, addr_len);
    if (live_len)
        memcpy(blob + sizeof(card) + addr_len, live_addr, live_len);
    ucp_worker_release_address(rt->worker, addr);
    free(live_addr);
    st = config->allgather(blob, sizeof(card) + addr_len + live_len, &rt->addrs);
    free(blob);
    if (st != TDL_OK)
        goto err_live;
    if (rt->addrs.count != rt->size) {
        st = tdl_error_raise(TDL_ERR_INTERNAL, "gfc: start-up exchange returned %d addresses for "
                                               "a world of %d",
                             rt->addrs.count, rt->size);
        goto err_addrs;
    }
    rt->peer_pid = calloc((size_t)rt->size, sizeof(*rt->peer_pid));
    rt->peer_local = calloc((size_t)rt->size, sizeof(*rt->peer_local));
    rt->peer_cookie = calloc((size_t)rt->size, sizeof(*rt->peer_cookie));
    rt->peer_cookie_addr = calloc((size_t)rt->size, sizeof(*rt->peer_cookie_addr));
    rt->peer_copy = calloc((size_t)rt->size, sizeof(*rt->peer_copy));
    if (!rt->peer_pid || !rt->peer_local || !rt->peer_cookie || !rt->peer_cookie_addr ||
        !rt->peer_copy) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
        goto err_addrs;
    }
    unsigned char(*host_ids)[16] = malloc((size_t)rt->size * 16);
    if (!host_ids) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "gfc: out of memory");
        goto err_addrs;
    }
    int local_ranks = 0;
    for (int r = 0; r < rt->size; r++) {
        gfc_peer_card_t pc;
        if (rt->addrs.len[r] <= sizeof(pc)) {
            st = tdl_error_raise(TDL_ERR_CORRUPT, "gfc: rank %d published a malformed address", r);
            goto err_hosts;
        }
        memcpy(&pc, rt->addrs.data + rt->addrs.off[r], sizeof(pc));
        if (pc.magic != GFC_CARD_MAGIC) {
            st = tdl_error_raise(TDL_ERR_MISMATCH,
                                 "gfc: rank %d runs another tidal version (address format %08x)",
                                 r, pc.magic);
            goto err_hosts;
        }
        if (pc.addr_len == 0 || (size_t)pc.addr_len + pc.live_len + sizeof(pc) != rt->addrs.len[r] ||
            (rt->live && pc.live_len == 0) || (!rt->live && pc.live_len != 0 && rt->size > 1)) {
            st = tdl_error_raise(TDL_ERR_MISMATCH,
                                 "gfc: rank %d published a malformed address, or its "
                                 "--gfc-dead-after-ms is 0 where this rank's is not (or the "
                                 "other way round): every rank needs the same setting", r);
            goto err_hosts;
        }
        rt->live_addrs[r] = rt->addrs.data + rt->addrs.off[r] + sizeof(pc) + pc.addr_len;
        rt->peer_pid[r] = (int)pc.pid;
        rt->peer_local[r] = memcmp(pc.host, card.host, sizeof(card.host)) == 0;
        rt->peer_cookie[r] = pc.cookie;
        rt->peer_cookie_addr[r] = pc.cookie_addr;
        local_ranks += rt->peer_local[r];
        memcpy(host_ids[r], pc.host, 16);
    }
    /* Every rank builds the same table from the same cards: hosts need no exchange of their own. */
    st = gfc_hosts_build(rt, (const unsigned char(*)[16])host_ids);
    free(host_ids);
    host_ids = NULL;
    if (st != TDL_OK)
        goto err_addrs;
    /* Oversubscribed (more ranks here than cores): a waiting rank gives its core away at once. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    rt->yield_after = (cores > 0 && local_ranks > cores) ? 1 : 64;
    if (rt->live && (st = gfc_live_start(rt)) != TDL_OK)
        goto err_topo;
    TDL_DEBUG("gfc: rank %d of %d ready, worker address %zu bytes", rt->rank, rt->size, addr_len);
    *rt_out = rt;
    return TDL_OK;

err_hosts:
    free(host_ids);
    goto err_addrs;
err_topo:
    gfc_hosts_free(rt);
err_addrs:
    free(rt->peer_copy);
    free(rt->peer_cookie_addr);
    free(rt->peer_cookie);
    free(rt->peer_local);
    free(rt->peer_pid);
    tdl_blobs_free(&rt->addrs);
err_live:
    gfc_live_destroy(rt);
err_worker:
    ucp_worker_destroy(rt->worker);
    ucp_cleanup(rt->context);
err_free:
    free(rt->left);
    free(rt->ep_failed_ns);
    free(rt->live_addrs);
    free(rt->peer_why);
    free(rt->peer_state);
    free(rt->peer_status);
    free(rt->eps);
    free(rt);
    return st;
}

/* Waits for a UCX operation to finish, bounded by limit_ms. */
static ucs_status_t runtime_wait_ucx_ms(gfc_runtime_t *rt, void *req, int64_t limit_ms)
{
    if (req == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
        return UCS_PTR_STATUS(req);
    uint64_t deadline = tdl_clock_ns() + (uint64_t)limit_ms * 1000000ull;
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        if (!ucp_worker_progress(rt->worker))
            sched_yield();
        if (tdl_clock_ns() > deadline) {
            ucp_request_cancel(rt->worker, req);
            s = UCS_ERR_TIMED_OUT;
            break;
        }
    }
    ucp_request_free(req);
    return s;
}

/* How long the end waits for a peer to acknowledge a close: a peer that has gone on (into
 * MPI_Finalize, or away) no longer progresses its worker, and then nothing is owed it. */
#define CLOSE_WAIT_MS 1000

void gfc_runtime_destroy(gfc_runtime_t *rt)
{
    if (!rt)
        return;
    if (rt->requests_live)
        TDL_WARN("gfc: destroying the runtime with %zu requests not freed", rt->requests_live);
    rt->ending = true;
    /* Everything sent is delivered before the peers hear BYE (the keep-alive thread runs on
     * meanwhile): a peer that has yet to take this rank's last message then still finds it
     * (request.c, left_peer_owes). BYE comes before the endpoints close, so that the peers learn
     * this rank has left, not died. */
    ucp_request_param_t prm = {0};
    ucs_status_t fs = runtime_wait_ucx_ms(
        rt, ucp_worker_flush_nbx(rt->worker, &prm),
        gfc_runtime_dead_count(rt) ? TDL_MIN(rt->config.timeout_ms, CLOSE_WAIT_MS)
                                   : rt->config.timeout_ms);
    gfc_live_destroy(rt);
    for (int r = 0; r < rt->size; r++) {
        if (!rt->eps[r])
            continue;
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS};
        /* A failed peer or a failed flush cannot be flushed again: close without waiting. */
        if (rt->peer_status[r] != UCS_OK || gfc_peer_state(rt, r) != GFC_PEER_ALIVE ||
            fs != UCS_OK)
            cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        runtime_wait_ucx_ms(rt, ucp_ep_close_nbx(rt->eps[r], &cp),
                            TDL_MIN(rt->config.timeout_ms, CLOSE_WAIT_MS));
    }
    /* With a peer dead, UCX (1.13) may still hold requests to it that no one can complete, and
     * its worker's clean-up crashes on them (ucs_mpool_cleanup): the process is about to exit,
     * which frees them, so the worker is left to it. */
    if (gfc_runtime_dead_count(rt) == 0) {
        ucp_worker_destroy(rt->worker);
        ucp_cleanup(rt->context);
    }
    for (size_t i = 0; i < TDL_ARRAY_SIZE(rt->cache); i++)
        free(rt->cache[i].buf);
    tdl_blobs_free(&rt->addrs);
    gfc_hosts_free(rt);
    free(rt->peer_copy);
    free(rt->peer_cookie_addr);
    free(rt->peer_cookie);
    free(rt->peer_local);
    free(rt->peer_pid);
    free(rt->left);
    free(rt->ep_failed_ns);
    free(rt->live_addrs);
    free(rt->peer_why);
    free(rt->peer_state);
    free(rt->peer_status);
    free(rt->eps);
    free(rt);
}

int gfc_runtime_rank(const gfc_runtime_t *rt)
{
    return rt->rank;
}

int gfc_runtime_size(const gfc_runtime_t *rt)
{
    return rt->size;
}

void gfc_runtime_progress(gfc_runtime_t *rt)
{
    gfc_runtime_advance(rt);
}

void gfc_runtime_stats(const gfc_runtime_t *rt, gfc_stats_t *stats_out)
{
    gfc_stats_t s = {
        .endpoints = rt->endpoints,
        .requests_live = rt->requests_live,
        .ucx_requests_live = rt->ucx_requests_live,
        .collectives = rt->collectives,
        .bytes_sent = rt->bytes_sent,
        .single_copies = rt->single_copies,
        .single_copy_fallbacks = rt->single_copy_fallbacks,
    };
    *stats_out = s;
}

bool gfc_peer_check(gfc_runtime_t *rt, int peer)
{
    if (gfc_peer_state(rt, peer) != GFC_PEER_ALIVE)
        return false;
    if (rt->peer_status[peer] != UCS_OK)
        return false;
    if (!rt->peer_local[peer] || peer == rt->rank || rt->live)
        return true; /* the keep-alive thread watches the pids itself */
    if (kill((pid_t)rt->peer_pid[peer], 0) != 0 && errno == ESRCH) {
        gfc_peer_declare(rt, peer, GFC_PEER_DEAD, true, "its process (pid %d) has exited",
                         rt->peer_pid[peer]);
        return false;
    }
    return true;
}

static void runtime_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    gfc_runtime_t *rt = arg;
    for (int r = 0; r < rt->size; r++) {
        if (rt->eps[r] == ep) {
            rt->peer_status[r] = status;
            gfc_peer_endpoint_failed(rt, r, status);
            return;
        }
    }
}

tdl_status_t gfc_ep_get(gfc_runtime_t *rt, int peer, ucp_ep_h *ep_out)
{
    if (atomic_load(&rt->fenced_by) >= 0 || gfc_peer_state(rt, peer) != GFC_PEER_ALIVE ||
        rt->peer_status[peer] != UCS_OK)
        return gfc_peer_error(rt, peer);
    if (!rt->eps[peer]) {
        /* UCX's peer error handling rules out its shared-memory and CMA transports, so peers on
         * this node are watched through their pid instead (gfc_peer_check), and peers elsewhere
         * through UCX. */
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = (const ucp_address_t *)(rt->addrs.data + rt->addrs.off[peer] +
                                               sizeof(gfc_peer_card_t)),
            .err_mode = rt->peer_local[peer] ? UCP_ERR_HANDLING_MODE_NONE
                                             : UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = runtime_ep_error, .arg = rt},
        };
        ucs_status_t s = ucp_ep_create(rt->worker, &ep, &rt->eps[peer]);
        if (s != UCS_OK)
            /* a peer dying as it is first reached: it is the peer that failed */
            return tdl_error_raise(TDL_ERR_PEER, "cannot reach rank %d: ucp_ep_create: %s", peer,
                                   ucs_status_string(s));
        if (tdl_log_get_level() >= TDL_LOG_TRACE)
            ucp_ep_print_info(rt->eps[peer], stderr);
        /* A message to oneself goes through UCX's loopback transport: no network resource. */
        if (peer != rt->rank)
            rt->endpoints++;
    }
    *ep_out = rt->eps[peer];
    return TDL_OK;
}
