/* Start-up, options, CSV, statistics for the C benchmarks: see bench_common.h. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "dit/dit.h"
#include "mpi/bench_mpi.h"

static void bench_usage(FILE *out, const char *name)
{
    fprintf(out,
            "usage: %s [options]   (run under mpirun; bench/run %s does it for you)\n"
            "  --quick            fewer sizes and samples (a run under a minute)\n"
            "  --csv PATH         append result rows to PATH (header written once)\n"
            "  --iters N          timed samples per measurement\n"
            "  --reps N           operations per timed sample\n"
            "  --warmup N         untimed operations before the samples\n"
            "  --min-bytes SIZE   smallest message (4K, 1M, 256MiB ...)\n"
            "  --max-bytes SIZE   largest message\n"
            "  --factor F         each size is F times the previous one (2 or 4)\n"
            "  --seed N           seed of the input data\n"
            "  --help             this text\n",
            name, name);
}

static tdl_status_t bench_int_parse(const char *opt, const char *text, long min, long max,
                                    long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "invalid value '%s' for %s (%ld .. %ld)", text,
                               opt, min, max);
    *out = v;
    return TDL_OK;
}

/* Fills *args from argv over the defaults already in it. */
static tdl_status_t bench_args_parse(int argc, char **argv, bench_args_t *args, bool *help_out)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "unexpected argument '%s'", arg);
        char opt[64];
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof(opt))
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "unknown option '%s'", arg);
        memcpy(opt, arg, len);
        opt[len] = '\0';
        if (strcmp(opt, "--help") == 0) {
            *help_out = true;
            return TDL_OK;
        }
        if (strcmp(opt, "--quick") == 0) {
            args->quick = true;
            continue;
        }
        static const char *const with_value[] = {"--csv",    "--iters",     "--reps",
                                                 "--warmup", "--min-bytes", "--max-bytes",
                                                 "--factor", "--seed"};
        bool known = false;
        for (size_t k = 0; k < TDL_ARRAY_SIZE(with_value); k++)
            known |= strcmp(opt, with_value[k]) == 0;
        if (!known)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "unknown option '%s'", opt);
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        long v = 0;
        tdl_status_t st = TDL_OK;
        if (val == NULL)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s needs a value", opt);
        if (strcmp(opt, "--csv") == 0) {
            args->csv_path = val;
        } else if (strcmp(opt, "--iters") == 0) {
            if ((st = bench_int_parse(opt, val, 1, 1000000, &v)) == TDL_OK)
                args->iters = (int)v;
        } else if (strcmp(opt, "--reps") == 0) {
            if ((st = bench_int_parse(opt, val, 1, 100000000, &v)) == TDL_OK)
                args->reps = (int)v;
        } else if (strcmp(opt, "--warmup") == 0) {
            if ((st = bench_int_parse(opt, val, 0, 1000000, &v)) == TDL_OK)
                args->warmup = (int)v;
        } else if (strcmp(opt, "--min-bytes") == 0) {
            st = bench_size_parse(val, &args->min_bytes);
        } else if (strcmp(opt, "--max-bytes") == 0) {
            st = bench_size_parse(val, &args->max_bytes);
        } else if (strcmp(opt, "--factor") == 0) {
            if ((st = bench_int_parse(opt, val, 2, 16, &v)) == TDL_OK)
                args->size_factor = (int)v;
        } else if (strcmp(opt, "--seed") == 0) {
            if ((st = bench_int_parse(opt, val, 0, 2147483647L, &v)) == TDL_OK)
                args->seed = (uint64_t)v;
        }
        if (st != TDL_OK)
            return st;
    }
    if (args->min_bytes > args->max_bytes)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "--min-bytes %zu is above --max-bytes %zu",
                               args->min_bytes, args->max_bytes);
    return TDL_OK;
}

/* The defaults, unless a TIDAL_GFC_* variable says otherwise (gfc-ring-chunk for a tuning
 * run, gfc-timeout-ms for a slow machine); rank 0 names what was changed. */
static void bench_gfc_env_apply(const bench_ctx_t *ctx, gfc_runtime_config_t *config)
{
    tdl_params_t *params;
    if (tdl_params_create(&params) != TDL_OK)
        bench_check(ctx, TDL_ERR_NOMEM, "parameter registry");
    tdl_status_t st = tdl_params_register(params, gfc_params, gfc_nparams);
    if (st == TDL_OK)
        st = tdl_params_load_env(params);
    if (st == TDL_OK)
        st = gfc_runtime_config_from_params(params, config);
    for (size_t i = 0; st == TDL_OK && i < gfc_nparams; i++) {
        const char *name = gfc_params[i].name;
        if (tdl_params_source(params, name) == TDL_PARAM_SRC_DEFAULT)
            continue;
        switch (gfc_params[i].type) {
        case TDL_PARAM_INT:
            bench_log(ctx, "# %s = %lld (environment)", name,
                      (long long)tdl_param_int(params, name));
            break;
        case TDL_PARAM_DOUBLE:
            bench_log(ctx, "# %s = %g (environment)", name, tdl_param_double(params, name));
            break;
        case TDL_PARAM_BOOL:
            bench_log(ctx, "# %s = %s (environment)", name,
                      tdl_param_bool(params, name) ? "true" : "false");
            break;
        default: bench_log(ctx, "# %s = %s (environment)", name, tdl_param_str(params, name));
        }
    }
    tdl_params_destroy(params);
    bench_check(ctx, st, "gfc parameters from the environment");
}

static void bench_gfc_progress(void *rt)
{
    gfc_runtime_progress(rt);
}

void bench_ctx_init(bench_ctx_t *ctx, const char *name, int *argc, char ***argv,
                    const bench_args_t *defaults)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->name = name;
    if (tdl_boot_init(argc, argv, &ctx->boot) != TDL_OK) {
        fprintf(stderr, "%s: MPI start-up failed: %s\n", name, tdl_error_get());
        exit(1);
    }
    tdl_log_set_rank(ctx->boot.rank);

    /* Every rank parses the same argv, so every rank takes the same exit. */
    ctx->args = *defaults;
    bool help = false;
    if (bench_args_parse(*argc, *argv, &ctx->args, &help) != TDL_OK || help) {
        if (ctx->boot.rank == 0) {
            if (!help)
                fprintf(stderr, "%s: %s\n", name, tdl_error_get());
            bench_usage(help ? stdout : stderr, name);
        }
        tdl_boot_finalize();
        exit(help ? 0 : 2);
    }

    int size = ctx->boot.size;
    ctx->world_ranks = malloc((size_t)size * sizeof(int));
    if (ctx->world_ranks == NULL)
        bench_check(ctx, TDL_ERR_NOMEM, "world rank list");
    for (int r = 0; r < size; r++)
        ctx->world_ranks[r] = r;

    gfc_runtime_config_t config;
    gfc_runtime_config_default(&config);
    bench_gfc_env_apply(ctx, &config);
    config.rank = ctx->boot.rank;
    config.size = size;
    config.allgather = tdl_boot_allgatherv;
    bench_check(ctx, gfc_runtime_create(&config, &ctx->rt), "gfc_runtime_create");
    /* Every wait on MPI keeps gfc going too: see bench_mpi_progress_set. */
    bench_mpi_progress_set(bench_gfc_progress, ctx->rt);

    if (ctx->boot.rank == 0 && ctx->args.csv_path != NULL) {
        ctx->csv = fopen(ctx->args.csv_path, "a");
        if (ctx->csv == NULL)
            bench_check(ctx,
                        tdl_error_raise(TDL_ERR_IO, "cannot open %s: %s", ctx->args.csv_path,
                                        strerror(errno)),
                        "CSV");
    }
}

void bench_ctx_fini(bench_ctx_t *ctx)
{
    if (ctx->csv != NULL)
        fclose(ctx->csv);
    /* The runtime goes only after every rank is done with it: a peer may still be completing
     * its last receive from us. */
    bench_mpi_barrier();
    bench_mpi_progress_set(NULL, NULL);
    gfc_runtime_destroy(ctx->rt);
    free(ctx->world_ranks);
    tdl_boot_finalize();
    memset(ctx, 0, sizeof(*ctx));
}

bool bench_ctx_is_root(const bench_ctx_t *ctx)
{
    return ctx->boot.rank == 0;
}

void bench_check(const bench_ctx_t *ctx, tdl_status_t st, const char *what)
{
    if (st == TDL_OK)
        return;
    fprintf(stderr, "%s: rank %d: %s: %s (%s)\n", ctx->name, ctx->boot.rank, what, tdl_error_get(),
            tdl_status_str(st));
    fflush(stderr);
    tdl_boot_abort(1);
}

/* ---- output ------------------------------------------------------------------------------ */

void bench_csv_header(bench_ctx_t *ctx, const char *header)
{
    if (ctx->csv == NULL)
        return;
    fseek(ctx->csv, 0, SEEK_END);
    if (ftell(ctx->csv) == 0) {
        fprintf(ctx->csv, "%s\n", header);
        fflush(ctx->csv);
    }
}

void bench_csv_row(bench_ctx_t *ctx, const char *fmt, ...)
{
    if (ctx->csv == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(ctx->csv, fmt, ap);
    va_end(ap);
    fputc('\n', ctx->csv);
    fflush(ctx->csv);
}

void bench_kv_print(const bench_ctx_t *ctx, const char *key, const char *fmt, ...)
{
    if (!bench_ctx_is_root(ctx))
        return;
    printf("%s: ", key);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

void bench_log(const bench_ctx_t *ctx, const char *fmt, ...)
{
    if (!bench_ctx_is_root(ctx))
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* ---- statistics -------------------------------------------------------------------------- */

double bench_stats_min(const double *v, size_t n)
{
    double m = n ? v[0] : 0.0;
    for (size_t i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

/* ---- sampling ---------------------------------------------------------------------------- */

void bench_samples_interleave(bench_ctx_t *ctx, int count, int iters, const int *reps,
                              bench_sample_fn_t fn, void *arg, double *samples)
{
    for (int i = 0; i < iters; i++) {
        for (int j = 0; j < count; j++) {
            int m = (i + j) % count;
            bench_check(ctx, bench_mpi_barrier(), "MPI_Barrier");
            samples[(size_t)m * iters + i] = fn(ctx, arg, m, reps[m]);
        }
    }
    bench_check(ctx, bench_mpi_max_f64(samples, (size_t)count * iters), "max over ranks");
}

int bench_iters_for_size(const bench_ctx_t *ctx, size_t bytes)
{
    const size_t MiB = (size_t)1 << 20;
    int iters = ctx->args.iters;
    if (iters > 0)
        return iters;
    if (bytes <= MiB)
        return ctx->args.quick ? 9 : 25;
    if (bytes <= 16 * MiB)
        return ctx->args.quick ? 7 : 11;
    if (bytes <= 64 * MiB)
        return ctx->args.quick ? 5 : 7;
    return ctx->args.quick ? 3 : 5;
}

int bench_reps_for_size(const bench_ctx_t *ctx, size_t bytes)
{
    if (ctx->args.reps > 0)
        return ctx->args.reps;
    size_t reps = ((size_t)1 << 20) / (bytes ? bytes : 1);
    return (int)TDL_MAX((size_t)1, TDL_MIN(reps, (size_t)32));
}

/* ---- sizes, buffers, digests ------------------------------------------------------------- */

tdl_status_t bench_size_parse(const char *text, size_t *bytes_out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || text[0] == '-')
        goto bad;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    default: goto bad;
    }
    if (shift) {
        end++;
        if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
            goto bad;
    }
    if (v > (SIZE_MAX >> shift))
        goto bad;
    *bytes_out = (size_t)(v << shift);
    return TDL_OK;
bad:
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "invalid size '%s' (e.g. 4096, 4K, 16MiB, 1G)",
                           text);
}

const char *bench_size_format(size_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    size_t u = 0;
    while (u + 1 < TDL_ARRAY_SIZE(units) && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, size, "%zu%s", bytes, units[u]);
    return buf;
}

void *bench_buf_alloc(const bench_ctx_t *ctx, size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0)
        bench_check(ctx, tdl_error_raise(TDL_ERR_NOMEM, "%zu bytes", bytes), "buffer");
    /* Touch every page now, so that no timed operation pays for the first faults. */
    memset(p, 0, bytes);
    return p;
}

uint64_t bench_digest(const void *buf, size_t bytes)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ULL ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < bytes; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

bool bench_digest_agree(const bench_ctx_t *ctx, uint64_t digest)
{
    uint64_t root = digest;
    bench_check(ctx, bench_mpi_bcast(&root, sizeof(root), 0), "digest broadcast");
    int64_t differ = root != digest;
    bench_check(ctx, bench_mpi_sum_i64(&differ, 1), "digest comparison");
    return differ == 0;
}

#define BENCH_SCALE_BLOCK 4096

void bench_fill_gradient(float *x, size_t count, uint64_t seed, int rank)
{
    tdl_rng_t scales, mine;
    tdl_rng_init(&scales, seed, 0);
    tdl_rng_init(&mine, seed, (uint64_t)rank + 1);
    tdl_rng_fill_normal(&mine, x, count);
    for (size_t b = 0; b < count; b += BENCH_SCALE_BLOCK) {
        float scale = expf(tdl_rng_normal(&scales)) * 1e-3f;
        size_t end = TDL_MIN(b + BENCH_SCALE_BLOCK, count);
        for (size_t i = b; i < end; i++) {
            double e =
                -log(1.0 - tdl_rng_uniform_f64(&mine)) - log(1.0 - tdl_rng_uniform_f64(&mine));
            x[i] = (float)((double)x[i] * scale / sqrt(0.5 * e));
        }
    }
}

tdl_status_t bench_dit_param_count(const char *model, size_t *count_out)
{
    dit_config_t cfg;
    tdl_status_t st = dit_config_named(model, &cfg);
    if (st != TDL_OK)
        return st;
    dit_model_t *m;
    if ((st = dit_model_create(&cfg, 1, cfg.input_size, &m)) != TDL_OK)
        return st;
    *count_out = m->num_params;
    dit_model_free(m);
    return TDL_OK;
}

double bench_vnmse(const float *x, const float *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0.0 ? num / den : num;
}

int bench_gradient_sizes(bench_ctx_t *ctx, const char *list, const char *model, char (*names)[32],
                         size_t *counts, int max)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == max)
            bench_check(ctx, tdl_error_raise(TDL_ERR_INVALID_ARG, "more than %d sizes", max),
                        "--sizes");
        size_t count = 0;
        if (strcmp(tok, "dit") == 0) {
            bench_check(ctx, bench_dit_param_count(model, &count), "--model");
            snprintf(names[n], sizeof(names[n]), "dit-%s", model);
        } else {
            size_t bytes;
            bench_check(ctx, bench_size_parse(tok, &bytes), "--sizes");
            count = bytes / sizeof(float);
            bench_size_format(count * sizeof(float), names[n], sizeof(names[n]));
        }
        if (count == 0)
            bench_check(ctx, tdl_error_raise(TDL_ERR_INVALID_ARG, "size '%s' is empty", tok),
                        "--sizes");
        counts[n++] = count;
    }
    return n;
}
