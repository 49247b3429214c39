/* `tidal ckpt verify FILE...`: reads every group of weights or checkpoint files in full. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "train/train.h"

static int ckpt_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos < 1 || strcmp(pos[0], "verify") != 0)
        return cli_usage_error("unknown 'tidal ckpt' action '%s': use tidal ckpt verify FILE...",
                               npos ? pos[0] : "(none)");
    if (npos < 2)
        return cli_usage_error("'tidal ckpt verify' needs at least one FILE");
    int bad = 0;
    for (int i = 1; i < npos; i++) {
        char summary[512];
        if (train_checkpoint_verify(pos[i], summary, sizeof(summary)) == TDL_OK) {
            printf("%s\n", summary);
        } else {
            fprintf(stderr, "tidal: ckpt verify: %s\n", tdl_error_get());
            bad++;
        }
    }
    return bad ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

const cli_command_t cli_cmd_ckpt = {
    .name = "ckpt",
    .summary = "verify weights and checkpoint files: every dataset, shape and checksum",
    .usage = "tidal ckpt verify FILE...",
    .params = NULL,
    .nparams = 0,
    .run = ckpt_run,
};
