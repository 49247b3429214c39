/* Allocation with fault injection (core.h): a countdown that tests set, shared by every
 * thread, after which allocations fail as if memory had run out. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static long left = -1; /* atomic: allocations that may still succeed; < 0: all */
static long made;      /* atomic: allocations since the last tdl_alloc_fail_after */

static int may_allocate(void)
{
    __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
    long n = __atomic_load_n(&left, __ATOMIC_RELAXED);
    while (n >= 0) {
        if (n == 0)
            return 0;
        if (__atomic_compare_exchange_n(&left, &n, n - 1, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            return 1;
    }
    return 1;
}

long tdl_alloc_fail_after(long n)
{
    __atomic_store_n(&left, n, __ATOMIC_RELAXED);
    return __atomic_exchange_n(&made, 0, __ATOMIC_RELAXED);
}

void *tdl_malloc(size_t size)
{
    return may_allocate() ? malloc(size) : NULL;
}

void *tdl_calloc(size_t count, size_t size)
{
    return may_allocate() ? calloc(count, size) : NULL;
}

void *tdl_realloc(void *p, size_t size)
{
    return may_allocate() ? realloc(p, size) : NULL;
}

char *tdl_strdup(const char *s)
{
    return may_allocate() ? strdup(s) : NULL;
}
