/* Monotonic and wall clocks. */
#include "config.h"

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
