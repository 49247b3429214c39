/* `tidal ckpt verify|info|diff|import`: checking, describing and comparing weights and checkpoint
 * files, and importing the reference DiT's. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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

static const tdl_param_def_t ckpt_params[] = {
    {"out", TDL_PARAM_STRING, NULL, "import: the weights file to write (HDF5)", NULL, 1, 0},
    {"model", TDL_PARAM_STRING, NULL,
     "import: the reference configuration the tensors must be (DiT-S/2 ... DiT-XL/8), which "
     "gives the heads; default: the one of that hidden size and depth",
     NULL, 1, 0},
    {"heads", TDL_PARAM_INT, "0", "import: attention heads (0: from the reference configuration)",
     NULL, 0, 1024},
    {"classes", TDL_PARAM_INT, "0",
     "import: classes (0: the label table's rows less the null class; N rows: no null class)", NULL,
     0, 1000000},
    {"objective", TDL_PARAM_ENUM, "ddpm",
     "import: what the model predicts: ddpm (the reference's Gaussian diffusion) or rf", "ddpm|rf",
     1, 0},
};

/* Whether the file starts as PyTorch's torch.save writes: a zip archive, or a pickle (PROTO 2 to
 * 5), not as safetensors, whose header length may begin with the same two bytes but whose JSON
 * header begins with '{' at byte 8. */
static bool is_torch_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char b[9] = {0};
    size_t n = f ? fread(b, 1, sizeof(b), f) : 0;
    if (f)
        fclose(f);
    return (n >= 4 && !memcmp(b, "PK\x03\x04", 4)) ||
           (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5 && !(n == 9 && b[8] == '{'));
}

static int ckpt_import(tdl_params_t *params, int nfiles, char **files)
{
    if (nfiles != 1)
        return cli_usage_error("'tidal ckpt import' takes one FILE.safetensors, found %d", nfiles);
    const char *src = files[0], *out = tdl_param_str(params, "out");
    size_t len = strlen(src);
    bool pt_name =
        (len > 3 && !strcmp(src + len - 3, ".pt")) || (len > 4 && !strcmp(src + len - 4, ".pth"));
    struct stat sb;
    if (stat(src, &sb) != 0)
        return cli_usage_error("ckpt import: cannot read %s: %s", src, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return cli_usage_error("ckpt import: %s is not a file", src);
    if (pt_name || is_torch_file(src))
        return cli_usage_error("ckpt import: %s is a PyTorch file (torch.save's pickle), which "
                               "needs Python to read: run tools/torch_to_tidal.py %s --out "
                               "MODEL.h5, which converts it and imports it",
                               src, src);
    if (!out)
        return cli_usage_error("'tidal ckpt import' needs --out FILE.h5 (the weights file to "
                               "write)");
    /* the output's folder now, not after the slow part */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir] = '\0';
    if (stat(slash ? dir : ".", &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_usage_error("ckpt import: cannot write %s: %s is not a folder", out,
                               slash ? dir : ".");
    train_import_opts_t o = {.model = tdl_param_str(params, "model"),
                             .heads = (int)tdl_param_int(params, "heads"),
                             .num_classes = (int)tdl_param_int(params, "classes")};
    dit_config_t named;
    if (o.model && dit_config_named(o.model, &named) != TDL_OK)
        return cli_usage_error("ckpt import: --model: %s", tdl_error_get());
    if (dit_objective_parse(tdl_param_str(params, "objective"), &o.objective) != TDL_OK)
        return cli_usage_error("ckpt import: --objective: %s", tdl_error_get());
    char summary[1024];
    tdl_status_t st = train_import_safetensors(src, out, &o, summary, sizeof(summary));
    if (st == TDL_ERR_INVALID_ARG)
        return cli_usage_error("ckpt import: %s", tdl_error_get());
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: ckpt import: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    printf("imported %s\n", summary);
    return CLI_EXIT_OK;
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
    if (!strcmp(act, "import"))
        return ckpt_import(params, npos - 1, pos + 1);
    return cli_usage_error("unknown 'tidal ckpt' action '%s': use verify, info, diff or import",
                           act);
}

const cli_command_t cli_cmd_ckpt = {
    .name = "ckpt",
    .summary = "check (verify), describe (info), compare (diff) weights and checkpoint files; "
               "import the reference DiT's",
    .usage = "tidal ckpt verify FILE...   checksums, shapes against the configuration, NaN/Inf "
             "scan; exit 1 if any fails\n"
             "       tidal ckpt info FILE...     what a file holds: model, step, data cursor, "
             "learning rate, loss\n"
             "       tidal ckpt diff A B         largest |a - b| per tensor and group; exit 0 "
             "identical, 1 different, 3 not comparable\n"
             "       tidal ckpt import FILE.safetensors --out MODEL.h5 [--model NAME] [--heads H] "
             "[--classes N] [--objective ddpm|rf]\n"
             "                                   a reference DiT state_dict (facebookresearch/DiT) "
             "as a weights file;\n"
             "                                   a .pt file: tools/torch_to_tidal.py FILE.pt --out "
             "MODEL.h5",
    .params = ckpt_params,
    .nparams = TDL_ARRAY_SIZE(ckpt_params),
    .run = ckpt_run,
};
