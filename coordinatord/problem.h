/*
 * problem: RFC 9457 "problem details" bodies (application/problem+json).
 *
 * Every error the REST API returns is one of these: {"type", "title",
 * "status", "detail"} plus "pointer", the JSON pointer (RFC 6901) of the
 * request field at fault, when one is. The title is fixed per status; the
 * detail says what was wrong and what to do.
 *
 * Written with sbuf's JSON string writer, not jansson: a detail may echo
 * request bytes (a URL, a query value) that are not valid UTF-8, which
 * jansson refuses and sbuf_json_string replaces with U+FFFD.
 */
#ifndef RINGMASTER_COORDINATORD_PROBLEM_H
#define RINGMASTER_COORDINATORD_PROBLEM_H

#include <stddef.h>

#include "sbuf.h"

#define PROBLEM_CONTENT_TYPE "application/problem+json"

/* The standard reason phrase for an HTTP status ("Not Found"); "Error" for
 * codes it does not know. Returns a static string. */
const char *problem_title(int status);

/* Append the problem document to `out`. `detail` is required; `pointer` may be
 * NULL (no field at fault). Strings are escaped as JSON. */
void problem_render(sbuf_t *out, int status, const char *detail, const char *pointer);

/* The same document as a malloc'ed NUL-terminated string of *ret_len bytes;
 * NULL when out of memory. */
char *problem_dumps(int status, const char *detail, const char *pointer, size_t *ret_len);

#endif
