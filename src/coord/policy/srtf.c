/* srtf: shortest remaining time first, pre-emptive at task boundaries: when a task ends, its
 * request competes again with every waiting one on the single-rank time it has left. */
#include "config.h"

#include "coord/policy_internal.h"

static bool srtf_before(const coord_policy_view_t *v, const coord_policy_request_t *a,
                        const coord_policy_request_t *b)
{
    double ta = coord_policy_remaining_s(v, a, 1), tb = coord_policy_remaining_s(v, b, 1);
    if (ta != tb)
        return ta < tb;
    return coord_policy_before_arrival(v, a, b);
}

static const coord_policy_rule_t srtf_rule = {.before = srtf_before,
                                              .degree = coord_policy_degree_fastest};
COORD_POLICY_ENGINE_OPS(srtf, "srtf",
                        "shortest remaining time first, pre-emptive at task boundaries");
