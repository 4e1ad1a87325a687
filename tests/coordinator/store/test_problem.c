/*
 * test_problem: problem+json rendering (RFC 9457) and the JSON string escaping
 * under it: the body parses, carries type, title, status, detail and pointer,
 * and stays valid JSON (valid UTF-8) whatever bytes the detail holds.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "problem.h"
#include "sbuf.h"
#include "check.h"

/* Render, parse back with jansson (which rejects invalid UTF-8), return the object. */
static json_t *render(int status, const char *detail, const char *pointer)
{
	sbuf_t b = {0};
	problem_render(&b, status, detail, pointer);
	CHECK(!b.failed && b.data, "render failed");
	json_error_t e;
	json_t *j = json_loads(b.data ? b.data : "", 0, &e);
	CHECK(j != NULL, "not JSON (%s): %s", e.text, b.data ? b.data : "");
	sbuf_free(&b);
	return j;
}

int main(void)
{
	json_t *j = render(400, "model.n_embd (100) must be divisible by model.n_head (3)", "/model/n_head");
	if (j) {
		CHECK(json_integer_value(json_object_get(j, "status")) == 400, "status");
		CHECK(strcmp(json_string_value(json_object_get(j, "title")), "Bad Request") == 0, "title");
		CHECK(strcmp(json_string_value(json_object_get(j, "pointer")), "/model/n_head") == 0, "pointer");
		CHECK(strstr(json_string_value(json_object_get(j, "detail")), "n_head") != NULL, "detail");
		CHECK(json_object_get(j, "type") != NULL, "type");
		json_decref(j);
	}
	j = render(404, "no route", NULL);
	if (j) {
		CHECK(json_object_get(j, "pointer") == NULL, "pointer without one");
		CHECK(strcmp(json_string_value(json_object_get(j, "title")), "Not Found") == 0, "title 404");
		json_decref(j);
	}
	static const int statuses[] = {405, 409, 413, 415, 422, 500, 503};
	for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) {
		CHECK(strcmp(problem_title(statuses[i]), "Error") != 0, "status %d has no title", statuses[i]);
	}

	/* Quotes, backslashes, control characters, UTF-8 and invalid UTF-8. */
	const char *nasty = "a\"b\\c\nd\te\x01 f\xc3\xa9 g\xe5\x90\x8d h\xff\xfe i\xc3";
	j = render(400, nasty, "/name");
	if (j) {
		const char *d = json_string_value(json_object_get(j, "detail"));
		const char *want = "a\"b\\c\nd\te\x01 f\xc3\xa9 g\xe5\x90\x8d h\xef\xbf\xbd\xef\xbf\xbd i\xef\xbf\xbd";
		CHECK(d && strcmp(d, want) == 0, "escaped detail: %s", d ? d : "(null)");
		json_decref(j);
	}
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("problem: all checks passed\n");
	return 0;
}
