/*
 * curve: the broker's CurveZMQ keys and its ZAP handler (issue 22, part C).
 *
 * The coordinator's long-term key pair lives beside the database:
 * <db folder>/broker.key (the Z85 secret key, 0600, created at first start
 * with O_EXCL|O_NOFOLLOW) and broker.pub (the Z85 public key). With
 * --broker-auth on the broker's ROUTER is a CURVE server, and the ZAP
 * handler here (a REP socket on inproc://zeromq.zap.01, polled by the broker
 * loop, so it reads the writer store on the loop's thread) answers each
 * handshake:
 *   - an enrolled, unrevoked key: 200, User-Id "agent:<key id>";
 *   - an unknown key while an unexpired join token with uses left exists:
 *     200, User-Id "pending:<Z85 public key>" (such a peer may only ENROLL);
 *   - anyone else (a revoked key, an unknown key and no live join token,
 *     another mechanism): 400, logged at most once per key per minute.
 * The fabric reads each message's User-Id (zmq_msg_gets) and binds every
 * routing identity to it (see fabric.c).
 */
#ifndef RINGMASTER_COORDINATORD_CURVE_H
#define RINGMASTER_COORDINATORD_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define CURVE_Z85_BYTES 41 /* 40 characters + NUL */

typedef struct curve curve_t;

/* What a message's User-Id says about its sender. */
typedef enum {
	CURVE_PEER_NONE = 0, /* no User-Id: --broker-auth off */
	CURVE_PEER_AGENT,    /* an enrolled key: key_id */
	CURVE_PEER_PENDING,  /* an unknown key admitted to ENROLL: public_key */
} curve_peer_kind_t;

typedef struct {
	curve_peer_kind_t kind;
	int64_t key_id;
	char public_key[CURVE_Z85_BYTES];
} curve_peer_t;

/*
 * Load the broker key pair from the folder of `db_path`, creating it at
 * first start (broker.key 0600, broker.pub 0644; a missing broker.pub is
 * derived from broker.key again). 0 with both keys in Z85, or a negative
 * errno with one line in `err` (never the key itself).
 */
int curve_broker_keys(const char *db_path, char ret_public[CURVE_Z85_BYTES],
                      char ret_secret[CURVE_Z85_BYTES], char *err, size_t errlen);

/* Make `router` (not yet bound) a CURVE server with `secret` (Z85). 0 or a
 * negative errno. */
int curve_server_setup(void *router, const char *secret);

/* The ZAP handler on `zctx`, reading keys from `st` (borrowed; the broker
 * loop's writer). NULL with `err` when inproc://zeromq.zap.01 cannot be
 * bound. */
curve_t *curve_new(void *zctx, store_t *st, char *err, size_t errlen);
void curve_free(curve_t *c);

/* The ZAP socket, for the broker loop's zmq_poll. */
void *curve_zap_socket(curve_t *c);

/* Answer every ZAP request waiting (never blocks). */
void curve_handle_zap(curve_t *c);

/* Parse a User-Id (NULL: none) into *ret. */
void curve_peer_parse(const char *user_id, curve_peer_t *ret);

/* Log a refusal about `who` (a key, an identity: any text) at warning
 * level, at most once a minute per `who`; the line is `fmt` formatted.
 * (Refusals of unknown keys are also capped at 60 lines a minute in all.) */
void curve_log_refusal(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
