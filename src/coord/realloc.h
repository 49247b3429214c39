/* Reallocation policies: how many of the job's worker ranks serve, the rest training, decided
 * by the coordinator of `tidal run` from the state of serving. Like the placement policies
 * (policy.h) they do no I/O and keep no clock of their own: the caller passes its time. */
#ifndef TIDAL_COORD_REALLOC_H
#define TIDAL_COORD_REALLOC_H

#include "core/core.h"

/* What a reallocation policy sees. */
typedef struct coord_realloc_view {
    double now;       /* the caller's clock, seconds */
    int workers;      /* ranks that serve or train */
    int serving;      /* serving now, or on their way to it */
    int min_train;    /* never fewer training ranks than this (while training runs) */
    int min_serve;    /* never fewer serving ranks than this */
    bool training;    /* training still has steps to run */
    int waiting;      /* requests not started (queue and scheduler) */
    int running;      /* requests started, not finished */
    double backlog_s; /* single-rank seconds of the work of every live and waiting request */
    double at_risk;   /* requests whose deadline the current serving ranks would miss */
} coord_realloc_view_t;

#define COORD_REALLOC_MAX_PERIODS 48

typedef struct coord_realloc_opts {
    double drain_s;    /* serving aims to clear its backlog within this many seconds */
    double cooldown_s; /* a rank goes back to training only after serving needed fewer ranks
                        * for this long (hysteresis) */
    int static_serve;  /* the static policy: always this many serving */
    /* the schedule policy: from hour from_h[i] of the day (ascending, the first 0) on, a
     * share serve[i] of the workers serves; a day lasts day_s seconds of the caller's clock,
     * which reads 0 at hour start_h */
    int nperiods;
    double from_h[COORD_REALLOC_MAX_PERIODS], serve[COORD_REALLOC_MAX_PERIODS];
    double day_s, start_h;
} coord_realloc_opts_t;

/* A schedule "HOUR:SHARE,..." (e.g. "0:0.2,8:0.6,20:0.2": a fifth of the workers serve from
 * midnight, three fifths from 8 h, a fifth from 20 h) into o; TDL_ERR_INVALID_ARG naming what is
 * wrong: hours from 0, ascending, below 24; shares in [0, 1]. */
tdl_status_t coord_realloc_schedule_parse(const char *text, coord_realloc_opts_t *o);

typedef struct coord_realloc_ops {
    const char *name;
    const char *summary;
    tdl_status_t (*create)(const coord_realloc_opts_t *opts, void **state_out);
    void (*destroy)(void *state);
    /* The number of ranks that should serve now, within [min_serve, workers - min_train]
     * while training runs, and every worker once it has finished. */
    int (*decide)(void *state, const coord_realloc_view_t *view);
    bool split_only; /* decides from the workers and the time alone: no backlog_s, at_risk */
} coord_realloc_ops_t;

/* "slo_first" (the default), "static" and "schedule"; NULL for another name. */
const coord_realloc_ops_t *coord_realloc_find(const char *name);
const char *coord_realloc_names(void);

#endif /* TIDAL_COORD_REALLOC_H */
