/* The HTTP/1.1 front door of `tidal serve` (libmicrohttpd, one thread per connection) with
 * JSON through jansson: POST /v1/images, GET /v1/images/{id}, GET /metrics, GET /healthz.
 * Bodies go through the request validator (request.c). Every error answer is
 * {"error": "...", "field": "..."} naming the field at fault, but on POST /v1/images/generations,
 * OpenAI's images API, whose requests and answers openai.c translates; doc/serving.md. */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "serve/serve.h"
#include "serve/serve_internal.h"

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result http_result_t;
#else
typedef int http_result_t;
#endif

/* ==== the server ============================================================================== */

/* Seconds a new connection has to send its first request's header. libmicrohttpd takes a line
 * that starts with a NUL for one of the blank lines a client may send before its request line,
 * and waits for a request line: garbage would hold the connection's thread unanswered for the
 * whole --connection-timeout, which is for slow bodies and idle keep-alives. */
#define HTTP_HEADER_TIMEOUT_S 10

/* Codes counted by /metrics; the last slot counts the others. */
static const unsigned http_codes[] = {200, 202, 400, 401, 404, 405, 409, 413, 500, 501, 503, 504};
#define HTTP_NCODES (TDL_ARRAY_SIZE(http_codes) + 1)

struct serve_http {
    struct MHD_Daemon *daemon;
    serve_queue_t *queue;
    serve_http_opts_t o;
    char *token;
    char *listen;
    int port;
    int inflight; /* atomic: requests begun and not completed */
    int stopping; /* atomic: serve_http_stop has begun (event streams end) */
    uint64_t responses[HTTP_NCODES];
};

typedef enum {
    ROUTE_NONE,
    ROUTE_IMAGES,
    ROUTE_IMAGE,
    ROUTE_EVENTS, /* /v1/images/ID/events */
    ROUTE_OPENAI, /* /v1/images/generations, OpenAI's images API (openai.c) */
    ROUTE_METRICS,
    ROUTE_HEALTHZ
} route_t;

/* One request on a connection: what the body has brought so far. */
typedef struct http_conn {
    route_t route;
    char id[SERVE_ID_MAX + 1];
    char *body;
    size_t len, cap;
    bool too_big;
    size_t discarded;
} http_conn_t;

static void http_count(serve_http_t *h, unsigned code)
{
    size_t i = 0;
    while (i < TDL_ARRAY_SIZE(http_codes) && http_codes[i] != code)
        i++;
    __atomic_fetch_add(&h->responses[i], 1, __ATOMIC_RELAXED);
}

/* Queues `r` (consumed) with the headers every answer carries. */
static http_result_t reply(serve_http_t *h, struct MHD_Connection *c, unsigned code,
                           struct MHD_Response *r, const char *method, const char *url)
{
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Cache-Control", "no-store");
    http_result_t ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    http_count(h, code);
    if (TDL_LOG_INFO <= tdl_log_get_level()) {
        char m[16], u[160]; /* a decoded URL may hold anything, line feeds too */
        serve_printable(m, sizeof(m), method);
        serve_printable(u, sizeof(u), url);
        tdl_log_write(TDL_LOG_INFO, "http %s %s -> %u", m, u, code);
    }
    return ret;
}

static struct MHD_Response *response_text(const char *ctype, char *text, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    return r;
}

/* obj is consumed. */
static struct MHD_Response *response_json(json_t *obj)
{
    if (!obj)
        return NULL;
    char *text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(obj);
    if (!text)
        return NULL;
    size_t len = strlen(text);
    char *nl = realloc(text, len + 2);
    if (nl) {
        text = nl;
        text[len++] = '\n';
        text[len] = '\0';
    }
    return response_text("application/json", text, len);
}

static struct MHD_Response *response_error(const char *field, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static struct MHD_Response *response_error(const char *field, const char *id, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{s:s, s:s}", "error", msg, "field", field);
    if (o && id)
        json_object_set_new(o, "id", json_string(id));
    return response_json(o);
}

static http_result_t reply_error(serve_http_t *h, struct MHD_Connection *c, unsigned code,
                                 const char *method, const char *url, const char *field,
                                 const char *msg)
{
    return reply(h, c, code, response_error(field, NULL, "%s", msg), method, url);
}

/* An error in the format of the route: OpenAI's error object on its own (openai.c), where the
 * errors answered before the body (method, token, length) name no field of a request. */
static struct MHD_Response *route_error(route_t route, unsigned code, const char *field,
                                        const char *msg)
{
    if (route == ROUTE_OPENAI)
        return response_json(serve_openai_error(code, NULL, msg));
    return response_error(field, NULL, "%s", msg);
}

static route_t route_of(const char *url, char id_out[SERVE_ID_MAX + 1])
{
    static const char prefix[] = "/v1/images/";
    if (strcmp(url, "/v1/images") == 0)
        return ROUTE_IMAGES;
    if (strcmp(url, "/metrics") == 0)
        return ROUTE_METRICS;
    if (strcmp(url, "/healthz") == 0)
        return ROUTE_HEALTHZ;
    if (strcmp(url, "/v1/images/" SERVE_OPENAI_PATH_ID) == 0) /* before the ids */
        return ROUTE_OPENAI;
    if (strncmp(url, prefix, sizeof(prefix) - 1) == 0) {
        static const char events[] = "/events";
        const char *id = url + sizeof(prefix) - 1;
        size_t len = strlen(id), ne = sizeof(events) - 1;
        bool ev = len > ne && strcmp(id + len - ne, events) == 0;
        if (ev)
            len -= ne;
        if (serve_id_valid(id, len)) {
            memcpy(id_out, id, len);
            id_out[len] = '\0';
            return ev ? ROUTE_EVENTS : ROUTE_IMAGE;
        }
    }
    return ROUTE_NONE;
}

static bool method_is(const char *method, const char *name)
{
    return strcmp(method, name) == 0;
}

static const char *route_allow(route_t route)
{
    return route == ROUTE_IMAGES   ? "POST"
           : route == ROUTE_IMAGE  ? "GET, HEAD, DELETE"
           : route == ROUTE_EVENTS ? "GET"
           : route == ROUTE_OPENAI ? "POST"
                                   : "GET, HEAD";
}

static bool route_allows(route_t route, const char *method)
{
    if (route == ROUTE_IMAGES || route == ROUTE_OPENAI)
        return method_is(method, "POST");
    if (route == ROUTE_EVENTS)
        return method_is(method, "GET");
    return method_is(method, "GET") || method_is(method, "HEAD") ||
           (route == ROUTE_IMAGE && method_is(method, "DELETE"));
}

/* Compares in time independent of where the strings differ. */
static bool token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned diff = (unsigned)(la ^ lb);
    for (size_t i = 0; i < lb; i++)
        diff |= (unsigned char)(i < la ? a[i] : 0) ^ (unsigned char)b[i];
    return diff == 0;
}

static bool authorized(serve_http_t *h, struct MHD_Connection *c)
{
    if (!h->token)
        return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
        return false;
    auth += 7;
    while (*auth == ' ')
        auth++;
    return token_equal(auth, h->token);
}

/* The query arguments of a route, checked: wait=0|1 (and POST, GET), format=json|png (GET). */
typedef struct query_args {
    route_t route;
    int wait;     /* 0 or 1 */
    bool png;     /* format=png */
    char bad[64]; /* the first argument at fault */
    char why[160];
} query_args_t;

static http_result_t query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    query_args_t *q = cls;
    if (q->bad[0])
        return MHD_YES;
    if (strcmp(key, "wait") == 0) {
        if (!value || !strcmp(value, "1") || !strcmp(value, "true"))
            q->wait = 1;
        else if (!strcmp(value, "0") || !strcmp(value, "false"))
            q->wait = 0;
        else
            snprintf(q->why, sizeof(q->why), "'wait' must be 0 or 1");
    } else if (strcmp(key, "format") == 0 && q->route == ROUTE_IMAGE) {
        if (value && !strcmp(value, "png"))
            q->png = true;
        else if (value && !strcmp(value, "json"))
            q->png = false;
        else
            snprintf(q->why, sizeof(q->why), "'format' must be json or png");
    } else if (!key[0] && !value) {
        /* "?&wait=1": an empty piece between the separators, no argument */
    } else if (!key[0]) {
        /* "?=1": no name to put in `field` (and an empty `bad` would read as no error) */
        snprintf(q->why, sizeof(q->why), "a query argument without a name");
        key = "query";
    } else {
        char name[48];
        serve_printable(name, sizeof(name), key);
        snprintf(q->why, sizeof(q->why), "unknown query argument '%s'", name);
    }
    if (q->why[0])
        serve_printable(q->bad, sizeof(q->bad), key);
    return MHD_YES;
}

static int retry_after_s(serve_http_t *h)
{
    serve_stats_t s;
    serve_queue_stats(h->queue, &s);
    double sum = 0, count = 0;
    for (int i = 0; i < SERVE_NRES; i++)
        sum += s.run[i].sum, count += (double)s.run[i].count;
    double mean = count > 0 ? sum / count : 1.0;
    int servers = TDL_MAX(1, s.ranks[SERVE_ROLE_SERVING]);
    double wait = mean * (double)s.queued / servers;
    return (int)TDL_MIN(60.0, TDL_MAX(1.0, wait + 0.999));
}

static const char *sampler_name(dit_sampler_kind_t k)
{
    return k == DIT_SAMPLER_EULER ? "euler" : "heun";
}

static json_t *info_json(const serve_request_info_t *in)
{
    const serve_request_params_t *p = &in->params;
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "id", json_string(p->id));
    json_object_set_new(o, "status", json_string(serve_state_name(in->state)));
    json_object_set_new(o, "label", json_integer(p->label));
    json_object_set_new(o, "n", json_integer(p->n));
    json_object_set_new(o, "resolution", json_integer(p->resolution));
    json_object_set_new(o, "steps", json_integer(p->steps));
    json_object_set_new(o, "cfg", json_real(p->cfg));
    json_object_set_new(o, "seed", json_integer((json_int_t)p->seed));
    json_object_set_new(o, "priority", json_integer(p->priority));
    json_object_set_new(o, "deadline_ms", json_integer(p->deadline_ms));
    json_object_set_new(o, "sampler", json_string(sampler_name(p->sampler)));
    json_object_set_new(o, "source",
                        json_string(in->source == SERVE_SOURCE_TRACE ? "trace" : "http"));
    double now = tdl_clock_s();
    if (in->state == SERVE_STATE_QUEUED)
        json_object_set_new(o, "position", json_integer(in->position));
    double started = in->start_s > 0 ? in->start_s : (in->end_s > 0 ? in->end_s : now);
    json_object_set_new(o, "queue_ms", json_real(1e3 * (started - in->submit_s)));
    if (in->start_s > 0)
        json_object_set_new(o, "run_ms",
                            json_real(1e3 * ((in->end_s > 0 ? in->end_s : now) - in->start_s)));
    if (in->end_s > 0) {
        json_object_set_new(o, "latency_ms", json_real(1e3 * (in->end_s - in->submit_s)));
        if (p->deadline_ms > 0)
            json_object_set_new(o, "slo_violated", json_boolean(in->slo_violated));
    }
    if (in->state == SERVE_STATE_DONE) {
        json_object_set_new(o, "png_bytes", json_integer((json_int_t)in->png_len));
        char url[SERVE_ID_MAX + 32];
        snprintf(url, sizeof(url), "/v1/images/%s?format=png", p->id);
        json_object_set_new(o, "result", json_string(url));
    }
    if (in->state == SERVE_STATE_FAILED)
        json_object_set_new(o, "error", json_string(in->error));
    if (in->state == SERVE_STATE_CANCELLED)
        json_object_set_new(o, "reason", json_string(in->error));
    if (in->state == SERVE_STATE_RUNNING && in->cancel_asked)
        json_object_set_new(o, "cancel_requested", json_true());
    return o;
}

/* Whether the client of connection c has gone: its socket reads end of file or hung up. */
static bool client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP))
        return true;
    char b;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* serve_queue_get waiting up to --wait-timeout; with --cancel-on-disconnect, in slices, and a
 * request whose client went away is cancelled (*gone). */
static tdl_status_t wait_result(serve_http_t *h, struct MHD_Connection *c, const char *id,
                                bool png, serve_request_info_t *info, unsigned char **bytes,
                                bool *gone)
{
    *gone = false;
    if (!h->o.cancel_on_disconnect)
        return serve_queue_get(h->queue, id, h->o.wait_timeout_ms, info, png ? bytes : NULL);
    double until = tdl_clock_s() + h->o.wait_timeout_ms / 1e3;
    for (;;) {
        int left = (int)((until - tdl_clock_s()) * 1e3);
        tdl_status_t st =
            serve_queue_get(h->queue, id, TDL_MAX(1, TDL_MIN(200, left)), info, png ? bytes : NULL);
        if (st != TDL_OK || info->state >= SERVE_STATE_DONE || left <= 200)
            return st;
        if (png && *bytes) {
            free(*bytes);
            *bytes = NULL;
        }
        if (client_gone(c)) {
            *gone = true;
            if (serve_queue_cancel(h->queue, id, info) == TDL_OK)
                TDL_INFO("request %s: its client went away: cancelled", id);
            return TDL_OK;
        }
    }
}

/* The answer for a request's state: the PNG when done and asked for, JSON otherwise. */
static http_result_t reply_result(serve_http_t *h, struct MHD_Connection *c, const char *method,
                                  const char *url, const char *id, bool png, int wait)
{
    serve_request_info_t info;
    unsigned char *bytes = NULL;
    bool gone = false;
    tdl_status_t st = wait ? wait_result(h, c, id, png, &info, &bytes, &gone)
                           : serve_queue_get(h->queue, id, 0, &info, png ? &bytes : NULL);
    if (gone)
        return MHD_NO; /* no one to answer */
    if (st == TDL_ERR_NOT_FOUND)
        return reply(h, c, 404,
                     response_error("id", id, "no request '%s' (or it finished long ago)", id),
                     method, url);
    if (st != TDL_OK)
        return reply(h, c, 500, response_error("request", id, "%s", tdl_error_get()), method, url);
    if (info.state == SERVE_STATE_FAILED && png)
        return reply(h, c, info.canceled ? 503 : 500,
                     response_error(info.canceled ? "queue" : "request", id, "%s", info.error),
                     method, url);
    if (info.state == SERVE_STATE_CANCELLED && png)
        return reply(h, c, 409, response_error("id", id, "request '%s' was %s", id, info.error),
                     method, url);
    if (wait && info.state < SERVE_STATE_DONE)
        return reply(h, c, 504,
                     response_error("wait", id,
                                    "not done after %.0f s; the request goes on: poll "
                                    "/v1/images/%s",
                                    h->o.wait_timeout_ms / 1e3, id),
                     method, url);
    if (png && info.state == SERVE_STATE_DONE) {
        struct MHD_Response *r =
            response_text("image/png", (char *)bytes, bytes ? info.png_len : 0);
        if (r) {
            char seed[32];
            snprintf(seed, sizeof(seed), "%llu", (unsigned long long)info.params.seed);
            MHD_add_response_header(r, "X-Request-Id", id);
            MHD_add_response_header(r, "X-Seed", seed);
        }
        return reply(h, c, 200, r, method, url);
    }
    /* JSON: 200 for a status asked for; 202 for an image asked for and not ready */
    return reply(h, c, png ? 202 : 200, response_json(info_json(&info)), method, url);
}

/* DELETE /v1/images/ID: 200 and the status once cancelled (it was queued); 202 while a running
 * one goes on to its next task boundary; 404 unknown; 409 finished already. */
static http_result_t handle_delete(serve_http_t *h, struct MHD_Connection *c, const char *method,
                                   const char *url, const char *id)
{
    serve_request_info_t info;
    tdl_status_t st = serve_queue_cancel(h->queue, id, &info);
    if (st == TDL_ERR_NOT_FOUND)
        return reply(h, c, 404,
                     response_error("id", id, "no request '%s' (or it finished long ago)", id),
                     method, url);
    if (st == TDL_ERR_MISMATCH)
        return reply(h, c, 409, response_error("id", id, "%s", tdl_error_get()), method, url);
    if (st != TDL_OK)
        return reply(h, c, 500, response_error("request", id, "%s", tdl_error_get()), method, url);
    TDL_INFO("request %s: cancel asked (%s)", id, serve_state_name(info.state));
    return reply(h, c, info.state == SERVE_STATE_CANCELLED ? 200 : 202,
                 response_json(info_json(&info)), method, url);
}

/* GET /v1/images/ID/events: the request's events as Server-Sent Events, until it ends. */
typedef struct sse {
    serve_http_t *h;
    char id[SERVE_ID_MAX + 1];
    int next;
    bool ended;
    char *text; /* taken from the queue, not yet all given */
    size_t len, off;
} sse_t;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    sse_t *e = cls;
    double quiet_since = tdl_clock_s();
    while (e->off == e->len) {
        free(e->text);
        e->text = NULL, e->len = e->off = 0;
        if (e->ended || __atomic_load_n(&e->h->stopping, __ATOMIC_ACQUIRE))
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (serve_queue_events(e->h->queue, e->id, e->next, 1000, &e->text, &e->next,
                               &e->ended) != TDL_OK)
            return MHD_CONTENT_READER_END_OF_STREAM; /* forgotten meanwhile */
        e->len = strlen(e->text);
        if (!e->len && tdl_clock_s() - quiet_since >= 15) { /* a comment keeps proxies open */
            free(e->text);
            e->text = strdup(": waiting\n\n");
            e->len = e->text ? strlen(e->text) : 0;
        }
    }
    size_t n = TDL_MIN(max, e->len - e->off);
    memcpy(buf, e->text + e->off, n);
    e->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls)
{
    sse_t *e = cls;
    free(e->text);
    free(e);
}

static http_result_t handle_events(serve_http_t *h, struct MHD_Connection *c, const char *method,
                                   const char *url, const char *id)
{
    serve_request_info_t info;
    if (serve_queue_get(h->queue, id, 0, &info, NULL) != TDL_OK)
        return reply(h, c, 404,
                     response_error("id", id, "no request '%s' (or it finished long ago)", id),
                     method, url);
    sse_t *e = tdl_calloc(1, sizeof(*e));
    if (!e)
        return reply_error(h, c, 500, method, url, "events", "out of memory");
    e->h = h;
    snprintf(e->id, sizeof(e->id), "%s", id);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, e, sse_free);
    if (!r) {
        free(e);
        return reply_error(h, c, 500, method, url, "events", "out of memory");
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return reply(h, c, 200, r, method, url);
}

static http_result_t handle_post(serve_http_t *h, struct MHD_Connection *c, const char *method,
                                 const char *url, http_conn_t *hc, const query_args_t *qa)
{
    if (hc->too_big) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the body is larger than %zu bytes (--max-body)", h->o.max_body);
        return reply_error(h, c, 413, method, url, "body", msg);
    }
    serve_request_params_t p;
    serve_field_error_t err;
    tdl_status_t st = serve_request_parse(hc->body ? hc->body : "", hc->len, &h->o.limits, NULL,
                                          &p, NULL, &err);
    if (st != TDL_OK && st != TDL_ERR_NOMEM)
        return reply_error(h, c, 400, method, url, err.field, err.message);
    char id[SERVE_ID_MAX + 1];
    if (st == TDL_OK) /* out of memory: 503 with Retry-After, as a full queue */
        st = serve_queue_submit(h->queue, &p, SERVE_SOURCE_HTTP, id);
    if (st == TDL_ERR_MISMATCH)
        return reply_error(h, c, 409, method, url, "id", tdl_error_get());
    if (st != TDL_OK) {
        struct MHD_Response *r = response_error("queue", NULL, "%s", tdl_error_get());
        if (r) {
            char ra[16];
            snprintf(ra, sizeof(ra), "%d", retry_after_s(h));
            MHD_add_response_header(r, "Retry-After", ra);
        }
        return reply(h, c, 503, r, method, url);
    }
    TDL_DEBUG("request %s queued: label %d, %d images of %d, %d steps, cfg %g", id, p.label, p.n,
              p.resolution, p.steps, p.cfg);
    if (qa->wait)
        return reply_result(h, c, method, url, id, true, 1);
    serve_request_info_t info;
    /* finished and forgotten already (--keep-results 0): the id is all there is */
    bool known = serve_queue_get(h->queue, id, 0, &info, NULL) == TDL_OK;
    struct MHD_Response *r = response_json(known ? info_json(&info) : json_pack("{s:s}", "id", id));
    if (r) {
        char loc[SERVE_ID_MAX + 16];
        snprintf(loc, sizeof(loc), "/v1/images/%s", id);
        MHD_add_response_header(r, "Location", loc);
    }
    return reply(h, c, 202, r, method, url);
}

/* POST /v1/images/generations: openai.c translates the request and the answer; it is submitted
 * and waited for as POST /v1/images?wait=1 is. */
static http_result_t handle_openai(serve_http_t *h, struct MHD_Connection *c, const char *method,
                                   const char *url, http_conn_t *hc)
{
    unsigned code = 500;
    serve_request_params_t p;
    char id[SERVE_ID_MAX + 1];
    json_t *answer = serve_openai_request(c, &h->o, hc->body, hc->len, hc->too_big, &p, &code);
    if (!answer && serve_queue_submit(h->queue, &p, SERVE_SOURCE_HTTP, id) != TDL_OK)
        answer = serve_openai_error(code = 503, NULL, tdl_error_get());
    if (!answer) {
        serve_request_info_t info;
        unsigned char *png = NULL;
        bool gone = false;
        tdl_status_t st = wait_result(h, c, id, true, &info, &png, &gone);
        if (gone) {
            free(png);
            return MHD_NO; /* no one to answer */
        }
        answer = serve_openai_answer(id, st, &info, png, h->o.wait_timeout_ms, &code);
        free(png);
    }
    struct MHD_Response *r = response_json(answer);
    if (r && code == 503) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after_s(h));
        MHD_add_response_header(r, "Retry-After", ra);
    }
    return reply(h, c, code, r, method, url);
}

static http_result_t handle_metrics(serve_http_t *h, struct MHD_Connection *c, const char *method,
                                    const char *url)
{
    serve_stats_t s;
    serve_queue_stats(h->queue, &s);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return reply_error(h, c, 500, method, url, "metrics", "out of memory");
    fprintf(f,
            "# HELP tidal_queue_length Requests waiting to run.\n"
            "# TYPE tidal_queue_length gauge\ntidal_queue_length %d\n",
            s.queued);
    fprintf(f,
            "# HELP tidal_queue_capacity Requests that may wait before new ones get 503.\n"
            "# TYPE tidal_queue_capacity gauge\ntidal_queue_capacity %d\n",
            s.capacity);
    fprintf(f,
            "# HELP tidal_requests_running Requests being sampled.\n"
            "# TYPE tidal_requests_running gauge\ntidal_requests_running %d\n",
            s.running);
    fprintf(f, "# HELP tidal_requests_total Requests by outcome and source.\n"
               "# TYPE tidal_requests_total counter\n");
    static const char *const sources[] = {"http", "trace"};
    for (int i = 0; i < SERVE_SOURCE_COUNT; i++) {
        const serve_counts_t *k = &s.by_source[i];
        fprintf(f,
                "tidal_requests_total{status=\"submitted\",source=\"%s\"} %llu\n"
                "tidal_requests_total{status=\"rejected\",source=\"%s\"} %llu\n"
                "tidal_requests_total{status=\"done\",source=\"%s\"} %llu\n"
                "tidal_requests_total{status=\"failed\",source=\"%s\"} %llu\n"
                "tidal_requests_total{status=\"cancelled\",source=\"%s\"} %llu\n",
                sources[i], (unsigned long long)k->submitted, sources[i],
                (unsigned long long)k->rejected, sources[i], (unsigned long long)k->done,
                sources[i], (unsigned long long)k->failed, sources[i],
                (unsigned long long)k->cancelled);
    }
    fprintf(f, "# HELP tidal_slo_violations_total Requests finished after their deadline_ms.\n"
               "# TYPE tidal_slo_violations_total counter\n");
    for (int i = 0; i < SERVE_SOURCE_COUNT; i++)
        fprintf(f, "tidal_slo_violations_total{source=\"%s\"} %llu\n", sources[i],
                (unsigned long long)s.by_source[i].slo_violations);
    struct {
        const char *name, *help;
        const serve_hist_t *hist; /* [SERVE_NRES] */
    } hists[] = {
        {"tidal_request_latency_seconds", "From arrival to the PNG, requests done.", s.latency},
        {"tidal_request_queue_seconds", "From arrival to the start of sampling.", s.queue_wait},
        {"tidal_request_run_seconds", "Sampling and encoding, requests done.", s.run},
    };
    for (size_t i = 0; i < TDL_ARRAY_SIZE(hists); i++) {
        fprintf(f, "# HELP %s %s By resolution.\n# TYPE %s histogram\n", hists[i].name,
                hists[i].help, hists[i].name);
        for (int ri = 0; ri < SERVE_NRES; ri++) {
            const serve_hist_t *hs = &hists[i].hist[ri];
            int res = serve_res_values[ri] * serve_pixel_scale(&h->o.limits);
            uint64_t cum = 0;
            for (int b = 0; b < SERVE_HIST_BUCKETS; b++) {
                cum += hs->buckets[b];
                fprintf(f, "%s_bucket{resolution=\"%d\",le=\"%g\"} %llu\n", hists[i].name, res,
                        serve_hist_bounds[b], (unsigned long long)cum);
            }
            cum += hs->buckets[SERVE_HIST_BUCKETS];
            fprintf(f,
                    "%s_bucket{resolution=\"%d\",le=\"+Inf\"} %llu\n"
                    "%s_sum{resolution=\"%d\"} %.6f\n%s_count{resolution=\"%d\"} %llu\n",
                    hists[i].name, res, (unsigned long long)cum, hists[i].name, res, hs->sum,
                    hists[i].name, res, (unsigned long long)hs->count);
        }
    }
    fprintf(f, "# HELP tidal_batch_size Requests a denoising step took through the model "
               "together.\n# TYPE tidal_batch_size histogram\n");
    uint64_t cum = 0;
    for (int b = 0; b < SERVE_BATCH_BUCKETS; b++) {
        cum += s.batch_buckets[b];
        fprintf(f, "tidal_batch_size_bucket{le=\"%d\"} %llu\n", serve_batch_bounds[b],
                (unsigned long long)cum);
    }
    cum += s.batch_buckets[SERVE_BATCH_BUCKETS];
    fprintf(f, "tidal_batch_size_bucket{le=\"+Inf\"} %llu\ntidal_batch_size_sum %llu\n"
               "tidal_batch_size_count %llu\n",
            (unsigned long long)cum, (unsigned long long)s.batch_sum,
            (unsigned long long)s.batch_count);
    fprintf(f, "# HELP tidal_ranks Ranks by role (alone, rank 0 coordinates and serves).\n"
               "# TYPE tidal_ranks gauge\n");
    for (int r = 0; r < SERVE_ROLE_COUNT; r++)
        fprintf(f, "tidal_ranks{role=\"%s\"} %d\n", serve_role_name((serve_role_t)r), s.ranks[r]);
    fprintf(f, "# HELP tidal_http_responses_total HTTP answers by status code.\n"
               "# TYPE tidal_http_responses_total counter\n");
    for (size_t i = 0; i < HTTP_NCODES; i++) {
        uint64_t v = __atomic_load_n(&h->responses[i], __ATOMIC_RELAXED);
        if (i < TDL_ARRAY_SIZE(http_codes))
            fprintf(f, "tidal_http_responses_total{code=\"%u\"} %llu\n", http_codes[i],
                    (unsigned long long)v);
        else
            fprintf(f, "tidal_http_responses_total{code=\"other\"} %llu\n", (unsigned long long)v);
    }
    if (fclose(f) != 0) {
        free(text);
        return reply_error(h, c, 500, method, url, "metrics", "out of memory");
    }
    return reply(h, c, 200, response_text("text/plain; version=0.0.4; charset=utf-8", text, len),
                 method, url);
}

/* ==== requests libmicrohttpd lets through ==================================================== */

/* The first *con_cls of a request whose target decodes to a NUL (from http_target_seen): the
 * handler gets the URL and the arguments as C strings, which end there, so /healthz%00x would
 * route as /healthz. Each marker is also the `field` of the 400. */
static char target_nul_path[] = "path", target_nul_query[] = "query";

/* Sees the request target as sent, before it is decoded; the result is the first *con_cls. */
static void *http_target_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
    const char *nul = strstr(uri, "%00");
    if (!nul)
        return NULL;
    const char *q = strchr(uri, '?');
    return q && q < nul ? target_nul_query : target_nul_path;
}

static bool is_target_marker(const void *p)
{
    return p == target_nul_path || p == target_nul_query;
}

/* The headers that frame a request, counted over every line: libmicrohttpd's lookups return the
 * first of several, and it reads a body of a coding it does not know until the client closes. */
typedef struct header_scan {
    int host, content_length, transfer_encoding;
    const char *coding; /* the first Transfer-Encoding */
} header_scan_t;

static http_result_t header_seen(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    header_scan_t *s = cls;
    if (strcasecmp(key, "Host") == 0)
        s->host++;
    else if (strcasecmp(key, "Content-Length") == 0)
        s->content_length++;
    else if (strcasecmp(key, "Transfer-Encoding") == 0 && s->transfer_encoding++ == 0)
        s->coding = value;
    return MHD_YES;
}

/* A target that decodes to a NUL, a missing or repeated Host, a repeated Content-Length, or a
 * Transfer-Encoding that is not one "chunked" (or has a Content-Length beside it: request
 * smuggling's way in): 400, or 501 for the coding, and the connection closed, as where the body
 * ends is not known. Returns true with *ret set when it answered. */
static bool answer_malformed(serve_http_t *h, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *nul_field,
                             http_result_t *ret)
{
    header_scan_t hs = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, header_seen, &hs);
    char msg[160], coding[48];
    const char *field = "Transfer-Encoding";
    unsigned code = 400;
    serve_printable(coding, sizeof(coding), hs.coding ? hs.coding : "");
    if (nul_field) {
        field = nul_field;
        snprintf(msg, sizeof(msg), "the %s holds %%00, a NUL once decoded", nul_field);
    } else if (hs.host > 1 || (hs.host == 0 && strcmp(version, MHD_HTTP_VERSION_1_0) != 0)) {
        field = "Host";
        snprintf(msg, sizeof(msg), "%s",
                 hs.host ? "more than one Host header" : "an HTTP/1.1 request needs a Host header");
    } else if (hs.content_length > 1) {
        field = "Content-Length";
        snprintf(msg, sizeof(msg), "more than one Content-Length header");
    } else if (hs.transfer_encoding && hs.content_length) {
        snprintf(msg, sizeof(msg), "Transfer-Encoding and Content-Length together");
    } else if (hs.transfer_encoding > 1 ||
               (hs.transfer_encoding && strcasecmp(coding, "chunked"))) {
        code = 501;
        snprintf(msg, sizeof(msg),
                 "Transfer-Encoding '%s'%s is not supported: send chunked or a Content-Length",
                 coding, hs.transfer_encoding > 1 ? " (and more)" : "");
    } else {
        return false;
    }
    struct MHD_Response *r = response_error(field, NULL, "%s", msg);
    if (r)
        MHD_add_response_header(r, "Connection", "close");
    *ret = reply(h, c, code, r, method, url);
    return true;
}

/* What can be answered before the body arrives: unknown paths, wrong methods, missing
 * credentials, ids "." and "..", declared bodies over the limit. Returns true with *ret set when
 * it answered. */
static bool answer_early(serve_http_t *h, struct MHD_Connection *c, const char *url,
                         const char *method, http_conn_t *hc, http_result_t *ret)
{
    hc->route = route_of(url, hc->id);
    if (hc->route == ROUTE_NONE) {
        char u[80];
        serve_printable(u, sizeof(u), url);
        *ret = reply(h, c, 404,
                     response_error("path", NULL,
                                    "no such path '%s' (POST /v1/images, GET or DELETE "
                                    "/v1/images/ID, GET /v1/images/ID/events, POST "
                                    "/v1/images/generations, GET /metrics, GET /healthz)",
                                    u),
                     method, url);
        return true;
    }
    if (!route_allows(hc->route, method)) {
        char m[24];
        serve_printable(m, sizeof(m), method);
        char msg[96];
        snprintf(msg, sizeof(msg), "%s is not allowed here: use %s", m, route_allow(hc->route));
        struct MHD_Response *r = route_error(hc->route, 405, "method", msg);
        if (r)
            MHD_add_response_header(r, "Allow", route_allow(hc->route));
        *ret = reply(h, c, 405, r, method, url);
        return true;
    }
    if (hc->route != ROUTE_HEALTHZ && !authorized(h, c)) {
        struct MHD_Response *r =
            route_error(hc->route, 401, "authorization",
                        "missing or wrong bearer token (Authorization: Bearer ...)");
        if (r)
            MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"tidal\"");
        *ret = reply(h, c, 401, r, method, url);
        return true;
    }
    if ((hc->route == ROUTE_IMAGE || hc->route == ROUTE_EVENTS) &&
        serve_id_is_dot_segment(hc->id, strlen(hc->id))) {
        *ret = reply_error(h, c, 400, method, url, "id", SERVE_ID_DOT_MESSAGE);
        return true;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || end == cl || n > h->o.max_body) {
            char msg[128];
            snprintf(msg, sizeof(msg), "the body is larger than %zu bytes (--max-body)",
                     h->o.max_body);
            *ret = reply(h, c, 413, route_error(hc->route, 413, "body", msg), method, url);
            return true;
        }
    }
    return false;
}

static http_result_t http_answer(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    serve_http_t *h = cls;
    http_conn_t *hc = *con_cls;
    if (!hc || is_target_marker(hc)) {
        const char *nul_field = (const char *)*con_cls;
        *con_cls = NULL;
        /* the header is in: from now on the connection has --connection-timeout to be idle */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)TDL_MAX(h->o.connection_timeout_s, 0));
        hc = calloc(1, sizeof(*hc));
        if (!hc)
            return MHD_NO;
        *con_cls = hc;
        __atomic_fetch_add(&h->inflight, 1, __ATOMIC_ACQ_REL);
        http_result_t ret;
        if (answer_malformed(h, c, url, method, version, nul_field, &ret) ||
            answer_early(h, c, url, method, hc, &ret))
            return ret;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (!hc->too_big && hc->len + n <= h->o.max_body) {
            if (hc->len + n + 1 > hc->cap) {
                size_t cap = TDL_MAX(hc->len + n + 1, TDL_MIN(2 * hc->cap, h->o.max_body + 1));
                char *b = realloc(hc->body, cap);
                if (!b)
                    return MHD_NO;
                hc->body = b, hc->cap = cap;
            }
            memcpy(hc->body + hc->len, upload, n);
            hc->len += n;
        } else {
            /* chunked bodies have no declared length: keep reading, answer 413 at the end,
             * but hang up on one that goes on and on */
            hc->too_big = true;
            hc->discarded += n;
            if (hc->discarded > TDL_MAX((size_t)16 << 20, 16 * h->o.max_body))
                return MHD_NO;
        }
        return MHD_YES;
    }
    query_args_t qa = {.route = hc->route};
    if (hc->route == ROUTE_IMAGES || hc->route == ROUTE_IMAGE) {
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_arg, &qa);
        if (qa.bad[0])
            return reply_error(h, c, 400, method, url, qa.bad, qa.why);
    }
    switch (hc->route) {
    case ROUTE_IMAGES: return handle_post(h, c, method, url, hc, &qa);
    case ROUTE_IMAGE:
        if (method_is(method, "DELETE"))
            return handle_delete(h, c, method, url, hc->id);
        return reply_result(h, c, method, url, hc->id, qa.png, qa.wait);
    case ROUTE_EVENTS: return handle_events(h, c, method, url, hc->id);
    case ROUTE_OPENAI: return handle_openai(h, c, method, url, hc);
    case ROUTE_METRICS: return handle_metrics(h, c, method, url);
    case ROUTE_HEALTHZ:
        return reply(h, c, 200, response_text("text/plain", strdup("ok\n"), 3), method, url);
    case ROUTE_NONE: break;
    }
    return MHD_NO;
}

static void http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                           enum MHD_RequestTerminationCode why)
{
    serve_http_t *h = cls;
    http_conn_t *hc = *con_cls;
    if (hc && !is_target_marker(hc)) {
        free(hc->body);
        free(hc);
        *con_cls = NULL;
        __atomic_fetch_sub(&h->inflight, 1, __ATOMIC_ACQ_REL);
    }
}

static void http_log(void *cls, const char *fmt, va_list ap)
{
    if (TDL_LOG_INFO <= tdl_log_get_level())
        tdl_log_vwrite(TDL_LOG_INFO, fmt, ap);
}

tdl_status_t serve_listen_parse(const char *addr, char host_out[SERVE_HOST_MAX + 1], int *port_out)
{
    const char *usage = "use HOST:PORT (127.0.0.1:8000, [::1]:8000, 0.0.0.0:8000; port 0 "
                        "picks a free one)";
    const char *colon = strrchr(addr, ':');
    const char *h0 = addr, *h1 = colon;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':')
            return tdl_error_raise(TDL_ERR_INVALID_ARG,
                                   "--listen '%s': an IPv6 address is written [IPV6]:PORT", addr);
        h0 = addr + 1, h1 = rb, colon = rb + 1;
    } else if (colon && memchr(addr, ':', (size_t)(colon - addr))) {
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "--listen '%s': an IPv6 address is written [IPV6]:PORT", addr);
    }
    if (!colon)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "--listen '%s': no port: %s", addr, usage);
    const char *port = colon + 1;
    size_t digits = strspn(port, "0123456789");
    if (!port[0] || digits != strlen(port) || digits > 5 || atol(port) > 65535)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "--listen '%s': the port must be a number from 0 to 65535: %s", addr,
                               usage);
    if ((size_t)(h1 - h0) > SERVE_HOST_MAX)
        return tdl_error_raise(TDL_ERR_INVALID_ARG,
                               "--listen '%s': the host is longer than %d "
                               "characters",
                               addr, SERVE_HOST_MAX);
    memcpy(host_out, h0, (size_t)(h1 - h0));
    host_out[h1 - h0] = '\0';
    *port_out = (int)atol(port);
    return TDL_OK;
}

/* "host:port", "[v6]:port"; an empty host means every address. */
static tdl_status_t listen_socket(const char *addr, int *fd_out, int *family_out, int *port_out)
{
    char host[SERVE_HOST_MAX + 1], port[16];
    int port_num;
    tdl_status_t st = serve_listen_parse(addr, host, &port_num);
    if (st != TDL_OK)
        return st;
    snprintf(port, sizeof(port), "%d", port_num);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (gai != 0)
        return tdl_error_raise(TDL_ERR_IO, "cannot listen on %s: %s", addr, gai_strerror(gai));
    int err = 0, fd = -1, family = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
            family = a->ai_family;
            break;
        }
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return tdl_error_raise(TDL_ERR_IO, "cannot listen on %s: %s", addr, strerror(err));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int p = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    *family_out = family;
    *port_out = p;
    return TDL_OK;
}

tdl_status_t serve_http_start(const serve_http_opts_t *opts, serve_queue_t *queue,
                              serve_http_t **http_out)
{
    if (opts->max_body < 1 || opts->wait_timeout_ms < 1 || opts->max_connections < 1 ||
        opts->limits.num_classes < 1)
        return tdl_error_raise(TDL_ERR_INVALID_ARG, "serve http: bad options");
    serve_http_t *h = calloc(1, sizeof(*h));
    if (!h)
        return tdl_error_raise(TDL_ERR_NOMEM, "serve http: out of memory");
    h->o = *opts;
    h->queue = queue;
    h->listen = strdup(opts->listen);
    if (opts->token && opts->token[0])
        h->token = strdup(opts->token);
    h->o.listen = h->listen;
    h->o.token = h->token;
    tdl_status_t st;
    if (!h->listen || (opts->token && opts->token[0] && !h->token)) {
        st = tdl_error_raise(TDL_ERR_NOMEM, "serve http: out of memory");
        goto err_free;
    }
    int fd, family;
    if ((st = listen_socket(opts->listen, &fd, &family, &h->port)) != TDL_OK)
        goto err_free;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* until its first header is in, a connection gets HTTP_HEADER_TIMEOUT_S (http_answer then
     * gives it --connection-timeout) */
    unsigned header_timeout = HTTP_HEADER_TIMEOUT_S;
    if (opts->connection_timeout_s > 0 && (unsigned)opts->connection_timeout_s < header_timeout)
        header_timeout = (unsigned)opts->connection_timeout_s;
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, http_answer, h, MHD_OPTION_EXTERNAL_LOGGER, http_log, h,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, http_completed, h,
        MHD_OPTION_URI_LOG_CALLBACK, http_target_seen, h, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)opts->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, header_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_THREAD_STACK_SIZE,
        (size_t)1 << 20, MHD_OPTION_END);
    if (!h->daemon) {
        close(fd);
        st = tdl_error_raise(TDL_ERR_IO, "cannot serve HTTP on %s: libmicrohttpd did not start",
                             opts->listen);
        goto err_free;
    }
    *http_out = h;
    return TDL_OK;
err_free:
    free(h->token);
    free(h->listen);
    free(h);
    return st;
}

int serve_http_port(const serve_http_t *http)
{
    return http->port;
}

void serve_http_stop(serve_http_t *h)
{
    if (!h)
        return;
    if (h->daemon) {
        __atomic_store_n(&h->stopping, 1, __ATOMIC_RELEASE); /* event streams end */
        /* stop accepting, then let the answers under way (waiters woken by the queue's close)
         * go out before the connections are cut */
        int fd = MHD_quiesce_daemon(h->daemon);
        if (fd >= 0)
            close(fd);
        double until = tdl_clock_s() + 5.0;
        while (__atomic_load_n(&h->inflight, __ATOMIC_ACQUIRE) > 0 && tdl_clock_s() < until)
            usleep(10000);
        MHD_stop_daemon(h->daemon);
    }
    free(h->token);
    free(h->listen);
    free(h);
}
