/* Rank-prefixed logging with levels. One line is written with one call so that lines from
 * several ranks sharing a terminal do not interleave mid-line. */
#include "config.h"

#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/core.h"

static tdl_log_level_t log_level = TDL_LOG_WARN;
static int log_rank = -1;
static FILE *log_stream;
static double log_t0 = -1.0;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

tdl_status_t tdl_log_level_parse(const char *text, tdl_log_level_t *level_out)
{
    for (size_t i = 0; i < TDL_ARRAY_SIZE(level_names); i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            *level_out = (tdl_log_level_t)i;
            return TDL_OK;
        }
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG,
                           "unknown log level '%s': use error, warn, info, debug or trace", text);
}

const char *tdl_log_level_name(tdl_log_level_t level)
{
    if ((unsigned)level >= TDL_ARRAY_SIZE(level_names))
        return "?";
    return level_names[level];
}

void tdl_log_set_level(tdl_log_level_t level)
{
    log_level = level;
}

tdl_log_level_t tdl_log_get_level(void)
{
    return log_level;
}

void tdl_log_set_rank(int rank)
{
    log_rank = rank;
}

void tdl_fault_point(const char *where)
{
    static int parsed; /* 0: not yet, 1: armed, -1: off */
    static char point[64], ranks[64];
    static int nth, sig, seen;
    if (!parsed) {
        const char *f = getenv("TIDAL_FAULT");
        char name[8] = "";
        parsed = -1;
        if (f && sscanf(f, "%63[^:]:%63[0-9+]:%d:%7s", point, ranks, &nth, name) == 4 && nth >= 1) {
            sig = !strcmp(name, "KILL") ? SIGKILL : !strcmp(name, "STOP") ? SIGSTOP : 0;
            parsed = sig ? 1 : -1;
        }
        if (f && parsed < 0)
            tdl_log_write(TDL_LOG_WARN,
                          "TIDAL_FAULT='%s' ignored: use POINT:RANK[+RANK...]:NTH:KILL|STOP", f);
    }
    if (parsed < 0 || strcmp(where, point) != 0)
        return;
    bool mine = false; /* this rank among those named */
    for (const char *r = ranks; *r && !mine; r += strcspn(r, "+"), r += *r == '+')
        mine = atoi(r) == log_rank && log_rank >= 0;
    if (!mine || ++seen != nth)
        return;
    tdl_log_write(TDL_LOG_WARN, "TIDAL_FAULT: SIG%s at %s (time %d)",
                  sig == SIGKILL ? "KILL" : "STOP", where, nth);
    fflush(NULL);
    raise(sig);
}

void tdl_log_set_stream(FILE *stream)
{
    log_stream = stream;
}

void tdl_log_vwrite(tdl_log_level_t level, const char *fmt, va_list ap)
{
    if (level > log_level)
        return;
    /* seconds from this process's first line; TIDAL_LOG_CLOCK=unix: the wall clock, so that the
     * lines of every rank (and of a script that killed one) can be put in one order */
    static int unix_clock = -1;
    if (unix_clock < 0) {
        const char *c = getenv("TIDAL_LOG_CLOCK");
        unix_clock = c && !strcmp(c, "unix");
    }
    double now = unix_clock ? tdl_clock_wall_s() : tdl_clock_s();
    if (log_t0 < 0)
        log_t0 = unix_clock ? 0 : now;
    char line[2048];
    int n;
    if (log_rank >= 0)
        n = snprintf(line, sizeof(line), unix_clock ? "tidal[%d] %.6f %s: " : "tidal[%d] %9.3f %s: ",
                     log_rank, now - log_t0,
                     tdl_log_level_name(level));
    else
        n = snprintf(line, sizeof(line), unix_clock ? "tidal %.6f %s: " : "tidal %9.3f %s: ",
                     now - log_t0,
                     tdl_log_level_name(level));
    if (n < 0 || (size_t)n >= sizeof(line))
        n = 0;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : TDL_MIN((size_t)m, sizeof(line) - (size_t)n - 2));
    if (len == 0 || line[len - 1] != '\n')
        line[len++] = '\n';
    FILE *out = log_stream ? log_stream : stderr;
    fwrite(line, 1, len, out);
    fflush(out);
}

void tdl_log_write(tdl_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tdl_log_vwrite(level, fmt, ap);
    va_end(ap);
}
