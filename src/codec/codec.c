/* The codec table, lookup by name, configuration and the helpers the formats share. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"

/* A new format is one file and one line here. */
static const codec_ops_t *const codec_table[] = {
    &codec_f32_ops,        &codec_bf16_ops,       &codec_fp16_ops,       &codec_mxfp8_e4m3_ops,
    &codec_mxfp8_e5m2_ops, &codec_mxfp6_e3m2_ops, &codec_mxfp6_e2m3_ops, &codec_mxfp4_e2m1_ops,
    &codec_int8_ops,       &codec_int8_rht_ops,   &codec_dynamiq_ops,
};

/* Short names: the MX element type users mean when they say only the width. */
static const struct {
    const char *alias, *name;
} codec_aliases[] = {
    {"mxfp8", "mxfp8_e4m3"},
    {"mxfp6", "mxfp6_e3m2"},
    {"mxfp4", "mxfp4_e2m1"},
};

static const char *const codec_round_names[CODEC_ROUND_COUNT] = {"default", "nearest",
                                                                  "stochastic"};

const codec_ops_t *codec_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(codec_aliases); i++)
        if (strcmp(codec_aliases[i].alias, name) == 0)
            name = codec_aliases[i].name;
    for (size_t i = 0; i < TDL_ARRAY_SIZE(codec_table); i++)
        if (strcmp(codec_table[i]->name, name) == 0)
            return codec_table[i];
    return NULL;
}

const char *codec_names(void)
{
    return CODEC_NAMES;
}

/* The configuration lives in the same allocation as the codec_t. */
typedef struct codec_owned {
    codec_t codec;
    codec_config_t config;
} codec_owned_t;

tdl_status_t codec_create(const char *name, const codec_config_t *config, codec_t **codec_out)
{
    if (!codec_out)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "codec_create: codec_out is NULL");
    const codec_ops_t *ops = codec_find(name);
    if (!ops)
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "unknown codec '%s' (choose from %s)",
                               name ? name : "(null)", codec_names());
    if (config && (!(config->bits == 0 || (config->bits >= 1.3125 && config->bits <= 8.3125)) ||
                   config->flags >= (CODEC_DQ_EVEN_SPLIT << 1)))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "codec %s: %g bits per coordinate or flags 0x%x out of range "
                               "(bits: 0 for the default or 1.3125 to 8.3125)",
                               ops->name, config->bits, config->flags);
    if (config && (unsigned)config->round >= CODEC_ROUND_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "codec %s: rounding mode %d is not one of %s",
                               ops->name, (int)config->round, "default|nearest|stochastic");
    codec_owned_t *owned = calloc(1, sizeof(*owned));
    if (!owned)
        return tdl_error_raise(TDL_ERR_NOMEM, "codec %s: out of memory", ops->name);
    if (config)
        owned->config = *config;
    owned->codec.ops = ops;
    owned->codec.cfg = &owned->config;
    *codec_out = &owned->codec;
    return TDL_OK;
}

void codec_destroy(codec_t *codec)
{
    /* codec is the first member of codec_owned_t */
    free(codec);
}

const char *codec_round_name(codec_round_t round)
{
    return (unsigned)round < CODEC_ROUND_COUNT ? codec_round_names[round] : "unknown";
}

tdl_status_t codec_round_parse(const char *text, codec_round_t *round_out)
{
    for (int i = 0; i < CODEC_ROUND_COUNT; i++) {
        if (text && strcmp(text, codec_round_names[i]) == 0) {
            *round_out = (codec_round_t)i;
            return TDL_OK;
        }
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "unknown rounding '%s' (choose from %s)",
                           text ? text : "(null)", "default|nearest|stochastic");
}

uint64_t codec_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t codec_stream_make(uint64_t group_id, uint64_t seq, uint64_t chunk)
{
    return codec_mix64(codec_mix64(group_id ^ seq) ^ chunk);
}

uint64_t codec_where_stream(const codec_where_t *w)
{
    uint64_t who = ((uint64_t)(uint32_t)w->rank << 32) | (uint32_t)w->hop;
    return codec_mix64(w->stream ^ codec_mix64(who));
}

bool codec_cpu_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

tdl_status_t codec_check_args(const char *name, const void *in, const void *out, size_t n)
{
    if (n > 0 && (!in || !out))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "codec %s: NULL %s buffer for %zu values", name,
                               in ? "output" : "input", n);
    return TDL_OK;
}

tdl_status_t codec_check_size(const char *name, size_t in_bytes, size_t want, size_t n)
{
    if (in_bytes != want)
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "codec %s: encoded data of %zu values is %zu bytes, expected %zu",
                               name, n, in_bytes, want);
    return TDL_OK;
}

tdl_status_t codec_check_where(const char *name, const void *cfg, const codec_where_t *w)
{
    if (codec_cfg_stochastic(cfg) && !w)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "codec %s: stochastic rounding needs where the encoding happens",
                               name);
    return TDL_OK;
}
