/* edf_greedy: earliest deadline first, each request as wide as the free ranks allow. */
#include "config.h"

#include "coord/policy_internal.h"

static int edf_greedy_degree(const policy_view_t *v, const policy_request_t *r, int nfree)
{
    return nfree;
}

static const policy_rule_t edf_greedy_rule = {.before = policy_before_deadline,
                                              .degree = edf_greedy_degree};
POLICY_ENGINE_OPS(edf_greedy, "edf_greedy", "earliest deadline first, the widest degree that fits");
