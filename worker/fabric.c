/*
 * fabric: the worker's DEALER client of the coordinator (see fabric.h).
 */
#include "fabric.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

struct fabric {
	void *zctx;
	void *sock;
	char *endpoint;
	char *identity;
	int64_t heard_us;
	int64_t sent_us;
	int backoff_ms; /* the wait to hand out at the next reconnect */
};

static fabric_keys_t s_keys;
static bool s_use_keys;

void fabric_use_keys(const fabric_keys_t *keys)
{
	s_use_keys = keys != NULL;
	if (keys)
		s_keys = *keys;
	else
		memset(&s_keys, 0, sizeof s_keys);
}

int64_t fabric_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void *s_open(fabric_t *f, char *err, size_t errlen)
{
	void *s = zmq_socket(f->zctx, ZMQ_DEALER);
	if (!s) {
		snprintf(err, errlen, "cannot create a ZeroMQ socket: %s", zmq_strerror(errno));
		return NULL;
	}
	/* Messages sent before the connection is up wait for it (a JOIN or a
	 * REGISTER right after fabric_new); fabric_reconnect drops them with the
	 * old socket (linger 0). */
	int linger = 0, ivl = 100, ivl_max = 1000;
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
	zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
	if (zmq_setsockopt(s, ZMQ_ROUTING_ID, f->identity, strlen(f->identity)) != 0) {
		snprintf(err, errlen, "identity '%s' refused: %s", f->identity, zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	if (s_use_keys && (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, s_keys.server_key, 40) != 0 ||
	                   zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, s_keys.public_key, 40) != 0 ||
	                   zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, s_keys.secret_key, 40) != 0)) {
		snprintf(err, errlen, "cannot set the CURVE keys: %s", zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	if (zmq_connect(s, f->endpoint) != 0) {
		snprintf(err, errlen, "cannot connect to '%s': %s (want tcp://HOST:PORT)", f->endpoint,
		         zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	return s;
}

fabric_t *fabric_new(void *zctx, const char *endpoint, const char *identity, char *err,
                     size_t errlen)
{
	size_t id_len = strlen(identity);
	if (id_len == 0 || id_len > WIRE_MAX_IDENTITY_BYTES) {
		snprintf(err, errlen, "identity '%s' must be 1 to %d bytes", identity,
		         WIRE_MAX_IDENTITY_BYTES);
		return NULL;
	}
	fabric_t *f = calloc(1, sizeof *f);
	if (!f)
		goto fail_nomem;
	f->zctx = zctx;
	f->endpoint = strdup(endpoint);
	f->identity = strdup(identity);
	if (!f->endpoint || !f->identity)
		goto fail_nomem;
	f->sock = s_open(f, err, errlen);
	if (!f->sock)
		goto fail;
	f->heard_us = f->sent_us = fabric_now_us();
	/* This connect is the first attempt (its wait is the caller's
	 * FABRIC_BACKOFF_MIN_MS); a reconnect before any answer waits twice that. */
	f->backoff_ms = 2 * FABRIC_BACKOFF_MIN_MS;
	return f;
fail_nomem:
	snprintf(err, errlen, "out of memory");
fail:
	fabric_free(f);
	return NULL;
}

void fabric_free(fabric_t *f)
{
	if (!f)
		return;
	if (f->sock) {
		/* Let a last DONE or RANK_EXITED reach a live coordinator; a dead
		 * one delays zmq_ctx_term by at most this long. */
		int linger = FABRIC_CLOSE_LINGER_MS;
		zmq_setsockopt(f->sock, ZMQ_LINGER, &linger, sizeof linger);
		zmq_close(f->sock);
	}
	free(f->endpoint);
	free(f->identity);
	free(f);
}

void *fabric_socket(fabric_t *f)
{
	return f->sock;
}

const char *fabric_endpoint(const fabric_t *f)
{
	return f->endpoint;
}

int fabric_send(fabric_t *f, wire_type_t type, const json_t *payload)
{
	if (!f->sock)
		return -ENOTCONN;
	int rc = wire_send(f->sock, NULL, 0, type, payload);
	if (rc == 0)
		f->sent_us = fabric_now_us();
	return rc;
}

int fabric_send_error(fabric_t *f, int code, const char *detail)
{
	if (!f->sock)
		return -ENOTCONN;
	return wire_send_error(f->sock, NULL, 0, code, detail);
}

int fabric_recv(fabric_t *f, int timeout_ms, wire_type_t *ret_type, json_t **ret_payload,
                char *err, size_t errlen)
{
	if (!f->sock)
		return -ENOTCONN;
	if (timeout_ms > 0) {
		zmq_pollitem_t it = {.socket = f->sock, .events = ZMQ_POLLIN};
		int n = zmq_poll(&it, 1, timeout_ms);
		if (n < 0)
			return errno == EINTR ? -EAGAIN : -errno;
		if (n == 0)
			return -EAGAIN;
	}
	int rc = wire_recv(f->sock, ZMQ_DONTWAIT, NULL, NULL, ret_type, ret_payload, err, errlen);
	/* A message the codec refused still shows that the peer is alive. */
	if (rc == 0 || rc == -EPROTO || rc == -ENOENT || rc == -EMSGSIZE || rc == -EINVAL)
		f->heard_us = fabric_now_us();
	return rc == -EINTR ? -EAGAIN : rc;
}

int64_t fabric_heard_us(const fabric_t *f)
{
	return f->heard_us;
}

int64_t fabric_sent_us(const fabric_t *f)
{
	return f->sent_us;
}

bool fabric_peer_dead(const fabric_t *f, int heartbeat_ms, int dead_after, int64_t now_us)
{
	return now_us - f->heard_us > (int64_t)heartbeat_ms * dead_after * 1000;
}

int fabric_reconnect(fabric_t *f, int *ret_backoff_ms)
{
	char err[256];
	if (f->sock) {
		zmq_close(f->sock);
		f->sock = NULL;
	}
	*ret_backoff_ms = f->backoff_ms;
	if (f->backoff_ms < FABRIC_BACKOFF_MAX_MS)
		f->backoff_ms = f->backoff_ms * 2 > FABRIC_BACKOFF_MAX_MS ? FABRIC_BACKOFF_MAX_MS
		                                                          : f->backoff_ms * 2;
	f->sock = s_open(f, err, sizeof err);
	if (!f->sock)
		return -ENOTCONN;
	/* The new connection gets a full liveness window of its own. */
	f->heard_us = fabric_now_us();
	return 0;
}

void fabric_backoff_reset(fabric_t *f)
{
	f->backoff_ms = FABRIC_BACKOFF_MIN_MS;
}
