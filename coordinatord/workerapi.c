/*
 * workerapi: join tokens and agent keys over REST (see workerapi.h).
 */
#include "workerapi.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "enroll.h"
#include "store_keys.h"

#define WRITE_TIMEOUT_MS 10000

/* The JSON object body of a POST, or NULL after answering 400. */
static json_t *body_object(request_t *rq, enum MHD_Result *ret)
{
	json_error_t jerr;
	json_t *doc = rq->body.len ? json_loadb(rq->body.data, rq->body.len, 0, &jerr) : json_object();
	if (!json_is_object(doc)) {
		json_decref(doc);
		*ret = request_bad_request(rq, "the body must be a JSON object", NULL);
		return NULL;
	}
	return doc;
}

static enum MHD_Result call_broker(request_t *rq, const char *op, const char *a1, const char *a2)
{
	broker_client_t *bc = request_client(rq);
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	int r = bc ? broker_client_workers(bc, op, a1, a2, WRITE_TIMEOUT_MS, &reply) : -ENOTCONN;
	if (r < 0)
		return request_problem(rq, 503, "the writer loop did not answer in time; retry later", NULL);
	return request_reply_broker(rq, &reply, NULL);
}

/* An optional integer member as text ("" when absent); false after 400. */
static bool int_member(request_t *rq, json_t *doc, const char *name, char *out, size_t n, enum MHD_Result *ret)
{
	json_t *v = json_object_get(doc, name);
	out[0] = '\0';
	if (!v || json_is_null(v))
		return true;
	if (!json_is_integer(v)) {
		char detail[128], ptr[64];
		snprintf(detail, sizeof detail, "%s must be an integer", name);
		snprintf(ptr, sizeof ptr, "/%s", name);
		*ret = request_bad_request(rq, detail, ptr);
		return false;
	}
	snprintf(out, n, "%lld", (long long)json_integer_value(v));
	return true;
}

enum MHD_Result workerapi_join_token(request_t *rq)
{
	enum MHD_Result ret = MHD_NO;
	json_t *doc = body_object(rq, &ret);
	if (!doc)
		return ret;
	char uses[32], ttl[32];
	if (!int_member(rq, doc, "uses", uses, sizeof uses, &ret) ||
	    !int_member(rq, doc, "expires_in_s", ttl, sizeof ttl, &ret)) {
		json_decref(doc);
		return ret;
	}
	json_decref(doc);
	return call_broker(rq, ENROLL_OP_JOIN_TOKEN, uses, ttl);
}

enum MHD_Result workerapi_key_add(request_t *rq)
{
	enum MHD_Result ret = MHD_NO;
	json_t *doc = body_object(rq, &ret);
	if (!doc)
		return ret;
	json_t *name = json_object_get(doc, "name"), *key = json_object_get(doc, "public_key");
	if (!json_is_string(name)) {
		json_decref(doc);
		return request_bad_request(rq, "name must be a string (the agent's node name)", "/name");
	}
	if (!json_is_string(key)) {
		json_decref(doc);
		return request_bad_request(rq, "public_key must be a string (a Z85 CURVE public key)", "/public_key");
	}
	ret = call_broker(rq, ENROLL_OP_KEY_ADD, json_string_value(name), json_string_value(key));
	json_decref(doc);
	return ret;
}

enum MHD_Result workerapi_key_revoke(request_t *rq)
{
	if (!rq->id[0])
		return request_problem(rq, 404, "no key with that id", NULL);
	return call_broker(rq, ENROLL_OP_KEY_REVOKE, rq->id, "");
}

static int key_row(const store_key_t *k, void *userdata)
{
	json_t *arr = userdata;
	json_t *o = json_pack("{s:I, s:s, s:s, s:o, s:I, s:o, s:o}", "id", (json_int_t)k->id, "name", k->name,
	                      "public_key", k->public_key, "node", k->node[0] ? json_string(k->node) : json_null(),
	                      "created_at_us", (json_int_t)k->created_at_us, "last_used_at_us",
	                      k->last_used_at_us ? json_integer(k->last_used_at_us) : json_null(), "revoked_at_us",
	                      k->revoked_at_us ? json_integer(k->revoked_at_us) : json_null());
	return o && json_array_append_new(arr, o) == 0 ? 0 : -ENOMEM;
}

enum MHD_Result workerapi_keys(request_t *rq)
{
	store_t *st = request_reader(rq);
	json_t *arr = json_array();
	int r = !st ? -EIO : !arr ? -ENOMEM : store_key_list(st, key_row, arr);
	if (r < 0) {
		json_decref(arr);
		if (r == -ENOMEM)
			return request_problem(rq, 500, "out of memory while building the response", NULL);
		return request_db_unavailable(rq);
	}
	return request_reply_json(rq, 200, json_pack("{so}", "keys", arr));
}

void workerapi_annotate_keys(store_t *st, json_t *workers)
{
	size_t i;
	json_t *w;
	json_array_foreach(workers, i, w)
	{
		const char *node = json_string_value(json_object_get(w, "node"));
		store_key_t k;
		if (node && store_key_for_node(st, node, &k) == 0)
			json_object_set_new(w, "key", json_pack("{s:I, s:s}", "id", (json_int_t)k.id, "name", k.name));
		else
			json_object_set_new(w, "key", json_null());
	}
}
