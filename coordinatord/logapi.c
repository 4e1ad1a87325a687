/*
 * logapi: GET /v1/jobs/{id}/logs (see logapi.h and docs/coordinator.md
 * "Job logs"). Parameters are checked before the database is read; each bad
 * one gets a 400 naming it. A line is shown as api/openapi.yaml's LogLine:
 * {"seq", "rank", "attempt", "stream", "time" (RFC 3339 UTC), "text"}.
 */
#include "logapi.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"
#include "feed.h"
#include "streamapi.h"

typedef struct {
	const char *bad_key;
	const char *repeated;
} log_query_t;

static const char *const s_params[] = {"rank", "attempt", "tail", "since", "follow"};

static enum MHD_Result s_query_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	(void)value;
	log_query_t *q = cls;
	bool known = false;
	for (size_t i = 0; i < sizeof s_params / sizeof s_params[0]; i++)
		known = known || strcmp(key, s_params[i]) == 0;
	if (!known && !q->bad_key)
		q->bad_key = key;
	return MHD_YES;
}

/* Query parameter `key` as an integer in [lo, hi] into *ret (left alone when
 * absent); -EINVAL with `detail` filled when it is not one. */
static int s_query_int(request_t *rq, const char *key, long long lo, long long hi, long long *ret, char *detail,
                       size_t detail_len)
{
	const char *v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, key);
	if (!v)
		return 0;
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi) {
		snprintf(detail, detail_len, "%s must be an integer from %lld to %lld (got \"%.64s\")", key, lo, hi, v);
		return -EINVAL;
	}
	*ret = n;
	return 0;
}

typedef struct {
	json_t *lines;
	int64_t last_seq;
} list_ctx_t;

static int s_line_fn(const store_log_line_t *l, void *userdata)
{
	list_ctx_t *c = userdata;
	json_t *o = feed_log_line_json(l);
	if (!o || json_array_append_new(c->lines, o) < 0)
		return -ENOMEM;
	c->last_seq = l->seq;
	return 0;
}

/* Parse the parameters into *q; a 400 answered into *ret_answer otherwise. */
static bool s_parse(request_t *rq, store_log_query_t *q, bool *ret_follow, enum MHD_Result *ret_answer)
{
	char detail[512];
	log_query_t lq = {0};
	MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, s_query_iter, &lq);
	if (lq.bad_key) {
		snprintf(detail, sizeof detail,
		         "unknown query parameter \"%.64s\" (allowed: rank, attempt, tail, since, follow)", lq.bad_key);
		*ret_answer = request_bad_request(rq, detail, lq.bad_key);
		return false;
	}
	long long rank = -1, attempt = -1, tail = 0, since = 0, follow = 0;
	struct {
		const char *key;
		long long lo, hi, *v;
	} ints[] = {
		{"rank", 0, JOBSPEC_MAX_WORLD_SIZE - 1, &rank},
		{"attempt", 1, INT32_MAX, &attempt},
		{"tail", 1, LOGAPI_MAX_TAIL, &tail},
		{"since", 0, INT64_MAX, &since},
		{"follow", 0, 1, &follow},
	};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		if (s_query_int(rq, ints[i].key, ints[i].lo, ints[i].hi, ints[i].v, detail, sizeof detail) < 0) {
			*ret_answer = request_bad_request(rq, detail, ints[i].key);
			return false;
		}
	}
	*q = (store_log_query_t){.attempt = (int)attempt, .rank = (int)rank, .since = since, .tail = (int)tail,
	                         .limit = LOGAPI_PAGE_LINES};
	*ret_follow = follow == 1;
	return true;
}

enum MHD_Result logapi_logs(request_t *rq)
{
	if (!request_plausible_id(rq->id))
		return request_job_not_found(rq);
	store_log_query_t q;
	bool follow = false;
	enum MHD_Result answer;
	if (!s_parse(rq, &q, &follow, &answer))
		return answer;
	if (follow)
		return streamapi_logs(rq, &q);
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	list_ctx_t c = {.lines = json_array(), .last_seq = q.since};
	int64_t dropped = 0;
	int r = c.lines ? store_log_list(st, rq->id, &q, s_line_fn, &c) : -ENOMEM;
	if (r == 0)
		r = store_log_dropped(st, rq->id, &dropped);
	if (r == -ENOENT) {
		json_decref(c.lines);
		return request_job_not_found(rq);
	}
	if (r < 0) {
		json_decref(c.lines);
		return request_db_unavailable(rq);
	}
	json_t *doc = json_pack("{s:o, s:I, s:I}", "lines", c.lines, "next", (json_int_t)c.last_seq, "dropped",
	                        (json_int_t)dropped);
	return request_reply_json(rq, 200, doc);
}
