/* Rank 0 places requests on executor ranks (serve_dispatch): on one executor the PNG is byte for
 * byte the one rank 0 computes alone; on two (sequence parallel) a valid PNG of the same size;
 * more requests than executors wait for idle ones; stop ends every executor's loop. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "dit/dit.h"
#include "gfc/harness.h"
#include "model_fixture.h"
#include "serve/serve.h"

int main(int argc, char **argv)
{
    harness_t h;
    if (harness_init(&h, &argc, &argv, 120000) != TDL_OK)
        return 1;
    dit_model_t *m = fixture_model(&h, 4, 32);
    if (!m)
        return harness_finish(&h);
    const dit_config_t cfg = m->config;
    enum { NREQ = 6 };
    if (h.rank == 0) {
        serve_dispatcher_t *d = NULL;
        harness_expect_status(&h, serve_dispatcher_create(h.rt, h.size, &d), TDL_OK, "create");
        int done_count = 0, sent = 0, same = 0, valid = 0;
        while (d && done_count < NREQ) {
            int degree = (sent % 2 && h.size > 2) ? 2 : 1;
            if (sent < NREQ && serve_dispatcher_idle(d) >= degree) {
                serve_traj_spec_t spec = {.id = 100 + (uint64_t)sent, .seed = (uint64_t)sent,
                                          .n = 1 + sent % 2, .res = 32, .steps = 3,
                                          .label = sent % 10, .cfg = 1.5f};
                serve_traj_spec_t *keep = malloc(sizeof(spec));
                *keep = spec;
                harness_expect_status(&h, serve_dispatch(d, &spec, degree, 1, false, keep), TDL_OK,
                                      "dispatch");
                sent++;
            }
            serve_inflight_t fin[8];
            int n = serve_dispatcher_poll(d, fin, 8);
            for (int i = 0; i < n; i++) {
                serve_traj_spec_t *spec = fin[i].user;
                serve_traj_t ref;
                serve_traj_init(&ref, spec, cfg.in_channels);
                serve_task_prepare(&ref);
                serve_task_step_chunk(&ref, m, NULL, false, 100);
                serve_task_decode(&ref, 0);
                bool ok_png = fin[i].png_len > 8 && !memcmp(fin[i].png, "\x89PNG", 4);
                valid += ok_png;
                if (fin[i].degree == 1)
                    same += fin[i].png_len == ref.png_len &&
                            !memcmp(fin[i].png, ref.png, ref.png_len);
                harness_expect(&h, ok_png, "request %llu: %zu bytes back",
                               (unsigned long long)fin[i].id, fin[i].png_len);
                serve_traj_free(&ref);
                free(fin[i].png);
                free(spec);
                done_count++;
            }
        }
        int ones = (NREQ + 1) / 2 + (h.size > 2 ? 0 : NREQ / 2);
        harness_expect(&h, same == ones, "%d of %d single-executor PNGs equal rank 0's", same,
                       ones);
        harness_diag(&h, "%d requests on %d executors: %d valid PNGs, %d byte-identical", NREQ,
                     h.size - 1, valid, same);
        if (d)
            harness_expect_status(&h, serve_dispatcher_stop(d), TDL_OK, "stop");
        serve_dispatcher_free(d);
    } else {
        harness_expect_status(&h, serve_executor_loop(h.rt, h.rank, m), TDL_OK, "executor");
    }
    harness_point(&h, "%d requests through %d executors: every PNG back, single-executor ones "
                      "byte for byte rank 0's",
                  NREQ, h.size - 1);
    dit_model_free(m);
    return harness_finish(&h);
}
