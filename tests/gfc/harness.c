/* Shared start-up and verdicts for the gfc tests (see harness.h). */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "mpi/baseline.h"
#include "tap.h"

/* What each rank sends rank 0 when a point fails somewhere. */
typedef struct harness_report {
    int64_t fails;
    char first[HARNESS_MSG];
} harness_report_t;

static void harness_progress(void *arg)
{
    harness_t *h = arg;
    if (h->rt)
        gfc_runtime_progress(h->rt);
}

tdl_status_t harness_init(harness_t *h, int *argc, char ***argv, int64_t timeout_ms)
{
    memset(h, 0, sizeof(*h));
    tdl_status_t st = tdl_boot_init(argc, argv, &h->boot);
    if (st != TDL_OK) {
        printf("Bail out! MPI bootstrap failed: %s\n", tdl_error_get());
        return st;
    }
    h->rank = h->boot.rank;
    h->size = h->boot.size;
    tdl_log_set_rank(h->rank);

    gfc_runtime_config_default(&h->config);
    h->config.rank = h->rank;
    h->config.size = h->size;
    h->config.allgather = tdl_boot_allgatherv;
    const char *env = getenv("TIDAL_GFC_TIMEOUT_MS");
    if (env && *env)
        h->config.timeout_ms = strtoll(env, NULL, 10);
    if (timeout_ms > 0)
        h->config.timeout_ms = timeout_ms;
    env = getenv("TIDAL_GFC_RING_CHUNK"); /* the ring's pipelining units, in bytes */
    if (env && *env)
        h->config.ring_chunk_bytes = (size_t)strtoull(env, NULL, 10);
    env = getenv("TIDAL_GFC_RING_CODEC_CHUNK");
    if (env && *env)
        h->config.ring_codec_chunk_bytes = (size_t)strtoull(env, NULL, 10);
    env = getenv("TIDAL_GFC_DEAD_AFTER_MS"); /* 0: no keep-alive */
    if (env && *env)
        h->config.dead_after_ms = strtoll(env, NULL, 10);
    env = getenv("TIDAL_GFC_HOSTS"); /* hosts as gfc sees them: "0,0,1,1" */
    if (env && *env)
        snprintf(h->config.hosts, sizeof(h->config.hosts), "%s", env);
    env = getenv("TIDAL_GFC_KEEPALIVE_CGROUP"); /* tools/cluster's: beside the devices */
    if (env && *env)
        snprintf(h->config.keepalive_cgroup, sizeof(h->config.keepalive_cgroup), "%s", env);
    env = getenv("TIDAL_GFC_SINGLE_COPY"); /* bytes; 0: off */
    if (env && *env)
        h->config.single_copy_min = (size_t)strtoull(env, NULL, 10);
    env = getenv("TIDAL_GFC_HIER_MIN");
    if (env && *env)
        h->config.hier_min_bytes = (size_t)strtoull(env, NULL, 10);
    env = getenv("TIDAL_GFC_HIER_PIECE");
    if (env && *env)
        h->config.hier_piece_bytes = (size_t)strtoull(env, NULL, 10);
    st = gfc_runtime_create(&h->config, &h->rt);
    int64_t bad = st != TDL_OK;
    if (bad)
        fprintf(stderr, "rank %d: gfc_runtime_create: %s\n", h->rank, tdl_error_get());
    mref_world_allreduce_i64(&bad, MREF_OP_SUM);
    if (bad) {
        if (h->rank == 0)
            printf("Bail out! gfc_runtime_create failed on %" PRId64 " rank(s)\n", bad);
        if (h->rt)
            gfc_runtime_destroy(h->rt);
        h->rt = NULL;
        tdl_boot_finalize();
        return st != TDL_OK ? st : TDL_ERR_PEER;
    }
    mref_set_progress(harness_progress, h);

    uint64_t seed = 0;
    if (h->rank == 0) {
        const char *s = getenv("TIDAL_TEST_SEED");
        seed = s && *s ? strtoull(s, NULL, 0)
                       : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    }
    mref_world_bcast_u64(&seed, 0);
    h->seed = seed;
    harness_diag(
        h, "%d ranks, UCX %s, timeout %" PRId64 " ms, seed %" PRIu64 " (TIDAL_TEST_SEED to repeat)",
        h->size, gfc_ucx_version(), h->config.timeout_ms, h->seed);
    return TDL_OK;
}

int harness_finish(harness_t *h)
{
    mref_world_barrier();
    mref_set_progress(NULL, NULL);
    gfc_runtime_destroy(h->rt);
    h->rt = NULL;
    if (h->rank == 0)
        done_testing();
    tdl_boot_finalize();
    return h->failed_points ? 1 : 0;
}

static void harness_vfail(harness_t *h, const char *fmt, va_list ap)
{
    if (h->fails++ == 0)
        vsnprintf(h->first, sizeof(h->first), fmt, ap);
}

void harness_fail(harness_t *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    harness_vfail(h, fmt, ap);
    va_end(ap);
}

bool harness_expect(harness_t *h, bool cond, const char *fmt, ...)
{
    if (!cond) {
        va_list ap;
        va_start(ap, fmt);
        harness_vfail(h, fmt, ap);
        va_end(ap);
    }
    return cond;
}

bool harness_expect_status(harness_t *h, tdl_status_t st, tdl_status_t want, const char *what)
{
    if (st == want)
        return true;
    harness_fail(h, "%s: got %s, want %s (%s)", what, tdl_status_str(st), tdl_status_str(want),
                 tdl_error_get());
    return false;
}

bool harness_point(harness_t *h, const char *fmt, ...)
{
    char desc[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(desc, sizeof(desc), fmt, ap);
    va_end(ap);

    int64_t total = h->fails;
    if (mref_world_allreduce_i64(&total, MREF_OP_SUM) != TDL_OK)
        total = 1;
    harness_report_t mine = {.fails = h->fails}, *all = NULL;
    if (total) {
        memcpy(mine.first, h->first, sizeof(mine.first));
        if (h->rank == 0)
            all = calloc((size_t)h->size, sizeof(*all));
        mref_world_gather_bytes(&mine, sizeof(mine), all, 0);
    }
    h->points++;
    h->failed_points += total != 0;
    if (h->rank == 0) {
        tap_ok(total == 0, "%s", desc);
        for (int r = 0; all && r < h->size; r++)
            if (all[r].fails)
                printf("#   rank %d: %" PRId64 " failure(s), first: %.*s\n", r, all[r].fails,
                       HARNESS_MSG, all[r].first);
        fflush(stdout);
    }
    free(all);
    h->fails = 0;
    h->first[0] = '\0';
    return total == 0;
}

void harness_diag(harness_t *h, const char *fmt, ...)
{
    if (h->rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

void harness_rng(const harness_t *h, uint64_t stream, tdl_rng_t *rng)
{
    tdl_rng_init(rng, h->seed, stream);
}

void harness_shuffle(tdl_rng_t *rng, int *v, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)tdl_rng_below(rng, (uint64_t)i + 1);
        int t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

int harness_random_group(tdl_rng_t *rng, int world, int min, int max, int *ranks)
{
    if (max > world)
        max = world;
    if (min < 1)
        min = 1;
    if (min > max)
        min = max;
    int n = min + (int)tdl_rng_below(rng, (uint64_t)(max - min) + 1);
    for (int i = 0; i < world; i++)
        ranks[i] = i;
    harness_shuffle(rng, ranks, world);
    return n;
}

int harness_index_of(const int *ranks, int n, int rank)
{
    for (int i = 0; i < n; i++)
        if (ranks[i] == rank)
            return i;
    return -1;
}

void harness_ranks_str(const int *ranks, int n, char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        int k = snprintf(buf + used, size - used, "%s%d", i ? "," : "[", ranks[i]);
        used += k > 0 ? (size_t)k : 0;
    }
    if (used < size)
        snprintf(buf + used, size - used, "%s", n ? "]" : "[]");
}

uint64_t harness_hash(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t x = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        x ^= p[i];
        x *= 0x100000001b3ull;
    }
    return x;
}

void harness_fill_grad(float *x, size_t n, tdl_rng_t *shared, tdl_rng_t *own)
{
    float scale = 1;
    for (size_t i = 0; i < n; i++) {
        if (i % 1024 == 0)
            scale = expf(1.5f * fmaxf(-3.0f, fminf(3.0f, tdl_rng_normal(shared))));
        float s = tdl_rng_normal(shared) / (0.2f + fabsf(tdl_rng_normal(shared)));
        x[i] = scale * (s + 0.7f * tdl_rng_normal(own));
    }
}

void *harness_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}
