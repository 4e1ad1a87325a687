/*
 * libFuzzer harness for the job spec parser. Any input must be either refused
 * with a pointer and a message, or accepted; an accepted spec must survive
 * to_json -> text -> parse unchanged. Anything else aborts.
 */
#include "jobspec.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../api/jobspec_equal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_die(const char *what)
{
	fprintf(stderr, "fuzz_jobspec: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	jobspec_t spec, again;
	jobspec_error_t err;
	int rc;

	memset(&err, 0, sizeof(err));
	rc = jobspec_parse((const char *)data, size, &spec, &err);
	if (rc < 0) {
		/* Refusals are well formed: a pointer that is "" or starts with
		 * "/", and a message. */
		if (err.message[0] == '\0')
			s_die("refused without a message");
		if (err.pointer[0] != '\0' && err.pointer[0] != '/')
			s_die("refused with a malformed pointer");
		if (memchr(err.pointer, '\0', sizeof(err.pointer)) == NULL ||
		    memchr(err.message, '\0', sizeof(err.message)) == NULL)
			s_die("error strings not terminated");
		return 0;
	}

	json_t *j1 = jobspec_to_json(&spec);
	if (!j1)
		s_die("to_json failed");
	char *text = json_dumps(j1, JSON_COMPACT);
	if (!text)
		s_die("json_dumps failed");
	rc = jobspec_parse(text, strlen(text), &again, &err);
	if (rc < 0) {
		fprintf(stderr, "%s\n%s %s\n", text, err.pointer, err.message);
		s_die("to_json output refused");
	}
	if (!s_spec_equal(&spec, &again))
		s_die("round trip changed the spec");
	json_t *j2 = jobspec_to_json(&again);
	if (!j2 || !json_equal(j1, j2))
		s_die("round trip changed the JSON");

	json_decref(j2);
	json_decref(j1);
	free(text);
	jobspec_free(&again);
	jobspec_free(&spec);
	return 0;
}
