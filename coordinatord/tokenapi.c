/*
 * tokenapi: the token routes and the writer loop's token commands (see
 * tokenapi.h).
 */
#include "tokenapi.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "auth.h"
#include "clock.h"
#include "jobview.h"
#include "log.h"
#include "problem.h"
#include "session.h"

#define WRITE_TIMEOUT_MS 10000
#define MAX_EXPIRES_IN_S (10LL * 366 * 24 * 3600)

static json_t *time_or_null(int64_t at_us)
{
	return at_us ? jobview_time(at_us) : json_null();
}

json_t *tokenapi_view(const store_token_t *t)
{
	return json_pack("{sI so so so so so so so}", "id", (json_int_t)t->id, "name", jobview_string(t->name), "role",
	                 jobview_string(t->role), "prefix", jobview_string(t->prefix), "created_at",
	                 jobview_time(t->created_at_us), "expires_at", time_or_null(t->expires_at_us), "last_used_at",
	                 time_or_null(t->last_used_at_us), "revoked_at", time_or_null(t->revoked_at_us));
}

/* ---- the writer's side ---- */

static void render_json(sbuf_t *body, json_t *doc)
{
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!text) {
		body->failed = true;
		return;
	}
	sbuf_puts(body, text);
	free(text);
}

static int apply_create(store_t *st, json_t *cmd, sbuf_t *body, int *ret_status)
{
	store_token_t t;
	memset(&t, 0, sizeof t);
	const char *name = NULL, *role = NULL, *prefix = NULL, *hash_hex = NULL;
	json_int_t created = 0, expires = 0;
	if (json_unpack(cmd, "{s:s s:s s:s s:s s:I s:I}", "name", &name, "role", &role, "prefix", &prefix, "hash",
	                &hash_hex, "created_at_us", &created, "expires_at_us", &expires) < 0 ||
	    strlen(name) >= sizeof t.name || strlen(role) >= sizeof t.role || strlen(prefix) >= sizeof t.prefix ||
	    sodium_hex2bin(t.hash, sizeof t.hash, hash_hex, strlen(hash_hex), NULL, NULL, NULL) != 0) {
		*ret_status = 400;
		problem_render(body, 400, "malformed token command", NULL);
		return 0;
	}
	memcpy(t.name, name, strlen(name) + 1);
	memcpy(t.role, role, strlen(role) + 1);
	memcpy(t.prefix, prefix, strlen(prefix) + 1);
	t.created_at_us = created;
	t.expires_at_us = expires;
	int r = store_token_insert(st, &t);
	if (r == -EEXIST) {
		char detail[200];
		snprintf(detail, sizeof detail,
		         "a token named \"%s\" already exists; revoke it first or choose another name", t.name);
		*ret_status = 409;
		problem_render(body, 409, detail, "/name");
		return 0;
	}
	if (r < 0)
		return r;
	*ret_status = 201;
	render_json(body, tokenapi_view(&t));
	log_info("token %" PRId64 " \"%s\" (%s) created", t.id, t.name, t.role);
	return 0;
}

static int apply_revoke(store_t *st, json_t *cmd, sbuf_t *body, int *ret_status)
{
	json_int_t id = 0;
	json_unpack(cmd, "{s:I}", "id", &id);
	int r = store_token_revoke(st, id, clock_wall_us());
	if (r == -ENOENT) {
		char detail[120];
		snprintf(detail, sizeof detail, "no token with id %" JSON_INTEGER_FORMAT " that is not already revoked", id);
		*ret_status = 404;
		problem_render(body, 404, detail, NULL);
		return 0;
	}
	store_token_t t;
	if (r == 0)
		r = store_token_get(st, id, &t);
	if (r < 0)
		return r;
	*ret_status = 200;
	render_json(body, tokenapi_view(&t));
	log_info("token %" PRId64 " \"%s\" revoked", t.id, t.name);
	return 0;
}

int tokenapi_apply(store_t *st, const char *text, sbuf_t *body, int *ret_status)
{
	sbuf_reset(body);
	json_t *cmd = json_loads(text, 0, NULL);
	const char *op = json_string_value(json_object_get(cmd, "op"));
	int r = 0;
	if (op && strcmp(op, "create") == 0) {
		r = apply_create(st, cmd, body, ret_status);
	} else if (op && strcmp(op, "revoke") == 0) {
		r = apply_revoke(st, cmd, body, ret_status);
	} else if (op && strcmp(op, "touch") == 0) {
		json_int_t id = 0;
		json_unpack(cmd, "{s:I}", "id", &id);
		r = store_token_touch(st, id, clock_wall_us());
		*ret_status = 200;
		sbuf_puts(body, "{}");
	} else {
		*ret_status = 400;
		problem_render(body, 400, "unknown token command", NULL);
	}
	json_decref(cmd);
	return r;
}

/* ---- commands (the HTTP side) ---- */

static int send_cmd(broker_client_t *bc, json_t *cmd, int timeout_ms, broker_reply_t *ret)
{
	char *text = cmd ? json_dumps(cmd, JSON_COMPACT) : NULL;
	json_decref(cmd);
	if (!text)
		return -ENOMEM;
	int r = broker_client_token(bc, text, timeout_ms, ret);
	free(text);
	return r;
}

int tokenapi_cmd_create(broker_client_t *bc, const store_token_t *t, int timeout_ms, broker_reply_t *ret)
{
	char hex[65];
	sodium_bin2hex(hex, sizeof hex, t->hash, sizeof t->hash);
	json_t *cmd = json_pack("{ss ss ss ss ss sI sI}", "op", "create", "name", t->name, "role", t->role, "prefix",
	                        t->prefix, "hash", hex, "created_at_us", (json_int_t)t->created_at_us, "expires_at_us",
	                        (json_int_t)t->expires_at_us);
	return send_cmd(bc, cmd, timeout_ms, ret);
}

void tokenapi_cmd_touch(broker_client_t *bc, int64_t id)
{
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	send_cmd(bc, json_pack("{ss sI}", "op", "touch", "id", (json_int_t)id), 0, &reply);
	broker_reply_clear(&reply);
}

/* ---- routes ---- */

static int list_fn(const store_token_t *t, void *userdata)
{
	json_t *v = tokenapi_view(t);
	return v && json_array_append_new(userdata, v) == 0 ? 0 : -ENOMEM;
}

enum MHD_Result tokenapi_list(request_t *rq)
{
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	json_t *items = json_array();
	int r = items ? store_token_list(st, list_fn, items) : -ENOMEM;
	if (r < 0) {
		json_decref(items);
		return r == -ENOMEM ? request_problem(rq, 500, "out of memory while building the response", NULL)
		                    : request_db_unavailable(rq);
	}
	return request_reply_json(rq, 200, json_pack("{so}", "tokens", items));
}

/* The body of POST /v1/tokens into *t: 0, or an answer queued in *ret. */
static int parse_create(request_t *rq, store_token_t *t, enum MHD_Result *ret)
{
	if (rq->too_large || rq->body.failed) {
		*ret = request_problem(rq, 413, "request body is too large", NULL);
		return -EINVAL;
	}
	json_error_t jerr;
	json_t *doc = json_loadb(rq->body.data ? rq->body.data : "", rq->body.len, 0, &jerr);
	const char *name = NULL, *role = NULL, *bad = NULL, *field = NULL;
	json_t *exp = NULL;
	auth_role_t r;
	if (!json_is_object(doc)) {
		bad = "the body must be a JSON object {name, role, expires_in_s?}";
		field = "";
	} else if (!(name = json_string_value(json_object_get(doc, "name"))) || !auth_name_valid(name)) {
		bad = "name must be 1 to 64 characters of A-Z a-z 0-9 . _ @ -";
		field = "/name";
	} else if (!(role = json_string_value(json_object_get(doc, "role"))) || auth_role_parse(role, &r) < 0) {
		bad = "role must be viewer, operator or admin";
		field = "/role";
	} else if ((exp = json_object_get(doc, "expires_in_s")) && !json_is_null(exp) &&
	           (!json_is_integer(exp) || json_integer_value(exp) < 1 ||
	            json_integer_value(exp) > MAX_EXPIRES_IN_S)) {
		bad = "expires_in_s must be an integer number of seconds from 1 to 10 years (or absent: never)";
		field = "/expires_in_s";
	} else {
		const char *k;
		json_t *v;
		json_object_foreach(doc, k, v) {
			if (strcmp(k, "name") != 0 && strcmp(k, "role") != 0 && strcmp(k, "expires_in_s") != 0) {
				bad = "unknown field (known: name, role, expires_in_s)";
				field = "";
				break;
			}
		}
	}
	if (bad) {
		*ret = request_bad_request(rq, bad, field);
		json_decref(doc);
		return -EINVAL;
	}
	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	snprintf(t->role, sizeof t->role, "%s", role);
	t->created_at_us = clock_wall_us();
	if (exp && json_is_integer(exp))
		t->expires_at_us = t->created_at_us + (int64_t)json_integer_value(exp) * 1000000;
	json_decref(doc);
	return 0;
}

enum MHD_Result tokenapi_create(request_t *rq)
{
	store_token_t t;
	enum MHD_Result answer;
	if (parse_create(rq, &t, &answer) < 0)
		return answer;
	char token[AUTH_TOKEN_BYTES];
	auth_token_make(token);
	auth_token_hash(token, strlen(token), t.hash);
	snprintf(t.prefix, sizeof t.prefix, "%.*s", AUTH_TOKEN_DISPLAY_LEN, token);
	broker_client_t *bc = request_client(rq);
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	int r = bc ? tokenapi_cmd_create(bc, &t, WRITE_TIMEOUT_MS, &reply) : -ENOTCONN;
	if (r < 0) {
		sodium_memzero(token, sizeof token);
		return request_problem(rq, 503, "the writer loop did not answer in time; list the tokens and retry",
		                       NULL);
	}
	if (reply.status != 201) {
		sodium_memzero(token, sizeof token);
		return request_reply_broker(rq, &reply, NULL);
	}
	json_t *doc = json_loads(reply.body, 0, NULL);
	broker_reply_clear(&reply);
	if (doc)
		json_object_set_new(doc, "token", json_string(token));
	sodium_memzero(token, sizeof token);
	log_info("token \"%s\" created by \"%s\"", t.name, rq->who.name);
	return request_reply_json(rq, 201, doc);
}

enum MHD_Result tokenapi_revoke(request_t *rq)
{
	char *end = NULL;
	long long id = rq->id[0] ? strtoll(rq->id, &end, 10) : 0;
	if (!rq->id[0] || *end || id < 1 || strspn(rq->id, "0123456789") != strlen(rq->id))
		return request_problem(rq, 404, "no token with that id (ids are the integers GET /v1/tokens lists)", NULL);
	broker_client_t *bc = request_client(rq);
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	json_t *cmd = json_pack("{ss sI}", "op", "revoke", "id", (json_int_t)id);
	int r = bc ? send_cmd(bc, cmd, WRITE_TIMEOUT_MS, &reply) : -ENOTCONN;
	if (!bc)
		json_decref(cmd);
	if (r < 0)
		return request_problem(rq, 503, "the writer loop did not answer in time; retry later", NULL);
	if (reply.status == 200) {
		auth_forget_token(id);
		session_forget_token(id);
		log_info("token %lld revoked by \"%s\"", id, rq->who.name);
	}
	return request_reply_broker(rq, &reply, NULL);
}
