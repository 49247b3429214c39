/* What the policy files share: a list-scheduling engine. A policy is an order on the runnable
 * requests and a degree rule; the engine takes requests in that order and places each while
 * ranks are free, preferring the ranks that already hold the request's state. */
#ifndef TIDAL_COORD_POLICY_INTERNAL_H
#define TIDAL_COORD_POLICY_INTERNAL_H

#include "coord/policy.h"

typedef struct coord_policy_rule {
    /* true when a goes before b: a strict total order (ties fall to the request id), since the
     * engine keeps its candidates in a heap */
    bool (*before)(const coord_policy_view_t *v, const coord_policy_request_t *a,
                   const coord_policy_request_t *b);
    /* the degree wanted for r's next chunk with `nfree` ranks free (the engine clamps it to the
     * degrees the cost model has for the task's stage); 0: r waits */
    int (*degree)(const coord_policy_view_t *v, const coord_policy_request_t *r, int nfree);
    /* Optional: a key whose order (lexicographic, then the request id) is before's, and fixed
     * while a request lives (from its arrival, deadline, priority). With it, and a view that
     * gives slot_of, the engine keeps the waiting requests in a heap across calls instead of
     * ordering them all at each call. */
    void (*key)(const coord_policy_request_t *r, double k[3]);
    bool blocking; /* stop at the first request in order that cannot be placed */
    bool widen;    /* after placing, hand the ranks left to this round's chunks, one power of two
                      at a time, where the cost model says the wider degree finishes sooner */
} coord_policy_rule_t;

tdl_status_t coord_policy_engine_create(const coord_policy_rule_t *rule, void **state_out);
void coord_policy_engine_destroy(void *state);
tdl_status_t coord_policy_engine_place(void *state, const coord_policy_view_t *view,
                                       uint64_t request_id, coord_policy_placement_t *out,
                                       int max_out, int *nout);
tdl_status_t coord_policy_engine_event(void *state, const coord_policy_view_t *view,
                                       const coord_policy_event_t *ev,
                                       coord_policy_placement_t *out, int max_out, int *nout);

/* Shared orders and degree rules. */
bool coord_policy_before_arrival(const coord_policy_view_t *v, const coord_policy_request_t *a,
                                 const coord_policy_request_t *b);
bool coord_policy_before_deadline(const coord_policy_view_t *v, const coord_policy_request_t *a,
                                  const coord_policy_request_t *b);
/* Their keys. */
void coord_policy_key_arrival(const coord_policy_request_t *r, double k[3]);
void coord_policy_key_deadline(const coord_policy_request_t *r, double k[3]);
/* The degree (of the step fits, at most nfree) that finishes r soonest; ties to the smaller. */
int coord_policy_degree_fastest(const coord_policy_view_t *v, const coord_policy_request_t *r,
                                int nfree);
/* The smallest degree whose estimated finish meets r's deadline, else the fastest. */
int coord_policy_degree_best_fit(const coord_policy_view_t *v, const coord_policy_request_t *r,
                                 int nfree);

/* An ops table whose three callbacks are the engine's, for a rule named NAME_rule. */
#define COORD_POLICY_ENGINE_OPS(id, namestr, summarystr)                                           \
    static tdl_status_t id##_create(void **state_out)                                              \
    {                                                                                              \
        return coord_policy_engine_create(&id##_rule, state_out);                                  \
    }                                                                                              \
    const coord_policy_ops_t coord_policy_##id = {.name = namestr,                                 \
                                                  .summary = summarystr,                           \
                                                  .create = id##_create,                           \
                                                  .destroy = coord_policy_engine_destroy,          \
                                                  .on_arrival = coord_policy_engine_place,         \
                                                  .on_runnable = coord_policy_engine_place,        \
                                                  .on_event = coord_policy_engine_event}

extern const coord_policy_ops_t coord_policy_static_sp1, coord_policy_static_sp2,
    coord_policy_static_sp4, coord_policy_static_sp8, coord_policy_fcfs, coord_policy_sjf,
    coord_policy_srtf, coord_policy_edf_greedy, coord_policy_edf_best_fit,
    coord_policy_edf_priority;

#endif /* TIDAL_COORD_POLICY_INTERNAL_H */
