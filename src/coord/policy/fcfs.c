/* fcfs: requests in order of arrival, each at the degree that finishes it soonest among those
 * the free ranks allow. */
#include "config.h"

#include "coord/policy_internal.h"

static const policy_rule_t fcfs_rule = {.before = policy_before_arrival,
                                        .degree = policy_degree_fastest};
POLICY_ENGINE_OPS(fcfs, "fcfs", "arrival order, the fastest degree that fits");
