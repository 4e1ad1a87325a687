/*
 * sbuf: a growable byte buffer for building response bodies.
 *
 * REST JSON is built with jansson (jobview.h); sbuf_json_string remains for
 * the two writers that stay by hand: problem documents (problem.h: a detail
 * may echo bytes that are not UTF-8) and the Chrome trace (traces.c).
 *
 * HTTP threads keep one sbuf per thread and reuse it for every request, so the
 * hot GET path allocates only when a body is larger than any before it. The
 * contents are always NUL-terminated so they can be handed to printf-like
 * consumers; `len` excludes the terminator.
 */
#ifndef RINGMASTER_COORDINATORD_SBUF_H
#define RINGMASTER_COORDINATORD_SBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
	char *data;   /* owned; NULL until the first append */
	size_t len;   /* bytes used, excluding the NUL */
	size_t cap;   /* bytes allocated */
	bool failed;  /* an allocation failed: contents are incomplete */
} sbuf_t;

/* Empty the buffer, keeping its memory. */
void sbuf_reset(sbuf_t *b);
/* Release the memory; the buffer may be reused afterwards. */
void sbuf_free(sbuf_t *b);
/* Append bytes / a C string / formatted text. On allocation failure set
 * b->failed and leave the buffer unchanged; later appends are ignored. */
void sbuf_append(sbuf_t *b, const void *data, size_t n);
void sbuf_puts(sbuf_t *b, const char *s);
void sbuf_putc(sbuf_t *b, char c);
void sbuf_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append `s` (n bytes of UTF-8) as a quoted JSON string; NULL appends null. */
void sbuf_json_string(sbuf_t *b, const char *s, size_t n);
/* Take the contents (malloc'ed, NUL-terminated) and leave the buffer empty.
 * Returns NULL if the buffer failed or is empty-and-unallocated. */
char *sbuf_steal(sbuf_t *b, size_t *ret_len);

#endif
