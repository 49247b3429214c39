/* The trace reader: a JSON-lines file of timed requests, each line checked by the request
 * validator (request.c) with its "at_ms", the entries sorted by arrival. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "serve/serve.h"

static int trace_cmp(const void *a, const void *b)
{
    const serve_trace_entry_t *x = a, *y = b;
    if (x->at_ms != y->at_ms)
        return x->at_ms < y->at_ms ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

tdl_status_t serve_trace_load(const char *path, const serve_limits_t *limits,
                              serve_trace_t *trace_out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "cannot open trace '%s': %s", path,
                               strerror(errno));
    serve_trace_entry_t *e = NULL;
    size_t n = 0, cap = 0, size = 0;
    char *line = NULL;
    ssize_t got;
    long lineno = 0;
    tdl_status_t st = TDL_OK;
    while ((got = getline(&line, &size, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        while (len && strchr(" \t\r\n", line[len - 1]))
            len--;
        size_t skip = 0;
        while (skip < len && (line[skip] == ' ' || line[skip] == '\t'))
            skip++;
        if (skip == len)
            continue;
        if (n == cap) {
            size_t c2 = cap ? 2 * cap : 256;
            serve_trace_entry_t *e2 = realloc(e, c2 * sizeof(*e));
            if (!e2) {
                st = tdl_error_raise(TDL_ERR_NOMEM, "trace '%s': out of memory", path);
                goto out;
            }
            e = e2, cap = c2;
        }
        serve_field_error_t err;
        st = serve_request_parse(line + skip, len - skip, limits, "at_ms", &e[n].params,
                                 &e[n].at_ms, &err);
        if (st != TDL_OK) {
            st = tdl_error_raise(TDL_ERR_INVALID_ARG, "%s:%ld: field '%s': %s", path, lineno,
                                 err.field, err.message);
            goto out;
        }
        e[n].line = lineno;
        n++;
    }
    if (ferror(f))
        st = tdl_error_raise(TDL_ERR_IO, "cannot read trace '%s': %s", path, strerror(errno));
out:
    free(line);
    fclose(f);
    if (st != TDL_OK) {
        free(e);
        return st;
    }
    if (n)
        qsort(e, n, sizeof(*e), trace_cmp);
    trace_out->count = n;
    trace_out->entries = e;
    return TDL_OK;
}

void serve_trace_free(serve_trace_t *trace)
{
    free(trace->entries);
    trace->entries = NULL;
    trace->count = 0;
}
