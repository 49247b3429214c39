/* Elastic data-parallel training (src/train/elastic.c): training steps on a membership of ranks
 * that a coordinator changes at step boundaries. The group's leader asks the coordinator after
 * every step (ops->poll) and broadcasts its word; a rank that leaves returns, a group that grows
 * hands the whole training state to its new members (train_trainer_sync). The global batch and
 * the data order do not depend on the membership (train.h), so neither does the loss. */
#ifndef TIDAL_TRAIN_ELASTIC_H
#define TIDAL_TRAIN_ELASTIC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "gfc/gfc.h"

struct train_trainer;

#define TRAIN_MEMBERS_MAX 512

/* A membership: world ranks in order (the first leads) and the one whose state a grown group
 * starts from; epoch numbers the memberships (each a gfc namespace of its own). */
typedef struct train_members {
    uint32_t epoch, n;
    int32_t root;
    int32_t ranks[TRAIN_MEMBERS_MAX];
} train_members_t;

typedef enum {
    TRAIN_ELASTIC_GO_ON = 0, /* the next step on the same members */
    TRAIN_ELASTIC_RESIZE,    /* `next` from the next step on */
    TRAIN_ELASTIC_STOP,      /* the job ends */
    TRAIN_ELASTIC_DONE       /* the last step is done: everyone leaves */
} train_elastic_op_t;

typedef struct train_elastic_decision {
    uint32_t op;
    train_members_t next;
} train_elastic_decision_t;

typedef enum {
    TRAIN_EVENT_STEP = 0, /* the leader: a step done (loss, members) */
    TRAIN_EVENT_CKPT,     /* the leader wrote checkpoint `path` */
    TRAIN_EVENT_DONE,     /* the leader: the last step is done */
    TRAIN_EVENT_JOINED,   /* this rank trains in a new membership */
    TRAIN_EVENT_LEFT      /* this rank left training */
} train_event_t;

typedef struct train_elastic_ops {
    void *user;
    tdl_status_t (*report)(void *user, train_event_t event, int64_t step, double loss, int members,
                           const char *path);
    /* The leader after each step: the coordinator's word, GO_ON when it said nothing. */
    tdl_status_t (*poll)(void *user, train_elastic_decision_t *out);
    /* Every member whose group failed because a member died (gfc's TDL_ERR_PEER or a timeout):
     * it tells the coordinator where it stands (steps done, the membership it trained in, why)
     * and waits for its word: RESIZE to a membership with this rank (training goes on from the
     * state of next.root, the step that failed done again), one without it (it leaves) or STOP.
     * NULL: the failure ends training. */
    tdl_status_t (*recover)(void *user, int64_t steps_done, const train_members_t *failed,
                            const char *why, train_elastic_decision_t *out);
} train_elastic_ops_t;

typedef struct train_elastic_opts {
    int64_t last_step;  /* training ends after this step */
    int64_t ckpt_every; /* the leader checkpoints every N steps and after the last */
    int keep;           /* checkpoints kept in ckpt_dir */
    const char *ckpt_dir;
} train_elastic_opts_t;

/* Trains this rank (world rank me) in *members until a decision takes it out (*left: it now
 * serves; *members is the membership it left) or stops the job (*stop). sync: the group's
 * members receive the state from members->root first; joined: report TRAIN_EVENT_JOINED once
 * the group stands. */
tdl_status_t train_elastic_run(struct train_trainer *tr, gfc_runtime_t *rt, int me,
                               const train_elastic_opts_t *o, const train_elastic_ops_t *ops,
                               train_members_t *members, bool sync, bool joined, bool *left,
                               bool *stop);

/* Whether a failed collective can be survived: a peer died or went silent (TDL_ERR_PEER,
 * TDL_ERR_TIMEOUT) and this rank is not itself declared dead (fenced). */
bool train_elastic_recoverable(gfc_runtime_t *rt, tdl_status_t st);

/* The survivors of *members agree among themselves, with no coordinator, on the membership
 * after a death: the members gfc does not hold dead, in the same order, each holding the state
 * of the one with the most steps done (train_trainer_sync), error-feedback residuals dropped.
 * Every survivor calls it after its collective failed; it tries again while more members die.
 * `needed` (or -1): a rank without which training cannot go on, whose death is TDL_ERR_PEER.
 * On success *members is the new membership (epoch + 1) and *group its group (over
 * members->ranks). */
tdl_status_t train_elastic_regroup(struct train_trainer *tr, gfc_runtime_t *rt, int me,
                                   int needed, train_members_t *members, gfc_group_t *group);

#endif /* TIDAL_TRAIN_ELASTIC_H */
