/* `tidal encode`: an image data set through the VAE's encoder into a latent data set (HDF5, the
 * layout the HDF5 data path reads: doc/data.md), for latent diffusion training (doc/vae.md). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "tensor/tensor.h"
#include "train/train.h"

static const tdl_param_def_t encode_params[] = {
    {"data", TDL_PARAM_STRING, NULL,
     "images to encode: fmnist (Fashion-MNIST's training split), fmnist-test, an HDF5 image "
     "data set (doc/data.md), or a folder of PNG files (one subfolder a class, as ImageFolder, or "
     "the files themselves with --labels)",
     NULL, 1, 0},
    {"labels", TDL_PARAM_STRING, NULL,
     "for a folder of PNG files without subfolders: a text file of lines 'NAME LABEL', one for "
     "every PNG file (default: every label 0)",
     NULL, 1, 0},
    {"vae", TDL_PARAM_STRING, NULL,
     "the VAE: a weights file with its encoder (doc/vae.md), or random:SEED for the SD "
     "configuration with random weights (tests: no trained weights come with tidal)",
     NULL, 1, 0},
    {"resolution", TDL_PARAM_INT, "256",
     "side of the images the encoder sees (the reference DiT's center crop), a multiple of the "
     "VAE's downscale factor (8 for SD): latents are resolution / 8 a side",
     NULL, 8, 4096},
    {"latent", TDL_PARAM_ENUM, "sample",
     "what to store: a sample of the encoder's Gaussian (as the reference DiT's feature "
     "extraction) or its mean",
     "sample|mean", 1, 0},
    {"seed", TDL_PARAM_INT, "0", "seed of the samples' noise (image i uses stream i)", NULL, 0,
     9.2e18},
    {"limit", TDL_PARAM_INT, "0", "encode only the first N images (0: all)", NULL, 0, 1e12},
    {"progress", TDL_PARAM_INT, "100", "a progress line every N images (0: none)", NULL, 0, 1e9},
    {"output", TDL_PARAM_STRING, NULL, "latent data set to write (HDF5; also -o)", NULL, 1, 0},
};

/* ---- the images ------------------------------------------------------------------------------ */

typedef enum { SRC_DATASET, SRC_PNG } src_kind_t;

typedef struct src {
    src_kind_t kind;
    size_t n;
    int num_classes;
    train_dataset_t *ds; /* SRC_DATASET */
    char **files;        /* SRC_PNG: full paths, n of them */
    int32_t *labels;     /* SRC_PNG */
    char **classes;      /* SRC_PNG with subfolders: num_classes names */
} src_t;

static void src_free(src_t *s)
{
    train_dataset_free(s->ds);
    for (size_t i = 0; s->files && i < s->n; i++)
        free(s->files[i]);
    free(s->files);
    free(s->labels);
    for (int i = 0; s->classes && i < s->num_classes; i++)
        free(s->classes[i]);
    free(s->classes);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_png_name(const char *name)
{
    size_t l = strlen(name);
    return l > 4 && strcasecmp(name + l - 4, ".png") == 0;
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The sorted names in dir of PNG files (dirs false) or of subfolders (dirs true). */
static int list_dir(const char *dir, bool dirs, char ***out, size_t *n_out)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (dirs ? !is_dir(path) : !is_png_name(e->d_name) || is_dir(path))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                rc = -1;
                break;
            }
            v = nv;
        }
        if (!(v[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == 0 && n)
        qsort(v, n, sizeof(*v), cmp_str);
    *out = v;
    *n_out = n;
    return rc;
}

static char *path_join(const char *a, const char *b)
{
    size_t l = strlen(a) + strlen(b) + 2;
    char *p = malloc(l);
    if (p)
        snprintf(p, l, "%s/%s", a, b);
    return p;
}

/* Labels of the flat folder's files from the labels file: every file listed once. */
static int read_labels_file(const char *path, char **names, size_t n, int32_t *labels,
                            int *num_classes)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_usage_error("--labels %s: cannot open it: %s", path, strerror(errno));
    for (size_t i = 0; i < n; i++)
        labels[i] = -1;
    char line[4096], name[4096];
    long v;
    int lineno = 0, rc = CLI_EXIT_OK, max = 0;
    while (rc == CLI_EXIT_OK && fgets(line, sizeof(line), f)) {
        lineno++;
        if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0')
            continue;
        if (sscanf(line, "%4095s %ld", name, &v) != 2 || v < 0 || v > 1000000) {
            rc = cli_usage_error("--labels %s line %d: expected 'NAME LABEL' with a label from 0 "
                                 "to 1000000",
                                 path, lineno);
            break;
        }
        char *key = name;
        char **hit = bsearch(&key, names, n, sizeof(*names), cmp_str);
        if (!hit)
            rc = cli_usage_error("--labels %s line %d: %s is no PNG file of the folder", path,
                                 lineno, name);
        else if (labels[hit - names] >= 0)
            rc = cli_usage_error("--labels %s line %d: %s is listed twice", path, lineno, name);
        else
            labels[hit - names] = (int32_t)v, max = TDL_MAX(max, (int)v);
    }
    fclose(f);
    for (size_t i = 0; rc == CLI_EXIT_OK && i < n; i++)
        if (labels[i] < 0)
            rc = cli_usage_error("--labels %s has no line for %s", path, names[i]);
    *num_classes = max + 1;
    return rc;
}

/* A folder: subfolders as classes (sorted, ImageFolder's order), or its own PNG files. */
static int src_open_dir(const char *dir, const char *labels_path, src_t *s)
{
    char **subs = NULL, **names = NULL;
    size_t nsubs = 0, nnames = 0;
    if (list_dir(dir, true, &subs, &nsubs) != 0)
        return cli_usage_error("--data %s: cannot read the folder: %s", dir, strerror(errno));
    int rc = CLI_EXIT_OK;
    s->kind = SRC_PNG;
    if (nsubs > 0) {
        if (labels_path) {
            rc = cli_usage_error("--labels is for a folder of PNG files; %s has subfolders, "
                                 "which are its classes",
                                 dir);
            goto out;
        }
        s->classes = subs;
        s->num_classes = (int)nsubs;
        subs = NULL;
        for (size_t c = 0; c < nsubs && rc == CLI_EXIT_OK; c++) {
            char *sub = path_join(dir, s->classes[c]);
            char **f = NULL;
            size_t nf = 0;
            if (!sub || list_dir(sub, false, &f, &nf) != 0) {
                rc = cli_usage_error("--data %s: cannot read %s", dir, s->classes[c]);
            } else {
                char **nfiles = realloc(s->files, (s->n + nf + 1) * sizeof(char *));
                int32_t *nl = realloc(s->labels, (s->n + nf + 1) * sizeof(int32_t));
                if (nfiles)
                    s->files = nfiles;
                if (nl)
                    s->labels = nl;
                for (size_t i = 0; i < nf; i++) {
                    if (nfiles && nl && (s->files[s->n] = path_join(sub, f[i])))
                        s->labels[s->n++] = (int32_t)c;
                    free(f[i]);
                }
                if (!nfiles || !nl)
                    rc = cli_usage_error("--data %s: out of memory", dir);
            }
            free(f);
            free(sub);
        }
    } else {
        if (list_dir(dir, false, &names, &nnames) != 0) {
            rc = cli_usage_error("--data %s: cannot read the folder", dir);
            goto out;
        }
        s->files = calloc(nnames + 1, sizeof(char *));
        s->labels = calloc(nnames + 1, sizeof(int32_t));
        if (!s->files || !s->labels) {
            rc = cli_usage_error("--data %s: out of memory", dir);
            goto out;
        }
        s->num_classes = 1;
        if (labels_path && (rc = read_labels_file(labels_path, names, nnames, s->labels,
                                                  &s->num_classes)) != CLI_EXIT_OK)
            goto out;
        for (size_t i = 0; i < nnames; i++)
            if ((s->files[i] = path_join(dir, names[i])))
                s->n++;
    }
    if (rc == CLI_EXIT_OK && s->n == 0)
        rc = cli_usage_error("--data %s holds no PNG files%s", dir,
                             nsubs ? " in its subfolders" : "");
out:
    for (size_t i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    for (size_t i = 0; i < nsubs && subs; i++)
        free(subs[i]);
    free(subs);
    return rc;
}

/* Image i as uint8 [3, H, W] (gray replicated to RGB). */
static tdl_status_t src_get(const src_t *s, size_t i, train_image_t *img)
{
    if (s->kind == SRC_PNG)
        return train_image_read_png(s->files[i], img);
    int c = train_dataset_channels(s->ds), h, w;
    train_dataset_shape(s->ds, &h, &w);
    const uint8_t *px = train_dataset_pixels(s->ds, i);
    size_t plane = (size_t)h * w;
    uint8_t *rgb = malloc(3 * plane);
    if (!rgb)
        return tdl_error_raise(TDL_ERR_NOMEM, "image %zu: out of memory", i);
    for (int k = 0; k < 3; k++)
        memcpy(rgb + k * plane, px + (c == 3 ? k : 0) * plane, plane);
    *img = (train_image_t){.channels = 3, .height = h, .width = w, .pixels = rgb};
    return TDL_OK;
}

/* ---- the command ----------------------------------------------------------------------------- */

static int encode_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal encode' takes no arguments, found '%s'", pos[0]);
    const char *data = tdl_param_str(params, "data"), *vae_arg = tdl_param_str(params, "vae");
    const char *out = tdl_param_str(params, "output"), *labels = tdl_param_str(params, "labels");
    if (!data || !vae_arg || !out)
        return cli_usage_error("'tidal encode' needs --data, --vae and --output (see tidal "
                               "encode --help)");
    int res = (int)tdl_param_int(params, "resolution");
    bool mean = !strcmp(tdl_param_str(params, "latent"), "mean");
    uint64_t seed = (uint64_t)tdl_param_int(params, "seed");
    size_t limit = (size_t)tdl_param_int(params, "limit");
    size_t every = (size_t)tdl_param_int(params, "progress");

    /* the VAE's configuration: cheap, and it says which resolutions are possible */
    cli_vae_t va;
    int vrc = cli_vae_config(vae_arg, DIT_VAE_ENCODER, &va);
    if (vrc != CLI_EXIT_OK)
        return vrc;
    const dit_vae_config_t vc = va.config;
    int down = dit_vae_upscale(&vc);
    if (res % down)
        return cli_usage_error("--resolution %d is not a multiple of %d, the VAE's downscale "
                               "factor",
                               res, down);
    if (vc.in_channels != 3)
        return cli_usage_error("--vae %s takes %d channels; tidal encode feeds it RGB images",
                               vae_arg, vc.in_channels);

    /* the images */
    src_t s = {0};
    int rc = CLI_EXIT_OK;
    tdl_status_t st = TDL_OK;
    bool fm = !strcmp(data, "fmnist") || !strcmp(data, "fmnist-test");
    if (labels && (fm || !is_dir(data)))
        return cli_usage_error("--labels is for a folder of PNG files, not --data %s", data);
    if (fm || !is_dir(data)) {
        s.kind = SRC_DATASET;
        st = fm ? train_dataset_open_fmnist(NULL, !strcmp(data, "fmnist"), &s.ds)
                : train_dataset_open_hdf5(data, &s.ds);
        if (st != TDL_OK)
            return cli_usage_error("--data %s: %s", data, tdl_error_get());
        if (train_dataset_is_latent(s.ds)) {
            src_free(&s);
            return cli_usage_error("--data %s holds latents already, not images", data);
        }
        s.n = train_dataset_count(s.ds);
        s.num_classes = train_dataset_num_classes(s.ds);
    } else if ((rc = src_open_dir(data, labels, &s)) != CLI_EXIT_OK) {
        src_free(&s);
        return rc;
    }
    size_t n = limit && limit < s.n ? limit : s.n;

    dit_vae_t *vae = NULL;
    st = cli_vae_load(&va, NULL, &vae);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: encode: --vae %s: %s\n", vae_arg, tdl_error_get());
        src_free(&s);
        return CLI_EXIT_FAILURE;
    }
    int lh = res / down, lc = vc.latent_channels;
    size_t plane = (size_t)res * res, lat = (size_t)lc * lh * lh;
    enum { CHUNK = 16 };
    uint8_t *crop = malloc(3 * plane);
    float *rgb = malloc(3 * plane * sizeof(float)), *z = malloc(CHUNK * lat * sizeof(float));
    int32_t lab[CHUNK];
    train_latent_writer_t *w = NULL;
    train_latent_info_t info = {.channels = lc,
                                .height = lh,
                                .width = lh,
                                .scaling_factor = vc.scaling_factor,
                                .sample = mean ? "mean" : "sample",
                                .seed = seed,
                                .resolution = res,
                                .source = data};
    if (!crop || !rgb || !z) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = train_latent_writer_open(out, n, &info, &w)) != TDL_OK)
        goto fail;
    char advice[256];
    tensor_blas_advice(advice, sizeof(advice));
    printf("tidal encode: %zu images of %s at %dx%d -> %zu latents of %dx%dx%d (%s, VAE %s) -> "
           "%s%s%s\n",
           n, data, res, res, n, lc, lh, lh, info.sample, vae_arg, out, advice[0] ? "; " : "",
           advice);
    fflush(stdout);
    double t0 = tdl_clock_s();
    for (size_t i = 0; i < n; i++) {
        train_image_t img = {0};
        size_t k = i % CHUNK;
        if ((st = src_get(&s, i, &img)) != TDL_OK)
            goto fail;
        st = train_image_center_crop(&img, res, crop);
        train_image_free(&img);
        if (st != TDL_OK)
            goto fail;
        for (size_t j = 0; j < 3 * plane; j++)
            rgb[j] = (float)crop[j] / 127.5f - 1.0f;
        dit_vae_sample_t sp = {.seed = seed, .first = i};
        if ((st = dit_vae_encode(vae, rgb, 1, res, res, mean ? NULL : &sp, z + k * lat)) != TDL_OK)
            goto fail;
        lab[k] = s.kind == SRC_PNG ? s.labels[i] : train_dataset_label(s.ds, i);
        if (k == CHUNK - 1 || i == n - 1) {
            if ((st = train_latent_writer_put(w, i - k, k + 1, z, lab)) != TDL_OK)
                goto fail;
        }
        if (every && ((i + 1) % every == 0 || i == n - 1)) {
            double dt = tdl_clock_s() - t0;
            printf("tidal encode: %zu/%zu images, %.1f s, %.2f images/s\n", i + 1, n, dt,
                   (double)(i + 1) / (dt > 0 ? dt : 1e-9));
            fflush(stdout);
        }
    }
    st = train_latent_writer_close(w, s.num_classes);
    w = NULL;
    if (st != TDL_OK)
        goto fail;
    printf("tidal encode: wrote %s: /latents [%zu, %d, %d, %d] float32, /labels [%zu], %d "
           "classes, in %.1f s\n",
           out, n, lc, lh, lh, n, s.num_classes, tdl_clock_s() - t0);
    goto done;
fail:
    fprintf(stderr, "tidal: encode: %s\n", tdl_error_get());
    rc = CLI_EXIT_FAILURE;
    train_latent_writer_abort(w);
done:
    free(z);
    free(rgb);
    free(crop);
    dit_vae_free(vae);
    src_free(&s);
    return rc;
}

const cli_command_t cli_cmd_encode = {
    .name = "encode",
    .summary = "encode an image data set with the VAE into a latent data set (HDF5) to train on",
    .usage = "tidal encode --data fmnist|FILE.h5|DIR [--labels FILE] --vae FILE.h5|random:SEED "
             "[--resolution 256] [--latent sample|mean] [--seed 0] [--limit N] -o LATENTS.h5",
    .params = encode_params,
    .nparams = TDL_ARRAY_SIZE(encode_params),
    .run = encode_run,
};
