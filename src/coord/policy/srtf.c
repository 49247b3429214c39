/* srtf: shortest remaining time first, pre-emptive at task boundaries: when a task ends, its
 * request competes again with every waiting one on the single-rank time it has left. */
#include "config.h"

#include "coord/policy_internal.h"

static bool srtf_before(const policy_view_t *v, const policy_request_t *a,
                        const policy_request_t *b)
{
    double ta = policy_remaining_s(v, a, 1), tb = policy_remaining_s(v, b, 1);
    if (ta != tb)
        return ta < tb;
    return policy_before_arrival(v, a, b);
}

static const policy_rule_t srtf_rule = {.before = srtf_before,
                                        .degree = policy_degree_fastest};
POLICY_ENGINE_OPS(srtf, "srtf", "shortest remaining time first, pre-emptive at task boundaries");
