/* Status codes and the per-thread error detail. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

static const char *const status_messages[TDL_STATUS_COUNT] = {
    [TDL_OK] = "success",
    [TDL_ERR_INVALID_ARG] = "invalid argument",
    [TDL_ERR_NOMEM] = "out of memory",
    [TDL_ERR_IO] = "input/output error",
    [TDL_ERR_NOT_FOUND] = "not found",
    [TDL_ERR_TIMEOUT] = "timed out",
    [TDL_ERR_PEER] = "peer failed",
    [TDL_ERR_CORRUPT] = "corrupt data",
    [TDL_ERR_MISMATCH] = "mismatch",
    [TDL_ERR_UNSUPPORTED] = "not supported",
    [TDL_ERR_CANCELED] = "canceled",
    [TDL_ERR_MPI] = "MPI error",
    [TDL_ERR_UCX] = "UCX error",
    [TDL_ERR_CUDA] = "CUDA error",
    [TDL_ERR_INTERNAL] = "internal error",
};

const char *tdl_status_str(tdl_status_t status)
{
    if ((unsigned)status >= TDL_STATUS_COUNT)
        return "unknown status";
    return status_messages[status];
}

static _Thread_local char error_detail[1024];

/* Formats through a copy: callers often wrap the previous detail ("...: %s", tdl_error_get()). */
static void error_vset(const char *fmt, va_list ap)
{
    char tmp[sizeof(error_detail)];
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    memcpy(error_detail, tmp, sizeof(tmp));
}

void tdl_error_set(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(fmt, ap);
    va_end(ap);
}

tdl_status_t tdl_error_raise(tdl_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(fmt, ap);
    va_end(ap);
    return status;
}

const char *tdl_error_get(void)
{
    return error_detail;
}

void tdl_error_clear(void)
{
    error_detail[0] = '\0';
}

const char *tdl_version(void)
{
    return PACKAGE_VERSION;
}

const char *tdl_build_options(void)
{
    return TIDAL_BUILD_OPTIONS;
}
