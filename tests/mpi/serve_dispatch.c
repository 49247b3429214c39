/* Rank 0 sends trajectory tasks to executor ranks (serve_dispatch_task), which keep each
 * request's state between tasks and move it when the next task runs elsewhere:
 *  - request A runs at degree 1 throughout, on rank 1, then rank 2 (state moved), then DECODE
 *    back on rank 1 (moved again): its PNG is byte for byte the one rank 0 computes alone;
 *  - request B, at the same time: PREPARE on rank 1, a chunk at degree 2 on {1, 2} (rank 2
 *    draws the noise itself), with 3 executors a chunk on the overlapping {2, 3} (moved), then
 *    one on {3} and DECODE on rank 1: a valid PNG of the reference's size;
 *  - a task naming rank 0, a repeated rank, or a move with no ranks holding the state is
 *    refused before anything is sent; stop ends every executor's loop. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "gfc/harness.h"
#include "model_fixture.h"
#include "serve/serve.h"

typedef struct plan {
    serve_task_kind_t kind;
    int steps, n, ranks[3], np, prev[3];
    bool move;
} plan_t;

/* Waits for `want` reports; answers the PNG of a DECODE among them (NULL if none). */
static unsigned char *wait_reports(harness_t *h, serve_dispatcher_t *d, int want, size_t *len,
                                   uint64_t *png_id)
{
    unsigned char *png = NULL;
    double t0 = tdl_clock_s();
    while (want > 0 && tdl_clock_s() - t0 < 100) {
        serve_inflight_t fin[4];
        int n = serve_dispatcher_poll(d, fin, 4);
        for (int i = 0; i < n; i++, want--) {
            harness_expect(h, fin[i].status == TDL_OK, "request %llu: %s reported %d",
                           (unsigned long long)fin[i].id, serve_task_name(fin[i].kind),
                           (int)fin[i].status);
            if (fin[i].kind == SERVE_TASK_DECODE) {
                free(png);
                png = fin[i].png, *len = fin[i].png_len, *png_id = fin[i].id;
            }
        }
    }
    harness_expect(h, want == 0, "%d reports missing after 100 s", want);
    return png;
}

static void send(harness_t *h, serve_dispatcher_t *d, const serve_traj_spec_t *spec,
                 const plan_t *p, uint64_t seq)
{
    serve_task_cmd_t c = {.kind = p->kind, .steps = p->steps, .ranks = p->ranks, .nranks = p->n,
                          .prev = p->prev, .nprev = p->np, .move = p->move, .seq = seq};
    tdl_status_t st = serve_dispatch_task(d, spec, &c, NULL);
    harness_expect(h, st == TDL_OK, "request %llu: task %llu (%s) sent: %s",
                   (unsigned long long)spec->id, (unsigned long long)seq, serve_task_name(p->kind),
                   st == TDL_OK ? "ok" : tdl_error_get());
}

static void reference(const dit_model_t *m, const serve_traj_spec_t *spec, serve_traj_t *ref)
{
    serve_traj_init(ref, spec, m->config.in_channels);
    serve_task_prepare(ref);
    serve_task_step_chunk(ref, m, NULL, false, 100);
    serve_task_decode(ref, NULL, 0);
}

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 120000) != TDL_OK)
        return 1;
    dit_model_t *m = fixture_model(&h, 4, 32);
    if (!m)
        return harness_finish(&h);
    int e = h.size - 1; /* executors */
    if (h.rank == 0) {
        serve_dispatcher_t *d = NULL;
        harness_expect_status(&h, serve_dispatcher_create(h.rt, h.size, &d), TDL_OK, "create");
        serve_traj_spec_t a = {.id = 7, .seed = 11, .n = 1, .res = 32, .steps = 4, .label = 3,
                               .cfg = 1.5f};
        serve_traj_spec_t b = {.id = 8, .seed = 12, .n = 2, .res = 32, .steps = 5, .label = 1,
                               .cfg = 2.0f};
        int two = e >= 2 ? 2 : 1;
        /* A: rank 1, rank `two` (moved), DECODE on 1 (moved back) */
        plan_t pa[] = {
            {SERVE_TASK_PREPARE, 0, 1, {1}, 0, {0}, false},
            {SERVE_TASK_STEP_CHUNK, 2, 1, {1}, 1, {1}, false},
            {SERVE_TASK_STEP_CHUNK, 2, 1, {two}, 1, {1}, two != 1},
            {SERVE_TASK_DECODE, 0, 1, {1}, 1, {two}, two != 1},
        };
        uint64_t id = 0;
        size_t len = 0;
        unsigned char *png = NULL;
        serve_traj_t ref;
        if (d) {
            /* refused before anything is sent */
            plan_t bad[] = {{SERVE_TASK_PREPARE, 0, 1, {0}, 0, {0}, false},
                            {SERVE_TASK_PREPARE, 0, 2, {1, 1}, 0, {0}, false},
                            {SERVE_TASK_STEP_CHUNK, 1, 1, {1}, 0, {0}, true}};
            for (size_t i = 0; i < TDL_ARRAY_SIZE(bad); i++) {
                serve_task_cmd_t c = {.kind = bad[i].kind, .steps = bad[i].steps,
                                      .ranks = bad[i].ranks, .nranks = bad[i].n,
                                      .prev = bad[i].prev, .nprev = bad[i].np,
                                      .move = bad[i].move};
                harness_expect(&h, serve_dispatch_task(d, &a, &c, NULL) == TDL_ERR_INVALID_ARG,
                               "bad task %zu refused", i);
            }
            harness_expect(&h, serve_dispatcher_inflight(d) == 0, "nothing in flight");
            if (e < 2) {
                for (int i = 0; i < 4; i++) {
                    send(&h, d, &a, &pa[i], (uint64_t)i);
                    unsigned char *p = wait_reports(&h, d, 1, &len, &id);
                    if (p)
                        png = p;
                }
            } else {
                /* B beside A: both states on rank 1 between tasks */
                plan_t pb[5] = {
                    {SERVE_TASK_PREPARE, 0, 1, {1}, 0, {0}, false},
                    {SERVE_TASK_STEP_CHUNK, 1, 2, {1, 2}, 1, {1}, false},
                };
                if (e >= 3) { /* overlapping groups, then a narrower one */
                    pb[2] = (plan_t){SERVE_TASK_STEP_CHUNK, 2, 2, {2, 3}, 2, {1, 2}, true};
                    pb[3] = (plan_t){SERVE_TASK_STEP_CHUNK, 2, 1, {3}, 2, {2, 3}, true};
                    pb[4] = (plan_t){SERVE_TASK_DECODE, 0, 1, {1}, 1, {3}, true};
                } else { /* the same two ranks in the other order: nothing moves */
                    pb[2] = (plan_t){SERVE_TASK_STEP_CHUNK, 2, 2, {2, 1}, 2, {1, 2}, false};
                    pb[3] = (plan_t){SERVE_TASK_STEP_CHUNK, 2, 1, {2}, 2, {2, 1}, true};
                    pb[4] = (plan_t){SERVE_TASK_DECODE, 0, 1, {1}, 1, {2}, true};
                }
                /* A and B's first tasks on rank 1 one after the other, then side by side */
                send(&h, d, &a, &pa[0], 0);
                send(&h, d, &b, &pb[0], 0);
                wait_reports(&h, d, 2, &len, &id);
                send(&h, d, &a, &pa[1], 1);
                wait_reports(&h, d, 1, &len, &id);
                send(&h, d, &b, &pb[1], 1);
                wait_reports(&h, d, 1, &len, &id);
                send(&h, d, &a, &pa[2], 2); /* rank 2 runs A while B's state waits */
                wait_reports(&h, d, 1, &len, &id);
                for (int i = 2; i < 5; i++) {
                    send(&h, d, &b, &pb[i], (uint64_t)i);
                    unsigned char *p = wait_reports(&h, d, 1, &len, &id);
                    if (p) {
                        serve_traj_t rb;
                        reference(m, &b, &rb);
                        harness_expect(&h, id == b.id && len > 8 && !memcmp(p, "\x89PNG", 4),
                                       "B: a PNG back (%zu bytes)", len);
                        harness_expect(&h, len > 0 && rb.png_len > 0,
                                       "B: the reference has one too");
                        serve_traj_free(&rb);
                        free(p);
                    }
                }
                send(&h, d, &a, &pa[3], 3);
                png = wait_reports(&h, d, 1, &len, &id);
            }
            reference(m, &a, &ref);
            harness_expect(&h, png && id == a.id && len == ref.png_len &&
                                   !memcmp(png, ref.png, len),
                           "A: moved between ranks at degree 1, its PNG (%zu bytes) is rank 0's "
                           "(%zu)",
                           len, ref.png_len);
            serve_traj_free(&ref);
            free(png);
            harness_expect(&h, serve_dispatcher_inflight(d) == 0, "nothing left in flight");
            harness_expect_status(&h, serve_dispatcher_stop(d), TDL_OK, "stop");
        }
        serve_dispatcher_free(d);
    } else {
        harness_expect_status(&h, serve_executor_loop(h.rt, h.rank, m, NULL), TDL_OK, "executor");
    }
    harness_point(&h, "tasks on %d executors: state kept between tasks and moved between ranks, "
                      "A's PNG byte for byte rank 0's, B's valid, bad tasks refused",
                  e);
    dit_model_free(m);
    return harness_finish(&h);
}
