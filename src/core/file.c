/* Publishing a file atomically: written under a temporary name, then made durable and renamed, so
 * a crash leaves the old file or the new one, never half of one. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/* Makes the rename itself durable; some file systems cannot sync a directory, and the file is in
 * place already, so failures here are not errors. */
static void file_sync_dir(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    (void)fsync(fd);
    close(fd);
}

tdl_status_t tdl_file_commit(int fd, const char *tmp, const char *path)
{
    tdl_status_t st = TDL_OK;
    if (fsync(fd) != 0)
        st = tdl_error_raise(TDL_ERR_IO, "cannot write %s: fsync of %s failed: %s", path, tmp,
                             strerror(errno));
    if (close(fd) != 0 && st == TDL_OK)
        st = tdl_error_raise(TDL_ERR_IO, "cannot write %s: closing %s failed: %s", path, tmp,
                             strerror(errno));
    if (st == TDL_OK && rename(tmp, path) != 0)
        st = tdl_error_raise(TDL_ERR_IO, "cannot write %s: renaming %s to it failed: %s", path,
                             tmp, strerror(errno));
    if (st != TDL_OK) {
        unlink(tmp);
        return st;
    }
    file_sync_dir(path);
    return TDL_OK;
}

tdl_status_t tdl_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "directory name too long: '%s'", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p)
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return tdl_error_raise(TDL_ERR_IO, "cannot create directory '%s': %s", buf,
                                   strerror(errno));
        if (!(*p = c))
            return TDL_OK;
    }
}
