/*
 * problem: RFC 9457 problem+json rendering (see problem.h).
 */
#include "problem.h"

#include <string.h>

const char *problem_title(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 421: return "Misdirected Request";
	case 422: return "Unprocessable Content";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "Error";
	}
}

void problem_render(sbuf_t *out, int status, const char *detail, const char *pointer)
{
	sbuf_puts(out, "{\"type\":\"about:blank\",\"title\":");
	const char *title = problem_title(status);
	sbuf_json_string(out, title, strlen(title));
	sbuf_printf(out, ",\"status\":%d,\"detail\":", status);
	sbuf_json_string(out, detail, strlen(detail));
	if (pointer) {
		sbuf_puts(out, ",\"pointer\":");
		sbuf_json_string(out, pointer, strlen(pointer));
	}
	sbuf_putc(out, '}');
}

char *problem_dumps(int status, const char *detail, const char *pointer, size_t *ret_len)
{
	sbuf_t b = {0};
	problem_render(&b, status, detail, pointer);
	if (b.failed) {
		sbuf_free(&b);
		return NULL;
	}
	return sbuf_steal(&b, ret_len);
}
