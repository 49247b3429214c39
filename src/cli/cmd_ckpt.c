/* `tidal ckpt verify|info|diff`: checking, describing and comparing weights and checkpoint files. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "train/train.h"

static int ckpt_verify(int nfiles, char **files)
{
    int bad = 0;
    for (int i = 0; i < nfiles; i++) {
        char summary[512];
        if (train_checkpoint_verify(files[i], summary, sizeof(summary)) == TDL_OK) {
            printf("%s\n", summary);
        } else {
            fprintf(stderr, "tidal: ckpt verify: %s\n", tdl_error_get());
            bad++;
        }
    }
    return bad ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}

static int ckpt_run(tdl_params_t *params, int npos, char **pos)
{
    const char *act = npos ? pos[0] : "(none)";
    if (!strcmp(act, "verify")) {
        if (npos < 2)
            return cli_usage_error("'tidal ckpt verify' needs at least one FILE");
        return ckpt_verify(npos - 1, pos + 1);
    }
    if (!strcmp(act, "info")) {
        if (npos < 2)
            return cli_usage_error("'tidal ckpt info' needs at least one FILE");
        int bad = 0;
        for (int i = 1; i < npos; i++)
            if (train_checkpoint_info(pos[i], stdout) != TDL_OK) {
                fprintf(stderr, "tidal: ckpt info: %s\n", tdl_error_get());
                bad++;
            }
        return bad ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
    }
    if (!strcmp(act, "diff")) {
        if (npos != 3)
            return cli_usage_error("'tidal ckpt diff' takes two files: tidal ckpt diff A B");
        double largest;
        if (train_checkpoint_diff(pos[1], pos[2], stdout, &largest) != TDL_OK) {
            fprintf(stderr, "tidal: ckpt diff: %s\n", tdl_error_get());
            return CLI_EXIT_USAGE + 1; /* 3: could not compare */
        }
        return largest == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
    }
    return cli_usage_error("unknown 'tidal ckpt' action '%s': use verify, info or diff", act);
}

const cli_command_t cli_cmd_ckpt = {
    .name = "ckpt",
    .summary = "check (verify), describe (info) and compare (diff) weights and checkpoint files",
    .usage = "tidal ckpt verify FILE...   checksums, shapes against the configuration, NaN/Inf "
             "scan; exit 1 if any fails\n"
             "       tidal ckpt info FILE...     what a file holds: model, step, data cursor, "
             "learning rate, loss\n"
             "       tidal ckpt diff A B         largest |a - b| per tensor and group; exit 0 "
             "identical, 1 different, 3 not comparable",
    .params = NULL,
    .nparams = 0,
    .run = ckpt_run,
};
