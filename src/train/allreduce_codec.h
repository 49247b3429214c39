/* tidal train's compressed gradient all-reduce (src/train/allreduce_codec.c): the adapter that
 * puts a src/codec format behind gfc's codec hook. A header of its own, so that a program that
 * only all-reduces with a codec (bench/allreduce_link) needs gfc and this, not the trainer's
 * train.h (which includes it). */
#ifndef TIDAL_TRAIN_ALLREDUCE_CODEC_H
#define TIDAL_TRAIN_ALLREDUCE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "gfc/gfc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A src/codec format ("bf16", "mxfp8", "dynamiq", ...) behind gfc's codec hook. stochastic
 * forces stochastic rounding; otherwise the format rounds its own way (dynamiq: correlated
 * stochastic rounding, the others: to nearest). */
typedef struct train_codec train_codec_t;
tdl_status_t train_codec_create(const char *name, bool stochastic, uint64_t seed,
                                train_codec_t **out);
/* The same with every codec option (bits for dynamiq, ablation flags): config may be NULL. */
tdl_status_t train_codec_create_config(const char *name, const void *config, uint64_t seed,
                                       train_codec_t **out);
const gfc_codec_t *train_codec_hook(const train_codec_t *codec);
/* Error feedback over a vector of n values: from now on every encoding this rank makes adds its
 * error (input minus what the encoding decodes to) to a residual at the values' offset. */
tdl_status_t train_codec_error_feedback(train_codec_t *codec, size_t n);
/* From now on the codec's random streams are keyed by this training step instead of gfc's
 * collective count, so a resumed run rounds exactly as an uninterrupted one. */
void train_codec_set_step(train_codec_t *codec, int64_t step);
/* grads += residual, then residual = 0 (no-op without error feedback). */
void train_codec_apply_residual(train_codec_t *codec, float *grads, size_t n);
/* The residual (NULL without error feedback), for checkpoints. */
float *train_codec_residual(train_codec_t *codec, size_t *n_out);
double train_codec_bits_per_coord(const train_codec_t *codec, size_t n);
void train_codec_free(train_codec_t *codec);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_TRAIN_ALLREDUCE_CODEC_H */
