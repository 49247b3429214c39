/* Elastic data-parallel training on a changing membership (elastic.h). */
#include "config.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "train/elastic.h"
#include "train/train.h"

#define TRAIN_NS_ELASTIC 0x72756e747261696eull /* "runtrain" */
#define TRAIN_NS_REGROUP 0x726567726f757021ull /* "regroup!" */
#define REGROUP_TRIES    64

static bool is_member(const train_members_t *m, int r)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->ranks[i] == r)
            return true;
    return false;
}

static int index_of(const train_members_t *m, int r)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->ranks[i] == r)
            return (int)i;
    return -1;
}

/* The leader's part of a step boundary: its reports and checkpoint, and the decision. */
static tdl_status_t lead(train_trainer_t *tr, const train_elastic_opts_t *o,
                         const train_elastic_ops_t *ops, int members, bool finished, double loss,
                         train_elastic_decision_t *dec)
{
    int64_t step = train_trainer_steps_done(tr);
    tdl_status_t st = TDL_OK;
    if (!finished) {
        st = ops->report(ops->user, TRAIN_EVENT_STEP, step, loss, members, NULL);
        if (st == TDL_OK && (step % o->ckpt_every == 0 || step == o->last_step)) {
            char path[1024];
            st = train_checkpoint_dir_save(tr, o->ckpt_dir, o->keep, members, path, sizeof(path));
            if (st == TDL_OK)
                st = ops->report(ops->user, TRAIN_EVENT_CKPT, step, loss, members, path);
        }
    }
    TDL_DEBUG("step %lld done", (long long)step);
    /* a resize first, even after the last step: joiners are waiting for it */
    if (st == TDL_OK)
        st = ops->poll(ops->user, dec);
    if (st == TDL_OK && dec->op == TRAIN_ELASTIC_RESIZE)
        tdl_fault_point("train.resize"); /* the leader holds a resize no one else knows yet */
    if (st == TDL_OK && dec->op == TRAIN_ELASTIC_GO_ON && finished) {
        dec->op = TRAIN_ELASTIC_DONE;
        st = ops->report(ops->user, TRAIN_EVENT_DONE, step, NAN, members, NULL);
    }
    return st;
}

bool train_elastic_recoverable(gfc_runtime_t *rt, tdl_status_t st)
{
    return (st == TDL_ERR_PEER || st == TDL_ERR_TIMEOUT) && gfc_runtime_fenced_by(rt) < 0;
}

/* A decision the coordinator took after a failure, as this rank acts on it: *left when it is
 * not in the new membership, *stop for STOP, else *mem is the new one. */
static tdl_status_t take_recovery(const train_elastic_ops_t *ops, int me, int64_t step,
                                  const train_elastic_decision_t *dec, train_members_t *mem,
                                  bool *left, bool *stop)
{
    if (dec->op == TRAIN_ELASTIC_STOP) {
        *stop = true;
        return TDL_OK;
    }
    if (dec->op != TRAIN_ELASTIC_RESIZE || dec->next.n > TRAIN_MEMBERS_MAX ||
        (dec->next.n > 0 && index_of(&dec->next, dec->next.root) < 0))
        return tdl_error_raise(TDL_ERR_CORRUPT,
                               "rank %d (training): a recovery it cannot take (op %u, %u members)",
                               me, dec->op, dec->next.n);
    if (!is_member(&dec->next, me)) {
        TDL_INFO("leaves training after a member died, at step %lld", (long long)step);
        *left = true;
        return ops->report(ops->user, TRAIN_EVENT_LEFT, step, NAN, 0, NULL);
    }
    *mem = dec->next;
    return TDL_OK;
}

tdl_status_t train_elastic_run(train_trainer_t *tr, gfc_runtime_t *rt, int me,
                               const train_elastic_opts_t *o, const train_elastic_ops_t *ops,
                               train_members_t *mem, bool sync, bool joined, bool *left, bool *stop)
{
    *left = *stop = false;
    for (;;) {
        gfc_group_t g;
        tdl_status_t st =
            gfc_group_init(&g, rt, mem->ranks, (int)mem->n, TRAIN_NS_ELASTIC ^ mem->epoch);
        if (st == TDL_OK && sync)
            st = train_trainer_sync(tr, &g, index_of(mem, mem->root));
        if (st == TDL_OK && joined)
            st = ops->report(ops->user, TRAIN_EVENT_JOINED, train_trainer_steps_done(tr), 0,
                             (int)mem->n, NULL);
        sync = joined = false;
        bool leader = st == TDL_OK && g.me == 0;
        while (st == TDL_OK) {
            bool finished = train_trainer_steps_done(tr) >= o->last_step;
            double loss = NAN;
            if (!finished && (st = train_trainer_step(tr, &g, &loss, NULL)) != TDL_OK)
                break;
            train_elastic_decision_t dec = {.op = TRAIN_ELASTIC_GO_ON};
            if (leader)
                st = lead(tr, o, ops, (int)mem->n, finished, loss, &dec);
            /* everyone learns the leader's decision; a failed leader fails the broadcast */
            if (st == TDL_OK)
                st = gfc_bcast(&g, &dec, sizeof(dec), GFC_DT_BYTE, 0);
            if (st != TDL_OK || dec.op == TRAIN_ELASTIC_GO_ON)
                continue;
            if (dec.op == TRAIN_ELASTIC_STOP) {
                *stop = true;
                return TDL_OK;
            }
            int64_t step = train_trainer_steps_done(tr);
            if (dec.op == TRAIN_ELASTIC_DONE ||
                (dec.op == TRAIN_ELASTIC_RESIZE && !is_member(&dec.next, me))) {
                TDL_INFO("leaves training after step %lld", (long long)step);
                *left = true;
                /* members -1: training is over (the leader's DONE may reach rank 0 after this) */
                return ops->report(ops->user, TRAIN_EVENT_LEFT, step, NAN,
                                   dec.op == TRAIN_ELASTIC_DONE ? -1 : 0, NULL);
            }
            if (dec.op != TRAIN_ELASTIC_RESIZE || dec.next.n < 1 ||
                dec.next.n > TRAIN_MEMBERS_MAX || index_of(&dec.next, dec.next.root) < 0)
                return tdl_error_raise(TDL_ERR_CORRUPT,
                                       "rank %d (training): a decision it "
                                       "cannot take (op %u, %u members)",
                                       me, dec.op, dec.next.n);
            /* a new group: the old members have the state; joiners get it from next.root */
            bool grows = false;
            for (uint32_t i = 0; i < dec.next.n; i++)
                grows |= !is_member(mem, dec.next.ranks[i]);
            *mem = dec.next;
            sync = grows;
            break;
        }
        if (st == TDL_OK)
            continue;
        if (!ops->recover || !train_elastic_recoverable(rt, st))
            return st;
        /* a member died: the coordinator names the survivors, who redo the failed step */
        char why[256];
        snprintf(why, sizeof(why), "%s", tdl_error_get());
        int64_t step = train_trainer_steps_done(tr);
        TDL_WARN("rank %d: training at step %lld lost a member (%s); waiting for the "
                 "coordinator's word",
                 me, (long long)step, why);
        train_trainer_drop_residual(tr);
        train_elastic_decision_t dec = {.op = TRAIN_ELASTIC_GO_ON};
        if ((st = ops->recover(ops->user, step, mem, why, &dec)) != TDL_OK ||
            (st = take_recovery(ops, me, step, &dec, mem, left, stop)) != TDL_OK || *left || *stop)
            return st;
        sync = true;
    }
}

/* The members of `old` that gfc does not hold dead (this rank always), in order, into out. */
static void survivors(gfc_runtime_t *rt, int me, const train_members_t *old, train_members_t *out)
{
    out->n = 0;
    for (uint32_t i = 0; i < old->n; i++)
        if (old->ranks[i] == me || gfc_peer_alive(rt, old->ranks[i]))
            out->ranks[out->n++] = old->ranks[i];
}

tdl_status_t train_elastic_regroup(train_trainer_t *tr, gfc_runtime_t *rt, int me, int needed,
                                   train_members_t *mem, gfc_group_t *g)
{
    train_trainer_drop_residual(tr);
    const train_members_t old = *mem;
    uint32_t tried_n = 0;
    tdl_status_t st = TDL_OK;
    for (int attempt = 0; attempt < REGROUP_TRIES; attempt++) {
        if (needed >= 0 && needed != me && !gfc_peer_alive(rt, needed))
            return tdl_error_raise(TDL_ERR_PEER, "rank %d is dead (%s)", needed,
                                   gfc_peer_why(rt, needed));
        /* the group's id hashes its list: survivors with other views of the dead never meet */
        mem->epoch = old.epoch + 1;
        survivors(rt, me, &old, mem);
        /* the last try failed, and no one else is held dead yet: wait for the verdict on the one
         * that failed it (a peer found dead by another member is declared within a message) */
        for (int ms = 0; mem->n == tried_n && ms < 3000; ms++) {
            usleep(1000);
            survivors(rt, me, &old, mem);
        }
        if (mem->n == tried_n) /* no one else died: the failure was not a death */
            break;
        tried_n = mem->n;
        /* one number says both: the most steps done, and among those the first member */
        int64_t key = train_trainer_steps_done(tr) * 1024 + (1023 - index_of(mem, me)), best = 0;
        if ((st = gfc_group_init(g, rt, mem->ranks, (int)mem->n, TRAIN_NS_REGROUP ^ mem->epoch)) ==
                TDL_OK &&
            (st = gfc_allreduce(g, &key, &best, 1, GFC_DT_I64, GFC_OP_MAX, NULL)) == TDL_OK &&
            (st = train_trainer_sync(tr, g, (int)(1023 - best % 1024))) == TDL_OK) {
            mem->root = mem->ranks[1023 - best % 1024];
            return TDL_OK;
        }
        if (!train_elastic_recoverable(rt, st))
            return st;
        TDL_INFO("regroup of %u survivors failed (%s): again", mem->n, tdl_error_get());
    }
    return tdl_error_raise(st == TDL_OK ? TDL_ERR_TIMEOUT : st,
                           "training could not regroup its %u survivors: %s", tried_n,
                           tdl_error_get());
}
