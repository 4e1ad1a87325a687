/*
 * libFuzzer harness for the REST request path's handling of untrusted text:
 * the input is one raw HTTP/1.1 request ("METHOD TARGET VERSION", header
 * lines, a blank line, the body), cut here the way libmicrohttpd hands it
 * to http.c, then run through what ringmasterd does with it before a
 * handler: the method's index (metrics.h), the route table's matcher with
 * its {id} segment (routes.h), the job id check (request.h), the header
 * checks on Content-Type, Idempotency-Key and Content-Length (httpparse.h),
 * the problem+json body that echoes the path (problem.h), and a JSON body's
 * parse. Invariants checked (abort otherwise): a matched row has the
 * request's method and its {id} segment lies inside the path, holds no '/'
 * and is copied whole when it fits; an unmatched path gets a valid label;
 * an accepted Idempotency-Key fits request_t.idem_key; every problem body is
 * valid JSON with the status it was given, whatever bytes the path had.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "httpparse.h"
#include "metrics.h"
#include "problem.h"
#include "request.h"
#include "routes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int s_n_labels;

/* A NUL-terminated copy of [p, p+n) (any NUL inside cuts it, as a C string
 * handed over by libmicrohttpd would be). */
static char *dup_n(const char *p, size_t n)
{
	char *s = malloc(n + 1);
	if (!s)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

/* The next line of [*pos, end) without its CRLF or LF; NULL at the end. */
static char *next_line(const char **pos, const char *end)
{
	if (*pos >= end)
		return NULL;
	const char *nl = memchr(*pos, '\n', (size_t)(end - *pos));
	const char *stop = nl ? nl : end;
	size_t n = (size_t)(stop - *pos);
	if (n && (*pos)[n - 1] == '\r')
		n--;
	char *line = dup_n(*pos, n);
	*pos = nl ? nl + 1 : end;
	return line;
}

static void check_route(const char *path, metrics_method_t method)
{
	request_t rq;
	memset(&rq, 0, sizeof rq);
	const route_t *row = route_match(path, method, &rq);
	if (rq.label < 0 || rq.label > s_n_labels || !rq.path)
		abort();
	if (row && row->method != method)
		abort();
	if (rq.seg) {
		size_t len = strlen(path);
		if (rq.seg < path || rq.seg + rq.seg_len > path + len || rq.seg_len == 0 ||
		    memchr(rq.seg, '/', rq.seg_len))
			abort();
		if (rq.seg_len < sizeof rq.id && (strlen(rq.id) != rq.seg_len || memcmp(rq.id, rq.seg, rq.seg_len)))
			abort();
	}
	if (strlen(rq.id) >= sizeof rq.id)
		abort();
	(void)request_plausible_id(rq.id);
	if (!row && !rq.allow && rq.seg)
		abort(); /* a 404 names no segment */
}

static void check_problem(int status, const char *detail, const char *pointer)
{
	size_t len;
	char *body = problem_dumps(status, detail, pointer, &len);
	if (!body)
		abort();
	json_error_t err;
	json_t *doc = json_loadb(body, len, 0, &err);
	if (!doc || json_integer_value(json_object_get(doc, "status")) != status ||
	    !json_is_string(json_object_get(doc, "detail")))
		abort();
	json_decref(doc);
	free(body);
}

static void check_header(const char *name, const char *value, bool *json_body)
{
	if (strcasecmp(name, "Content-Type") == 0) {
		*json_body = httpparse_json_type(value);
	} else if (strcasecmp(name, "Idempotency-Key") == 0) {
		if (httpparse_idem_key(value) && strlen(value) > REQUEST_IDEM_KEY_MAX)
			abort();
	} else if (strcasecmp(name, "Content-Length") == 0) {
		(void)httpparse_content_length(value, 1 << 20);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!s_n_labels)
		route_init(&s_n_labels);
	const char *pos = (const char *)data, *end = pos + size;
	char *line = next_line(&pos, end);
	if (!line)
		return 0;
	/* METHOD SP TARGET [SP VERSION]; TARGET = PATH [? QUERY] */
	char *sp = strchr(line, ' ');
	char *target = sp ? sp + 1 : line + strlen(line);
	if (sp)
		*sp = '\0';
	char *sp2 = strchr(target, ' ');
	if (sp2)
		*sp2 = '\0';
	char *query = strchr(target, '?');
	if (query)
		*query++ = '\0';
	metrics_method_t method = metrics_method_index(line);
	if ((unsigned)method >= METRICS_N_METHODS)
		abort();
	check_route(target, method);
	check_problem(404, target, query);
	check_problem(414, query ? query : "", NULL);

	bool json_body = false;
	char *h;
	while ((h = next_line(&pos, end)) != NULL) {
		bool blank = h[0] == '\0';
		char *colon = strchr(h, ':');
		if (colon) {
			*colon = '\0';
			char *v = colon + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			check_header(h, v, &json_body);
			check_problem(400, v, h);
		}
		free(h);
		if (blank)
			break;
	}
	if (json_body) {
		json_error_t err;
		json_decref(json_loadb(pos, (size_t)(end - pos), 0, &err));
	}
	free(line);
	return 0;
}
