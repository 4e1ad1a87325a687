/*
 * httpparse: the checks http.c makes on a request's header values before it
 * reads a body, as pure functions of the text the client sent (no
 * connection, no allocation), so that the libFuzzer harness
 * (tests/fuzz/fuzz_http.c) reaches them without a socket.
 */
#ifndef RINGMASTER_COORDINATORD_HTTPPARSE_H
#define RINGMASTER_COORDINATORD_HTTPPARSE_H

#include <stdbool.h>
#include <stddef.h>

/* An Idempotency-Key is 1 to this many printable ASCII bytes. */
#define HTTPPARSE_IDEM_KEY_MAX 255

/* Whether a Content-Type names JSON: application/json in any case,
 * optionally followed by parameters (";charset=utf-8"). NULL: false. */
bool httpparse_json_type(const char *ct);

/* Whether `key` is a usable Idempotency-Key (see above). NULL: false. */
bool httpparse_idem_key(const char *key);

/* A Content-Length within `max_bytes`: 0, or -EFBIG when it is larger or is
 * not a number (the body is then not read). */
int httpparse_content_length(const char *text, size_t max_bytes);

#endif
