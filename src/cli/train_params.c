/* The training parameters `tidal train` and `tidal run` share, and the one reading of them. */
#include "config.h"

#include <string.h>

#include "cli/cli.h"
#include "codec/codec.h"
#include "dit/dit.h"

const tdl_param_def_t cli_train_params[CLI_TRAIN_NPARAMS] = {
    {"model", TDL_PARAM_STRING, "fmnist", "DiT configuration: tiny, fmnist, DiT-S/2 ... DiT-XL/8",
     NULL, 1, 0},
    {"data", TDL_PARAM_STRING, "fmnist",
     "'fmnist' (Debian's dataset-fashion-mnist) or an HDF5 data set (doc/data.md)", NULL, 1, 0},
    {"latent", TDL_PARAM_BOOL, "false",
     "train on the VAE's latents: --data must hold /latents (tidal encode's output, doc/vae.md); "
     "such a file is read as latents with or without this flag, which refuses an image data set",
     NULL, 0, 0},
    {"resolution", TDL_PARAM_INT, "0", "training resolution (0: the data set's, 32 for fmnist)",
     NULL, 0, 4096},
    {"lr", TDL_PARAM_DOUBLE, "1e-3", "AdamW learning rate", NULL, 0, 1},
    {"warmup", TDL_PARAM_INT, "100", "linear learning-rate warm-up steps", NULL, 0, 1e12},
    {"clip", TDL_PARAM_DOUBLE, "1.0", "gradient-norm clipping (0: off)", NULL, 0, 1e9},
    {"ema", TDL_PARAM_DOUBLE, "0.999", "EMA decay of the sampling weights", NULL, 0, 1},
    {"weight-decay", TDL_PARAM_DOUBLE, "0", "AdamW decoupled weight decay", NULL, 0, 1},
    {"allreduce", TDL_PARAM_ENUM, "f32",
     "gradient all-reduce format (f32: exact; the others compress every hop; dynamiq: about 5 "
     "bits a value)",
     CODEC_CHOICES, 1, 0},
    {"allreduce-round", TDL_PARAM_ENUM, "default",
     "rounding of the compressed all-reduce: the format's own (dynamiq: correlated stochastic; "
     "the others: nearest), or forced",
     "default|nearest|stochastic", 1, 0},
    {"allreduce-bits", TDL_PARAM_DOUBLE, "5",
     "dynamiq's average bits per gradient value on the wire, metadata included", NULL, 1.375, 16.3},
    {"allreduce-ef", TDL_PARAM_BOOL, "false",
     "error feedback: each rank adds the errors of its own encodings to its next gradient", NULL, 0,
     0},
    {"seed", TDL_PARAM_INT, "1", "seed of every random stream (init, data order, noise)", NULL, 0,
     9.2e18},
};

int cli_train_opts(tdl_params_t *params, const char *steps, train_opts_t *o)
{
    *o = (train_opts_t){
        .model = tdl_param_str(params, "model"),
        .data = tdl_param_str(params, "data"),
        .latent = tdl_param_bool(params, "latent"),
        .resolution = (int)tdl_param_int(params, "resolution"),
        .steps = tdl_param_int(params, steps),
        .batch = (int)tdl_param_int(params, "batch"),
        .micro_batch = (int)tdl_param_int(params, "micro-batch"),
        .lr = (float)tdl_param_double(params, "lr"),
        .weight_decay = (float)tdl_param_double(params, "weight-decay"),
        .clip = (float)tdl_param_double(params, "clip"),
        .ema_decay = (float)tdl_param_double(params, "ema"),
        .warmup = tdl_param_int(params, "warmup"),
        .seed = (uint64_t)tdl_param_int(params, "seed"),
        .allreduce = tdl_param_str(params, "allreduce"),
        .allreduce_bits = tdl_param_double(params, "allreduce-bits"),
        .allreduce_ef = tdl_param_bool(params, "allreduce-ef"),
        .device = tdl_param_str(params, "device"),
    };
    codec_round_t round = CODEC_ROUND_DEFAULT;
    if (codec_round_parse(tdl_param_str(params, "allreduce-round"), &round) != TDL_OK)
        return cli_usage_error("--allreduce-round: %s", tdl_error_get());
    o->allreduce_round = (int)round;
    dit_config_t probe;
    if (dit_config_named(o->model, &probe) != TDL_OK)
        return cli_usage_error("--model: %s", tdl_error_get());
    /* the model's check of a resolution, before start-up: 33 is not a multiple of a patch */
    if (o->resolution) {
        probe.input_size = o->resolution;
        if (dit_config_check(&probe) != TDL_OK)
            return cli_usage_error("--resolution %d: %s", o->resolution, tdl_error_get());
    }
    if (o->micro_batch > o->batch)
        o->micro_batch = o->batch;
    return CLI_EXIT_OK;
}
