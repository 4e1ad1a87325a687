/*
 * sbuf: growable byte buffer (see sbuf.h). Grows by doubling; JSON string
 * escaping and RFC 3339 timestamps live here because every response body
 * built by hand needs them.
 */
#include "sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(sbuf_t *b, size_t extra)
{
	if (b->failed)
		return false;
	if (b->len + extra + 1 <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1) {
		if (cap > ((size_t)-1) / 2) {
			b->failed = true;
			return false;
		}
		cap *= 2;
	}
	char *p = realloc(b->data, cap);
	if (!p) {
		b->failed = true;
		return false;
	}
	b->data = p;
	b->cap = cap;
	return true;
}

void sbuf_reset(sbuf_t *b)
{
	b->len = 0;
	b->failed = false;
	if (b->data)
		b->data[0] = '\0';
}

void sbuf_free(sbuf_t *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->failed = false;
}

void sbuf_append(sbuf_t *b, const void *data, size_t n)
{
	if (!reserve(b, n))
		return;
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void sbuf_puts(sbuf_t *b, const char *s)
{
	sbuf_append(b, s, strlen(s));
}

void sbuf_putc(sbuf_t *b, char c)
{
	if (!reserve(b, 1))
		return;
	b->data[b->len++] = c;
	b->data[b->len] = '\0';
}

void sbuf_printf(sbuf_t *b, const char *fmt, ...)
{
	va_list ap;
	char small[256];
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->failed = true;
		return;
	}
	if ((size_t)n < sizeof small) {
		sbuf_append(b, small, (size_t)n);
		return;
	}
	if (!reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF), or 0 when p does not start one. */
static size_t utf8_valid_len(const unsigned char *p, size_t n)
{
	unsigned c = p[0];
	size_t len;
	unsigned lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if (p[k] < 0x80 || p[k] > 0xbf)
			return 0;
	return len;
}

void sbuf_json_string(sbuf_t *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	if (!s) {
		sbuf_append(b, "null", 4);
		return;
	}
	/* worst case: every byte becomes \u00XX */
	if (!reserve(b, n * 6 + 2))
		return;
	char *o = b->data + b->len;
	*o++ = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c >= 0x80) {
			size_t len = utf8_valid_len((const unsigned char *)s + i, n - i);
			if (len == 0) { /* not UTF-8: U+FFFD keeps the document valid */
				memcpy(o, "\\ufffd", 6);
				o += 6;
			} else {
				memcpy(o, s + i, len);
				o += len;
				i += len - 1;
			}
		} else if (c >= 0x20) {
			*o++ = (char)c;
		} else if (c == '\n') {
			*o++ = '\\';
			*o++ = 'n';
		} else if (c == '\t') {
			*o++ = '\\';
			*o++ = 't';
		} else if (c == '\r') {
			*o++ = '\\';
			*o++ = 'r';
		} else {
			*o++ = '\\';
			*o++ = 'u';
			*o++ = '0';
			*o++ = '0';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o++ = '"';
	b->len = (size_t)(o - b->data);
	b->data[b->len] = '\0';
}

char *sbuf_steal(sbuf_t *b, size_t *ret_len)
{
	if (b->failed || !b->data) {
		sbuf_free(b);
		return NULL;
	}
	char *p = b->data;
	if (ret_len)
		*ret_len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}
