/*
 * request: the request context and the answers handlers give (see request.h).
 */
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "problem.h"

store_t *request_reader(request_t *rq)
{
	request_thread_t *t = rq->thread;
	if (!t->reader) {
		char err[512];
		t->reader = store_open(t->db_path, STORE_OPEN_READER, err, sizeof err);
		if (!t->reader)
			log_error("http: cannot open a reader: %s", err);
	}
	return t->reader;
}

broker_client_t *request_client(request_t *rq)
{
	request_thread_t *t = rq->thread;
	if (!t->client) {
		t->client = broker_client_new(t->zctx);
		if (!t->client)
			log_error("http: cannot connect to the writer loop");
	}
	return t->client;
}

void request_thread_free(request_thread_t *t)
{
	if (!t)
		return;
	store_close(t->reader);
	broker_client_free(t->client);
	sbuf_free(&t->out);
	free(t);
}

enum MHD_Result request_respond(request_t *rq, int status, const char *ctype, void *body, size_t len,
                                enum MHD_ResponseMemoryMode mode, const char *location, bool replayed)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
	if (!resp) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (status == 405 && rq->allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, rq->allow);
	if (location)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
	if (replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	if (rq->extra_header && rq->extra_value)
		MHD_add_response_header(resp, rq->extra_header, rq->extra_value);
	enum MHD_Result r = MHD_queue_response(rq->conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	metrics_record(rq->label, rq->method, status, clock_mono_us() - rq->start_us);
	if (status >= 500)
		log_warn("http: %s answered %d", rq->path, status);
	else if (log_enabled(LOG_DEBUG))
		log_debug("http: %s answered %d", rq->path, status);
	return r;
}

enum MHD_Result request_reply_out(request_t *rq, int status, const char *ctype)
{
	sbuf_t *out = &rq->thread->out;
	if (out->failed)
		return request_problem(rq, 500, "out of memory while building the response", NULL);
	return request_respond(rq, status, ctype, out->data ? out->data : (char *)"", out->len, MHD_RESPMEM_MUST_COPY,
	                       NULL, false);
}

enum MHD_Result request_reply_json(request_t *rq, int status, json_t *doc)
{
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!text)
		return request_problem(rq, 500, "out of memory while building the response", NULL);
	return request_respond(rq, status, REQUEST_JSON_TYPE, text, strlen(text), MHD_RESPMEM_MUST_FREE, NULL,
	                       false);
}

enum MHD_Result request_reply_broker(request_t *rq, broker_reply_t *reply, const char *location)
{
	const char *ctype = reply->status >= 400 ? PROBLEM_CONTENT_TYPE : REQUEST_JSON_TYPE;
	enum MHD_Result r = request_respond(rq, reply->status, ctype, reply->body, reply->body_len,
	                                    MHD_RESPMEM_MUST_FREE, location, reply->replayed);
	reply->body = NULL; /* owned by the response now */
	return r;
}

enum MHD_Result request_problem(request_t *rq, int status, const char *detail, const char *pointer)
{
	size_t len;
	char *body = problem_dumps(status, detail, pointer, &len);
	if (!body)
		return MHD_NO;
	return request_respond(rq, status, PROBLEM_CONTENT_TYPE, body, len, MHD_RESPMEM_MUST_FREE, NULL, false);
}

enum MHD_Result request_problem_retry(request_t *rq, int status, const char *detail, int64_t retry_after_s)
{
	char secs[24];
	snprintf(secs, sizeof secs, "%lld", (long long)retry_after_s);
	const char *header = rq->extra_header, *value = rq->extra_value;
	rq->extra_header = MHD_HTTP_HEADER_RETRY_AFTER;
	rq->extra_value = secs;
	enum MHD_Result r = request_problem(rq, status, detail, NULL);
	rq->extra_header = header;
	rq->extra_value = value;
	return r;
}

enum MHD_Result request_bad_request(request_t *rq, const char *detail, const char *field)
{
	return request_problem(rq, 400, detail, field);
}

enum MHD_Result request_no_route(request_t *rq)
{
	char detail[200];
	snprintf(detail, sizeof detail, "no route %.100s%s (see api/openapi.yaml for the routes served)", rq->url,
	         strlen(rq->url) > 100 ? "..." : "");
	return request_problem(rq, 404, detail, NULL);
}

enum MHD_Result request_method_not_allowed(request_t *rq)
{
	char detail[200];
	snprintf(detail, sizeof detail, "method %.16s is not allowed on %s (allowed: %s)", rq->method_name, rq->path,
	         rq->allow);
	return request_problem(rq, 405, detail, NULL);
}

enum MHD_Result request_job_not_found(request_t *rq)
{
	char detail[160];
	if (rq->seg_len > 64)
		snprintf(detail, sizeof detail, "no job with id %.40s... (%zu bytes)", rq->seg, rq->seg_len);
	else
		snprintf(detail, sizeof detail, "no job with id %.*s", (int)rq->seg_len, rq->seg);
	return request_problem(rq, 404, detail, NULL);
}

enum MHD_Result request_db_unavailable(request_t *rq)
{
	return request_problem(rq, 503, "the database cannot be read; retry later", NULL);
}

bool request_plausible_id(const char *id)
{
	size_t n = strlen(id);
	if (n < 3 || n >= STORE_ID_BYTES || id[0] != 'j' || id[1] != '-')
		return false;
	return strspn(id + 2, "abcdefghijklmnopqrstuvwxyz234567") == n - 2;
}
