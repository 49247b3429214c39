/* A whole training run, as `tidal train` runs it (src/train/job.c). */
#ifndef TIDAL_TRAIN_JOB_H
#define TIDAL_TRAIN_JOB_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "gfc/gfc.h"
#include "train/train.h"

typedef struct train_job_opts {
    train_opts_t train;
    const char *out_dir;  /* loss.csv, loss.png, model.h5 */
    const char *ckpt_dir; /* ckpt-<step>.h5 and 'latest' */
    const char *resume;   /* "auto", "none" or a checkpoint */
    int log_every;        /* a progress line every N steps */
    int64_t val_every;    /* validation losses every N steps (0: never) */
    int val_images;
    int64_t ckpt_every; /* 0: only at the end */
    bool ckpt_async;    /* periodic checkpoints from a background thread */
    int keep;
} train_job_opts_t;

/* Trains on every rank of a world of `size` (rt NULL when alone) from a resume to the last step,
 * or until *stop (a signal's number) on any rank, after which every rank stops after the same
 * step with a checkpoint. Rank 0 prints progress and writes the files. */
tdl_status_t train_job_run(const train_job_opts_t *o, gfc_runtime_t *rt, int rank, int size,
                           volatile sig_atomic_t *stop);

#endif /* TIDAL_TRAIN_JOB_H */
