/* Monotonic and wall clocks, and the median of timings. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

uint64_t tdl_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double tdl_clock_s(void)
{
    return (double)tdl_clock_ns() * 1e-9;
}

double tdl_clock_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tdl_median(const double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    double small[64];
    double *s = n <= TDL_ARRAY_SIZE(small) ? small : malloc(n * sizeof(double));
    if (s == NULL)
        return v[n / 2]; /* no memory for a sort: any sample beats none */
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), double_cmp);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    if (s != small)
        free(s);
    return m;
}
