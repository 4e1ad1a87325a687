/*
 * enroll: enrollment of worker keys (issue 22, part C). Join tokens
 * (`rmj_` + the broker's public key in 64 hex digits + 32 random bytes in
 * base64url, so an agent needs nothing else; only their hash is stored),
 * the ENROLL message of a pending peer (curve.h), and the admin's key
 * operations that POST /v1/workers/... sends through the broker's writer
 * loop. Everything runs on the broker loop's thread with its writer store.
 */
#ifndef RINGMASTER_COORDINATORD_ENROLL_H
#define RINGMASTER_COORDINATORD_ENROLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "curve.h"
#include "sbuf.h"
#include "store.h"

#define ENROLL_TOKEN_PREFIX "rmj_"
#define ENROLL_DEFAULT_TTL_S 3600
#define ENROLL_MAX_TTL_S (30LL * 24 * 3600)
#define ENROLL_MAX_USES 1000

/* The admin operations (the `op` of enroll_apply). */
#define ENROLL_OP_JOIN_TOKEN "join-token" /* a1: uses, a2: expires_in_s */
#define ENROLL_OP_KEY_ADD "key-add"       /* a1: name, a2: public key (Z85) */
#define ENROLL_OP_KEY_REVOKE "key-revoke" /* a1: key id */

/*
 * Apply one admin operation inside the caller's open transaction on `st`:
 * sets *ret_status (201/200, or 4xx with a problem body naming the field)
 * and the JSON body in `body`, and *ret_revoked_key (the id of a key just
 * revoked, else 0). `broker_public` is the broker's Z85 public key. 0, or a
 * negative errno when the store failed (the caller rolls back).
 */
int enroll_apply(store_t *st, const char *broker_public, const char *op, const char *a1, const char *a2,
                 sbuf_t *body, int *ret_status, int64_t *ret_revoked_key);

/*
 * An ENROLL {node, token} from a pending peer with public key
 * `public_key` (Z85), inside the caller's transaction: spends one use of
 * the token and adds the key bound to `node`. 0 with *ret_key_id, or a
 * status (403 token, 409 node or key, 400 node name, 503 store) with one
 * line in `detail` (never the token).
 */
int enroll_on_enroll(store_t *st, const char *public_key, const json_t *p, int64_t *ret_key_id, char *detail,
                     size_t dlen);

/* Whether `node` is a plausible node name (1..64 of [A-Za-z0-9._-]). */
bool enroll_node_name_ok(const char *node);

#endif
