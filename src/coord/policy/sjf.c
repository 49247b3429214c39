/* sjf: shortest job first, not pre-emptive: a request that has started goes on before any that
 * has not; among those that have not, the smallest single-rank time first. */
#include "config.h"

#include "coord/policy_internal.h"

static bool sjf_before(const coord_policy_view_t *v, const coord_policy_request_t *a,
                       const coord_policy_request_t *b)
{
    bool sa = a->next != COORD_POLICY_TASK_PREPARE, sb = b->next != COORD_POLICY_TASK_PREPARE;
    if (sa != sb)
        return sa;
    if (sa)
        return coord_policy_before_arrival(v, a, b);
    double ta = coord_policy_single_rank_s(v->cost, a->resolution, a->n, a->steps_total);
    double tb = coord_policy_single_rank_s(v->cost, b->resolution, b->n, b->steps_total);
    if (ta != tb)
        return ta < tb;
    return coord_policy_before_arrival(v, a, b);
}

static const coord_policy_rule_t sjf_rule = {.before = sjf_before,
                                             .degree = coord_policy_degree_fastest};
COORD_POLICY_ENGINE_OPS(sjf, "sjf",
                        "smallest job first, started requests first; the fastest degree");
