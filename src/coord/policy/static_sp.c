/* static_spN: every chunk of every request at degree N, first come first served, the head of the
 * queue waiting until N ranks are free. The baseline GF-DiT compares against. */
#include "config.h"

#include "coord/policy_internal.h"

#define STATIC_SP(N)                                                                               \
    static int static_sp##N##_degree(const coord_policy_view_t *v,                                 \
                                     const coord_policy_request_t *r, int nfree)                   \
    {                                                                                              \
        return N <= nfree ? N : 0;                                                                 \
    }                                                                                              \
    static const coord_policy_rule_t static_sp##N##_rule = {                                       \
        .before = coord_policy_before_arrival, .key = coord_policy_key_arrival, .degree = static_sp##N##_degree, .blocking = true}; \
    COORD_POLICY_ENGINE_OPS(static_sp##N, "static_sp" #N,                                          \
                            "every chunk at degree " #N ", first come first served")

STATIC_SP(1);
STATIC_SP(2);
STATIC_SP(4);
STATIC_SP(8);
