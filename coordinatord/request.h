/*
 * request: one REST request as its handler sees it, and the answers a
 * handler gives.
 *
 * http.c fills a request_t for each request it routes (routes.h) and hands it
 * to the route's handler: the caller (the libmicrohttpd connection), the
 * route's metrics label and Allow list, the method, the start time, the {id}
 * path segment, and for POST routes the body read so far. Every answer goes
 * through request_respond, which queues the response, counts it under the
 * route's label (metrics.h) and logs server errors; the other request_*
 * functions are the answers that repeat (a problem+json body, "no such job",
 * "the database cannot be read", a broker reply).
 *
 * Each HTTP thread keeps a request_thread_t: its reader store_t, its broker
 * client and a reusable output buffer, opened on first use, never shared.
 */
#ifndef RINGMASTER_COORDINATORD_REQUEST_H
#define RINGMASTER_COORDINATORD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "auth.h"
#include "broker.h"
#include "metrics.h"
#include "sbuf.h"
#include "store.h"

#define REQUEST_JSON_TYPE "application/json"
#define REQUEST_IDEM_KEY_MAX 255

/* Per-thread resources (see above). db_path and zctx are borrowed. */
typedef struct request_thread {
	struct request_thread *next; /* http.c's list of all threads' */
	const char *db_path;
	void *zctx;
	store_t *reader;
	broker_client_t *client;
	sbuf_t out;
} request_thread_t;

typedef struct {
	struct MHD_Connection *conn; /* the caller */
	request_thread_t *thread;
	int label;                   /* the route's metrics label (routes.h) */
	const char *path;            /* the route's template; the URL when unmatched */
	const char *allow;           /* the methods the path allows ("GET, POST"); NULL when unmatched */
	metrics_method_t method;
	const char *method_name;     /* as sent */
	const char *url;
	int64_t start_us;            /* clock_mono_us() when the request was routed */
	/* the {id} path segment: as sent, and copied to id when it fits (else "") */
	const char *seg;
	size_t seg_len;
	char id[STORE_ID_BYTES];
	/* the body of a POST route (http.c collects it) */
	size_t max_body_bytes;
	bool too_large;
	sbuf_t body;
	char idem_key[REQUEST_IDEM_KEY_MAX + 1];
	bool has_idem_key;
	auth_principal_t who; /* the caller, authenticated before dispatch (auth.h) */
	/* one more header for the answer (WWW-Authenticate, Set-Cookie); NULL: none */
	const char *extra_header;
	const char *extra_value;
} request_t;

/* The thread's reader / broker client, opened on first use (the failure is
 * logged); NULL when it cannot be opened. */
store_t *request_reader(request_t *rq);
broker_client_t *request_client(request_t *rq);
/* Close what a thread opened and free it; accepts NULL. */
void request_thread_free(request_thread_t *t);

/*
 * Queue the response: `body` (len bytes, `mode` as libmicrohttpd's) with
 * Content-Type `ctype` and, when not NULL, Allow, Location, (replayed)
 * Idempotent-Replayed and rq->extra_header headers. Counts it in the metrics under rq's label and
 * method. With MHD_RESPMEM_MUST_FREE the body is freed even on failure.
 */
enum MHD_Result request_respond(request_t *rq, int status, const char *ctype, void *body, size_t len,
                                enum MHD_ResponseMemoryMode mode, const char *location, bool replayed);

/* Answer with the thread's output buffer (copied); a buffer whose building
 * ran out of memory answers 500 instead. */
enum MHD_Result request_reply_out(request_t *rq, int status, const char *ctype);

/* Answer `doc` as JSON (takes the reference, even on failure); 500 when it
 * cannot be serialized. */
enum MHD_Result request_reply_json(request_t *rq, int status, json_t *doc);

/* Answer a broker reply (takes reply->body) with Location when not NULL. */
enum MHD_Result request_reply_broker(request_t *rq, broker_reply_t *reply, const char *location);

/* A problem+json answer (problem.h); `pointer` may be NULL. 405 answers carry
 * rq->allow in Allow. */
enum MHD_Result request_problem(request_t *rq, int status, const char *detail, const char *pointer);

/* A problem+json answer (no pointer) with Retry-After: retry_after_s
 * seconds (429 past a rate). */
enum MHD_Result request_problem_retry(request_t *rq, int status, const char *detail, int64_t retry_after_s);

/* 400 naming the field (a JSON pointer or a query parameter) at fault; NULL
 * when none is. */
enum MHD_Result request_bad_request(request_t *rq, const char *detail, const char *field);

/* 404 for a URL no route serves. */
enum MHD_Result request_no_route(request_t *rq);

/* 405 for a method the route does not allow, with Allow. */
enum MHD_Result request_method_not_allowed(request_t *rq);

/* 404 "no job with id ..." naming the {id} segment as sent. */
enum MHD_Result request_job_not_found(request_t *rq);

/* 503 "the database cannot be read; retry later". */
enum MHD_Result request_db_unavailable(request_t *rq);

/* Whether `id` is a job id as this server makes them ("j-" then
 * [a-z2-7]); anything else is not found without a database lookup. */
bool request_plausible_id(const char *id);

#endif
