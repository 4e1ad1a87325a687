/*
 * wire: codec and socket helpers for the coordinator <-> worker protocol
 * (see wire.h for the frames, the message types and their fields).
 *
 * Validation is table-driven: each type lists its fields, their JSON kinds
 * and whether they are required, optional, or part of an all-or-none set
 * (METRICS: the training row and the memory figures), so decode and encode
 * refuse exactly the same payloads.
 */
#include "wire.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

typedef enum {
	F_STR,
	F_INT,
	F_UINT,  /* an integer >= 0 */
	F_NUM,
	F_BOOL,
	F_ARR,
	F_OBJ,
	F_HEX16, /* 16 lowercase hex digits (an XXH3-64 checksum) */
	F_UNUM,  /* a number >= 0 */
	F_RESUME, /* null, or {step: integer >= 0, path: non-empty string} */
} field_kind_t;

/* A field's presence: required, optional (checked when present), or one of
 * the all-or-none sets SET_A / SET_B (see type_desc_t.need_set). */
enum { REQ = 0, OPT, SET_A, SET_B, N_PRESENCE };

typedef struct {
	const char *name;
	field_kind_t kind;
	int presence;
} field_t;

#define MAX_FIELDS 20

typedef struct {
	const char *name;
	field_t fields[MAX_FIELDS]; /* terminated by a NULL name */
	bool need_set;              /* at least one of its sets must be present */
	const char *sets_help;      /* what to send, for the error when none is */
} type_desc_t;

/* Indexed by wire_type_t; entry 0 unused. */
static const type_desc_t types[WIRE_N_TYPES + 1] = {
	[WIRE_REGISTER] = {"REGISTER",
	                   {{"node", F_STR},
	                    {"devices", F_ARR},
	                    {"ranks", F_ARR},
	                    {"checkpoint_root", F_STR, OPT},
	                    {"advertise", F_STR, OPT},
	                    {"programs", F_BOOL, OPT},
	                    {"program_ports", F_ARR, OPT}}},
	[WIRE_HEARTBEAT] = {"HEARTBEAT", {{"node", F_STR}}},
	[WIRE_RANK_EXITED] = {"RANK_EXITED",
	                      {{"job", F_STR},
	                       {"attempt", F_INT},
	                       {"rank", F_INT},
	                       {"exit_code", F_INT},
	                       {"signal", F_INT},
	                       {"error", F_STR},
	                       {"exited_at_us", F_UINT, OPT},
	                       {"failure", F_UINT, OPT}}},
	[WIRE_REGISTERED] = {"REGISTERED", {{"heartbeat_ms", F_INT}, {"dead_after", F_INT}}},
	[WIRE_SPAWN] = {"SPAWN",
	                {{"job", F_STR},
	                 {"attempt", F_INT},
	                 {"rank", F_INT},
	                 {"world_size", F_INT},
	                 {"device", F_OBJ},
	                 {"adopt", F_INT, OPT},
	                 {"program", F_OBJ, OPT},
	                 {"torch", F_OBJ, OPT},
	                 {"env", F_OBJ, OPT}}},
	[WIRE_KILL] = {"KILL", {{"job", F_STR}, {"attempt", F_INT}, {"rank", F_INT}}},
	[WIRE_JOIN] = {"JOIN", {{"job", F_STR}, {"attempt", F_INT}, {"rank", F_INT}}},
	[WIRE_KV_SET] = {"KV_SET", {{"key", F_STR}, {"value", F_STR}}},
	[WIRE_KV_GET] = {"KV_GET", {{"key", F_STR}, {"timeout_ms", F_INT}}},
	[WIRE_METRICS] = {"METRICS",
	                  {{"step", F_INT},
	                   {"loss", F_NUM, SET_A},
	                   {"lr", F_NUM, SET_A},
	                   {"grad_norm", F_NUM, SET_A},
	                   {"tokens_per_s", F_NUM, SET_A},
	                   {"ms", F_NUM, SET_A},
	                   {"val_loss", F_NUM, OPT},
	                   {"params_bytes", F_UINT, SET_B},
	                   {"grads_bytes", F_UINT, SET_B},
	                   {"optim_bytes", F_UINT, SET_B},
	                   {"activations_bytes", F_UINT, SET_B},
	                   {"resumed_from_step", F_UINT, OPT},
	                   {"load_ms", F_UNUM, OPT},
	                   {"rendezvous_ms", F_UNUM, OPT},
	                   {"snapshot_skipped", F_STR, OPT},
	                   {"prev_step", F_UINT, OPT}},
	                  true,
	                  "loss, lr, grad_norm, tokens_per_s and ms, or params_bytes, grads_bytes, "
	                  "optim_bytes and activations_bytes, or both"},
	[WIRE_DONE] = {"DONE", {{"step", F_INT}, {"loss", F_NUM}}},
	[WIRE_FAILED] = {"FAILED", {{"reason", F_STR}, {"exit_code", F_INT, OPT}, {"failure", F_UINT, OPT}}},
	[WIRE_JOINED] = {"JOINED",
	                 {{"job", F_STR},
	                  {"attempt", F_INT},
	                  {"rank", F_INT},
	                  {"world_size", F_INT},
	                  {"spec", F_OBJ},
	                  {"metrics_every", F_INT},
	                  {"resume", F_RESUME}}},
	[WIRE_KV_OK] = {"KV_OK", {{"key", F_STR}}},
	[WIRE_KV_VALUE] = {"KV_VALUE", {{"key", F_STR}, {"found", F_BOOL}, {"value", F_STR}}},
	[WIRE_ABORT] = {"ABORT", {{"job", F_STR}, {"attempt", F_INT}, {"reason", F_STR}, {"rejoin", F_BOOL, OPT}}},
	[WIRE_ERROR] = {"ERROR", {{"code", F_INT}, {"detail", F_STR}}},
	[WIRE_SNAPSHOT_WRITTEN] = {"SNAPSHOT_WRITTEN",
	                           {{"step", F_UINT}, {"file", F_STR}, {"bytes", F_UINT}, {"xxh3", F_HEX16}}},
	[WIRE_SNAPSHOT_COMMIT] = {"SNAPSHOT_COMMIT",
	                          {{"job", F_STR}, {"attempt", F_INT}, {"step", F_UINT}, {"files", F_ARR}}},
	[WIRE_SNAPSHOT_COMMITTED] = {"SNAPSHOT_COMMITTED",
	                             {{"step", F_UINT}, {"bytes", F_UINT}, {"path", F_STR}, {"deleted", F_ARR}}},
	[WIRE_METRICS_RESEND] = {"METRICS_RESEND", {{"from_step", F_UINT}, {"to_step", F_UINT}}},
	[WIRE_PARKED] = {"PARKED", {{"step", F_UINT}}},
	[WIRE_REJOIN] = {"REJOIN", {{"job", F_STR}, {"attempt", F_INT}}},
	[WIRE_SNAPSHOT_FAILED] = {"SNAPSHOT_FAILED", {{"step", F_UINT}, {"error", F_STR}, {"failure", F_UINT, OPT}}},
	[WIRE_LOGS] = {"LOGS",
	               {{"job", F_STR}, {"attempt", F_INT}, {"rank", F_INT}, {"lines", F_ARR}, {"dropped", F_UINT}}},
	[WIRE_ENROLL] = {"ENROLL", {{"node", F_STR}, {"token", F_STR}}},
	[WIRE_ENROLLED] = {"ENROLLED", {{"key_id", F_UINT}, {"node", F_STR}}},
	[WIRE_RANK_STARTED] = {"RANK_STARTED", {{"job", F_STR}, {"attempt", F_INT}, {"rank", F_INT}, {"pid", F_INT}}},
	[WIRE_PROGRAM_METRICS] = {"PROGRAM_METRICS", {{"job", F_STR}, {"attempt", F_INT}, {"rank", F_INT}, {"row", F_OBJ}}},
	[WIRE_TRACE] = {"TRACE",
	                {{"step", F_UINT}, {"start_unix_us", F_UINT}, {"dur_us", F_UNUM}, {"events", F_ARR}}},
};

static const char *kind_name(field_kind_t k)
{
	switch (k) {
	case F_STR: return "a string";
	case F_INT: return "an integer";
	case F_UINT: return "an integer >= 0";
	case F_NUM: return "a number";
	case F_BOOL: return "a boolean";
	case F_ARR: return "an array";
	case F_OBJ: return "an object";
	case F_HEX16: return "16 lowercase hex digits";
	case F_UNUM: return "a number >= 0";
	case F_RESUME: return "null or {\"step\": integer >= 0, \"path\": non-empty string}";
	}
	return "?";
}

static bool kind_matches(const json_t *v, field_kind_t k)
{
	switch (k) {
	case F_STR: return json_is_string(v);
	case F_INT: return json_is_integer(v);
	case F_UINT: return json_is_integer(v) && json_integer_value(v) >= 0;
	case F_NUM: return json_is_number(v);
	case F_BOOL: return json_is_boolean(v);
	case F_ARR: return json_is_array(v);
	case F_OBJ: return json_is_object(v);
	case F_HEX16:
		return json_is_string(v) && json_string_length(v) == 16 &&
		       strspn(json_string_value(v), "0123456789abcdef") == 16;
	case F_UNUM: return json_is_number(v) && json_number_value(v) >= 0;
	case F_RESUME: {
		if (json_is_null(v))
			return true;
		const json_t *step = json_object_get(v, "step"), *path = json_object_get(v, "path");
		return json_is_object(v) && json_is_integer(step) && json_integer_value(step) >= 0 &&
		       json_is_string(path) && json_string_length(path) > 0;
	}
	}
	return false;
}

static bool type_valid(wire_type_t type)
{
	return type >= WIRE_REGISTER && type <= WIRE_N_TYPES;
}

const char *wire_type_name(wire_type_t type)
{
	return type_valid(type) ? types[type].name : "?";
}

int wire_type_from_name(const char *name, size_t len, wire_type_t *ret_type)
{
	for (int t = WIRE_REGISTER; t <= WIRE_N_TYPES; t++) {
		if (strlen(types[t].name) == len && memcmp(types[t].name, name, len) == 0) {
			*ret_type = (wire_type_t)t;
			return 0;
		}
	}
	return -ENOENT;
}

/* 0, or -EINVAL with `err` naming the field that is missing or mistyped. */
static int check_fields(wire_type_t type, const json_t *payload, char *err, size_t errlen)
{
	const type_desc_t *td = &types[type];
	if (!json_is_object(payload)) {
		snprintf(err, errlen, "%s: payload must be a JSON object", td->name);
		return -EINVAL;
	}
	/* per set: the first field present and the first one missing */
	const char *present[N_PRESENCE] = {NULL}, *missing[N_PRESENCE] = {NULL};
	for (const field_t *f = td->fields; f->name; f++) {
		const json_t *v = json_object_get(payload, f->name);
		if (!v) {
			if (f->presence == REQ) {
				snprintf(err, errlen, "%s: missing field \"%s\"", td->name, f->name);
				return -EINVAL;
			}
			if (!missing[f->presence])
				missing[f->presence] = f->name;
			continue;
		}
		if (!kind_matches(v, f->kind)) {
			snprintf(err, errlen, "%s: field \"%s\" must be %s", td->name, f->name, kind_name(f->kind));
			return -EINVAL;
		}
		if (!present[f->presence])
			present[f->presence] = f->name;
	}
	bool any_set = false;
	for (int s = SET_A; s < N_PRESENCE; s++) {
		if (present[s] && missing[s]) {
			snprintf(err, errlen, "%s: missing field \"%s\" (sent with \"%s\")", td->name, missing[s],
			         present[s]);
			return -EINVAL;
		}
		any_set = any_set || present[s];
	}
	if (td->need_set && !any_set) {
		snprintf(err, errlen, "%s: missing fields: send %s", td->name, td->sets_help);
		return -EINVAL;
	}
	return 0;
}

/* Copy at most 32 printable bytes of `p` for an error message. */
static void printable(const void *p, size_t n, char *out, size_t outlen)
{
	size_t j = 0;
	const unsigned char *s = p;
	for (size_t i = 0; i < n && i < 32 && j + 5 < outlen; i++) {
		if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\')
			out[j++] = (char)s[i];
		else
			j += (size_t)snprintf(out + j, outlen - j, "\\x%02x", s[i]);
	}
	if (n > 32 && j + 4 < outlen) {
		memcpy(out + j, "...", 3);
		j += 3;
	}
	out[j] = '\0';
}

int wire_decode(size_t n_frames, const void *const *frames, const size_t *sizes,
                wire_type_t *ret_type, json_t **ret_payload, char *err, size_t errlen)
{
	char shown[200];
	if (n_frames != 3) {
		snprintf(err, errlen, "expected 3 frames [protocol][type][payload], got %zu", n_frames);
		return -EPROTO;
	}
	if (sizes[0] != strlen(WIRE_PROTOCOL) || memcmp(frames[0], WIRE_PROTOCOL, sizes[0]) != 0) {
		printable(frames[0], sizes[0], shown, sizeof shown);
		snprintf(err, errlen, "unsupported protocol \"%s\" (this coordinator speaks %s)", shown,
		         WIRE_PROTOCOL);
		return -EPROTO;
	}
	wire_type_t type;
	if (wire_type_from_name(frames[1], sizes[1], &type) != 0) {
		printable(frames[1], sizes[1], shown, sizeof shown);
		snprintf(err, errlen, "unknown message type \"%s\"", shown);
		return -ENOENT;
	}
	if (sizes[2] > WIRE_MAX_PAYLOAD_BYTES) {
		snprintf(err, errlen, "%s: payload of %zu bytes is over the limit of %d",
		         types[type].name, sizes[2], WIRE_MAX_PAYLOAD_BYTES);
		return -EMSGSIZE;
	}
	json_error_t jerr;
	json_t *payload = json_loadb(frames[2], sizes[2], JSON_REJECT_DUPLICATES, &jerr);
	if (!payload) {
		snprintf(err, errlen, "%s: payload is not valid JSON: %s (byte %d)", types[type].name,
		         jerr.text, jerr.position);
		return -EINVAL;
	}
	int rc = check_fields(type, payload, err, errlen);
	if (rc != 0) {
		json_decref(payload);
		return rc;
	}
	*ret_type = type;
	*ret_payload = payload;
	return 0;
}

int wire_error_code(int decode_rc)
{
	switch (decode_rc) {
	case -ENOENT: return 404;
	case -EMSGSIZE: return 413;
	default: return 400;
	}
}

int wire_encode(wire_type_t type, const json_t *payload, char **ret_buf, size_t *ret_len,
                char *err, size_t errlen)
{
	if (!type_valid(type)) {
		snprintf(err, errlen, "unknown message type %d", (int)type);
		return -EINVAL;
	}
	int rc = check_fields(type, payload, err, errlen);
	if (rc != 0)
		return rc;
	char *buf = json_dumps(payload, JSON_COMPACT);
	if (!buf) {
		snprintf(err, errlen, "%s: out of memory encoding the payload", types[type].name);
		return -ENOMEM;
	}
	size_t len = strlen(buf);
	if (len > WIRE_MAX_PAYLOAD_BYTES) {
		snprintf(err, errlen, "%s: payload of %zu bytes is over the limit of %d",
		         types[type].name, len, WIRE_MAX_PAYLOAD_BYTES);
		free(buf);
		return -EMSGSIZE;
	}
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

static int send_frames(void *sock, const void *identity, size_t identity_len, const char *type,
                       const char *payload, size_t payload_len)
{
	const int f = ZMQ_DONTWAIT;
	if (identity && zmq_send(sock, identity, identity_len, f | ZMQ_SNDMORE) < 0)
		return -errno;
	/* Once the first frame is queued the rest of the message cannot fail
	 * with EAGAIN (ZeroMQ queues multipart messages atomically). */
	if (zmq_send(sock, WIRE_PROTOCOL, strlen(WIRE_PROTOCOL), f | ZMQ_SNDMORE) < 0 ||
	    zmq_send(sock, type, strlen(type), f | ZMQ_SNDMORE) < 0 ||
	    zmq_send(sock, payload, payload_len, f) < 0)
		return -errno;
	return 0;
}

int wire_send(void *sock, const void *identity, size_t identity_len, wire_type_t type,
              const json_t *payload)
{
	char err[256];
	char *buf;
	size_t len;
	int rc = wire_encode(type, payload, &buf, &len, err, sizeof err);
	if (rc != 0)
		return rc;
	rc = send_frames(sock, identity, identity_len, types[type].name, buf, len);
	free(buf);
	return rc;
}

int wire_send_error(void *sock, const void *identity, size_t identity_len, int code,
                    const char *detail)
{
	json_t *p = json_pack("{s:i, s:s}", "code", code, "detail", detail ? detail : "");
	if (!p)
		return -ENOMEM;
	int rc = wire_send(sock, identity, identity_len, WIRE_ERROR, p);
	json_decref(p);
	return rc;
}

#define MAX_RECV_PARTS 8

int wire_recv(void *sock, int flags, unsigned char *ret_identity, size_t *ret_identity_len,
              wire_type_t *ret_type, json_t **ret_payload, char *err, size_t errlen)
{
	return wire_recv_peer(sock, flags, ret_identity, ret_identity_len, NULL, 0, ret_type, ret_payload, err,
	                      errlen);
}

int wire_recv_peer(void *sock, int flags, unsigned char *ret_identity, size_t *ret_identity_len,
                   char *ret_user_id, size_t user_id_len, wire_type_t *ret_type, json_t **ret_payload,
                   char *err, size_t errlen)
{
	zmq_msg_t parts[MAX_RECV_PARTS];
	size_t n = 0, dropped = 0;
	int rc = 0;
	for (;;) {
		zmq_msg_t *m = &parts[n < MAX_RECV_PARTS ? n : MAX_RECV_PARTS - 1];
		if (n >= MAX_RECV_PARTS) {
			/* Too many frames: keep draining into the last slot. */
			zmq_msg_close(m);
			dropped++;
		}
		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, (n == 0 && dropped == 0) ? flags : 0) < 0) {
			rc = errno == EAGAIN ? -EAGAIN : -errno;
			if (n < MAX_RECV_PARTS) /* else m is parts[n - 1], closed below */
				zmq_msg_close(m);
			break;
		}
		if (n < MAX_RECV_PARTS)
			n++;
		if (!zmq_msg_more(m))
			break;
	}
	if (rc != 0) {
		for (size_t i = 0; i < n; i++)
			zmq_msg_close(&parts[i]);
		if (rc != -EAGAIN)
			snprintf(err, errlen, "receive failed: %s", zmq_strerror(-rc));
		return rc;
	}

	size_t first = 0;
	if (ret_user_id && user_id_len > 0) {
		/* the connection's authenticated User-Id (set by the ZAP handler) */
		/* a frame the peer sent: a ROUTER's identity frame carries no metadata */
		const char *uid = n > 0 ? zmq_msg_gets(&parts[n - 1], "User-Id") : NULL;
		snprintf(ret_user_id, user_id_len, "%s", uid ? uid : "");
	}
	if (ret_identity) {
		size_t len = zmq_msg_size(&parts[0]);
		if (len > WIRE_MAX_IDENTITY_BYTES)
			len = WIRE_MAX_IDENTITY_BYTES;
		memcpy(ret_identity, zmq_msg_data(&parts[0]), len);
		*ret_identity_len = len;
		first = 1;
	}
	if (dropped > 0) {
		snprintf(err, errlen, "expected 3 frames [protocol][type][payload], got %zu",
		         n - first + dropped);
		rc = -EPROTO;
	} else {
		const void *data[MAX_RECV_PARTS];
		size_t sizes[MAX_RECV_PARTS];
		for (size_t i = first; i < n; i++) {
			data[i - first] = zmq_msg_data(&parts[i]);
			sizes[i - first] = zmq_msg_size(&parts[i]);
		}
		rc = wire_decode(n - first, data, sizes, ret_type, ret_payload, err, errlen);
	}
	for (size_t i = 0; i < n; i++)
		zmq_msg_close(&parts[i]);
	return rc;
}
