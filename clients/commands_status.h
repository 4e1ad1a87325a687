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

/*
 * One page of GET base_path?since_step=*since (base_path: a job's
 * /metrics): prints its rows (the table header first when *header_done is
 * false, then sets it; a line of JSON per row with --json) and moves *since
 * past the last one. *ret_more tells whether the server has more rows
 * already. Returns a CTL_EXIT_* status (the error printed).
 */
int cmd_metrics_page(cmd_ctx_t *ctx, const char *base_path, long long *since, bool *header_done,
                     bool *ret_more);

#endif
