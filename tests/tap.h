/* A tiny TAP producer for C tests, read by Automake's tap-driver.sh. */
#ifndef TIDAL_TESTS_TAP_H
#define TIDAL_TESTS_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_count, tap_failed;

static inline int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    tap_count++;
    if (!cond)
        tap_failed++;
    printf("%sok %d - ", cond ? "" : "not ", tap_count);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return cond;
}

#define ok(cond, ...) tap_ok(!!(cond), __VA_ARGS__)
#define is_int(got, want, ...)                                                                     \
    do {                                                                                           \
        long long g_ = (long long)(got), w_ = (long long)(want);                                   \
        if (!tap_ok(g_ == w_, __VA_ARGS__))                                                        \
            printf("#   got %lld, want %lld\n", g_, w_);                                           \
    } while (0)
#define is_str(got, want, ...)                                                                     \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (!tap_ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))                                 \
            printf("#   got '%s', want '%s'\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)");           \
    } while (0)
#define is_near(got, want, tol, ...)                                                               \
    do {                                                                                           \
        double g_ = (got), w_ = (want);                                                            \
        if (!tap_ok(fabs(g_ - w_) <= (tol), __VA_ARGS__))                                          \
            printf("#   got %.9g, want %.9g (tolerance %g)\n", g_, w_, (double)(tol));             \
    } while (0)
#define diag(...)                                                                                  \
    do {                                                                                           \
        printf("# ");                                                                              \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
    } while (0)

static inline int done_testing(void)
{
    printf("1..%d\n", tap_count);
    return tap_failed ? 1 : 0;
}

#endif /* TIDAL_TESTS_TAP_H */
