/* All-reduce: checks the arguments, picks an algorithm from allreduce_algs[] and hands send and
 * recv to it, which reads the one and writes the other (no copy of send into recv first). The
 * group's hosts are looked up (O(size), from the runtime's host table) only where they can change
 * auto's choice: at or above gfc-hier-min bytes on a world of several hosts.
 * Adding an algorithm: a file beside this one, its start function in gfc_internal.h, a value of
 * gfc_allreduce_algo_t (by which a caller forces it; its name in runtime.c's gfc-allreduce
 * choices too) and one row in allreduce_algs[]. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "gfc/gfc_internal.h"

/* What the choice of an algorithm depends on. */
typedef struct allreduce_sel {
    const gfc_runtime_config_t *config;
    int size;      /* members of the group */
    size_t bytes;  /* of the vector */
    bool codec;    /* a codec compresses the hops */
    int hosts;     /* hosts the group spans (1 where it was not worth asking) */
    int max_local; /* most members on one host */
} allreduce_sel_t;

/* One algorithm: by name, when it applies (refuses: NULL where it does, otherwise why not) and
 * how well it fits (AUTO takes the highest score among those that apply, the first on a tie). */
typedef struct allreduce_alg {
    gfc_allreduce_algo_t id;
    const char *name;
    const char *(*refuses)(const allreduce_sel_t *s);
    int (*score)(const allreduce_sel_t *s);
    gfc_allreduce_start_fn_t start;
} allreduce_alg_t;

/* The ring and the butterfly cut the vector in group-size blocks: below a few elements per
 * member, or below gfc-small-msg bytes, the whole vector each round is faster. */
static bool allreduce_small(const allreduce_sel_t *s)
{
    return s->bytes <= s->config->small_msg_bytes || s->bytes / (size_t)s->size < 64;
}

static const char *allreduce_takes_all(const allreduce_sel_t *s)
{
    return NULL;
}

static const char *allreduce_takes_no_codec(const allreduce_sel_t *s)
{
    return s->codec ? "recursive doubling takes no codec; use ring or butterfly" : NULL;
}

/* The ring: bandwidth on any group, and the codec all-reduce's choice. */
static int allreduce_ring_score(const allreduce_sel_t *s)
{
    return 10;
}

/* The butterfly moves what the ring moves (2(n-1)/n of the vector) in log2(n) rounds instead of
 * 2(n-1), but on other sizes its fold moves whole vectors (bench/run gfc-allreduce). With a
 * codec, auto keeps to the ring. */
static int allreduce_butterfly_score(const allreduce_sel_t *s)
{
    return !s->codec && (s->size & (s->size - 1)) == 0 ? 20 : 5;
}

/* Recursive doubling: the whole vector each round, log2(n) rounds: latency. */
static int allreduce_recursive_doubling_score(const allreduce_sel_t *s)
{
    return allreduce_small(s) ? 30 : 1;
}

/* hier sums within each host in f32 and leaves each host with what one ring per local rank
 * carries, each over a share of the vector, through the codec if any: it pays on groups across
 * hosts with more than one member on some host, from gfc-hier-min bytes (doc/gfc.md measures
 * it). With one member per host it is the ring; on one host, a reduce-scatter and all-gather. */
static int allreduce_hier_score(const allreduce_sel_t *s)
{
    return s->hosts > 1 && s->max_local > 1 && s->bytes >= s->config->hier_min_bytes ? 40 : 0;
}

static const allreduce_alg_t allreduce_algs[] = {
    {GFC_ALLREDUCE_RING, "ring", allreduce_takes_all, allreduce_ring_score,
     gfc_allreduce_ring_start},
    {GFC_ALLREDUCE_BUTTERFLY, "butterfly", allreduce_takes_all, allreduce_butterfly_score,
     gfc_allreduce_butterfly_start},
    {GFC_ALLREDUCE_RECURSIVE_DOUBLING, "recursive_doubling", allreduce_takes_no_codec,
     allreduce_recursive_doubling_score, gfc_allreduce_recursive_doubling_start},
    {GFC_ALLREDUCE_HIER, "hier", allreduce_takes_all, allreduce_hier_score,
     gfc_allreduce_hier_start},
};
_Static_assert(TDL_ARRAY_SIZE(allreduce_algs) == GFC_ALLREDUCE_COUNT - 1,
               "every gfc_allreduce_algo_t but AUTO has a row in allreduce_algs[]");

static const allreduce_alg_t *allreduce_alg_of(gfc_allreduce_algo_t algo)
{
    for (size_t i = 0; i < TDL_ARRAY_SIZE(allreduce_algs); i++)
        if (allreduce_algs[i].id == algo)
            return &allreduce_algs[i];
    return NULL;
}

const char *gfc_allreduce_algo_name(gfc_allreduce_algo_t algo)
{
    const allreduce_alg_t *a = allreduce_alg_of(algo);
    return algo == GFC_ALLREDUCE_AUTO ? "auto" : a ? a->name : "?";
}

tdl_status_t gfc_allreduce_algo_parse(const char *name, gfc_allreduce_algo_t *algo_out)
{
    if (name && strcmp(name, "auto") == 0) {
        *algo_out = GFC_ALLREDUCE_AUTO;
        return TDL_OK;
    }
    for (size_t i = 0; name && i < TDL_ARRAY_SIZE(allreduce_algs); i++) {
        if (strcmp(name, allreduce_algs[i].name) == 0) {
            *algo_out = allreduce_algs[i].id;
            return TDL_OK;
        }
    }
    char names[256] = "auto";
    size_t used = strlen(names), n = TDL_ARRAY_SIZE(allreduce_algs);
    for (size_t i = 0; i < n && used < sizeof(names); i++)
        used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
                                 i + 1 < n ? ", " : " or ", allreduce_algs[i].name);
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "unknown all-reduce algorithm '%s': use %s",
                           name ? name : "(null)", names);
}

/* asked, else the runtime's configured algorithm, else (both AUTO) the best that applies. */
static gfc_allreduce_algo_t allreduce_choose(const allreduce_sel_t *s, gfc_allreduce_algo_t asked)
{
    if (asked == GFC_ALLREDUCE_AUTO)
        asked = s->config->allreduce_algo;
    if (asked != GFC_ALLREDUCE_AUTO)
        return asked;
    const allreduce_alg_t *best = &allreduce_algs[0];
    int best_score = -1;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(allreduce_algs); i++) {
        const allreduce_alg_t *a = &allreduce_algs[i];
        int score = a->refuses(s) ? -1 : a->score(s);
        if (score > best_score)
            best = a, best_score = score;
    }
    return best->id;
}

gfc_allreduce_algo_t gfc_allreduce_select_hosts(const gfc_runtime_config_t *config, int size,
                                                size_t bytes, gfc_allreduce_algo_t asked,
                                                bool codec, int hosts, int max_local)
{
    const allreduce_sel_t s = {.config = config, .size = size, .bytes = bytes, .codec = codec,
                               .hosts = hosts, .max_local = max_local};
    return allreduce_choose(&s, asked);
}

gfc_allreduce_algo_t gfc_allreduce_select(const gfc_runtime_config_t *config, int size,
                                          size_t bytes, gfc_allreduce_algo_t asked, bool codec)
{
    return gfc_allreduce_select_hosts(config, size, bytes, asked, codec, 1, size);
}

tdl_status_t gfc_allreduce_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                 gfc_dtype_t dtype, gfc_redop_t op,
                                 const gfc_allreduce_opts_t *opts, gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("allreduce", count, dtype);
    if (st != TDL_OK)
        return st;
    if ((unsigned)op >= GFC_OP_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc allreduce: unknown reduction %d", (int)op);
    if (dtype == GFC_DT_BYTE && op == GFC_OP_SUM)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc allreduce: no sum over bytes");
    const gfc_codec_t *codec = opts ? opts->codec : NULL;
    gfc_allreduce_algo_t asked = opts ? opts->algo : GFC_ALLREDUCE_AUTO;
    if ((unsigned)asked >= GFC_ALLREDUCE_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc allreduce: unknown algorithm %d",
                               (int)asked);
    if (codec && (dtype != GFC_DT_F32 || op != GFC_OP_SUM))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc allreduce: codec %s needs f32 sum, not %s %s", codec->ops->name,
                               gfc_dtype_name(dtype), gfc_redop_name(op));
    size_t bytes = count * gfc_dtype_size(dtype);
    allreduce_sel_t sel = {.config = &g->rt->config, .size = g->size, .bytes = bytes,
                           .codec = codec != NULL, .hosts = 1, .max_local = g->size};
    /* The group's hosts only where they can change the choice: O(size), nothing sent. */
    if (asked == GFC_ALLREDUCE_AUTO && sel.config->allreduce_algo == GFC_ALLREDUCE_AUTO &&
        g->rt->nhosts > 1 && g->size > 1 && bytes >= sel.config->hier_min_bytes)
        sel.hosts = gfc_group_hosts(g, &sel.max_local);
    gfc_allreduce_algo_t algo = allreduce_choose(&sel, asked);
    const allreduce_alg_t *alg = allreduce_alg_of(algo);
    const char *why = alg ? alg->refuses(&sel) : NULL; /* a forced one may not apply */
    if (why)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc allreduce: %s", why);
    if (g->size == 1 || count == 0) {
        if (bytes && recv != send)
            memmove(recv, send, bytes);
        return gfc_request_create_done(g, "allreduce", req_out);
    }
    if (send != recv && (const char *)send < (char *)recv + bytes &&
        (char *)recv < (const char *)send + bytes)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc allreduce: send and recv overlap without being the same");
    if (!alg)
        return tdl_error_raise(TDL_ERR_INTERNAL, "gfc allreduce: no algorithm %d", (int)algo);
    return alg->start(g, send, recv, count, dtype, op, codec, req_out);
}

tdl_status_t gfc_allreduce(gfc_group_t *g, const void *send, void *recv, size_t count,
                           gfc_dtype_t dtype, gfc_redop_t op, const gfc_allreduce_opts_t *opts)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_allreduce_start(g, send, recv, count, dtype, op, opts, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
