/* SQLite's habit (test_malloc.c): the request queue and the request parser with their
 * allocations failing in turn, the first, then the second, ... until one run goes through.
 * Every failure must be a clean TDL_ERR_NOMEM, nothing may crash, and nothing may leak (the
 * sanitizer build's leak check). The coordinator core and the reallocation policies have theirs
 * in test_coord. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "serve/serve.h"
#include "tap.h"

static int bad; /* failures that were not a clean out-of-memory */

static void check(tdl_status_t st, const char *what, long n)
{
    if (st != TDL_OK && st != TDL_ERR_NOMEM) {
        bad++;
        diag("allocation %ld: %s: status %d: %s", n, what, st, tdl_error_get());
    }
}

/* 70 requests (the table grows past 64), three taken, two done with a PNG, one failed, read
 * back with a copy of the PNG, latencies, close, destroy. */
static tdl_status_t queue_run(long n)
{
    serve_queue_t *q = NULL;
    tdl_status_t st = serve_queue_create(100, 4, &q), last = st;
    check(st, "create", n);
    if (st != TDL_OK)
        return st;
    serve_request_params_t p = {.label = 1, .n = 1, .resolution = 32, .steps = 2, .cfg = 1};
    char id[SERVE_ID_MAX + 1], first[SERVE_ID_MAX + 1] = "";
    for (int i = 0; i < 70; i++) {
        st = serve_queue_submit(q, &p, SERVE_SOURCE_HTTP, id);
        check(st, "submit", n);
        if (st != TDL_OK) {
            last = st;
            break;
        }
        if (!first[0])
            snprintf(first, sizeof(first), "%s", id);
    }
    for (int k = 0; k < 3; k++) {
        serve_job_t *job;
        if (serve_queue_pop(q, 0, &job) != TDL_OK)
            break;
        unsigned char *png = k < 2 ? malloc(8) : NULL; /* the queue frees it */
        if (png) {
            memcpy(png, "\x89PNG....", 8);
            serve_job_done(q, job, png, 8);
        } else {
            serve_job_fail(q, job, "failed on purpose");
        }
    }
    if (first[0]) {
        serve_request_info_t info;
        unsigned char *png = NULL;
        st = serve_queue_get(q, first, 0, &info, &png);
        check(st, "get", n);
        if (st == TDL_OK && (!png || memcmp(png, "\x89PNG", 4))) {
            bad++;
            diag("allocation %ld: get: no copy of the PNG", n);
        }
        free(png);
        last = last != TDL_OK ? last : st;
    }
    double *lat = NULL;
    size_t nl = 0;
    st = serve_queue_latencies(q, SERVE_SOURCE_HTTP, &lat, &nl);
    check(st, "latencies", n);
    free(lat);
    last = last != TDL_OK ? last : st;
    serve_queue_close(q, "closing");
    serve_queue_destroy(q);
    return last;
}

static tdl_status_t parse_run(long n)
{
    static const char body[] = "{\"id\":\"abc\",\"label\":3,\"n\":4,\"resolution\":32,\"steps\":"
                               "7,\"cfg\":2.5,\"seed\":11,\"priority\":2,\"deadline_ms\":900,"
                               "\"sampler\":\"euler\"}";
    serve_limits_t lim = {.num_classes = 10,
                          .max_resolution = 64,
                          .default_resolution = 32,
                          .default_steps = 50,
                          .default_cfg = 4};
    serve_request_params_t p;
    serve_field_error_t err;
    tdl_status_t st = serve_request_parse(body, strlen(body), &lim, NULL, &p, NULL, &err);
    check(st, "parse", n);
    if (st == TDL_ERR_NOMEM && strcmp(err.field, "body")) {
        bad++;
        diag("allocation %ld: parse: out of memory blamed on field '%s'", n, err.field);
    }
    if (st == TDL_OK && !(p.label == 3 && p.n == 4 && p.steps == 7 && p.seed == 11 &&
                          p.deadline_ms == 900 && !strcmp(p.id, "abc"))) {
        bad++;
        diag("allocation %ld: parse: wrong values", n);
    }
    return st;
}

static void walk(const char *what, tdl_status_t (*run)(long))
{
    bad = 0;
    long n;
    tdl_status_t st = TDL_ERR_NOMEM;
    for (n = 0; n < 10000 && st != TDL_OK; n++) {
        tdl_alloc_fail_after(n);
        st = run(n);
    }
    tdl_alloc_fail_after(-1);
    ok(st == TDL_OK && n > 2, "%s: goes through once %ld allocations succeed", what, n - 1);
    ok(bad == 0, "%s: each of the %ld failures before that was a clean out-of-memory", what, n - 1);
}

int main(void)
{
    walk("the request queue", queue_run);
    walk("the request parser", parse_run);
    return done_testing();
}
