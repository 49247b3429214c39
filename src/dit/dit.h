/* dit: the Diffusion Transformer of Peebles & Xie (facebookresearch/DiT models.py), in C.
 * Parameter names and layouts are exactly the reference's PyTorch state_dict, stored in one
 * contiguous array (so gradients all-reduce in one call). With learn_sigma the output has 2C
 * channels (the reference's noise and variance halves). Two objectives: rectified flow
 * (x_t = (1 - t) x0 + t e, the network predicts e - x0) and the reference's Gaussian diffusion
 * (src/dit/diffusion.h: it predicts the noise, and with learn_sigma its variance). The timestep
 * embedder sees t * 1000: rectified flow's t in [0, 1], or a diffusion step k as t = k / 1000. */
#ifndef TIDAL_DIT_H
#define TIDAL_DIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "tensor/tensor.h"

#define DIT_FREQ_DIM 256     /* timestep embedding frequencies */
#define DIT_T_SCALE 1000.0f  /* t in [0, 1] is embedded as t * 1000 */

/* What the network is trained to predict (the attribute "objective" of a weights file). */
typedef enum {
    DIT_OBJECTIVE_RF = 0, /* rectified flow: the velocity noise - x0 */
    DIT_OBJECTIVE_DDPM,   /* Gaussian diffusion (diffusion.h): the noise, and the variance */
} dit_objective_t;

typedef struct dit_config {
    char name[32];
    int input_size;   /* the training resolution (other grids work too) */
    int patch_size;
    int in_channels;
    int hidden_size;
    int depth;
    int num_heads;
    double mlp_ratio;
    int num_classes;  /* the label table has one more row: the null class */
    double class_dropout_prob;
    int learn_sigma; /* 1: the output has 2C channels, noise then variance (the reference's) */
    dit_objective_t objective;
} dit_config_t;

/* "tiny", "fmnist", and the reference's "DiT-S/2" ... "DiT-XL/8" (also "S/2" ...); the
 * reference's configurations learn sigma, as the reference does; tiny and fmnist do not. */
tdl_status_t dit_config_named(const char *name, dit_config_t *config_out);
/* Checks divisibility and ranges (every size within the limits tidal's DiT supports, the count
 * of parameters too); the error names the field. */
tdl_status_t dit_config_check(const dit_config_t *config);
/* Sets the int field `field` ("hidden_size", "num_classes", ...) to value, or the real one
 * ("mlp_ratio", "class_dropout_prob"), after checking it against those limits, so that a value
 * read as int64 or double is judged before it is narrowed; the error names the field and the
 * limits ("hidden_size = 1000000000 is outside 4 to 16384, ..."). */
tdl_status_t dit_config_set_int(dit_config_t *config, const char *field, int64_t value);
tdl_status_t dit_config_set_double(dit_config_t *config, const char *field, double value);
/* The names dit_config_named knows, for --help: "tiny|fmnist|DiT-S/2|..." */
const char *dit_config_names(void);
int dit_config_mlp_hidden(const dit_config_t *config);
/* Channels of the model's output: in_channels, twice that with learn_sigma. */
int dit_config_out_channels(const dit_config_t *config);
/* "rf" or "ddpm" */
const char *dit_objective_name(dit_objective_t objective);
tdl_status_t dit_objective_parse(const char *name, dit_objective_t *objective_out);

typedef struct dit_param_info {
    char name[64];     /* "blocks.3.attn.qkv.weight" */
    int ndim;
    int shape[4];
    size_t offset;     /* into the flat parameter array, in floats */
    size_t numel;
} dit_param_info_t;

/* Views into the flat arrays for one block (parameters or gradients alike). */
typedef struct dit_block_view {
    float *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    float *ada_w, *ada_b;
} dit_block_view_t;

typedef struct dit_view {
    float *patch_w, *patch_b;         /* x_embedder.proj */
    float *t0_w, *t0_b, *t2_w, *t2_b; /* t_embedder.mlp.0 / .2 */
    float *label_table;               /* y_embedder.embedding_table */
    dit_block_view_t *blocks;         /* [depth] */
    float *final_w, *final_b;         /* final_layer.linear */
    float *final_ada_w, *final_ada_b; /* final_layer.adaLN_modulation.1 */
} dit_view_t;

typedef struct dit_acts dit_acts_t;
typedef struct dit_infer_ws dit_infer_ws_t;
struct dit_backend;

typedef struct dit_model {
    dit_config_t config;
    size_t num_params;
    float *params;
    float *grads;
    dit_param_info_t *infos;
    int ninfos;
    dit_view_t p, g;                  /* views of params and grads */
    int max_batch, max_tokens;
    tensor_arena_t arena;
    dit_acts_t *acts;                 /* the last forward's activations */
    int batch, grid_h, grid_w;        /* shapes of the last forward */
    /* Where the layers run (src/dit/backend.h). params and grads above stay the host's copies,
     * which everything outside src/dit reads and writes; on a device the model keeps its own
     * (dparams, dgrads): the forward uploads params after dit_model_params_changed, and the
     * backward adds the device's gradient into grads. */
    struct dit_backend *be;
    float *dparams, *dgrads;          /* the device's copies (== params, grads on the CPU) */
    dit_view_t dp, dg;                /* views of dparams and dgrads */
    float *hstage, *hpos, *hfreq;     /* host staging for a device */
    bool params_stale;                /* params changed since the device's copy was made */
    /* A model made for serving (dit_model_create_inference): grads is NULL, and on the CPU the
     * forward runs in ws, one block's buffers shared by every block, attention a tile of query
     * rows at a time; on a device the arena holds one block's activations, shared likewise. */
    bool inference;
    dit_infer_ws_t *ws;
} dit_model_t;

/* The backend named by `device`: "cpu", or "cuda" on GPU `gpu` (-1: the node-local rank's GPU,
 * modulo the visible ones, so one rank per GPU under mpirun or srun). A build without CUDA, or
 * a node without a GPU, gives an error that says so. "cuda-emulated" runs the CUDA backend's
 * code on the CPU, one thread after another (slow: for testing that code where no GPU is). */
tdl_status_t dit_backend_open(const char *device, int gpu, struct dit_backend **backend_out);
void dit_backend_close(struct dit_backend *backend);
/* "cpu" or "cuda", and its GPU index (-1 on the CPU). */
const char *dit_backend_name(const struct dit_backend *backend);
int dit_backend_gpu(const struct dit_backend *backend);

/* Sizes the activation arena for up to max_batch images of up to max_resolution pixels a side. */
tdl_status_t dit_model_create(const dit_config_t *config, int max_batch, int max_resolution,
                              dit_model_t **model_out);
/* The same on a backend from dit_backend_open (NULL: the CPU); the model owns it from then on,
 * also when this fails. */
tdl_status_t dit_model_create_on(const dit_config_t *config, int max_batch, int max_resolution,
                                 struct dit_backend *backend, dit_model_t **model_out);
/* A model for serving only, sized for up to max_batch images of up to max_resolution pixels:
 * no gradients and no backward pass (dit_model_backward refuses it); the forward keeps only what
 * the next layer needs, so its memory does not grow with the depth nor with the heads, and only
 * linearly with the tokens. Its outputs are those of dit_model_create's model, bit for bit.
 * Nothing of the activations is touched before the first forward. The workspace serves one
 * forward at a time (dit_model_forward or dit_sp_forward). */
tdl_status_t dit_model_create_inference(const dit_config_t *config, int max_batch,
                                        int max_resolution, struct dit_backend *backend,
                                        dit_model_t **model_out);
/* Bytes of activation memory the model holds: its arena, or an inference model's workspace
 * (host or device memory, as the backend's). */
size_t dit_model_activation_bytes(const dit_model_t *model);
/* To be called after writing model->params (an optimizer step, a load): the next forward on a
 * device copies them there. */
void dit_model_params_changed(dit_model_t *model);
void dit_model_free(dit_model_t *model);
/* The reference's initialization: Xavier-uniform linears with zero biases, normal(0.02) label
 * table and timestep MLP, zeroed adaLN modulations and output layer. Reproducible from seed. */
void dit_model_init_weights(dit_model_t *model, uint64_t seed);
const dit_param_info_t *dit_model_param(const dit_model_t *model, const char *name);
void dit_model_zero_grad(dit_model_t *model);

/* pos[T,D]: the reference's 2-D sin-cos position embedding for a grid_h x grid_w token grid (the
 * reference stores it as the frozen pos_embed [1, T, D]; tidal computes it per grid). */
void dit_pos_embed(float *pos, int grid_h, int grid_w, int d);

/* out[B,C',H,W] = model(x[B,C,H,W], t[B], y[B]), C' = dit_config_out_channels (2C with
 * learn_sigma); y == num_classes is the null class. H and W are multiples of the patch size; the
 * position embedding follows the grid. Keeps activations. */
tdl_status_t dit_model_forward(dit_model_t *model, const float *x, const float *t, const int *y,
                               int batch, int height, int width, float *out);
/* Adds d(loss)/d(params) to model->grads, given d(loss)/d(out) of the last forward. */
/* ---- sequence-parallel forward (src/dit/sp.c), for serving ---------------------------------- */

/* The exchanges of a group of `size` ranks, this one being `rank`; counts are in floats. */
typedef struct dit_sp_comm {
    int size, rank;
    /* send holds size blocks of count floats, block j for rank j; recv gets block i from i */
    tdl_status_t (*alltoall)(void *ctx, const float *send, float *recv, size_t count);
    /* recv gets size blocks of count floats, block i from rank i */
    tdl_status_t (*allgather)(void *ctx, const float *send, float *recv, size_t count);
    void *ctx;
} dit_sp_comm_t;

/* Whether size ranks can share images of h x w (they must divide the tokens and the heads). */
tdl_status_t dit_sp_check(const dit_model_t *model, int h, int w, int size);
/* The forward pass of dit_model_forward with the tokens split among comm's ranks (Ulysses: the
 * attention runs heads-sharded between two all-to-alls); every rank passes the same x, t, y and
 * gets the whole out. comm NULL: one rank. Attention runs a tile of query rows at a time, and
 * one block's buffers serve every block. On an inference model, up to max_batch images run in
 * the model's workspace (one call at a time); more images, or another model, get buffers of
 * the call's own (reading only the weights: any number of such calls may share a model). */
tdl_status_t dit_sp_forward(const dit_model_t *model, const dit_sp_comm_t *comm, const float *x,
                            const float *t, const int *y, int b, int h, int w, float *out);

tdl_status_t dit_model_backward(dit_model_t *model, const float *dout);

/* Rectified flow: x_t = (1 - t) x0 + t noise and target = noise - x0, per sample. */
void dit_rf_interpolate(const float *x0, const float *noise, const float *t, int batch,
                        size_t per_sample, float *x_t, float *target);
/* Mean squared error over n values; dout (may be NULL) gets its gradient. */
double dit_mse_loss(const float *out, const float *target, size_t n, float *dout);
/* The same over the first `per` values of each of batch samples of stride `stride` (the noise
 * half of a learn_sigma output); dout's other values are set to 0. */
double dit_mse_loss_strided(const float *out, const float *target, int batch, size_t per,
                            size_t stride, float *dout);

/* ---- sampling ----------------------------------------------------------------------------- */

/* Euler and Heun integrate a rectified-flow model; DDPM (ancestral) and DDIM (eta 0) step a
 * Gaussian-diffusion model (diffusion.h), its 1000 steps respaced to `steps`. */
typedef enum {
    DIT_SAMPLER_EULER = 0,
    DIT_SAMPLER_HEUN,
    DIT_SAMPLER_DDPM,
    DIT_SAMPLER_DDIM
} dit_sampler_kind_t;

typedef struct dit_sample_opts {
    dit_sampler_kind_t kind;
    int steps;          /* integration steps from t = 1 (noise) to t = 0 (data); DDPM/DDIM: the
                         * respaced count */
    float cfg_scale;    /* 1: no guidance; v = v_uncond + s (v_cond - v_uncond) */
    uint64_t seed;      /* image i's noise is stream i of this seed */
} dit_sample_opts_t;

tdl_status_t dit_sampler_parse(const char *name, dit_sampler_kind_t *kind_out);
const char *dit_sampler_name(dit_sampler_kind_t kind);
/* Whether sampler `kind` can sample a model trained with `objective`; the error names both. */
tdl_status_t dit_sampler_check(dit_sampler_kind_t kind, dit_objective_t objective);
/* One integration step of the rectified-flow ODE dx/dt = v(x, t) from t_from down to t_to, in
 * place on x[n, C, H, W]. labels[i] == num_classes (or < 0) is unconditional. Runs the model on
 * batches of up to max_batch (conditional and unconditional halves together when guided). */
tdl_status_t dit_sampler_step(dit_model_t *model, float *x, const int *labels, int n, int height,
                              int width, float t_from, float t_to, dit_sampler_kind_t kind,
                              float cfg_scale);
/* Fills x[n, C, H, W] with the noise of the given seed (stream = first_index + i). */
void dit_sampler_noise(float *x, int n, size_t per_image, uint64_t seed, uint64_t first_index);
/* One trajectory of a batched step: its images x[n, C, H, W] (stepped in place) from t_from to
 * t_to, their labels, its guidance. */
typedef struct dit_sample_item {
    float *x;
    const int *labels;
    int n;
    float t_from, t_to;
    float cfg_scale;
} dit_sample_item_t;
/* One step of each item, their rows sharing the model's passes (max_batch rows a pass): every
 * item comes out as dit_sampler_step would step it alone, byte for byte. One sampler kind and
 * one resolution for all. */
tdl_status_t dit_sampler_step_batch(dit_model_t *model, dit_sample_item_t *items, int nitems,
                                    int height, int width, dit_sampler_kind_t kind);
/* Noise, then opts->steps steps: out[n, C, H, W] in the data range. Deterministic per seed. */
tdl_status_t dit_sample(dit_model_t *model, const int *labels, int n, int height, int width,
                        const dit_sample_opts_t *opts, float *out);

#endif /* TIDAL_DIT_H */
