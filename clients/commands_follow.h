/*
 * commands_follow: the ringctl subcommands that follow a job while it runs:
 * logs (its ranks' output lines, GET /v1/jobs/{id}/logs, -f polling with
 * since= until the job ends) and wait (until the job ends, the exit status
 * telling how it ended), and cmd_follow_job(), which both of them and
 * `submit --wait` use: poll the job's state, print what is new (log lines or
 * metrics rows), stop when the job is final and nothing more comes.
 */
#ifndef RINGCTL_COMMANDS_FOLLOW_H
#define RINGCTL_COMMANDS_FOLLOW_H

#include <stdbool.h>

#include "commands.h"

/* What cmd_follow_job() prints while it waits. */
typedef enum {
	FOLLOW_NOTHING = 0,
	FOLLOW_LOGS,
	FOLLOW_METRICS,
} cmd_follow_what_t;

typedef struct {
	cmd_follow_what_t what;
	bool follow;      /* keep going until the job is final; false: print what is there, once */
	long rank;        /* logs: only this rank, when has_rank */
	bool has_rank;
	long attempt;     /* logs: only this attempt; 0: all */
	long tail;        /* logs: start with the last N lines; 0: all */
	double timeout_s; /* give up after this long; 0: never */
} cmd_follow_opts_t;

/* Interval between two polls of a followed job, in microseconds. */
#define FOLLOW_POLL_INTERVAL_US 500000

/*
 * Follows job id as o says. Returns CTL_EXIT_OK once the job is final (its
 * state copied into ret_state, "" when o->follow is false) and everything
 * there is has been printed, CTL_EXIT_TIMEOUT when o->timeout_s passed
 * first, or the status of a failed request (its error printed).
 */
int cmd_follow_job(cmd_ctx_t *ctx, const char *id, const cmd_follow_opts_t *o, char *ret_state,
                   size_t state_len);

/*
 * After cmd_follow_job() saw job id end in state: prints on stderr how it
 * ended when it did not succeed (its state_reason, else its last event's
 * reason) and returns the exit status of `wait`: CTL_EXIT_OK for succeeded,
 * CTL_EXIT_JOB_FAILED, CTL_EXIT_JOB_CANCELLED.
 */
int cmd_job_end_status(cmd_ctx_t *ctx, const char *id, const char *state);

/* Run `ringctl logs|wait` (argv[0] is the name, as cmd_fn_t says) and return
 * a CTL_EXIT_* status; docs/ringctl.md describes them. */
int cmd_run_logs(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_wait(cmd_ctx_t *ctx, int argc, char **argv);

#endif
