/* The request validator: one JSON object in, serve_request_params_t out, or the field at fault
 * and why. The HTTP server (http.c) and the trace reader (trace.c) both call it; doc/serving.md
 * lists the fields and their limits for clients. */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "serve/serve.h"
#include "serve/serve_internal.h"

/* jansson allocates through tdl_malloc (so that tests can make it fail), and a failure is
 * remembered: the parser answers out of memory, not invalid JSON. */
static _Thread_local bool json_out_of_memory;
static pthread_once_t json_once = PTHREAD_ONCE_INIT;

static void *json_alloc(size_t size)
{
    void *p = tdl_malloc(size);
    if (!p)
        json_out_of_memory = true;
    return p;
}

static void json_init(void)
{
    json_set_alloc_funcs(json_alloc, free);
}

static tdl_status_t field_error(serve_field_error_t *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static tdl_status_t field_error(serve_field_error_t *err, const char *field, const char *fmt, ...)
{
    va_list ap;
    snprintf(err->field, sizeof(err->field), "%s", field);
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s", err->message);
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static const char *const request_fields[] = {"id",  "label", "n",        "resolution",  "steps",
                                             "cfg", "seed",  "priority", "deadline_ms", "sampler"};

/* Reads integer field `name` in [min, max]; absent or null keeps *out. */
static tdl_status_t get_int(json_t *obj, const char *name, int64_t min, int64_t max, int64_t *out,
                            serve_field_error_t *err)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v))
        return TDL_OK;
    if (!json_is_integer(v))
        return field_error(err, name, "'%s' must be an integer, got %s", name, json_type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return field_error(err, name, "'%s' must be in [%lld, %lld], got %lld", name,
                           (long long)min, (long long)max, (long long)x);
    *out = x;
    return TDL_OK;
}

bool serve_id_valid(const char *s, size_t len)
{
    if (len < 1 || len > SERVE_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

bool serve_id_is_dot_segment(const char *s, size_t len)
{
    return (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.');
}

void serve_printable(char *dst, size_t size, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < size; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
    dst[i] = '\0';
}

static tdl_status_t request_from_json(json_t *root, const serve_limits_t *lim,
                                      const char *extra_key, serve_request_params_t *p,
                                      int64_t *extra, serve_field_error_t *err)
{
    if (!json_is_object(root))
        return field_error(err, "body", "the body must be a JSON object, got %s",
                           json_type_name(root));
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        bool known = extra_key && strcmp(key, extra_key) == 0;
        for (size_t i = 0; !known && i < TDL_ARRAY_SIZE(request_fields); i++)
            known = strcmp(key, request_fields[i]) == 0;
        if (!known) {
            char name[64];
            serve_printable(name, sizeof(name), key);
            return field_error(err, name,
                               "unknown field '%s' (known: id, label, n, resolution, steps, cfg, "
                               "seed, priority, deadline_ms, sampler)",
                               name);
        }
    }
    memset(p, 0, sizeof(*p));
    int64_t label = -1, n = 1, res = lim->default_resolution, steps = lim->default_steps;
    int64_t seed = -1, prio = 0, deadline = 0;
    tdl_status_t st;
    if ((st = get_int(root, "label", -1, lim->num_classes - 1, &label, err)) ||
        (st = get_int(root, "n", 1, SERVE_MAX_IMAGES, &n, err)) ||
        (st = get_int(root, "resolution", INT64_MIN, INT64_MAX, &res, err)) ||
        (st = get_int(root, "steps", 1, SERVE_MAX_STEPS, &steps, err)) ||
        (st = get_int(root, "seed", 0, (int64_t)SERVE_MAX_SEED, &seed, err)) ||
        (st = get_int(root, "priority", -SERVE_MAX_PRIORITY, SERVE_MAX_PRIORITY, &prio, err)) ||
        (st = get_int(root, "deadline_ms", 0, SERVE_MAX_DEADLINE_MS, &deadline, err)))
        return st;
    int sc = serve_pixel_scale(lim);
    if ((res != 32 * sc && res != 64 * sc && res != 128 * sc) ||
        res > (int64_t)lim->max_resolution * sc)
        return field_error(err, "resolution",
                           "'resolution' must be %d, %d or %d (at most %d "
                           "on this server), got %lld",
                           32 * sc, 64 * sc, 128 * sc, lim->max_resolution * sc, (long long)res);
    double cfg = lim->default_cfg;
    if ((v = json_object_get(root, "cfg")) && !json_is_null(v)) {
        if (!json_is_number(v))
            return field_error(err, "cfg", "'cfg' must be a number, got %s", json_type_name(v));
        cfg = json_number_value(v);
        if (!(cfg >= 0 && cfg <= SERVE_MAX_CFG))
            return field_error(err, "cfg", "'cfg' must be in [0, %g], got %g", SERVE_MAX_CFG, cfg);
    }
    bool rf = lim->objective == DIT_OBJECTIVE_RF;
    p->sampler = rf ? DIT_SAMPLER_HEUN : DIT_SAMPLER_DDPM;
    if ((v = json_object_get(root, "sampler")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return field_error(err, "sampler", "'sampler' must be a string, got %s",
                               json_type_name(v));
        dit_sampler_kind_t kind;
        if (dit_sampler_parse(json_string_value(v), &kind) != TDL_OK ||
            dit_sampler_check(kind, lim->objective) != TDL_OK)
            return field_error(err, "sampler",
                               "'sampler' must be %s for this model (trained with the %s "
                               "objective), got '%.32s'",
                               rf ? "\"euler\" or \"heun\"" : "\"ddpm\" or \"ddim\"",
                               dit_objective_name(lim->objective), json_string_value(v));
        p->sampler = kind;
    }
    if ((v = json_object_get(root, "id")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return field_error(err, "id", "'id' must be a string, got %s", json_type_name(v));
        if (!serve_id_valid(json_string_value(v), json_string_length(v)))
            return field_error(err, "id", "'id' must be 1 to %d characters of A-Z a-z 0-9 . _ -",
                               SERVE_ID_MAX);
        if (serve_id_is_dot_segment(json_string_value(v), json_string_length(v)))
            return field_error(err, "id", "'id': " SERVE_ID_DOT_MESSAGE);
        if (strcmp(json_string_value(v), SERVE_OPENAI_PATH_ID) == 0)
            return field_error(err, "id", "'id': " SERVE_OPENAI_PATH_ID_MESSAGE);
        memcpy(p->id, json_string_value(v), json_string_length(v) + 1);
    }
    if (extra_key) {
        int64_t x = -1;
        if ((v = json_object_get(root, extra_key)) == NULL || json_is_null(v))
            return field_error(err, extra_key, "'%s' is missing", extra_key);
        if ((st = get_int(root, extra_key, 0, INT64_C(1) << 40, &x, err)) != TDL_OK)
            return st;
        *extra = x;
    }
    p->label = (int)label, p->n = (int)n, p->resolution = (int)res, p->steps = (int)steps;
    p->cfg = cfg;
    p->has_seed = seed >= 0;
    p->seed = p->has_seed ? (uint64_t)seed : 0;
    p->priority = (int)prio;
    p->deadline_ms = deadline;
    return TDL_OK;
}

const char *serve_json_type_name(const json_t *v)
{
    return json_type_name(v);
}

tdl_status_t serve_json_load_body(const char *text, size_t len, json_t **root_out,
                                  serve_field_error_t *err)
{
    if (len == 0)
        return field_error(err, "body", "the body is empty: send a JSON object");
    json_error_t je;
    pthread_once(&json_once, json_init);
    json_out_of_memory = false;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    /* jansson 2.14 reports a failed allocation in its lexer as a syntax error: the flag knows */
    if (!root && (json_out_of_memory || json_error_code(&je) == json_error_out_of_memory)) {
        field_error(err, "body", "the server is out of memory: try again later");
        return tdl_error_raise(TDL_ERR_NOMEM, "out of memory parsing a request");
    }
    if (!root)
        return field_error(err, "body", "invalid JSON at line %d, column %d: %s", je.line,
                           je.column, je.text);
    *root_out = root;
    return TDL_OK;
}

tdl_status_t serve_request_parse(const char *text, size_t len, const serve_limits_t *limits,
                                 const char *extra_key, serve_request_params_t *params_out,
                                 int64_t *extra_out, serve_field_error_t *err)
{
    json_t *root;
    tdl_status_t st = serve_json_load_body(text, len, &root, err);
    if (st != TDL_OK)
        return st;
    serve_request_params_t p;
    int64_t extra = 0;
    st = request_from_json(root, limits, extra_key, &p, &extra, err);
    json_decref(root);
    if (st != TDL_OK)
        return st;
    *params_out = p;
    if (extra_key)
        *extra_out = extra;
    return TDL_OK;
}
