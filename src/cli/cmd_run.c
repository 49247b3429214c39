/* `tidal run`: the main job. Rank 0 coordinates: it serves requests (HTTP, a trace, or a
 * built-in demo trace with bursts) through the scheduler of `tidal serve`, and a reallocation
 * policy (src/coord/realloc.h) decides how many worker ranks serve; the others train the DiT
 * data-parallel over gfc, and ranks move between the two at training step boundaries. The
 * global batch and the sample order do not depend on how many ranks train (train.h), so the
 * loss trajectory does not either; a rank joining training receives the whole training state
 * from a member (train_trainer_sync). doc/colocation.md. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/serve_run.h"
#include "coord/realloc.h"
#include "codec/codec.h"
#include "coord/workload.h"
#include "train/train.h"

static const tdl_param_def_t run_params[] = {
    {"model", TDL_PARAM_STRING, "fmnist", "DiT configuration: tiny, fmnist, DiT-S/2 ... DiT-XL/8",
     NULL, 1, 0},
    {"data", TDL_PARAM_STRING, "fmnist",
     "'fmnist' (Debian's dataset-fashion-mnist) or an HDF5 data set (doc/data.md)", NULL, 1, 0},
    {"resolution", TDL_PARAM_INT, "0", "training resolution (0: the data set's)", NULL, 0, 4096},
    {"train-steps", TDL_PARAM_INT, "600", "optimizer steps of the training run", NULL, 0, 1e12},
    {"batch", TDL_PARAM_INT, "32", "global batch (images per step, whatever the rank count)", NULL,
     1, 1 << 20},
    {"micro-batch", TDL_PARAM_INT, "16", "images per forward pass on one rank", NULL, 1, 1 << 16},
    {"lr", TDL_PARAM_DOUBLE, "1e-3", "AdamW learning rate", NULL, 0, 1},
    {"warmup", TDL_PARAM_INT, "100", "linear learning-rate warm-up steps", NULL, 0, 1e12},
    {"clip", TDL_PARAM_DOUBLE, "1.0", "gradient-norm clipping (0: off)", NULL, 0, 1e9},
    {"ema", TDL_PARAM_DOUBLE, "0.999", "EMA decay of the sampling weights", NULL, 0, 1},
    {"allreduce", TDL_PARAM_ENUM, "f32",
     "gradient all-reduce format (f32: exact; dynamiq: about 5 bits a value)",
     "f32|bf16|mxfp8|mxfp6|mxfp4|int8|dynamiq", 1, 0},
    {"seed", TDL_PARAM_INT, "1", "seed of every random stream (init, data order, noise)", NULL, 0,
     9.2e18},
    {"out", TDL_PARAM_STRING, "runs/run",
     "output directory: loss.csv, timeline.csv and timeline.png, samples.png, ckpt/", NULL, 1, 0},
    {"ckpt-every", TDL_PARAM_INT, "100", "checkpoint every N training steps (and at the end)", NULL,
     1, 1e12},
    {"keep", TDL_PARAM_INT, "3", "checkpoints kept", NULL, 1, 1e6},
    {"realloc", TDL_PARAM_STRING, "slo_first",
     "how many ranks serve: slo_first (serving first while it needs them, hysteresis) or static",
     NULL, 1, 0},
    {"serve-ranks", TDL_PARAM_INT, "1", "with --realloc static: ranks that always serve", NULL, 0,
     1 << 20},
    {"min-train", TDL_PARAM_INT, "1", "ranks that always train while training runs", NULL, 1,
     1 << 20},
    {"min-serve", TDL_PARAM_INT, "0", "ranks that always serve", NULL, 0, 1 << 20},
    {"drain", TDL_PARAM_DOUBLE, "2",
     "slo_first: serving gets enough ranks to clear its backlog within this many seconds", NULL,
     0.01, 1e6},
    {"cooldown", TDL_PARAM_DOUBLE, "3",
     "slo_first: seconds serving must need fewer ranks before one goes back to training", NULL, 0,
     1e6},
    {"demo", TDL_PARAM_BOOL, "true",
     "without --trace: replay a built-in trace with two bursts and end when it and training are "
     "done (--no-demo: serve HTTP until SIGTERM)",
     NULL, 0, 0},
    {"timeline-every", TDL_PARAM_DOUBLE, "0.5", "seconds between rows of timeline.csv", NULL, 0.01,
     1e6},
};

enum { OP_RESIZE = 10, OP_JOIN = 11, OP_RELOAD = 12 };
enum { DEC_GO_ON = 0, DEC_RESIZE, DEC_STOP, DEC_DONE };
enum { REP_STEP = 1, REP_LEFT, REP_JOINED, REP_CKPT, REP_DONE, REP_ERROR, REP_RESUMED };
enum { ROLE_TRAIN = 0, ROLE_SERVE, ROLE_TO_SERVE, ROLE_TO_TRAIN };

#define RUN_MAX_WORKERS 112
#define RUN_NS_TRAIN    0x72756e747261696eull /* "runtrain" */

/* A training membership: the ranks in order (the first leads), and the rank whose state a
 * new group starts from. Also the decision the leader broadcasts at every step boundary. */
typedef struct run_members {
    uint32_t op, epoch, n;
    int32_t root;
    uint16_t ranks[RUN_MAX_WORKERS];
} run_members_t;

/* A worker's report to rank 0. */
typedef struct run_report {
    uint32_t kind;
    int32_t rank, members, pad;
    int64_t step;
    double loss;
    char path[200];
} run_report_t;

typedef struct run {
    train_opts_t opts;
    int64_t train_steps, ckpt_every;
    int keep;
    char out[1024], ckpt_dir[1100];
    /* rank 0 */
    const coord_realloc_ops_t *ops;
    void *pstate;
    coord_realloc_opts_t ropts;
    int workers, min_train, min_serve;
    int role[RUN_MAX_WORKERS + 1];
    bool moved[RUN_MAX_WORKERS + 1]; /* sent to serving by a resize (not by training's end) */
    run_members_t m;                 /* the membership, as of the last resize sent */
    int pending;                     /* reports a resize still waits for */
    double decided_at, last_decide, last_row, row_every;
    double realloc_ms[4096];
    double over_budget[4096];     /* each move's time over (the step it waited for + 10 ms) */
    double over_prev[4096];       /* the same over (the step before the decision + 10 ms) */
    double last_step_at, step_ms; /* when the last step report came, how long that step took */
    double budget_ms;    /* of the resize in flight: the step before the decision + 10 ms */
    double flight_start; /* when the step under way at the decision began */
    bool flight_open;    /* that step's report has not come yet */
    int flight_first;    /* the first of the resize's moves in realloc_ms */
    int nrealloc;
    bool training_done;
    bool fixed; /* --ckpt: serving keeps those weights */
    int64_t step, last_row_step;
    double loss;
    char latest[SERVE_USER_BYTES + 1];
    FILE *timeline, *losses;
    int moves_to_serve, moves_to_train;
    int64_t first_step; /* the step training stood at when the job began (a resume) */
    bool seen_step;
    bool decided_after_start; /* the resize in flight was decided after the first step */
} run_t;

static int index_in(const run_members_t *m, int r)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (m->ranks[i] == r)
            return (int)i;
    return -1;
}

static bool in_members(const run_members_t *m, int r)
{
    return index_in(m, r) >= 0;
}

/* ---- the workers ---------------------------------------------------------------------------- */

static tdl_status_t report(serve_worker_t *w, uint32_t kind, int rank, int64_t step, double loss,
                           int members, const char *path)
{
    run_report_t r = {.kind = kind, .rank = rank, .members = members, .step = step, .loss = loss};
    if (path && strlen(path) >= sizeof(r.path))
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "checkpoint path '%s' is longer than %zu "
                               "bytes: use a shorter --out",
                               path, sizeof(r.path) - 1);
    if (path)
        memcpy(r.path, path, strlen(path) + 1);
    return serve_worker_report(w, &r, sizeof(r));
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
    tdl_status_t st = train_weights_load(path, "ema", 1, 0, &m);
    if (st == TDL_OK && m->num_params != serve->num_params)
        st = tdl_error_raise(TDL_ERR_MISMATCH, "%s: another model than the one served", path);
    if (st == TDL_OK)
        memcpy(serve->params, m->params, serve->num_params * sizeof(float));
    dit_model_params_changed(serve);
    dit_model_free(m);
    return st;
}

/* Training steps on the group of *mem until a decision takes this rank out (to serving: returns
 * with *serving set) or stops the job (*stop). */
static tdl_status_t train_phase(run_t *R, gfc_runtime_t *rt, serve_worker_t *w, int me,
                                train_trainer_t *tr, run_members_t *mem, bool sync, bool joined,
                                bool *serving, bool *stop)
{
    int ranks[RUN_MAX_WORKERS];
    for (;;) {
        for (uint32_t i = 0; i < mem->n; i++)
            ranks[i] = mem->ranks[i];
        gfc_group_t g;
        tdl_status_t st = gfc_group_init(&g, rt, ranks, (int)mem->n, RUN_NS_TRAIN ^ mem->epoch);
        if (st == TDL_OK && sync)
            st = train_trainer_sync(tr, &g, index_in(mem, mem->root));
        if (st == TDL_OK && joined)
            st = report(w, REP_JOINED, me, train_trainer_steps_done(tr), 0, (int)mem->n, NULL);
        sync = joined = false;
        bool lead = st == TDL_OK && g.me == 0;
        while (st == TDL_OK) {
            bool finished = train_trainer_steps_done(tr) >= R->train_steps;
            double loss = NAN;
            if (!finished && (st = train_trainer_step(tr, &g, &loss, NULL)) != TDL_OK)
                break;
            int64_t step = train_trainer_steps_done(tr);
            run_members_t dec = {.op = DEC_GO_ON};
            if (lead && !finished) {
                st = report(w, REP_STEP, me, step, loss, (int)mem->n, NULL);
                if (st == TDL_OK && (step % R->ckpt_every == 0 || step == R->train_steps)) {
                    char path[1024];
                    st = train_checkpoint_dir_save(tr, R->ckpt_dir, R->keep, (int)mem->n, path,
                                                   sizeof(path));
                    if (st == TDL_OK)
                        st = report(w, REP_CKPT, me, step, loss, (int)mem->n, path);
                }
            }
            if (lead && st == TDL_OK) {
                TDL_DEBUG("step %lld done", (long long)step);
                /* a resize first, even after the last step: joiners are waiting for it */
                bool got = false;
                serve_ctl_msg_t msg;
                if ((st = serve_worker_poll(w, &got, &msg)) == TDL_OK && got) {
                    if (msg.op == OP_RESIZE && msg.len == sizeof(dec)) {
                        memcpy(&dec, msg.data, sizeof(dec));
                        dec.op = DEC_RESIZE;
                    } else if (msg.op == SERVE_OP_STOP) {
                        dec.op = DEC_STOP;
                    } else {
                        st = tdl_error_raise(TDL_ERR_INTERNAL,
                                             "rank %d (training): command %u "
                                             "from rank 0 it cannot take",
                                             me, msg.op);
                    }
                }
                if (st == TDL_OK && dec.op == DEC_GO_ON && finished) {
                    dec.op = DEC_DONE;
                    st = report(w, REP_DONE, me, step, NAN, (int)mem->n, NULL);
                }
            }
            /* everyone learns the leader's decision; a failed leader fails the broadcast */
            if (st == TDL_OK)
                st = gfc_bcast(&g, &dec, sizeof(dec), GFC_DT_BYTE, 0);
            if (st != TDL_OK || dec.op == DEC_GO_ON)
                continue;
            if (dec.op == DEC_STOP) {
                *stop = true;
                return TDL_OK;
            }
            if (dec.op == DEC_DONE || (dec.op == DEC_RESIZE && !in_members(&dec, me))) {
                TDL_INFO("leaves training after step %lld", (long long)step);
                *serving = true;
                return report(w, REP_LEFT, me, step, NAN, 0, NULL);
            }
            /* a new group: the old members have the state; joiners get it from dec.root */
            bool grows = false;
            for (uint32_t i = 0; i < dec.n; i++)
                grows |= !in_members(mem, dec.ranks[i]);
            *mem = dec;
            sync = grows;
            break;
        }
        if (st != TDL_OK)
            return st;
    }
}

static tdl_status_t run_worker(void *user, tdl_params_t *params, gfc_runtime_t *rt, int me,
                               int world, dit_model_t *serve_model)
{
    (void)params;
    run_t *R = user;
    serve_worker_t *w = NULL;
    train_trainer_t *tr = NULL;
    tdl_status_t st = serve_worker_create(rt, me, serve_model, &w);
    if (st == TDL_OK)
        st = train_trainer_create(&R->opts, &tr);
    if (st == TDL_OK) { /* every worker resumes the same checkpoint, if there is one */
        char from[1024] = "";
        st = train_checkpoint_resume_auto(tr, R->ckpt_dir, false, from, sizeof(from));
        if (st == TDL_ERR_NOT_FOUND) /* a fresh run */
            st = TDL_OK, from[0] = '\0';
        if (st == TDL_OK && from[0] && me == 1) {
            printf("tidal run: training resumes from %s at step %lld\n", from,
                   (long long)train_trainer_steps_done(tr));
            /* rank 0 counts steps from there, and names that checkpoint until a newer one */
            st = report(w, REP_RESUMED, me, train_trainer_steps_done(tr), NAN, world - 1, from);
        }
    }
    /* everyone trains at first */
    run_members_t mem = {.epoch = 0, .n = (uint32_t)(world - 1), .root = 1};
    for (int r = 1; r < world; r++)
        mem.ranks[r - 1] = (uint16_t)r;
    bool serving = false, stop = false, sync = false, joined = false;
    while (st == TDL_OK && !stop) {
        if (!serving) {
            st = train_phase(R, rt, w, me, tr, &mem, sync, joined, &serving, &stop);
            if (serving && !R->fixed) /* the newest weights there are */
                serve_weights_from(serve_model, tr);
            continue;
        }
        serve_ctl_msg_t msg;
        if ((st = serve_worker_run(w, &msg)) != TDL_OK)
            break;
        if (msg.op == SERVE_OP_STOP) {
            stop = true;
        } else if (msg.op == OP_JOIN && msg.len == sizeof(mem)) {
            memcpy(&mem, msg.data, sizeof(mem));
            serving = false, sync = true, joined = true;
        } else if (msg.op == OP_RELOAD && msg.len > 0) {
            char path[SERVE_USER_BYTES + 1];
            memcpy(path, msg.data, msg.len);
            path[msg.len] = '\0';
            if (reload(serve_model, path) != TDL_OK) /* a bad file keeps the old weights */
                TDL_WARN("rank %d: serving keeps its weights: %s", me, tdl_error_get());
        } else {
            st =
                tdl_error_raise(TDL_ERR_INTERNAL, "rank %d: command %u it cannot take", me, msg.op);
        }
    }
    if (st != TDL_OK && w) { /* rank 0 ends the job, naming this rank and why */
        run_report_t r = {.kind = REP_ERROR, .rank = me};
        snprintf(r.path, sizeof(r.path), "%.*s", (int)sizeof(r.path) - 1, tdl_error_get());
        tdl_status_t keep = st;
        serve_worker_report(w, &r, sizeof(r));
        st = keep;
    }
    train_trainer_free(tr);
    serve_worker_free(w);
    return st;
}

/* ---- rank 0 -----------------------------------------------------------------------------------
 */

static tdl_status_t send_members(serve_coord_t *c, int worker, uint32_t op, const run_members_t *m)
{
    serve_ctl_msg_t msg = {.op = op, .len = sizeof(*m)};
    memcpy(msg.data, m, sizeof(*m));
    return serve_dispatcher_send(c->d, worker, &msg);
}

static void write_row(run_t *R, serve_coord_t *c, double now)
{
    int nserve = 0, ntrain = 0;
    for (int w = 1; w <= R->workers; w++) {
        nserve += R->role[w] == ROLE_SERVE;
        ntrain += R->role[w] == ROLE_TRAIN;
    }
    serve_stats_t s;
    serve_queue_stats(c->q, &s);
    uint64_t done = 0, viol = 0;
    for (int i = 0; i < SERVE_SOURCE_COUNT; i++)
        done += s.by_source[i].done, viol += s.by_source[i].slo_violations;
    double dt = now - R->last_row;
    double ips = dt > 0 ? (double)(R->step - R->last_row_step) * R->opts.batch / dt : 0;
    if (R->timeline) {
        fprintf(R->timeline, "%.3f,%d,%d,%d,%d,%lld,%.2f,%.6f,%llu,%llu\n", now, nserve, ntrain,
                s.queued, coord_sched_live(c->sched), (long long)R->step, ips, R->loss,
                (unsigned long long)done, (unsigned long long)viol);
        fflush(R->timeline);
    }
    int ranks[SERVE_ROLE_COUNT] = {[SERVE_ROLE_COORDINATOR] = 1,
                                   [SERVE_ROLE_SERVING] = nserve,
                                   [SERVE_ROLE_TRAINING] = ntrain,
                                   [SERVE_ROLE_IDLE] = R->workers - nserve - ntrain};
    serve_queue_set_ranks(c->q, ranks);
    R->last_row = now, R->last_row_step = R->step;
}

static tdl_status_t on_report(run_t *R, serve_coord_t *c, int w, const run_report_t *r, double now)
{
    switch (r->kind) {
    case REP_STEP:
        if (!R->seen_step)
            R->first_step = r->step - 1, R->seen_step = true;
        else
            R->step_ms = (now - R->last_step_at) * 1e3;
        R->last_step_at = now;
        if (R->flight_open) {
            /* the step the resize waited for has ended: its moves' budget is known */
            R->flight_open = false;
            double budget = (now - R->flight_start) * 1e3 + 10;
            for (int k = R->flight_first; k < R->nrealloc; k++)
                R->over_budget[k] = R->realloc_ms[k] / budget;
        }
        R->step = r->step, R->loss = r->loss;
        if (R->losses)
            fprintf(R->losses, "%lld,%.7g,%d\n", (long long)r->step, r->loss, r->members);
        return TDL_OK;
    case REP_RESUMED:
        if (!R->seen_step) {
            R->step = r->step;
            R->first_step = r->step;
        }
        if (!R->latest[0])
            snprintf(R->latest, sizeof(R->latest), "%s", r->path);
        return TDL_OK;
    case REP_CKPT:
        snprintf(R->latest, sizeof(R->latest), "%s", r->path);
        printf("tidal run: checkpoint %s (step %lld)\n", r->path, (long long)r->step);
        /* serving ranks reload it between their tasks */
        for (int k = 1; k <= R->workers && !R->fixed; k++)
            if (R->role[k] == ROLE_SERVE) {
                serve_ctl_msg_t msg = {.op = OP_RELOAD, .len = (uint32_t)strlen(r->path)};
                memcpy(msg.data, r->path, msg.len);
                tdl_status_t st = serve_dispatcher_send(c->d, k, &msg);
                if (st != TDL_OK)
                    return st;
            }
        return TDL_OK;
    case REP_DONE:
        R->training_done = true;
        R->step = TDL_MAX(R->step, r->step);
        printf("tidal run: training finished at step %lld; every rank serves\n",
               (long long)r->step);
        for (int k = 1; k <= R->workers; k++)
            if (R->role[k] == ROLE_TRAIN) {
                R->role[k] = ROLE_TO_SERVE;
                R->pending++;
            }
        return TDL_OK;
    case REP_LEFT:
        TDL_INFO("rank %d serves, %.1f ms after the decision", w, (now - R->decided_at) * 1e3);
        R->role[w] = ROLE_SERVE;
        R->pending--;
        /* moves decided while the workers were still starting up say nothing of a step */
        if (R->nrealloc < (int)TDL_ARRAY_SIZE(R->realloc_ms) && R->moved[w] &&
            R->decided_after_start) {
            int k = R->nrealloc++;
            R->realloc_ms[k] = (now - R->decided_at) * 1e3;
            R->over_prev[k] = R->realloc_ms[k] / R->budget_ms;
            /* until the step under way reports (it normally has by now) */
            R->over_budget[k] =
                R->flight_open
                    ? NAN
                    : R->realloc_ms[k] / ((R->last_step_at - R->flight_start) * 1e3 + 10);
        }
        R->moved[w] = false;
        tdl_status_t st = coord_sched_set_available(c->sched, w - 1, true);
        return st == TDL_OK ? coord_sched_kick(c->sched, now) : st;
    case REP_JOINED:
        R->role[w] = ROLE_TRAIN;
        R->pending--;
        return TDL_OK;
    case REP_ERROR:
        return tdl_error_raise(TDL_ERR_PEER, "rank %d failed: %.*s", w, (int)sizeof(r->path) - 1,
                               r->path);
    default:
        return tdl_error_raise(TDL_ERR_CORRUPT, "rank %d sent a report of kind %u", w, r->kind);
    }
}

/* Moves ranks toward `target` serving ones: one resize at a time. */
static tdl_status_t reallocate(run_t *R, serve_coord_t *c, int serving, int target, double now)
{
    run_members_t next = R->m;
    next.epoch++;
    next.op = 0;
    int leader = R->m.ranks[0];
    next.root = leader;
    int moved = 0;
    if (target > serving) { /* the last members leave; the leader stays */
        while (serving + moved < target && next.n > 1) {
            int r = next.ranks[--next.n];
            R->role[r] = ROLE_TO_SERVE;
            R->moved[r] = true;
            moved++;
        }
        if (!moved)
            return TDL_OK;
        R->pending = moved;
        R->moves_to_serve += moved;
    } else {
        /* idle serving ranks that hold no request's state join training */
        for (int w = R->workers; w >= 1 && serving - moved > target; w--) {
            if (R->role[w] != ROLE_SERVE || coord_sched_rank_in_use(c->sched, w - 1))
                continue;
            tdl_status_t st = coord_sched_set_available(c->sched, w - 1, false);
            if (st != TDL_OK)
                return st;
            R->role[w] = ROLE_TO_TRAIN;
            /* keep the list sorted: the state holder is named by root, not by position */
            int i = (int)next.n++;
            while (i > 0 && next.ranks[i - 1] > w) {
                next.ranks[i] = next.ranks[i - 1];
                i--;
            }
            next.ranks[i] = (uint16_t)w;
            moved++;
        }
        if (!moved)
            return TDL_OK;
        R->pending = moved;
        R->moves_to_train += moved;
        for (uint32_t i = 0; i < next.n; i++)
            if (R->role[next.ranks[i]] == ROLE_TO_TRAIN) {
                tdl_status_t st = send_members(c, next.ranks[i], OP_JOIN, &next);
                if (st != TDL_OK)
                    return st;
            }
    }
    TDL_INFO("realloc: %d serving -> %d (%d training)", serving, target, (int)next.n);
    R->decided_at = now;
    R->decided_after_start = R->seen_step && R->step_ms > 0;
    /* the target: at most the training step under way plus 10 ms (a leaving rank is in that
     * step's all-reduce, so it can leave at its end and no sooner); also kept against the step
     * before the decision, which a step slowed by the burst itself overruns */
    R->budget_ms = R->step_ms + 10;
    R->flight_start = R->last_step_at;
    R->flight_open = target > serving;
    R->flight_first = R->nrealloc;
    R->m = next;
    return send_members(c, leader, OP_RESIZE, &next);
}

static tdl_status_t run_tick(void *user, serve_coord_t *c, double now)
{
    run_t *R = user;
    run_report_t r;
    int w;
    size_t len;
    tdl_status_t st = TDL_OK;
    while (st == TDL_OK && serve_dispatcher_poll_status(c->d, &w, &r, &len))
        st = len == sizeof(r)
                 ? on_report(R, c, w, &r, now)
                 : tdl_error_raise(TDL_ERR_CORRUPT, "rank %d: a report of %zu bytes", w, len);
    if (st != TDL_OK)
        return st;
    if (now - R->last_row >= R->row_every)
        write_row(R, c, now);
    if (R->pending > 0 || now - R->last_decide < 0.02)
        return TDL_OK;
    R->last_decide = now;
    int serving = 0;
    for (int k = 1; k <= R->workers; k++)
        serving += R->role[k] == ROLE_SERVE || R->role[k] == ROLE_TO_SERVE;
    if (R->training_done)
        return TDL_OK;
    serve_stats_t s;
    serve_queue_stats(c->q, &s);
    int at_risk = 0;
    coord_sched_backlog_s(c->sched, now, &at_risk);
    coord_realloc_view_t v = {.now = now,
                              .workers = R->workers,
                              .serving = serving,
                              .min_train = R->min_train,
                              .min_serve = R->min_serve,
                              .training = true,
                              .waiting = s.queued + coord_sched_live(c->sched) -
                                         coord_sched_running(c->sched),
                              .running = coord_sched_running(c->sched),
                              .backlog_s = serve_coord_backlog_s(c, s.queued),
                              .at_risk = at_risk};
    int target = R->ops->decide(R->pstate, &v);
    return target == serving ? TDL_OK : reallocate(R, c, serving, target, now);
}

static tdl_status_t run_start(void *user, serve_coord_t *c, int world)
{
    run_t *R = user;
    R->workers = world - 1;
    R->m = (run_members_t){.n = (uint32_t)R->workers, .root = 1};
    for (int w = 1; w <= R->workers; w++) {
        R->m.ranks[w - 1] = (uint16_t)w;
        R->role[w] = ROLE_TRAIN;
        tdl_status_t st = coord_sched_set_available(c->sched, w - 1, false);
        if (st != TDL_OK)
            return st;
    }
    tdl_status_t st = R->ops->create(&R->ropts, &R->pstate);
    if (st != TDL_OK)
        return st;
    char path[1200];
    snprintf(path, sizeof(path), "%s/timeline.csv", R->out);
    if (!(R->timeline = fopen(path, "w")))
        return tdl_error_raise(TDL_ERR_IO, "%s: %s", path, strerror(errno));
    fprintf(R->timeline, "t_s,serving,training,queued,live,step,train_images_per_s,loss,done,"
                         "slo_violations\n");
    snprintf(path, sizeof(path), "%s/loss.csv", R->out);
    if (!(R->losses = fopen(path, "a")))
        return tdl_error_raise(TDL_ERR_IO, "%s: %s", path, strerror(errno));
    printf("tidal run: %d workers train the DiT and serve; reallocation %s, at least %d "
           "training\n",
           R->workers, R->ops->name, R->min_train);
    return TDL_OK;
}

static bool run_done(void *user)
{
    return ((run_t *)user)->training_done;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* 4 images of each class from the last checkpoint's EMA weights: what training has learned. */
static void sample_grid(const run_t *R)
{
    if (!R->latest[0])
        return;
    dit_model_t *m = NULL;
    tdl_status_t st = train_weights_load(R->latest, "ema", 20, 0, &m);
    int n = 0, res = 0, ch = 0, k = 0;
    int *labels = NULL;
    float *img = NULL;
    if (st == TDL_OK) {
        k = TDL_MIN(m->config.num_classes, 10), n = 4 * k, res = m->config.input_size;
        ch = m->config.in_channels;
        labels = malloc((size_t)n * sizeof(int));
        img = malloc((size_t)n * ch * res * res * sizeof(float));
        st = labels && img ? TDL_OK : tdl_error_raise(TDL_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; st == TDL_OK && i < n; i++)
        labels[i] = i % k;
    dit_sample_opts_t o = {.kind = DIT_SAMPLER_HEUN, .steps = 20, .cfg_scale = 3, .seed = 1};
    char path[1200];
    snprintf(path, sizeof(path), "%s/samples.png", R->out);
    if (st == TDL_OK && (st = dit_sample(m, labels, n, res, res, &o, img)) == TDL_OK)
        st = serve_png_write_grid(path, img, n, ch, res, res, k, 2);
    if (st == TDL_OK)
        printf("tidal run: samples of %s in %s\n", R->latest, path);
    else
        TDL_WARN("no sample grid: %s", tdl_error_get());
    free(labels), free(img);
    dit_model_free(m);
}

static void run_finish(void *user, serve_coord_t *c)
{
    run_t *R = user;
    double elapsed = tdl_clock_s() - c->t0;
    write_row(R, c, elapsed);
    /* moves whose step never reported (training ended under them): the step before */
    for (int k = 0; k < R->nrealloc; k++)
        if (isnan(R->over_budget[k]))
            R->over_budget[k] = R->over_prev[k];
    qsort(R->realloc_ms, (size_t)R->nrealloc, sizeof(double), cmp_double);
    qsort(R->over_budget, (size_t)R->nrealloc, sizeof(double), cmp_double);
    qsort(R->over_prev, (size_t)R->nrealloc, sizeof(double), cmp_double);
    if (R->timeline)
        fclose(R->timeline);
    if (R->losses)
        fclose(R->losses);
    R->timeline = R->losses = NULL;
    char loss[32] = "no step in this job";
    if (R->seen_step)
        snprintf(loss, sizeof(loss), "loss %.4f", R->loss);
    printf("tidal run: %d moves to serving, %d to training; realloc to serving p50 %.1f ms, "
           "p95 %.1f ms; training at step %lld, %s; last checkpoint %s\n",
           R->moves_to_serve, R->moves_to_train,
           serve_quantile(R->realloc_ms, (size_t)R->nrealloc, 0.5),
           serve_quantile(R->realloc_ms, (size_t)R->nrealloc, 0.95), (long long)R->step, loss,
           R->latest[0] ? R->latest : "(none)");
    printf("tidal run: moves to serving against the training step they waited for + 10 ms: p50 "
           "%.2f, p95 %.2f, worst %.2f of it (%d moves); against the step before the decision "
           "+ 10 ms: p50 %.2f, p95 %.2f\n",
           serve_quantile(R->over_budget, (size_t)R->nrealloc, 0.5),
           serve_quantile(R->over_budget, (size_t)R->nrealloc, 0.95),
           R->nrealloc ? R->over_budget[R->nrealloc - 1] : 0.0, R->nrealloc,
           serve_quantile(R->over_prev, (size_t)R->nrealloc, 0.5),
           serve_quantile(R->over_prev, (size_t)R->nrealloc, 0.95));
    printf("tidal run: training: %lld steps in this job, %.1f images/s over %.1f s\n",
           (long long)(R->step - R->first_step),
           elapsed > 0 ? (double)(R->step - R->first_step) * R->opts.batch / elapsed : 0.0,
           elapsed);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "gnuplot -e \"set terminal png size 1000,700; set output '%s/timeline.png'; "
             "set datafile separator ','; set multiplot layout 3,1 title 'tidal run'; "
             "set key top left; set ylabel 'ranks'; "
             "plot '%s/timeline.csv' using 1:2 with steps title 'serving', '' using 1:3 with "
             "steps title 'training'; set ylabel 'images/s'; plot '' using 1:7 with lines "
             "title 'training images/s'; set ylabel 'requests'; set xlabel 'seconds'; "
             "plot '' using 1:5 with steps title 'requests in the scheduler', '' using 1:4 with "
             "lines title 'waiting in the queue', '' using 1:10 with steps title "
             "'SLO violations'; unset multiplot\" 2>/dev/null",
             R->out, R->out);
    if (system(cmd) != 0)
        TDL_WARN("gnuplot did not draw %s/timeline.png (install gnuplot-nox); timeline.csv is "
                 "there",
                 R->out);
    else
        printf("tidal run: timeline in %s/timeline.csv and %s/timeline.png\n", R->out, R->out);
    sample_grid(R);
    if (R->pstate)
        R->ops->destroy(R->pstate);
    R->pstate = NULL;
}

/* Every rank: the serving model, sized for serving, starting from --ckpt or the training
 * run's initial weights. */
static tdl_status_t run_model(void *user, tdl_params_t *params, int rank, dit_model_t **out)
{
    run_t *R = user;
    (void)rank;
    const char *ckpt = tdl_param_str(params, "ckpt");
    int max_batch = (int)tdl_param_int(params, "max-batch");
    int max_res = (int)tdl_param_int(params, "max-resolution");
    struct dit_backend *be = NULL;
    tdl_status_t st = dit_backend_open(R->opts.device, -1, &be);
    if (st != TDL_OK)
        return st;
    if (ckpt) {
        R->fixed = true;
        return train_weights_load_on(ckpt, tdl_param_str(params, "weights"), max_batch, max_res, be,
                                     out);
    }
    dit_config_t cfg;
    st = dit_config_named(R->opts.model, &cfg);
    if (st == TDL_OK)
        st = dit_model_create_on(&cfg, max_batch, max_res, be, out);
    else
        dit_backend_close(be);
    if (st == TDL_OK)
        dit_model_init_weights(*out, R->opts.seed);
    return st;
}

/* Without --trace and with HTTP off: a demo trace with bursts, from tidal workload. */
static tdl_status_t demo_trace(const run_t *R, tdl_params_t *params, char *path, size_t size)
{
    coord_workload_config_t wc;
    coord_workload_config_default(&wc);
    wc.ranks = TDL_MAX(1, R->workers);
    wc.requests = 0;
    wc.seed = R->opts.seed;
    wc.mix[0] = 0.8, wc.mix[1] = 0.2, wc.mix[2] = 0; /* 32 and 64 pixels */
    wc.steps[0] = wc.steps[1] = (int)tdl_param_int(params, "steps");
    /* loads of the built-in cost model's capacity (about 5 requests/s of this mix on 3
     * workers), which is several times what a small machine shared with training serves:
     * 0.2 requests/s between bursts of 1.5/s; deadlines 8x the model's single-rank time */
    const double load[] = {0.04, 0.3, 0.04, 0.3, 0.04}, secs[] = {20, 10, 25, 10, 20};
    wc.alpha[0] = wc.alpha[1] = wc.alpha[2] = 8;
    wc.nphases = 5;
    for (int i = 0; i < wc.nphases; i++)
        wc.phase_load[i] = load[i], wc.phase_s[i] = secs[i];
    coord_cost_model_t cost;
    coord_cost_model_default(&cost);
    coord_workload_request_t *reqs = NULL;
    int n = 0;
    tdl_status_t st = coord_workload_generate(&wc, &cost, &reqs, &n);
    snprintf(path, size, "%s/demo-trace.jsonl", R->out);
    if (st == TDL_OK)
        st = coord_workload_write(path, reqs, n);
    free(reqs);
    return st;
}

static int run_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal run' takes no arguments, found '%s'", pos[0]);
    static run_t R; /* the hooks' state, on every rank */
    memset(&R, 0, sizeof(R));
    R.opts = (train_opts_t){
        .model = tdl_param_str(params, "model"),
        .data = tdl_param_str(params, "data"),
        .resolution = (int)tdl_param_int(params, "resolution"),
        .steps = tdl_param_int(params, "train-steps"),
        .batch = (int)tdl_param_int(params, "batch"),
        .micro_batch = (int)tdl_param_int(params, "micro-batch"),
        .lr = (float)tdl_param_double(params, "lr"),
        .clip = (float)tdl_param_double(params, "clip"),
        .ema_decay = (float)tdl_param_double(params, "ema"),
        .warmup = tdl_param_int(params, "warmup"),
        .seed = (uint64_t)tdl_param_int(params, "seed"),
        .allreduce = tdl_param_str(params, "allreduce"),
        .allreduce_bits = 5,
        .allreduce_round = CODEC_ROUND_DEFAULT,
        .device = tdl_param_str(params, "device"),
    };
    R.train_steps = R.opts.steps;
    R.ckpt_every = tdl_param_int(params, "ckpt-every");
    R.keep = (int)tdl_param_int(params, "keep");
    snprintf(R.out, sizeof(R.out), "%s", tdl_param_str(params, "out"));
    snprintf(R.ckpt_dir, sizeof(R.ckpt_dir), "%s/ckpt", R.out);
    R.ops = coord_realloc_find(tdl_param_str(params, "realloc"));
    if (!R.ops)
        return cli_usage_error("unknown --realloc '%s': use one of %s",
                               tdl_param_str(params, "realloc"), coord_realloc_names());
    R.ropts = (coord_realloc_opts_t){.drain_s = tdl_param_double(params, "drain"),
                                     .cooldown_s = tdl_param_double(params, "cooldown"),
                                     .static_serve = (int)tdl_param_int(params, "serve-ranks")};
    R.min_train = (int)tdl_param_int(params, "min-train");
    R.min_serve = (int)tdl_param_int(params, "min-serve");
    R.row_every = tdl_param_double(params, "timeline-every");
    /* the launcher's word for the world, before MPI starts: mpirun's, or srun's */
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size)
        size = getenv("SLURM_NTASKS");
    int world = size ? atoi(size) : 1;
    if (world < 2)
        return cli_usage_error("'tidal run' needs at least 2 ranks (mpirun -np 4 tidal run): "
                               "rank 0 coordinates, the others train and serve");
    if (world > RUN_MAX_WORKERS + 1)
        return cli_usage_error("'tidal run' takes at most %d ranks for now", RUN_MAX_WORKERS + 1);
    tdl_status_t st = tdl_mkdir_p(R.ckpt_dir);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: run: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    char trace[1200];
    if (!tdl_param_str(params, "trace") && tdl_param_bool(params, "demo")) {
        R.workers = world - 1;
        /* rank 0 writes it and replays it; every rank names it, as with --trace */
        const char *rank = getenv("OMPI_COMM_WORLD_RANK");
        if (!rank)
            rank = getenv("SLURM_PROCID");
        snprintf(trace, sizeof(trace), "%s/demo-trace.jsonl", R.out);
        if ((!rank || !strcmp(rank, "0")) &&
            (st = demo_trace(&R, params, trace, sizeof(trace))) != TDL_OK) {
            fprintf(stderr, "tidal: run: demo trace: %s\n", tdl_error_get());
            return CLI_EXIT_FAILURE;
        }
        tdl_params_set(params, "trace", trace, TDL_PARAM_SRC_CMDLINE, "tidal run");
        if (tdl_params_source(params, "exit-after-trace") == TDL_PARAM_SRC_DEFAULT)
            tdl_params_set(params, "exit-after-trace", "true", TDL_PARAM_SRC_CMDLINE, "tidal run");
    }
    serve_hooks_t hooks = {.user = &R,
                           .model = run_model,
                           .start = run_start,
                           .tick = run_tick,
                           .done = run_done,
                           .finish = run_finish,
                           .worker = run_worker};
    return serve_main(params, "run", &hooks);
}

const cli_command_t cli_cmd_run = {
    .name = "run",
    .summary = "the main job: train the DiT and serve requests on one set of ranks, moving ranks "
               "between the two as load changes",
    .usage = "mpirun -np N tidal run [--train-steps 600] [--listen none] [--trace FILE] "
             "[--realloc slo_first|static] [--out runs/run]",
    .params = run_params,
    .nparams = TDL_ARRAY_SIZE(run_params),
    .params2 = cli_serve_params,
    .nparams2 = CLI_SERVE_NPARAMS,
    .run = run_run,
};
