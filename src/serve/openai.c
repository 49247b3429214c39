/* POST /v1/images/generations: OpenAI's images API over the native one. The OpenAI fields become
 * a native request, which the request validator (request.c) checks; http.c submits it to the
 * queue and waits for it as for POST /v1/images?wait=1; the PNG grid it answers is cut into one
 * PNG per image (png.c), each sent base64-encoded. Every error is OpenAI's error object.
 * doc/serving.md. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>
#include <microhttpd.h>

#include "serve/serve.h"
#include "serve/serve_internal.h"

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result openai_mhd_result_t;
#else
typedef int openai_mhd_result_t;
#endif

/* The fields of a request: OpenAI's, the usual extensions, and the ones accepted and ignored. */
static const char *const openai_fields[] = {
    "prompt",         "n",     "size",    "response_format", "seed", "num_inference_steps",
    "guidance_scale", "model", "quality", "style",           "user"};
#define OPENAI_FIELDS                                                                              \
    "prompt, n, size, response_format, seed, num_inference_steps, guidance_scale, model, "         \
    "quality, style, user"
static const char *const openai_ignored[] = {"model", "quality", "style", "user"};

/* Each native field a request becomes, and the OpenAI field it came from (for errors). */
static const struct {
    const char *native, *openai;
    bool as_given; /* passed on as the client wrote it; the others are translated first */
} openai_native[] = {{"label", "prompt", false},
                     {"n", "n", true},
                     {"resolution", "size", false},
                     {"seed", "seed", true},
                     {"steps", "num_inference_steps", true},
                     {"cfg", "guidance_scale", true}};

/* Big enough for a message with a list of names (openai_names_list keeps to its own buffer). */
#define OPENAI_MESSAGE_MAX 1024

json_t *serve_openai_error(unsigned code, const char *param, const char *message)
{
    const char *type = code >= 500 ? "server_error" : "invalid_request_error";
    json_t *o = json_pack("{s:{s:s, s:s, s:s?, s:n}}", "error", "message", message, "type", type,
                          "param", param, "code");
    if (!o) /* a message cut inside a UTF-8 sequence: say what it could */
        o = json_pack("{s:{s:s, s:s, s:s?, s:n}}", "error", "message",
                      "(the message of this error is not UTF-8)", "type", type, "param", param,
                      "code");
    return o;
}

static json_t *openai_fail(unsigned *code_out, unsigned code, const char *param, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));

static json_t *openai_fail(unsigned *code_out, unsigned code, const char *param, const char *fmt,
                           ...)
{
    char msg[OPENAI_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    *code_out = code;
    return serve_openai_error(code, param, msg);
}

size_t serve_base64_encode(const unsigned char *src, size_t len, char *dst)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0, i = 0;
    for (; i + 3 <= len; i += 3) {
        unsigned v = (unsigned)src[i] << 16 | (unsigned)src[i + 1] << 8 | src[i + 2];
        dst[o++] = digits[v >> 18];
        dst[o++] = digits[(v >> 12) & 63];
        dst[o++] = digits[(v >> 6) & 63];
        dst[o++] = digits[v & 63];
    }
    if (i < len) { /* one or two bytes left: two or three digits and the padding */
        unsigned v = (unsigned)src[i] << 16 | (i + 1 < len ? (unsigned)src[i + 1] << 8 : 0);
        dst[o++] = digits[v >> 18];
        dst[o++] = digits[(v >> 12) & 63];
        dst[o++] = i + 1 < len ? digits[(v >> 6) & 63] : '=';
        dst[o++] = '=';
    }
    dst[o] = '\0';
    return o;
}

/* ---- prompts ------------------------------------------------------------------------------- */

static bool ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The number of "N" or "class N" (prompt of len bytes, trimmed): 1 and *num, or 0 when it is
 * neither; a number past INT_MAX reads as -1 (out of every range). */
static int prompt_number(const char *s, size_t len, long *num)
{
    if (len >= 5 && strncasecmp(s, "class", 5) == 0) {
        s += 5, len -= 5;
        while (len && ascii_space(*s))
            s++, len--;
    }
    if (len == 0)
        return 0;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        if (v >= 0)
            v = v > (long)INT32_MAX / 10 ? -1 : v * 10 + (s[i] - '0');
    }
    *num = v;
    return 1;
}

/* "'T-shirt/top', 'Trouser', ..." into dst: whole names only, then ", ..." when they do not all
 * fit, so that the text stays valid UTF-8. */
static void openai_names_list(char *dst, size_t size, const char *const *names, int n)
{
    static const char more[] = ", ...";
    size_t len = 0;
    dst[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t need = strlen(names[i]) + 2 + (i ? 2 : 0);
        if (len + need + sizeof(more) > size) {
            memcpy(dst + len, more, sizeof(more));
            return;
        }
        len += (size_t)snprintf(dst + len, size - len, "%s'%s'", i ? ", " : "", names[i]);
    }
}

tdl_status_t serve_openai_label(const char *prompt, const char *const *names, int num_classes,
                                int *label_out, char *why, size_t why_size)
{
    size_t len = strlen(prompt);
    while (len && ascii_space(*prompt))
        prompt++, len--;
    while (len && ascii_space(prompt[len - 1]))
        len--;
    long num;
    if (prompt_number(prompt, len, &num) && num >= 0 && num < num_classes) {
        *label_out = (int)num;
        return TDL_OK;
    }
    for (int i = 0; names && i < num_classes; i++) {
        if (strlen(names[i]) == len && strncasecmp(names[i], prompt, len) == 0) {
            *label_out = i;
            return TDL_OK;
        }
    }
    char shown[72], head[128], list[600];
    serve_printable(shown, sizeof(shown), prompt);
    shown[TDL_MIN(len, sizeof(shown) - 1)] = '\0';
    if (len == 0)
        snprintf(head, sizeof(head), "'prompt' is empty");
    else
        snprintf(head, sizeof(head), "'prompt' '%s' is %s", shown,
                 prompt_number(prompt, len, &num) ? "out of range" : "not a class of this model");
    if (names) {
        openai_names_list(list, sizeof(list), names, num_classes);
        snprintf(why, why_size, "%s: give a class name (%s) or 'class N' for N from 0 to %d", head,
                 list, num_classes - 1);
    } else {
        snprintf(why, why_size,
                 "%s: this model's file has no class names, so give 'class N' or N for N from 0 "
                 "to %d",
                 head, num_classes - 1);
    }
    return tdl_error_raise(TDL_ERR_INVALID_ARG, "%s", why);
}

/* ---- the endpoint -------------------------------------------------------------------------- */

typedef struct openai_query {
    char bad[64];
} openai_query_t;

static openai_mhd_result_t openai_query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                            const char *value)
{
    openai_query_t *q = cls;
    if (!q->bad[0] && (key[0] || value)) /* "?&": an empty piece, no argument */
        serve_printable(q->bad, sizeof(q->bad), key[0] ? key : "query");
    return MHD_YES;
}

/* A field that must be a string when present (null counts as absent): NULL, or its value. */
static json_t *openai_string(json_t *root, const char *name, unsigned *code, json_t **fail)
{
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v) || json_is_string(v))
        return v && json_is_string(v) ? v : NULL;
    *fail = openai_fail(code, 400, name, "'%s' must be a string, got %s", name,
                        serve_json_type_name(v));
    return NULL;
}

/* "WxH" into *res_out (0: "auto", the server's default); a size that is not square or not a
 * size at all is an error here, the sizes the server takes are the validator's. */
static json_t *openai_size(const char *size, int *res_out, unsigned *code)
{
    if (strcmp(size, "auto") == 0) {
        *res_out = 0;
        return NULL;
    }
    size_t w = strspn(size, "0123456789");
    size_t h = size[w] == 'x' ? strspn(size + w + 1, "0123456789") : 0;
    char shown[40];
    serve_printable(shown, sizeof(shown), size);
    if (w < 1 || w > 4 || h < 1 || h > 4 || size[w + 1 + h] != '\0')
        return openai_fail(code, 400, "size", "'size' must be WIDTHxHEIGHT, as 32x32, got '%s'",
                           shown);
    int width = atoi(size), height = atoi(size + w + 1);
    if (width != height)
        return openai_fail(code, 400, "size",
                           "'size' must be square (32x32, 64x64 or 128x128), got '%s'", shown);
    *res_out = width;
    return NULL;
}

/* The validator's error, told with the OpenAI field it came from. */
static json_t *openai_field_error(const serve_field_error_t *err, const serve_limits_t *lim,
                                  const char *size, unsigned *code)
{
    if (strcmp(err->field, "resolution") == 0) {
        char shown[40];
        serve_printable(shown, sizeof(shown), size);
        int sc = serve_pixel_scale(lim), top = lim->max_resolution * sc;
        return openai_fail(code, 400, "size",
                           "'size' must be %dx%d, %dx%d or %dx%d, at most %dx%d on this server "
                           "(--max-resolution), got '%s'",
                           32 * sc, 32 * sc, 64 * sc, 64 * sc, 128 * sc, 128 * sc, top, top, shown);
    }
    for (size_t i = 0; i < TDL_ARRAY_SIZE(openai_native); i++) {
        size_t nlen = strlen(openai_native[i].native);
        const char *m = err->message;
        if (strcmp(err->field, openai_native[i].native) != 0)
            continue;
        /* the validator's messages begin with the field in quotes: say the client's name */
        if (m[0] == '\'' && strncmp(m + 1, openai_native[i].native, nlen) == 0 &&
            m[1 + nlen] == '\'')
            return openai_fail(code, 400, openai_native[i].openai, "'%s'%s",
                               openai_native[i].openai, m + 2 + nlen);
        return openai_fail(code, 400, openai_native[i].openai, "%s", m);
    }
    return openai_fail(code, 400, NULL, "%s", err->message);
}

/* The native request of an OpenAI one, checked by the validator. */
static json_t *openai_request(json_t *root, const serve_http_opts_t *o, serve_request_params_t *p,
                              unsigned *code)
{
    const char *key;
    json_t *v, *fail = NULL;
    json_object_foreach(root, key, v)
    {
        bool known = false;
        for (size_t i = 0; !known && i < TDL_ARRAY_SIZE(openai_fields); i++)
            known = strcmp(key, openai_fields[i]) == 0;
        if (!known) {
            char name[64];
            serve_printable(name, sizeof(name), key);
            return openai_fail(code, 400, name, "unknown field '%s' (known: " OPENAI_FIELDS ")",
                               name);
        }
    }
    for (size_t i = 0; i < TDL_ARRAY_SIZE(openai_ignored); i++)
        if (!openai_string(root, openai_ignored[i], code, &fail) && fail)
            return fail;
    json_t *format = openai_string(root, "response_format", code, &fail);
    if (fail)
        return fail;
    if (format && strcmp(json_string_value(format), "b64_json") != 0) {
        char shown[40];
        serve_printable(shown, sizeof(shown), json_string_value(format));
        return openai_fail(code, 400, "response_format",
                           "'response_format' '%s' is not supported: only b64_json is (the "
                           "images come in the answer; this server keeps no URLs)",
                           shown);
    }
    json_t *prompt = openai_string(root, "prompt", code, &fail);
    if (fail)
        return fail;
    if (!prompt)
        return openai_fail(code, 400, "prompt",
                           "'prompt' is missing: give a class name of the model or 'class N'");
    int label;
    char why[OPENAI_MESSAGE_MAX];
    if (serve_openai_label(json_string_value(prompt), o->class_names, o->limits.num_classes, &label,
                           why, sizeof(why)) != TDL_OK)
        return openai_fail(code, 400, "prompt", "%s", why);
    json_t *size = openai_string(root, "size", code, &fail);
    if (fail)
        return fail;
    int res = 0;
    if (size && (fail = openai_size(json_string_value(size), &res, code)) != NULL)
        return fail;

    /* the rest goes to the validator as given, under the native names */
    json_t *native = json_pack("{s:i}", "label", label);
    if (native && res)
        json_object_set_new(native, "resolution", json_integer(res));
    for (size_t i = 0; native && i < TDL_ARRAY_SIZE(openai_native); i++) {
        json_t *x = json_object_get(root, openai_native[i].openai);
        if (openai_native[i].as_given && x && !json_is_null(x))
            json_object_set(native, openai_native[i].native, x);
    }
    char *text = native ? json_dumps(native, JSON_COMPACT) : NULL;
    json_decref(native);
    if (!text)
        return openai_fail(code, 503, NULL, "the server is out of memory: try again later");
    serve_field_error_t err;
    tdl_status_t st = serve_request_parse(text, strlen(text), &o->limits, NULL, p, NULL, &err);
    free(text);
    if (st == TDL_ERR_NOMEM)
        return openai_fail(code, 503, NULL, "%s", err.message);
    if (st != TDL_OK)
        return openai_field_error(&err, &o->limits, size ? json_string_value(size) : "", code);
    return NULL;
}

/* {"created": ..., "data": [{"b64_json": ...}, ...]}: the grid cut into its n images. */
static json_t *openai_images(const serve_request_info_t *info, const unsigned char *png,
                             unsigned *code)
{
    int n = info->params.n, res = info->params.resolution;
    unsigned char *pngs[SERVE_MAX_IMAGES] = {NULL};
    size_t lens[SERVE_MAX_IMAGES] = {0};
    if (n == 1) {
        pngs[0] = (unsigned char *)png, lens[0] = info->png_len;
    } else {
        if (serve_png_split_grid(png, info->png_len, n, res, res, serve_grid_cols(n),
                                 SERVE_GRID_PAD, pngs, lens) != TDL_OK)
            return openai_fail(code, 500, NULL, "request %s: %s", info->params.id, tdl_error_get());
    }
    json_t *data = json_array();
    json_t *answer = json_pack("{s:I, s:o}", "created", (json_int_t)time(NULL), "data", data);
    for (int i = 0; answer && i < n; i++) {
        char *b64 = malloc(4 * ((lens[i] + 2) / 3) + 1);
        size_t blen = b64 ? serve_base64_encode(pngs[i], lens[i], b64) : 0;
        json_t *img = b64 ? json_pack("{s:o}", "b64_json", json_stringn_nocheck(b64, blen)) : NULL;
        free(b64);
        if (!img || json_array_append_new(data, img) != 0)
            json_decref(answer), answer = NULL;
    }
    if (n > 1)
        for (int i = 0; i < n; i++)
            free(pngs[i]);
    if (!answer)
        return openai_fail(code, 503, NULL, "the server is out of memory: try again later");
    *code = 200;
    return answer;
}

json_t *serve_openai_request(struct MHD_Connection *c, const serve_http_opts_t *o, const char *body,
                             size_t len, bool too_big, serve_request_params_t *params_out,
                             unsigned *code_out)
{
    if (too_big)
        return openai_fail(code_out, 413, NULL, "the body is larger than %zu bytes (--max-body)",
                           o->max_body);
    openai_query_t qa = {""};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, openai_query_arg, &qa);
    if (qa.bad[0])
        return openai_fail(code_out, 400, qa.bad,
                           "unknown query argument '%s' (this endpoint takes none)", qa.bad);
    json_t *root;
    serve_field_error_t err;
    tdl_status_t st = serve_json_load_body(body ? body : "", len, &root, &err);
    if (st != TDL_OK)
        return openai_fail(code_out, st == TDL_ERR_NOMEM ? 503 : 400, NULL, "%s", err.message);
    serve_request_params_t p;
    json_t *fail = json_is_object(root)
                       ? openai_request(root, o, &p, code_out)
                       : openai_fail(code_out, 400, NULL, "the body must be a JSON object, got %s",
                                     serve_json_type_name(root));
    json_decref(root);
    if (!fail)
        *params_out = p;
    return fail;
}

json_t *serve_openai_answer(const char *id, tdl_status_t st, const serve_request_info_t *info,
                            const unsigned char *png, int wait_timeout_ms, unsigned *code_out)
{
    if (st == TDL_ERR_NOT_FOUND)
        return openai_fail(code_out, 500, NULL,
                           "request %s finished and was forgotten before it was read "
                           "(--keep-results 0)",
                           id);
    if (st != TDL_OK)
        return openai_fail(code_out, 500, NULL, "request %s: %s", id, tdl_error_get());
    if (info->state == SERVE_STATE_FAILED)
        return openai_fail(code_out, info->canceled ? 503 : 500, NULL, "request %s: %s", id,
                           info->error);
    if (info->state == SERVE_STATE_CANCELLED)
        return openai_fail(code_out, 409, NULL, "request %s was %s", id, info->error);
    if (info->state != SERVE_STATE_DONE || !png)
        return openai_fail(code_out, 504, NULL,
                           "request %s is not done after %.0f s (--wait-timeout); it goes on: "
                           "GET /v1/images/%s?format=png&wait=1 fetches its PNG grid",
                           id, wait_timeout_ms / 1e3, id);
    return openai_images(info, png, code_out);
}
