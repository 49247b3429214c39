/* Every gfc operation against MPI on the equivalent communicator (MPI_Comm_create_group over
 * the same ranks in the same order), on the whole world, the world in random order, each rank
 * alone, a non-power-of-two group and random non-contiguous groups.
 *
 * Inputs are a function of (seed, case, world rank), so every rank can rebuild any member's
 * input: float sums are checked against MPI within 2 (n + 1) u sum|x|, where u is the unit
 * roundoff of the type and n the number of contributions; integers, max and min must equal
 * MPI's exactly; every member's all-reduce result must be bit-identical to every other's
 * (hashes compared through MPI). The codec hook is checked with a lossless codec (results
 * bit-identical to the same algorithm without a codec) and a lossy bf16 codec. */
#include "config.h"

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "mpi/baseline.h"

_Static_assert((int)GFC_DT_F32 == (int)MREF_DT_F32 && (int)GFC_DT_BF16 == (int)MREF_DT_BF16 &&
                   (int)GFC_DT_F16 == (int)MREF_DT_F16 && (int)GFC_DT_I32 == (int)MREF_DT_I32 &&
                   (int)GFC_DT_I64 == (int)MREF_DT_I64 && (int)GFC_DT_BYTE == (int)MREF_DT_BYTE,
               "mref_dtype_t mirrors gfc_dtype_t");
_Static_assert((int)GFC_OP_SUM == (int)MREF_OP_SUM && (int)GFC_OP_MAX == (int)MREF_OP_MAX &&
                   (int)GFC_OP_MIN == (int)MREF_OP_MIN,
               "mref_op_t mirrors gfc_redop_t");

#define MDT(dt) ((mref_dtype_t)(dt))
#define MOP(op) ((mref_op_t)(op))

static const char *const dt_names[] = {"f32", "bf16", "f16", "i32", "i64", "byte"};
static const size_t dt_sizes[] = {4, 2, 2, 4, 8, 1};
static const char *const op_names[] = {"sum", "max", "min"};
static const char *const algo_names[] = {"auto", "ring", "butterfly", "recursive-doubling",
                                         "hier"};
_Static_assert(TDL_ARRAY_SIZE(algo_names) == GFC_ALLREDUCE_COUNT, "a name for every algorithm");

static const gfc_dtype_t reduce_dtypes[] = {GFC_DT_F32, GFC_DT_BF16, GFC_DT_F16, GFC_DT_I32,
                                            GFC_DT_I64};

/* ---- groups -------------------------------------------------------------------------------- */

typedef struct ops_group {
    int *ranks;
    int n;
    int index;
    char kind[32];
    char str[200];
    bool member;
    bool full;        /* run the large case matrix here */
    gfc_group_t g;    /* members only */
    mref_comm_t *ref; /* members only */
    uint64_t cases;   /* cases run so far: the same on every member */
} ops_group_t;

typedef struct ops {
    harness_t *h;
    ops_group_t *groups;
    int ngroups;
    uint64_t *flags; /* shared memory of the node: barrier arrival flags, or NULL */
    size_t flags_bytes;
    bool quick; /* fewer cases at large world sizes */
} ops_t;

/* A case key the same on every member of G: inputs derive from it. */
static uint64_t ops_key(ops_group_t *G)
{
    return ((uint64_t)(G->index + 1) << 40) | G->cases++;
}

/* ---- inputs -------------------------------------------------------------------------------- */

static void fill(void *buf, size_t count, gfc_dtype_t dt, uint64_t seed, uint64_t key,
                 int world_rank)
{
    tdl_rng_t rng;
    tdl_rng_init(&rng, seed ^ 0x5eed0f0e5ull, key * 0x9e3779b97f4a7c15ull + (uint64_t)world_rank);
    for (size_t i = 0; i < count; i++) {
        switch (dt) {
        case GFC_DT_F32: ((float *)buf)[i] = tdl_rng_normal(&rng); break;
        case GFC_DT_BF16: ((uint16_t *)buf)[i] = tdl_bf16_from_f32(tdl_rng_normal(&rng)); break;
        case GFC_DT_F16: ((uint16_t *)buf)[i] = tdl_f16_from_f32(tdl_rng_normal(&rng)); break;
        case GFC_DT_I32:
            ((int32_t *)buf)[i] = (int32_t)tdl_rng_below(&rng, 2000001) - 1000000;
            break;
        case GFC_DT_I64:
            /* beyond 2^53 so that a detour through double shows; sums of 16 fit */
            ((int64_t *)buf)[i] = (int64_t)(tdl_rng_u64(&rng) >> 6) - ((int64_t)1 << 57);
            break;
        default: ((uint8_t *)buf)[i] = (uint8_t)tdl_rng_u32(&rng); break;
        }
    }
}

static double elem(const void *buf, size_t i, gfc_dtype_t dt)
{
    switch (dt) {
    case GFC_DT_F32: return ((const float *)buf)[i];
    case GFC_DT_BF16: return tdl_bf16_to_f32(((const uint16_t *)buf)[i]);
    case GFC_DT_F16: return tdl_f16_to_f32(((const uint16_t *)buf)[i]);
    case GFC_DT_I32: return ((const int32_t *)buf)[i];
    case GFC_DT_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

/* sum over the members of |input element off + i|, for float tolerances. */
static double *sumabs_new(const harness_t *h, const ops_group_t *G, uint64_t key, gfc_dtype_t dt,
                          size_t total, size_t off, size_t count)
{
    double *s = calloc(count ? count : 1, sizeof(double));
    void *tmp = harness_xmalloc(total * dt_sizes[dt]);
    for (int m = 0; m < G->n; m++) {
        fill(tmp, total, dt, h->seed, key, G->ranks[m]);
        for (size_t i = 0; i < count; i++)
            s[i] += fabs(elem(tmp, off + i, dt));
    }
    free(tmp);
    return s;
}

static double unit_roundoff(gfc_dtype_t dt)
{
    return dt == GFC_DT_BF16 ? 0x1p-8 : dt == GFC_DT_F16 ? 0x1p-11 : 0x1p-24;
}

/* Checks a reduction result against MPI's: exact for integers, max and min; float sums within
 * 2 (n + 1) u sum|x| plus a subnormal floor. Returns true when every element passes. */
static bool check_reduction(harness_t *h, const char *what, const void *got, const void *ref,
                            size_t count, gfc_dtype_t dt, gfc_redop_t op, int n,
                            const double *sumabs)
{
    size_t es = dt_sizes[dt];
    bool exact = op != GFC_OP_SUM || dt == GFC_DT_I32 || dt == GFC_DT_I64 || dt == GFC_DT_BYTE;
    for (size_t i = 0; i < count; i++) {
        const unsigned char *g = (const unsigned char *)got + i * es;
        const unsigned char *r = (const unsigned char *)ref + i * es;
        if (exact) {
            if (memcmp(g, r, es) == 0)
                continue;
            harness_fail(h, "%s: element %zu of %zu: got %.17g, MPI %.17g", what, i, count,
                         elem(got, i, dt), elem(ref, i, dt));
            return false;
        }
        double floor = dt == GFC_DT_F16 ? n * 0x1p-24 : n * 0x1p-126;
        double tol = 2.0 * (n + 1) * unit_roundoff(dt) * sumabs[i] + floor;
        double gv = elem(got, i, dt), rv = elem(ref, i, dt);
        if (fabs(gv - rv) <= tol)
            continue;
        harness_fail(h, "%s: element %zu of %zu: got %.9g, MPI %.9g, tolerance %.3g", what, i,
                     count, gv, rv, tol);
        return false;
    }
    return true;
}

/* ---- bit-identity across members, checked in batches -------------------------------------- */

typedef struct hash_batch {
    uint64_t *hashes;
    char (*labels)[64];
    size_t count, cap;
} hash_batch_t;

static void batch_add(hash_batch_t *b, const void *buf, size_t bytes, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void batch_add(hash_batch_t *b, const void *buf, size_t bytes, const char *fmt, ...)
{
    if (b->count == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->hashes = realloc(b->hashes, b->cap * sizeof(*b->hashes));
        b->labels = realloc(b->labels, b->cap * sizeof(*b->labels));
        if (!b->hashes || !b->labels)
            abort();
    }
    b->hashes[b->count] = harness_hash(buf, bytes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->labels[b->count], sizeof(b->labels[0]), fmt, ap);
    va_end(ap);
    b->count++;
}

/* Every member compares every member's hashes with its own; frees the batch. */
static void batch_check(harness_t *h, ops_group_t *G, hash_batch_t *b)
{
    size_t k = b->count;
    uint64_t *all = harness_xmalloc((size_t)G->n * k * sizeof(uint64_t));
    tdl_status_t st = mref_allgather(G->ref, b->hashes, all, k, MREF_DT_I64);
    if (harness_expect_status(h, st, TDL_OK, "MPI all-gather of result hashes")) {
        bool bad = false;
        for (int m = 0; m < G->n && !bad; m++)
            for (size_t i = 0; i < k && !bad; i++)
                if (all[(size_t)m * k + i] != b->hashes[i]) {
                    harness_fail(h, "%s: result differs between member %d (rank %d) and me",
                                 b->labels[i], m, G->ranks[m]);
                    bad = true;
                }
    }
    free(all);
    free(b->hashes);
    free(b->labels);
    memset(b, 0, sizeof(*b));
}

/* ---- group values -------------------------------------------------------------------------- */

static void test_group_init(ops_t *o)
{
    harness_t *h = o->h;
    int W = h->size, me = h->rank;
    gfc_group_t g, untouched;
    gfc_stats_t before, after;
    char want[32];
    int *ranks = harness_xmalloc((size_t)(W + 2) * sizeof(int));
    gfc_runtime_stats(h->rt, &before);

    /* a duplicate in a list no longer than the world: [me, d, d], or [me, me] in a world of 2 */
    int d = W >= 3 ? (me + 1) % W : me, n = 0;
    ranks[n++] = me;
    if (W >= 3)
        ranks[n++] = d;
    ranks[n++] = d;
    memset(&g, 0xab, sizeof(g));
    untouched = g;
    tdl_status_t st = gfc_group_init(&g, h->rt, ranks, n, 1);
    harness_expect_status(h, st, TDL_ERR_INVALID_ARG, "group with a duplicate");
    snprintf(want, sizeof(want), "%d", d);
    harness_expect(h, strstr(tdl_error_get(), want) != NULL, "duplicate %d not named in '%s'", d,
                   tdl_error_get());
    harness_expect(h, memcmp(&g, &untouched, sizeof(g)) == 0,
                   "refused group_init wrote its output (duplicate)");
    /* more entries than ranks: some repeat */
    n = 0;
    for (int r = 0; r < W; r++)
        ranks[n++] = (me + r) % W;
    ranks[n++] = me;
    st = gfc_group_init(&g, h->rt, ranks, n, 1);
    harness_expect_status(h, st, TDL_ERR_INVALID_ARG, "group of world + 1 entries");

    /* out of range, above and below */
    const int bad_ranks[2] = {W + 1000003, -7};
    for (int k = 0; k < 2; k++) {
        ranks[0] = me;
        ranks[1] = bad_ranks[k];
        st = gfc_group_init(&g, h->rt, ranks, 2, 1);
        snprintf(want, sizeof(want), "%d", bad_ranks[k]);
        harness_expect_status(h, st, TDL_ERR_INVALID_ARG, want);
        harness_expect(h, strstr(tdl_error_get(), want) != NULL,
                       "out-of-range rank %d not named in '%s'", bad_ranks[k], tdl_error_get());
        harness_expect(h, memcmp(&g, &untouched, sizeof(g)) == 0,
                       "refused group_init wrote its output (rank %d)", bad_ranks[k]);
    }

    /* the caller is not a member */
    n = 0;
    for (int r = 0; r < W; r++)
        if (r != me)
            ranks[n++] = r;
    st = gfc_group_init(&g, h->rt, ranks, n, 1);
    harness_expect_status(h, st, TDL_ERR_INVALID_ARG, "group without the caller");
    harness_expect(h, tdl_error_get()[0] != '\0', "no message for a group without the caller");
    harness_expect(h, memcmp(&g, &untouched, sizeof(g)) == 0,
                   "refused group_init wrote its output (not a member)");

    /* empty and negative sizes */
    ranks[0] = me;
    st = gfc_group_init(&g, h->rt, ranks, 0, 1);
    harness_expect_status(h, st, TDL_ERR_INVALID_ARG, "group of size 0");
    harness_expect(h, tdl_error_get()[0] != '\0', "no message for a group of size 0");
    st = gfc_group_init(&g, h->rt, ranks, -1, 1);
    harness_expect_status(h, st, TDL_ERR_INVALID_ARG, "group of size -1");
    harness_expect(h, memcmp(&g, &untouched, sizeof(g)) == 0,
                   "refused group_init wrote its output (size 0 or -1)");

    gfc_runtime_stats(h->rt, &after);
    harness_expect(
        h,
        after.bytes_sent == before.bytes_sent && after.collectives == before.collectives &&
            after.endpoints == before.endpoints && after.requests_live == before.requests_live,
        "refused group_init changed the runtime stats (bytes %" PRIu64 "->%" PRIu64
        ", endpoints %zu->%zu)",
        before.bytes_sent, after.bytes_sent, before.endpoints, after.endpoints);
    harness_point(h, "gfc_group_init refuses a duplicate, more entries than ranks, out-of-range "
                     "ranks, a group without the caller and size 0 with TDL_ERR_INVALID_ARG, "
                     "naming the entry, sending nothing");

    /* A valid value: fields, and an id that is the same on every member. */
    for (int r = 0; r < W; r++)
        ranks[r] = W - 1 - r;
    st = gfc_group_init(&g, h->rt, ranks, W, 77);
    if (harness_expect_status(h, st, TDL_OK, "world group")) {
        harness_expect(h,
                       g.size == W && g.me == W - 1 - me && g.ranks == ranks && g.ns == 77 &&
                           g.seq == 0 && g.rt == h->rt,
                       "group fields: size %d me %d ns %" PRIu64 " seq %" PRIu64, g.size, g.me,
                       g.ns, g.seq);
        uint64_t *ids = harness_xmalloc((size_t)W * sizeof(uint64_t));
        mref_world_gather_bytes(&g.id, sizeof(g.id), ids, 0);
        for (int r = 0; r < W && me == 0; r++)
            harness_expect(h, ids[r] == g.id, "group id of rank %d differs from rank 0's", r);
        free(ids);
        gfc_group_t other;
        st = gfc_group_init(&other, h->rt, ranks, W, 78);
        harness_expect(h, st == TDL_OK && other.id != g.id, "same ranks, other ns: same id");
        int *rev = harness_xmalloc((size_t)W * sizeof(int));
        for (int r = 0; r < W; r++)
            rev[r] = r;
        st = gfc_group_init(&other, h->rt, rev, W, 77);
        harness_expect(h, st == TDL_OK && (W == 1 || other.id != g.id),
                       "same ranks in another order: same id");
        free(rev);
    }
    harness_expect(h, gfc_runtime_rank(h->rt) == me && gfc_runtime_size(h->rt) == W,
                   "runtime rank/size %d/%d", gfc_runtime_rank(h->rt), gfc_runtime_size(h->rt));
    harness_point(h, "group values: fields set, id equal on every member and different for "
                     "another ns or order");
    free(ranks);
}

/* ---- point to point ------------------------------------------------------------------------ */

/* Polls a request to completion, giving up after the runtime's timeout plus slack. */
static tdl_status_t poll_done(harness_t *h, gfc_request_t *req, bool *done)
{
    double deadline = tdl_clock_s() + (double)h->config.timeout_ms / 1000.0 + 10.0;
    tdl_status_t st = TDL_OK;
    *done = false;
    while (!*done && tdl_clock_s() < deadline) {
        st = gfc_request_test(req, done);
        if (st != TDL_OK)
            return st;
    }
    return *done ? TDL_OK : TDL_ERR_TIMEOUT;
}

/* Two messages on one tag to one peer, a large one (four pieces of a single copy's read) and a
 * small one that is read first: each send completes only once its own data is across, so the
 * sender may overwrite the large buffer as soon as its send is done. */
static void test_p2p_same_tag(harness_t *h, ops_group_t *G)
{
    int n = G->n, me = G->g.me;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    uint64_t key = ops_key(G);
    const size_t len[2] = {(24u << 20) + 1, 100000};
    unsigned char *s[2], *r[2], *want[2];
    gfc_request_t *sreq[2] = {NULL, NULL}, *rreq[2] = {NULL, NULL};
    for (int t = 0; t < 2; t++) {
        s[t] = harness_xmalloc(len[t]);
        r[t] = harness_xmalloc(len[t]);
        want[t] = harness_xmalloc(len[t]);
        fill(s[t], len[t], GFC_DT_BYTE, h->seed, key + (uint64_t)t * 104729, G->ranks[me]);
        fill(want[t], len[t], GFC_DT_BYTE, h->seed, key + (uint64_t)t * 104729, G->ranks[prev]);
    }
    tdl_status_t st = TDL_OK;
    for (int t = 0; t < 2 && st == TDL_OK; t++)
        st = gfc_recv_start(&G->g, prev, 13, r[t], len[t], &rreq[t]);
    for (int t = 0; t < 2 && st == TDL_OK; t++)
        st = gfc_send_start(&G->g, next, 13, s[t], len[t], &sreq[t]);
    if (harness_expect_status(h, st, TDL_OK, "two sends and receives on one tag")) {
        st = gfc_request_wait(sreq[0]);
        sreq[0] = NULL;
        memset(s[0], 0xaa, len[0]); /* the send is done: its buffer is the caller's again */
        harness_expect_status(h, st, TDL_OK, "the large send");
        harness_expect_status(h, gfc_request_wait(sreq[1]), TDL_OK, "the small send");
        sreq[1] = NULL;
        st = gfc_request_wait_all(rreq, 2);
        rreq[0] = rreq[1] = NULL;
        if (harness_expect_status(h, st, TDL_OK, "the two receives"))
            for (int t = 0; t < 2; t++)
                harness_expect(h, memcmp(r[t], want[t], len[t]) == 0,
                               "one tag, message %d of %zu bytes: payload differs", t, len[t]);
    }
    for (int t = 0; t < 2; t++) {
        gfc_request_free(rreq[t]);
        gfc_request_free(sreq[t]);
        free(s[t]);
        free(r[t]);
        free(want[t]);
    }
}

/* Messages larger than their receive's room: the receive fails as truncated, naming it; the send
 * completes; and the pair's next message on that tag arrives whole. Rooms of 16 bytes (less than
 * a single copy's descriptor: before the bounce buffer its sender waited for an answer until the
 * timeout) and 1000; messages of 100 bytes (UCX's eager path) and 100000 (a single copy where
 * the mode has it, else UCX's rendezvous). */
static void test_p2p_truncated(harness_t *h, ops_group_t *G)
{
    int n = G->n, me = G->g.me;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    const size_t rooms[2] = {16, 1000}, sizes[2] = {100, 100000};
    for (int ri = 0; ri < 2; ri++)
        for (int si = 0; si < 2; si++) {
            size_t room = rooms[ri], size = sizes[si];
            if (size <= room)
                continue;
            uint64_t key = ops_key(G);
            unsigned char *s = harness_xmalloc(size), *r = harness_xmalloc(size);
            unsigned char *want = harness_xmalloc(size);
            fill(s, size, GFC_DT_BYTE, h->seed, key, G->ranks[me]);
            fill(want, size, GFC_DT_BYTE, h->seed, key, G->ranks[prev]);
            gfc_request_t *sreq = NULL, *rreq = NULL;
            tdl_status_t st = gfc_recv_start(&G->g, prev, 14, r, room, &rreq);
            if (st == TDL_OK)
                st = gfc_send_start(&G->g, next, 14, s, size, &sreq);
            if (harness_expect_status(h, st, TDL_OK, "a send larger than its receive: start")) {
                st = gfc_request_wait(rreq);
                rreq = NULL;
                const char *err = tdl_error_get();
                harness_expect(h, st == TDL_ERR_INVALID_ARG && strstr(err, "truncated") &&
                                      strstr(err, "receive from rank"),
                               "%zu bytes into %zu: status %d, '%s' (want a truncated receive "
                               "naming its rank)",
                               size, room, (int)st, err);
                harness_expect_status(h, gfc_request_wait(sreq), TDL_OK,
                                      "the send of a message its receive truncated");
                sreq = NULL;
                /* the pair's next message on the tag arrives whole */
                size_t got = 0;
                st = gfc_send_start(&G->g, next, 14, s, size, &sreq);
                if (st == TDL_OK)
                    st = gfc_recv(&G->g, prev, 14, r, size, &got);
                if (harness_expect_status(h, st, TDL_OK, "the message after a truncation"))
                    harness_expect(h, got == size && memcmp(r, want, size) == 0,
                                   "after a truncation: %zu of %zu bytes, payload %s", got, size,
                                   got == size && memcmp(r, want, size) == 0 ? "the same"
                                                                             : "differs");
                harness_expect_status(h, gfc_request_wait(sreq), TDL_OK, "its send");
                sreq = NULL;
            }
            gfc_request_free(rreq);
            gfc_request_free(sreq);
            free(s), free(r), free(want);
        }
}

static void test_p2p(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    /* the last: three pieces of a single copy's read (copy.c), the third short */
    static const size_t sizes[] = {0, 1, 8192, (1u << 20) + 3, (17u << 20) + 3};
    int n = G->n, me = G->g.me;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (size_t k = 0; k < TDL_ARRAY_SIZE(sizes); k++) {
        size_t size = sizes[k];
        uint64_t key = ops_key(G);
        unsigned char *s = harness_xmalloc(size), *r = harness_xmalloc(size + 16),
                      *want = harness_xmalloc(size);
        fill(s, size, GFC_DT_BYTE, h->seed, key, G->ranks[me]);
        fill(want, size, GFC_DT_BYTE, h->seed, key, G->ranks[prev]);
        memset(r, 0xee, size + 16);
        gfc_request_t *sreq = NULL;
        tdl_status_t st = gfc_send_start(&G->g, next, 7, s, size, &sreq);
        if (harness_expect_status(h, st, TDL_OK, "gfc_send_start")) {
            size_t got = SIZE_MAX;
            st = gfc_recv(&G->g, prev, 7, r, size + 16, &got);
            if (harness_expect_status(h, st, TDL_OK, "gfc_recv")) {
                harness_expect(h, got == size, "%zu bytes sent, %zu received", size, got);
                harness_expect(h, memcmp(r, want, size) == 0, "%zu bytes: payload differs", size);
                bool tail = true;
                for (size_t i = size; i < size + 16; i++)
                    tail &= r[i] == 0xee;
                harness_expect(h, tail, "%zu bytes: receive wrote past the message", size);
            }
            harness_expect_status(h, gfc_request_wait(sreq), TDL_OK, "send wait");
        }
        free(s);
        free(r);
        free(want);
    }

    /* Two tags, received in the other order than sent, through test/received_bytes/free. */
    uint64_t key = ops_key(G);
    const size_t len[2] = {100, 3000};
    unsigned char *s[2], *r[2], *want[2];
    gfc_request_t *sreq[2] = {NULL, NULL}, *rreq[2] = {NULL, NULL};
    for (int t = 0; t < 2; t++) {
        s[t] = harness_xmalloc(len[t]);
        r[t] = harness_xmalloc(len[t] + 8);
        want[t] = harness_xmalloc(len[t]);
        fill(s[t], len[t], GFC_DT_BYTE, h->seed, key + (uint64_t)t * 7919, G->ranks[me]);
        fill(want[t], len[t], GFC_DT_BYTE, h->seed, key + (uint64_t)t * 7919, G->ranks[prev]);
    }
    tdl_status_t st = gfc_recv_start(&G->g, prev, 12, r[1], len[1] + 8, &rreq[1]);
    if (st == TDL_OK)
        st = gfc_recv_start(&G->g, prev, 11, r[0], len[0] + 8, &rreq[0]);
    if (st == TDL_OK)
        st = gfc_send_start(&G->g, next, 11, s[0], len[0], &sreq[0]);
    if (st == TDL_OK)
        st = gfc_send_start(&G->g, next, 12, s[1], len[1], &sreq[1]);
    if (harness_expect_status(h, st, TDL_OK, "starting two tagged sends and receives")) {
        for (int t = 0; t < 2; t++) {
            bool done;
            st = poll_done(h, rreq[t], &done);
            if (harness_expect_status(h, st, TDL_OK, "gfc_request_test of a receive")) {
                size_t got = gfc_request_received_bytes(rreq[t]);
                harness_expect(h, got == len[t], "tag %d: %zu bytes received, want %zu", 11 + t,
                               got, len[t]);
                harness_expect(h, memcmp(r[t], want[t], len[t]) == 0, "tag %d: payload differs",
                               11 + t);
            }
        }
        harness_expect_status(h, gfc_request_wait_all(sreq, 2), TDL_OK, "send wait_all");
        sreq[0] = sreq[1] = NULL;
    }
    for (int t = 0; t < 2; t++) {
        if (rreq[t])
            gfc_request_free(rreq[t]);
        if (sreq[t])
            gfc_request_free(sreq[t]);
        free(s[t]);
        free(r[t]);
        free(want[t]);
    }
    test_p2p_same_tag(h, G);
    test_p2p_truncated(h, G);
}

/* ---- barrier ------------------------------------------------------------------------------- */

static void test_barrier(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    tdl_rng_t mine;
    tdl_rng_init(&mine, h->seed, 0xba0000ull + (uint64_t)h->rank);
    uint64_t *flags = o->flags ? o->flags + (size_t)G->index * (size_t)h->size : NULL;
    for (uint64_t round = 1; round <= 3; round++) {
        /* one member or another arrives late */
        usleep((useconds_t)tdl_rng_below(&mine, 3000));
        if (flags)
            __atomic_store_n(&flags[h->rank], round, __ATOMIC_SEQ_CST);
        uint64_t seq = G->g.seq;
        tdl_status_t st = gfc_barrier(&G->g);
        if (!harness_expect_status(h, st, TDL_OK, "gfc_barrier"))
            return;
        harness_expect(h, G->g.seq == seq + 1, "seq went from %" PRIu64 " to %" PRIu64, seq,
                       G->g.seq);
        for (int m = 0; flags && m < G->n; m++) {
            uint64_t f = __atomic_load_n(&flags[G->ranks[m]], __ATOMIC_SEQ_CST);
            harness_expect(h, f >= round,
                           "round %" PRIu64 ": left the barrier before member %d (rank %d) "
                           "entered it",
                           round, m, G->ranks[m]);
        }
    }
}

/* ---- data movement ------------------------------------------------------------------------- */

typedef struct move_case {
    gfc_dtype_t dt;
    size_t count;
} move_case_t;

static void test_bcast(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    /* up to 8 KiB from the root to every member (flat); 8196 bytes and 1 MiB down the binomial
     * tree */
    static const move_case_t cases[] = {
        {GFC_DT_BYTE, 0},    {GFC_DT_BYTE, 1},    {GFC_DT_BYTE, 13}, {GFC_DT_BYTE, 8191},
        {GFC_DT_BYTE, 8192}, {GFC_DT_F32, 2049},  {GFC_DT_F32, 1000}, {GFC_DT_I64, 3},
        {GFC_DT_BF16, 5}};
    size_t ncases = TDL_ARRAY_SIZE(cases) + (G->index == 0);
    for (int root = 0; root < G->n; root++) {
        for (size_t c = 0; c < ncases; c++) {
            /* one large broadcast, from the last member of the world group */
            move_case_t mc =
                c < TDL_ARRAY_SIZE(cases) ? cases[c] : (move_case_t){GFC_DT_BYTE, (1u << 20) + 5};
            if (c == TDL_ARRAY_SIZE(cases) && root != G->n - 1)
                continue;
            uint64_t key = ops_key(G);
            size_t bytes = mc.count * dt_sizes[mc.dt];
            unsigned char *buf = harness_xmalloc(bytes), *ref = harness_xmalloc(bytes);
            if (G->g.me == root)
                fill(buf, mc.count, mc.dt, h->seed, key, G->ranks[root]);
            else
                memset(buf, 0x5a, bytes);
            memcpy(ref, buf, bytes);
            tdl_status_t st = gfc_bcast(&G->g, buf, mc.count, mc.dt, root);
            if (harness_expect_status(h, st, TDL_OK, "gfc_bcast") &&
                harness_expect_status(h, mref_bcast(G->ref, ref, mc.count, MDT(mc.dt), root),
                                      TDL_OK, "MPI bcast"))
                harness_expect(h, memcmp(buf, ref, bytes) == 0,
                               "bcast of %zu %s from member %d differs from MPI's", mc.count,
                               dt_names[mc.dt], root);
            free(buf);
            free(ref);
        }
    }
}

static void test_gather(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    static const move_case_t cases[] = {
        {GFC_DT_BYTE, 0}, {GFC_DT_BYTE, 1}, {GFC_DT_BYTE, 100}, {GFC_DT_I32, 37}, {GFC_DT_F16, 9}};
    int roots[3] = {0, G->n - 1, G->n / 2};
    for (int k = 0; k < 3; k++) {
        if ((k == 1 && roots[1] == roots[0]) ||
            (k == 2 && (roots[2] == roots[0] || roots[2] == roots[1])))
            continue;
        int root = roots[k];
        for (size_t c = 0; c < TDL_ARRAY_SIZE(cases); c++) {
            move_case_t mc = cases[c];
            uint64_t key = ops_key(G);
            size_t bytes = mc.count * dt_sizes[mc.dt], all = bytes * (size_t)G->n;
            unsigned char *send = harness_xmalloc(bytes), *copy = harness_xmalloc(bytes);
            unsigned char *recv = harness_xmalloc(all), *ref = harness_xmalloc(all);
            fill(send, mc.count, mc.dt, h->seed, key, G->ranks[G->g.me]);
            memcpy(copy, send, bytes);
            memset(recv, 0x5a, all);
            memset(ref, 0x5a, all);
            tdl_status_t st = gfc_gather(&G->g, send, recv, mc.count, mc.dt, root);
            if (harness_expect_status(h, st, TDL_OK, "gfc_gather") &&
                harness_expect_status(h, mref_gather(G->ref, send, ref, mc.count, MDT(mc.dt), root),
                                      TDL_OK, "MPI gather") &&
                G->g.me == root)
                harness_expect(h, memcmp(recv, ref, all) == 0,
                               "gather of %zu %s to member %d differs from MPI's", mc.count,
                               dt_names[mc.dt], root);
            harness_expect(h, memcmp(send, copy, bytes) == 0, "gather changed its send buffer");
            free(send);
            free(copy);
            free(recv);
            free(ref);
        }
    }
}

static void test_allgather(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    static const move_case_t cases[] = {{GFC_DT_BYTE, 0}, {GFC_DT_BYTE, 1}, {GFC_DT_BYTE, 257},
                                        {GFC_DT_F16, 5},  {GFC_DT_I64, 3},  {GFC_DT_F32, 1031}};
    for (size_t c = 0; c < TDL_ARRAY_SIZE(cases); c++) {
        move_case_t mc = cases[c];
        uint64_t key = ops_key(G);
        size_t bytes = mc.count * dt_sizes[mc.dt], all = bytes * (size_t)G->n;
        unsigned char *send = harness_xmalloc(bytes), *recv = harness_xmalloc(all),
                      *ref = harness_xmalloc(all);
        fill(send, mc.count, mc.dt, h->seed, key, G->ranks[G->g.me]);
        memset(recv, 0x5a, all);
        memset(ref, 0x5a, all);
        tdl_status_t st = gfc_allgather(&G->g, send, recv, mc.count, mc.dt);
        if (harness_expect_status(h, st, TDL_OK, "gfc_allgather") &&
            harness_expect_status(h, mref_allgather(G->ref, send, ref, mc.count, MDT(mc.dt)),
                                  TDL_OK, "MPI allgather"))
            harness_expect(h, memcmp(recv, ref, all) == 0, "allgather of %zu %s differs from MPI's",
                           mc.count, dt_names[mc.dt]);
        free(send);
        free(recv);
        free(ref);
    }
}

/* Counts and displacements of member i's block for the v-collectives: pattern 0 has zeros and
 * gaps, blocks in reverse order; pattern 1 has only member 0 empty, packed in order; pattern 2
 * is empty everywhere. Returns the buffer length in elements. */
static size_t v_layout(const ops_group_t *G, int pattern, uint64_t key, size_t *counts,
                       size_t *displs)
{
    size_t at = 0;
    for (int k = 0; k < G->n; k++) {
        int i = pattern == 0 ? G->n - 1 - k : k;
        if (pattern == 0)
            counts[i] = (size_t)((G->ranks[i] * 7 + (int)(key % 5)) % 5) * 3;
        else if (pattern == 1)
            counts[i] = i == 0 ? 0 : (size_t)(i * i + 1);
        else
            counts[i] = 0;
        displs[i] = at;
        at += counts[i] + (pattern == 0 ? 2 : 0);
    }
    return at;
}

static void test_allgatherv(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    static const gfc_dtype_t dts[] = {GFC_DT_BYTE, GFC_DT_I32};
    size_t *counts = harness_xmalloc((size_t)G->n * sizeof(size_t));
    size_t *displs = harness_xmalloc((size_t)G->n * sizeof(size_t));
    for (int pattern = 0; pattern < 3; pattern++) {
        for (size_t d = 0; d < TDL_ARRAY_SIZE(dts); d++) {
            gfc_dtype_t dt = dts[d];
            uint64_t key = ops_key(G);
            size_t total = v_layout(G, pattern, key, counts, displs) * dt_sizes[dt];
            size_t mine = counts[G->g.me];
            unsigned char *send = harness_xmalloc(mine * dt_sizes[dt]);
            unsigned char *recv = harness_xmalloc(total), *ref = harness_xmalloc(total);
            fill(send, mine, dt, h->seed, key, G->ranks[G->g.me]);
            memset(recv, 0x5a, total);
            memset(ref, 0x5a, total);
            tdl_status_t st = gfc_allgatherv(&G->g, send, recv, counts, displs, dt);
            if (harness_expect_status(h, st, TDL_OK, "gfc_allgatherv") &&
                harness_expect_status(h,
                                      mref_allgatherv(G->ref, send, ref, counts, displs, MDT(dt)),
                                      TDL_OK, "MPI allgatherv"))
                harness_expect(h, memcmp(recv, ref, total) == 0,
                               "allgatherv pattern %d of %s differs from MPI's (gaps included)",
                               pattern, dt_names[dt]);
            free(send);
            free(recv);
            free(ref);
        }
    }
    free(counts);
    free(displs);
}

static void test_alltoall(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    static const move_case_t cases[] = {{GFC_DT_BYTE, 0},  {GFC_DT_BYTE, 1}, {GFC_DT_BYTE, 33},
                                        {GFC_DT_I32, 17},  {GFC_DT_I64, 1},  {GFC_DT_BF16, 4},
                                        {GFC_DT_F32, 2053}};
    for (size_t c = 0; c < TDL_ARRAY_SIZE(cases); c++) {
        move_case_t mc = cases[c];
        uint64_t key = ops_key(G);
        size_t all = mc.count * dt_sizes[mc.dt] * (size_t)G->n;
        unsigned char *send = harness_xmalloc(all), *copy = harness_xmalloc(all);
        unsigned char *recv = harness_xmalloc(all), *ref = harness_xmalloc(all);
        fill(send, mc.count * (size_t)G->n, mc.dt, h->seed, key, G->ranks[G->g.me]);
        memcpy(copy, send, all);
        memset(recv, 0x5a, all);
        memset(ref, 0x5a, all);
        tdl_status_t st = gfc_alltoall(&G->g, send, recv, mc.count, mc.dt);
        if (harness_expect_status(h, st, TDL_OK, "gfc_alltoall") &&
            harness_expect_status(h, mref_alltoall(G->ref, send, ref, mc.count, MDT(mc.dt)), TDL_OK,
                                  "MPI alltoall"))
            harness_expect(h, memcmp(recv, ref, all) == 0, "alltoall of %zu %s differs from MPI's",
                           mc.count, dt_names[mc.dt]);
        harness_expect(h, memcmp(send, copy, all) == 0, "alltoall changed its send buffer");
        free(send);
        free(copy);
        free(recv);
        free(ref);
    }
}

/* Elements member i sends member j in alltoallv pattern p (zeros included). */
static size_t v_count(int p, int wi, int wj)
{
    if (p == 0)
        return (size_t)((wi * 3 + wj * 5 + 1) % 4) * 5;
    return wi == wj ? 0 : (size_t)(wi + 2 * wj + 1);
}

static void test_alltoallv(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    int n = G->n, me = G->g.me;
    size_t *sc = harness_xmalloc((size_t)n * sizeof(size_t)),
           *sd = harness_xmalloc((size_t)n * sizeof(size_t));
    size_t *rc = harness_xmalloc((size_t)n * sizeof(size_t)),
           *rd = harness_xmalloc((size_t)n * sizeof(size_t));
    static const gfc_dtype_t dts[] = {GFC_DT_BYTE, GFC_DT_I64};
    for (int p = 0; p < 2; p++) {
        for (size_t d = 0; d < TDL_ARRAY_SIZE(dts); d++) {
            gfc_dtype_t dt = dts[d];
            size_t es = dt_sizes[dt];
            uint64_t key = ops_key(G);
            /* send blocks in reverse order with a gap of 1; receive blocks in order, gap 3 */
            size_t sat = 0, rat = 0;
            for (int k = n - 1; k >= 0; k--) {
                sc[k] = v_count(p, G->ranks[me], G->ranks[k]);
                sd[k] = sat;
                sat += sc[k] + 1;
            }
            for (int k = 0; k < n; k++) {
                rc[k] = v_count(p, G->ranks[k], G->ranks[me]);
                rd[k] = rat;
                rat += rc[k] + 3;
            }
            unsigned char *send = harness_xmalloc(sat * es), *recv = harness_xmalloc(rat * es);
            unsigned char *ref = harness_xmalloc(rat * es);
            fill(send, sat, dt, h->seed, key, G->ranks[me]);
            memset(recv, 0x5a, rat * es);
            memset(ref, 0x5a, rat * es);
            tdl_status_t st = gfc_alltoallv(&G->g, send, sc, sd, recv, rc, rd, dt);
            if (harness_expect_status(h, st, TDL_OK, "gfc_alltoallv") &&
                harness_expect_status(h, mref_alltoallv(G->ref, send, sc, sd, ref, rc, rd, MDT(dt)),
                                      TDL_OK, "MPI alltoallv"))
                harness_expect(h, memcmp(recv, ref, rat * es) == 0,
                               "alltoallv pattern %d of %s differs from MPI's (gaps included)", p,
                               dt_names[dt]);
            free(send);
            free(recv);
            free(ref);
        }
    }
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

/* ---- reductions ---------------------------------------------------------------------------- */

static void test_reduce_scatter(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    static const size_t counts[] = {0, 1, 7, 100};
    int n = G->n;
    for (size_t d = 0; d < TDL_ARRAY_SIZE(reduce_dtypes); d++) {
        gfc_dtype_t dt = reduce_dtypes[d];
        for (int op = 0; op < GFC_OP_COUNT; op++) {
            for (size_t c = 0; c < TDL_ARRAY_SIZE(counts); c++) {
                size_t count = counts[c], total = count * (size_t)n, es = dt_sizes[dt];
                uint64_t key = ops_key(G);
                unsigned char *send = harness_xmalloc(total * es),
                              *recv = harness_xmalloc(count * es);
                unsigned char *ref = harness_xmalloc(count * es);
                fill(send, total, dt, h->seed, key, G->ranks[G->g.me]);
                memset(recv, 0x5a, count * es);
                tdl_status_t st = gfc_reduce_scatter(&G->g, send, recv, count, dt, (gfc_redop_t)op);
                char what[96];
                snprintf(what, sizeof(what), "reduce_scatter %s %s x%zu", dt_names[dt],
                         op_names[op], count);
                if (harness_expect_status(h, st, TDL_OK, what) &&
                    harness_expect_status(
                        h, mref_reduce_scatter_block(G->ref, send, ref, count, MDT(dt), MOP(op)),
                        TDL_OK, "MPI reduce_scatter_block")) {
                    double *sa = op == GFC_OP_SUM ? sumabs_new(h, G, key, dt, total,
                                                               (size_t)G->g.me * count, count)
                                                  : NULL;
                    check_reduction(h, what, recv, ref, count, dt, (gfc_redop_t)op, n, sa);
                    free(sa);
                }
                free(send);
                free(recv);
                free(ref);
            }
        }
    }
}

/* One all-reduce case against MPI; its result hash joins the batch. */
static void allreduce_case(ops_t *o, ops_group_t *G, gfc_allreduce_algo_t algo, gfc_dtype_t dt,
                           gfc_redop_t op, size_t count, bool in_place, hash_batch_t *batch)
{
    harness_t *h = o->h;
    size_t es = dt_sizes[dt];
    uint64_t key = ops_key(G);
    unsigned char *send = harness_xmalloc(count * es), *recv = harness_xmalloc(count * es);
    unsigned char *ref = harness_xmalloc(count * es);
    fill(send, count, dt, h->seed, key, G->ranks[G->g.me]);
    uint64_t send_hash = harness_hash(send, count * es);
    memset(recv, 0xff, count * es);
    if (in_place)
        memcpy(recv, send, count * es);
    gfc_allreduce_opts_t opts = {.algo = algo, .codec = NULL};
    char what[128];
    snprintf(what, sizeof(what), "allreduce %s %s %s x%zu%s", algo_names[algo], dt_names[dt],
             op_names[op], count, in_place ? " in place" : "");
    tdl_status_t st = gfc_allreduce(&G->g, in_place ? recv : send, recv, count, dt, op, &opts);
    if (harness_expect_status(h, st, TDL_OK, what) &&
        harness_expect_status(h, mref_allreduce(G->ref, send, ref, count, MDT(dt), MOP(op)), TDL_OK,
                              "MPI allreduce")) {
        double *sa = op == GFC_OP_SUM ? sumabs_new(h, G, key, dt, count, 0, count) : NULL;
        check_reduction(h, what, recv, ref, count, dt, op, G->n, sa);
        free(sa);
        harness_expect(h, harness_hash(send, count * es) == send_hash, "%s changed its send buffer",
                       what);
    }
    batch_add(batch, recv, count * es, "%s", what);
    free(send);
    free(recv);
    free(ref);
}

static void test_allreduce(ops_t *o, ops_group_t *G, gfc_allreduce_algo_t algo)
{
    static const size_t full_counts[] = {0, 1, 2, 7, 31, 1000, 4099};
    static const size_t quick_counts[] = {1, 13, 1000};
    const size_t *counts = G->full ? full_counts : quick_counts;
    size_t ncounts = G->full ? TDL_ARRAY_SIZE(full_counts) : TDL_ARRAY_SIZE(quick_counts);
    hash_batch_t batch = {0};
    for (size_t d = 0; d < TDL_ARRAY_SIZE(reduce_dtypes); d++)
        for (int op = 0; op < GFC_OP_COUNT; op++)
            for (size_t c = 0; c < ncounts; c++)
                allreduce_case(o, G, algo, reduce_dtypes[d], (gfc_redop_t)op, counts[c], false,
                               &batch);
    allreduce_case(o, G, algo, GFC_DT_F32, GFC_OP_SUM, 1009, true, &batch);
    allreduce_case(o, G, algo, GFC_DT_I32, GFC_OP_MAX, 7, true, &batch);
    if (G->index == 0)
        allreduce_case(o, G, algo, GFC_DT_F32, GFC_OP_SUM, (1u << 20) + 3, false, &batch);
    else if (G->full && !o->quick)
        allreduce_case(o, G, algo, GFC_DT_F32, GFC_OP_SUM, 100003, false, &batch);
    batch_check(o->h, G, &batch);
}

static void test_allreduce_bytes(ops_t *o, ops_group_t *G)
{
    hash_batch_t batch = {0};
    for (int op = GFC_OP_MAX; op <= GFC_OP_MIN; op++)
        allreduce_case(o, G, GFC_ALLREDUCE_AUTO, GFC_DT_BYTE, (gfc_redop_t)op, 301, false, &batch);
    batch_check(o->h, G, &batch);
}

/* ---- the codec hook ------------------------------------------------------------------------ */

#define CODEC_MAGIC 0x7e57c0dcu

/* A codec under test records what gfc passed it. */
typedef struct test_codec {
    bool lossy;
    bool hier;           /* hier: a first encoding may already sum a host's members */
    int world_rank;
    int group_size;
    uint64_t group_id;
    uint64_t seq_lo, seq_hi;
    long encodes;
    int max_contributions;
    long bad;
    char first_bad[160];
} test_codec_t;

static size_t codec_elem_bytes(const test_codec_t *c)
{
    return c->lossy ? 2 : 4;
}

static void codec_bad(test_codec_t *c, const char *what)
{
    if (c->bad++ == 0)
        snprintf(c->first_bad, sizeof(c->first_bad), "%s", what);
}

static size_t codec_max_encoded_bytes(void *ctx, size_t n)
{
    return 8 + n * codec_elem_bytes(ctx);
}

static void codec_check_hop(test_codec_t *c, const gfc_codec_hop_t *hop, bool accumulating)
{
    char msg[160];
    c->encodes++;
    if (hop->contributions > c->max_contributions)
        c->max_contributions = hop->contributions;
    if (hop->rank != c->world_rank || hop->group_size != c->group_size ||
        hop->group_id != c->group_id || hop->seq < c->seq_lo || hop->seq > c->seq_hi ||
        hop->hop < 0 || hop->contributions < 1 || hop->contributions > c->group_size ||
        (hop->hop == 0 && hop->contributions != 1 && !c->hier) ||
        (accumulating && (hop->hop < 1 || hop->contributions < 2))) {
        snprintf(msg, sizeof(msg),
                 "%s: rank %d hop %d contributions %d group_size %d seq %" PRIu64
                 " (want rank %d, size %d, seq %" PRIu64 "..%" PRIu64 ", id %s)",
                 accumulating ? "decode_accumulate_encode" : "encode", hop->rank, hop->hop,
                 hop->contributions, hop->group_size, hop->seq, c->world_rank, c->group_size,
                 c->seq_lo, c->seq_hi, hop->group_id == c->group_id ? "ok" : "wrong");
        codec_bad(c, msg);
    }
}

static void codec_put(test_codec_t *c, unsigned char *out, size_t i, float v)
{
    if (c->lossy) {
        uint16_t b = tdl_bf16_from_f32(v);
        memcpy(out + 8 + 2 * i, &b, 2);
    } else {
        memcpy(out + 8 + 4 * i, &v, 4);
    }
}

static float codec_get(const test_codec_t *c, const unsigned char *in, size_t i)
{
    if (c->lossy) {
        uint16_t b;
        memcpy(&b, in + 8 + 2 * i, 2);
        return tdl_bf16_to_f32(b);
    }
    float v;
    memcpy(&v, in + 8 + 4 * i, 4);
    return v;
}

static void codec_header(unsigned char *out, size_t n)
{
    uint32_t hdr[2] = {CODEC_MAGIC, (uint32_t)n};
    memcpy(out, hdr, 8);
}

static tdl_status_t codec_check_in(test_codec_t *c, const void *in, size_t in_bytes, size_t n)
{
    uint32_t hdr[2];
    if (in_bytes != 8 + n * codec_elem_bytes(c)) {
        codec_bad(c, "decode: in_bytes does not match n");
        return tdl_error_raise(TDL_ERR_CORRUPT, "test codec: %zu bytes for %zu values", in_bytes,
                               n);
    }
    memcpy(hdr, in, 8);
    if (hdr[0] != CODEC_MAGIC || hdr[1] != (uint32_t)n) {
        codec_bad(c, "decode: header damaged or for another n");
        return tdl_error_raise(TDL_ERR_CORRUPT, "test codec: bad header");
    }
    return TDL_OK;
}

static tdl_status_t codec_encode(void *ctx, const gfc_codec_hop_t *hop, const float *in, size_t n,
                                 void *out, size_t *out_bytes)
{
    test_codec_t *c = ctx;
    codec_check_hop(c, hop, false);
    codec_header(out, n);
    for (size_t i = 0; i < n; i++)
        codec_put(c, out, i, in[i]);
    *out_bytes = 8 + n * codec_elem_bytes(c);
    return TDL_OK;
}

static tdl_status_t codec_decode(void *ctx, const void *in, size_t in_bytes, float *out, size_t n)
{
    test_codec_t *c = ctx;
    tdl_status_t st = codec_check_in(c, in, in_bytes, n);
    for (size_t i = 0; st == TDL_OK && i < n; i++)
        out[i] = codec_get(c, in, i);
    return st;
}

static tdl_status_t codec_decode_accumulate_encode(void *ctx, const gfc_codec_hop_t *hop,
                                                   const void *in, size_t in_bytes,
                                                   const float *local, size_t n, void *out,
                                                   size_t *out_bytes)
{
    test_codec_t *c = ctx;
    tdl_status_t st = codec_check_in(c, in, in_bytes, n);
    if (st != TDL_OK)
        return st;
    codec_check_hop(c, hop, true);
    /* element by element, so that out may be in */
    for (size_t i = 0; i < n; i++)
        codec_put(c, out, i, local[i] + codec_get(c, in, i));
    codec_header(out, n);
    *out_bytes = 8 + n * codec_elem_bytes(c);
    return TDL_OK;
}

static tdl_status_t codec_decode_accumulate(void *ctx, const void *in, size_t in_bytes, float *acc,
                                            size_t n)
{
    test_codec_t *c = ctx;
    tdl_status_t st = codec_check_in(c, in, in_bytes, n);
    for (size_t i = 0; st == TDL_OK && i < n; i++)
        acc[i] += codec_get(c, in, i);
    return st;
}

static const gfc_codec_ops_t test_codec_ops = {
    .name = "test",
    .max_encoded_bytes = codec_max_encoded_bytes,
    .encode = codec_encode,
    .decode = codec_decode,
    .decode_accumulate_encode = codec_decode_accumulate_encode,
    .decode_accumulate = codec_decode_accumulate,
};

static void codec_arm(test_codec_t *c, const harness_t *h, const ops_group_t *G, bool lossy,
                      gfc_allreduce_algo_t algo)
{
    memset(c, 0, sizeof(*c));
    c->lossy = lossy;
    c->hier = algo == GFC_ALLREDUCE_HIER || algo == GFC_ALLREDUCE_AUTO;
    c->world_rank = h->rank;
    c->group_size = G->n;
    c->group_id = G->g.id;
    c->seq_lo = G->g.seq;
    c->seq_hi = G->g.seq + 1;
}

/* Every call sane; and for n >= 2 some member encoded the full sum (the final chunk every
 * member decodes), which only its owner does; but hier on one host encodes nothing. */
static void codec_verdict(harness_t *h, ops_group_t *G, const test_codec_t *c, const char *what,
                          size_t count, gfc_allreduce_algo_t algo)
{
    bool encodes = algo != GFC_ALLREDUCE_HIER || gfc_group_hosts(&G->g, NULL) > 1;
    harness_expect(h, c->bad == 0, "%s: %ld bad codec call(s), first: %s", what, c->bad,
                   c->first_bad);
    int64_t mine = c->max_contributions, *all = harness_xmalloc((size_t)G->n * sizeof(int64_t));
    if (harness_expect_status(h, mref_allgather(G->ref, &mine, all, 1, MREF_DT_I64), TDL_OK,
                              "MPI all-gather of contributions")) {
        int64_t most = 0;
        for (int m = 0; m < G->n; m++)
            most = all[m] > most ? all[m] : most;
        if (G->n >= 2 && count > 0 && encodes)
            harness_expect(h, most == G->n,
                           "%s: no member encoded a sum of all %d contributions (at most %" PRId64
                           ")",
                           what, G->n, most);
    }
    free(all);
}

static void test_codec(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    static const gfc_allreduce_algo_t algos[] = {GFC_ALLREDUCE_RING, GFC_ALLREDUCE_BUTTERFLY,
                                                 GFC_ALLREDUCE_HIER, GFC_ALLREDUCE_AUTO};
    static const size_t counts[] = {1, 7, 1000, 4099, 100003};
    size_t ncounts = TDL_ARRAY_SIZE(counts) - (G->index != 0);
    int n = G->n;
    hash_batch_t batch = {0};
    test_codec_t lossless, lossy;
    gfc_codec_t c_lossless = {&test_codec_ops, &lossless}, c_lossy = {&test_codec_ops, &lossy};
    for (size_t a = 0; a < TDL_ARRAY_SIZE(algos); a++) {
        gfc_allreduce_algo_t algo = algos[a];
        for (size_t c = 0; c < ncounts; c++) {
            size_t count = counts[c], bytes = count * 4;
            uint64_t key = ops_key(G);
            float *send = harness_xmalloc(bytes), *plain = harness_xmalloc(bytes),
                  *exact = harness_xmalloc(bytes);
            float *r_lossless = harness_xmalloc(bytes), *r_lossy = harness_xmalloc(bytes);
            fill(send, count, GFC_DT_F32, h->seed, key, G->ranks[G->g.me]);
            char what[96];
            snprintf(what, sizeof(what), "codec %s x%zu", algo_names[algo], count);
            gfc_allreduce_opts_t opts = {.algo = algo, .codec = NULL};
            tdl_status_t st =
                gfc_allreduce(&G->g, send, plain, count, GFC_DT_F32, GFC_OP_SUM, &opts);
            harness_expect_status(h, st, TDL_OK, "allreduce without codec");

            codec_arm(&lossless, h, G, false, algo);
            opts.codec = &c_lossless;
            st = gfc_allreduce(&G->g, send, r_lossless, count, GFC_DT_F32, GFC_OP_SUM, &opts);
            if (harness_expect_status(h, st, TDL_OK, "allreduce with a lossless codec")) {
                codec_verdict(h, G, &lossless, "lossless codec", count, algo);
                if (algo != GFC_ALLREDUCE_AUTO)
                    harness_expect(h, memcmp(plain, r_lossless, bytes) == 0,
                                   "%s: lossless codec result differs from the same algorithm "
                                   "without codec",
                                   what);
                batch_add(&batch, r_lossless, bytes, "%s lossless", what);
            }

            codec_arm(&lossy, h, G, true, algo);
            opts.codec = &c_lossy;
            st = gfc_allreduce(&G->g, send, r_lossy, count, GFC_DT_F32, GFC_OP_SUM, &opts);
            if (harness_expect_status(h, st, TDL_OK, "allreduce with a lossy codec") &&
                harness_expect_status(
                    h, mref_allreduce(G->ref, send, exact, count, MREF_DT_F32, MREF_OP_SUM), TDL_OK,
                    "MPI allreduce")) {
                codec_verdict(h, G, &lossy, "lossy codec", count, algo);
                double *sa = sumabs_new(h, G, key, GFC_DT_F32, count, 0, count);
                for (size_t i = 0; i < count; i++) {
                    double tol = (n + 2) * 0x1p-8 * sa[i] + 0x1p-126;
                    if (fabs((double)r_lossy[i] - exact[i]) > tol) {
                        harness_fail(h, "%s lossy: element %zu: got %.9g, exact %.9g, tol %.3g",
                                     what, i, r_lossy[i], exact[i], tol);
                        break;
                    }
                }
                free(sa);
                batch_add(&batch, r_lossy, bytes, "%s lossy", what);
            }
            free(send);
            free(plain);
            free(exact);
            free(r_lossless);
            free(r_lossy);
        }
    }
    batch_check(h, G, &batch);
}

/* A codec with anything but an f32 sum by ring or butterfly is refused: every member makes
 * the same wrong call, on a value of its own. */
static void test_codec_refusals(ops_t *o, ops_group_t *G)
{
    harness_t *h = o->h;
    gfc_group_t g;
    if (!harness_expect_status(h, gfc_group_init(&g, h->rt, G->ranks, G->n, 9000 + G->index),
                               TDL_OK, "group for codec refusals"))
        return;
    test_codec_t lossless;
    codec_arm(&lossless, h, G, false, GFC_ALLREDUCE_RING);
    gfc_codec_t codec = {&test_codec_ops, &lossless};
    float fin[8] = {1, 2, 3, 4, 5, 6, 7, 8}, fout[8];
    int32_t iin[8] = {1, 2, 3, 4, 5, 6, 7, 8}, iout[8];
    gfc_allreduce_opts_t opts = {.algo = GFC_ALLREDUCE_RING, .codec = &codec};
    tdl_status_t st = gfc_allreduce(&g, iin, iout, 8, GFC_DT_I32, GFC_OP_SUM, &opts);
    harness_expect(h, st != TDL_OK, "codec with an i32 sum was accepted");
    st = gfc_allreduce(&g, fin, fout, 8, GFC_DT_F32, GFC_OP_MAX, &opts);
    harness_expect(h, st != TDL_OK, "codec with an f32 max was accepted");
    opts.algo = GFC_ALLREDUCE_RECURSIVE_DOUBLING;
    st = gfc_allreduce(&g, fin, fout, 8, GFC_DT_F32, GFC_OP_SUM, &opts);
    harness_expect(h, st != TDL_OK, "codec with recursive doubling was accepted");
}

/* ---- the groups ---------------------------------------------------------------------------- */

static void add_group(ops_t *o, const int *ranks, int n, const char *kind, bool full)
{
    harness_t *h = o->h;
    ops_group_t *G = &o->groups[o->ngroups];
    memset(G, 0, sizeof(*G));
    G->ranks = harness_xmalloc((size_t)n * sizeof(int));
    memcpy(G->ranks, ranks, (size_t)n * sizeof(int));
    G->n = n;
    G->index = o->ngroups++;
    G->full = full;
    snprintf(G->kind, sizeof(G->kind), "%s", kind);
    harness_ranks_str(ranks, n, G->str, sizeof(G->str));
    G->member = harness_index_of(ranks, n, h->rank) >= 0;
}

static void build_groups(ops_t *o)
{
    harness_t *h = o->h;
    int W = h->size;
    int *ranks = harness_xmalloc((size_t)W * sizeof(int));
    tdl_rng_t rng;
    harness_rng(h, 1, &rng);
    o->groups = calloc(8, sizeof(ops_group_t));

    for (int r = 0; r < W; r++)
        ranks[r] = r;
    add_group(o, ranks, W, "world", true);
    harness_shuffle(&rng, ranks, W);
    add_group(o, ranks, W, "world, random order", false);
    ranks[0] = h->rank;
    add_group(o, ranks, 1, "self", false); /* a different group on every rank */
    if (W >= 3) {
        int n = (W & (W - 1)) == 0 ? W - 1 : W; /* not a power of two */
        harness_random_group(&rng, W, n, n, ranks);
        add_group(o, ranks, n, "non-power-of-two", true);
    }
    for (int k = 0; k < 2; k++) {
        int n = harness_random_group(&rng, W, 2, W, ranks);
        add_group(o, ranks, n, "random", false);
    }
    free(ranks);
}

/* The node-wide flags the barrier check reads; NULL where ranks span nodes. */
static void map_flags(ops_t *o)
{
    harness_t *h = o->h;
    if (h->boot.local_size != h->size) {
        harness_diag(h, "ranks span nodes: barrier ordering is not checked");
        return;
    }
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/tidal-gfc-ops-%016" PRIx64, h->seed);
    o->flags_bytes = (size_t)o->ngroups * (size_t)h->size * sizeof(uint64_t);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    int64_t bad = fd < 0 || ftruncate(fd, (off_t)o->flags_bytes) != 0;
    void *p = MAP_FAILED;
    if (!bad)
        p = mmap(NULL, o->flags_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    bad |= p == MAP_FAILED;
    if (fd >= 0)
        close(fd);
    mref_world_allreduce_i64(&bad, MREF_OP_SUM);
    if (h->rank == 0)
        unlink(path);
    if (bad) {
        harness_diag(h, "no shared memory at %s: barrier ordering is not checked", path);
        if (p != MAP_FAILED)
            munmap(p, o->flags_bytes);
        return;
    }
    o->flags = p;
}

static void open_groups(ops_t *o)
{
    harness_t *h = o->h;
    /* MPI communicators first, in the same order everywhere, before any gfc traffic */
    for (int i = 0; i < o->ngroups; i++) {
        ops_group_t *G = &o->groups[i];
        if (!G->member)
            continue;
        harness_expect_status(h, mref_comm_open(G->ranks, G->n, &G->ref), TDL_OK,
                              "MPI_Comm_create_group");
        harness_expect_status(h, gfc_group_init(&G->g, h->rt, G->ranks, G->n, 100 + (uint64_t)i),
                              TDL_OK, "gfc_group_init");
    }
    harness_point(h, "%d groups formed, MPI communicators opened", o->ngroups);
}

typedef void (*ops_test_fn)(ops_t *o, ops_group_t *G);

static void run_on_groups(ops_t *o, ops_test_fn fn, const char *what)
{
    for (int i = 0; i < o->ngroups; i++) {
        ops_group_t *G = &o->groups[i];
        if (G->member && G->ref)
            fn(o, G);
        harness_point(o->h, "%s on %s %s", what, G->kind,
                      strcmp(G->kind, "self") == 0 ? "(each rank alone)" : G->str);
    }
}

static void run_allreduce(ops_t *o, gfc_allreduce_algo_t algo)
{
    for (int i = 0; i < o->ngroups; i++) {
        ops_group_t *G = &o->groups[i];
        if (G->member && G->ref)
            test_allreduce(o, G, algo);
        harness_point(o->h,
                      "allreduce %s on %s %s: f32/bf16/f16/i32/i64 x sum/max/min x %s, "
                      "in place, bit-identical on all members",
                      algo_names[algo], G->kind,
                      strcmp(G->kind, "self") == 0 ? "(each rank alone)" : G->str,
                      G->full ? "counts 0..4099" : "counts 1, 13, 1000");
    }
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 0) != TDL_OK)
        return 1;
    ops_t o = {.h = &h};
    const char *quick = getenv("TIDAL_GFC_TEST_QUICK");
    o.quick = quick ? atoi(quick) != 0 : h.size > 4;

    test_group_init(&o);
    build_groups(&o);
    map_flags(&o);
    open_groups(&o);

    run_on_groups(&o, test_p2p, "send/recv ring of 0, 1, 8 KiB, 1 and 17 MiB+3 bytes; tags out of "
                                "order; two messages on one tag");
    run_on_groups(&o, test_barrier, "barrier x3: nobody leaves before every member entered");
    run_on_groups(&o, test_bcast, "bcast from every root");
    run_on_groups(&o, test_gather, "gather to first, middle, last member");
    run_on_groups(&o, test_allgather, "allgather");
    run_on_groups(&o, test_allgatherv, "allgatherv with empty blocks, gaps, reversed order");
    run_on_groups(&o, test_alltoall, "alltoall");
    run_on_groups(&o, test_alltoallv, "alltoallv with empty blocks and gaps");
    run_on_groups(&o, test_reduce_scatter,
                  "reduce_scatter f32/bf16/f16/i32/i64 x sum/max/min x counts 0, 1, 7, 100");
    for (int a = GFC_ALLREDUCE_AUTO; a < GFC_ALLREDUCE_COUNT; a++)
        run_allreduce(&o, (gfc_allreduce_algo_t)a);
    if (o.groups[0].member)
        test_allreduce_bytes(&o, &o.groups[0]);
    harness_point(&h, "allreduce of bytes, max and min (unsigned, as MPI_UINT8_T)");
    run_on_groups(&o, test_codec,
                  "codec hook: lossless = no codec bit for bit (ring, butterfly, hier), lossy bf16 "
                  "within tolerance and identical everywhere, hop fields sane");
    if (o.groups[0].member)
        test_codec_refusals(&o, &o.groups[0]);
    harness_point(&h, "a codec with an i32 sum, an f32 max or recursive doubling is refused");

    /* Nothing left in flight. */
    mref_world_barrier();
    gfc_stats_t stats;
    gfc_runtime_stats(h.rt, &stats);
    harness_expect(&h, stats.requests_live == 0 && stats.ucx_requests_live == 0,
                   "%zu gfc and %zu UCX requests live at the end", stats.requests_live,
                   stats.ucx_requests_live);
    harness_expect(&h, stats.collectives > 0 && stats.bytes_sent > 0,
                   "stats count no traffic: %" PRIu64 " collectives, %" PRIu64 " bytes",
                   stats.collectives, stats.bytes_sent);
    harness_point(&h, "no request live at the end; stats count collectives and bytes");
    /* TIDAL_TEST_SINGLE_COPY=read|fallback|none: which way large messages within the host
     * went, over the world (the results above were checked either way) */
    const char *want = getenv("TIDAL_TEST_SINGLE_COPY");
    if (want && *want) {
        int64_t n[2] = {(int64_t)stats.single_copies, (int64_t)stats.single_copy_fallbacks};
        mref_world_allreduce_i64(&n[0], MREF_OP_SUM);
        mref_world_allreduce_i64(&n[1], MREF_OP_SUM);
        bool ok = !strcmp(want, "read")       ? n[0] > 0 && n[1] == 0
                  : !strcmp(want, "fallback") ? n[0] == 0 && n[1] > 0
                                              : n[0] == 0 && n[1] == 0;
        harness_expect(&h, ok, "single copies %" PRId64 ", fallbacks %" PRId64 " (wanted %s)",
                       n[0], n[1], want);
        harness_point(&h, "large messages within the host went by single copy as set (%s)",
                      want);
    }
    /* every rank sent to itself in the send/recv ring of its own group */
    harness_expect(&h, stats.endpoints <= (size_t)h.size - 1, "%zu endpoints for %d ranks",
                   stats.endpoints, h.size);
    harness_point(&h, "endpoints <= world - 1 (gfc_stats_t), also after sends to oneself");

    for (int i = 0; i < o.ngroups; i++) {
        mref_comm_close(o.groups[i].ref);
        free(o.groups[i].ranks);
    }
    free(o.groups);
    if (o.flags)
        munmap(o.flags, o.flags_bytes);
    return harness_finish(&h);
}
