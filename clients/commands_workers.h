/*
 * commands_workers: `ringctl worker ...`, the worker channel's keys (issue
 * 22, part C; docs/workers.md): enroll (a one-time join token for
 * `ringworker agent --join-token`), keys (the enrolled keys), add-key (an
 * agent's public key, by hand) and revoke. Each returns a CTL_EXIT_*
 * status.
 */
#ifndef RINGMASTER_CLIENTS_COMMANDS_WORKERS_H
#define RINGMASTER_CLIENTS_COMMANDS_WORKERS_H

#include "commands.h"

int cmd_run_worker(cmd_ctx_t *ctx, int argc, char **argv);

#endif
