/* codec: gradient codecs for the compressed all-reduce, one file per format, chosen by name.
 *
 * A codec turns n f32 values into bytes and back. Every encoding is a pure function of the
 * values, the codec's configuration and where the encoding happens (codec_where_t), so runs are
 * reproducible and every rank that decodes the same bytes gets the same floats. The all-reduce
 * calls encode for a rank's own values, decode_accumulate_encode (out = encode(local +
 * decode(in))) at every accumulating hop, and decode or decode_accumulate for the result.
 * Layouts, rounding and worked examples: doc/codec_formats.md. */
#ifndef TIDAL_CODEC_H
#define TIDAL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where an encoding happens: stochastic rounding draws its random bits from the Philox stream
 * (seed, codec_where_stream(w)), word i for value i; dynamiq's correlated rounding also uses the
 * collective and the values' place in its vector, which every member sees alike. */
typedef struct codec_where {
    uint64_t seed;     /* run seed */
    int rank;          /* world rank encoding */
    int hop;           /* 0 for a rank's own values, +1 per accumulation */
    int contributions; /* how many ranks' values the data sums (hop + 1 on a ring) */
    int group_size;    /* members of the all-reduce (0: unknown, a stand-alone encoding) */
    uint64_t stream;   /* collective identity and chunk, mixed: codec_stream_make() */
    uint64_t collective; /* collective identity alone: codec_stream_make(group, seq, 0) */
    uint64_t offset;   /* index of the first value in the collective's vector */
} codec_where_t;

typedef enum {
    CODEC_ROUND_DEFAULT = 0, /* the format's own: nearest for the float, MX and int8 formats,
                              * (correlated) stochastic for dynamiq */
    CODEC_ROUND_NEAREST,     /* round to nearest, ties to even */
    CODEC_ROUND_STOCHASTIC,  /* unbiased: up with probability equal to the distance from below */
    CODEC_ROUND_COUNT
} codec_round_t;

/* dynamiq's design choices, each of which can be switched off to measure what it brings
 * (bench codec-vnmse's ablation table, doc/dynamiq.md). */
enum {
    CODEC_DQ_INDEPENDENT = 1u << 0, /* independent rounding on every rank, not correlated */
    CODEC_DQ_UNIFORM = 1u << 1,     /* uniform levels instead of the fitted tables */
    CODEC_DQ_FIXED_WIDTH = 1u << 2, /* the same width for every group of a super-group */
    CODEC_DQ_FLAT_HOPS = 1u << 3,   /* the same budget at every hop (no partial-sum budget) */
    CODEC_DQ_FLAT_SCALE = 1u << 4,  /* one scale per super-group (no group exponents) */
    CODEC_DQ_EVEN_SPLIT = 1u << 5,  /* the same budget for every super-group */
};

/* Options every format reads; a zeroed struct (or a NULL cfg) is the default. */
typedef struct codec_config {
    codec_round_t round;
    double bits;    /* dynamiq: average bits per coordinate on the wire, metadata included,
                     * over an all-reduce (0: 5.0) */
    unsigned flags; /* dynamiq: CODEC_DQ_* ablations (0: the full design) */
} codec_config_t;

/* cfg is the codec's configuration (codec_t.cfg; NULL means the defaults). Sizes are in bytes,
 * counts in values. Outputs are written only on success. Decoding checks in_bytes against n and
 * the layout and answers TDL_ERR_CORRUPT, naming what is wrong, without reading past in_bytes. */
typedef struct codec_ops {
    const char *name;
    /* The bound on encoded size; for the formats here it is the exact size. */
    size_t (*max_encoded_bytes)(const void *cfg, size_t n);
    tdl_status_t (*encode)(const void *cfg, const codec_where_t *w, const float *in, size_t n,
                           void *out, size_t *out_bytes);
    tdl_status_t (*decode)(const void *cfg, const void *in, size_t in_bytes, float *out, size_t n);
    /* acc += decode(in) */
    tdl_status_t (*decode_accumulate)(const void *cfg, const void *in, size_t in_bytes, float *acc,
                                      size_t n);
    /* out = encode(local + decode(in)) in one pass, byte for byte the same as the two steps. */
    tdl_status_t (*decode_accumulate_encode)(const void *cfg, const codec_where_t *w,
                                             const void *in, size_t in_bytes, const float *local,
                                             size_t n, void *out, size_t *out_bytes);
    /* Encoded bits per value including all metadata, for n values (n == 0: the limit). */
    double (*bits_per_coord)(const void *cfg, size_t n);
} codec_ops_t;

/* NULL if unknown. */
const codec_ops_t *codec_find(const char *name);

/* dynamiq's parameters for one encoding, derived from its configuration and where it happens,
 * for the GPU kernels (cuda/dynamiq.cu), which must produce the same bytes as the CPU. */
typedef struct codec_dq_params {
    int code;          /* budget in 1/256 bits per value */
    int levels;        /* 0 fitted tables, 1 uniform */
    unsigned flags;    /* CODEC_DQ_* */
    int stochastic;    /* 1: stochastic rounding, 0: nearest */
    uint32_t key, offset; /* random words: fmix32((a + i) * 0x9E3779B9 + key) + offset */
    uint64_t a0;       /* absolute index of the first value */
} codec_dq_params_t;
void codec_dynamiq_params(const void *cfg, const codec_where_t *w, codec_dq_params_t *out);
/* Encoded size of n values at budget `code`. */
size_t codec_dynamiq_size(size_t n, int code);
/* The level tables of kind 0 (fitted) or 1 (uniform): [9][256] floats each, level k of width
 * w at [w * 256 + k], 1 / (level k+1 - level k) likewise in inv_gap. */
void codec_dynamiq_tables(int kind, const float **levels, const float **inv_gap);
/* The table's formats in order, '|'-separated (a literal: parameters take it as choices), and
 * every name codec_find takes: those and the short MX names. */
#define CODEC_NAMES                                                                                \
    "f32|bf16|fp16|mxfp8_e4m3|mxfp8_e5m2|mxfp6_e3m2|mxfp6_e2m3|mxfp4_e2m1|int8|int8_rht|dynamiq"
#define CODEC_CHOICES CODEC_NAMES "|mxfp8|mxfp6|mxfp4"
/* CODEC_NAMES. */
const char *codec_names(void);

/* A format with its configuration, as the all-reduce adapter holds it. */
typedef struct codec {
    const codec_ops_t *ops;
    const void *cfg;
} codec_t;

/* config may be NULL (defaults). Unknown name: TDL_ERR_NOT_FOUND listing the names. */
tdl_status_t codec_create(const char *name, const codec_config_t *config, codec_t **codec_out);
void codec_destroy(codec_t *codec);

const char *codec_round_name(codec_round_t round); /* "nearest", "stochastic" */
tdl_status_t codec_round_parse(const char *text, codec_round_t *round_out);

/* A well-mixed 64-bit hash (SplitMix64's finalizer). */
uint64_t codec_mix64(uint64_t x);
/* codec_where_t.stream for chunk `chunk` of collective (group id, sequence number). */
uint64_t codec_stream_make(uint64_t group_id, uint64_t seq, uint64_t chunk);
/* The Philox stream stochastic rounding uses: (stream, rank, hop) mixed. */
uint64_t codec_where_stream(const codec_where_t *w);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_CODEC_H */
