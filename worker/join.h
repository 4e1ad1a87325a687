/*
 * join: the agent's side of enrollment (issue 22, part C; docs/workers.md).
 * At start, before the agent's loop: find the state folder, load or make
 * the key pair, and when the key is not enrolled yet and a join token is
 * given, exchange the token for enrollment (ENROLL on the identity
 * enroll/<node>, answered ENROLLED), then hand the keys to fabric.c.
 */
#ifndef RINGMASTER_WORKER_JOIN_H
#define RINGMASTER_WORKER_JOIN_H

#include <stdio.h>

/*
 * Prepare the worker channel's keys for agent `node` of `endpoint`:
 * `state_dir` (NULL: the default, wkeys.h), `token` (NULL: none). Without a
 * broker key (no token ever given, no broker.pub) the agent connects
 * without CURVE (a broker with --broker-auth off). Sets RINGWORKER_KEYS_DIR
 * for the ranks. Returns 0, or an RM_EXIT_* code after one
 * "ringworker agent: error:" line on `log` (a used, expired or unknown token
 * says so).
 */
int join_prepare(const char *endpoint, const char *node, const char *state_dir, const char *token, FILE *log);

/* A rank: use its agent's keys when RINGWORKER_KEYS_DIR is set. 0 or an
 * RM_EXIT_* code after a message on stderr. */
int join_rank_keys(void);

#endif
