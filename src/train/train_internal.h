/* train internals shared by the trainer and the weights files; not installed. */
#ifndef TIDAL_TRAIN_INTERNAL_H
#define TIDAL_TRAIN_INTERNAL_H

#include "ckpt/ckpt.h"
#include "train/train.h"

/* One ckpt tensor per parameter of m, with data at base + offset; free() the array. */
ckpt_tensor_t *train_tensors_of(const dit_model_t *m, float *base);
/* The model configuration as root attributes, one per field: fills attrs and returns how many
 * (TRAIN_CONFIG_ATTRS). */
#define TRAIN_CONFIG_ATTRS 12
int train_config_attrs(const dit_config_t *c, ckpt_attr_t *attrs);

#endif /* TIDAL_TRAIN_INTERNAL_H */
