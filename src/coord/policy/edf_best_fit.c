/* edf_best_fit (GF-DiT): earliest deadline first; each request gets the smallest degree whose
 * estimated finish meets its deadline, else the fastest that fits; ranks left over go to this
 * round's chunks only where the cost model says the wider degree finishes sooner. */
#include "config.h"

#include "coord/policy_internal.h"

static const coord_policy_rule_t edf_best_fit_rule = {
    .before = coord_policy_before_deadline,
    .key = coord_policy_key_deadline,
    .degree = coord_policy_degree_best_fit, .widen = true};
COORD_POLICY_ENGINE_OPS(
    edf_best_fit, "edf_best_fit",
    "earliest deadline first, the smallest degree that meets it; surplus only where "
    "faster");
