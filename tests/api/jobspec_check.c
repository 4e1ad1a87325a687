/*
 * jobspec_check [--dump] FILE...: run each file through jobspec_load_file
 * and print one line per file, "ok" or "error <pointer> <message>" (pointer
 * "" is shown as ""). With --dump, an accepted spec is printed instead as
 * "ok " followed by jobspec_to_json's output on one line. Exit status 0 when
 * every file is accepted, 1 otherwise. Used by check_schema_agreement.py to
 * compare the C validator with the JSON schema.
 */
#include "jobspec.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	int status = 0, first = 1;
	bool dump = false;

	if (argc > 1 && strcmp(argv[1], "--dump") == 0) {
		dump = true;
		first = 2;
	}
	if (argc <= first) {
		fprintf(stderr, "usage: %s [--dump] FILE...\n", argv[0]);
		return 2;
	}
	for (int i = first; i < argc; i++) {
		jobspec_t spec;
		jobspec_error_t err;
		if (jobspec_load_file(argv[i], &spec, &err) == 0) {
			char *text = NULL;
			if (dump) {
				json_t *j = jobspec_to_json(&spec);
				text = j ? json_dumps(j, JSON_COMPACT) : NULL;
				json_decref(j);
			}
			printf("ok%s%s\n", text ? " " : "", text ? text : "");
			free(text);
			jobspec_free(&spec);
		} else {
			printf("error %s %s\n", err.pointer[0] ? err.pointer : "\"\"", err.message);
			status = 1;
		}
	}
	return status;
}
