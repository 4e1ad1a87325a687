/*
 * report: turns an HTTP error answer from the coordinator into the one line
 * ringctl prints on stderr, e.g.
 *   400 Bad Request: model.n_head must divide model.n_embd (at /model/n_head)
 * The server's errors are application/problem+json (RFC 9457) with `title`,
 * `detail` and, for a bad field, `pointer`; anything else (a proxy's HTML
 * page, an empty body) still gives a useful line.
 */
#ifndef RINGCTL_REPORT_H
#define RINGCTL_REPORT_H

#include <stddef.h>

/* The standard reason phrase for an HTTP status, or NULL if unknown. */
const char *report_reason_phrase(long status);

/*
 * Writes the one-line description of an error answer into out (always
 * NUL-terminated, cut to outlen - 1 bytes). content_type may be NULL; body
 * need not be NUL-terminated. Control characters and newlines in the server's
 * text become spaces so that the result is exactly one line.
 */
void report_format_http_error(long status, const char *content_type, const char *body,
                              size_t body_bytes, char *out, size_t outlen);

#endif
