/*
 * exitcode: the exit statuses of a rank process and what a failure means,
 * one contract for the worker (which exits with them and reports them) and
 * the coordinator (which decides from them whether a restart can help).
 *
 * A rank process (`ringworker rank`, `ringworker train`) ends with one of
 * the RM_EXIT_* statuses (docs/training.md "Errors and exit status"); its
 * agent may add its own (RM_EXIT_EXEC when the program could not be run).
 * What went wrong travels on the wire as an rm_failure_t code (FAILED,
 * RANK_EXITED and SNAPSHOT_FAILED carry it as `failure`, see wire.h), never
 * as text to search. A peer that sends no code is judged by its exit status
 * (rm_exit_failure) as before.
 *
 * Retryable means a restart of the job's ranks may succeed: a lost peer, a
 * signal, a timeout. A bad spec, bad data, a model that does not fit in
 * memory or a diverged loss fail the same way again, so the job fails at
 * once (a restart would only be killed again: issue 22).
 */
#ifndef RINGMASTER_API_EXITCODE_H
#define RINGMASTER_API_EXITCODE_H

#include <stdbool.h>

/* Exit statuses of a rank process and of `ringworker train` (numerically
 * fixed: they cross processes). */
enum {
	RM_EXIT_OK = 0,
	RM_EXIT_USAGE = 1,    /* bad command line, or an internal error */
	RM_EXIT_SPEC = 2,     /* the job spec is unreadable or invalid */
	RM_EXIT_DATA = 3,     /* a data file is missing, short, corrupt or out of vocabulary */
	RM_EXIT_NOMEM = 4,    /* the model, batch or data does not fit in memory */
	RM_EXIT_DIVERGED = 5, /* the loss became NaN or infinite */
	RM_EXIT_COMM = 6,     /* a collective failed (a peer died or timed out) */
	RM_EXIT_ABORTED = 7,  /* stopped on request (ABORT, or on_step asked to stop) */
	RM_EXIT_WATCHDOG = 8, /* the step-time watchdog ended the rank */
	RM_EXIT_EXEC = 127,   /* the agent could not run the rank's program */
};

/* What kind of failure ended (or hurt) a rank: the `failure` code on the
 * wire. Values are fixed (they cross process boundaries); new kinds are
 * added at the end, and a receiver treats a value it does not know like a
 * message without one. */
typedef enum {
	RM_FAILURE_NONE = 0,     /* no failure (exit status 0) */
	RM_FAILURE_INTERNAL = 1, /* usage or internal error (RM_EXIT_USAGE) */
	RM_FAILURE_SPEC = 2,     /* the job spec (RM_EXIT_SPEC): not retryable */
	RM_FAILURE_DATA = 3,     /* the data (RM_EXIT_DATA): not retryable */
	RM_FAILURE_NOMEM = 4,    /* out of memory (RM_EXIT_NOMEM) */
	RM_FAILURE_DIVERGED = 5, /* the loss diverged (RM_EXIT_DIVERGED): not retryable */
	RM_FAILURE_COMM = 6,     /* a collective failed (RM_EXIT_COMM) */
	RM_FAILURE_ABORTED = 7,  /* stopped on request (RM_EXIT_ABORTED) */
	RM_FAILURE_WATCHDOG = 8, /* a step took too long (RM_EXIT_WATCHDOG) */
	RM_FAILURE_SIGNAL = 9,   /* killed by a signal */
	RM_FAILURE_SPAWN = 10,   /* the process could not be started (RM_EXIT_EXEC, a bad device) */
	RM_FAILURE_IO = 11,      /* a file could not be written (a snapshot shard) */
	RM_FAILURE_UNKNOWN = 12, /* any other exit status */
} rm_failure_t;

#define RM_FAILURE_MAX RM_FAILURE_UNKNOWN /* the highest rm_failure_t */

/* The failure an exit status means: `sig` != 0 (killed by that signal) is
 * RM_FAILURE_SIGNAL; 0 is RM_FAILURE_NONE; RM_EXIT_* statuses map to their
 * kind; anything else is RM_FAILURE_UNKNOWN. */
rm_failure_t rm_exit_failure(int exit_code, int sig);

/* Whether a restart may help after exit status `exit_code` (signal `sig`):
 * false only for RM_EXIT_SPEC, RM_EXIT_DATA and RM_EXIT_DIVERGED. */
bool rm_exit_retryable(int exit_code, int sig);

/* What exit status `exit_code` means, as a phrase ("a job spec error");
 * a static string, never NULL. */
const char *rm_exit_describe(int exit_code);

/* Whether `code` (as received) is an rm_failure_t this build knows. */
bool rm_failure_valid(long long code);

/* Whether a restart may help after a failure of kind `kind` (unknown kinds
 * are retryable, as an unknown exit status is). */
bool rm_failure_retryable(rm_failure_t kind);

/* The kind as a phrase for reasons and logs ("a job spec error", "a data
 * error", "training diverged", ...); a static string, never NULL. */
const char *rm_failure_describe(rm_failure_t kind);

/* The kind's short name ("spec", "comm", ...); "unknown" out of range. */
const char *rm_failure_name(rm_failure_t kind);

#endif
