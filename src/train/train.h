/* tidal train: image data sets, a reproducible data order, and (later) the optimizer and the
 * elastic data-parallel trainer. Each part has its own section below. */
#ifndef TIDAL_TRAIN_H
#define TIDAL_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "core/core.h"
#include "dit/dit.h"
#include "dit/vae.h"
#include "gfc/gfc.h"
#include "train/allreduce_codec.h" /* train_codec_*: the compressed gradient all-reduce */

#ifdef __cplusplus
extern "C" {
#endif

/* ==== data sets (src/train/data.c, src/train/data_hdf5.c; formats in doc/data.md) ========== */

/* N images held in memory as uint8 [N, C, H, W] (C = 1 grayscale or 3 RGB), with an int32
 * label in [0, num_classes) each. Read-only once opened: any number of threads may call
 * train_dataset_get on one data set at the same time. */
typedef struct train_dataset train_dataset_t;

/* Where Debian's package 'dataset-fashion-mnist' puts the IDX files. */
#define TRAIN_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Fashion-MNIST from its IDX files in `dir` (NULL: TRAIN_FMNIST_DIR): train-images-idx3-ubyte
 * and train-labels-idx1-ubyte for the training split, t10k-* for the test split, each either
 * gzip-compressed (".gz", looked for first) or plain. The 28x28 images are served padded to
 * 32x32, so train_dataset_get accepts resolutions 32, 64 and 128. */
tdl_status_t train_dataset_open_fmnist(const char *dir, bool train_split, train_dataset_t **out);

/* A user data set in one HDF5 file: /images uint8 [N, H, W] or [N, C, H, W] with H == W,
 * /labels integer [N], optional root attribute num_classes (default: max label + 1). Images of
 * size S are served at resolutions S, 2S and 4S. */
tdl_status_t train_dataset_open_hdf5(const char *path, train_dataset_t **out);

/* A data set from memory, copying pixels uint8 [n, channels, height, width] and labels [n];
 * every label must lie in [0, num_classes). For synthetic data and tests; the loaders above
 * end here too. Images are served at resolutions height, 2 * height and 4 * height. */
tdl_status_t train_dataset_create(size_t n, int channels, int height, int width, int num_classes,
                                  const uint8_t *pixels, const int32_t *labels,
                                  train_dataset_t **out);

/* A latent data set (tidal encode's output, doc/data.md): latents float [n, channels, height,
 * width], as the VAE's encoder made them (already scaled by its scaling_factor), and labels [n];
 * it takes both arrays (malloc'd), on failure too. Served as they are, at resolution height. */
tdl_status_t train_dataset_create_latents(size_t n, int channels, int height, int width,
                                          int num_classes, float *latents, int32_t *labels,
                                          train_dataset_t **out);
/* Whether ds holds latents rather than images. */
bool train_dataset_is_latent(const train_dataset_t *ds);
/* Image index's stored pixels, uint8 [C, H, W] (train_dataset_shape), not padded; NULL for a
 * latent data set or an index out of range. */
const uint8_t *train_dataset_pixels(const train_dataset_t *ds, size_t index);
/* The label of item index, or -1 for an index out of range. */
int32_t train_dataset_label(const train_dataset_t *ds, size_t index);

void train_dataset_free(train_dataset_t *ds);

size_t train_dataset_count(const train_dataset_t *ds);
int train_dataset_num_classes(const train_dataset_t *ds);
/* The names of the classes, label 0 first (num_classes of them), or NULL when the data set has
 * none: Fashion-MNIST's are train_fmnist_class_names; synthetic and HDF5 data sets have none. */
const char *const *train_dataset_class_names(const train_dataset_t *ds);
#define TRAIN_FMNIST_CLASSES 10
extern const char *const train_fmnist_class_names[TRAIN_FMNIST_CLASSES];
int train_dataset_channels(const train_dataset_t *ds);
/* Height and width of the images as stored (28 x 28 for Fashion-MNIST). */
void train_dataset_shape(const train_dataset_t *ds, int *height_out, int *width_out);
/* The smallest resolution train_dataset_get accepts (32 for Fashion-MNIST, S for HDF5); the
 * others are twice and four times it. */
int train_dataset_resolution(const train_dataset_t *ds);

/* Image `index` as float [C, resolution, resolution] scaled to [-1, 1] (v / 127.5 - 1), the
 * stored image padded with background (-1) to the base resolution, then upsampled by nearest
 * neighbour (each pixel replicated 2x2 or 4x4). label_out may be NULL. An index out of range or
 * a resolution not listed above is TDL_ERR_INVALID_ARG. */
tdl_status_t train_dataset_get(const train_dataset_t *ds, size_t index, int resolution,
                               float *img_out, int *label_out);

/* ==== latent data sets in HDF5 (src/train/data_hdf5.c, doc/data.md) ====================== */

/* What tidal encode records with the latents, as root attributes. */
typedef struct train_latent_info {
    int channels, height, width; /* of one latent */
    double scaling_factor;       /* already applied */
    const char *sample;          /* "mean" or "sample" */
    uint64_t seed;               /* of the samples' eps */
    int resolution;              /* of the images encoded */
    const char *source;          /* the data set they came from */
} train_latent_info_t;

typedef struct train_latent_writer train_latent_writer_t;

/* Starts path (as "<path>.tmp.<pid>", renamed over path by close) holding /latents float32 [n,
 * C, H, W] and /labels int32 [n], to be filled by put. */
tdl_status_t train_latent_writer_open(const char *path, size_t n, const train_latent_info_t *info,
                                      train_latent_writer_t **out);
/* Latents first to first + count - 1 and their labels. */
tdl_status_t train_latent_writer_put(train_latent_writer_t *w, size_t first, size_t count,
                                     const float *latents, const int32_t *labels);
/* Writes the root attributes (num_classes among them), closes and renames the file into place;
 * frees w, on failure too (the temporary file is removed then). */
tdl_status_t train_latent_writer_close(train_latent_writer_t *w, int num_classes);
/* Removes the temporary file and frees w. */
void train_latent_writer_abort(train_latent_writer_t *w);

/* ==== images for the VAE's encoder (src/train/images.c, doc/vae.md) ====================== */

/* uint8 [channels, height, width], planar. */
typedef struct train_image {
    int channels, height, width;
    uint8_t *pixels;
} train_image_t;

void train_image_free(train_image_t *img);
/* A PNG file as 8-bit RGB (3 channels), as PIL's convert("RGB") makes it: palette expanded, gray
 * replicated, alpha dropped, 16 bits cut to 8. */
tdl_status_t train_image_read_png(const char *path, train_image_t *out);
/* PIL's Image.resize to ow x oh with its BICUBIC (bicubic true) or BOX filter, antialiased, in
 * its 8-bit fixed-point arithmetic: horizontal pass, then vertical, each rounded to uint8. */
tdl_status_t train_image_resize(const train_image_t *in, int ow, int oh, bool bicubic,
                                train_image_t *out);
/* The reference DiT's center_crop_arr: BOX halving while the short side >= 2 * res, BICUBIC to a
 * short side of res (the long one round(side * res / short)), then the centre res x res into
 * out [channels, res, res]. */
tdl_status_t train_image_center_crop(const train_image_t *in, int res, uint8_t *out);

/* ==== the VAE's weights in HDF5 (src/train/vae_io.c, doc/vae.md) ======================== */

/* /model/<diffusers name> float32 for every tensor vae holds, root attributes kind "vae",
 * parts, the configuration's fields (block_out_channels as "128,256,512,512"), written as
 * ckpt_weights_write does (atomic, checksummed). */
tdl_status_t train_vae_save(const char *path, const dit_vae_t *vae);
/* The configuration and the halves (DIT_VAE_*) a VAE weights file holds. */
tdl_status_t train_vae_read_config(const char *path, dit_vae_config_t *config_out, int *parts_out);
/* A VAE of the halves in parts from the file: its configuration from the attributes, every
 * tensor of those halves by name and shape (missing: TDL_ERR_NOT_FOUND; misshapen:
 * TDL_ERR_MISMATCH), any dataset that is no tensor of the VAE refused (TDL_ERR_MISMATCH), NaN
 * and Inf refused. */
tdl_status_t train_vae_load(const char *path, int parts, dit_vae_t **vae_out);

/* ==== data order (src/train/sampler.c) ====================================================== */

/* Visits 0..n-1 once per epoch in a shuffled order that is a pure function of (seed, epoch):
 * a Fisher-Yates shuffle driven by tdl_rng with stream = epoch. Every rank runs the same
 * sampler, draws the whole global batch and takes its share of it, so the order and the
 * global batch do not depend on how many ranks train; a group that shrinks or grows resumes
 * from the saved cursor (epoch, pos) in exactly the same place. The fields are read-only. */
typedef struct train_sampler {
    uint64_t seed;
    uint64_t n;
    uint64_t epoch;      /* epoch of the next index */
    uint64_t pos;        /* position of the next index in the epoch's order, always < n */
    uint64_t *perm;      /* the order of epoch perm_epoch: n entries, allocated once */
    uint64_t perm_epoch; /* which epoch perm holds; UINT64_MAX when none */
} train_sampler_t;

/* Starts at epoch 0, position 0; n >= 1. */
tdl_status_t train_sampler_init(train_sampler_t *s, uint64_t n, uint64_t seed);
void train_sampler_free(train_sampler_t *s);
/* The next index; after the last one of an epoch the sampler moves to the next epoch. */
uint64_t train_sampler_next(train_sampler_t *s);
/* The next `count` indices into out, the same as `count` calls of train_sampler_next. */
void train_sampler_take(train_sampler_t *s, uint64_t *out, size_t count);
/* Where the next index comes from: save these two to resume exactly. */
void train_sampler_cursor(const train_sampler_t *s, uint64_t *epoch_out, uint64_t *pos_out);
/* Moves to (epoch, pos), pos <= n; pos == n is the start of the next epoch. */
tdl_status_t train_sampler_seek(train_sampler_t *s, uint64_t epoch, uint64_t pos);

/* ==== optimizer (src/train/optim.c) ======================================================= */

/* AdamW (Loshchilov & Hutter) with decoupled weight decay, as torch.optim.AdamW. */
typedef struct train_adamw {
    size_t n;
    float *m, *v;        /* first and second moments */
    uint64_t step;       /* updates applied so far */
    float beta1, beta2, eps, weight_decay;
} train_adamw_t;

tdl_status_t train_adamw_init(train_adamw_t *opt, size_t n, float beta1, float beta2, float eps,
                              float weight_decay);
void train_adamw_free(train_adamw_t *opt);
void train_adamw_step(train_adamw_t *opt, float *params, const float *grads, float lr);
/* Linear warm-up from lr / warmup to lr over the first `warmup` steps, then constant. */
float train_lr_at(uint64_t step, float lr, uint64_t warmup);
/* Scales grads so that their global L2 norm is at most max_norm (<= 0: no clipping); returns the
 * norm before clipping (NaN or Inf when a gradient is not finite). */
double train_grad_clip(float *grads, size_t n, double max_norm);
/* ema = decay * ema + (1 - decay) * params */
void train_ema_update(float *ema, const float *params, size_t n, float decay);

/* ==== the data-parallel trainer (src/train/trainer.c) ====================================== */

/* What a training run is. The global batch and the data order depend only on these, never on
 * how many ranks share the work: each rank takes a contiguous share of every global batch and
 * runs it in micro-batches, and gradients are summed over the group. */
typedef struct train_opts {
    const char *model;      /* DiT configuration name (dit_config_named) */
    const char *data;       /* "fmnist" or the path of an HDF5 data set */
    bool latent;            /* the data set must hold latents (tidal encode's /latents) */
    int resolution;         /* 0: the data set's base resolution */
    int64_t steps;
    int batch;              /* global batch, images per step */
    int micro_batch;        /* images per forward pass on one rank */
    float lr, weight_decay, clip, ema_decay;
    int64_t warmup;
    uint64_t seed;
    const char *allreduce;  /* gradient codec: "f32" (exact, no codec), "bf16", "mxfp8_e4m3", ... */
    int allreduce_round;    /* codec_round_t: 0 the format's own, 1 nearest, 2 stochastic */
    double allreduce_bits;  /* dynamiq's bits per value (0: its default, 5) */
    bool allreduce_ef;      /* error feedback: each rank re-adds its own encoding errors */
    const char *dump_grads; /* directory for grads-<step>-rank<r>.h5 (NULL: none) */
    int64_t dump_every;     /* steps between gradient dumps */
    const char *device;     /* where the model runs: "cpu" (NULL too) or "cuda" (dit_backend_open) */
    dit_objective_t objective; /* rectified flow (the default) or the Gaussian diffusion */
    int learn_sigma;           /* 0: the configuration's; 1: on; -1: off */
} train_opts_t;

typedef struct train_trainer train_trainer_t;

/* Losses a trainer remembers (and a checkpoint keeps in /train/loss_history). */
#define TRAIN_LOSS_HISTORY 1024

/* Builds the model (reference initialization from opts->seed), the optimizer, EMA weights, the
 * data set and its sampler. */
tdl_status_t train_trainer_create(const train_opts_t *opts, train_trainer_t **out);
/* The same on a data set already open; the trainer owns it from here on (also on failure). */
tdl_status_t train_trainer_create_with_data(const train_opts_t *opts, train_dataset_t *data,
                                            train_trainer_t **out);
void train_trainer_free(train_trainer_t *tr);
/* One optimizer step over one global batch. group == NULL trains alone; otherwise every member
 * calls it with the same step and group, and gets bit-identical gradients. A step whose gradient
 * is not finite is skipped (skipped_out = true) and reported, never applied. A step that fails
 * (a member died in one of its collectives) leaves the state as it was before it, but for an
 * error-feedback residual, so it can be done again on any membership. */
tdl_status_t train_trainer_step(train_trainer_t *tr, gfc_group_t *group, double *loss_out,
                                bool *skipped_out);
/* Elastic membership, at a step boundary: every member of group calls it, and afterwards each
 * holds member root's (a group index) training state: weights, EMA weights, AdamW moments and
 * step, the step counter, the data cursor and the loss history, so a joining rank continues the
 * run where the group stands. An error-feedback residual stays per rank: a member whose step
 * differed from root's (a joiner) starts from zeros, the others keep theirs. A member with
 * another model or run (seed, batch, data, hyperparameters, codec) is TDL_ERR_MISMATCH on every
 * member before any array moves; a transfer that fails later leaves the receivers to sync again. */
tdl_status_t train_trainer_sync(train_trainer_t *tr, gfc_group_t *group, int root);
/* Drops this rank's error-feedback residual (zeros; nothing without error feedback): after a
 * member died, whose share of the unsent gradients is lost with it, the survivors start their
 * residuals again together. */
void train_trainer_drop_residual(train_trainer_t *tr);
int64_t train_trainer_steps_done(const train_trainer_t *tr);
/* The loss of the last step done (NaN before one), as train_trainer_step answered it. */
double train_trainer_last_loss(const train_trainer_t *tr);
float train_trainer_lr(const train_trainer_t *tr);
dit_model_t *train_trainer_model(train_trainer_t *tr);
const float *train_trainer_ema(const train_trainer_t *tr);
/* The class names of the data set when it names every class of the model, NULL otherwise. */
const char *const *train_trainer_class_names(const train_trainer_t *tr);
/* The rectified-flow loss of the current weights (ema: of the EMA weights, the ones sampled
 * from) on the first `count` images of the held-out set (Fashion-MNIST's test split; an HDF5 data
 * set's own images), each with a fixed time, noise and label from (seed, image), so every run
 * with the same seed is scored on the same problem. The images are split among the group's
 * members and the loss summed over it: every member gets the same value. */
tdl_status_t train_trainer_val_loss(train_trainer_t *tr, gfc_group_t *group, int count, bool ema,
                                    double *loss_out);

/* ==== weights files (src/train/weights_io.c, format in doc/checkpoint.md) =================== */

/* Writes /model and, when ema != NULL, /ema under the PyTorch names, with the configuration as
 * attributes, and class_names (may be NULL: none) as the attribute TRAIN_CLASS_NAMES_ATTR;
 * atomic (a crash leaves the old file or none). */
tdl_status_t train_weights_save(const char *path, const dit_model_t *model, const float *ema,
                                int64_t step, const char *const *class_names);
/* The model configuration the file's root attributes describe, every one checked before
 * anything is allocated: format_version present and one this tidal reads, model a name, each
 * size within the limits of dit_config_check, learn_sigma (0 or 1), objective (rf or ddpm) and
 * t_scale (when present) tidal's; absent, learn_sigma is 0 and the objective rf.
 * Refusals (TDL_ERR_CORRUPT; TDL_ERR_MISMATCH for a newer format_version or another kind of DiT)
 * name the file and the attribute. What every loader reads a configuration with. */
tdl_status_t train_weights_config(const char *path, dit_config_t *config_out);
/* Whether src/serve can serve the model: rectified flow (Euler, Heun) or the Gaussian diffusion
 * (DDPM, DDIM), learn_sigma or not; TDL_ERR_UNSUPPORTED says why not. */
tdl_status_t train_config_servable(const dit_config_t *config);
/* Builds the model the file describes (train_weights_config; sized for max_batch images of up to
 * max_resolution, 0: its training resolution) and loads group "model" or "ema", checking every
 * shape and how each dataset is stored first, then refusing NaN and Inf (train_tensors_read). */
tdl_status_t train_weights_load(const char *path, const char *group, int max_batch,
                                int max_resolution, dit_model_t **model_out);
/* The same on a backend (dit_backend_open; NULL: the CPU), which the model owns from then on;
 * closed here on failure. */
tdl_status_t train_weights_load_on(const char *path, const char *group, int max_batch,
                                   int max_resolution, struct dit_backend *backend,
                                   dit_model_t **model_out);
/* The same into a model for serving only (dit_model_create_inference: no gradients, one
 * block's activations), what tidal serve and tidal run's serving ranks load; a model
 * train_config_servable refuses is refused. */
tdl_status_t train_weights_load_inference(const char *path, const char *group, int max_batch,
                                          int max_resolution, struct dit_backend *backend,
                                          dit_model_t **model_out);

/* ==== importing reference checkpoints (src/train/import.c, doc/checkpoint.md) ============ */

typedef struct train_import_opts {
    const char *model; /* a reference configuration ("DiT-S/2") the tensors must be; NULL */
    int heads;         /* attention heads (0: from model, or the reference size that fits) */
    int num_classes;   /* 0: the label table's rows less the null class */
    dit_objective_t objective; /* what the model predicts: the reference's are ddpm */
} train_import_opts_t;

/* Reads a reference DiT state_dict (facebookresearch/DiT models.py names) from the safetensors
 * file src (F32, F16 or BF16) and writes it to dst as a weights file, the tensors as /model and
 * /ema. The configuration comes from the shapes (patch, channels, hidden size, depth, mlp ratio,
 * classes, learn_sigma, input size from pos_embed), the heads from opts or the reference size of
 * that hidden size and depth. Every tensor of the model must be there with its shape, no other
 * besides pos_embed, which must be the sin-cos embedding tidal computes (within 1e-6), and no
 * value NaN or Inf; refusals name the tensor and both shapes (TDL_ERR_MISMATCH, TDL_ERR_NOT_FOUND;
 * TDL_ERR_INVALID_ARG when --heads is needed). summary (may be NULL) gets one line. */
tdl_status_t train_import_safetensors(const char *src, const char *dst,
                                      const train_import_opts_t *opts, char *summary, size_t size);

/* Class names: the string root attribute class_names, a JSON array of num_classes strings, label
 * 0 first. Each name is 1 to TRAIN_CLASS_NAME_MAX bytes of printable UTF-8 (no control
 * characters), without space at either end, not a number nor "class N" (which name classes by
 * number), and no two names are equal ignoring ASCII case: a name picks one class. Files
 * without the attribute have no names. */
#define TRAIN_CLASS_NAMES_ATTR "class_names"
#define TRAIN_CLASS_NAME_MAX   64
/* The attribute's JSON for num_classes names, malloc'd; NULL: no memory. */
char *train_class_names_json(const char *const *names, int num_classes);
/* Parses and checks the attribute's text `json` of the file `path` (for messages) for a model of
 * num_classes classes: *names_out is one malloc'd block (free() it) of num_classes pointers to
 * the names. A text that breaks a rule above is TDL_ERR_CORRUPT naming the file, the attribute
 * and what is wrong. */
tdl_status_t train_class_names_parse(const char *path, const char *json, int num_classes,
                                     char ***names_out);
/* The class names of a weights file or checkpoint (train_class_names_parse), *names_out NULL
 * when it has none. train_weights_config checks them too: every loader refuses a forged one. */
tdl_status_t train_weights_class_names(const char *path, int num_classes, char ***names_out);

/* ==== training checkpoints (src/train/checkpoint.c, ckpt_dir.c, ckpt_writer.c, resume.c;
 * format in doc/checkpoint.md) ============================================================== */

/* Model, EMA, AdamW moments, step, data cursor and configuration in one HDF5 file. Per-sample
 * randomness is keyed by (seed, step, position), so nothing else is needed to continue bit for
 * bit. */
tdl_status_t train_checkpoint_save(train_trainer_t *tr, const char *path, int world_size);
/* Refuses (TDL_ERR_MISMATCH) a file from another model, seed or global batch. The world size
 * may differ: the global batch and the data order do not depend on it. */
tdl_status_t train_checkpoint_restore(train_trainer_t *tr, const char *path);
/* The same; residual: this rank takes the saved sum of the error-feedback residuals (one rank
 * should), else its residual starts at zero. */
tdl_status_t train_checkpoint_restore_rank(train_trainer_t *tr, const char *path, bool residual);
/* The last losses, oldest first, as (step, loss): up to max rows; answers the count. */
int train_trainer_loss_history(const train_trainer_t *tr, float (*out)[2], int max);

/* A copy of everything a checkpoint holds, taken at a step boundary (the only stall). */
typedef struct train_ckpt_state train_ckpt_state_t;
/* Into *state (allocated when NULL, reused otherwise); residual_sum: the error-feedback
 * residuals summed over the ranks (NULL: none saved). */
tdl_status_t train_checkpoint_capture(train_trainer_t *tr, int world_size,
                                      const float *residual_sum, train_ckpt_state_t **state);
tdl_status_t train_checkpoint_write(const train_ckpt_state_t *state, const char *path);

/* A background checkpoint writer: one thread, one checkpoint in flight. */
typedef struct train_ckpt_writer train_ckpt_writer_t;
tdl_status_t train_ckpt_writer_create(train_ckpt_writer_t **out);
/* Waits for the previous write (its error is returned here), copies the state (copy_s_out: how
 * long: the training stall), and returns while the thread writes dir/ckpt-<step>.h5, then
 * dir/latest, then prunes to `keep`, as train_checkpoint_dir_save does. */
tdl_status_t train_checkpoint_dir_save_async(train_trainer_t *tr, train_ckpt_writer_t *w,
                                             const char *dir, int keep, int world_size,
                                             const float *residual_sum, double *copy_s_out);
/* Waits for the write in flight; its status, and path_out its file. */
tdl_status_t train_ckpt_writer_wait(train_ckpt_writer_t *w, char *path_out, size_t size);
/* Waits, then stops the thread. */
void train_ckpt_writer_free(train_ckpt_writer_t *w);
/* dir/ckpt-<step>.h5, then dir/latest, then removes all but the newest `keep`. */
tdl_status_t train_checkpoint_dir_save(train_trainer_t *tr, const char *dir, int keep,
                                       int world_size, char *path_out, size_t size);
/* The same with the error-feedback residuals summed over the ranks (NULL: none). */
tdl_status_t train_checkpoint_dir_save_res(train_trainer_t *tr, const char *dir, int keep,
                                           int world_size, const float *residual_sum,
                                           char *path_out, size_t size);
/* Restores the newest checkpoint in dir that reads and verifies, saying which newer ones it
 * skipped; TDL_ERR_NOT_FOUND when there is none. residual as in train_checkpoint_restore_rank. */
tdl_status_t train_checkpoint_resume_auto(train_trainer_t *tr, const char *dir, bool residual,
                                          char *path_out, size_t size);
/* This trainer's error-feedback residual (NULL without error feedback). */
float *train_codec_residual_of(train_trainer_t *tr, size_t *n_out);

/* Reads every group of a weights or checkpoint file in full (shapes against the configuration,
 * Fletcher32 checksums); on success summary says what is in it. */
tdl_status_t train_checkpoint_verify(const char *path, char *summary, size_t size);
/* A human summary of a weights or checkpoint file (verified first) on out. */
tdl_status_t train_checkpoint_info(const char *path, FILE *out);
/* The largest |a - b| of every tensor of every group both files hold, on out; the largest of
 * all in *largest. Different models: TDL_ERR_MISMATCH. */
tdl_status_t train_checkpoint_diff(const char *a, const char *b, FILE *out, double *largest);

#ifdef __cplusplus
}
#endif
#endif /* TIDAL_TRAIN_H */
