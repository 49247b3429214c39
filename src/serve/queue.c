/* The request table and queue of `tidal serve`: every request the server knows, by id, with its
 * state, times and result; the waiting ones in arrival order; counters and histograms for
 * /metrics. One mutex guards it all: every operation is a few pointer moves. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "serve/serve.h"

#define LATENCIES_KEPT (1u << 20)

const int serve_res_values[SERVE_NRES] = {32, 64, 128};
const int serve_batch_bounds[SERVE_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64};

int serve_res_index(int resolution)
{
    int i = 0;
    while (i < SERVE_NRES - 1 && resolution > serve_res_values[i])
        i++;
    return i;
}

const double serve_hist_bounds[SERVE_HIST_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                      2.5,  5,     10,   30,  60,   120, 300};

struct serve_job {
    serve_request_info_t info;
    unsigned char *png;
    int64_t arrival_ms;
    int refs;               /* the table, the running executor and each waiter hold one */
    bool in_table;          /* false once forgotten: freed when the last reference goes */
    struct serve_job *next; /* in the waiting list or in the finished list */
    char **events;          /* SSE blocks, in order; the last one the end once finished */
    int nevents, capevents, events_dropped;
    bool cancel_taken; /* its runner has been told (serve_queue_take_cancels) */
    uint64_t tag;      /* the runner's */
};

struct serve_queue {
    pthread_mutex_t lock;
    pthread_cond_t ready;    /* a request arrived, or the queue closed */
    pthread_cond_t finished; /* some request finished */
    pthread_cond_t evented;  /* some request has a new event */
    int max_queued, keep_finished;
    int scale; /* serve_queue_set_pixel_scale's */
    bool closed;
    serve_job_t **table; /* every request known, in no order */
    size_t ntable, cap;
    serve_job_t *wait_head, *wait_tail; /* waiting, in the order they will run */
    serve_job_t *fin_head, *fin_tail;   /* finished, oldest first */
    int nwaiting, nfinished, nrunning;
    uint64_t id_seq, seed_seq, salt; /* counters of the ids and seeds the queue chose */
    serve_stats_t stats;
    serve_job_t **cancels; /* running jobs asked to stop, their runner not told yet */
    int ncancels, capcancels;
    double *lat[SERVE_SOURCE_COUNT];
    size_t nlat[SERVE_SOURCE_COUNT], caplat[SERVE_SOURCE_COUNT];
};

const char *serve_state_name(serve_state_t state)
{
    static const char *const names[] = {"queued", "running", "done", "failed", "cancelled"};
    return (unsigned)state < TDL_ARRAY_SIZE(names) ? names[state] : "?";
}

const char *serve_role_name(serve_role_t role)
{
    static const char *const names[] = {"coordinator", "serving", "training", "idle", "dead"};
    return (unsigned)role < TDL_ARRAY_SIZE(names) ? names[role] : "?";
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A bijection of [0, 2^53): each step (an xor with a right shift, a multiply by an odd number
 * modulo 2^53) can be undone, so distinct counters give distinct seeds for the server's whole
 * life, where a hash cut to 53 bits could repeat one. */
static uint64_t seed_permute(uint64_t x)
{
    const uint64_t mask = SERVE_MAX_SEED - 1;
    x &= mask;
    x = ((x ^ (x >> 26)) * 0xbf58476d1ce4e5b9ull) & mask;
    x = ((x ^ (x >> 27)) * 0x94d049bb133111ebull) & mask;
    return x ^ (x >> 29);
}

static void deadline_after(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void serve_queue_set_pixel_scale(serve_queue_t *q, int scale)
{
    q->scale = scale > 1 ? scale : 1;
}

tdl_status_t serve_queue_create(int max_queued, int keep_finished, serve_queue_t **queue_out)
{
    if (max_queued < 1 || keep_finished < 0)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "serve queue: %d places and %d finished kept must be positive",
                               max_queued, keep_finished);
    serve_queue_t *q = tdl_calloc(1, sizeof(*q));
    if (!q)
        return tdl_error_raise(TDL_ERR_NOMEM, "serve queue: out of memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->ready, &ca);
    pthread_cond_init(&q->finished, &ca);
    pthread_cond_init(&q->evented, &ca);
    pthread_condattr_destroy(&ca);
    q->max_queued = max_queued;
    q->scale = 1;
    q->keep_finished = keep_finished;
    q->stats.capacity = max_queued;
    q->salt = splitmix64(tdl_clock_ns() ^ ((uint64_t)(uintptr_t)q << 17) ^
                         (uint64_t)(tdl_clock_wall_s() * 1e6));
    *queue_out = q;
    return TDL_OK;
}

static void job_free(serve_job_t *j)
{
    for (int i = 0; i < j->nevents; i++)
        free(j->events[i]);
    free(j->events);
    free(j->png);
    free(j);
}

static void job_unref(serve_job_t *j)
{
    if (--j->refs == 0)
        job_free(j);
}

/* Appends an event to j (the lock held): `data` (taken) gains the request's id first. Past
 * SERVE_EVENTS_MAX - 1 only the end is kept; the others are counted. */
static void event_add(serve_queue_t *q, serve_job_t *j, const char *name, json_t *data, bool end)
{
    json_t *o = json_object();
    char *text = NULL, *block = NULL;
    if (o && data && json_object_set_new(o, "id", json_string(j->info.params.id)) == 0 &&
        json_object_update(o, data) == 0 && (end || j->nevents < SERVE_EVENTS_MAX - 1))
        text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(data);
    json_decref(o);
    size_t len = text ? strlen(name) + strlen(text) + 16 : 0;
    if (text && (block = tdl_malloc(len)))
        snprintf(block, len, "event: %s\ndata: %s\n\n", name, text);
    free(text);
    if (block && j->nevents == j->capevents) {
        int cap = j->capevents ? 2 * j->capevents : 8;
        char **e = tdl_realloc(j->events, (size_t)cap * sizeof(*e));
        if (e)
            j->events = e, j->capevents = cap;
    }
    if (!block || j->nevents == j->capevents) {
        free(block);
        j->events_dropped++;
        return;
    }
    j->events[j->nevents++] = block;
    pthread_cond_broadcast(&q->evented);
}

void serve_queue_destroy(serve_queue_t *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->ntable; i++) {
        q->table[i]->in_table = false;
        job_unref(q->table[i]);
    }
    free(q->table);
    for (int i = 0; i < q->ncancels; i++)
        job_unref(q->cancels[i]);
    free(q->cancels);
    for (int s = 0; s < SERVE_SOURCE_COUNT; s++)
        free(q->lat[s]);
    pthread_cond_destroy(&q->evented);
    pthread_cond_destroy(&q->finished);
    pthread_cond_destroy(&q->ready);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

static serve_job_t *table_find(const serve_queue_t *q, const char *id)
{
    for (size_t i = 0; i < q->ntable; i++)
        if (strcmp(q->table[i]->info.params.id, id) == 0)
            return q->table[i];
    return NULL;
}

static void table_remove(serve_queue_t *q, serve_job_t *j)
{
    for (size_t i = 0; i < q->ntable; i++) {
        if (q->table[i] == j) {
            q->table[i] = q->table[--q->ntable];
            j->in_table = false;
            job_unref(j);
            return;
        }
    }
}

static void hist_observe(serve_hist_t *h, double v)
{
    int b = 0;
    while (b < SERVE_HIST_BUCKETS && v > serve_hist_bounds[b])
        b++;
    h->buckets[b]++;
    h->count++;
    h->sum += v;
}

/* Moves a job that just finished (done or failed) to the finished list and forgets the oldest
 * finished ones beyond keep_finished. */
static void job_finish(serve_queue_t *q, serve_job_t *j, serve_state_t state, const char *reason)
{
    serve_request_info_t *in = &j->info;
    serve_counts_t *c = &q->stats.by_source[in->source];
    in->state = state;
    in->end_s = tdl_clock_s();
    double latency = in->end_s - in->submit_s;
    if (state != SERVE_STATE_CANCELLED && in->params.deadline_ms > 0 &&
        latency * 1e3 > (double)in->params.deadline_ms) {
        in->slo_violated = true;
        c->slo_violations++;
    }
    if (state == SERVE_STATE_DONE) {
        c->done++;
        int ri = serve_res_index(in->params.resolution / q->scale);
        hist_observe(&q->stats.latency[ri], latency);
        hist_observe(&q->stats.run[ri], in->end_s - in->start_s);
        size_t *n = &q->nlat[in->source], *cap = &q->caplat[in->source];
        if (*n == *cap && *cap < LATENCIES_KEPT) {
            size_t c2 = *cap ? 2 * *cap : 1024;
            double *l2 = tdl_realloc(q->lat[in->source], c2 * sizeof(double));
            if (l2)
                q->lat[in->source] = l2, *cap = c2;
        }
        if (*n < *cap)
            q->lat[in->source][(*n)++] = latency;
        event_add(q, j, "done",
                  json_pack("{s:s, s:f, s:I}", "status", "done", "latency_s", latency,
                            "png_bytes", (json_int_t)in->png_len),
                  true);
    } else if (state == SERVE_STATE_CANCELLED) {
        c->cancelled++;
        snprintf(in->error, sizeof(in->error), "%s", reason ? reason : "cancelled");
        event_add(q, j, "cancelled",
                  json_pack("{s:s, s:s, s:i}", "status", "cancelled", "reason", in->error,
                            "events_dropped", j->events_dropped),
                  true);
    } else {
        c->failed++;
        snprintf(in->error, sizeof(in->error), "%s", reason ? reason : "failed");
        event_add(q, j, "failed",
                  json_pack("{s:s, s:s, s:i}", "status", "failed", "error", in->error,
                            "events_dropped", j->events_dropped),
                  true);
    }
    j->next = NULL;
    if (q->fin_tail)
        q->fin_tail->next = j;
    else
        q->fin_head = j;
    q->fin_tail = j;
    q->nfinished++;
    while (q->nfinished > q->keep_finished && q->fin_head) {
        serve_job_t *old = q->fin_head;
        q->fin_head = old->next;
        if (!q->fin_head)
            q->fin_tail = NULL;
        q->nfinished--;
        table_remove(q, old);
    }
    pthread_cond_broadcast(&q->finished);
}

static bool id_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

tdl_status_t serve_queue_submit(serve_queue_t *q, const serve_request_params_t *params,
                                serve_source_t source, char id_out[SERVE_ID_MAX + 1])
{
    if ((unsigned)source >= SERVE_SOURCE_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "serve queue: unknown source %d", source);
    for (const char *p = params->id; *p; p++)
        if (!id_char_ok(*p) || p - params->id >= SERVE_ID_MAX)
            return tdl_error_raise(TDL_ERR_INVALID_ARG, "serve queue: bad request id");
    serve_job_t *j = tdl_calloc(1, sizeof(*j));
    if (!j)
        return tdl_error_raise(TDL_ERR_NOMEM, "serve queue: out of memory");
    tdl_status_t st = TDL_OK;
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        st = tdl_error_raise(TDL_ERR_CANCELED, "the server is shutting down");
        goto err_reject;
    }
    if (q->nwaiting >= q->max_queued) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "the queue is full (%d requests waiting)", q->nwaiting);
        goto err_reject;
    }
    if (params->id[0] && table_find(q, params->id)) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "a request with id '%s' exists already", params->id);
        goto err_unlock;
    }
    if (q->ntable == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 64;
        serve_job_t **t = tdl_realloc(q->table, cap * sizeof(*t));
        if (!t) {
            st = tdl_error_raise(TDL_ERR_NOMEM, "serve queue: out of memory");
            goto err_reject;
        }
        q->table = t, q->cap = cap;
    }
    serve_request_info_t *in = &j->info;
    in->params = *params;
    /* ids and seeds have counters of their own: a seed never depends on how many ids were
     * tried, so no two requests the queue seeds get the same one */
    while (!in->params.id[0] || (!params->id[0] && table_find(q, in->params.id)))
        snprintf(in->params.id, sizeof(in->params.id), "img-%016llx",
                 (unsigned long long)splitmix64(q->salt + ++q->id_seq));
    if (!in->params.has_seed) {
        in->params.seed = seed_permute(q->salt + ++q->seed_seq);
        in->params.has_seed = true;
    }
    in->state = SERVE_STATE_QUEUED;
    in->source = source;
    in->position = -1;
    in->submit_s = tdl_clock_s();
    j->arrival_ms = (int64_t)(tdl_clock_ns() / 1000000u);
    j->refs = 1;
    j->in_table = true;
    q->table[q->ntable++] = j;
    /* first come, first served; the same millisecond: higher priority first. Arrivals come
     * in order, so the place is nearly always the tail. */
    serve_job_t *t = q->wait_tail, **link = &q->wait_head;
    if (t && (t->arrival_ms < j->arrival_ms || t->info.params.priority >= in->params.priority))
        link = &t->next;
    while (*link && ((*link)->arrival_ms < j->arrival_ms ||
                     ((*link)->arrival_ms == j->arrival_ms &&
                      (*link)->info.params.priority >= in->params.priority))) {
        link = &(*link)->next;
    }
    j->next = *link;
    *link = j;
    if (!j->next)
        q->wait_tail = j;
    q->nwaiting++;
    q->stats.by_source[source].submitted++;
    int pos = 0;
    for (serve_job_t *w = q->wait_head; w && w != j; w = w->next)
        pos++;
    event_add(q, j, "queued", json_pack("{s:s, s:i}", "status", "queued", "position", pos), false);
    memcpy(id_out, in->params.id, sizeof(in->params.id));
    pthread_cond_signal(&q->ready);
    pthread_mutex_unlock(&q->lock);
    return TDL_OK;
err_reject:
    q->stats.by_source[source].rejected++;
err_unlock:
    pthread_mutex_unlock(&q->lock);
    free(j);
    return st;
}

void serve_queue_count_rejected(serve_queue_t *q, serve_source_t source)
{
    if ((unsigned)source >= SERVE_SOURCE_COUNT)
        return;
    pthread_mutex_lock(&q->lock);
    q->stats.by_source[source].rejected++;
    pthread_mutex_unlock(&q->lock);
}

tdl_status_t serve_queue_pop(serve_queue_t *q, int timeout_ms, serve_job_t **job_out)
{
    struct timespec until;
    deadline_after(&until, timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&q->lock);
    int rc = 0;
    while (!q->wait_head && !q->closed && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&q->ready, &q->lock, &until);
    if (q->closed) {
        pthread_mutex_unlock(&q->lock);
        return TDL_ERR_CANCELED;
    }
    serve_job_t *j = q->wait_head;
    if (!j) {
        pthread_mutex_unlock(&q->lock);
        return TDL_ERR_TIMEOUT;
    }
    q->wait_head = j->next;
    if (!q->wait_head)
        q->wait_tail = NULL;
    j->next = NULL;
    q->nwaiting--;
    q->nrunning++;
    j->refs++;
    j->info.state = SERVE_STATE_RUNNING;
    j->info.start_s = tdl_clock_s();
    hist_observe(&q->stats.queue_wait[serve_res_index(j->info.params.resolution / q->scale)],
                 j->info.start_s - j->info.submit_s);
    event_add(q, j, "started",
              json_pack("{s:s, s:f}", "status", "running", "queued_s",
                        j->info.start_s - j->info.submit_s),
              false);
    pthread_mutex_unlock(&q->lock);
    *job_out = j;
    return TDL_OK;
}

bool serve_queue_head(serve_queue_t *q, serve_request_params_t *params_out)
{
    pthread_mutex_lock(&q->lock);
    bool any = q->wait_head != NULL;
    if (any)
        *params_out = q->wait_head->info.params;
    pthread_mutex_unlock(&q->lock);
    return any;
}

const serve_request_params_t *serve_job_params(const serve_job_t *job)
{
    return &job->info.params;
}

double serve_job_submit_s(const serve_job_t *job)
{
    return job->info.submit_s;
}

void serve_job_set_tag(serve_job_t *job, uint64_t tag)
{
    job->tag = tag;
}

uint64_t serve_job_tag(const serve_job_t *job)
{
    return job->tag;
}

void serve_job_done(serve_queue_t *q, serve_job_t *j, unsigned char *png, size_t len)
{
    pthread_mutex_lock(&q->lock);
    j->png = png;
    j->info.png_len = len;
    q->nrunning--;
    job_finish(q, j, SERVE_STATE_DONE, NULL);
    job_unref(j);
    pthread_mutex_unlock(&q->lock);
}

void serve_job_fail(serve_queue_t *q, serve_job_t *j, const char *reason)
{
    pthread_mutex_lock(&q->lock);
    q->nrunning--;
    job_finish(q, j, SERVE_STATE_FAILED, reason);
    job_unref(j);
    pthread_mutex_unlock(&q->lock);
}

static bool state_final(serve_state_t s)
{
    return s == SERVE_STATE_DONE || s == SERVE_STATE_FAILED || s == SERVE_STATE_CANCELLED;
}

tdl_status_t serve_queue_cancel(serve_queue_t *q, const char *id, serve_request_info_t *info_out)
{
    pthread_mutex_lock(&q->lock);
    serve_job_t *j = table_find(q, id);
    tdl_status_t st = TDL_OK;
    if (!j) {
        st = tdl_error_raise(TDL_ERR_NOT_FOUND, "no request '%s'", id);
    } else if (state_final(j->info.state)) {
        st = tdl_error_raise(TDL_ERR_MISMATCH, "request '%s' has finished already (%s)", id,
                             serve_state_name(j->info.state));
    } else if (j->info.state == SERVE_STATE_QUEUED) {
        serve_job_t **link = &q->wait_head, *prev = NULL;
        while (*link && *link != j)
            prev = *link, link = &(*link)->next;
        if (*link) {
            *link = j->next;
            if (q->wait_tail == j)
                q->wait_tail = prev;
            q->nwaiting--;
        }
        job_finish(q, j, SERVE_STATE_CANCELLED, "cancelled while queued");
    } else if (!j->info.cancel_asked) {
        if (q->ncancels == q->capcancels) {
            int cap = q->capcancels ? 2 * q->capcancels : 16;
            serve_job_t **c = tdl_realloc(q->cancels, (size_t)cap * sizeof(*c));
            if (c)
                q->cancels = c, q->capcancels = cap;
        }
        if (q->ncancels < q->capcancels) {
            j->info.cancel_asked = true;
            j->refs++;
            q->cancels[q->ncancels++] = j;
        } else {
            st = tdl_error_raise(TDL_ERR_NOMEM, "out of memory to cancel '%s'", id);
        }
    }
    if (st == TDL_OK && info_out) {
        *info_out = j->info;
        info_out->position = -1;
    }
    pthread_mutex_unlock(&q->lock);
    return st;
}

int serve_queue_take_cancels(serve_queue_t *q, serve_job_t **jobs, int max)
{
    pthread_mutex_lock(&q->lock);
    int n = 0, k = 0;
    for (int i = 0; i < q->ncancels; i++) {
        serve_job_t *j = q->cancels[i];
        if (n < max && !state_final(j->info.state)) {
            j->cancel_taken = true;
            jobs[n++] = j; /* the runner holds it still: the list's reference goes */
            job_unref(j);
        } else if (state_final(j->info.state)) {
            job_unref(j); /* it finished first */
        } else {
            q->cancels[k++] = j; /* next time */
        }
    }
    q->ncancels = k;
    pthread_mutex_unlock(&q->lock);
    return n;
}

bool serve_job_cancel_asked(serve_queue_t *q, serve_job_t *j)
{
    pthread_mutex_lock(&q->lock);
    bool asked = j->info.cancel_asked;
    pthread_mutex_unlock(&q->lock);
    return asked;
}

void serve_job_cancelled(serve_queue_t *q, serve_job_t *j)
{
    pthread_mutex_lock(&q->lock);
    q->nrunning--;
    job_finish(q, j, SERVE_STATE_CANCELLED, "cancelled while running");
    job_unref(j);
    pthread_mutex_unlock(&q->lock);
}

void serve_queue_observe_batch(serve_queue_t *q, int requests)
{
    int b = 0;
    while (b < SERVE_BATCH_BUCKETS && requests > serve_batch_bounds[b])
        b++;
    pthread_mutex_lock(&q->lock);
    q->stats.batch_buckets[b]++;
    q->stats.batch_count++;
    q->stats.batch_sum += (uint64_t)TDL_MAX(requests, 0);
    pthread_mutex_unlock(&q->lock);
}

void serve_job_event(serve_queue_t *q, serve_job_t *j, const char *name, const char *json)
{
    json_t *data = json_loads(json, 0, NULL);
    pthread_mutex_lock(&q->lock);
    if (json_is_object(data) && !state_final(j->info.state))
        event_add(q, j, name, data, false);
    else
        json_decref(data);
    pthread_mutex_unlock(&q->lock);
}

tdl_status_t serve_queue_events(serve_queue_t *q, const char *id, int from, int wait_ms,
                                char **text_out, int *next_out, bool *ended_out)
{
    pthread_mutex_lock(&q->lock);
    serve_job_t *j = table_find(q, id);
    if (!j) {
        pthread_mutex_unlock(&q->lock);
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "no request '%s'", id);
    }
    if (from < 0)
        from = 0;
    if (wait_ms > 0 && j->nevents <= from && !state_final(j->info.state)) {
        struct timespec until;
        deadline_after(&until, wait_ms);
        j->refs++; /* it may be forgotten while we wait */
        int rc = 0;
        while (j->nevents <= from && !state_final(j->info.state) && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&q->evented, &q->lock, &until);
        j->refs--;
    }
    size_t len = 1;
    for (int i = from; i < j->nevents; i++)
        len += strlen(j->events[i]);
    char *text = tdl_malloc(len);
    if (text) {
        text[0] = '\0';
        for (int i = from, at = 0; i < j->nevents; i++) {
            size_t l = strlen(j->events[i]);
            memcpy(text + at, j->events[i], l + 1);
            at += (int)l;
        }
        *next_out = TDL_MAX(from, j->nevents);
        *ended_out = state_final(j->info.state);
        *text_out = text;
    }
    if (j->refs == 0)
        job_free(j);
    pthread_mutex_unlock(&q->lock);
    return text ? TDL_OK : tdl_error_raise(TDL_ERR_NOMEM, "out of memory for events of '%s'", id);
}

tdl_status_t serve_queue_get(serve_queue_t *q, const char *id, int wait_ms,
                             serve_request_info_t *info_out, unsigned char **png_out)
{
    pthread_mutex_lock(&q->lock);
    serve_job_t *j = table_find(q, id);
    if (!j) {
        pthread_mutex_unlock(&q->lock);
        return tdl_error_raise(TDL_ERR_NOT_FOUND, "no request '%s'", id);
    }
    if (wait_ms > 0 && !state_final(j->info.state)) {
        struct timespec until;
        deadline_after(&until, wait_ms);
        j->refs++; /* it may be forgotten while we wait: keep it alive */
        int rc = 0;
        while (!state_final(j->info.state) && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&q->finished, &q->lock, &until);
        j->refs--; /* the table or a finished list still holds it, or we free it below */
    }
    serve_request_info_t info = j->info;
    info.position = -1;
    if (info.state == SERVE_STATE_QUEUED) {
        int pos = 0;
        for (serve_job_t *w = q->wait_head; w && w != j; w = w->next)
            pos++;
        info.position = pos;
    }
    unsigned char *png = NULL;
    tdl_status_t st = TDL_OK;
    if (png_out && info.state == SERVE_STATE_DONE && j->png) {
        png = tdl_malloc(j->info.png_len);
        if (png)
            memcpy(png, j->png, j->info.png_len);
        else
            st = tdl_error_raise(TDL_ERR_NOMEM, "out of memory for a copy of '%s'", id);
    }
    if (j->refs == 0)
        job_free(j);
    pthread_mutex_unlock(&q->lock);
    if (st != TDL_OK)
        return st;
    *info_out = info;
    if (png_out)
        *png_out = png;
    return TDL_OK;
}

void serve_queue_close(serve_queue_t *q, const char *reason)
{
    pthread_mutex_lock(&q->lock);
    q->closed = true;
    while (q->wait_head) {
        serve_job_t *j = q->wait_head;
        q->wait_head = j->next;
        q->nwaiting--;
        j->info.canceled = true;
        job_finish(q, j, SERVE_STATE_FAILED, reason);
    }
    q->wait_tail = NULL;
    pthread_cond_broadcast(&q->ready);
    pthread_cond_broadcast(&q->finished);
    pthread_cond_broadcast(&q->evented);
    pthread_mutex_unlock(&q->lock);
}

void serve_queue_set_ranks(serve_queue_t *q, const int ranks[SERVE_ROLE_COUNT])
{
    pthread_mutex_lock(&q->lock);
    memcpy(q->stats.ranks, ranks, sizeof(q->stats.ranks));
    pthread_mutex_unlock(&q->lock);
}

void serve_queue_stats(serve_queue_t *q, serve_stats_t *stats_out)
{
    pthread_mutex_lock(&q->lock);
    q->stats.queued = q->nwaiting;
    q->stats.running = q->nrunning;
    *stats_out = q->stats;
    pthread_mutex_unlock(&q->lock);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

tdl_status_t serve_queue_latencies(serve_queue_t *q, serve_source_t source, double **latencies_out,
                                   size_t *count_out)
{
    if ((unsigned)source >= SERVE_SOURCE_COUNT)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "serve queue: unknown source %d", source);
    pthread_mutex_lock(&q->lock);
    size_t n = q->nlat[source];
    double *v = tdl_malloc((n ? n : 1) * sizeof(double));
    if (v && n)
        memcpy(v, q->lat[source], n * sizeof(double));
    pthread_mutex_unlock(&q->lock);
    if (!v)
        return tdl_error_raise(TDL_ERR_NOMEM, "out of memory for %zu latencies", n);
    qsort(v, n, sizeof(double), cmp_double);
    *latencies_out = v;
    *count_out = n;
    return TDL_OK;
}

double serve_quantile(const double *sorted, size_t n, double p)
{
    if (!n)
        return 0;
    if (p <= 0)
        return sorted[0];
    size_t rank = (size_t)(p * (double)n + 0.999999999); /* nearest rank: ceil(p n) */
    if (rank < 1)
        rank = 1;
    return sorted[TDL_MIN(rank, n) - 1];
}
