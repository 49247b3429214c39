/* ckpt-io: checkpoint write and read throughput against a raw sequential write and read of the
 * same bytes on the same file system, and the training stall of a checkpoint, synchronous
 * against asynchronous.
 *
 * Two states:
 *  - model: a trainer of the default model ("fmnist") on synthetic in-memory images, one step
 *    done so that AdamW's moments exist. The checkpoint is train_checkpoint_save (capture, then
 *    the HDF5 file with model, EMA, AdamW m and v, fsync'ed and renamed) and
 *    train_checkpoint_restore; the raw peer write()s 4 x num_params floats in 4 MiB blocks,
 *    fsync()s and closes, and read()s them back.
 *  - large: 1 GiB (--large SIZE) of synthetic float tensors in four groups like a checkpoint's
 *    (model, ema, optim/adamw/m, optim/adamw/v; tensors of 1 Mi floats), written with
 *    ckpt_file_write and read with ckpt_weights_read per group, against raw I/O of the same size.
 * Reads are timed twice: right after the writes (from the page cache, both sides alike) and
 * "cold", after posix_fadvise(DONTNEED) has dropped both files' pages from the cache.
 *
 * The stall: train_checkpoint_dir_save_async's wall time (the copy of the state; the write goes
 * on in its thread, waited for before the next one) and train_checkpoint_dir_save's (the whole
 * synchronous save), against a memcpy of the same 4 x num_params floats into a buffer that
 * already exists.
 *
 * Every figure is the median of --reps repetitions (5; --quick 3; four times as many for the
 * stall, which takes milliseconds) with checkpoint and raw interleaved, their order alternating.
 * Rows: state,op,side,bytes,file_bytes,seconds,mbps,ratio (MB = 10^6 bytes of tensor data; ratio:
 * against raw for write and read rows, against memcpy for stall rows). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "core/core.h"
#include "tensor/tensor.h"
#include "train/train.h"

#define IO_BLOCK    ((size_t)4 << 20) /* bytes per write() and read() of the raw peer */
#define MAX_REPS    32
#define LARGE_GROUP 4    /* model, ema, adamw m, adamw v */
#define LARGE_ROWS  1024 /* a tensor: [1024, 1024] floats, 4 MiB */

static FILE *csv;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "ckpt_io: %s: %s\n", what, detail);
    exit(1);
}

static void check(tdl_status_t st, const char *what)
{
    if (st != TDL_OK)
        die(what, tdl_error_get());
}

static size_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

/* Drops the file's pages from the page cache (they are clean after fsync), so that the next read
 * comes from the device. */
static void cache_drop(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die(path, strerror(errno));
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (rc != 0)
        die("posix_fadvise", strerror(rc));
}

/* The raw peer: write() in IO_BLOCK pieces, fsync, close. Returns the seconds. */
static double raw_write(const char *path, const void *buf, size_t bytes)
{
    unlink(path);
    double t0 = tdl_clock_s();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        die(path, strerror(errno));
    for (size_t off = 0; off < bytes;) {
        ssize_t n = write(fd, (const char *)buf + off, TDL_MIN(IO_BLOCK, bytes - off));
        if (n <= 0)
            die(path, n < 0 ? strerror(errno) : "short write");
        off += (size_t)n;
    }
    if (fsync(fd) != 0 || close(fd) != 0)
        die(path, strerror(errno));
    return tdl_clock_s() - t0;
}

static double raw_read(const char *path, void *buf, size_t bytes)
{
    double t0 = tdl_clock_s();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die(path, strerror(errno));
    for (size_t off = 0; off < bytes;) {
        ssize_t n = read(fd, (char *)buf + off, TDL_MIN(IO_BLOCK, bytes - off));
        if (n <= 0)
            die(path, n < 0 ? strerror(errno) : "short read");
        off += (size_t)n;
    }
    close(fd);
    return tdl_clock_s() - t0;
}

/* One row per (op, side) and its ratio against raw: ckpt MB/s over raw MB/s. */
static void io_rows(const char *state, const char *op, size_t bytes, size_t file_bytes,
                    double ckpt_s, double raw_s)
{
    double mb = (double)bytes / 1e6;
    fprintf(csv, "%s,%s,ckpt,%zu,%zu,%.6f,%.1f,%.4f\n", state, op, bytes, file_bytes, ckpt_s,
            mb / ckpt_s, raw_s / ckpt_s);
    fprintf(csv, "%s,%s,raw,%zu,%zu,%.6f,%.1f,1.0000\n", state, op, bytes, bytes, raw_s,
            mb / raw_s);
    fflush(csv);
    printf("  %-6s %-9s checkpoint %8.1f MB/s   raw %8.1f MB/s   ratio %.3f\n", state, op,
           mb / ckpt_s, mb / raw_s, raw_s / ckpt_s);
}

static float *buf_alloc(size_t floats)
{
    float *p = tensor_alloc(floats);
    if (!p)
        die("memory", "cannot allocate the buffers");
    for (size_t i = 0; i < floats; i++) /* touched, and no run of zeros; cheap for 1 GiB */
        p[i] = (float)((uint32_t)(i * 2654435761u) >> 8) * 0x1p-24f - 0.5f;
    return p;
}

/* ---- the default model --------------------------------------------------------------------- */

static train_trainer_t *model_trainer(const char *model)
{
    enum { N = 64, S = 32 };
    uint8_t *pix = malloc((size_t)N * S * S);
    int32_t labels[N];
    if (!pix)
        die("memory", "images");
    tdl_rng_t rng;
    tdl_rng_init(&rng, 7, 7);
    for (size_t i = 0; i < (size_t)N * S * S; i++)
        pix[i] = (uint8_t)(tdl_rng_u32(&rng) & 0xff);
    for (int i = 0; i < N; i++)
        labels[i] = i % 10;
    train_dataset_t *ds;
    check(train_dataset_create(N, 1, S, S, 10, pix, labels, &ds), "data set");
    free(pix);
    train_opts_t o = {.model = model,
                      .data = "(memory)",
                      .steps = 1,
                      .batch = 8,
                      .micro_batch = 8,
                      .lr = 1e-4f,
                      .clip = 1.0f,
                      .ema_decay = 0.9999f,
                      .seed = 1};
    train_trainer_t *tr;
    check(train_trainer_create_with_data(&o, ds, &tr), "trainer");
    double loss;
    check(train_trainer_step(tr, NULL, &loss, NULL), "training step");
    return tr;
}

static void bench_model(train_trainer_t *tr, const char *dir, int reps)
{
    size_t np = train_trainer_model(tr)->num_params, bytes = 4 * np * sizeof(float);
    float *raw = buf_alloc(4 * np);
    char ck[1100], rp[1100];
    snprintf(ck, sizeof(ck), "%s/model.h5", dir);
    snprintf(rp, sizeof(rp), "%s/model.raw", dir);
    printf("ckpt_io: model: %zu parameters, %.1f MB of state (model, EMA, AdamW m and v)\n", np,
           (double)bytes / 1e6);
    double w[MAX_REPS], wr[MAX_REPS], r[MAX_REPS], rr[MAX_REPS], c[MAX_REPS], cr[MAX_REPS];
    for (int i = 0; i < reps; i++) {
        bool ckpt_first = i % 2 == 0;
        unlink(ck);
        if (!ckpt_first)
            wr[i] = raw_write(rp, raw, bytes);
        double t0 = tdl_clock_s();
        check(train_checkpoint_save(tr, ck, 1), "train_checkpoint_save");
        w[i] = tdl_clock_s() - t0;
        if (ckpt_first)
            wr[i] = raw_write(rp, raw, bytes);
        /* from the page cache, as the writes left them */
        if (!ckpt_first)
            rr[i] = raw_read(rp, raw, bytes);
        t0 = tdl_clock_s();
        check(train_checkpoint_restore(tr, ck), "train_checkpoint_restore");
        r[i] = tdl_clock_s() - t0;
        if (ckpt_first)
            rr[i] = raw_read(rp, raw, bytes);
        /* from the device */
        cache_drop(ck), cache_drop(rp);
        if (!ckpt_first)
            cr[i] = raw_read(rp, raw, bytes);
        t0 = tdl_clock_s();
        check(train_checkpoint_restore(tr, ck), "train_checkpoint_restore");
        c[i] = tdl_clock_s() - t0;
        if (ckpt_first)
            cr[i] = raw_read(rp, raw, bytes);
    }
    size_t fb = file_size(ck);
    io_rows("model", "write", bytes, fb, tdl_median(w, reps), tdl_median(wr, reps));
    io_rows("model", "read", bytes, fb, tdl_median(r, reps), tdl_median(rr, reps));
    io_rows("model", "read_cold", bytes, fb, tdl_median(c, reps), tdl_median(cr, reps));
    unlink(ck), unlink(rp);
    free(raw);
}

/* The training loop's stall: the asynchronous save's call, the synchronous save, and a plain
 * memcpy of the same bytes into memory that exists already. */
static void bench_stall(train_trainer_t *tr, const char *dir, int reps)
{
    size_t np = train_trainer_model(tr)->num_params, bytes = 4 * np * sizeof(float);
    float *src = buf_alloc(4 * np), *dst = buf_alloc(4 * np);
    char sdir[1100];
    snprintf(sdir, sizeof(sdir), "%s/stall", dir);
    if (mkdir(sdir, 0755) != 0 && errno != EEXIST)
        die(sdir, strerror(errno));
    train_ckpt_writer_t *wr;
    check(train_ckpt_writer_create(&wr), "train_ckpt_writer_create");
    /* the first call allocates the writer's copy: not a stall training sees after that */
    double copy_s;
    check(train_checkpoint_dir_save_async(tr, wr, sdir, 1, 1, NULL, &copy_s), "async save");
    check(train_ckpt_writer_wait(wr, NULL, 0), "async write");
    double mc[2 * MAX_REPS], as[MAX_REPS], cp[MAX_REPS], bg[MAX_REPS], sy[MAX_REPS];
    volatile float sink = 0;
    for (int i = 0; i < reps; i++) {
        /* a memcpy right before each asynchronous call and one after its write: no I/O or
         * writer thread runs during either */
        double t0 = tdl_clock_s();
        memcpy(dst, src, bytes);
        mc[2 * i] = tdl_clock_s() - t0;
        sink += dst[i];
        t0 = tdl_clock_s();
        check(train_checkpoint_dir_save_async(tr, wr, sdir, 1, 1, NULL, &cp[i]), "async save");
        as[i] = tdl_clock_s() - t0;
        check(train_ckpt_writer_wait(wr, NULL, 0), "async write");
        bg[i] = tdl_clock_s() - t0;
        double t1 = tdl_clock_s();
        memcpy(dst, src, bytes);
        mc[2 * i + 1] = tdl_clock_s() - t1;
        sink += dst[i];
        t0 = tdl_clock_s();
        check(train_checkpoint_dir_save(tr, sdir, 1, 1, NULL, 0), "sync save");
        sy[i] = tdl_clock_s() - t0;
    }
    train_ckpt_writer_free(wr);
    (void)sink;
    double m = tdl_median(mc, 2 * reps), a = tdl_median(as, reps), s = tdl_median(sy, reps);
    double mb = (double)bytes / 1e6;
    const struct {
        const char *side;
        double s;
    } rows[] = {{"memcpy", m},
                {"async", a},
                {"async_copy", tdl_median(cp, reps)},
                {"async_write", tdl_median(bg, reps)},
                {"sync", s}};
    for (size_t i = 0; i < TDL_ARRAY_SIZE(rows); i++)
        fprintf(csv, "model,stall,%s,%zu,0,%.6f,%.1f,%.4f\n", rows[i].side, bytes, rows[i].s,
                mb / rows[i].s, rows[i].s / m);
    fflush(csv);
    printf("  model  stall     memcpy %.2f ms   async call %.2f ms (%.2fx memcpy)   background "
           "write %.1f ms   sync save %.1f ms (%.0fx async)\n",
           1e3 * m, 1e3 * a, a / m, 1e3 * tdl_median(bg, reps), 1e3 * s, s / a);
    /* the files the saves left */
    char p[1200];
    snprintf(p, sizeof(p), "%s/latest", sdir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/ckpt-%08lld.h5", sdir, (long long)train_trainer_steps_done(tr));
    unlink(p);
    rmdir(sdir);
    free(src), free(dst);
}

/* ---- a large synthetic state ----------------------------------------------------------------- */

static void bench_large(size_t want, const char *dir, int reps)
{
    size_t per = (size_t)LARGE_ROWS * LARGE_ROWS; /* floats per tensor */
    int count = (int)(want / (LARGE_GROUP * per * sizeof(float)));
    if (count < 1)
        die("--large", "below 16 MiB (four groups of one 4 MiB tensor)");
    size_t floats = (size_t)LARGE_GROUP * (size_t)count * per, bytes = floats * sizeof(float);
    float *buf = buf_alloc(floats);
    ckpt_tensor_t *t = calloc((size_t)LARGE_GROUP * (size_t)count, sizeof(*t));
    char *names = calloc((size_t)count, 32); /* 32 bytes a name */
    if (!t || !names)
        die("memory", "tensor list");
    for (int g = 0; g < LARGE_GROUP; g++)
        for (int k = 0; k < count; k++) {
            ckpt_tensor_t *x = &t[(size_t)g * (size_t)count + (size_t)k];
            snprintf(names + 32 * k, 32, "blocks.%d.weight", k);
            x->name = names + 32 * k;
            x->ndim = 2;
            x->shape[0] = LARGE_ROWS, x->shape[1] = LARGE_ROWS;
            x->data = buf + ((size_t)g * (size_t)count + (size_t)k) * per;
        }
    static const char *const groups[LARGE_GROUP] = {"model", "ema", "optim/adamw/m",
                                                    "optim/adamw/v"};
    ckpt_group_t extra[2] = {{groups[2], t + 2 * (size_t)count, count, NULL, 0},
                             {groups[3], t + 3 * (size_t)count, count, NULL, 0}};
    ckpt_attr_t attrs[] = {{.key = "model", .type = CKPT_ATTR_STRING, .s = "synthetic"}};
    char ck[1100], rp[1100];
    snprintf(ck, sizeof(ck), "%s/large.h5", dir);
    snprintf(rp, sizeof(rp), "%s/large.raw", dir);
    printf("ckpt_io: large: %d groups of %d tensors of [%d, %d] floats, %.1f MB\n", LARGE_GROUP,
           count, LARGE_ROWS, LARGE_ROWS, (double)bytes / 1e6);
    float probe = buf[floats - 1];
    double w[MAX_REPS], wr[MAX_REPS], r[MAX_REPS], rr[MAX_REPS], c[MAX_REPS], cr[MAX_REPS];
    for (int i = 0; i < reps; i++) {
        bool ckpt_first = i % 2 == 0;
        unlink(ck);
        if (!ckpt_first)
            wr[i] = raw_write(rp, buf, bytes);
        double t0 = tdl_clock_s();
        check(ckpt_file_write(ck, t, t + count, count, extra, 2, attrs, 1), "ckpt_file_write");
        w[i] = tdl_clock_s() - t0;
        if (ckpt_first)
            wr[i] = raw_write(rp, buf, bytes);
        for (int pass = 0; pass < 2; pass++) {
            double *cs = pass ? c : r, *rs = pass ? cr : rr;
            if (pass)
                cache_drop(ck), cache_drop(rp);
            if (!ckpt_first)
                rs[i] = raw_read(rp, buf, bytes);
            t0 = tdl_clock_s();
            for (int g = 0; g < LARGE_GROUP; g++)
                check(ckpt_weights_read(ck, groups[g], t + (size_t)g * (size_t)count, count),
                      "ckpt_weights_read");
            cs[i] = tdl_clock_s() - t0;
            if (ckpt_first)
                rs[i] = raw_read(rp, buf, bytes);
        }
        printf("  large  rep %d/%d: write %.2f s (raw %.2f s), read %.2f s (raw %.2f s), cold "
               "%.2f s (raw %.2f s)\n",
               i + 1, reps, w[i], wr[i], r[i], rr[i], c[i], cr[i]);
    }
    if (buf[floats - 1] != probe)
        die("large", "the data read back differs from what was written");
    size_t fb = file_size(ck);
    io_rows("large", "write", bytes, fb, tdl_median(w, reps), tdl_median(wr, reps));
    io_rows("large", "read", bytes, fb, tdl_median(r, reps), tdl_median(rr, reps));
    io_rows("large", "read_cold", bytes, fb, tdl_median(c, reps), tdl_median(cr, reps));
    unlink(ck), unlink(rp);
    free(names), free(t), free(buf);
}

int main(int argc, char **argv)
{
    const char *csv_path = NULL, *dir = "ckpt-io.tmp", *model = "fmnist";
    bool quick = false, large_set = false;
    int reps = 0;
    size_t large = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--large") && i + 1 < argc) {
            char *end;
            double v = strtod(argv[++i], &end);
            double unit = 1.0;
            if (*end == 'G' || *end == 'g')
                unit = 1073741824.0;
            else if (*end == 'M' || *end == 'm')
                unit = 1048576.0;
            large = (size_t)(v * unit), large_set = true;
        } else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else {
            fprintf(stderr,
                    "ckpt_io: unknown argument '%s' (--csv FILE, --dir DIR, --model NAME, "
                    "--reps N, --large SIZE (256M, 1G; 0: none), --quick)\n",
                    argv[i]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines through bench/run's pipe */
    if (reps == 0)
        reps = quick ? 3 : 5;
    if (reps < 1 || reps > MAX_REPS)
        die("--reps", "between 1 and 32");
    if (!large_set)
        large = quick ? (size_t)256 << 20 : (size_t)1 << 30;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die(dir, strerror(errno));
    csv = csv_path ? fopen(csv_path, "w") : stdout;
    if (!csv)
        die(csv_path, strerror(errno));
    fprintf(csv, "state,op,side,bytes,file_bytes,seconds,mbps,ratio\n");

    train_trainer_t *tr = model_trainer(model);
    bench_model(tr, dir, reps);
    bench_stall(tr, dir, TDL_MIN(4 * reps, MAX_REPS)); /* milliseconds each: more samples */
    train_trainer_free(tr);

    struct statvfs fs;
    if (large && statvfs(dir, &fs) == 0 && (double)fs.f_bavail * fs.f_frsize < 2.0 * large + 2e9) {
        printf("ckpt_io: large state skipped: %.1f GiB free in %s, need two files of %.1f GiB "
               "and room to spare\n",
               (double)fs.f_bavail * fs.f_frsize / 1073741824.0, dir, large / 1073741824.0);
        large = 0;
    }
    if (large)
        bench_large(large, dir, reps);
    if (csv != stdout)
        fclose(csv);
    rmdir(dir);
    return 0;
}
