/*
 * commands_jobs: the ringctl subcommands about jobs themselves: submit
 * (a spec file or stdin, with an idempotency key; --wait follows the job
 * to its end through commands_follow), jobs and events (paged lists that
 * follow next_cursor with --all; jobs --watch redraws on change), show (one job with its ranks'
 * memory and its spec) and cancel.
 */
#ifndef RINGCTL_COMMANDS_JOBS_H
#define RINGCTL_COMMANDS_JOBS_H

#include "commands.h"

/* Each runs `ringctl submit|jobs|events|show|cancel` (argv[0] is the name, as cmd_fn_t says) and
 * returns a CTL_EXIT_* status; docs/ringctl.md describes them. */
int cmd_run_submit(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_jobs(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_events(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_show(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_cancel(cmd_ctx_t *ctx, int argc, char **argv);

#endif
