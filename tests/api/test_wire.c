/*
 * Unit tests for api/wire: decoding every message type with its required
 * fields, each field missing or of the wrong type, METRICS' all-or-none field
 * sets (training row, memory figures), the snapshot commit messages' field
 * checks (non-negative integers, XXH3 hex), the recovery fields (JOINED's
 * resume, METRICS' resumed_from_step / load_ms / rendezvous_ms,
 * RANK_EXITED's exited_at_us, FAILED's exit_code), the failure codes of
 * FAILED, RANK_EXITED and SNAPSHOT_FAILED and their meaning (api/exitcode.h), TRACE's step times, a wrong protocol frame,
 * unknown types, oversized payloads, wrong frame counts; and a real ZeroMQ
 * ROUTER/DEALER pair over loopback TCP carrying messages both ways with
 * wire_send / wire_recv, including malformed ones. Prints "N passed, M
 * failed"; exits non-zero on any failure.
 */
#include "wire.h"
#include "exitcode.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

static int s_n_passed, s_n_failed;
static bool s_failed;
static const char *s_name;

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__, __LINE__, \
			        s_name, #cond);                                            \
			s_failed = true;                                                   \
		}                                                                          \
	} while (0)

static void s_run(const char *name, void (*fn)(void))
{
	s_name = name;
	s_failed = false;
	fn();
	if (s_failed) {
		s_n_failed++;
		fprintf(stderr, "FAIL %s\n", name);
	} else {
		s_n_passed++;
	}
}

/* A valid payload for each type. */
static const char *const s_valid[WIRE_N_TYPES + 1] = {
	[WIRE_REGISTER] = "{\"node\":\"n1\",\"devices\":[{\"kind\":\"cpu\",\"index\":0}],\"ranks\":[]}",
	[WIRE_HEARTBEAT] = "{\"node\":\"n1\"}",
	[WIRE_RANK_EXITED] = "{\"job\":\"j\",\"attempt\":1,\"rank\":1,\"exit_code\":-1,\"signal\":9,"
	                     "\"error\":\"\"}",
	[WIRE_REGISTERED] = "{\"heartbeat_ms\":1000,\"dead_after\":3}",
	[WIRE_SPAWN] = "{\"job\":\"j\",\"attempt\":1,\"rank\":0,\"world_size\":2,"
	               "\"device\":{\"kind\":\"cpu\",\"index\":0}}",
	[WIRE_KILL] = "{\"job\":\"j\",\"attempt\":1,\"rank\":-1}",
	[WIRE_JOIN] = "{\"job\":\"j\",\"attempt\":1,\"rank\":0}",
	[WIRE_KV_SET] = "{\"key\":\"k\",\"value\":\"AAEC\"}",
	[WIRE_KV_GET] = "{\"key\":\"k\",\"timeout_ms\":100}",
	[WIRE_METRICS] = "{\"step\":3,\"loss\":2.5,\"lr\":1e-3,\"grad_norm\":1,\"tokens_per_s\":100,"
	                 "\"ms\":12.5,\"val_loss\":2.4,\"params_bytes\":497664,\"grads_bytes\":497664,"
	                 "\"optim_bytes\":995328,\"activations_bytes\":0}",
	[WIRE_DONE] = "{\"step\":10,\"loss\":2}",
	[WIRE_FAILED] = "{\"reason\":\"boom\"}",
	[WIRE_JOINED] = "{\"job\":\"j\",\"attempt\":1,\"rank\":0,\"world_size\":2,\"spec\":{},"
	                "\"metrics_every\":1,\"resume\":null}",
	[WIRE_KV_OK] = "{\"key\":\"k\"}",
	[WIRE_KV_VALUE] = "{\"key\":\"k\",\"found\":false,\"value\":\"\"}",
	[WIRE_ABORT] = "{\"job\":\"j\",\"attempt\":1,\"reason\":\"cancelled\"}",
	[WIRE_ERROR] = "{\"code\":400,\"detail\":\"bad\"}",
	[WIRE_SNAPSHOT_WRITTEN] = "{\"step\":10,\"file\":\"rank-1-of-4.safetensors\",\"bytes\":4096,"
	                          "\"xxh3\":\"0123456789abcdef\"}",
	[WIRE_SNAPSHOT_COMMIT] = "{\"job\":\"j\",\"attempt\":1,\"step\":10,\"files\":[{\"rank\":0,"
	                         "\"file\":\"rank-0-of-1.safetensors\",\"bytes\":4096,"
	                         "\"xxh3\":\"0123456789abcdef\"}]}",
	[WIRE_SNAPSHOT_COMMITTED] = "{\"step\":10,\"bytes\":8192,\"path\":\"/ck/j/step-00000010\","
	                            "\"deleted\":[2,4]}",
	[WIRE_METRICS_RESEND] = "{\"from_step\":4,\"to_step\":5}",
	[WIRE_PARKED] = "{\"step\":40}",
	[WIRE_SNAPSHOT_FAILED] = "{\"step\":20,\"error\":\"No space left on device\"}",
	[WIRE_REJOIN] = "{\"job\":\"j\",\"attempt\":2}",
	[WIRE_TRACE] = "{\"step\":7,\"start_unix_us\":1763900000123456,\"dur_us\":2048.25,"
	               "\"events\":[{\"name\":\"forward\",\"ts_us\":0,\"dur_us\":812.5}]}",
	[WIRE_LOGS] = "{\"job\":\"j\",\"attempt\":2,\"rank\":1,\"dropped\":0,"
	              "\"lines\":[{\"stream\":\"stdout\",\"time_us\":1763900000123456,\"text\":\"step 1\"}]}",
	[WIRE_ENROLL] = "{\"node\":\"n1\",\"token\":\"rmj_x\"}",
	[WIRE_ENROLLED] = "{\"key_id\":3,\"node\":\"n1\"}",
	[WIRE_RANK_STARTED] = "{\"job\":\"j\",\"attempt\":1,\"rank\":0,\"pid\":42}",
	[WIRE_PROGRAM_METRICS] = "{\"job\":\"j\",\"attempt\":1,\"rank\":0,\"row\":{\"step\":1,\"loss\":2.5}}",
};

static int s_decode3(const char *proto, const char *type, const char *payload, size_t payload_len,
                     wire_type_t *t, json_t **p, char *err, size_t errlen)
{
	const void *frames[3] = {proto, type, payload};
	size_t sizes[3] = {strlen(proto), strlen(type), payload_len};
	return wire_decode(3, frames, sizes, t, p, err, errlen);
}

static void test_every_type_round_trips(void)
{
	for (int t = WIRE_REGISTER; t <= WIRE_N_TYPES; t++) {
		const char *name = wire_type_name((wire_type_t)t);
		wire_type_t back;
		CHECK(wire_type_from_name(name, strlen(name), &back) == 0 && back == (wire_type_t)t);
		char err[256] = "";
		wire_type_t got = 0;
		json_t *p = NULL;
		int rc = s_decode3("RMW1", name, s_valid[t], strlen(s_valid[t]), &got, &p, err,
		                   sizeof err);
		if (rc != 0)
			fprintf(stderr, "  %s: %s\n", name, err);
		CHECK(rc == 0 && got == (wire_type_t)t && json_is_object(p));
		char *buf = NULL;
		size_t len = 0;
		CHECK(wire_encode((wire_type_t)t, p, &buf, &len, err, sizeof err) == 0);
		json_t *again = NULL;
		CHECK(buf && s_decode3("RMW1", name, buf, len, &got, &again, err, sizeof err) == 0);
		CHECK(again && json_equal(p, again));
		json_decref(again);
		free(buf);
		json_decref(p);
	}
	CHECK(strcmp(wire_type_name((wire_type_t)0), "?") == 0);
	CHECK(strcmp(wire_type_name((wire_type_t)99), "?") == 0);
}

/* Every required field, removed and then replaced by a value of another
 * kind, is refused with an error naming it. */
static void test_each_field_missing_or_mistyped(void)
{
	for (int t = WIRE_REGISTER; t <= WIRE_N_TYPES; t++) {
		const char *name = wire_type_name((wire_type_t)t);
		json_t *valid = json_loads(s_valid[t], 0, NULL);
		const char *key;
		json_t *value;
		json_object_foreach(valid, key, value) {
			if (t == WIRE_METRICS && strcmp(key, "val_loss") == 0)
				continue; /* optional */
			json_t *p = json_deep_copy(valid);
			json_object_del(p, key);
			char *text = json_dumps(p, JSON_COMPACT);
			char err[256] = "";
			wire_type_t got;
			json_t *out = NULL;
			int rc = s_decode3("RMW1", name, text, strlen(text), &got, &out, err, sizeof err);
			CHECK(rc == -EINVAL && strstr(err, key) && strstr(err, "missing"));
			CHECK(out == NULL);
			free(text);
			/* an array is the wrong kind for every field but REGISTER's
			 * arrays; there an object is */
			json_object_set_new(p, key, json_is_array(value) ? json_object() : json_array());
			text = json_dumps(p, JSON_COMPACT);
			rc = s_decode3("RMW1", name, text, strlen(text), &got, &out, err, sizeof err);
			CHECK(rc == -EINVAL && strstr(err, key) && strstr(err, "must be"));
			CHECK(wire_error_code(rc) == 400);
			free(text);
			json_decref(p);
		}
		json_decref(valid);
	}
}

/* Decode `payload` as `type`: the decode_rc, and `err`. */
static int s_try(const char *type, const char *payload, char *err, size_t errlen)
{
	wire_type_t t;
	json_t *p = NULL;
	err[0] = '\0';
	int rc = s_decode3("RMW1", type, payload, strlen(payload), &t, &p, err, errlen);
	CHECK((rc == 0) == (p != NULL));
	json_decref(p);
	return rc;
}

/* METRICS: the training row, the memory figures, or both; each set all or
 * none; memory figures are integers >= 0. */
static void test_metrics_memory(void)
{
	char err[256];
	const char *row = "\"loss\":2.5,\"lr\":1e-3,\"grad_norm\":1,\"tokens_per_s\":100,\"ms\":12.5";
	const char *mem = "\"params_bytes\":10,\"grads_bytes\":20,\"optim_bytes\":40,\"activations_bytes\":0";
	char buf[1024];
	/* good: rank 0's row with memory, a memory-only report, a row alone (older peers) */
	snprintf(buf, sizeof buf, "{\"step\":1,%s,%s}", row, mem);
	CHECK(s_try("METRICS", buf, err, sizeof err) == 0);
	snprintf(buf, sizeof buf, "{\"step\":1,%s}", mem);
	CHECK(s_try("METRICS", buf, err, sizeof err) == 0);
	snprintf(buf, sizeof buf, "{\"step\":1,%s}", row);
	CHECK(s_try("METRICS", buf, err, sizeof err) == 0);
	CHECK(s_try("METRICS",
	            "{\"step\":1,\"params_bytes\":9007199254740993,\"grads_bytes\":0,\"optim_bytes\":0,"
	            "\"activations_bytes\":0}",
	            err, sizeof err) == 0); /* beyond 2^53: still an exact integer */
	/* bad values */
	static const char *const bad[] = {"-1", "1.5", "\"10\"", "null", "true", "1e3"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(buf, sizeof buf,
		         "{\"step\":1,\"params_bytes\":1,\"grads_bytes\":%s,\"optim_bytes\":1,"
		         "\"activations_bytes\":1}",
		         bad[i]);
		int rc = s_try("METRICS", buf, err, sizeof err);
		CHECK(rc == -EINVAL && strstr(err, "grads_bytes") && strstr(err, "integer >= 0"));
	}
	/* a set sent in part */
	CHECK(s_try("METRICS", "{\"step\":1,\"params_bytes\":1,\"grads_bytes\":1,\"optim_bytes\":1}", err,
	            sizeof err) == -EINVAL &&
	      strstr(err, "activations_bytes") && strstr(err, "missing"));
	snprintf(buf, sizeof buf, "{\"step\":1,\"loss\":1,%s}", mem);
	CHECK(s_try("METRICS", buf, err, sizeof err) == -EINVAL && strstr(err, "\"lr\""));
	/* neither set, or no step */
	CHECK(s_try("METRICS", "{\"step\":1}", err, sizeof err) == -EINVAL && strstr(err, "params_bytes") &&
	      strstr(err, "loss"));
	CHECK(s_try("METRICS", "{\"step\":1,\"val_loss\":2}", err, sizeof err) == -EINVAL);
	snprintf(buf, sizeof buf, "{%s}", mem);
	CHECK(s_try("METRICS", buf, err, sizeof err) == -EINVAL && strstr(err, "step"));
	/* the optional val_loss is checked when present */
	snprintf(buf, sizeof buf, "{\"step\":1,%s,\"val_loss\":\"x\"}", row);
	CHECK(s_try("METRICS", buf, err, sizeof err) == -EINVAL && strstr(err, "val_loss"));
	/* encode refuses what decode refuses */
	json_t *p = json_pack("{s:i, s:i}", "step", 1, "params_bytes", -5);
	char *out = NULL;
	size_t len;
	CHECK(wire_encode(WIRE_METRICS, p, &out, &len, err, sizeof err) == -EINVAL && !out);
	json_decref(p);
}

static void test_snapshot_fields(void)
{
	char err[256];
	/* the checksum: exactly 16 lowercase hex digits */
	static const char *const bad_xxh3[] = {"0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0",
	                                       "0123456789abcdeg", "", "0x23456789abcdef"};
	char buf[512];
	for (size_t i = 0; i < sizeof bad_xxh3 / sizeof bad_xxh3[0]; i++) {
		snprintf(buf, sizeof buf, "{\"step\":1,\"file\":\"f\",\"bytes\":1,\"xxh3\":\"%s\"}", bad_xxh3[i]);
		CHECK(s_try("SNAPSHOT_WRITTEN", buf, err, sizeof err) == -EINVAL && strstr(err, "xxh3") &&
		      strstr(err, "hex"));
	}
	CHECK(s_try("SNAPSHOT_WRITTEN", "{\"step\":1,\"file\":\"f\",\"bytes\":1,\"xxh3\":12}", err,
	            sizeof err) == -EINVAL);
	/* negative step or size */
	CHECK(s_try("SNAPSHOT_WRITTEN",
	            "{\"step\":-1,\"file\":\"f\",\"bytes\":1,\"xxh3\":\"0123456789abcdef\"}", err,
	            sizeof err) == -EINVAL &&
	      strstr(err, "step"));
	CHECK(s_try("SNAPSHOT_WRITTEN",
	            "{\"step\":1,\"file\":\"f\",\"bytes\":-4,\"xxh3\":\"0123456789abcdef\"}", err,
	            sizeof err) == -EINVAL &&
	      strstr(err, "bytes"));
	CHECK(s_try("SNAPSHOT_WRITTEN",
	            "{\"step\":0,\"file\":\"f\",\"bytes\":0,\"xxh3\":\"0000000000000000\"}", err,
	            sizeof err) == 0);
	CHECK(s_try("SNAPSHOT_COMMITTED", "{\"step\":10,\"bytes\":1,\"path\":\"/p\",\"deleted\":[]}", err,
	            sizeof err) == 0);
	CHECK(s_try("SNAPSHOT_COMMITTED", "{\"step\":10,\"bytes\":1,\"path\":\"/p\",\"deleted\":5}", err,
	            sizeof err) == -EINVAL &&
	      strstr(err, "deleted"));
	CHECK(s_try("SNAPSHOT_COMMITTED", "{\"step\":10,\"bytes\":1,\"path\":\"/p\"}", err, sizeof err) ==
	          -EINVAL &&
	      strstr(err, "deleted") && strstr(err, "missing"));
	CHECK(s_try("SNAPSHOT_COMMIT", "{\"job\":\"j\",\"attempt\":1,\"step\":-3,\"files\":[]}", err,
	            sizeof err) == -EINVAL);
}

static void test_bad_frames(void)
{
	char err[256];
	wire_type_t t;
	json_t *p = NULL;
	const char *hb = s_valid[WIRE_HEARTBEAT];
	int rc = s_decode3("RMW2", "HEARTBEAT", hb, strlen(hb), &t, &p, err, sizeof err);
	CHECK(rc == -EPROTO && strstr(err, "RMW2") && wire_error_code(rc) == 400);
	rc = s_decode3("RMW1", "NO_SUCH", hb, strlen(hb), &t, &p, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "NO_SUCH") && wire_error_code(rc) == 404);
	rc = s_decode3("RMW1", "heartbeat", hb, strlen(hb), &t, &p, err, sizeof err);
	CHECK(rc == -ENOENT); /* types are case-sensitive */
	rc = s_decode3("RMW1", "HEARTBEAT", "{\"node\":", 8, &t, &p, err, sizeof err);
	CHECK(rc == -EINVAL && strstr(err, "not valid JSON"));
	rc = s_decode3("RMW1", "HEARTBEAT", "[1,2]", 5, &t, &p, err, sizeof err);
	CHECK(rc == -EINVAL && strstr(err, "object"));
	rc = s_decode3("RMW1", "HEARTBEAT", "{\"node\":\"a\",\"node\":\"b\"}", 23, &t, &p, err,
	               sizeof err);
	CHECK(rc == -EINVAL); /* duplicate keys refused */
	/* A NUL inside the type frame must not match a type name prefix. */
	const void *f3[3] = {"RMW1", "HEARTBEAT\0X", hb};
	size_t s3[3] = {4, 11, strlen(hb)};
	CHECK(wire_decode(3, f3, s3, &t, &p, err, sizeof err) == -ENOENT);
	/* Binary junk in the protocol frame is shown escaped. */
	const void *fj[3] = {"\x01\x02\"", "HEARTBEAT", hb};
	size_t sj[3] = {3, 9, strlen(hb)};
	CHECK(wire_decode(3, fj, sj, &t, &p, err, sizeof err) == -EPROTO && strstr(err, "\\x01"));
	/* frame counts */
	CHECK(wire_decode(2, f3, s3, &t, &p, err, sizeof err) == -EPROTO && strstr(err, "got 2"));
	CHECK(wire_decode(0, f3, s3, &t, &p, err, sizeof err) == -EPROTO);
	/* oversized */
	size_t big = WIRE_MAX_PAYLOAD_BYTES + 1;
	char *huge = malloc(big);
	memset(huge, ' ', big);
	rc = s_decode3("RMW1", "HEARTBEAT", huge, big, &t, &p, err, sizeof err);
	CHECK(rc == -EMSGSIZE && wire_error_code(rc) == 413);
	free(huge);
	CHECK(p == NULL);
}

static void test_encode_refuses(void)
{
	char err[256];
	char *buf = NULL;
	size_t len;
	json_t *p = json_pack("{s:s}", "node", "n");
	CHECK(wire_encode(WIRE_JOIN, p, &buf, &len, err, sizeof err) == -EINVAL && !buf);
	CHECK(wire_encode((wire_type_t)0, p, &buf, &len, err, sizeof err) == -EINVAL);
	json_decref(p);
	/* over the size limit */
	char *s = malloc(WIRE_MAX_PAYLOAD_BYTES + 10);
	memset(s, 'a', WIRE_MAX_PAYLOAD_BYTES + 9);
	s[WIRE_MAX_PAYLOAD_BYTES + 9] = '\0';
	p = json_pack("{s:s, s:s}", "key", "k", "value", s);
	CHECK(wire_encode(WIRE_KV_SET, p, &buf, &len, err, sizeof err) == -EMSGSIZE && !buf);
	json_decref(p);
	free(s);
}

/* A real ROUTER and DEALER over loopback TCP. */
static void test_sockets(void)
{
	void *ctx = zmq_ctx_new();
	void *router = zmq_socket(ctx, ZMQ_ROUTER);
	void *dealer = zmq_socket(ctx, ZMQ_DEALER);
	int timeout_ms = 5000, linger = 0;
	zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
	zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
	zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "agent/n1", 8);
	CHECK(zmq_bind(router, "tcp://127.0.0.1:*") == 0);
	char endpoint[256];
	size_t elen = sizeof endpoint;
	zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &elen);
	CHECK(zmq_connect(dealer, endpoint) == 0);

	char err[256] = "";
	unsigned char id[WIRE_MAX_IDENTITY_BYTES];
	size_t id_len = 0;
	wire_type_t t;
	json_t *p = NULL;

	/* nothing waiting */
	CHECK(wire_recv(router, ZMQ_DONTWAIT, id, &id_len, &t, &p, err, sizeof err) == -EAGAIN);

	json_t *hb = json_pack("{s:s}", "node", "n1");
	CHECK(wire_send(dealer, NULL, 0, WIRE_HEARTBEAT, hb) == 0);
	CHECK(wire_recv(router, 0, id, &id_len, &t, &p, err, sizeof err) == 0);
	CHECK(t == WIRE_HEARTBEAT && id_len == 8 && memcmp(id, "agent/n1", 8) == 0);
	CHECK(p && strcmp(json_string_value(json_object_get(p, "node")), "n1") == 0);
	json_decref(p);
	p = NULL;

	/* and back, addressed by identity */
	CHECK(wire_send(router, id, id_len, WIRE_HEARTBEAT, hb) == 0);
	CHECK(wire_recv(dealer, 0, NULL, NULL, &t, &p, err, sizeof err) == 0 && t == WIRE_HEARTBEAT);
	json_decref(p);
	p = NULL;
	/* a payload that misses its fields is refused before it is sent */
	CHECK(wire_send(dealer, NULL, 0, WIRE_JOIN, hb) == -EINVAL);
	json_decref(hb);

	/* malformed messages: identity kept, error named, message consumed */
	zmq_send(dealer, "RMW9", 4, ZMQ_SNDMORE);
	zmq_send(dealer, "HEARTBEAT", 9, ZMQ_SNDMORE);
	zmq_send(dealer, "{}", 2, 0);
	int rc = wire_recv(router, 0, id, &id_len, &t, &p, err, sizeof err);
	CHECK(rc == -EPROTO && id_len == 8 && strstr(err, "RMW9"));
	CHECK(wire_send_error(router, id, id_len, wire_error_code(rc), err) == 0);
	CHECK(wire_recv(dealer, 0, NULL, NULL, &t, &p, err, sizeof err) == 0 && t == WIRE_ERROR);
	CHECK(p && json_integer_value(json_object_get(p, "code")) == 400);
	json_decref(p);
	p = NULL;

	for (int i = 0; i < 12; i++) /* too many frames */
		zmq_send(dealer, "x", 1, i < 11 ? ZMQ_SNDMORE : 0);
	rc = wire_recv(router, 0, id, &id_len, &t, &p, err, sizeof err);
	CHECK(rc == -EPROTO && strstr(err, "got 12"));
	zmq_send(dealer, "RMW1", 4, 0); /* too few */
	rc = wire_recv(router, 0, id, &id_len, &t, &p, err, sizeof err);
	CHECK(rc == -EPROTO && strstr(err, "got 1"));
	/* the socket still works after all that */
	json_t *j = json_pack("{s:s, s:i, s:i}", "job", "j", "attempt", 1, "rank", 0);
	CHECK(wire_send(dealer, NULL, 0, WIRE_JOIN, j) == 0);
	CHECK(wire_recv(router, 0, id, &id_len, &t, &p, err, sizeof err) == 0 && t == WIRE_JOIN);
	json_decref(p);
	json_decref(j);

	zmq_close(dealer);
	zmq_close(router);
	zmq_ctx_term(ctx);
}

/* Recovery: JOINED's resume is null or {step >= 0, path non-empty}; the
 * optional METRICS, RANK_EXITED and FAILED fields are checked when present. */
static void test_recovery_fields(void)
{
	char err[256];
	const char *joined = "{\"job\":\"j\",\"attempt\":2,\"rank\":0,\"world_size\":2,\"spec\":{},"
	                     "\"metrics_every\":1,\"resume\":%s}";
	char buf[512];
	snprintf(buf, sizeof buf, joined, "null");
	CHECK(s_try("JOINED", buf, err, sizeof err) == 0);
	snprintf(buf, sizeof buf, joined, "{\"step\":20,\"path\":\"/ck/j/step-00000020\"}");
	CHECK(s_try("JOINED", buf, err, sizeof err) == 0);
	const char *bad_resume[] = {"{\"step\":-1,\"path\":\"/x\"}", "{\"step\":1,\"path\":\"\"}",
	                            "{\"step\":1}", "{\"path\":\"/x\"}", "{\"step\":1.5,\"path\":\"/x\"}",
	                            "20", "\"/x\"", "[]"};
	for (size_t i = 0; i < sizeof bad_resume / sizeof bad_resume[0]; i++) {
		snprintf(buf, sizeof buf, joined, bad_resume[i]);
		CHECK(s_try("JOINED", buf, err, sizeof err) == -EINVAL && strstr(err, "\"resume\""));
	}
	CHECK(s_try("JOINED", "{\"job\":\"j\",\"attempt\":2,\"rank\":0,\"world_size\":2,\"spec\":{},"
	                      "\"metrics_every\":1}", err, sizeof err) == -EINVAL && strstr(err, "resume"));

	const char *row = "{\"step\":21,\"loss\":2.5,\"lr\":1e-3,\"grad_norm\":1,\"tokens_per_s\":100,\"ms\":12.5%s}";
	snprintf(buf, sizeof buf, row, ",\"resumed_from_step\":20,\"load_ms\":15.5,\"rendezvous_ms\":40");
	CHECK(s_try("METRICS", buf, err, sizeof err) == 0);
	snprintf(buf, sizeof buf, row, ",\"resumed_from_step\":0,\"load_ms\":0,\"rendezvous_ms\":0.25");
	CHECK(s_try("METRICS", buf, err, sizeof err) == 0);
	struct {
		const char *extra, *field;
	} bad_metrics[] = {
		{",\"resumed_from_step\":-1", "resumed_from_step"}, {",\"resumed_from_step\":2.5", "resumed_from_step"},
		{",\"load_ms\":-0.5", "load_ms"},                     {",\"load_ms\":\"1\"", "load_ms"},
		{",\"rendezvous_ms\":-1", "rendezvous_ms"},           {",\"rendezvous_ms\":null", "rendezvous_ms"},
	};
	for (size_t i = 0; i < sizeof bad_metrics / sizeof bad_metrics[0]; i++) {
		snprintf(buf, sizeof buf, row, bad_metrics[i].extra);
		CHECK(s_try("METRICS", buf, err, sizeof err) == -EINVAL && strstr(err, bad_metrics[i].field) &&
		      strstr(err, ">= 0"));
	}

	const char *exited = "{\"job\":\"j\",\"attempt\":1,\"rank\":1,\"exit_code\":-1,\"signal\":9,"
	                     "\"error\":\"\"%s}";
	snprintf(buf, sizeof buf, exited, ",\"exited_at_us\":1700000000000000");
	CHECK(s_try("RANK_EXITED", buf, err, sizeof err) == 0);
	snprintf(buf, sizeof buf, exited, ",\"exited_at_us\":-5");
	CHECK(s_try("RANK_EXITED", buf, err, sizeof err) == -EINVAL && strstr(err, "exited_at_us"));
	snprintf(buf, sizeof buf, exited, ",\"exited_at_us\":1.5");
	CHECK(s_try("RANK_EXITED", buf, err, sizeof err) == -EINVAL && strstr(err, "exited_at_us"));

	CHECK(s_try("FAILED", "{\"reason\":\"boom\",\"exit_code\":3}", err, sizeof err) == 0);
	CHECK(s_try("FAILED", "{\"reason\":\"boom\",\"exit_code\":\"3\"}", err, sizeof err) == -EINVAL &&
	      strstr(err, "exit_code"));
}

/* The failure code: optional on FAILED, RANK_EXITED and SNAPSHOT_FAILED (old
 * payloads without it still decode), an integer >= 0 when present, and it
 * survives the round trip; exit statuses map to the kinds the coordinator
 * decides on. */
static void test_failure_code(void)
{
	char err[256], buf[512];
	const char *failed = "{\"reason\":\"boom\",\"exit_code\":2%s}";
	const char *exited = "{\"job\":\"j\",\"attempt\":1,\"rank\":1,\"exit_code\":3,\"signal\":0,"
	                     "\"error\":\"\"%s}";
	const char *snap = "{\"step\":20,\"error\":\"No space left on device\"%s}";
	const char *types[] = {"FAILED", "RANK_EXITED", "SNAPSHOT_FAILED"};
	const char *fmts[] = {failed, exited, snap};
	for (int t = 0; t < 3; t++) {
		snprintf(buf, sizeof buf, fmts[t], "");
		CHECK(s_try(types[t], buf, err, sizeof err) == 0); /* an old payload */
		snprintf(buf, sizeof buf, fmts[t], ",\"failure\":2");
		CHECK(s_try(types[t], buf, err, sizeof err) == 0);
		snprintf(buf, sizeof buf, fmts[t], ",\"failure\":99");
		CHECK(s_try(types[t], buf, err, sizeof err) == 0); /* a newer peer's kind: the receiver judges */
		snprintf(buf, sizeof buf, fmts[t], ",\"failure\":-1");
		CHECK(s_try(types[t], buf, err, sizeof err) == -EINVAL && strstr(err, "\"failure\""));
		snprintf(buf, sizeof buf, fmts[t], ",\"failure\":\"spec\"");
		CHECK(s_try(types[t], buf, err, sizeof err) == -EINVAL && strstr(err, "\"failure\""));
		snprintf(buf, sizeof buf, fmts[t], ",\"failure\":1.5");
		CHECK(s_try(types[t], buf, err, sizeof err) == -EINVAL && strstr(err, "\"failure\""));
	}
	/* encode and decode agree: the code comes back as sent */
	json_t *p = json_pack("{s:s, s:i, s:i}", "reason", "bad data", "exit_code", RM_EXIT_DATA, "failure",
	                      (int)rm_exit_failure(RM_EXIT_DATA, 0));
	char *enc = NULL;
	size_t len = 0;
	CHECK(wire_encode(WIRE_FAILED, p, &enc, &len, err, sizeof err) == 0);
	const void *frames[3] = {WIRE_PROTOCOL, "FAILED", enc};
	size_t sizes[3] = {strlen(WIRE_PROTOCOL), 6, len};
	wire_type_t type = 0;
	json_t *back = NULL;
	CHECK(enc && wire_decode(3, frames, sizes, &type, &back, err, sizeof err) == 0 && type == WIRE_FAILED);
	CHECK(back && json_integer_value(json_object_get(back, "failure")) == RM_FAILURE_DATA);
	json_decref(back);
	free(enc);
	json_decref(p);
	/* what the codes mean */
	CHECK(rm_exit_failure(0, 0) == RM_FAILURE_NONE && rm_exit_failure(-1, 9) == RM_FAILURE_SIGNAL);
	CHECK(rm_exit_failure(RM_EXIT_SPEC, 0) == RM_FAILURE_SPEC && rm_exit_failure(RM_EXIT_COMM, 0) == RM_FAILURE_COMM);
	CHECK(rm_exit_failure(RM_EXIT_EXEC, 0) == RM_FAILURE_SPAWN && rm_exit_failure(134, 0) == RM_FAILURE_UNKNOWN);
	CHECK(!rm_exit_retryable(RM_EXIT_SPEC, 0) && !rm_exit_retryable(RM_EXIT_DATA, 0) &&
	      !rm_exit_retryable(RM_EXIT_DIVERGED, 0) && !rm_exit_retryable(RM_EXIT_NOMEM, 0));
	CHECK(rm_exit_retryable(RM_EXIT_SPEC, 9)); /* a signal: whatever the status */
	int retryable[] = {RM_EXIT_OK, RM_EXIT_USAGE, RM_EXIT_COMM, RM_EXIT_ABORTED, RM_EXIT_WATCHDOG,
	                   RM_EXIT_EXEC, 42};
	for (size_t i = 0; i < sizeof retryable / sizeof retryable[0]; i++)
		CHECK(rm_exit_retryable(retryable[i], 0));
	CHECK(strcmp(rm_exit_describe(RM_EXIT_SPEC), "a job spec error") == 0);
	CHECK(strcmp(rm_exit_describe(RM_EXIT_DATA), "a data error") == 0);
	CHECK(strcmp(rm_exit_describe(RM_EXIT_DIVERGED), "training diverged") == 0);
	CHECK(rm_failure_valid(RM_FAILURE_MAX) && !rm_failure_valid(RM_FAILURE_MAX + 1) && !rm_failure_valid(-1));
	CHECK(rm_failure_retryable((rm_failure_t)99) && strcmp(rm_failure_name((rm_failure_t)99), "unknown") == 0);
	for (int k = 0; k <= RM_FAILURE_MAX; k++)
		CHECK(rm_failure_describe((rm_failure_t)k)[0] &&
		      (k == RM_FAILURE_UNKNOWN || strcmp(rm_failure_name((rm_failure_t)k), "unknown") != 0));
}

/* TRACE: the step's start on the wall clock is an integer >= 0 (Unix
 * microseconds), its duration a number >= 0; the events are an array
 * (their contents are the coordinator's to check: coordinatord/traces.c). */
static void test_trace_fields(void)
{
	char err[256], buf[512];
	const char *trace = "{\"step\":%s,\"start_unix_us\":%s,\"dur_us\":%s,\"events\":[]}";
	snprintf(buf, sizeof buf, trace, "3", "1763900000123456", "0");
	CHECK(s_try("TRACE", buf, err, sizeof err) == 0);
	snprintf(buf, sizeof buf, trace, "3", "0", "1e6");
	CHECK(s_try("TRACE", buf, err, sizeof err) == 0);
	struct {
		const char *step, *start, *dur, *field;
	} bad[] = {
		{"-1", "1", "1", "step"},          {"1.5", "1", "1", "step"},
		{"1", "-1", "1", "start_unix_us"}, {"1", "1.5", "1", "start_unix_us"},
		{"1", "\"1\"", "1", "start_unix_us"}, {"1", "1", "-0.5", "dur_us"},
		{"1", "1", "null", "dur_us"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(buf, sizeof buf, trace, bad[i].step, bad[i].start, bad[i].dur);
		CHECK(s_try("TRACE", buf, err, sizeof err) == -EINVAL && strstr(err, bad[i].field));
	}
	CHECK(s_try("TRACE", "{\"step\":1,\"start_unix_us\":1,\"dur_us\":1,\"events\":{}}", err,
	            sizeof err) == -EINVAL && strstr(err, "events"));
}

/* LOGS: dropped is a count (an integer >= 0), lines an array (each line's
 * fields are the coordinator's to check: coordinatord/store_logs.c). */
static void test_logs_fields(void)
{
	char err[256];
	CHECK(s_try("LOGS", "{\"job\":\"j\",\"attempt\":1,\"rank\":0,\"lines\":[],\"dropped\":7}", err,
	            sizeof err) == 0);
	CHECK(s_try("LOGS", "{\"job\":\"j\",\"attempt\":1,\"rank\":0,\"lines\":[],\"dropped\":-1}", err,
	            sizeof err) == -EINVAL && strstr(err, "dropped"));
	CHECK(s_try("LOGS", "{\"job\":\"j\",\"attempt\":1,\"rank\":0,\"lines\":{},\"dropped\":0}", err,
	            sizeof err) == -EINVAL && strstr(err, "lines"));
	CHECK(s_try("LOGS", "{\"job\":\"j\",\"attempt\":1,\"lines\":[],\"dropped\":0}", err, sizeof err) ==
	              -EINVAL && strstr(err, "rank"));
}

int main(void)
{
	s_run("every_type_round_trips", test_every_type_round_trips);
	s_run("each_field_missing_or_mistyped", test_each_field_missing_or_mistyped);
	s_run("metrics_memory", test_metrics_memory);
	s_run("snapshot_fields", test_snapshot_fields);
	s_run("recovery_fields", test_recovery_fields);
	s_run("trace_fields", test_trace_fields);
	s_run("logs_fields", test_logs_fields);
	s_run("failure_code", test_failure_code);
	s_run("bad_frames", test_bad_frames);
	s_run("encode_refuses", test_encode_refuses);
	s_run("sockets", test_sockets);
	printf("%d passed, %d failed\n", s_n_passed, s_n_failed);
	return s_n_failed ? 1 : 0;
}
