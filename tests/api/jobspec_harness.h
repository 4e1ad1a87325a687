/*
 * jobspec_harness: the small test harness the job spec's unit tests share
 * (test_jobspec.c, test_jobspec_llama.c): CHECK macros that print
 * file:line and let the test go on, s_run with the "N passed, M failed"
 * counts, parsing helpers and the to_json round trip (spec equality:
 * jobspec_equal.h). Header-only (static inline), included once per test binary.
 */
#ifndef RINGMASTER_TESTS_JOBSPEC_HARNESS_H
#define RINGMASTER_TESTS_JOBSPEC_HARNESS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jobspec.h"
#include "jobspec_equal.h"

static int s_n_passed, s_n_failed;
static bool s_test_failed;
static const char *s_test_name;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__,    \
				__LINE__, s_test_name, #cond);                         \
			s_test_failed = true;                                        \
		}                                                                    \
	} while (0)

#define CHECK_STR(a, b)                                                              \
	do {                                                                         \
		const char *a_ = (a), *b_ = (b);                                     \
		if (!a_ || !b_ || strcmp(a_, b_) != 0) {                             \
			fprintf(stderr, "%s:%d: %s: \"%s\" != \"%s\"\n", __FILE__,    \
				__LINE__, s_test_name, a_ ? a_ : "(null)",            \
				b_ ? b_ : "(null)");                                 \
			s_test_failed = true;                                        \
		}                                                                    \
	} while (0)

#define CHECK_CONTAINS(hay, needle)                                                  \
	do {                                                                         \
		if (!strstr((hay), (needle))) {                                      \
			fprintf(stderr, "%s:%d: %s: \"%s\" does not contain \"%s\"\n",  \
				__FILE__, __LINE__, s_test_name, (hay), (needle));    \
			s_test_failed = true;                                        \
		}                                                                    \
	} while (0)

static inline void s_run(const char *name, void (*fn)(void))
{
	s_test_name = name;
	s_test_failed = false;
	fn();
	if (s_test_failed) {
		s_n_failed++;
		fprintf(stderr, "FAIL %s\n", name);
	} else {
		s_n_passed++;
		printf("ok   %s\n", name);
	}
}

#define MINIMAL "{\"data\": {\"train\": \"shards/train_*.bin\"}}"

static inline int s_parse(const char *text, jobspec_t *spec, jobspec_error_t *err)
{
	return jobspec_parse(text, strlen(text), spec, err);
}

/* Set `value_json` at `pointer` ("/train/lr") in the minimal document (the
 * section is created when missing) and parse the result. */
static inline int s_parse_with(const char *pointer, const char *value_json, jobspec_t *spec,
			jobspec_error_t *err)
{
	json_t *doc = json_loads(MINIMAL, 0, NULL);
	json_t *value = json_loads(value_json, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	char path[128];
	char *slash;
	int rc;

	if (!doc || !value) {
		fprintf(stderr, "%s: bad test value %s\n", s_test_name, value_json);
		exit(2);
	}
	snprintf(path, sizeof(path), "%s", pointer + 1);
	slash = strchr(path, '/');
	if (slash) {
		*slash = '\0';
		json_t *section = json_object_get(doc, path);
		if (!section) {
			section = json_object();
			json_object_set_new(doc, path, section);
		}
		json_object_set_new(section, slash + 1, value);
	} else {
		json_object_set_new(doc, path, value);
	}
	char *text = json_dumps(doc, JSON_COMPACT);
	rc = jobspec_parse(text, strlen(text), spec, err);
	free(text);
	json_decref(doc);
	return rc;
}

/* parse(dumps(to_json(spec))) == spec, and to_json is stable. */
static inline void s_check_round_trip(const jobspec_t *spec)
{
	json_t *j1 = jobspec_to_json(spec);
	CHECK(j1 != NULL);
	if (!j1)
		return;
	char *text = json_dumps(j1, JSON_COMPACT);
	jobspec_t again = {0};
	jobspec_error_t err = {0};
	int rc = s_parse(text, &again, &err);
	CHECK(rc == 0);
	if (rc != 0)
		fprintf(stderr, "  round trip refused: %s %s\n  %s\n", err.pointer, err.message, text);
	if (rc == 0) {
		CHECK(s_spec_equal(spec, &again));
		json_t *j2 = jobspec_to_json(&again);
		CHECK(json_equal(j1, j2));
		json_decref(j2);
		jobspec_free(&again);
	}
	free(text);
	json_decref(j1);
}

static inline void s_expect_refused(const char *doc, const char *pointer, const char *message)
{
	jobspec_t s;
	jobspec_error_t err;
	int rc = s_parse(doc, &s, &err);
	CHECK(rc == -EINVAL);
	if (rc == 0) {
		fprintf(stderr, "  accepted: %s\n", doc);
		jobspec_free(&s);
		return;
	}
	CHECK_STR(err.pointer, pointer);
	CHECK_CONTAINS(err.message, message);
}

static inline void s_expect_accepted(const char *doc)
{
	jobspec_t s;
	jobspec_error_t err;
	int rc = s_parse(doc, &s, &err);
	CHECK(rc == 0);
	if (rc != 0) {
		fprintf(stderr, "  refused: %s\n  %s %s\n", doc, err.pointer, err.message);
		return;
	}
	s_check_round_trip(&s);
	jobspec_free(&s);
}

#endif
