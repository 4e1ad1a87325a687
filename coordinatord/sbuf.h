/*
 * sbuf: a growable byte buffer for building response bodies.
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
/* Append a Unix-epoch microsecond time as RFC 3339 UTC with microseconds,
 * quoted ("2025-01-02T03:04:05.000006Z"). */
void sbuf_json_time(sbuf_t *b, long long at_us);
/* Append a number with enough digits to read back the same double
 * (%.17g); NaN and infinities, which JSON cannot carry, append null. */
void sbuf_json_real(sbuf_t *b, double v);
/* Take the contents (malloc'ed, NUL-terminated) and leave the buffer empty.
 * Returns NULL if the buffer failed or is empty-and-unallocated. */
char *sbuf_steal(sbuf_t *b, size_t *ret_len);

#endif
