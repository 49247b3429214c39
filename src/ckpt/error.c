/* HDF5 errors and the lock (doc/checkpoint.md). HDF5 is the parallel build, used serially with
 * default property lists, which it allows without MPI_Init. Every public function of ckpt
 * silences HDF5's automatic error printing and turns a failed HDF5 call into a tdl error naming
 * the file and the object, with HDF5's own innermost reason. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include <hdf5.h>
#include <pthread.h>

#include "ckpt/ckpt_internal.h"

/* ---- HDF5 errors ------------------------------------------------------------------------- */

void ckpt_h5_quiet(ckpt_h5_quiet_t *saved)
{
    H5Eget_auto2(H5E_DEFAULT, &saved->func, &saved->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void ckpt_h5_restore(const ckpt_h5_quiet_t *saved)
{
    H5Eset_auto2(H5E_DEFAULT, saved->func, saved->data);
}

typedef struct {
    hid_t io_major, lock_minor; /* H5E_IO, H5E_CANTLOCKFILE, looked up before the walk */
    char desc[320];             /* the innermost error: where the failure started */
    bool os; /* the operating system refused (read, write, lock), not the file's bytes */
} ckpt_h5_why_t;

static herr_t ckpt_h5_walk(unsigned n, const H5E_error2_t *err, void *data)
{
    ckpt_h5_why_t *why = data;
    /* Only the innermost error tells: HDF5 files a failed checksum under "Low-level I/O" on the
     * way up. */
    if (n == 0) {
        snprintf(why->desc, sizeof(why->desc), "%s", err->desc ? err->desc : "no detail");
        for (char *c = why->desc; *c; c++)
            if ((unsigned char)*c < ' ')
                *c = ' '; /* the time in a failed write's detail ends in a newline */
        why->os = err->maj_num == why->io_major;
    }
    if (err->min_num == why->lock_minor)
        why->os = true;
    return 0;
}

tdl_status_t ckpt_h5_raise(tdl_status_t status, const char *fmt, ...)
{
    ckpt_h5_why_t why = {
        .io_major = H5E_IO, .lock_minor = H5E_CANTLOCKFILE, .desc = "no detail", .os = false};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, ckpt_h5_walk, &why);
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return tdl_error_raise(why.os ? TDL_ERR_IO : status, "%s (HDF5: %s)", msg, why.desc);
}

void ckpt_h5_close(hid_t *id)
{
    if (*id >= 0)
        H5Idec_ref(*id);
    *id = H5I_INVALID_HID;
}

/* ---- one caller at a time: HDF5 is built without thread safety ---------------------------- */

static pthread_mutex_t ckpt_mutex = PTHREAD_MUTEX_INITIALIZER;

void ckpt_lock(void)
{
    pthread_mutex_lock(&ckpt_mutex);
}

void ckpt_unlock(void)
{
    pthread_mutex_unlock(&ckpt_mutex);
}
