/*
 * enroll: join tokens, ENROLL and the admin's key operations (see
 * enroll.h).
 */
#include "enroll.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <zmq.h>

#include "clock.h"
#include "log.h"
#include "problem.h"
#include "store_keys.h"

#define TOKEN_SECRET_BYTES 32

static void token_hash(const char *token, unsigned char out[32])
{
	crypto_generichash(out, 32, (const unsigned char *)token, strlen(token), NULL, 0);
}

bool enroll_node_name_ok(const char *node)
{
	size_t n = strlen(node);
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = node[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* Parse a decimal integer in [lo, hi]; "" gives `dflt`. */
static bool parse_num(const char *s, long long lo, long long hi, long long dflt, long long *ret)
{
	if (!s || !s[0]) {
		*ret = dflt;
		return true;
	}
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return false;
	*ret = v;
	return true;
}

static int join_token(store_t *st, const char *broker_public, const char *a1, const char *a2, sbuf_t *body,
                      int *ret_status)
{
	long long uses, ttl;
	char detail[160];
	if (!parse_num(a1, 1, ENROLL_MAX_USES, 1, &uses)) {
		snprintf(detail, sizeof detail, "uses must be an integer from 1 to %d", ENROLL_MAX_USES);
		problem_render(body, 400, detail, "/uses");
		*ret_status = 400;
		return 0;
	}
	if (!parse_num(a2, 60, ENROLL_MAX_TTL_S, ENROLL_DEFAULT_TTL_S, &ttl)) {
		snprintf(detail, sizeof detail, "expires_in_s must be an integer from 60 to %lld (30 days)",
		         ENROLL_MAX_TTL_S);
		problem_render(body, 400, detail, "/expires_in_s");
		*ret_status = 400;
		return 0;
	}
	uint8_t pub[32];
	if (!zmq_z85_decode(pub, broker_public))
		return -EINVAL;
	unsigned char secret[TOKEN_SECRET_BYTES];
	randombytes_buf(secret, sizeof secret);
	char hex[65], b64[sodium_base64_ENCODED_LEN(TOKEN_SECRET_BYTES, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
	sodium_bin2hex(hex, sizeof hex, pub, sizeof pub);
	sodium_bin2base64(b64, sizeof b64, secret, sizeof secret, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(secret, sizeof secret);
	char token[4 + 64 + sizeof b64];
	snprintf(token, sizeof token, ENROLL_TOKEN_PREFIX "%s%s", hex, b64);
	unsigned char hash[32];
	token_hash(token, hash);
	int64_t now = clock_wall_us(), expires = now + ttl * 1000000;
	int r = store_join_token_add(st, hash, (int)uses, expires, now);
	if (r < 0) {
		sodium_memzero(token, sizeof token);
		return r;
	}
	sbuf_puts(body, "{\"token\":");
	sbuf_json_string(body, token, strlen(token));
	sbuf_printf(body, ",\"expires_at_us\":%lld,\"expires_in_s\":%lld,\"uses\":%lld,\"broker_public_key\":",
	            (long long)expires, ttl, uses);
	sbuf_json_string(body, broker_public, strlen(broker_public));
	sbuf_puts(body, "}");
	sodium_memzero(token, sizeof token);
	*ret_status = 201;
	log_info("workers: a join token was created (%lld use(s), expires in %lld s)", uses, ttl);
	return 0;
}

static void key_json(sbuf_t *b, const store_key_t *k)
{
	sbuf_printf(b, "{\"id\":%lld,\"name\":", (long long)k->id);
	sbuf_json_string(b, k->name, strlen(k->name));
	sbuf_puts(b, ",\"public_key\":");
	sbuf_json_string(b, k->public_key, strlen(k->public_key));
	sbuf_puts(b, ",\"node\":");
	if (k->node[0])
		sbuf_json_string(b, k->node, strlen(k->node));
	else
		sbuf_puts(b, "null");
	sbuf_printf(b, ",\"created_at_us\":%lld", (long long)k->created_at_us);
	if (k->revoked_at_us)
		sbuf_printf(b, ",\"revoked_at_us\":%lld}", (long long)k->revoked_at_us);
	else
		sbuf_puts(b, ",\"revoked_at_us\":null}");
}

static int key_add(store_t *st, const char *name, const char *public_key, sbuf_t *body, int *ret_status)
{
	uint8_t raw[32];
	*ret_status = 400;
	if (!name || !enroll_node_name_ok(name)) {
		problem_render(body, 400, "name must be 1 to 64 characters of A-Z a-z 0-9 . _ - (the agent's node name)",
		               "/name");
		return 0;
	}
	if (!public_key || strlen(public_key) != 40 || !zmq_z85_decode(raw, public_key)) {
		problem_render(body, 400, "public_key must be a CURVE public key in Z85 (40 characters), as in the "
		               "agent's state folder (agent.pub)", "/public_key");
		return 0;
	}
	store_key_t other;
	int r = store_key_for_node(st, name, &other);
	if (r == 0) {
		char detail[256];
		snprintf(detail, sizeof detail, "node %s already has a live key (id %lld): revoke it first", name,
		         (long long)other.id);
		problem_render(body, 409, detail, "/name");
		*ret_status = 409;
		return 0;
	}
	if (r != -ENOENT)
		return r;
	int64_t id = 0;
	r = store_key_add(st, name, public_key, name, clock_wall_us(), &id);
	if (r == -EEXIST) {
		problem_render(body, 409, "this public key is already known (revoked keys cannot come back: make a new "
		               "key pair)", "/public_key");
		*ret_status = 409;
		return 0;
	}
	if (r < 0)
		return r;
	store_key_t k;
	r = store_key_get(st, id, &k);
	if (r < 0)
		return r;
	key_json(body, &k);
	*ret_status = 201;
	log_info("workers: key %lld added for node %s", (long long)id, name);
	return 0;
}

static int key_revoke(store_t *st, const char *id_s, sbuf_t *body, int *ret_status, int64_t *ret_revoked)
{
	long long id;
	if (!parse_num(id_s, 1, INT64_MAX, -1, &id) || id < 1) {
		problem_render(body, 404, "no key with that id", NULL);
		*ret_status = 404;
		return 0;
	}
	int r = store_key_revoke(st, id, clock_wall_us());
	if (r == -ENOENT || r == -EALREADY) {
		problem_render(body, r == -ENOENT ? 404 : 409,
		               r == -ENOENT ? "no key with that id" : "that key is already revoked", NULL);
		*ret_status = r == -ENOENT ? 404 : 409;
		return 0;
	}
	if (r < 0)
		return r;
	store_key_t k;
	r = store_key_get(st, id, &k);
	if (r < 0)
		return r;
	key_json(body, &k);
	*ret_status = 200;
	*ret_revoked = id;
	log_warn("workers: key %lld (%s) revoked: its agent is dropped and refused from now on", id, k.name);
	return 0;
}

int enroll_apply(store_t *st, const char *broker_public, const char *op, const char *a1, const char *a2,
                 sbuf_t *body, int *ret_status, int64_t *ret_revoked_key)
{
	*ret_revoked_key = 0;
	sbuf_reset(body);
	if (strcmp(op, ENROLL_OP_JOIN_TOKEN) == 0)
		return join_token(st, broker_public, a1, a2, body, ret_status);
	if (strcmp(op, ENROLL_OP_KEY_ADD) == 0)
		return key_add(st, a1, a2, body, ret_status);
	if (strcmp(op, ENROLL_OP_KEY_REVOKE) == 0)
		return key_revoke(st, a1, body, ret_status, ret_revoked_key);
	return -EINVAL;
}

int enroll_on_enroll(store_t *st, const char *public_key, const json_t *p, int64_t *ret_key_id, char *detail,
                     size_t dlen)
{
	const char *node = json_string_value(json_object_get(p, "node"));
	const char *token = json_string_value(json_object_get(p, "token"));
	if (!enroll_node_name_ok(node)) {
		snprintf(detail, dlen, "ENROLL: node must be 1 to 64 characters of A-Z a-z 0-9 . _ -");
		return 400;
	}
	if (strncmp(token, ENROLL_TOKEN_PREFIX, 4) != 0) {
		snprintf(detail, dlen, "ENROLL: the join token must start with rmj_ (ringctl worker enroll prints one)");
		return 403;
	}
	store_key_t other;
	int r = store_key_for_node(st, node, &other);
	if (r == 0) {
		snprintf(detail, dlen, "ENROLL: node %s is enrolled with another key (id %lld): an admin must revoke it "
		         "first, or start this agent with another --node", node, (long long)other.id);
		return 409;
	}
	if (store_key_by_public(st, public_key, &other) == 0) {
		snprintf(detail, dlen, "ENROLL: this key is already known (revoked?): delete the agent's state folder "
		         "to make a new key pair");
		return 409;
	}
	unsigned char hash[32];
	token_hash(token, hash);
	r = store_join_token_use(st, hash, clock_wall_us());
	if (r == -ENOENT || r == -EUSERS || r == -ETIME) {
		snprintf(detail, dlen, "ENROLL: the join token is %s: ask an admin for a new one (ringctl worker enroll)",
		         r == -ENOENT ? "unknown" : r == -EUSERS ? "already used" : "expired");
		return 403;
	}
	if (r < 0) {
		snprintf(detail, dlen, "ENROLL: the coordinator cannot write to its database; retry later");
		return 503;
	}
	int64_t id = 0;
	r = store_key_add(st, node, public_key, node, clock_wall_us(), &id);
	if (r == -EEXIST) {
		snprintf(detail, dlen, "ENROLL: this key is already known (revoked?): delete the agent's state folder "
		         "to make a new key pair");
		return 409;
	}
	if (r < 0) {
		snprintf(detail, dlen, "ENROLL: the coordinator cannot write to its database; retry later");
		return 503;
	}
	*ret_key_id = id;
	return 0;
}
