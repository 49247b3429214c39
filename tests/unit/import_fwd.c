/* The forward pass of a weights file's model on inputs from files, for
 * tests/cli/test_ckpt_import.sh (its PyTorch reference); not a test by itself.
 *   import_fwd FILE.h5 GROUP DIR N
 *       DIR/x.bin [N,C,S,S] float32 (S the file's input_size), t.bin [N] float32 (t in [0, 1],
 *       embedded as t * 1000), y.bin [N] int32 -> DIR/out.bin [N,C',S,S] float32 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "dit/dit.h"
#include "train/train.h"

static void *read_all(const char *dir, const char *name, size_t bytes)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(bytes);
    size_t got = f && p ? fread(p, 1, bytes, f) : 0;
    int extra = f ? fgetc(f) != EOF : 0;
    if (f)
        fclose(f);
    if (got != bytes || extra) {
        fprintf(stderr, "import_fwd: %s is not %zu bytes\n", path, bytes);
        free(p);
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: import_fwd FILE.h5 GROUP DIR N\n");
        return 2;
    }
    const char *dir = argv[3];
    int n = atoi(argv[4]);
    dit_model_t *m;
    if (train_weights_load(argv[1], argv[2], n, 0, &m) != TDL_OK) {
        fprintf(stderr, "import_fwd: %s\n", tdl_error_get());
        return 1;
    }
    const dit_config_t *c = &m->config;
    int s = c->input_size;
    size_t hw = (size_t)s * s, po = (size_t)dit_config_out_channels(c) * hw;
    float *x = read_all(dir, "x.bin", n * c->in_channels * hw * sizeof(float));
    float *t = read_all(dir, "t.bin", n * sizeof(float));
    int *y = read_all(dir, "y.bin", n * sizeof(int));
    float *out = malloc(n * po * sizeof(float));
    int rc = 1;
    if (x && t && y && out) {
        if (dit_model_forward(m, x, t, y, n, s, s, out) != TDL_OK) {
            fprintf(stderr, "import_fwd: forward: %s\n", tdl_error_get());
        } else {
            char path[1024];
            snprintf(path, sizeof(path), "%s/out.bin", dir);
            FILE *f = fopen(path, "wb");
            rc = !f || fwrite(out, sizeof(float), n * po, f) != n * po;
            if (f && fclose(f) != 0)
                rc = 1;
        }
    }
    printf("%s: %s, input %d, patch %d, %d channels, hidden %d, depth %d, heads %d, %d classes, "
           "learn_sigma %d, objective %s\n",
           argv[1], c->name, s, c->patch_size, c->in_channels, c->hidden_size, c->depth,
           c->num_heads, c->num_classes, c->learn_sigma, dit_objective_name(c->objective));
    free(x), free(t), free(y), free(out);
    dit_model_free(m);
    return rc;
}
