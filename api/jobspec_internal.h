/*
 * jobspec_internal: what the job spec's source files share, and nothing
 * outside api/jobspec*.c includes: one-sentence errors with the field's
 * JSON pointer, and the readers of one field of each kind (integer, real,
 * string, enum, a section with its allowed keys). jobspec.c reads the
 * document; jobspec_model.c the model section (GPT-2 and Llama, the
 * presets) and the Llama rules. The helpers are S_SHARED so that both
 * parts keep the short names they had when the spec was one file.
 */
#ifndef RINGMASTER_API_JOBSPEC_INTERNAL_H
#define RINGMASTER_API_JOBSPEC_INTERNAL_H

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jobspec.h"

/* Each part uses some of the helpers: static, not inline (inlined
 * into every caller, GCC 12 loses track of which paths set the outputs and
 * warns "may be used uninitialized"), and unused ones are no error. */
#define S_SHARED static __attribute__((unused))

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

#define TRY(expr)                      \
	do {                           \
		int rc_ = (expr);      \
		if (rc_ < 0)           \
			return rc_;    \
	} while (0)

/* ---- error reporting ---- */

__attribute__((format(printf, 3, 4)))
S_SHARED int s_fail(jobspec_error_t *err, const char *pointer, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		snprintf(err->pointer, sizeof(err->pointer), "%s", pointer);
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

S_SHARED int s_fail_oom(jobspec_error_t *err)
{
	if (err) {
		err->pointer[0] = '\0';
		snprintf(err->message, sizeof(err->message), "out of memory while reading the job spec");
	}
	return -ENOMEM;
}

/* "model.n_head" and "/model/n_head" for a key of a section (NULL: top level). */
typedef struct {
	char dotted[64];
	char pointer[64];
} s_field_name_t;

S_SHARED s_field_name_t s_field(const char *section, const char *key)
{
	s_field_name_t f;
	if (section) {
		snprintf(f.dotted, sizeof(f.dotted), "%s.%s", section, key);
		snprintf(f.pointer, sizeof(f.pointer), "/%s/%s", section, key);
		for (char *c = f.dotted; *c; c++) /* "model/rope_scaling": a nested section */
			if (*c == '/')
				*c = '.';
	} else {
		snprintf(f.dotted, sizeof(f.dotted), "%s", key);
		snprintf(f.pointer, sizeof(f.pointer), "/%s", key);
	}
	return f;
}

/* Shortest "%g" form that reads back as the same double. */
S_SHARED void s_format_real(double v, char *buf, size_t size)
{
	if (v == floor(v) && fabs(v) < 1e15) {
		snprintf(buf, size, "%.0f", v);
		return;
	}
	for (int prec = 6; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* Copy at most `max` bytes of `s` without cutting a UTF-8 sequence, with
 * "..." appended when shortened. */
S_SHARED void s_excerpt(const char *s, size_t len, char *buf, size_t size, size_t max)
{
	size_t n = len;
	bool cut = false;
	if (max + 4 > size)
		max = size - 4;
	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
		cut = true;
	}
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i]; /* keep messages on one line */
	if (cut) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
}

/* What a value is, for "(got ...)" in messages. */
S_SHARED void s_describe(const json_t *v, char *buf, size_t size)
{
	char tmp[48];
	switch (json_typeof(v)) {
	case JSON_OBJECT: snprintf(buf, size, "an object"); break;
	case JSON_ARRAY: snprintf(buf, size, "an array"); break;
	case JSON_TRUE: snprintf(buf, size, "true"); break;
	case JSON_FALSE: snprintf(buf, size, "false"); break;
	case JSON_NULL: snprintf(buf, size, "null"); break;
	case JSON_INTEGER:
		snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		break;
	case JSON_REAL:
		s_format_real(json_real_value(v), tmp, sizeof(tmp));
		snprintf(buf, size, "%s", tmp);
		break;
	case JSON_STRING:
		s_excerpt(json_string_value(v), json_string_length(v), tmp, sizeof(tmp), 32);
		snprintf(buf, size, "the string \"%s\"", tmp);
		break;
	default: snprintf(buf, size, "an unexpected value"); break;
	}
}

/* ---- field readers: `obj` NULL means the section is absent ---- */

S_SHARED int s_check_keys(const json_t *obj, const char *section, const char *const *allowed,
			jobspec_error_t *err)
{
	const char *key;
	json_t *value;
	json_object_foreach((json_t *)obj, key, value) {
		bool known = false;
		for (const char *const *k = allowed; *k; k++) {
			if (strcmp(*k, key) == 0) {
				known = true;
				break;
			}
		}
		if (known)
			continue;

		char list[256] = "";
		size_t used = 0;
		for (const char *const *k = allowed; *k; k++) {
			int n = snprintf(list + used, sizeof(list) - used, "%s%s",
					 k == allowed ? "" : ", ", *k);
			if (n < 0 || (size_t)n >= sizeof(list) - used)
				break;
			used += (size_t)n;
		}

		/* The pointer names the unknown key itself (RFC 6901 escapes ~
		 * and /); when it would not fit, the enclosing object. */
		char pointer[sizeof(err->pointer)];
		size_t p = (size_t)snprintf(pointer, sizeof(pointer), "%s%s/",
					    section ? "/" : "", section ? section : "");
		const size_t key_len = strlen(key);
		bool fits = true;
		for (size_t i = 0; i < key_len && fits; i++) {
			const char *esc = key[i] == '~' ? "~0" : key[i] == '/' ? "~1" : NULL;
			size_t need = esc ? 2 : 1;
			if (p + need >= sizeof(pointer)) {
				fits = false;
				break;
			}
			if (esc)
				memcpy(pointer + p, esc, 2);
			else
				pointer[p] = key[i];
			p += need;
		}
		pointer[p] = '\0';
		if (!fits)
			snprintf(pointer, sizeof(pointer), "%s%s", section ? "/" : "",
				 section ? section : "");

		char shown[80];
		s_excerpt(key, key_len, shown, sizeof(shown), 64);
		if (section)
			return s_fail(err, pointer,
				      "unknown field \"%s\" in %s; allowed fields: %s", shown,
				      section, list);
		return s_fail(err, pointer,
			      "unknown field \"%s\" at the top level; allowed fields: %s", shown,
			      list);
	}
	return 0;
}

S_SHARED int s_get_section(const json_t *doc, const char *section, const char *const *allowed,
			 const json_t **ret, jobspec_error_t *err)
{
	const json_t *obj = json_object_get(doc, section);
	if (!obj) {
		*ret = NULL;
		return 0;
	}
	if (!json_is_object(obj)) {
		char got[64];
		char pointer[32];
		s_describe(obj, got, sizeof(got));
		snprintf(pointer, sizeof(pointer), "/%s", section);
		return s_fail(err, pointer, "%s must be an object (got %s)", section, got);
	}
	int rc = s_check_keys(obj, section, allowed, err);
	if (rc < 0)
		return rc;
	*ret = obj;
	return 0;
}

S_SHARED int s_get_int(const json_t *obj, const char *section, const char *key, int64_t lo,
		     int64_t hi, int64_t def, int64_t *ret, jobspec_error_t *err)
{
	const json_t *v = obj ? json_object_get(obj, key) : NULL;
	if (!v) {
		*ret = def;
		return 0;
	}
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);
		if (x >= lo && x <= hi) {
			*ret = x;
			return 0;
		}
	}
	char got[64];
	s_describe(v, got, sizeof(got));
	s_field_name_t f = s_field(section, key);
	return s_fail(err, f.pointer, "%s must be an integer between %" PRId64 " and %" PRId64
		      " (got %s%s)", f.dotted, lo, hi, got,
		      json_is_real(v) ? ", a real number; write integers without a fraction or exponent" : "");
}

/* A real in [lo, hi], or (lo, hi] when lo_exclusive. */
S_SHARED int s_get_real(const json_t *obj, const char *section, const char *key, double lo,
		      bool lo_exclusive, double hi, double def, double *ret, jobspec_error_t *err)
{
	const json_t *v = obj ? json_object_get(obj, key) : NULL;
	if (!v) {
		*ret = def;
		return 0;
	}
	if (json_is_number(v)) {
		double x = json_number_value(v);
		if ((lo_exclusive ? x > lo : x >= lo) && x <= hi) {
			*ret = x;
			return 0;
		}
	}
	char got[64], lo_s[32], hi_s[32];
	s_describe(v, got, sizeof(got));
	s_format_real(lo, lo_s, sizeof(lo_s));
	s_format_real(hi, hi_s, sizeof(hi_s));
	s_field_name_t f = s_field(section, key);
	if (lo_exclusive)
		return s_fail(err, f.pointer,
			      "%s must be a number greater than %s and at most %s (got %s)",
			      f.dotted, lo_s, hi_s, got);
	return s_fail(err, f.pointer, "%s must be a number between %s and %s (got %s)",
		      f.dotted, lo_s, hi_s, got);
}

/* A string of 1..max_bytes bytes; *ret borrowed from `obj`, NULL when absent
 * (or null when `nullable`). `required`: NULL when the field may be absent,
 * else what the field is, for the "is required" message. */
S_SHARED int s_get_string(const json_t *obj, const char *section, const char *key,
			size_t max_bytes, const char *required, bool nullable, const char **ret,
			jobspec_error_t *err)
{
	const json_t *v = obj ? json_object_get(obj, key) : NULL;
	s_field_name_t f = s_field(section, key);
	if (!v || (nullable && json_is_null(v))) {
		if (required)
			return s_fail(err, f.pointer, "%s is required: %s (a string of 1 to %zu bytes)",
				      f.dotted, required, max_bytes);
		*ret = NULL;
		return 0;
	}
	char got[64];
	if (json_is_string(v)) {
		size_t len = json_string_length(v);
		if (memchr(json_string_value(v), '\0', len))
			return s_fail(err, f.pointer, "%s must not contain NUL bytes", f.dotted);
		if (len >= 1 && len <= max_bytes) {
			*ret = json_string_value(v);
			return 0;
		}
		if (len == 0)
			snprintf(got, sizeof(got), "an empty string");
		else
			snprintf(got, sizeof(got), "%zu bytes", len);
	} else {
		s_describe(v, got, sizeof(got));
	}
	return s_fail(err, f.pointer, "%s must be %sa string of 1 to %zu bytes (got %s)",
		      f.dotted, nullable ? "null or " : "", max_bytes, got);
}

S_SHARED int s_get_enum(const json_t *obj, const char *section, const char *key,
		      const char *const *names, size_t n_names, int def, int *ret,
		      jobspec_error_t *err)
{
	const json_t *v = obj ? json_object_get(obj, key) : NULL;
	if (!v) {
		*ret = def;
		return 0;
	}
	if (json_is_string(v)) {
		for (size_t i = 0; i < n_names; i++) {
			if (strcmp(json_string_value(v), names[i]) == 0 &&
			    json_string_length(v) == strlen(names[i])) {
				*ret = (int)i;
				return 0;
			}
		}
	}
	char list[128] = "";
	size_t used = 0;
	for (size_t i = 0; i < n_names; i++) {
		int n = snprintf(list + used, sizeof(list) - used, "%s\"%s\"", i ? ", " : "",
				 names[i]);
		if (n < 0 || (size_t)n >= sizeof(list) - used)
			break;
		used += (size_t)n;
	}
	char got[64];
	s_describe(v, got, sizeof(got));
	s_field_name_t f = s_field(section, key);
	if (n_names == 1)
		return s_fail(err, f.pointer, "%s must be %s (got %s)", f.dotted, list, got);
	return s_fail(err, f.pointer, "%s must be one of %s (got %s)", f.dotted, list, got);
}

/* Whether the document has section.key. */
S_SHARED bool s_has(const json_t *doc, const char *section, const char *key)
{
	const json_t *obj = json_object_get(doc, section);
	return obj && json_object_get(obj, key);
}

/* jobspec_model.c: the model section. Reads and range-checks it (GPT-2 or
 * Llama, a preset's shape under explicit fields) into s->model; 0 or
 * -EINVAL with err filled. `format` is data.format, read before. */
int jobspec_model_read(const json_t *doc, jobspec_t *s, jobspec_error_t *err);

/* The rules that tie model fields together (n_embd % n_head, Llama's
 * n_head % n_kv_head, head dim, RoPE scaling, vocab_size per data.format);
 * every field is already in range. 0 or -EINVAL. */
int jobspec_model_check(const json_t *doc, const jobspec_t *s, jobspec_error_t *err);

/* Fill the model object `model` (borrowed, empty) with every field of the
 * spec's arch: GPT-2's six, Llama's all. 0, or nonzero on out-of-memory. */
int jobspec_model_to_json(const jobspec_t *s, json_t *model);

#endif
