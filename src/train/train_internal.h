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
/* The whole configuration as the JSON of the attribute config_json, malloc'd (NULL: no memory). */
char *train_config_json(const dit_config_t *c);

/* Reads /<group> of the file into base (m's layout: one tensor per parameter) and refuses a NaN
 * or Inf, naming the tensor and the element: how every loader, verify and diff read tensors. */
tdl_status_t train_tensors_read(const char *path, const char *group, const dit_model_t *m,
                                float *base);

/* The training state of a checkpoint (the attributes of /train, and the root step), each checked:
 * steps from 0 to TRAIN_STEPS_MAX, no more optimizer steps than steps, a data cursor >= 0, a loss
 * history of 0 to TRAIN_LOSS_HISTORY rows, the root step equal to /train's. What the resume and
 * verify read. */
#define TRAIN_STEPS_MAX 1000000000000LL /* the most --steps allows */
typedef struct train_ckpt_attrs {
    int64_t step, adamw_step, epoch, pos, rows;
} train_ckpt_attrs_t;
tdl_status_t train_checkpoint_attrs_read(const char *path, train_ckpt_attrs_t *out);

#endif /* TIDAL_TRAIN_INTERNAL_H */
