/*
 * broker: the coordinator's one writer thread (the "broker loop").
 *
 * The loop owns the writer store_t and every write to the database, and the
 * ZeroMQ ROUTER socket the workers connect to, whose protocol (api/wire.h),
 * cluster state and scheduler live in fabric.c. HTTP
 * threads never write: each has a broker_client_t (a DEALER socket on an
 * inproc endpoint, used by that thread only) and sends mutations to the loop,
 * waiting for the reply.
 *
 * Group commit: when the loop wakes it drains every command that has arrived,
 * applies them all in one transaction (store_begin ... store_commit, durable
 * with synchronous=FULL) and only then replies to each. If the transaction
 * fails, every command of the group gets 503 and nothing of it is stored.
 *
 * The loop polls with a finite timeout so that it notices a stop request and
 * can send the systemd watchdog keep-alive (WATCHDOG=1 at half of
 * WATCHDOG_USEC when the watchdog is enabled).
 */
#ifndef RINGMASTER_COORDINATORD_BROKER_H
#define RINGMASTER_COORDINATORD_BROKER_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "store.h"

typedef struct broker broker_t;
typedef struct broker_client broker_client_t;

/*
 * Open the writer store at cfg->db (creating the folder's database,
 * migrating the schema), bind the ROUTER at cfg->broker and the inproc
 * command socket in the ZeroMQ context `zctx` (borrowed; must outlive the
 * broker), and restore the workers' state from the store. cfg's heartbeat_ms,
 * heartbeat_misses and metrics_every are the protocol's settings;
 * max_queued_per_token caps each token's queued jobs. Returns
 * NULL with one line in `err` on failure (schema too new, folder not
 * writable, address in use).
 */
broker_t *broker_new(void *zctx, const config_t *cfg, char *err, size_t errlen);

/* Start the loop thread. 0 or a negative errno. */
int broker_start(broker_t *b);

/* Ask the loop to stop and join it (returns within one poll interval). */
void broker_stop(broker_t *b);

/* Stop if running, close the sockets and the store (checkpointing the WAL).
 * Accepts NULL. All clients must have been freed first. */
void broker_free(broker_t *b);

/* ---- client side: one per HTTP thread ---- */

/* A new client in `zctx`; NULL on failure. Use it from one thread at a time. */
broker_client_t *broker_client_new(void *zctx);
/* Close the socket; accepts NULL. May run on another thread once the owner has
 * exited (ZeroMQ allows moving a socket across a full memory barrier). */
void broker_client_free(broker_client_t *c);

typedef struct {
	const char *name;      /* as sent */
	const char *spec_json; /* compact JSON of the spec with defaults */
	int priority;
	int world_size;
	const char *idem_key;  /* NULL without an Idempotency-Key */
	unsigned char body_hash[32]; /* SHA-256 of the request body */
	const char *submitted_by; /* the token's name (auth.h); NULL or "": none (auth off) */
} broker_submit_t;

typedef struct {
	int status;     /* HTTP status to answer */
	bool replayed;  /* an idempotent replay of a stored answer */
	char *body;     /* malloc'ed, NUL-terminated: job JSON or a problem document */
	size_t body_len;
	char job_id[STORE_ID_BYTES]; /* the job submitted or cancelled; "" on a problem */
} broker_reply_t;

void broker_reply_clear(broker_reply_t *r);

/*
 * Submit a job / cancel one (on behalf of token `cancelled_by`, NULL or ""
 * for none), and wait up to `timeout_ms` for the loop's answer. 0 and *ret
 * filled (free with broker_reply_clear), -ETIMEDOUT, or another negative
 * errno when the socket failed. A timed-out command may still be applied
 * later. A submission past cfg->max_queued_per_token queued jobs of its
 * token is answered 429.
 */
int broker_client_submit(broker_client_t *c, const broker_submit_t *cmd, int timeout_ms,
                         broker_reply_t *ret);
int broker_client_cancel(broker_client_t *c, const char *job_id, const char *cancelled_by, int timeout_ms,
                         broker_reply_t *ret);

/* A token command (tokenapi.h's JSON) applied in the loop's transaction;
 * as above. With timeout_ms 0 it is sent without waiting (-ETIMEDOUT). */
int broker_client_token(broker_client_t *c, const char *cmd_json, int timeout_ms, broker_reply_t *ret);

/* Round trip through the loop without touching the store: 0 when it answered
 * within `timeout_ms`, else -ETIMEDOUT (or another negative errno). */
int broker_client_ping(broker_client_t *c, int timeout_ms);

/* The workers' keys and join tokens (coordinatord/enroll.h): `op` is an
 * ENROLL_OP_*, a1/a2 its arguments (NULL: ""). The reply is as for submit:
 * a status and a JSON (or problem) body. 0 or -ETIMEDOUT / -errno. */
int broker_client_workers(broker_client_t *c, const char *op, const char *a1, const char *a2, int timeout_ms,
                          broker_reply_t *ret);

#endif
