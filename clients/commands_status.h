/*
 * commands_status: the ringctl subcommands that watch the cluster and its
 * training: workers (the nodes the coordinator knows) and metrics (a job's
 * per-step training metrics; --follow polls until the job ends and exits
 * 0 only if it succeeded).
 */
#ifndef RINGCTL_COMMANDS_STATUS_H
#define RINGCTL_COMMANDS_STATUS_H

#include "commands.h"

/* Each runs `ringctl workers|metrics` (argv[0] is the name, as cmd_fn_t says) and
 * returns a CTL_EXIT_* status; docs/ringctl.md describes them. */
int cmd_run_workers(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_metrics(cmd_ctx_t *ctx, int argc, char **argv);

#endif
