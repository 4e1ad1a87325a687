/*
 * store_keys: the worker channel's enrolled agent keys and join tokens
 * (schema/008_agent_keys.sql). The broker loop's writer store_t is the only
 * writer; the REST handlers read the key list with a reader. Statements are
 * prepared per call: these run at handshakes and admin requests, never per
 * message. Every function returns 0 or a negative errno (-ENOENT for a row
 * that does not exist, -EEXIST for a duplicate public key, -EIO/-ENOMEM for
 * SQLite failures).
 */
#ifndef RINGMASTER_COORDINATORD_STORE_KEYS_H
#define RINGMASTER_COORDINATORD_STORE_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define STORE_KEY_Z85_BYTES 41 /* 40 Z85 characters + NUL */
#define STORE_KEY_NAME_BYTES 128

typedef struct {
	int64_t id;
	char name[STORE_KEY_NAME_BYTES];
	char public_key[STORE_KEY_Z85_BYTES];
	char node[STORE_KEY_NAME_BYTES]; /* "" while not bound */
	int64_t created_at_us;
	int64_t last_used_at_us; /* 0: never */
	int64_t revoked_at_us;   /* 0: live */
} store_key_t;

/* Writer: add a key `public_key` (Z85) named `name`, bound to `node` (NULL:
 * at its first REGISTER). 0 and *ret_id, or -EEXIST when the key is known. */
int store_key_add(store_t *st, const char *name, const char *public_key, const char *node,
                  int64_t now_us, int64_t *ret_id);

/* The key with this public key (revoked or not): 0 and *ret, or -ENOENT. */
int store_key_by_public(store_t *st, const char *public_key, store_key_t *ret);

/* The key `id`: 0 and *ret, or -ENOENT. */
int store_key_get(store_t *st, int64_t id, store_key_t *ret);

/* The live key bound to `node`: 0 and *ret, or -ENOENT. */
int store_key_for_node(store_t *st, const char *node, store_key_t *ret);

/* Writer: bind key `id` to `node` (only when it has no node yet). */
int store_key_bind_node(store_t *st, int64_t id, const char *node);

/* Writer: record the checkpoint root (NULL: none) key `id`'s agent
 * reported; read it back into `out` (`n` bytes; "" when none). */
int store_key_set_root(store_t *st, int64_t id, const char *root);
int store_key_root(store_t *st, int64_t id, char *out, size_t n);

/* Writer: note a handshake of key `id` at `now_us`. */
int store_key_touch(store_t *st, int64_t id, int64_t now_us);

/* Writer: revoke key `id`: 0, -ENOENT (no such key) or -EALREADY. */
int store_key_revoke(store_t *st, int64_t id, int64_t now_us);

/* Every key, oldest first; `fn` returning non-zero stops with that value. */
typedef int (*store_key_fn)(const store_key_t *k, void *userdata);
int store_key_list(store_t *st, store_key_fn fn, void *userdata);

/* Writer: a join token with hash `hash` (32 bytes), `uses` uses, expiring at
 * `expires_at_us`. */
int store_join_token_add(store_t *st, const unsigned char hash[32], int uses, int64_t expires_at_us,
                         int64_t now_us);

/* Writer: spend one use of the token with hash `hash`: 0, -ENOENT (unknown),
 * -ETIME (expired) or -EUSERS (used up). */
int store_join_token_use(store_t *st, const unsigned char hash[32], int64_t now_us);

/* Whether an unexpired join token with uses left exists (1 or 0), or a
 * negative errno. */
int store_join_token_live(store_t *st, int64_t now_us);

/* The node that rank `rank` of `job_id`'s attempt `attempt` was placed on
 * (the ranks table): 0 with `ret_node` (`len` bytes), or -ENOENT. */
int store_key_rank_node(store_t *st, const char *job_id, int attempt, int rank, char *ret_node, size_t len);

#endif
