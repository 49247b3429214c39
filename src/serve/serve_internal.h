/* What the files of src/serve share and other modules do not use: the rules of request ids, which
 * the request validator (request.c) and the HTTP server's paths (http.c) both apply; the JSON
 * helpers of the validator; the OpenAI-compatible endpoint (openai.c) that http.c routes to. */
#ifndef TIDAL_SERVE_INTERNAL_H
#define TIDAL_SERVE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "serve/serve.h"

/* An id is 1 to SERVE_ID_MAX characters of [A-Za-z0-9._-] (s need not end in a NUL). */
bool serve_id_valid(const char *s, size_t len);

/* "." and ".." are made of id characters but are dot-segments: a client that normalizes URLs
 * (RFC 3986, 5.2.4) sends /v1/images/.. as /v1/, so such a request could not be read back. */
bool serve_id_is_dot_segment(const char *s, size_t len);
#define SERVE_ID_DOT_MESSAGE                                                                       \
    "an id may not be '.' or '..' (URL-normalizing clients cannot reach it)"

/* A string from the client (a field name, a method, a path), printable and cut to size - 1
 * characters, for messages. */
void serve_printable(char *dst, size_t size, const char *src);

/* /v1/images/generations is the OpenAI-compatible endpoint (openai.c), so no request may take
 * the id "generations": GET /v1/images/generations could not reach it. */
#define SERVE_OPENAI_PATH_ID "generations"
#define SERVE_OPENAI_PATH_ID_MESSAGE                                                               \
    "an id may not be 'generations' (/v1/images/generations is the OpenAI-compatible endpoint)"

/* ==== JSON, shared by the request validator (request.c) and the OpenAI endpoint (openai.c) ==== */

struct json_t;

/* "an object", "a string", "an integer", ... for messages. */
const char *serve_json_type_name(const struct json_t *v);
/* Parses a request body of len bytes (no NUL needed) as JSON, duplicate keys refused, into
 * *root_out (json_decref it). Empty or not JSON: TDL_ERR_INVALID_ARG with *err naming "body";
 * TDL_ERR_NOMEM: no memory to parse it (a client may try again). */
tdl_status_t serve_json_load_body(const char *text, size_t len, struct json_t **root_out,
                                  serve_field_error_t *err);

/* ==== the OpenAI-compatible images endpoint (openai.c) ======================================== */

struct MHD_Connection;

/* POST /v1/images/generations, as http.c runs it: the body of len bytes (too_big: it went over
 * --max-body and was dropped) and the query of connection c (only read) become the native
 * request *params_out (NULL returned), or the answer to give instead: OpenAI's error object,
 * with its HTTP status in *code_out. */
struct json_t *serve_openai_request(struct MHD_Connection *c, const serve_http_opts_t *opts,
                                    const char *body, size_t len, bool too_big,
                                    serve_request_params_t *params_out, unsigned *code_out);
/* The answer once the request `id` has been waited for (serve_queue_get's status st, *info and
 * the PNG grid of a done one): 200 and {"created", "data": [{"b64_json"}, ...]} with one PNG per
 * image, or the error object (500 failed, 503 failed at shutdown, 409 cancelled, 504 not done
 * after wait_timeout_ms). NULL: no memory for any answer. */
struct json_t *serve_openai_answer(const char *id, tdl_status_t st,
                                   const serve_request_info_t *info, const unsigned char *png,
                                   int wait_timeout_ms, unsigned *code_out);

/* OpenAI's error object, {"error": {"message", "type", "param", "code": null}}: type
 * "invalid_request_error" for a status below 500, "server_error" from 500; param the request
 * field at fault, NULL (JSON null) when no field is. */
struct json_t *serve_openai_error(unsigned code, const char *param, const char *message);

/* The class a prompt names: a name of names[] (num_classes of them, or names NULL: none),
 * ignoring ASCII case and space around it, or "class N" or "N" for N in 0 .. num_classes - 1.
 * Anything else is TDL_ERR_INVALID_ARG with why (why_size bytes) saying so and listing the names
 * and numbers the model takes. */
tdl_status_t serve_openai_label(const char *prompt, const char *const *names, int num_classes,
                                int *label_out, char *why, size_t why_size);

/* Base64 (RFC 4648, with padding) of len bytes into dst, which holds 4 * ((len + 2) / 3) + 1
 * bytes; returns the characters written before the NUL. */
size_t serve_base64_encode(const unsigned char *src, size_t len, char *dst);

#endif /* TIDAL_SERVE_INTERNAL_H */
