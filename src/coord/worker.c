/* A worker of `tidal run` (job.h): it trains in the membership rank 0 sets (train/elastic.h),
 * and serves (serve_worker_run) once a resize moves it out, until rank 0 sends it back or says
 * stop. Its reports to rank 0 and the commands it takes are those of serve/wire.h. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "coord/job.h"
#include "train/elastic.h"

typedef struct worker {
    const coord_worker_opts_t *o;
    serve_worker_t *w;
    gfc_runtime_t *rt;
    int me, world;
} worker_t;

static tdl_status_t report(worker_t *k, uint32_t kind, int64_t step, double loss, int members,
                           const char *path)
{
    serve_wire_report_t r = {
        .kind = kind, .rank = k->me, .members = members, .step = step, .loss = loss};
    if (path && strlen(path) >= sizeof(r.path))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "checkpoint path '%s' is longer than %zu "
                               "bytes: use a shorter --out",
                               path, sizeof(r.path) - 1);
    if (path)
        memcpy(r.path, path, strlen(path) + 1);
    unsigned char buf[SERVE_USER_BYTES];
    size_t len;
    tdl_status_t st = serve_wire_report_encode(&r, buf, &len);
    return st == TDL_OK ? serve_worker_report(k->w, buf, len) : st;
}

static tdl_status_t on_event(void *user, train_event_t ev, int64_t step, double loss, int members,
                             const char *path)
{
    static const uint32_t kinds[] = {[TRAIN_EVENT_STEP] = SERVE_REPORT_STEP,
                                     [TRAIN_EVENT_CKPT] = SERVE_REPORT_CKPT,
                                     [TRAIN_EVENT_DONE] = SERVE_REPORT_DONE,
                                     [TRAIN_EVENT_JOINED] = SERVE_REPORT_JOINED,
                                     [TRAIN_EVENT_LEFT] = SERVE_REPORT_LEFT};
    return report(user, kinds[ev], step, loss, members, path);
}

/* A membership from rank 0, checked (serve_wire_members_decode), as training takes it. */
static tdl_status_t members_decode(const worker_t *k, const serve_ctl_msg_t *msg,
                                   train_members_t *out)
{
    serve_wire_members_t m;
    tdl_status_t st = serve_wire_members_decode(msg, k->world, &m);
    if (st != TDL_OK)
        return tdl_error_raise(st, "rank %d: %s", k->me, tdl_error_get());
    out->epoch = m.epoch, out->n = m.n, out->root = m.root;
    for (uint32_t i = 0; i < m.n; i++)
        out->ranks[i] = m.ranks[i];
    return TDL_OK;
}

/* The leader after a step: a resize or a stop from rank 0, if one came. */
static tdl_status_t on_poll(void *user, train_elastic_decision_t *dec)
{
    worker_t *k = user;
    bool got = false;
    serve_ctl_msg_t msg;
    dec->op = TRAIN_ELASTIC_GO_ON;
    tdl_status_t st = serve_worker_poll(k->w, &got, &msg);
    if (st != TDL_OK || !got)
        return st;
    if (msg.op == SERVE_OP_STOP) {
        dec->op = TRAIN_ELASTIC_STOP;
        return TDL_OK;
    }
    if (msg.op != SERVE_OP_RESIZE)
        return tdl_error_raise(TDL_ERR_INTERNAL,
                               "rank %d (training): command %u from rank 0 it "
                               "cannot take",
                               k->me, msg.op);
    dec->op = TRAIN_ELASTIC_RESIZE;
    return members_decode(k, &msg, &dec->next);
}

/* A member whose group lost a rank: it says where it stands, and waits for rank 0's word (the
 * survivors' membership, a LEAVE or a STOP). A RESIZE sent before the failure is void. */
static tdl_status_t on_recover(void *user, int64_t steps_done, const train_members_t *failed,
                               const char *why, train_elastic_decision_t *dec)
{
    worker_t *k = user;
    char cut[sizeof(((serve_wire_report_t *)0)->path)];
    snprintf(cut, sizeof(cut), "%s", why); /* cut to fit */
    tdl_status_t st = report(k, SERVE_REPORT_FAILED, steps_done, NAN, (int)failed->epoch, cut);
    while (st == TDL_OK) {
        bool got = false;
        serve_ctl_msg_t msg;
        if ((st = serve_worker_poll(k->w, &got, &msg)) != TDL_OK)
            break;
        if (!got) {
            if (!gfc_peer_alive(k->rt, 0))
                return tdl_error_raise(TDL_ERR_PEER, "rank %d (training): rank 0 died (%s)", k->me,
                                       gfc_peer_why(k->rt, 0));
            usleep(500);
            continue;
        }
        if (msg.op == SERVE_OP_STOP) {
            dec->op = TRAIN_ELASTIC_STOP;
            return TDL_OK;
        }
        if (msg.op == SERVE_OP_LEAVE) {
            dec->op = TRAIN_ELASTIC_RESIZE;
            dec->next = (train_members_t){.n = 0, .root = -1};
            return TDL_OK;
        }
        if (msg.op == SERVE_OP_RECOVER) {
            dec->op = TRAIN_ELASTIC_RESIZE;
            return members_decode(k, &msg, &dec->next);
        }
        if (msg.op != SERVE_OP_RESIZE)
            return tdl_error_raise(TDL_ERR_INTERNAL,
                                   "rank %d (training, regrouping): command %u from rank 0 it "
                                   "cannot take",
                                   k->me, msg.op);
    }
    return st;
}

/* Serving starts from the training run's EMA weights, until a checkpoint replaces them. */
static void serve_weights_from(dit_model_t *serve, train_trainer_t *tr)
{
    memcpy(serve->params, train_trainer_ema(tr), serve->num_params * sizeof(float));
    dit_model_params_changed(serve);
}

static tdl_status_t reload(dit_model_t *serve, const char *path)
{
    dit_model_t *m = NULL;
    tdl_status_t st = train_weights_load_inference(path, "ema", 1, 0, NULL, &m);
    if (st == TDL_OK && m->num_params != serve->num_params)
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: another model than the one served", path);
    if (st == TDL_OK)
        memcpy(serve->params, m->params, serve->num_params * sizeof(float));
    dit_model_params_changed(serve);
    dit_model_free(m);
    return st;
}

/* Training from the newest checkpoint of the run's folder, or from its first step where there is
 * none: a fresh trainer, so nothing of what this rank trained before stays. */
static tdl_status_t restart(worker_t *k, train_trainer_t **tr, bool leader)
{
    train_trainer_free(*tr);
    *tr = NULL;
    char from[1024] = "";
    tdl_status_t st = train_trainer_create(&k->o->train, tr);
    if (st == TDL_OK)
        st = train_checkpoint_resume_auto(*tr, k->o->ckpt_dir, false, from, sizeof(from));
    if (st == TDL_ERR_NOT_FOUND) /* no checkpoint yet: the first step */
        st = TDL_OK, from[0] = '\0';
    if (st != TDL_OK)
        return tdl_error_raise(st, "rank %d: training cannot start again: %s", k->me,
                               tdl_error_get());
    if (leader) {
        printf("tidal run: training starts again from %s at step %lld\n",
               from[0] ? from : "its first step", (long long)train_trainer_steps_done(*tr));
        fflush(stdout);
    }
    return TDL_OK;
}

tdl_status_t coord_worker_run(const coord_worker_opts_t *o, gfc_runtime_t *rt, int me, int world,
                              dit_model_t *serve_model)
{
    worker_t k = {.o = o, .rt = rt, .me = me, .world = world};
    train_trainer_t *tr = NULL;
    tdl_status_t st = serve_worker_create(rt, me, serve_model, &k.w);
    if (st == TDL_OK)
        st = train_trainer_create(&o->train, &tr);
    if (st == TDL_OK) { /* every worker resumes the same checkpoint, if there is one */
        char from[1024] = "";
        st = train_checkpoint_resume_auto(tr, o->ckpt_dir, false, from, sizeof(from));
        if (st == TDL_ERR_NOT_FOUND) /* a fresh run */
            st = TDL_OK, from[0] = '\0';
        if (st == TDL_OK && from[0] && me == 1) {
            printf("tidal run: training resumes from %s at step %lld\n", from,
                   (long long)train_trainer_steps_done(tr));
            /* rank 0 counts steps from there, and names that checkpoint until a newer one */
            st = report(&k, SERVE_REPORT_RESUMED, train_trainer_steps_done(tr), NAN, world - 1,
                        from);
        }
    }
    train_elastic_opts_t eo = {.last_step = o->train.steps,
                               .ckpt_every = o->ckpt_every,
                               .keep = o->keep,
                               .ckpt_dir = o->ckpt_dir};
    train_elastic_ops_t ops = {
        .user = &k, .report = on_event, .poll = on_poll, .recover = on_recover};
    /* everyone trains at first */
    train_members_t mem = {.epoch = 0, .n = (uint32_t)(world - 1), .root = 1};
    for (int r = 1; r < world; r++)
        mem.ranks[r - 1] = r;
    bool serving = false, stop = false, sync = false, joined = false;
    while (st == TDL_OK && !stop) {
        if (!serving) {
            st = train_elastic_run(tr, rt, me, &eo, &ops, &mem, sync, joined, &serving, &stop);
            if (serving && !o->fixed) /* the newest weights there are */
                serve_weights_from(serve_model, tr);
            continue;
        }
        serve_ctl_msg_t msg;
        if ((st = serve_worker_run(k.w, &msg)) != TDL_OK)
            break;
        if (msg.op == SERVE_OP_STOP) {
            stop = true;
        } else if (msg.op == SERVE_OP_JOIN) {
            if ((st = members_decode(&k, &msg, &mem)) == TDL_OK)
                serving = false, sync = true, joined = true;
        } else if (msg.op == SERVE_OP_RESTART) {
            /* every member died: each joiner loads the newest checkpoint itself */
            if ((st = members_decode(&k, &msg, &mem)) == TDL_OK &&
                (st = restart(&k, &tr, mem.ranks[0] == me)) == TDL_OK)
                serving = false, sync = false, joined = true;
        } else if (msg.op == SERVE_OP_RELOAD) {
            char path[SERVE_USER_BYTES + 1];
            if ((st = serve_wire_reload_decode(&msg, path)) != TDL_OK)
                st = tdl_error_raise(st, "rank %d: %s", me, tdl_error_get());
            else if (reload(serve_model, path) != TDL_OK) /* a bad file keeps the old weights */
                TDL_WARN("rank %d: serving keeps its weights: %s", me, tdl_error_get());
        } else {
            st =
                tdl_error_raise(TDL_ERR_INTERNAL, "rank %d: command %u it cannot take", me, msg.op);
        }
    }
    if (st != TDL_OK && !gfc_peer_alive(rt, 0)) /* no one is left to tell */
        st = tdl_error_raise(st,
                             "rank 0, the coordinator, died (%s): the job ends; training "
                             "resumes from the newest checkpoint in %s at the next start",
                             gfc_peer_why(rt, 0), o->ckpt_dir);
    else if (st != TDL_OK && k.w) { /* rank 0 ends the job, naming this rank and why */
        char why[sizeof(((serve_wire_report_t *)0)->path)];
        snprintf(why, sizeof(why), "%s", tdl_error_get());
        tdl_status_t keep = st;
        report(&k, SERVE_REPORT_ERROR, 0, NAN, 0, why);
        st = keep;
    }
    train_trainer_free(tr);
    serve_worker_free(k.w);
    return st;
}
