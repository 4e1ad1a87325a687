/*
 * fabric: the worker's side of the wire protocol (api/wire.h), one DEALER
 * socket to the coordinator's ROUTER.
 *
 * An agent and every rank process each own one fabric_t. It connects with a
 * routing identity ("agent/<node>", "rank/<job>/<attempt>/<rank>"), sends and
 * receives whole wire messages, and keeps the Paranoid Pirate bookkeeping the
 * agent needs: when the peer was last heard from, when we last sent, and the
 * reconnect backoff (1 s doubling to 32 s). Reconnecting closes the socket and
 * opens a new one with the same identity, so the coordinator's ROUTER sees a
 * fresh peer and nothing queued for the old connection is replayed.
 *
 * Sends never block (wire_send uses ZMQ_DONTWAIT). Until the connection is
 * up messages queue on the socket (up to the high-water mark, then they are
 * dropped); a reconnect discards them, and the protocol repairs any loss (a
 * REGISTER lists the running ranks again).
 *
 * A fabric_t is used by one thread at a time.
 */
#ifndef RINGMASTER_WORKER_FABRIC_H
#define RINGMASTER_WORKER_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "wire.h"

#define FABRIC_BACKOFF_MIN_MS 1000
#define FABRIC_BACKOFF_MAX_MS 32000
#define FABRIC_CLOSE_LINGER_MS 1000

typedef struct fabric fabric_t;

/* CurveZMQ keys, Z85 (40 characters + NUL each): ours and the broker's. */
typedef struct {
	char public_key[41];
	char secret_key[41];
	char server_key[41];
} fabric_keys_t;

/*
 * Use `keys` (copied; NULL: none, the default) for every socket this process
 * opens from now on: each connects as a CURVE client of the broker. Call it
 * once at start, before any fabric_new (the agent after its enrollment, a
 * rank with its agent's keys). The copy is wiped at exit by the OS only:
 * keep the process's core dumps off (the units do).
 */
void fabric_use_keys(const fabric_keys_t *keys);

/* Monotonic clock in microseconds. */
int64_t fabric_now_us(void);

/*
 * Open a DEALER socket in `zctx` (borrowed) with routing identity `identity`
 * and connect it to `endpoint` ("tcp://host:port"). The connection completes
 * in the background. Returns NULL with one line in `err` (bad endpoint,
 * identity too long).
 */
fabric_t *fabric_new(void *zctx, const char *endpoint, const char *identity, char *err,
                     size_t errlen);

/* Close the socket, giving queued messages up to FABRIC_CLOSE_LINGER_MS
 * to leave when the context is terminated; accepts NULL. */
void fabric_free(fabric_t *f);

/* The ZeroMQ socket, for zmq_poll (borrowed; changes after fabric_reconnect). */
void *fabric_socket(fabric_t *f);

const char *fabric_endpoint(const fabric_t *f);

/*
 * Send one message (`payload` borrowed). 0, or a negative errno: -EAGAIN when
 * the coordinator is not connected (the message is dropped), -EINVAL when the
 * payload lacks a field the type requires.
 */
int fabric_send(fabric_t *f, wire_type_t type, const json_t *payload);

/* Send ERROR {code, detail} (an answer to a message we refused). */
int fabric_send_error(fabric_t *f, int code, const char *detail);

/*
 * Wait up to `timeout_ms` (0: do not wait) for one message. 0 with *ret_type
 * and *ret_payload (a new reference); -EAGAIN when nothing came in time; -EPROTO
 * and the others of wire_decode() for a message the codec refused (consumed,
 * logged by the caller with `err`); another negative errno when the socket
 * failed. Every message received, good or bad, counts as hearing from the
 * peer (fabric_heard_us).
 */
int fabric_recv(fabric_t *f, int timeout_ms, wire_type_t *ret_type, json_t **ret_payload,
                char *err, size_t errlen);

/* When we last received anything (µs, fabric_now_us clock; the connect
 * time until then) and last sent anything. */
int64_t fabric_heard_us(const fabric_t *f);
int64_t fabric_sent_us(const fabric_t *f);

/* True when nothing came in for dead_after * heartbeat_ms. */
bool fabric_peer_dead(const fabric_t *f, int heartbeat_ms, int dead_after, int64_t now_us);

/*
 * Close the socket and open a new one to the same endpoint with the same
 * identity. Returns 0, or a negative errno (the old socket is gone either way;
 * call again later). Also returns, in *ret_backoff_ms, how long the caller
 * should wait before the next attempt if this one does not get an answer:
 * the connect in fabric_new counts as the first attempt (wait 1 s after it),
 * so the first reconnect says 2 s, doubling up to 32 s; after
 * fabric_backoff_reset() (on an answer from the peer) the next reconnect
 * says 1 s again.
 */
int fabric_reconnect(fabric_t *f, int *ret_backoff_ms);
void fabric_backoff_reset(fabric_t *f);

#endif
