/* What the files of src/serve share and other modules do not use: the rules of request ids, which
 * the request validator (request.c) and the HTTP server's paths (http.c) both apply. */
#ifndef TIDAL_SERVE_INTERNAL_H
#define TIDAL_SERVE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

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

#endif /* TIDAL_SERVE_INTERNAL_H */
