/* Hierarchical all-reduce ("hier"): full precision within a host, the codec only between hosts.
 *
 * The group's members are grouped by host (gfc_topo_of: hosts in the order of their first
 * member, members in group order within a host). With S the most members on one host, the vector
 * is cut into P pieces (gfc-hier-piece) and each piece into S shards, the regions. On a host of L
 * members, local member j owns the shards s with s mod L == j (on the largest hosts one shard
 * each; on a smaller host some members own several), so every region has exactly one owner on
 * every host. Then, region by region:
 *
 *   1. reduce-scatter within the host: every member sends each region it does not own, in
 *      chunks, to its owner, which sums its own values and the others' in f32 (or the type's
 *      own arithmetic), in a fixed order: its own first, then the others in local order;
 *   2. between hosts: the owners of the region on every host, one per host in host order (a
 *      rail), run the ring all-reduce on the host sums, with the codec if there is one; the rail
 *      of shard s has the same members for every piece, and the rails of one member run at once;
 *   3. all-gather within the host: as each chunk's final value is known on its owner (the ring's
 *      tap), the owner sends it to the host's other members: with a codec the final encoding
 *      itself, which they decode, as the ring's members do, without a codec the values.
 *
 * The final encodings are made once, by the ring member that owns each block, and every member
 * of every host decodes those same bytes (or receives copies of the same values): every member
 * ends with bit-identical results. Pieces pipeline the phases: the rails of piece 0 run while
 * piece 1 is summed within the host.
 *
 * With one member per host this is the ring; on one host, the reduce-scatter and all-gather
 * alone, exact even with a codec (there is no slow wire to spare). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gfc/gfc_internal.h"

#define HIER_MAX_PIECES    16
#define HIER_RS_WINDOW     8  /* reduce-scatter chunks an owner receives at a time */
#define HIER_AG_WINDOW     16 /* final encodings a member receives at a time */
#define HIER_RS_MAX_CHUNKS 1024

/* What a transfer was, in its slot id: kind in the low 3 bits, an index above. */
enum { K_RS_SEND = 0, K_RS_RECV, K_AG_SEND, K_AG_SLOT, K_AG_RAW };

typedef struct hier_region {
    size_t off, cnt; /* elements of the vector */
    int owner;       /* local index of its owner on this host */
    size_t rs_elems; /* reduce-scatter chunks */
    int rs_n;
    size_t ring_elems; /* the rail's ring chunks (hosts > 1) */
    int ring_n;
    size_t enc_max; /* codec: bound of one ring chunk's encoding */
    int rs_left;    /* owned: chunks not yet summed */
} hier_region_t;

typedef struct hier_unit {
    int region;
    int k; /* chunk: reduce-scatter chunk, or block * GFC_MAX_CHUNKS + ring chunk */
} hier_unit_t;

struct hier_state;

/* A region this member owns, summed between hosts by a ring. */
typedef struct hier_rail {
    struct hier_state *hs;
    gfc_request_t *parent;
    int region;
    gfc_group_t group;
    gfc_ring_view_t view;
    gfc_request_t *req;   /* the ring; NULL before it starts and once it is finished */
    unsigned char *store; /* codec: the final encodings, enc_max apart, forwarded from here */
    size_t store_at;      /* its offset in the request's scratch */
} hier_rail_t;

typedef struct hier_state {
    const unsigned char *send;
    unsigned char *recv;
    size_t count, esize;
    gfc_dtype_t dtype;
    gfc_redop_t op;
    const gfc_codec_t *codec; /* between hosts only */
    bool encoded;             /* the all-gather forwards encodings (codec and hosts > 1) */
    gfc_topo_t topo;
    int H, L, lme, hidx, S, P, n;
    const int *local; /* [L]: group indices of this host's members */
    int *weight;      /* [H]: members on each host, the rails' contributions */
    int *rail_ranks;  /* [S * H]: world ranks of shard s's rail, in host order */
    hier_region_t *reg;
    int nreg;
    uint32_t span; /* step ids: region * span + chunk */
    /* reduce-scatter, owner side: units in order, a window of slot groups of L - 1 buffers */
    hier_unit_t *rs_units;
    int rs_nunits, rs_next, rs_done;
    int rs_groups[HIER_RS_WINDOW]; /* unit held by each slot group, -1: free */
    int rs_got[HIER_RS_WINDOW];    /* its receives arrived */
    size_t rs_slot_bytes;
    unsigned char *rs_slots;
    int rs_sends_left; /* this member's reduce-scatter sends not yet complete */
    /* rails */
    hier_rail_t *rails;
    int nrails, rails_left;
    /* all-gather, receiving side */
    hier_unit_t *ag_units;
    int ag_nunits, ag_next, ag_done;
    int ag_slots_unit[HIER_AG_WINDOW]; /* encoded: unit held by each slot, -1: free */
    size_t ag_slot_bytes;
    unsigned char *ag_slots;
} hier_state_t;

static uint32_t hier_step(const hier_state_t *s, int phase, int region, int k)
{
    return ((uint32_t)phase << 31) | ((uint32_t)region * s->span + (uint32_t)k);
}

/* The elements [first, first + len) of a region that chunk k covers (relative to the region). */
static void hier_rs_range(const hier_region_t *r, int k, size_t *first, size_t *len)
{
    *first = (size_t)k * r->rs_elems;
    *len = TDL_MIN(r->rs_elems, r->cnt - *first);
}

static void hier_ag_range(const hier_state_t *s, const hier_region_t *r, int k, size_t *first,
                          size_t *len)
{
    if (s->H == 1)
        hier_rs_range(r, k, first, len);
    else
        gfc_ring_chunk_range(r->cnt, s->H, r->ring_elems, k / GFC_MAX_CHUNKS, k % GFC_MAX_CHUNKS,
                             first, len);
}

static tdl_status_t hier_codec_fail(const hier_state_t *s, tdl_status_t st, const char *what)
{
    return tdl_error_raise(st, "codec %s: %s failed: %s", s->codec->ops->name, what,
                           tdl_error_get());
}

/* Sends a final chunk of an owned region to the host's other members. */
static tdl_status_t hier_forward(gfc_request_t *req, int region, int k, const void *data,
                                 size_t bytes)
{
    hier_state_t *s = req->state;
    for (int j = 0; j < s->L; j++) {
        if (j == s->lme)
            continue;
        tdl_status_t st =
            gfc_post_send(req, s->local[j], hier_step(s, 1, region, k), data, bytes, K_AG_SEND);
        if (st != TDL_OK)
            return st;
    }
    return TDL_OK;
}

/* The ring's tap: chunk c of `block` of the rail's region is final here. */
static tdl_status_t hier_tap(void *arg, int block, int c, size_t first, size_t len, const void *enc,
                             size_t enc_len)
{
    hier_rail_t *rail = arg;
    hier_state_t *s = rail->hs;
    /* the all-reduce failed meanwhile: its transfers are cancelled, nothing more is sent */
    if (rail->parent->finished || s->L == 1)
        return TDL_OK;
    const hier_region_t *r = &s->reg[rail->region];
    int k = block * GFC_MAX_CHUNKS + c;
    if (!s->codec)
        return hier_forward(rail->parent, rail->region, k, s->recv + (r->off + first) * s->esize,
                            len * s->esize);
    if (enc_len > r->enc_max)
        return tdl_error_raise(TDL_ERR_INTERNAL,
                               "hier: an encoding of %zu bytes over its bound %zu", enc_len,
                               r->enc_max);
    unsigned char *keep =
        rail->store + ((size_t)block * (size_t)r->ring_n + (size_t)c) * r->enc_max;
    memcpy(keep, enc, enc_len);
    return hier_forward(rail->parent, rail->region, k, keep, enc_len);
}

/* The region's host sum is complete: its ring between hosts starts. */
static tdl_status_t hier_rail_start(gfc_request_t *req, int region)
{
    hier_state_t *s = req->state;
    hier_rail_t *rail = NULL;
    for (int i = 0; i < s->nrails && !rail; i++)
        if (s->rails[i].region == region)
            rail = &s->rails[i];
    if (!rail)
        return tdl_error_raise(TDL_ERR_INTERNAL, "hier: no rail for region %d", region);
    const hier_region_t *r = &s->reg[region];
    int shard = region % s->S;
    /* A namespace of its own for every (collective, region): no two rails share tags. */
    uint64_t ns = gfc_mix64(req->tag_base + 0x9e3779b97f4a7c15ull * (uint64_t)(region + 1));
    tdl_status_t st =
        gfc_group_init(&rail->group, req->rt, s->rail_ranks + (size_t)shard * s->H, s->H, ns);
    if (st != TDL_OK)
        return st;
    rail->view = (gfc_ring_view_t){.offset = r->off,
                                   .chunk = (uint64_t)region * GFC_MAX_CHUNKS,
                                   .group_size = s->n,
                                   .weight = s->weight,
                                   .group_id = req->group.id,
                                   .seq = req->seq,
                                   .tap = hier_tap,
                                   .arg = rail};
    /* alone on its host, a member's own values are the host's sum */
    const unsigned char *src = s->L == 1 ? s->send : s->recv;
    return gfc_ring_rail_start(&rail->group,
                               s->codec ? "allreduce/hier:rail+codec" : "allreduce/hier:rail",
                               src + r->off * s->esize, s->recv + r->off * s->esize, r->cnt,
                               s->dtype, s->op, s->codec, &rail->view, &rail->req);
}

static unsigned char *hier_rs_slot(const hier_state_t *s, int group, int q)
{
    return s->rs_slots + ((size_t)group * (size_t)(s->L - 1) + (size_t)q) * s->rs_slot_bytes;
}

/* Owner: posts the receives of the next reduce-scatter chunks while slot groups are free. */
static tdl_status_t hier_rs_post(gfc_request_t *req)
{
    hier_state_t *s = req->state;
    for (int g = 0; g < HIER_RS_WINDOW && s->rs_next < s->rs_nunits; g++) {
        if (s->rs_groups[g] >= 0)
            continue;
        int u = s->rs_next++;
        const hier_unit_t *un = &s->rs_units[u];
        size_t first, len;
        hier_rs_range(&s->reg[un->region], un->k, &first, &len);
        s->rs_groups[g] = u;
        s->rs_got[g] = 0;
        for (int j = 0, q = 0; j < s->L; j++) {
            if (j == s->lme)
                continue;
            tdl_status_t st = gfc_post_recv(req, s->local[j], hier_step(s, 0, un->region, un->k),
                                            hier_rs_slot(s, g, q), len * s->esize,
                                            ((g * (s->L - 1) + q) << 3) | K_RS_RECV);
            if (st != TDL_OK)
                return st;
            q++;
        }
    }
    return TDL_OK;
}

/* Owner: every other member's part of a chunk has arrived; the host's sum, own values first. */
static tdl_status_t hier_rs_reduce(gfc_request_t *req, int g)
{
    hier_state_t *s = req->state;
    const hier_unit_t *un = &s->rs_units[s->rs_groups[g]];
    hier_region_t *r = &s->reg[un->region];
    size_t first, len;
    hier_rs_range(r, un->k, &first, &len);
    size_t at = (r->off + first) * s->esize;
    unsigned char *out = s->recv + at;
    const unsigned char *acc = s->send + at;
    for (int q = 0; q < s->L - 1; q++) {
        tdl_status_t st = gfc_reduce3(out, acc, hier_rs_slot(s, g, q), len, s->dtype, s->op);
        if (st != TDL_OK)
            return st;
        acc = out;
    }
    s->rs_groups[g] = -1;
    s->rs_done++;
    tdl_status_t st = TDL_OK;
    if (s->H == 1)
        st = hier_forward(req, un->region, un->k, out, len * s->esize); /* already final */
    else if (--r->rs_left == 0)
        st = hier_rail_start(req, un->region);
    return st == TDL_OK ? hier_rs_post(req) : st;
}

static unsigned char *hier_ag_slot(const hier_state_t *s, int slot)
{
    return s->ag_slots + (size_t)slot * s->ag_slot_bytes;
}

/* Posts the receives of the host's owners' final chunks, once this member's reduce-scatter
 * sends have left: they read the same memory when send and recv are one buffer. */
static tdl_status_t hier_ag_post(gfc_request_t *req)
{
    hier_state_t *s = req->state;
    if (s->rs_sends_left > 0)
        return TDL_OK;
    while (s->ag_next < s->ag_nunits) {
        const hier_unit_t *un = &s->ag_units[s->ag_next];
        const hier_region_t *r = &s->reg[un->region];
        uint32_t step = hier_step(s, 1, un->region, un->k);
        tdl_status_t st;
        if (s->encoded) {
            int slot = -1;
            for (int i = 0; i < HIER_AG_WINDOW && slot < 0; i++)
                if (s->ag_slots_unit[i] < 0)
                    slot = i;
            if (slot < 0)
                return TDL_OK;
            s->ag_slots_unit[slot] = s->ag_next;
            st = gfc_post_recv(req, s->local[r->owner], step, hier_ag_slot(s, slot),
                               s->ag_slot_bytes, (slot << 3) | K_AG_SLOT);
        } else {
            size_t first, len;
            hier_ag_range(s, r, un->k, &first, &len);
            st = gfc_post_recv(req, s->local[r->owner], step, s->recv + (r->off + first) * s->esize,
                               len * s->esize, (s->ag_next << 3) | K_AG_RAW);
        }
        if (st != TDL_OK)
            return st;
        s->ag_next++;
    }
    return TDL_OK;
}

static tdl_status_t hier_on_done(gfc_request_t *req, const gfc_xfer_t *x)
{
    hier_state_t *s = req->state;
    int kind = x->slot & 7, idx = x->slot >> 3;
    switch (kind) {
    case K_RS_SEND: return --s->rs_sends_left == 0 ? hier_ag_post(req) : TDL_OK;
    case K_RS_RECV: {
        int g = idx / (s->L - 1);
        return ++s->rs_got[g] == s->L - 1 ? hier_rs_reduce(req, g) : TDL_OK;
    }
    case K_AG_SLOT: {
        const hier_unit_t *un = &s->ag_units[s->ag_slots_unit[idx]];
        const hier_region_t *r = &s->reg[un->region];
        size_t first, len;
        hier_ag_range(s, r, un->k, &first, &len);
        tdl_status_t st = s->codec->ops->decode(s->codec->ctx, hier_ag_slot(s, idx), x->bytes,
                                                (float *)(s->recv + (r->off + first) * 4), len);
        if (st != TDL_OK)
            return hier_codec_fail(s, st, "decode");
        s->ag_slots_unit[idx] = -1;
        s->ag_done++;
        return hier_ag_post(req);
    }
    case K_AG_RAW: {
        const hier_unit_t *un = &s->ag_units[idx];
        size_t first, len;
        hier_ag_range(s, &s->reg[un->region], un->k, &first, &len);
        if (x->bytes != len * s->esize)
            return tdl_error_raise(TDL_ERR_CORRUPT, "hier: %zu bytes from rank %d, want %zu",
                                   x->bytes, x->peer, len * s->esize);
        s->ag_done++;
        return TDL_OK;
    }
    default: return TDL_OK; /* K_AG_SEND */
    }
}

static tdl_status_t hier_progress(gfc_request_t *req)
{
    hier_state_t *s = req->state;
    bool idle;
    tdl_status_t st = gfc_xfers_poll(req, hier_on_done, &idle);
    if (st != TDL_OK)
        return st;
    /* The rails are stepped by the progress engine like any request; here only their end. */
    for (int i = 0; i < s->nrails; i++) {
        hier_rail_t *rail = &s->rails[i];
        if (!rail->req || !rail->req->finished)
            continue;
        if (rail->req->status != TDL_OK)
            return tdl_error_raise(rail->req->status, "between hosts: %s", rail->req->error);
        gfc_request_free(rail->req);
        rail->req = NULL;
        s->rails_left--;
    }
    if (idle && s->rs_done == s->rs_nunits && s->rails_left == 0 && s->ag_done == s->ag_nunits)
        req->finished = true;
    return TDL_OK;
}

static void hier_cleanup(gfc_request_t *req)
{
    hier_state_t *s = req->state;
    for (int i = 0; s->rails && i < s->nrails; i++)
        if (s->rails[i].req)
            gfc_request_free(s->rails[i].req);
    free(s->rails);
    free(s->rs_units);
    free(s->ag_units);
    free(s->reg);
    free(s->weight);
    free(s->rail_ranks);
    gfc_topo_free(&s->topo);
    s->rails = NULL;
}

/* The regions, the units of both phases and the rails, from the group's hosts. */
static tdl_status_t hier_plan(gfc_request_t *req)
{
    hier_state_t *s = req->state;
    const gfc_runtime_config_t *cfg = &req->rt->config;
    const gfc_topo_t *t = &s->topo;
    size_t bytes = s->count * s->esize;
    size_t piece = TDL_MAX(cfg->hier_piece_bytes, (size_t)1);
    s->P = (int)TDL_MIN((bytes + piece / 2) / piece, (size_t)HIER_MAX_PIECES);
    s->P = TDL_MAX(s->P, 1);
    s->span = (uint32_t)TDL_MAX(GFC_MAX_CHUNKS * s->H, HIER_RS_MAX_CHUNKS);
    if ((uint64_t)s->P * (uint64_t)s->S * s->span >= (1ull << 31))
        s->P = 1;
    if ((uint64_t)s->S * s->span >= (1ull << 31))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc allreduce hier: %d hosts with up to %d members each are more "
                               "than its message ids can tell apart",
                               s->H, s->S);
    s->nreg = s->P * s->S;
    s->reg = calloc((size_t)s->nreg, sizeof(hier_region_t));
    s->weight = malloc((size_t)s->H * sizeof(int));
    s->rail_ranks = malloc((size_t)s->S * (size_t)s->H * sizeof(int));
    if (!s->reg || !s->weight || !s->rail_ranks)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc allreduce hier: out of memory");
    for (int h = 0; h < s->H; h++) {
        s->weight[h] = t->first[h + 1] - t->first[h];
        for (int sh = 0; sh < s->S; sh++)
            s->rail_ranks[(size_t)sh * s->H + h] =
                req->group.ranks[t->members[t->first[h] + sh % s->weight[h]]];
    }
    int rs_units = 0, ag_units = 0;
    size_t rs_max = 1, enc_max = 1, store_bytes = 0;
    for (int p = 0; p < s->P; p++) {
        size_t poff = gfc_block_offset(s->count, s->P, p),
               pcnt = gfc_block_count(s->count, s->P, p);
        for (int sh = 0; sh < s->S; sh++) {
            hier_region_t *r = &s->reg[p * s->S + sh];
            r->off = poff + gfc_block_offset(pcnt, s->S, sh);
            r->cnt = gfc_block_count(pcnt, s->S, sh);
            r->owner = sh % s->L;
            size_t unit = TDL_MAX(cfg->ring_chunk_bytes / s->esize, (size_t)1);
            r->rs_elems = TDL_MAX(unit, (r->cnt + HIER_RS_MAX_CHUNKS - 1) / HIER_RS_MAX_CHUNKS);
            r->rs_n = (int)((r->cnt + r->rs_elems - 1) / r->rs_elems);
            if (s->H > 1) {
                gfc_ring_chunking(cfg, s->H, r->cnt, s->esize, s->codec != NULL, &r->ring_elems,
                                  &r->ring_n);
                if (s->codec)
                    r->enc_max = s->codec->ops->max_encoded_bytes(s->codec->ctx, r->ring_elems);
            }
            if (r->cnt == 0)
                continue; /* nothing to move: no chunk, no rail, on every member alike */
            if (r->owner == s->lme) {
                rs_units += s->L > 1 ? r->rs_n : 0;
                r->rs_left = s->L > 1 ? r->rs_n : 0;
                s->nrails += s->H > 1;
                rs_max = TDL_MAX(rs_max, r->rs_elems);
            } else {
                ag_units += s->H > 1 ? s->H * r->ring_n : r->rs_n;
                enc_max = TDL_MAX(enc_max, r->enc_max);
            }
        }
    }
    s->rs_units = calloc((size_t)rs_units + 1, sizeof(hier_unit_t));
    s->ag_units = calloc((size_t)ag_units + 1, sizeof(hier_unit_t));
    s->rails = calloc((size_t)s->nrails + 1, sizeof(hier_rail_t));
    s->rs_slot_bytes = rs_max * s->esize;
    s->ag_slot_bytes = enc_max;
    if (!s->rs_units || !s->ag_units || !s->rails)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc allreduce hier: out of memory");
    /* Units in the order their data comes: piece by piece; a region's final chunks in the order
     * its rail's ring finishes them on this host's member (its own block, then the all-gather's).
     */
    for (int g = 0; g < s->nreg; g++) {
        hier_region_t *r = &s->reg[g];
        if (r->cnt == 0)
            continue;
        if (r->owner == s->lme) {
            for (int k = 0; s->L > 1 && k < r->rs_n; k++)
                s->rs_units[s->rs_nunits++] = (hier_unit_t){g, k};
            if (s->H > 1) {
                s->rails[s->rails_left++] =
                    (hier_rail_t){.hs = s, .parent = req, .region = g, .store_at = store_bytes};
                if (s->codec)
                    store_bytes += (size_t)s->H * (size_t)r->ring_n * r->enc_max;
            }
            continue;
        }
        if (s->H == 1) {
            for (int k = 0; k < r->rs_n; k++)
                s->ag_units[s->ag_nunits++] = (hier_unit_t){g, k};
            continue;
        }
        for (int i = 0; i < s->H; i++) {
            int b = gfc_mod(s->hidx + 1 - i, s->H);
            for (int c = 0; c < r->ring_n; c++)
                s->ag_units[s->ag_nunits++] = (hier_unit_t){g, b * GFC_MAX_CHUNKS + c};
        }
    }
    /* One scratch buffer for all of it, kept by the runtime between calls: fresh pages would
     * fault on every call (the encodings alone are megabytes). */
    size_t rs_bytes = s->L > 1 ? (size_t)HIER_RS_WINDOW * (size_t)(s->L - 1) * s->rs_slot_bytes : 0;
    size_t ag_bytes = s->encoded && ag_units ? (size_t)HIER_AG_WINDOW * s->ag_slot_bytes : 0;
    unsigned char *mem = gfc_request_scratch(req, 0, rs_bytes + ag_bytes + store_bytes);
    if (!mem)
        return tdl_error_raise(TDL_ERR_NOMEM, "gfc allreduce hier: cannot allocate %zu bytes",
                               rs_bytes + ag_bytes + store_bytes);
    s->rs_slots = mem;
    s->ag_slots = mem + rs_bytes;
    for (int i = 0; i < s->nrails; i++)
        s->rails[i].store = mem + rs_bytes + ag_bytes + s->rails[i].store_at;
    return TDL_OK;
}

/* Posts this member's reduce-scatter sends, its first receives, and the rails that need no
 * reduce-scatter (a member alone on its host). */
static tdl_status_t hier_begin(gfc_request_t *req)
{
    hier_state_t *s = req->state;
    tdl_status_t st = TDL_OK;
    for (int g = 0; g < s->nreg && st == TDL_OK && s->L > 1; g++) {
        const hier_region_t *r = &s->reg[g];
        if (r->owner == s->lme)
            continue;
        for (int k = 0; k < r->rs_n && st == TDL_OK; k++) {
            size_t first, len;
            hier_rs_range(r, k, &first, &len);
            s->rs_sends_left++;
            st = gfc_post_send(req, s->local[r->owner], hier_step(s, 0, g, k),
                               s->send + (r->off + first) * s->esize, len * s->esize, K_RS_SEND);
        }
    }
    for (int i = 0; i < HIER_RS_WINDOW; i++)
        s->rs_groups[i] = -1;
    for (int i = 0; i < HIER_AG_WINDOW; i++)
        s->ag_slots_unit[i] = -1;
    if (st == TDL_OK)
        st = hier_rs_post(req);
    for (int i = 0; i < s->nrails && st == TDL_OK; i++)
        if (s->reg[s->rails[i].region].rs_left == 0)
            st = hier_rail_start(req, s->rails[i].region);
    if (st == TDL_OK)
        st = hier_ag_post(req);
    return st;
}

tdl_status_t gfc_allreduce_hier_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                      gfc_dtype_t dtype, gfc_redop_t op, const gfc_codec_t *codec,
                                      gfc_request_t **req_out)
{
    gfc_topo_t topo;
    tdl_status_t st = gfc_topo_of(g, &topo);
    if (st != TDL_OK)
        return st;
    if (topo.hosts == g->size) {
        /* one member per host: nothing to sum within a host, and the ring it is */
        gfc_topo_free(&topo);
        return gfc_allreduce_ring_start(g, send, recv, count, dtype, op, codec, req_out);
    }
    bool encoded = codec && topo.hosts > 1;
    gfc_request_t *req;
    st = gfc_request_create(g, encoded ? "allreduce/hier+codec" : "allreduce/hier", hier_progress,
                            sizeof(hier_state_t), &req);
    if (st != TDL_OK) {
        gfc_topo_free(&topo);
        return st;
    }
    hier_state_t *s = req->state;
    s->topo = topo;
    req->cleanup = hier_cleanup;
    s->send = send;
    s->recv = recv;
    s->count = count;
    s->dtype = dtype;
    s->op = op;
    s->esize = gfc_dtype_size(dtype);
    s->codec = topo.hosts > 1 ? codec : NULL;
    s->encoded = encoded;
    s->n = g->size;
    s->H = topo.hosts;
    s->S = topo.max_local;
    s->hidx = topo.host_of[g->me];
    s->lme = topo.local_of[g->me];
    s->L = topo.first[s->hidx + 1] - topo.first[s->hidx];
    s->local = topo.members + topo.first[s->hidx];
    if ((st = hier_plan(req)) != TDL_OK || (st = hier_begin(req)) != TDL_OK)
        return gfc_request_fail_start(req, st);
    *req_out = req;
    return TDL_OK;
}
