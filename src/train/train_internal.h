/* train internals shared by the trainer, its checkpoint files and the weights files; not
 * installed. */
#ifndef TIDAL_TRAIN_INTERNAL_H
#define TIDAL_TRAIN_INTERNAL_H

#include "ckpt/ckpt.h"
#include "train/train.h"

/* ==== the trainer (src/train/trainer.c), whose state the checkpoint files copy and restore ==== */

struct train_trainer {
    train_opts_t opts;
    dit_model_t *model;
    float *ema;
    train_adamw_t opt;
    train_dataset_t *data;
    train_dataset_t *val; /* held-out images; NULL: data */
    train_sampler_t sampler;
    int resolution;
    int64_t step;
    uint64_t *batch_idx;                               /* [batch] */
    float *x0, *noise, *x_t, *target, *out, *dout, *t; /* [micro_batch, ...] */
    int *y;
    struct dit_diffusion *diffusion;        /* objective ddpm: the process (NULL: rectified flow) */
    int *tk;                                /* objective ddpm: each sample's diffusion step */
    train_codec_t *codec;                   /* NULL: exact f32 all-reduce */
    float loss_hist[TRAIN_LOSS_HISTORY][2]; /* (step, loss) of the last steps, a ring */
    int64_t loss_count;                     /* losses recorded since the start of training */
};

#define TRAIN_STREAM_SAMPLE 0x73616d706c65ull /* "sample": noise, t and label dropout */
#define TRAIN_STREAM_VAL    0x76616cull       /* "val": noise and t of the held-out images */

/* ==== weights files (src/train/weights_io.c) ================================================ */

/* One ckpt tensor per parameter of m, with data at base + offset; free() the array. */
ckpt_tensor_t *train_tensors_of(const dit_model_t *m, float *base);
/* The same for any list of tensors (the VAE's). */
ckpt_tensor_t *train_tensors_of_infos(const dit_param_info_t *infos, int n, float *base);
/* The model configuration as root attributes, one per field: fills attrs and returns how many
 * (TRAIN_CONFIG_ATTRS). */
#define TRAIN_CONFIG_ATTRS 13
int train_config_attrs(const dit_config_t *c, ckpt_attr_t *attrs);
/* The whole configuration as the JSON of the attribute config_json, malloc'd (NULL: no memory). */
char *train_config_json(const dit_config_t *c);

/* Reads /<group> of the file into base (m's layout: one tensor per parameter) and refuses a NaN
 * or Inf, naming the tensor and the element: how every loader, verify and diff read tensors. */
tdl_status_t train_tensors_read(const char *path, const char *group, const dit_model_t *m,
                                float *base);

/* ==== checkpoints (src/train/checkpoint.c, ckpt_dir.c, resume.c) =========================== */

/* The training state of a checkpoint (the attributes of /train, and the root step), each checked:
 * steps from 0 to TRAIN_STEPS_MAX, no more optimizer steps than steps, a data cursor >= 0, a loss
 * history of 0 to TRAIN_LOSS_HISTORY rows, the root step equal to /train's. What the resume and
 * verify read. */
#define TRAIN_STEPS_MAX 1000000000000LL /* the most --steps allows */
typedef struct train_ckpt_attrs {
    int64_t step, adamw_step, epoch, pos, rows;
} train_ckpt_attrs_t;
tdl_status_t train_checkpoint_attrs_read(const char *path, train_ckpt_attrs_t *out);

/* Frees a state of train_checkpoint_capture (NULL: nothing). */
void train_ckpt_state_free(train_ckpt_state_t *cs);
/* Writes the checkpoint at path from the trainer's own arrays, without the copy that
 * train_checkpoint_capture makes for the background writer: for a write in the foreground.
 * residual_sum as there. */
tdl_status_t train_checkpoint_write_now(train_trainer_t *tr, int world_size,
                                        const float *residual_sum, const char *path);
/* Checkpoint files in dir, newest step first: "ckpt-<step>.h5". */
int train_ckpt_dir_list(const char *dir, int64_t *steps, int max);
/* After dir/ckpt-<step>.h5 is on disk: "latest" names it, and only the newest `keep` stay. */
tdl_status_t train_ckpt_dir_publish(const char *dir, const char *path, int keep);

#endif /* TIDAL_TRAIN_INTERNAL_H */
