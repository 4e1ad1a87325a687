/*
 * report: see report.h.
 */
#include "report.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

/* Longest piece of a non-JSON body quoted in the message. */
#define BODY_QUOTE_CHARS 200

const char *report_reason_phrase(long status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 422: return "Unprocessable Content";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return NULL;
	}
}

/* Appends s to out at *pos, control characters as spaces, runs of blanks
 * collapsed, stopping at max_chars bytes of s. */
static void append_one_line(char *out, size_t outlen, size_t *pos, const char *s, size_t n,
                            size_t max_chars)
{
	bool last_space = *pos > 0 && out[*pos - 1] == ' ';
	size_t taken = 0;
	for (size_t i = 0; i < n && s[i] && taken < max_chars && *pos + 1 < outlen; i++, taken++) {
		unsigned char c = (unsigned char)s[i];
		bool space = c < 0x20 || c == 0x7f || c == ' ';
		if (space && last_space)
			continue;
		out[(*pos)++] = space ? ' ' : (char)c;
		last_space = space;
	}
	out[*pos] = '\0';
}

static void append_str(char *out, size_t outlen, size_t *pos, const char *s)
{
	append_one_line(out, outlen, pos, s, strlen(s), (size_t)-1);
}

static bool is_json_type(const char *content_type)
{
	if (!content_type)
		return false;
	return strncmp(content_type, "application/problem+json", 24) == 0 ||
	       strncmp(content_type, "application/json", 16) == 0;
}

void report_format_http_error(long status, const char *content_type, const char *body,
                              size_t body_bytes, char *out, size_t outlen)
{
	if (outlen == 0)
		return;
	size_t pos = 0;
	out[0] = '\0';

	json_t *problem = NULL;
	if (body && body_bytes > 0 && (is_json_type(content_type) || body[0] == '{'))
		problem = json_loadb(body, body_bytes, 0, NULL);
	const char *title = NULL, *detail = NULL, *pointer = NULL;
	if (json_is_object(problem)) {
		title = json_string_value(json_object_get(problem, "title"));
		detail = json_string_value(json_object_get(problem, "detail"));
		pointer = json_string_value(json_object_get(problem, "pointer"));
	}
	if (!title || !title[0])
		title = report_reason_phrase(status);

	char status_text[32];
	snprintf(status_text, sizeof status_text, "%ld", status);
	append_str(out, outlen, &pos, status_text);
	if (title) {
		append_str(out, outlen, &pos, " ");
		append_str(out, outlen, &pos, title);
	}
	if (detail && detail[0]) {
		append_str(out, outlen, &pos, ": ");
		append_str(out, outlen, &pos, detail);
	} else if (!problem && body && body_bytes > 0) {
		/* Not ours (a proxy?): quote the start of what came back. */
		append_str(out, outlen, &pos, ": ");
		append_one_line(out, outlen, &pos, body, body_bytes, BODY_QUOTE_CHARS);
		while (pos > 0 && out[pos - 1] == ' ')
			out[--pos] = '\0';
	}
	if (pointer && pointer[0]) {
		append_str(out, outlen, &pos, " (at ");
		append_str(out, outlen, &pos, pointer);
		append_str(out, outlen, &pos, ")");
	}
	json_decref(problem);
}
