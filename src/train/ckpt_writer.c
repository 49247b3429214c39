/* The background checkpoint writer (doc/checkpoint.md): one thread, one checkpoint in flight;
 * training stalls only for the copy of its state. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/train.h"
#include "train/train_internal.h"

struct train_ckpt_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy, quit, started;
    train_ckpt_state_t *state;
    char dir[1024], path[1100];
    int keep;
    tdl_status_t status; /* of the last write */
    char error[512];
};

static void *writer_main(void *arg)
{
    train_ckpt_writer_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy && w->quit)
            break;
        pthread_mutex_unlock(&w->mu);
        tdl_status_t st = train_checkpoint_write(w->state, w->path);
        if (st == TDL_OK)
            st = train_ckpt_dir_publish(w->dir, w->path, w->keep);
        pthread_mutex_lock(&w->mu);
        w->status = st;
        snprintf(w->error, sizeof(w->error), "%s", st ? tdl_error_get() : "");
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

tdl_status_t train_ckpt_writer_create(train_ckpt_writer_t **out)
{
    train_ckpt_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return tdl_error_raise(TDL_ERR_NOMEM, "checkpoint writer: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return tdl_error_raise(TDL_ERR_IO, "checkpoint writer: cannot start its thread");
    }
    w->started = true;
    *out = w;
    return TDL_OK;
}

tdl_status_t train_ckpt_writer_wait(train_ckpt_writer_t *w, char *path_out, size_t size)
{
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    tdl_status_t st = w->status;
    if (st != TDL_OK)
        tdl_error_raise(st, "%s", w->error);
    if (path_out)
        snprintf(path_out, size, "%s", w->path);
    w->status = TDL_OK;
    pthread_mutex_unlock(&w->mu);
    return st;
}

tdl_status_t train_checkpoint_dir_save_async(train_trainer_t *tr, train_ckpt_writer_t *w,
                                             const char *dir, int keep, int world_size,
                                             const float *residual_sum, double *copy_s_out)
{
    /* the previous write first: its error is reported here, and its buffer is reused */
    tdl_status_t st = train_ckpt_writer_wait(w, NULL, 0);
    if (st != TDL_OK)
        return st;
    double t0 = tdl_clock_s();
    if ((st = train_checkpoint_capture(tr, world_size, residual_sum, &w->state)) != TDL_OK)
        return st;
    if (copy_s_out)
        *copy_s_out = tdl_clock_s() - t0;
    pthread_mutex_lock(&w->mu);
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    snprintf(w->path, sizeof(w->path), "%s/ckpt-%08lld.h5", dir, (long long)tr->step);
    w->keep = keep;
    w->busy = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return TDL_OK;
}

void train_ckpt_writer_free(train_ckpt_writer_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->started)
        pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    train_ckpt_state_free(w->state);
    free(w);
}
