/*
 * commands_tokens: `ringctl token create|list|revoke` (the API tokens,
 * admin) and `ringctl dashboard` (the dashboard's address with a one-time
 * login code).
 */
#ifndef RINGCTL_COMMANDS_TOKENS_H
#define RINGCTL_COMMANDS_TOKENS_H

#include "commands.h"

int cmd_run_token(cmd_ctx_t *ctx, int argc, char **argv);
int cmd_run_dashboard(cmd_ctx_t *ctx, int argc, char **argv);

/* "30d", "12h", "90m", "45s" or plain seconds into *ret_s (> 0). 0 or -1. */
int cmd_parse_duration(const char *text, long long *ret_s);

#endif
