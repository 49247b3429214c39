/* The request queue of `tidal serve`: the ids and seeds it chooses. Every seed the server picks
 * must differ from every other it picked in its life (two equal seeds give two equal images),
 * whatever mix of client ids, server ids and client seeds the requests carry. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "serve/serve.h"
#include "tap.h"

#define NREQ 10000

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static serve_request_params_t request(void)
{
    serve_request_params_t p;
    memset(&p, 0, sizeof(p));
    p.label = 2;
    p.n = 1;
    p.resolution = 32;
    p.steps = 4;
    p.cfg = 1.0;
    return p;
}

/* Submits one request and reads back the seed the queue reports for it. */
static bool submit(serve_queue_t *q, const serve_request_params_t *p, uint64_t *seed_out,
                   char id_out[SERVE_ID_MAX + 1])
{
    if (serve_queue_submit(q, p, SERVE_SOURCE_HTTP, id_out) != TDL_OK)
        return false;
    serve_request_info_t info;
    if (serve_queue_get(q, id_out, 0, &info, NULL) != TDL_OK || !info.params.has_seed)
        return false;
    *seed_out = info.params.seed;
    return true;
}

/* The reproducer: a request without an id, then one with a client id. */
static void test_id_then_client_id(void)
{
    serve_queue_t *q;
    ok(serve_queue_create(8, 8, &q) == TDL_OK, "queue created");
    serve_request_params_t a = request(), b = request();
    snprintf(b.id, sizeof(b.id), "mine-1");
    uint64_t sa = 0, sb = 0;
    char ida[SERVE_ID_MAX + 1], idb[SERVE_ID_MAX + 1];
    ok(submit(q, &a, &sa, ida) && submit(q, &b, &sb, idb), "both admitted");
    is_str(idb, "mine-1", "the client's id is kept");
    ok(sa != sb, "a server id then a client id: seeds differ (%llu, %llu)", (unsigned long long)sa,
       (unsigned long long)sb);
    serve_queue_destroy(q);
}

/* 10,000 requests: server ids, client ids (some tried twice and refused), client seeds, in a
 * random mix; the seeds the server chose are all distinct and below SERVE_MAX_SEED. */
static void test_mixed_requests(void)
{
    serve_queue_t *q;
    ok(serve_queue_create(NREQ, 4, &q) == TDL_OK, "queue of %d places", NREQ);
    uint64_t *seeds = malloc(NREQ * sizeof(*seeds));
    size_t nseeds = 0, refused = 0, client_seeded = 0;
    bool all_ok = true, in_range = true, client_seed_kept = true;
    tdl_rng_t rng;
    tdl_rng_init(&rng, 20261201, 0);
    for (int i = 0; i < NREQ; i++) {
        serve_request_params_t p = request();
        uint32_t r = tdl_rng_u32(&rng);
        if (r % 3 == 1)
            snprintf(p.id, sizeof(p.id), "client-%d", i);
        if (r % 3 == 2 && i > 0)
            snprintf(p.id, sizeof(p.id), "client-%d", i - 1); /* taken when i-1 was 1 mod 3 */
        bool client_seed = (r >> 8) % 5 == 0;
        if (client_seed)
            p.has_seed = true, p.seed = 42;
        char id[SERVE_ID_MAX + 1];
        uint64_t seed = 0;
        if (serve_queue_submit(q, &p, SERVE_SOURCE_HTTP, id) == TDL_ERR_MISMATCH) {
            refused++;
            continue;
        }
        serve_request_info_t info;
        if (serve_queue_get(q, id, 0, &info, NULL) != TDL_OK) {
            all_ok = false;
            continue;
        }
        seed = info.params.seed;
        if (client_seed) {
            client_seeded++;
            client_seed_kept &= seed == 42;
            continue;
        }
        in_range &= seed < SERVE_MAX_SEED;
        seeds[nseeds++] = seed;
    }
    ok(all_ok, "every admitted request can be read back");
    ok(refused > 1000 && client_seeded > 1000 && nseeds > 5000,
       "the mix: %zu server-seeded, %zu client-seeded, %zu refused as taken ids", nseeds,
       client_seeded, refused);
    ok(client_seed_kept, "a client's seed is kept as given");
    ok(in_range, "server seeds are below 2^53 (exact as JSON numbers)");
    qsort(seeds, nseeds, sizeof(*seeds), cmp_u64);
    size_t repeats = 0;
    for (size_t i = 1; i < nseeds; i++)
        repeats += seeds[i] == seeds[i - 1];
    is_int((int)repeats, 0, "the %zu seeds the server chose are all distinct", nseeds);
    free(seeds);
    serve_queue_destroy(q);
}

int main(void)
{
    test_id_then_client_id();
    test_mixed_requests();
    return done_testing();
}
