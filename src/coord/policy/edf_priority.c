/* edf_priority: higher priority first, then earliest deadline, with edf_best_fit's degrees. A
 * request that has waited longer than EDF_PRIORITY_AGING times its own single-rank time since
 * it arrived goes before every request that has not: a large, low-priority request, pre-empted
 * at each chunk boundary by a stream of small urgent ones, still finishes. */
#include "config.h"

#include "coord/policy_internal.h"

#define EDF_PRIORITY_AGING 2.0

static bool starving(const coord_policy_view_t *v, const coord_policy_request_t *r)
{
    return v->now - r->arrival_s >
           EDF_PRIORITY_AGING *
               coord_policy_single_rank_s(v->cost, r->resolution, r->n, r->steps_total);
}

static bool edf_priority_before(const coord_policy_view_t *v, const coord_policy_request_t *a,
                                const coord_policy_request_t *b)
{
    bool sa = starving(v, a), sb = starving(v, b);
    if (sa != sb)
        return sa;
    if (sa) /* among the starving, the oldest first */
        return coord_policy_before_arrival(v, a, b);
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return coord_policy_before_deadline(v, a, b);
}

static const coord_policy_rule_t edf_priority_rule = {
    .before = edf_priority_before, .degree = coord_policy_degree_best_fit, .widen = true};
COORD_POLICY_ENGINE_OPS(edf_priority, "edf_priority",
                        "priority, then deadline, with ageing against starvation; edf_best_fit's "
                        "degrees");
