/*
 * check: the one assertion of the small C unit tests. CHECK(cond, fmt, ...)
 * prints file:line, the condition and a message when cond is false, counts
 * the failure in `failures`, and lets the test go on; main() returns
 * failures != 0. Include it in the test's .c file only (it defines the
 * counter).
 */
#ifndef RINGMASTER_TESTS_CHECK_H
#define RINGMASTER_TESTS_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			failures++;                                                        \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                      \
			fputc('\n', stderr);                                               \
		}                                                                          \
	} while (0)

#endif
