/* --vae FILE.h5|random:SEED, as tidal encode, serve and generate take it: the VAE's
 * configuration first (cheap, so that a bad argument is refused before any slow start-up), then
 * the VAE itself, with the parts the command needs. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "train/train.h"

int cli_vae_config(const char *arg, int parts, cli_vae_t *out)
{
    memset(out, 0, sizeof(*out));
    out->arg = arg;
    out->parts = parts;
    if (strncmp(arg, "random:", 7) == 0) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg + 7, &end, 10);
        if (!arg[7] || *end || errno)
            return cli_usage_error("--vae %s: random:SEED takes a seed, a number (random:1)", arg);
        out->random = true, out->seed = v;
        dit_vae_config_sd(&out->config);
        return CLI_EXIT_OK;
    }
    int has = 0;
    if (train_vae_read_config(arg, &out->config, &has) != TDL_OK)
        return cli_usage_error("--vae %s: %s", arg, tdl_error_get());
    if ((parts & DIT_VAE_ENCODER) && !(has & DIT_VAE_ENCODER))
        return cli_usage_error("--vae %s holds the VAE's decoder only; encoding needs its encoder",
                               arg);
    if ((parts & DIT_VAE_DECODER) && !(has & DIT_VAE_DECODER))
        return cli_usage_error("--vae %s holds the VAE's encoder only; images need its decoder",
                               arg);
    return CLI_EXIT_OK;
}

tdl_status_t cli_vae_load(const cli_vae_t *v, const char *device, dit_vae_t **vae_out)
{
    dit_vae_t *vae = NULL;
    struct dit_backend *be = NULL;
    tdl_status_t st;
    if (!v->random) {
        st = train_vae_load(v->arg, v->parts, &vae);
    } else if ((st = dit_vae_create_parts(&v->config, v->parts, &vae)) == TDL_OK) {
        dit_vae_init_weights(vae, v->seed);
    }
    /* its own backend on the DiT's device: the VAE and the model are freed apart */
    if (st == TDL_OK && device && strcmp(device, "cpu") != 0 &&
        (st = dit_backend_open(device, -1, &be)) == TDL_OK)
        st = dit_vae_set_backend(vae, be);
    if (st != TDL_OK) {
        dit_vae_free(vae);
        return st;
    }
    *vae_out = vae;
    return TDL_OK;
}
