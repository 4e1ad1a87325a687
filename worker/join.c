/*
 * join: enrollment at the agent's start (see join.h).
 */
#include "join.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>
#include <zmq.h>

#include "exitcode.h"
#include "fabric.h"
#include "wire.h"
#include "wkeys.h"

#define ANSWER_WAIT_MS 5000

/* Whether the monitor reports a refused handshake (the ZAP handler said
 * no: no live join token, or a revoked key). */
static bool s_auth_refused(void *mon)
{
	for (;;) {
		zmq_msg_t ev, addr;
		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			return false;
		}
		uint16_t event = 0;
		if (zmq_msg_size(&ev) >= 2)
			memcpy(&event, zmq_msg_data(&ev), sizeof event);
		bool more = zmq_msg_more(&ev);
		zmq_msg_close(&ev);
		if (more) {
			zmq_msg_init(&addr);
			zmq_msg_recv(&addr, mon, 0);
			zmq_msg_close(&addr);
		}
		if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
			return true;
	}
}

/* Send ENROLL until ENROLLED or a refusal. 0 with *ret_key_id, or an exit
 * code after a message. */
static int s_enroll(void *zctx, const char *endpoint, const char *node, const char *token, long long *ret_key_id,
                    FILE *log)
{
	char ident[300], err[256];
	snprintf(ident, sizeof ident, "enroll/%s", node);
	fabric_t *fab = fabric_new(zctx, endpoint, ident, err, sizeof err);
	if (!fab) {
		fprintf(log, "ringworker agent: error: %s\n", err);
		return RM_EXIT_USAGE;
	}
	void *mon = NULL;
	char mon_ep[64];
	snprintf(mon_ep, sizeof mon_ep, "inproc://ringworker-enroll-%d", (int)getpid());
	int rc = RM_EXIT_USAGE;
	for (int tries = 0;; tries++) {
		if (!mon && zmq_socket_monitor(fabric_socket(fab), mon_ep, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0) {
			mon = zmq_socket(zctx, ZMQ_PAIR);
			if (mon && zmq_connect(mon, mon_ep) != 0) {
				zmq_close(mon);
				mon = NULL;
			}
		}
		json_t *p = json_pack("{s:s, s:s}", "node", node, "token", token);
		fabric_send(fab, WIRE_ENROLL, p);
		json_decref(p);
		int64_t deadline = fabric_now_us() + (int64_t)ANSWER_WAIT_MS * 1000;
		while (fabric_now_us() < deadline) {
			wire_type_t type;
			json_t *ans = NULL;
			int r = fabric_recv(fab, 200, &type, &ans, err, sizeof err);
			if (mon && s_auth_refused(mon)) {
				fprintf(log, "ringworker agent: error: the coordinator refused this key: the join token is "
				        "unknown, already used or expired (and no other is live); ask an admin for a new one "
				        "(ringctl worker enroll)\n");
				goto out;
			}
			if (r != 0)
				continue;
			if (type == WIRE_ENROLLED) {
				*ret_key_id = (long long)json_integer_value(json_object_get(ans, "key_id"));
				json_decref(ans);
				rc = 0;
				goto out;
			}
			if (type == WIRE_ERROR) {
				fprintf(log, "ringworker agent: error: enrollment refused: %s\n",
				        json_string_value(json_object_get(ans, "detail")));
				json_decref(ans);
				goto out;
			}
			json_decref(ans);
		}
		int backoff = 0;
		fprintf(log, "ringworker agent: no answer to ENROLL from %s yet (try %d); retrying\n", endpoint, tries + 1);
		if (mon) {
			zmq_socket_monitor(fabric_socket(fab), NULL, 0);
			zmq_close(mon);
			mon = NULL;
		}
		fabric_reconnect(fab, &backoff);
		usleep((useconds_t)(backoff > 8000 ? 8000 : backoff) * 1000);
	}
out:
	if (mon) {
		zmq_socket_monitor(fabric_socket(fab), NULL, 0);
		zmq_close(mon);
	}
	fabric_free(fab);
	return rc;
}

int join_prepare(const char *endpoint, const char *node, const char *state_dir, const char *token, FILE *log)
{
	char dir[4096], err[512];
	fabric_keys_t keys;
	memset(&keys, 0, sizeof keys);
	bool created = false;
	if (wkeys_state_dir(state_dir, dir, sizeof dir, err, sizeof err) < 0 ||
	    wkeys_load_or_create(dir, &keys, &created, err, sizeof err) < 0) {
		fprintf(log, "ringworker agent: error: %s\n", err);
		return RM_EXIT_USAGE;
	}
	if (created)
		fprintf(log, "ringworker agent: made a CURVE key pair in %s (public key %s)\n", dir, keys.public_key);
	bool enrolled = wkeys_enrolled(dir);
	if (token && !enrolled) {
		char broker[41];
		if (wkeys_token_broker(token, broker, err, sizeof err) < 0 ||
		    wkeys_write_broker(dir, broker, err, sizeof err) < 0) {
			fprintf(log, "ringworker agent: error: --join-token: %s\n", err);
			return RM_EXIT_USAGE;
		}
	} else if (token) {
		fprintf(log, "ringworker agent: already enrolled (%s/enrolled): --join-token is not needed any more\n", dir);
	}
	int r = wkeys_read_broker(dir, keys.server_key);
	if (r == -ENOENT) {
		fprintf(log, "ringworker agent: no broker key in %s: connecting without CURVE (a coordinator with "
		        "--broker-auth on needs --join-token, see docs/workers.md)\n", dir);
		sodium_memzero(&keys, sizeof keys);
		return 0;
	}
	if (r < 0) {
		fprintf(log, "ringworker agent: error: %s/broker.pub is not a Z85 key\n", dir);
		return RM_EXIT_USAGE;
	}
	fabric_use_keys(&keys);
	if (!enrolled && token) {
		void *zctx = zmq_ctx_new();
		long long key_id = 0;
		int rc = zctx ? s_enroll(zctx, endpoint, node, token, &key_id, log) : RM_EXIT_NOMEM;
		if (zctx)
			zmq_ctx_term(zctx);
		if (rc != 0) {
			sodium_memzero(&keys, sizeof keys);
			return rc;
		}
		if (wkeys_mark_enrolled(dir, key_id, node, err, sizeof err) < 0)
			fprintf(log, "ringworker agent: warning: %s\n", err);
		fprintf(log, "ringworker agent: enrolled as node %s (key %lld); the join token is not needed any more\n",
		        node, key_id);
	}
	sodium_memzero(&keys, sizeof keys);
	setenv(WKEYS_ENV, dir, 1);
	return 0;
}

int join_rank_keys(void)
{
	const char *dir = getenv(WKEYS_ENV);
	if (!dir || !dir[0])
		return 0;
	fabric_keys_t keys;
	char err[512];
	if (wkeys_load_rank(dir, &keys, err, sizeof err) < 0) {
		fprintf(stderr, "ringworker rank: error: %s\n", err);
		return RM_EXIT_USAGE;
	}
	fabric_use_keys(&keys);
	sodium_memzero(&keys, sizeof keys);
	return 0;
}
