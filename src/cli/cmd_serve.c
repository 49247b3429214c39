/* `tidal serve`: image requests over HTTP (and from a trace file), sampled on rank 0 one at a
 * time, first come first served, until SIGINT or SIGTERM. Multi-rank execution comes with the
 * scheduler: under mpirun the other ranks wait for the end. doc/serving.md. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/serve_run.h"
#include "coord/cost.h"
#include "coord/policy.h"
#include "coord/sched.h"
#include "mpi/bootstrap.h"
#include "gfc/gfc.h"
#include "serve/serve.h"
#include "train/train.h"

const tdl_param_def_t cli_serve_params[CLI_SERVE_NPARAMS] = {
    {"ckpt", TDL_PARAM_STRING, NULL, "weights file written by tidal train (HDF5)", NULL, 1, 0},
    {"weights", TDL_PARAM_ENUM, "ema", "which weights of the file", "ema|model", 1, 0},
    {"listen", TDL_PARAM_STRING, "127.0.0.1:8000",
     "HTTP address, HOST:PORT or [IPV6]:PORT (port 0: any free one; 'none': no HTTP, with "
     "--trace)",
     NULL, 1, 0},
    {"token", TDL_PARAM_STRING, NULL,
     "bearer token every request but /healthz must carry (better set as TIDAL_TOKEN)", NULL, 1, 0},
    {"max-body", TDL_PARAM_INT, "65536", "largest request body in bytes (larger: 413)", NULL, 64,
     1 << 26},
    {"queue-max", TDL_PARAM_INT, "256", "requests that may wait; more get 503 with Retry-After",
     NULL, 1, 1e6},
    {"keep-results", TDL_PARAM_INT, "1024",
     "finished requests kept for GET /v1/images/ID (the oldest are forgotten)", NULL, 0, 1e7},
    {"wait-timeout", TDL_PARAM_DOUBLE, "300", "seconds ?wait=1 waits before answering 504", NULL,
     0.001, 86400},
    {"max-connections", TDL_PARAM_INT, "1024", "HTTP connections open at once (a thread each)",
     NULL, 1, 65536},
    {"connection-timeout", TDL_PARAM_INT, "600",
     "seconds an HTTP connection may stay idle (0: forever)", NULL, 0, 86400},
    {"max-resolution", TDL_PARAM_INT, "128",
     "largest image side a request may ask for: 32, 64 or 128 (sizes the activations)", NULL, 32,
     128},
    {"max-batch", TDL_PARAM_INT, "8", "images per forward pass (guided: half as many)", NULL, 2,
     4096},
    {"steps", TDL_PARAM_INT, "50", "sampler steps of a request that does not say", NULL, 1,
     SERVE_MAX_STEPS},
    {"cfg", TDL_PARAM_DOUBLE, "4.0", "guidance scale of a request that does not say", NULL, 0,
     SERVE_MAX_CFG},
    {"sp", TDL_PARAM_INT, "1",
     "under mpirun: executor ranks per request (sequence-parallel degree; it must divide the "
     "tokens and the heads)",
     NULL, 1, 8},
    {"chunk", TDL_PARAM_INT, "1", "steps per STEP_CHUNK task", NULL, 1, 1000},
    {"policy", TDL_PARAM_STRING, NULL,
     "under mpirun: the placement policy (static_sp1, static_sp2, static_sp4, static_sp8, fcfs, "
     "sjf, srtf, edf_greedy, edf_best_fit, edf_priority; default: static_sp<--sp>)",
     NULL, 1, 0},
    {"cost", TDL_PARAM_STRING, NULL,
     "cost model JSON the policy estimates with (tidal profile); default: the built-in model", NULL,
     1, 0},
    {"request-log", TDL_PARAM_STRING, NULL,
     "under mpirun: a JSON line per finished request (seq, id, arrival_s, finish_s, latency_s, "
     "ok) to this file, as tidal sim --request-log writes",
     NULL, 1, 0},
    {"cfg-parallel", TDL_PARAM_BOOL, "false",
     "with an even --sp: a guided request's conditional and unconditional halves run on the two "
     "halves of its ranks at once",
     NULL, 0, 0},
    {"trace", TDL_PARAM_STRING, NULL,
     "JSON-lines file of requests, each with \"at_ms\", its arrival after the start", NULL, 1, 0},
    {"exit-after-trace", TDL_PARAM_BOOL, "false",
     "exit when every request of --trace has finished, with a latency summary", NULL, 0, 0},
    {"max-seconds", TDL_PARAM_DOUBLE, "0", "stop after this long (0: at SIGINT or SIGTERM)", NULL,
     0, 1e9},
    {"progress-every", TDL_PARAM_DOUBLE, "5", "seconds between progress lines (0: none)", NULL, 0,
     1e6},
    CLI_DEVICE_PARAM,
};

/* SIGINT and SIGTERM: stop taking requests, finish the one running, fail the waiting ones,
 * exit 0. A second signal exits at once. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    if (stop_signal)
        _exit(128 + sig);
    stop_signal = sig;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- the trace replay thread ----------------------------------------------------------------- */

typedef struct trace_run {
    serve_trace_t trace;
    serve_queue_t *queue;
    double t0;
    pthread_t thread;
    bool started;
    int stop;     /* atomic: the main thread asks the replay to end */
    int finished; /* atomic: every entry was submitted (or refused) */
    size_t submitted, rejected;
} trace_run_t;

static void *trace_main(void *arg)
{
    trace_run_t *tr = arg;
    for (size_t i = 0; i < tr->trace.count; i++) {
        const serve_trace_entry_t *e = &tr->trace.entries[i];
        for (;;) {
            if (__atomic_load_n(&tr->stop, __ATOMIC_ACQUIRE))
                goto out;
            double left = tr->t0 + (double)e->at_ms * 1e-3 - tdl_clock_s();
            if (left <= 0)
                break;
            usleep((useconds_t)(TDL_MIN(left, 0.05) * 1e6));
        }
        char id[SERVE_ID_MAX + 1];
        tdl_status_t st = serve_queue_submit(tr->queue, &e->params, SERVE_SOURCE_TRACE, id);
        if (st == TDL_OK) {
            tr->submitted++;
            TDL_DEBUG("trace line %ld: request %s at %lld ms", e->line, id, (long long)e->at_ms);
        } else {
            if (st == TDL_ERR_MISMATCH) /* the queue did not count it */
                serve_queue_count_rejected(tr->queue, SERVE_SOURCE_TRACE);
            tr->rejected++;
            TDL_WARN("trace line %ld: refused: %s", e->line, tdl_error_get());
        }
    }
out:
    __atomic_store_n(&tr->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- sampling one request -------------------------------------------------------------------- */

static void run_job(dit_model_t *m, serve_queue_t *q, serve_job_t *job)
{
    const serve_request_params_t *p = serve_job_params(job);
    const dit_config_t *c = &m->config;
    int n = p->n, res = p->resolution;
    /* an unconditional request gains nothing from guidance: both halves would be the same */
    dit_sample_opts_t o = {.kind = p->sampler,
                           .steps = p->steps,
                           .cfg_scale = p->label < 0 ? 1.0f : (float)p->cfg,
                           .seed = p->seed};
    int *labels = malloc((size_t)n * sizeof(int));
    float *img = malloc((size_t)n * c->in_channels * res * res * sizeof(float));
    unsigned char *png = NULL;
    size_t len = 0;
    double t0 = tdl_clock_s();
    tdl_status_t st = TDL_OK;
    if (!labels || !img)
        st = tdl_error_raise(TDL_ERR_NOMEM, "out of memory for %d images of %d", n, res);
    for (int i = 0; st == TDL_OK && i < n; i++)
        labels[i] = p->label;
    if (st == TDL_OK)
        st = dit_sample(m, labels, n, res, res, &o, img);
    if (st == TDL_OK) {
        int cols = 1;
        while (cols * cols < n)
            cols++;
        st = serve_png_encode(img, n, c->in_channels, res, res, cols, n > 1 ? 2 : 0, &png, &len);
    }
    free(labels), free(img);
    if (st == TDL_OK) {
        TDL_INFO("request %s: %d image(s) of %d, label %d, %d steps, cfg %.2f, seed %llu: %.3f s",
                 p->id, n, res, p->label, p->steps, o.cfg_scale, (unsigned long long)p->seed,
                 tdl_clock_s() - t0);
        serve_job_done(q, job, png, len);
    } else {
        char why[SERVE_ERROR_MAX];
        snprintf(why, sizeof(why), "sampling failed: %s", tdl_error_get());
        TDL_WARN("request %s: %s", p->id, why);
        serve_job_fail(q, job, why);
    }
}

/* ---- placing requests on executor ranks (under mpirun) -----------------------------------------
 */

static void spec_of(const serve_request_params_t *p, uint64_t id, serve_traj_spec_t *spec)
{
    *spec = (serve_traj_spec_t){.id = id,
                                .seed = p->seed,
                                .n = p->n,
                                .res = p->resolution,
                                .steps = p->steps,
                                .label = p->label,
                                /* unconditional: guidance would mix two equal halves */
                                .cfg = p->label < 0 ? 1.0f : (float)p->cfg,
                                .sampler = (int)p->sampler,
                                .priority = p->priority,
                                .deadline_ms = (double)p->deadline_ms};
}

/* ---- the coordinator: a policy places every task, the executors run it --------------------- */

typedef serve_coord_t coord_t;
typedef serve_coord_req_t coord_req_t;

static tdl_status_t coord_start(void *user, const coord_sched_task_t *t)
{
    coord_t *c = user;
    coord_req_t *r = &c->reqs[t->id];
    int ranks[SERVE_MAX_DEGREE], prev[SERVE_MAX_DEGREE];
    for (int i = 0; i < t->degree; i++) /* the policy's rank k is executor k + 1 */
        ranks[i] = t->ranks[i] + 1;
    for (int i = 0; i < t->nprev; i++)
        prev[i] = t->prev[i] + 1;
    bool guided = r->spec.label >= 0 && r->spec.cfg != 1.0f;
    serve_task_cmd_t cmd = {.kind = t->task == COORD_POLICY_TASK_PREPARE ? SERVE_TASK_PREPARE
                                    : t->task == COORD_POLICY_TASK_STEP_CHUNK
                                        ? SERVE_TASK_STEP_CHUNK
                                        : SERVE_TASK_DECODE,
                            .steps = t->steps,
                            .ranks = ranks,
                            .nranks = t->degree,
                            .prev = prev,
                            .nprev = t->nprev,
                            .move = t->move,
                            .cfg_parallel = c->cfg_parallel && guided && t->degree % 2 == 0,
                            .seq = r->next_seq++};
    TDL_DEBUG("request %s: %s%s on ranks %d..%d (%d), estimate %.4f s",
              serve_job_params(r->job)->id, serve_task_name(cmd.kind), t->move ? " (moved)" : "",
              ranks[0], ranks[t->degree - 1], t->degree, t->estimate_s);
    return serve_dispatch_task(c->d, &r->spec, &cmd, (void *)(uintptr_t)t->id);
}

static void coord_log(coord_t *c, uint64_t id, double now, bool ok)
{
    if (!c->log)
        return;
    coord_req_t *r = &c->reqs[id];
    fprintf(c->log,
            "{\"seq\": %llu, \"id\": \"%s\", \"resolution\": %d, \"arrival_s\": %.6f, "
            "\"finish_s\": %.6f, \"latency_s\": %.6f, \"ok\": %s}\n",
            (unsigned long long)id, serve_job_params(r->job)->id, r->spec.res, r->arrival_s, now,
            now - r->arrival_s, ok ? "true" : "false");
    fflush(c->log);
}

/* A request from the queue enters the scheduler (which may start its first task at once). */
static tdl_status_t coord_arrive(coord_t *c, serve_job_t *job)
{
    if (c->nreqs == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        coord_req_t *more = realloc(c->reqs, cap * sizeof(*more));
        if (!more)
            return tdl_error_raise(TDL_ERR_NOMEM, "coordinator: out of memory");
        c->reqs = more, c->cap = cap;
    }
    double now = tdl_clock_s() - c->t0;
    const serve_request_params_t *p = serve_job_params(job);
    coord_req_t *r = &c->reqs[c->nreqs];
    *r = (coord_req_t){.job = job, .arrival_s = now};
    spec_of(p, c->nreqs + 1, &r->spec);
    bool guided = r->spec.label >= 0 && r->spec.cfg != 1.0f;
    coord_sched_request_t sr = {.resolution = r->spec.res,
                                .n = r->spec.n * (guided ? 2 : 1),
                                .steps = r->spec.steps,
                                .step_evals = r->spec.sampler == DIT_SAMPLER_HEUN ? 2 : 1,
                                .deadline_s = p->deadline_ms > 0 ? now + p->deadline_ms / 1e3 : 0,
                                .priority = p->priority};
    c->nreqs++;
    return coord_sched_arrive(c->sched, now, &sr, NULL);
}

/* Reported tasks: the scheduler hears of them; finished requests go back to the queue. */
static tdl_status_t coord_collect(coord_t *c, int *nout)
{
    serve_inflight_t fin[SERVE_MAX_DEGREE * 4];
    int n = serve_dispatcher_poll(c->d, fin, (int)TDL_ARRAY_SIZE(fin));
    double now = tdl_clock_s() - c->t0;
    tdl_status_t st = TDL_OK;
    for (int i = 0; i < n; i++) {
        uint64_t id = (uintptr_t)fin[i].user;
        coord_req_t *r = &c->reqs[id];
        tdl_status_t s;
        if (fin[i].status == TDL_OK) {
            s = coord_sched_finished(c->sched, now, id, NULL);
            if (fin[i].kind == SERVE_TASK_DECODE) {
                TDL_INFO("request %s: done, %.3f s after it arrived", serve_job_params(r->job)->id,
                         now - r->arrival_s);
                coord_log(c, id, now, true);
                serve_job_done(c->q, r->job, fin[i].png, fin[i].png_len);
            }
        } else {
            free(fin[i].png);
            char why[SERVE_ERROR_MAX];
            snprintf(why, sizeof(why),
                     "its %s task failed on executor ranks %d..%d (see their "
                     "log)",
                     serve_task_name(fin[i].kind), fin[i].ranks[0],
                     fin[i].ranks[fin[i].degree - 1]);
            coord_log(c, id, now, false);
            serve_job_fail(c->q, r->job, why);
            s = coord_sched_failed(c->sched, now, id);
        }
        if (st == TDL_OK)
            st = s;
    }
    *nout = n;
    return st;
}

double serve_coord_backlog_s(const serve_coord_t *c, int waiting)
{
    int live = coord_sched_live(c->sched);
    double now = tdl_clock_s() - c->t0, sum = coord_sched_backlog_s(c->sched, now, NULL);
    /* a request still in the queue counts as the average live one, or a small one */
    double each = live ? sum / live
                       : coord_policy_single_rank_s(&c->cost, 32, 1, 2.0 * 20 /* 20 Heun steps */);
    return sum + waiting * each;
}

/* The policy's degrees this model and job can run: they divide the heads and the width, and
 * fit the executors. */
static void coord_trim_cost(coord_cost_model_t *cost, const dit_config_t *m, int executors)
{
    for (int k = 0; k < COORD_COST_NSTAGES; k++) {
        int kept = 0;
        for (int i = 0; i < cost->nfits[k]; i++) {
            int p = cost->fits[k][i].degree;
            if (p <= executors && p <= SERVE_MAX_DEGREE && m->num_heads % p == 0 &&
                m->hidden_size % p == 0)
                cost->fits[k][kept++] = cost->fits[k][i];
        }
        cost->nfits[k] = kept;
    }
}

/* ---- rank 0 ---------------------------------------------------------------------------------- */

static void print_latency(const char *what, serve_queue_t *q, serve_source_t src,
                          const serve_counts_t *k, double elapsed)
{
    double *lat = NULL;
    size_t nl = 0;
    if (serve_queue_latencies(q, src, &lat, &nl) != TDL_OK)
        nl = 0;
    printf("tidal serve: %s: %llu requests, %llu done, %llu failed, %llu rejected in %.1f s "
           "(%.2f done/s); latency p50 %.3f s, p95 %.3f s, p99 %.3f s; %llu SLO violations\n",
           what, (unsigned long long)(k->submitted + k->rejected), (unsigned long long)k->done,
           (unsigned long long)k->failed, (unsigned long long)k->rejected, elapsed,
           elapsed > 0 ? (double)k->done / elapsed : 0.0, serve_quantile(lat, nl, 0.50),
           serve_quantile(lat, nl, 0.95), serve_quantile(lat, nl, 0.99),
           (unsigned long long)k->slo_violations);
    free(lat);
}

static int serve_rank0(tdl_params_t *params, int world, dit_model_t *m, serve_dispatcher_t *d,
                       const serve_hooks_t *hooks)
{
    const char *ckpt = tdl_param_str(params, "ckpt");
    const char *listen = tdl_param_str(params, "listen");
    const char *trace_path = tdl_param_str(params, "trace");
    bool http_on = strcasecmp(listen, "none") != 0;
    bool exit_after_trace = tdl_param_bool(params, "exit-after-trace");
    int max_res = (int)tdl_param_int(params, "max-resolution");
    double max_seconds = tdl_param_double(params, "max-seconds");
    double progress_every = tdl_param_double(params, "progress-every");

    tdl_status_t st = TDL_OK;
    int sp = (int)tdl_param_int(params, "sp"), chunk = (int)tdl_param_int(params, "chunk");
    bool cfg_par = tdl_param_bool(params, "cfg-parallel");
    const dit_config_t *c = &m->config;
    serve_limits_t lim = {.num_classes = c->num_classes,
                          .max_resolution = max_res,
                          .default_resolution = 32,
                          .default_steps = (int)tdl_param_int(params, "steps"),
                          .default_cfg = tdl_param_double(params, "cfg")};
    int in = c->input_size;
    if ((in == 32 || in == 64 || in == 128) && in <= max_res)
        lim.default_resolution = in;

    int rc = CLI_EXIT_FAILURE;
    coord_t co;
    memset(&co, 0, sizeof(co));
    int admit_max = TDL_MAX(16, 4 * (world - 1));
    char policy_buf[32];
    const char *policy_name = tdl_param_str(params, "policy");
    if (!policy_name) {
        snprintf(policy_buf, sizeof(policy_buf), "static_sp%d", sp);
        policy_name = policy_buf;
    }
    serve_queue_t *q = NULL;
    serve_http_t *http = NULL;
    trace_run_t tr;
    memset(&tr, 0, sizeof(tr));
    double elapsed = 0;
    if (trace_path && (st = serve_trace_load(trace_path, &lim, &tr.trace)) != TDL_OK) {
        rc = cli_usage_error("--trace: %s", tdl_error_get());
        goto out;
    }
    st = serve_queue_create((int)tdl_param_int(params, "queue-max"),
                            (int)tdl_param_int(params, "keep-results"), &q);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
        goto out;
    }
    co.d = d, co.q = q, co.cfg_parallel = cfg_par;
    if (d) {
        const char *cpath = tdl_param_str(params, "cost");
        if (cpath)
            st = coord_cost_model_load(cpath, &co.cost);
        else
            coord_cost_model_default(&co.cost);
        coord_trim_cost(&co.cost, c, world - 1);
        const char *log_path = tdl_param_str(params, "request-log");
        if (st == TDL_OK && log_path && !(co.log = fopen(log_path, "w")))
            st = tdl_error_raise(TDL_ERR_IO, "--request-log %s: %s", log_path, strerror(errno));
        coord_sched_config_t sc = {.ranks = world - 1,
                                   .chunk = chunk,
                                   .max_degree = SERVE_MAX_DEGREE,
                                   .cost = &co.cost,
                                   .policy = coord_policy_find(policy_name),
                                   .start = coord_start,
                                   .user = &co};
        if (st == TDL_OK)
            st = coord_sched_create(&sc, &co.sched);
        if (st == TDL_OK && hooks && hooks->start)
            st = hooks->start(hooks->user, &co, world);
        if (st != TDL_OK) {
            fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
            goto out;
        }
    }
    /* alone, rank 0 coordinates and serves; under mpirun the others execute */
    int ranks[SERVE_ROLE_COUNT] = {[SERVE_ROLE_COORDINATOR] = 1,
                                   [SERVE_ROLE_SERVING] = d ? world - 1 : 1,
                                   [SERVE_ROLE_IDLE] = d ? 0 : world - 1};
    serve_queue_set_ranks(q, ranks);
    if (http_on) {
        serve_http_opts_t ho = {
            .listen = listen,
            .token = tdl_param_str(params, "token"),
            .max_body = (size_t)tdl_param_int(params, "max-body"),
            .wait_timeout_ms = (int)ceil(tdl_param_double(params, "wait-timeout") * 1e3),
            .max_connections = (int)tdl_param_int(params, "max-connections"),
            .connection_timeout_s = (int)tdl_param_int(params, "connection-timeout"),
            .limits = lim};
        if ((st = serve_http_start(&ho, q, &http)) != TDL_OK) {
            fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
            goto out;
        }
    }
    printf("tidal serve: %s (%zu parameters, %d classes) from %s (%s weights), up to %dx%d, "
           "queue of %lld\n",
           c->name, m->num_params, c->num_classes, ckpt ? ckpt : "the training run",
           tdl_param_str(params, "weights"), max_res, max_res,
           (long long)tdl_param_int(params, "queue-max"));
    if (http) {
        /* the address as bound: the port chosen when it said 0 */
        char host[300];
        const char *colon = strrchr(listen, ':');
        snprintf(host, sizeof(host), "%.*s", (int)(colon - listen), listen);
        printf("tidal serve: listening on http://%s:%d%s\n", host, serve_http_port(http),
               tdl_param_str(params, "token")
                   ? " (bearer token required)"
                   : " (no token required: anyone who reaches this address may submit; set "
                     "TIDAL_TOKEN to require one)");
    }
    if (trace_path)
        printf("tidal serve: replaying %zu requests from %s%s\n", tr.trace.count, trace_path,
               exit_after_trace ? ", exiting when they are done" : "");
    fflush(stdout);

    tr.queue = q;
    tr.t0 = tdl_clock_s();
    co.t0 = tr.t0;
    if (trace_path) {
        if (pthread_create(&tr.thread, NULL, trace_main, &tr) != 0) {
            fprintf(stderr, "tidal: serve: cannot start the trace thread\n");
            goto out;
        }
        tr.started = true;
    }
    double t0 = tr.t0, last = t0;
    uint64_t last_done = UINT64_MAX;
    const char *why = "signal";
    for (;;) {
        if (stop_signal) {
            why = stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
            break;
        }
        serve_job_t *job;
        if (!d) {
            st = serve_queue_pop(q, 200, &job);
            if (st == TDL_OK)
                run_job(m, q, job);
        } else {
            int got = 0, admitted = 0;
            st = coord_collect(&co, &got);
            /* the policy sees up to a few requests per executor; the rest wait in the queue,
             * which answers 503 when it is full */
            while (st == TDL_OK && coord_sched_live(co.sched) < admit_max &&
                   serve_queue_pop(q, 0, &job) == TDL_OK) {
                st = coord_arrive(&co, job);
                admitted++;
            }
            if (st == TDL_OK && hooks && hooks->tick)
                st = hooks->tick(hooks->user, &co, tdl_clock_s() - co.t0);
            if (st == TDL_OK && !hooks && coord_sched_live(co.sched) > 0 &&
                coord_sched_running(co.sched) == 0)
                st = tdl_error_raise(TDL_ERR_INTERNAL,
                                     "policy %s leaves %d requests waiting with "
                                     "every executor idle",
                                     coord_sched_policy_name(co.sched), coord_sched_live(co.sched));
            if (st != TDL_OK) {
                fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
                goto out;
            }
            if (!got && !admitted)
                usleep(300);
        }
        double now = tdl_clock_s();
        /* the replay's end first: the counts read after it include its last request */
        bool trace_over = trace_path && __atomic_load_n(&tr.finished, __ATOMIC_ACQUIRE);
        serve_stats_t s;
        serve_queue_stats(q, &s);
        uint64_t done = 0, failed = 0, rejected = 0;
        for (int i = 0; i < SERVE_SOURCE_COUNT; i++) {
            done += s.by_source[i].done;
            failed += s.by_source[i].failed;
            rejected += s.by_source[i].rejected;
        }
        if (progress_every > 0 && now - last >= progress_every) {
            if (done + failed != last_done || s.queued || s.running) {
                printf("tidal serve: %8.1f s  done %llu  failed %llu  rejected %llu  queue %d\n",
                       now - t0, (unsigned long long)done, (unsigned long long)failed,
                       (unsigned long long)rejected, s.queued);
                fflush(stdout);
            }
            last = now;
            last_done = done + failed;
        }
        if (max_seconds > 0 && now - t0 >= max_seconds) {
            why = "--max-seconds";
            break;
        }
        const serve_counts_t *k = &s.by_source[SERVE_SOURCE_TRACE];
        if (exit_after_trace && trace_over && k->done + k->failed >= k->submitted &&
            (!hooks || !hooks->done || hooks->done(hooks->user))) {
            why = "the trace is done";
            break;
        }
    }
    rc = CLI_EXIT_OK;
    elapsed = tdl_clock_s() - t0;
    printf("tidal serve: stopping (%s)\n", why);
    fflush(stdout);
out:
    if (tr.started) {
        __atomic_store_n(&tr.stop, 1, __ATOMIC_RELEASE);
        pthread_join(tr.thread, NULL);
    }
    if (q)
        serve_queue_close(q, "the server is shutting down");
    serve_http_stop(http); /* after the close: no handler is left waiting */
    if (q && rc == CLI_EXIT_OK) {
        serve_stats_t s;
        serve_queue_stats(q, &s);
        if (trace_path)
            print_latency("trace", q, SERVE_SOURCE_TRACE, &s.by_source[SERVE_SOURCE_TRACE],
                          elapsed);
        if (http)
            print_latency("http", q, SERVE_SOURCE_HTTP, &s.by_source[SERVE_SOURCE_HTTP], elapsed);
        fflush(stdout);
    }
    /* the requests the scheduler took and started finish before the executors stop; those it
     * has not started fail now */
    if (co.sched) {
        uint64_t ids[64];
        int n;
        while ((n = coord_sched_drop_waiting(co.sched, ids, (int)TDL_ARRAY_SIZE(ids))) > 0)
            for (int i = 0; i < n; i++)
                serve_job_fail(q, co.reqs[ids[i]].job, "the server is shutting down");
    }
    while (co.sched && rc == CLI_EXIT_OK && coord_sched_live(co.sched) > 0) {
        int got = 0;
        if ((st = coord_collect(&co, &got)) == TDL_OK && hooks && hooks->tick)
            st = hooks->tick(hooks->user, &co, tdl_clock_s() - co.t0);
        if (st != TDL_OK) {
            fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
            rc = CLI_EXIT_FAILURE;
        }
        if (!got)
            usleep(300);
    }
    /* and what is still in flight after a failure */
    while (d && serve_dispatcher_inflight(d) > 0) {
        serve_inflight_t fin[SERVE_MAX_DEGREE * 4];
        int got = serve_dispatcher_poll(d, fin, (int)TDL_ARRAY_SIZE(fin));
        for (int i = 0; i < got; i++)
            free(fin[i].png);
        if (!got)
            usleep(300);
    }
    if (co.sched) {
        coord_sched_stats_t k;
        coord_sched_get_stats(co.sched, &k);
        printf("tidal serve: policy %s: %ld tasks, %ld moves of state\n",
               coord_sched_policy_name(co.sched), k.tasks, k.migrations);
        if (hooks && hooks->finish)
            hooks->finish(hooks->user, &co);
    }
    coord_sched_free(co.sched);
    free(co.reqs);
    if (co.log)
        fclose(co.log);
    serve_queue_destroy(q);
    serve_trace_free(&tr.trace);
    return rc;
}

static int serve_run(tdl_params_t *params, int npos, char **pos)
{
    if (npos > 0)
        return cli_usage_error("'tidal serve' takes no arguments, found '%s'", pos[0]);
    return serve_main(params, "serve", NULL);
}

int serve_main(tdl_params_t *params, const char *what, const serve_hooks_t *hooks)
{
    if (!(hooks && hooks->model) && !tdl_param_str(params, "ckpt"))
        return cli_usage_error("'tidal serve' needs --ckpt FILE (a weights file from tidal "
                               "train)");
    int max_res = (int)tdl_param_int(params, "max-resolution");
    if (max_res != 32 && max_res != 64 && max_res != 128)
        return cli_usage_error("--max-resolution must be 32, 64 or 128, not %d", max_res);
    const char *listen = tdl_param_str(params, "listen");
    bool http_on = strcasecmp(listen, "none") != 0;
    if (!http_on && !tdl_param_str(params, "trace"))
        return cli_usage_error("--listen none leaves nothing to serve: give --trace FILE");
    char host[SERVE_HOST_MAX + 1];
    int port;
    if (http_on && serve_listen_parse(listen, host, &port) != TDL_OK)
        return cli_usage_error("%s", tdl_error_get());
    if (tdl_param_bool(params, "exit-after-trace") && !tdl_param_str(params, "trace"))
        return cli_usage_error("--exit-after-trace needs --trace FILE");
    const char *pname = tdl_param_str(params, "policy");
    if (pname && !coord_policy_find(pname))
        return cli_usage_error("unknown --policy '%s': use one of %s", pname, coord_policy_names());
    int sp = (int)tdl_param_int(params, "sp");
    if (!pname && sp != 1 && sp != 2 && sp != 4 && sp != 8)
        return cli_usage_error("--sp %d: use 1, 2, 4 or 8 (or a dynamic --policy)", sp);
    if (tdl_param_str(params, "cost")) {
        coord_cost_model_t cm;
        if (coord_cost_model_load(tdl_param_str(params, "cost"), &cm) != TDL_OK)
            return cli_usage_error("--cost: %s", tdl_error_get());
    }

    tdl_boot_info_t me;
    tdl_status_t st = tdl_boot_init(NULL, NULL, &me);
    if (st != TDL_OK) {
        fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
        return CLI_EXIT_FAILURE;
    }
    if (me.size > 1)
        tdl_log_set_rank(me.rank);
    /* on every rank: SIGTERM from mpirun or Slurm reaches them all */
    install_signals();
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* every rank loads the model; under mpirun the gfc runtime joins them */
    int rc = CLI_EXIT_OK;
    dit_model_t *m = NULL;
    gfc_runtime_t *rt = NULL;
    serve_dispatcher_t *d = NULL;
    if (hooks && hooks->model)
        st = hooks->model(hooks->user, params, me.rank, &m);
    else {
        struct dit_backend *be = NULL;
        st = dit_backend_open(tdl_param_str(params, "device"), -1, &be);
        if (st == TDL_OK)
            st = train_weights_load_on(tdl_param_str(params, "ckpt"),
                                       tdl_param_str(params, "weights"),
                                       (int)tdl_param_int(params, "max-batch"), max_res, be, &m);
    }
    if (st != TDL_OK) {
        fprintf(stderr, "tidal[%d]: %s: %s\n", me.rank, what, tdl_error_get());
        rc = CLI_EXIT_FAILURE;
    }
    if (me.size > 1) {
        /* a static degree must fit the executors and divide the heads and the width */
        int sp = (int)tdl_param_int(params, "sp");
        const char *pname = tdl_param_str(params, "policy");
        if (pname && !strncmp(pname, "static_sp", 9))
            sp = atoi(pname + 9);
        if (rc == CLI_EXIT_OK && (!pname || !strncmp(pname, "static_sp", 9))) {
            const dit_config_t *mc = &m->config;
            if (sp > me.size - 1) {
                if (me.rank == 0)
                    fprintf(stderr,
                            "tidal: serve: degree %d needs %d executor ranks; this job "
                            "has %d (mpirun -np %d)\n",
                            sp, sp, me.size - 1, sp + 1);
                rc = CLI_EXIT_USAGE;
            } else if (mc->num_heads % sp || mc->hidden_size % sp) {
                if (me.rank == 0)
                    fprintf(stderr,
                            "tidal: serve: degree %d does not divide the model's %d heads "
                            "and width %d\n",
                            sp, mc->num_heads, mc->hidden_size);
                rc = CLI_EXIT_USAGE;
            }
        }
        gfc_runtime_config_t gc;
        if ((st = gfc_runtime_config_from_params(params, &gc)) == TDL_OK) {
            gc.rank = me.rank, gc.size = me.size, gc.allgather = tdl_boot_allgatherv;
            st = gfc_runtime_create(&gc, &rt);
        }
        if (st != TDL_OK && rc == CLI_EXIT_OK) {
            fprintf(stderr, "tidal[%d]: serve: %s\n", me.rank, tdl_error_get());
            rc = CLI_EXIT_FAILURE;
        }
        /* everyone ready, or everyone leaves */
        int64_t bad = rc != CLI_EXIT_OK;
        if (tdl_boot_allreduce_sum_i64(&bad) != TDL_OK || bad)
            rc = rc != CLI_EXIT_OK ? rc : CLI_EXIT_FAILURE;
        else if (me.rank == 0 && (st = serve_dispatcher_create(rt, me.size, &d)) != TDL_OK) {
            fprintf(stderr, "tidal: serve: %s\n", tdl_error_get());
            rc = CLI_EXIT_FAILURE;
        }
    }
    if (me.rank == 0) {
        if (rc == CLI_EXIT_OK) {
            if (d)
                printf("tidal serve: rank 0 coordinates, ranks 1..%d execute; policy %s, %lld "
                       "steps per task\n",
                       me.size - 1,
                       tdl_param_str(params, "policy") ? tdl_param_str(params, "policy")
                                                       : "static (--sp)",
                       (long long)tdl_param_int(params, "chunk"));
            rc = serve_rank0(params, me.size, m, d, hooks);
        }
        if (d) { /* whatever happened, the executors are told to leave */
            serve_dispatcher_stop(d);
            serve_dispatcher_free(d);
        }
    } else if (rc == CLI_EXIT_OK && rt) {
        /* an executor: requests from rank 0 until it says stop; a signal here changes nothing */
        st = hooks && hooks->worker ? hooks->worker(hooks->user, params, rt, me.rank, me.size, m)
                                    : serve_executor_loop(rt, me.rank, m);
        if (st != TDL_OK) {
            fprintf(stderr, "tidal[%d]: %s: %s\n", me.rank, what, tdl_error_get());
            rc = CLI_EXIT_FAILURE;
        }
    }
    if (rt) {
        tdl_boot_barrier();
        gfc_runtime_destroy(rt);
    }
    dit_model_free(m);
    /* rank 0's verdict reaches everyone (a failed executor makes it a failure): every rank
     * exits together, with the same code */
    int64_t fails = rc != CLI_EXIT_OK, verdict = me.rank == 0 ? rc : 0;
    if (me.size > 1 && (tdl_boot_allreduce_sum_i64(&fails) != TDL_OK ||
                        tdl_boot_allreduce_sum_i64(&verdict) != TDL_OK))
        verdict = CLI_EXIT_FAILURE;
    if (verdict == CLI_EXIT_OK && fails)
        verdict = CLI_EXIT_FAILURE;
    tdl_boot_finalize();
    return (int)verdict;
}

const cli_command_t cli_cmd_serve = {
    .name = "serve",
    .summary = "serve image requests over HTTP (and from a trace file) from a weights file",
    .usage = "tidal serve --ckpt FILE [--listen 127.0.0.1:8000] [--token T] [--queue-max 256] "
             "[--trace FILE.jsonl [--exit-after-trace]]",
    .params = cli_serve_params,
    .nparams = TDL_ARRAY_SIZE(cli_serve_params),
    .run = serve_run,
};
