/*
 * commands_artifacts: the ringctl subcommands about what a job leaves
 * behind: checkpoints (its committed snapshots, newest first) and trace
 * (the Chrome trace of its profiled steps, written to a file through a
 * temporary name). `ringctl export`, which reads a snapshot from disk
 * without the server, is export.c.
 */
#ifndef RINGCTL_COMMANDS_ARTIFACTS_H
#define RINGCTL_COMMANDS_ARTIFACTS_H

#include "commands.h"

/* Each runs `ringctl checkpoints|trace` (argv[0] is the name, as cmd_fn_t says) and
 * returns a CTL_EXIT_* status; docs/ringctl.md describes them. */
int cmd_run_checkpoints(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_trace(cmd_ctx_t *ctx, int argc, char **argv);

#endif
