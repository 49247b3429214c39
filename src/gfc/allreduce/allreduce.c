/* All-reduce: checks the arguments and hands send and recv to the algorithm, which reads the
 * one and writes the other (no copy of send into recv first). AUTO takes recursive doubling for
 * small vectors (latency), the butterfly for larger ones on power-of-two groups and the ring on
 * others (bandwidth); a codec needs ring or butterfly. Adding an algorithm: a file beside this
 * one and a case below. */
#include "config.h"

#include <string.h>

#include "gfc/gfc_internal.h"

static gfc_allreduce_algo_t allreduce_choose(const gfc_group_t *g, size_t bytes,
                                             gfc_allreduce_algo_t asked, bool codec)
{
    if (asked == GFC_ALLREDUCE_AUTO)
        asked = g->rt->config.allreduce_algo;
    if (asked != GFC_ALLREDUCE_AUTO)
        return asked;
    if (codec)
        return GFC_ALLREDUCE_RING;
    /* The ring cuts the vector in group-size blocks: below a few elements per member, doubling
     * wins whatever the size. */
    if (bytes <= g->rt->config.small_msg_bytes || bytes / (size_t)g->size < 64)
        return GFC_ALLREDUCE_RECURSIVE_DOUBLING;
    /* Both move 2(n-1)/n of the vector; the butterfly needs log2(n) rounds instead of 2(n-1),
     * but on other sizes its fold moves whole vectors: ring there (bench/run gfc-allreduce). */
    if ((g->size & (g->size - 1)) == 0)
        return GFC_ALLREDUCE_BUTTERFLY;
    return GFC_ALLREDUCE_RING;
}

tdl_status_t gfc_allreduce_start(gfc_group_t *g, const void *send, void *recv, size_t count,
                                 gfc_dtype_t dtype, gfc_redop_t op,
                                 const gfc_allreduce_opts_t *opts, gfc_request_t **req_out)
{
    tdl_status_t st = gfc_check_count("allreduce", count, dtype);
    if (st != TDL_OK)
        return st;
    if ((unsigned)op >= GFC_OP_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc allreduce: unknown reduction %d",
                               (int)op);
    if (dtype == GFC_DT_BYTE && op == GFC_OP_SUM)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc allreduce: no sum over bytes");
    const gfc_codec_t *codec = opts ? opts->codec : NULL;
    gfc_allreduce_algo_t asked = opts ? opts->algo : GFC_ALLREDUCE_AUTO;
    if ((unsigned)asked >= GFC_ALLREDUCE_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "gfc allreduce: unknown algorithm %d",
                               (int)asked);
    if (codec && (dtype != GFC_DT_F32 || op != GFC_OP_SUM))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc allreduce: codec %s needs f32 sum, not %s %s",
                               codec->ops->name, gfc_dtype_name(dtype), gfc_redop_name(op));
    size_t bytes = count * gfc_dtype_size(dtype);
    gfc_allreduce_algo_t algo = allreduce_choose(g, bytes, asked, codec != NULL);
    if (codec && algo == GFC_ALLREDUCE_RECURSIVE_DOUBLING)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc allreduce: recursive doubling takes no codec; use ring or "
                               "butterfly");
    if (g->size == 1 || count == 0) {
        if (bytes && recv != send)
            memmove(recv, send, bytes);
        return gfc_request_create_done(g, "allreduce", req_out);
    }
    if (send != recv && (const char *)send < (char *)recv + bytes &&
        (char *)recv < (const char *)send + bytes)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "gfc allreduce: send and recv overlap without being the same");
    switch (algo) {
    case GFC_ALLREDUCE_RING:
        return gfc_allreduce_ring_start(g, send, recv, count, dtype, op, codec, req_out);
    case GFC_ALLREDUCE_BUTTERFLY:
        return gfc_allreduce_butterfly_start(g, send, recv, count, dtype, op, codec, req_out);
    case GFC_ALLREDUCE_RECURSIVE_DOUBLING:
        return gfc_allreduce_recursive_doubling_start(g, send, recv, count, dtype, op, req_out);
    default:
        return tdl_error_raise(TDL_ERR_INTERNAL, "gfc allreduce: no algorithm %d", (int)algo);
    }
}

tdl_status_t gfc_allreduce(gfc_group_t *g, const void *send, void *recv, size_t count,
                           gfc_dtype_t dtype, gfc_redop_t op, const gfc_allreduce_opts_t *opts)
{
    gfc_request_t *req;
    tdl_status_t st = gfc_allreduce_start(g, send, recv, count, dtype, op, opts, &req);
    return st == TDL_OK ? gfc_request_wait(req) : st;
}
