/* fcfs: requests in order of arrival, each at the degree that finishes it soonest among those
 * the free ranks allow. */
#include "config.h"

#include "coord/policy_internal.h"

static const coord_policy_rule_t fcfs_rule = {.before = coord_policy_before_arrival,
                                              .key = coord_policy_key_arrival,
                                              .degree = coord_policy_degree_fastest};
COORD_POLICY_ENGINE_OPS(fcfs, "fcfs", "arrival order, the fastest degree that fits");
