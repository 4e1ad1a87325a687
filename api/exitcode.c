/*
 * exitcode: exit statuses and failure kinds (see exitcode.h).
 */
#include "exitcode.h"

#include <stddef.h>

typedef struct {
	const char *name;
	const char *phrase;
	bool retryable;
} kind_desc_t;

/* Indexed by rm_failure_t. The phrases of the four kinds that are not
 * retryable appear in job reasons ("... (a job spec error: not retried)"). */
static const kind_desc_t s_kinds[RM_FAILURE_MAX + 1] = {
	[RM_FAILURE_NONE] = {"none", "no failure", true},
	[RM_FAILURE_INTERNAL] = {"internal", "an internal error", true},
	[RM_FAILURE_SPEC] = {"spec", "a job spec error", false},
	[RM_FAILURE_DATA] = {"data", "a data error", false},
	[RM_FAILURE_NOMEM] = {"nomem", "out of memory", false}, /* the same spec, the same size */
	[RM_FAILURE_DIVERGED] = {"diverged", "training diverged", false},
	[RM_FAILURE_COMM] = {"comm", "a collective failed", true},
	[RM_FAILURE_ABORTED] = {"aborted", "stopped on request", true},
	[RM_FAILURE_WATCHDOG] = {"watchdog", "a step took too long", true},
	[RM_FAILURE_SIGNAL] = {"signal", "killed by a signal", true},
	[RM_FAILURE_SPAWN] = {"spawn", "the process could not be started", true},
	[RM_FAILURE_IO] = {"io", "a file could not be written", true},
	[RM_FAILURE_UNKNOWN] = {"unknown", "an unknown exit status", true},
};

rm_failure_t rm_exit_failure(int exit_code, int sig)
{
	if (sig != 0)
		return RM_FAILURE_SIGNAL;
	switch (exit_code) {
	case RM_EXIT_OK: return RM_FAILURE_NONE;
	case RM_EXIT_USAGE: return RM_FAILURE_INTERNAL;
	case RM_EXIT_SPEC: return RM_FAILURE_SPEC;
	case RM_EXIT_DATA: return RM_FAILURE_DATA;
	case RM_EXIT_NOMEM: return RM_FAILURE_NOMEM;
	case RM_EXIT_DIVERGED: return RM_FAILURE_DIVERGED;
	case RM_EXIT_COMM: return RM_FAILURE_COMM;
	case RM_EXIT_ABORTED: return RM_FAILURE_ABORTED;
	case RM_EXIT_WATCHDOG: return RM_FAILURE_WATCHDOG;
	case RM_EXIT_EXEC: return RM_FAILURE_SPAWN;
	default: return RM_FAILURE_UNKNOWN;
	}
}

bool rm_exit_retryable(int exit_code, int sig)
{
	return rm_failure_retryable(rm_exit_failure(exit_code, sig));
}

const char *rm_exit_describe(int exit_code)
{
	return rm_failure_describe(rm_exit_failure(exit_code, 0));
}

bool rm_failure_valid(long long code)
{
	return code >= 0 && code <= RM_FAILURE_MAX;
}

bool rm_failure_retryable(rm_failure_t kind)
{
	return !rm_failure_valid(kind) || s_kinds[kind].retryable;
}

const char *rm_failure_describe(rm_failure_t kind)
{
	return rm_failure_valid(kind) ? s_kinds[kind].phrase : s_kinds[RM_FAILURE_UNKNOWN].phrase;
}

const char *rm_failure_name(rm_failure_t kind)
{
	return rm_failure_valid(kind) ? s_kinds[kind].name : "unknown";
}
