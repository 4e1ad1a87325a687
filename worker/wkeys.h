/*
 * wkeys: the agent's CurveZMQ keys in its state folder (issue 22, part C;
 * docs/workers.md). The folder (--state-dir; default $STATE_DIRECTORY, else
 * ~/.local/state/ringworker, else ./ringworker-state) holds:
 *   agent.key   our public and secret key, Z85, one per line (0600)
 *   agent.pub   our public key (for an admin who adds it by hand)
 *   broker.pub  the broker's public key (from the join token, or copied there)
 *   enrolled    "<key id> <node>" once the coordinator enrolled our key
 * Ranks get the folder's path in RINGWORKER_KEYS_DIR (never the keys on
 * their command line) and read agent.key and broker.pub from it.
 */
#ifndef RINGMASTER_WORKER_WKEYS_H
#define RINGMASTER_WORKER_WKEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "fabric.h"

#define WKEYS_ENV "RINGWORKER_KEYS_DIR"

/* The state folder: `dir` when given, else the defaults above; created
 * 0700 when missing. 0 with the path in `out`, or -errno with `err`. */
int wkeys_state_dir(const char *dir, char *out, size_t n, char *err, size_t errlen);

/* Our key pair from `dir`, made (0600, O_EXCL) when there is none yet;
 * *ret_created says so. 0 or -errno with `err`. */
int wkeys_load_or_create(const char *dir, fabric_keys_t *keys, bool *ret_created, char *err, size_t errlen);

/* The broker's public key in a join token (rmj_ + 64 hex digits + secret),
 * as Z85 in `out`. 0 or -EINVAL with `err`. */
int wkeys_token_broker(const char *token, char out[41], char *err, size_t errlen);

/* Read or write broker.pub (Z85). 0, -ENOENT (read: none yet) or -errno. */
int wkeys_read_broker(const char *dir, char out[41]);
int wkeys_write_broker(const char *dir, const char *z85, char *err, size_t errlen);

/* Whether `dir` records our enrollment; write that record. */
bool wkeys_enrolled(const char *dir);
int wkeys_mark_enrolled(const char *dir, long long key_id, const char *node, char *err, size_t errlen);

/* A rank: load agent.key and broker.pub from `dir` into `keys`. 0 or
 * -errno with `err`. */
int wkeys_load_rank(const char *dir, fabric_keys_t *keys, char *err, size_t errlen);

#endif
