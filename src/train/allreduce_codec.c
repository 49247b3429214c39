/* The bridge between src/codec and gfc's codec hook: gfc calls these at every hop of the ring or
 * butterfly all-reduce, and they call the chosen format. The random stream of an encoding is a
 * function of (run seed, rank, hop, collective, chunk), so runs repeat exactly. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "train/allreduce_codec.h"

struct train_codec {
    codec_t *codec;
    uint64_t seed;
    gfc_codec_ops_t ops;
    gfc_codec_t hook;
    int64_t step;        /* >= 0: keys the random streams (train_codec_set_step) */
    float *residual;     /* error feedback: [n], NULL when off */
    size_t n;
    float *scratch;      /* decoded values of one encoding */
    size_t scratch_cap;
    tdl_status_t scratch_st;
};

/* residual[offset + i] += x[i] - decode(enc)[i] */
static tdl_status_t feed_back(train_codec_t *t, const gfc_codec_hop_t *h, const float *x,
                              const void *enc, size_t bytes, size_t n)
{
    if (!t->residual || n == 0)
        return TDL_OK;
    if (h->offset + n > t->n)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "error feedback: values [%llu, %llu) beyond the %zu of the residual",
                               (unsigned long long)h->offset,
                               (unsigned long long)(h->offset + n), t->n);
    if (n > t->scratch_cap) {
        float *s = realloc(t->scratch, n * sizeof(float));
        if (!s)
            return tdl_error_raise(TDL_ERR_NOMEM, "error feedback: out of memory");
        t->scratch = s, t->scratch_cap = n;
    }
    tdl_status_t st = t->codec->ops->decode(t->codec->cfg, enc, bytes, t->scratch, n);
    if (st != TDL_OK)
        return st;
    float *r = t->residual + h->offset;
    for (size_t i = 0; i < n; i++)
        r[i] += x[i] - t->scratch[i];
    return TDL_OK;
}

static void where_of(const train_codec_t *t, const gfc_codec_hop_t *h, codec_where_t *w)
{
    w->seed = t->seed;
    w->rank = h->rank;
    w->hop = h->hop;
    w->contributions = h->contributions;
    w->group_size = h->group_size;
    /* keyed by the training step when there is one: the same bits after a resume */
    uint64_t id = t->step >= 0 ? 0x7374657000000000ull : h->group_id;
    uint64_t seq = t->step >= 0 ? (uint64_t)t->step : h->seq;
    w->stream = codec_stream_make(id, seq, h->chunk);
    w->collective = codec_stream_make(id, seq, 0);
    w->offset = h->offset;
}

static size_t hook_max(void *ctx, size_t n)
{
    const train_codec_t *t = ctx;
    return t->codec->ops->max_encoded_bytes(t->codec->cfg, n);
}

static tdl_status_t hook_encode(void *ctx, const gfc_codec_hop_t *hop, const float *in, size_t n,
                                void *out, size_t *out_bytes)
{
    train_codec_t *t = ctx;
    codec_where_t w;
    tdl_fault_point("train.encode"); /* a hop of the all-reduce, for the failure tests */
    where_of(t, hop, &w);
    tdl_status_t st = t->codec->ops->encode(t->codec->cfg, &w, in, n, out, out_bytes);
    return st ? st : feed_back(t, hop, in, out, *out_bytes, n);
}

static tdl_status_t hook_decode(void *ctx, const void *in, size_t in_bytes, float *out, size_t n)
{
    const train_codec_t *t = ctx;
    return t->codec->ops->decode(t->codec->cfg, in, in_bytes, out, n);
}

static tdl_status_t hook_dae(void *ctx, const gfc_codec_hop_t *hop, const void *in,
                             size_t in_bytes, const float *local, size_t n, void *out,
                             size_t *out_bytes)
{
    train_codec_t *t = ctx;
    codec_where_t w;
    tdl_fault_point("train.encode");
    where_of(t, hop, &w);
    tdl_status_t st = t->codec->ops->decode_accumulate_encode(t->codec->cfg, &w, in, in_bytes,
                                                              local, n, out, out_bytes);
    if (st || !t->residual)
        return st;
    /* the sum that was encoded: local + decode(in), then its error like any encoding */
    float *sum = malloc(n * sizeof(float));
    if (!sum)
        return tdl_error_raise(TDL_ERR_NOMEM, "error feedback: out of memory");
    memcpy(sum, local, n * sizeof(float));
    st = t->codec->ops->decode_accumulate(t->codec->cfg, in, in_bytes, sum, n);
    if (!st)
        st = feed_back(t, hop, sum, out, *out_bytes, n);
    free(sum);
    return st;
}

static tdl_status_t hook_da(void *ctx, const void *in, size_t in_bytes, float *acc, size_t n)
{
    const train_codec_t *t = ctx;
    return t->codec->ops->decode_accumulate(t->codec->cfg, in, in_bytes, acc, n);
}

tdl_status_t train_codec_create(const char *name, bool stochastic, uint64_t seed,
                                train_codec_t **out)
{
    codec_config_t cfg = {.round = stochastic ? CODEC_ROUND_STOCHASTIC : CODEC_ROUND_DEFAULT};
    return train_codec_create_config(name, &cfg, seed, out);
}

tdl_status_t train_codec_create_config(const char *name, const void *config, uint64_t seed,
                                       train_codec_t **out)
{
    train_codec_t *t = calloc(1, sizeof(*t));
    if (!t)
        return tdl_error_raise(TDL_ERR_NOMEM, "all-reduce codec: out of memory");
    tdl_status_t st = codec_create(name, config, &t->codec);
    if (st != TDL_OK) {
        free(t);
        return st;
    }
    t->seed = seed;
    t->step = -1;
    t->ops = (gfc_codec_ops_t){.name = t->codec->ops->name,
                               .max_encoded_bytes = hook_max,
                               .encode = hook_encode,
                               .decode = hook_decode,
                               .decode_accumulate_encode = hook_dae,
                               .decode_accumulate = hook_da};
    t->hook = (gfc_codec_t){.ops = &t->ops, .ctx = t};
    *out = t;
    return TDL_OK;
}

const gfc_codec_t *train_codec_hook(const train_codec_t *t)
{
    return &t->hook;
}

double train_codec_bits_per_coord(const train_codec_t *t, size_t n)
{
    return t->codec->ops->bits_per_coord(t->codec->cfg, n);
}

tdl_status_t train_codec_error_feedback(train_codec_t *t, size_t n)
{
    free(t->residual);
    t->residual = calloc(n ? n : 1, sizeof(float));
    t->n = n;
    if (!t->residual)
        return tdl_error_raise(TDL_ERR_NOMEM, "error feedback: no memory for %zu values", n);
    return TDL_OK;
}

void train_codec_set_step(train_codec_t *t, int64_t step)
{
    if (t)
        t->step = step;
}

void train_codec_apply_residual(train_codec_t *t, float *grads, size_t n)
{
    if (!t || !t->residual)
        return;
    n = TDL_MIN(n, t->n);
    for (size_t i = 0; i < n; i++) {
        grads[i] += t->residual[i];
        t->residual[i] = 0;
    }
}

float *train_codec_residual(train_codec_t *t, size_t *n_out)
{
    if (n_out)
        *n_out = t && t->residual ? t->n : 0;
    return t ? t->residual : NULL;
}

void train_codec_free(train_codec_t *t)
{
    if (!t)
        return;
    free(t->residual);
    free(t->scratch);
    codec_destroy(t->codec);
    free(t);
}
