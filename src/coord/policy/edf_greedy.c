/* edf_greedy: earliest deadline first, each request as wide as the free ranks allow. */
#include "config.h"

#include "coord/policy_internal.h"

static int edf_greedy_degree(const coord_policy_view_t *v, const coord_policy_request_t *r,
                             int nfree)
{
    return nfree;
}

static const coord_policy_rule_t edf_greedy_rule = {.before = coord_policy_before_deadline,
                                                    .key = coord_policy_key_deadline,
                                                    .degree = edf_greedy_degree};
COORD_POLICY_ENGINE_OPS(edf_greedy, "edf_greedy",
                        "earliest deadline first, the widest degree that fits");
