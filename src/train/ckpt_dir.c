/* The checkpoint folder of a run (doc/checkpoint.md): dir/ckpt-<step>.h5, dir/latest naming the
 * newest, and only the newest `keep` kept. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"
#include "train/train_internal.h"

int train_ckpt_dir_list(const char *dir, int64_t *steps, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long long s;
        char tail[8];
        if (sscanf(e->d_name, "ckpt-%lld.h%7s", &s, tail) == 2 && !strcmp(tail, "5"))
            steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* few files: insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

tdl_status_t train_ckpt_dir_publish(const char *dir, const char *path, int keep)
{
    char tmp[1100], latest[1100];
    snprintf(latest, sizeof(latest), "%s/latest", dir);
    snprintf(tmp, sizeof(tmp), "%s/latest.tmp.%ld", dir, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return tdl_error_raise(TDL_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char line[300];
    int len = snprintf(line, sizeof(line), "%s\n", base);
    if (write(fd, line, (size_t)len) != len) {
        close(fd);
        unlink(tmp);
        return tdl_error_raise(TDL_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    }
    tdl_status_t st = tdl_file_commit(fd, tmp, latest);
    if (st != TDL_OK)
        return st;
    /* Keep the newest `keep`; the one just written is among them, so a good file always stays. */
    int64_t steps[4096];
    int n = train_ckpt_dir_list(dir, steps, (int)TDL_ARRAY_SIZE(steps));
    for (int i = TDL_MAX(keep, 1); i < n; i++) {
        char old[1024];
        snprintf(old, sizeof(old), "%s/ckpt-%08lld.h5", dir, (long long)steps[i]);
        unlink(old);
    }
    return TDL_OK;
}

tdl_status_t train_checkpoint_dir_save_res(train_trainer_t *tr, const char *dir, int keep,
                                           int world_size, const float *residual_sum,
                                           char *path_out, size_t size)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/ckpt-%08lld.h5", dir, (long long)tr->step);
    tdl_status_t st = train_checkpoint_write_now(tr, world_size, residual_sum, path);
    if (st == TDL_OK)
        st = train_ckpt_dir_publish(dir, path, keep);
    if (st == TDL_OK && path_out)
        snprintf(path_out, size, "%s", path);
    return st;
}

tdl_status_t train_checkpoint_dir_save(train_trainer_t *tr, const char *dir, int keep,
                                       int world_size, char *path_out, size_t size)
{
    return train_checkpoint_dir_save_res(tr, dir, keep, world_size, NULL, path_out, size);
}
