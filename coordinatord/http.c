/*
 * http: REST routes on libmicrohttpd (see http.h).
 *
 * Request flow: the access handler is called once when the headers are in
 * (first call), then once per body chunk, then once more with no data. GET
 * routes answer on the first call without allocating per-request state.
 * POST routes check Content-Type, Content-Length and Idempotency-Key on the
 * first call (so an oversized body gets 413 before it is read), collect the
 * body (still counting, for chunked uploads), and answer on the last call.
 *
 * Per-thread state (thread_ctx_t) holds the thread's reader store_t, its
 * broker client and a reusable output buffer. Contexts are registered in a
 * list so that http_stop can close them after libmicrohttpd's threads have
 * exited.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>
#include <sodium.h>

#include "clock.h"
#include "broker.h"
#include "jobspec.h"
#include "jobview.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"
#include "sbuf.h"
#include "store.h"
#include "traces.h"

#define JSON_TYPE "application/json"
#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define WRITE_TIMEOUT_MS 10000
#define PING_TIMEOUT_MS 1000
#define LIST_DEFAULT_LIMIT 100
#define LIST_MAX_LIMIT 1000
#define IDEM_KEY_MAX 255

enum {
	R_JOBS = 0,
	R_JOB,
	R_JOB_CANCEL,
	R_JOB_EVENTS,
	R_JOB_METRICS,
	R_JOB_CHECKPOINTS,
	R_JOB_TRACE,
	R_WORKERS,
	R_HEALTHZ,
	R_READYZ,
	R_METRICS,
	R_UNMATCHED,
	N_ROUTES
};

enum { M_GET = 1, M_POST = 2 };

static const struct {
	const char *path;
	unsigned methods;
	const char *allow;
} s_routes[N_ROUTES] = {
	[R_JOBS] = {"/v1/jobs", M_GET | M_POST, "GET, POST"},
	[R_JOB] = {"/v1/jobs/{id}", M_GET, "GET"},
	[R_JOB_CANCEL] = {"/v1/jobs/{id}/cancel", M_POST, "POST"},
	[R_JOB_EVENTS] = {"/v1/jobs/{id}/events", M_GET, "GET"},
	[R_JOB_METRICS] = {"/v1/jobs/{id}/metrics", M_GET, "GET"},
	[R_JOB_CHECKPOINTS] = {"/v1/jobs/{id}/checkpoints", M_GET, "GET"},
	[R_JOB_TRACE] = {"/v1/jobs/{id}/trace", M_GET, "GET"},
	[R_WORKERS] = {"/v1/workers", M_GET, "GET"},
	[R_HEALTHZ] = {"/healthz", M_GET, "GET"},
	[R_READYZ] = {"/readyz", M_GET, "GET"},
	[R_METRICS] = {"/metrics", M_GET, "GET"},
	[R_UNMATCHED] = {"unmatched", 0, NULL},
};

static const char *const s_route_labels[N_ROUTES] = {
	"/v1/jobs",    "/v1/jobs/{id}", "/v1/jobs/{id}/cancel", "/v1/jobs/{id}/events", "/v1/jobs/{id}/metrics",
	"/v1/jobs/{id}/checkpoints",    "/v1/jobs/{id}/trace",  "/v1/workers",          "/healthz",             "/readyz",
	"/metrics",    "unmatched",
};

static const http_route_t s_route_table[] = {
	{"GET", "/v1/jobs"},
	{"POST", "/v1/jobs"},
	{"GET", "/v1/jobs/{id}"},
	{"POST", "/v1/jobs/{id}/cancel"},
	{"GET", "/v1/jobs/{id}/events"},
	{"GET", "/v1/jobs/{id}/metrics"},
	{"GET", "/v1/jobs/{id}/checkpoints"},
	{"GET", "/v1/jobs/{id}/trace"},
	{"GET", "/v1/workers"},
	{"GET", "/healthz"},
	{"GET", "/readyz"},
	{"GET", "/metrics"},
};

const http_route_t *http_routes(size_t *ret_n)
{
	*ret_n = sizeof s_route_table / sizeof s_route_table[0];
	return s_route_table;
}

typedef struct thread_ctx {
	struct thread_ctx *next;
	store_t *reader;
	broker_client_t *client;
	sbuf_t out;
} thread_ctx_t;

struct http {
	struct MHD_Daemon *mhd;
	int listen_fd;
	void *zctx;
	char db_path[4096];
	size_t max_body_bytes;
	pthread_mutex_t lock; /* guards `threads` */
	thread_ctx_t *threads;
	atomic_int in_flight;
	atomic_bool stopping; /* new requests get 503 and the connection closes */
	bool stopped;
};

/* Per-request state, only for requests that carry a body we read. */
typedef struct {
	int route;
	metrics_method_t method;
	int64_t start_us;
	bool too_large;
	sbuf_t body;
	char id[STORE_ID_BYTES];
	char idem_key[IDEM_KEY_MAX + 1];
	bool has_idem_key;
} request_t;

static __thread thread_ctx_t *t_ctx;

static thread_ctx_t *ctx_get(http_t *h)
{
	if (t_ctx)
		return t_ctx;
	thread_ctx_t *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	pthread_mutex_lock(&h->lock);
	c->next = h->threads;
	h->threads = c;
	pthread_mutex_unlock(&h->lock);
	t_ctx = c;
	return c;
}

/* The thread's reader, opened on first use; NULL if it cannot be opened. */
static store_t *ctx_reader(http_t *h, thread_ctx_t *c)
{
	if (!c->reader) {
		char err[512];
		c->reader = store_open(h->db_path, STORE_OPEN_READER, err, sizeof err);
		if (!c->reader)
			log_error("http: cannot open a reader: %s", err);
	}
	return c->reader;
}

static broker_client_t *ctx_client(http_t *h, thread_ctx_t *c)
{
	if (!c->client) {
		c->client = broker_client_new(h->zctx);
		if (!c->client)
			log_error("http: cannot connect to the writer loop");
	}
	return c->client;
}

/* ---- responses ---- */

static enum MHD_Result respond(struct MHD_Connection *conn, int route, metrics_method_t method,
                               int64_t start_us, int status, const char *ctype, void *body,
                               size_t len, enum MHD_ResponseMemoryMode mode, const char *allow,
                               const char *location, bool replayed)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
	if (!resp) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	if (location)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
	if (replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	enum MHD_Result r = MHD_queue_response(conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	metrics_record(route, method, status, clock_mono_us() - start_us);
	if (status >= 500)
		log_warn("http: %s answered %d", s_route_labels[route], status);
	else if (log_enabled(LOG_DEBUG))
		log_debug("http: %s answered %d", s_route_labels[route], status);
	return r;
}

/* Answer with the thread buffer's contents (copied by libmicrohttpd). */
static enum MHD_Result respond_out(struct MHD_Connection *conn, thread_ctx_t *c, int route,
                                   metrics_method_t method, int64_t start_us, int status,
                                   const char *ctype)
{
	if (c->out.failed) {
		sbuf_reset(&c->out);
		problem_render(&c->out, 500, "out of memory while building the response", NULL);
		status = 500;
		ctype = PROBLEM_CONTENT_TYPE;
	}
	return respond(conn, route, method, start_us, status, ctype, c->out.data ? c->out.data : (char *)"",
	               c->out.len, MHD_RESPMEM_MUST_COPY, NULL, NULL, false);
}

static enum MHD_Result respond_problem(struct MHD_Connection *conn, thread_ctx_t *c, int route,
                                       metrics_method_t method, int64_t start_us, int status,
                                       const char *detail, const char *pointer, const char *allow)
{
	sbuf_t local = {0};
	sbuf_t *out = c ? &c->out : &local;
	sbuf_reset(out);
	problem_render(out, status, detail, pointer);
	enum MHD_Result r;
	if (out->failed)
		r = MHD_NO;
	else
		r = respond(conn, route, method, start_us, status, PROBLEM_CONTENT_TYPE, out->data, out->len,
		            MHD_RESPMEM_MUST_COPY, allow, NULL, false);
	sbuf_free(&local);
	return r;
}

/* ---- routing ---- */

/* Match `url` to a route; for job routes copy the id segment to id_out
 * (empty when it cannot be a job id, which then answers 404). */
static int match_route(const char *url, char id_out[STORE_ID_BYTES], const char **ret_seg,
                       size_t *ret_seg_len)
{
	id_out[0] = '\0';
	if (strncmp(url, "/v1/", 4) == 0) {
		const char *p = url + 4;
		if (strcmp(p, "workers") == 0)
			return R_WORKERS;
		if (strncmp(p, "jobs", 4) != 0)
			return R_UNMATCHED;
		p += 4;
		if (*p == '\0')
			return R_JOBS;
		if (*p != '/' || p[1] == '\0' || p[1] == '/')
			return R_UNMATCHED;
		const char *seg = p + 1;
		const char *end = strchr(seg, '/');
		size_t seg_len = end ? (size_t)(end - seg) : strlen(seg);
		int route;
		if (!end)
			route = R_JOB;
		else if (strcmp(end, "/cancel") == 0)
			route = R_JOB_CANCEL;
		else if (strcmp(end, "/events") == 0)
			route = R_JOB_EVENTS;
		else if (strcmp(end, "/metrics") == 0)
			route = R_JOB_METRICS;
		else if (strcmp(end, "/checkpoints") == 0)
			route = R_JOB_CHECKPOINTS;
		else if (strcmp(end, "/trace") == 0)
			route = R_JOB_TRACE;
		else
			return R_UNMATCHED;
		*ret_seg = seg;
		*ret_seg_len = seg_len;
		if (seg_len < STORE_ID_BYTES) {
			memcpy(id_out, seg, seg_len);
			id_out[seg_len] = '\0';
		}
		return route;
	}
	if (strcmp(url, "/healthz") == 0)
		return R_HEALTHZ;
	if (strcmp(url, "/readyz") == 0)
		return R_READYZ;
	if (strcmp(url, "/metrics") == 0)
		return R_METRICS;
	return R_UNMATCHED;
}

/* A job id as this server makes them: "j-" then [a-z2-7]. Anything else is
 * simply not found, without a database lookup. */
static bool plausible_id(const char *id)
{
	size_t n = strlen(id);
	if (n < 3 || n >= STORE_ID_BYTES || id[0] != 'j' || id[1] != '-')
		return false;
	return strspn(id + 2, "abcdefghijklmnopqrstuvwxyz234567") == n - 2;
}

static enum MHD_Result not_found_job(struct MHD_Connection *conn, thread_ctx_t *c, int route,
                                     metrics_method_t method, int64_t start_us, const char *seg,
                                     size_t seg_len)
{
	char detail[160];
	if (seg_len > 64)
		snprintf(detail, sizeof detail, "no job with id %.40s... (%zu bytes)", seg, seg_len);
	else
		snprintf(detail, sizeof detail, "no job with id %.*s", (int)seg_len, seg);
	return respond_problem(conn, c, route, method, start_us, 404, detail, NULL, NULL);
}

/* ---- GET handlers ---- */

typedef struct {
	sbuf_t *out;
	int *n;
} rank_view_ctx_t;

static int job_rank_fn(const store_rank_t *r, void *userdata)
{
	rank_view_ctx_t *v = userdata;
	if ((*v->n)++)
		sbuf_putc(v->out, ',');
	jobview_rank(v->out, r);
	return 0;
}

static enum MHD_Result get_job(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                               int64_t start_us, const char *id, const char *seg, size_t seg_len)
{
	if (!plausible_id(id))
		return not_found_job(conn, c, R_JOB, METRICS_METHOD_GET, start_us, seg, seg_len);
	store_t *st = ctx_reader(h, c);
	if (!st)
		return respond_problem(conn, c, R_JOB, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	store_job_t job;
	memset(&job, 0, sizeof job);
	int r = store_job_get(st, id, &job);
	if (r == -ENOENT)
		return not_found_job(conn, c, R_JOB, METRICS_METHOD_GET, start_us, seg, seg_len);
	if (r < 0)
		return respond_problem(conn, c, R_JOB, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	sbuf_reset(&c->out);
	jobview_job_open(&c->out, &job);
	sbuf_puts(&c->out, ",\"ranks\":[");
	int n_ranks = 0;
	r = store_rank_list_attempt(st, id, job.attempt, job_rank_fn, &(rank_view_ctx_t){&c->out, &n_ranks});
	store_job_clear(&job);
	if (r < 0)
		return respond_problem(conn, c, R_JOB, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	sbuf_puts(&c->out, "]}");
	return respond_out(conn, c, R_JOB, METRICS_METHOD_GET, start_us, 200, JSON_TYPE);
}

typedef struct {
	sbuf_t *out;
	int n;
} view_list_t;

static int checkpoint_fn(const store_checkpoint_t *cp, void *userdata)
{
	view_list_t *l = userdata;
	if (l->n++)
		sbuf_putc(l->out, ',');
	jobview_checkpoint(l->out, cp);
	return 0;
}

static enum MHD_Result list_checkpoints(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                        int64_t start_us, const char *id, const char *seg, size_t seg_len)
{
	const int R = R_JOB_CHECKPOINTS;
	const metrics_method_t M = METRICS_METHOD_GET;
	if (!plausible_id(id))
		return not_found_job(conn, c, R, M, start_us, seg, seg_len);
	store_t *st = ctx_reader(h, c);
	if (!st)
		return respond_problem(conn, c, R, M, start_us, 503, "the database cannot be read; retry later", NULL,
		                       NULL);
	sbuf_reset(&c->out);
	sbuf_puts(&c->out, "{\"checkpoints\":[");
	view_list_t l = {.out = &c->out};
	int r = store_checkpoint_list(st, id, checkpoint_fn, &l);
	if (r == -ENOENT)
		return not_found_job(conn, c, R, M, start_us, seg, seg_len);
	if (r < 0)
		return respond_problem(conn, c, R, M, start_us, 503, "the database cannot be read; retry later", NULL,
		                       NULL);
	sbuf_puts(&c->out, "]}");
	return respond_out(conn, c, R, M, start_us, 200, JSON_TYPE);
}

/* ---- GET /v1/jobs/{id}/trace ---- */

typedef struct {
	const char *bad_key;
	int n_attempt, n_rank;
} trace_query_t;

static enum MHD_Result trace_query_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	trace_query_t *q = cls;
	if (strcmp(key, "attempt") == 0)
		q->n_attempt++;
	else if (strcmp(key, "rank") == 0)
		q->n_rank++;
	else if (!q->bad_key)
		q->bad_key = key;
	return MHD_YES;
}

/* Query parameter `key` as an integer in [lo, hi] into *ret (left alone when
 * absent). -EINVAL with `detail` filled when it is not one. */
static int query_int(struct MHD_Connection *conn, const char *key, long lo, long hi, long *ret, char *detail,
                     size_t detail_len)
{
	const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);
	if (!v)
		return 0;
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi) {
		snprintf(detail, detail_len, "%s must be an integer from %ld to %ld (got \"%.64s\")", key, lo, hi, v);
		return -EINVAL;
	}
	*ret = n;
	return 0;
}

/* The Chrome trace of the job's profiled steps (coordinatord/traces.c). */
static enum MHD_Result get_trace(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c, int64_t start_us,
                                 const char *id, const char *seg, size_t seg_len)
{
	const int R = R_JOB_TRACE;
	const metrics_method_t M = METRICS_METHOD_GET;
	if (!plausible_id(id))
		return not_found_job(conn, c, R, M, start_us, seg, seg_len);
	char detail[512];
	trace_query_t q = {0};
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, trace_query_iter, &q);
	if (q.bad_key) {
		snprintf(detail, sizeof detail, "unknown query parameter \"%.64s\" (allowed: attempt, rank)", q.bad_key);
		return respond_problem(conn, c, R, M, start_us, 400, detail, NULL, NULL);
	}
	if (q.n_attempt > 1 || q.n_rank > 1)
		return respond_problem(conn, c, R, M, start_us, 400, "each query parameter may appear once", NULL,
		                       NULL);
	long attempt = -1, rank = -1;
	if (query_int(conn, "attempt", 1, INT32_MAX, &attempt, detail, sizeof detail) < 0)
		return respond_problem(conn, c, R, M, start_us, 400, detail, "attempt", NULL);
	if (query_int(conn, "rank", 0, JOBSPEC_MAX_WORLD_SIZE - 1, &rank, detail, sizeof detail) < 0)
		return respond_problem(conn, c, R, M, start_us, 400, detail, "rank", NULL);
	store_t *st = ctx_reader(h, c);
	if (!st)
		return respond_problem(conn, c, R, M, start_us, 503, "the database cannot be read; retry later", NULL,
		                       NULL);
	store_job_t job;
	memset(&job, 0, sizeof job);
	int r = store_job_get(st, id, &job);
	if (r == -ENOENT)
		return not_found_job(conn, c, R, M, start_us, seg, seg_len);
	if (r < 0)
		return respond_problem(conn, c, R, M, start_us, 503, "the database cannot be read; retry later", NULL,
		                       NULL);
	json_t *spec = json_loads(job.spec_json ? job.spec_json : "{}", 0, NULL);
	const json_t *profile = json_object_get(spec, "profile");
	long long first = json_integer_value(json_object_get(profile, "start_step"));
	long long last = json_integer_value(json_object_get(profile, "end_step"));
	bool profiled = json_is_object(profile);
	json_decref(spec);
	store_job_state_t state = job.state;
	store_job_clear(&job);
	if (!profiled) {
		snprintf(detail, sizeof detail,
		         "job %s has no trace: its spec asks for none; set profile: {start_step, end_step} in the job "
		         "spec to record the phases of those steps (docs/profiling.md)", id);
		return respond_problem(conn, c, R, M, start_us, 404, detail, NULL, NULL);
	}
	sbuf_reset(&c->out);
	r = traces_render(st, id, (int)attempt, (int)rank, &c->out);
	if (r == -ENOENT)
		return not_found_job(conn, c, R, M, start_us, seg, seg_len);
	if (r < 0)
		return respond_problem(conn, c, R, M, start_us, 503, "the job's trace cannot be read; retry later",
		                       NULL, NULL);
	if (r == 0) {
		store_trace_usage_t u = {0};
		if (store_trace_usage(st, id, &u) < 0)
			return respond_problem(conn, c, R, M, start_us, 503, "the job's trace cannot be read; retry later",
			                       NULL, NULL);
		char which[96] = "";
		if (attempt >= 0 && rank >= 0)
			snprintf(which, sizeof which, "attempt %ld, rank %ld", attempt, rank);
		else if (attempt >= 0 || rank >= 0)
			snprintf(which, sizeof which, "%s %ld", attempt >= 0 ? "attempt" : "rank", attempt >= 0 ? attempt : rank);
		if (u.n_rows > 0)
			snprintf(detail, sizeof detail,
			         "job %s has no trace for %s: its trace has %lld step(s) of other attempts or ranks; leave out "
			         "?attempt and ?rank to get them all", id, which, (long long)u.n_rows);
		else
			snprintf(detail, sizeof detail,
			         "job %s has no trace yet: its profile covers steps %lld to %lld and no rank has reported "
			         "them (the job is %s%s)", id, first, last, store_job_state_name(state),
			         store_job_state_is_final(state) ? ", so they will not come" : "; retry once it has run them");
		return respond_problem(conn, c, R, M, start_us, 404, detail, NULL, NULL);
	}
	return respond_out(conn, c, R, M, start_us, 200, JSON_TYPE);
}

typedef struct {
	const char *bad_key;
	int n_state, n_limit, n_cursor;
	bool allow_state;
} query_check_t;

static enum MHD_Result query_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
	query_check_t *q = cls;
	if (q->allow_state && strcmp(key, "state") == 0)
		q->n_state++;
	else if (strcmp(key, "limit") == 0)
		q->n_limit++;
	else if (strcmp(key, "cursor") == 0)
		q->n_cursor++;
	else if (!q->bad_key)
		q->bad_key = key;
	return MHD_YES;
}

/* Parse limit and cursor (and state when allow_state); on error fill detail
 * and pointer and return -EINVAL. */
static int parse_paging(struct MHD_Connection *conn, bool allow_state, int *ret_limit,
                        long long *ret_after, bool *ret_has_state, store_job_state_t *ret_state,
                        char *detail, size_t detail_len, const char **ret_pointer)
{
	query_check_t q = {.allow_state = allow_state};
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, query_iter, &q);
	if (q.bad_key) {
		snprintf(detail, detail_len, "unknown query parameter \"%.64s\" (allowed: %s)", q.bad_key,
		         allow_state ? "state, limit, cursor" : "limit, cursor");
		*ret_pointer = NULL;
		return -EINVAL;
	}
	if (q.n_state > 1 || q.n_limit > 1 || q.n_cursor > 1) {
		snprintf(detail, detail_len, "each query parameter may appear once");
		*ret_pointer = NULL;
		return -EINVAL;
	}
	const char *v;
	*ret_has_state = false;
	if (allow_state && (v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "state"))) {
		if (store_job_state_parse(v, ret_state) < 0) {
			snprintf(detail, detail_len,
			         "state must be one of queued, scheduled, running, recovering, succeeded, failed, "
			         "cancelled (got \"%.64s\")",
			         v);
			*ret_pointer = "state";
			return -EINVAL;
		}
		*ret_has_state = true;
	}
	*ret_limit = LIST_DEFAULT_LIMIT;
	if ((v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit"))) {
		char *end;
		errno = 0;
		long n = strtol(v, &end, 10);
		if (errno || end == v || *end || n < 1 || n > LIST_MAX_LIMIT) {
			snprintf(detail, detail_len, "limit must be an integer from 1 to %d (got \"%.64s\")",
			         LIST_MAX_LIMIT, v);
			*ret_pointer = "limit";
			return -EINVAL;
		}
		*ret_limit = (int)n;
	}
	*ret_after = 0;
	if ((v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cursor"))) {
		if (jobview_cursor_decode(v, ret_after) < 0) {
			snprintf(detail, detail_len,
			         "cursor is not one this server gave out; pass next_cursor from a previous page unchanged");
			*ret_pointer = "cursor";
			return -EINVAL;
		}
	}
	return 0;
}

typedef struct {
	sbuf_t *out;
	int n;
	long long last;
} list_ctx_t;

static int list_job_fn(const store_job_t *job, void *userdata)
{
	list_ctx_t *l = userdata;
	if (l->n++)
		sbuf_putc(l->out, ',');
	jobview_job(l->out, job);
	l->last = job->seq;
	return 0;
}

static int list_event_fn(const store_event_t *ev, void *userdata)
{
	list_ctx_t *l = userdata;
	if (l->n++)
		sbuf_putc(l->out, ',');
	jobview_event(l->out, ev);
	l->last = ev->id;
	return 0;
}

static void put_next_cursor(sbuf_t *out, bool more, long long last)
{
	sbuf_puts(out, "],\"next_cursor\":");
	if (more) {
		char cur[JOBVIEW_CURSOR_BYTES];
		jobview_cursor_encode(last, cur);
		sbuf_putc(out, '"');
		sbuf_puts(out, cur);
		sbuf_putc(out, '"');
	} else {
		sbuf_puts(out, "null");
	}
	sbuf_putc(out, '}');
}

static enum MHD_Result list_jobs(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                 int64_t start_us)
{
	char detail[256];
	const char *pointer = NULL;
	int limit;
	long long after;
	bool has_state;
	store_job_state_t state;
	if (parse_paging(conn, true, &limit, &after, &has_state, &state, detail, sizeof detail, &pointer) < 0)
		return respond_problem(conn, c, R_JOBS, METRICS_METHOD_GET, start_us, 400, detail, pointer, NULL);
	store_t *st = ctx_reader(h, c);
	if (!st)
		return respond_problem(conn, c, R_JOBS, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	sbuf_reset(&c->out);
	sbuf_puts(&c->out, "{\"jobs\":[");
	list_ctx_t l = {.out = &c->out};
	bool more = false;
	int r = store_job_list(st, has_state ? &state : NULL, after, limit, list_job_fn, &l, &more);
	if (r < 0)
		return respond_problem(conn, c, R_JOBS, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	put_next_cursor(&c->out, more && l.n > 0, l.last);
	return respond_out(conn, c, R_JOBS, METRICS_METHOD_GET, start_us, 200, JSON_TYPE);
}

static enum MHD_Result list_events(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                   int64_t start_us, const char *id, const char *seg, size_t seg_len)
{
	if (!plausible_id(id))
		return not_found_job(conn, c, R_JOB_EVENTS, METRICS_METHOD_GET, start_us, seg, seg_len);
	char detail[256];
	const char *pointer = NULL;
	int limit;
	long long after;
	bool has_state;
	store_job_state_t state;
	if (parse_paging(conn, false, &limit, &after, &has_state, &state, detail, sizeof detail, &pointer) < 0)
		return respond_problem(conn, c, R_JOB_EVENTS, METRICS_METHOD_GET, start_us, 400, detail,
		                       pointer, NULL);
	store_t *st = ctx_reader(h, c);
	if (!st)
		return respond_problem(conn, c, R_JOB_EVENTS, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	sbuf_reset(&c->out);
	sbuf_puts(&c->out, "{\"events\":[");
	list_ctx_t l = {.out = &c->out};
	bool more = false;
	int r = store_event_list(st, id, after, limit, list_event_fn, &l, &more);
	if (r == -ENOENT)
		return not_found_job(conn, c, R_JOB_EVENTS, METRICS_METHOD_GET, start_us, seg, seg_len);
	if (r < 0)
		return respond_problem(conn, c, R_JOB_EVENTS, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	put_next_cursor(&c->out, more && l.n > 0, l.last);
	return respond_out(conn, c, R_JOB_EVENTS, METRICS_METHOD_GET, start_us, 200, JSON_TYPE);
}

/* The ranks of live attempts, in node order (for GET /v1/workers). */
typedef struct {
	char *node;
	char job_id[STORE_ID_BYTES];
	int attempt, rank, device_index;
	char device_kind[8];
	char state[8];
} rank_row_t;

typedef struct {
	rank_row_t *rows;
	size_t n, cap;
} rank_rows_t;

static int collect_rank(const store_rank_t *r, void *userdata)
{
	rank_rows_t *rr = userdata;
	if (rr->n == rr->cap) {
		size_t cap = rr->cap ? rr->cap * 2 : 16;
		rank_row_t *rows = realloc(rr->rows, cap * sizeof *rows);
		if (!rows)
			return -ENOMEM;
		rr->rows = rows;
		rr->cap = cap;
	}
	rank_row_t *e = &rr->rows[rr->n];
	memset(e, 0, sizeof *e);
	e->node = strdup(r->node);
	if (!e->node)
		return -ENOMEM;
	snprintf(e->job_id, sizeof e->job_id, "%s", r->job_id);
	e->attempt = r->attempt;
	e->rank = r->rank;
	e->device_index = r->device_index;
	snprintf(e->device_kind, sizeof e->device_kind, "%s", r->device_kind);
	snprintf(e->state, sizeof e->state, "%s", r->state);
	rr->n++;
	return 0;
}

typedef struct {
	sbuf_t *out;
	int n;
	rank_rows_t *ranks;
	size_t next; /* first rank row not yet consumed */
} workers_ctx_t;

static int list_worker_fn(const store_worker_t *w, void *userdata)
{
	workers_ctx_t *wc = userdata;
	sbuf_t *out = wc->out;
	if (wc->n++)
		sbuf_putc(out, ',');
	sbuf_puts(out, "{\"node\":");
	sbuf_json_string(out, w->node, strlen(w->node));
	sbuf_puts(out, ",\"state\":");
	sbuf_json_string(out, w->state, strlen(w->state));
	sbuf_puts(out, ",\"devices\":");
	sbuf_puts(out, w->devices_json);
	sbuf_puts(out, ",\"last_heartbeat\":");
	if (w->has_heartbeat)
		sbuf_json_time(out, w->last_heartbeat_us);
	else
		sbuf_puts(out, "null");
	sbuf_puts(out, ",\"registered_at\":");
	if (w->registered_at_us)
		sbuf_json_time(out, w->registered_at_us);
	else
		sbuf_puts(out, "null");
	/* skip rank rows of nodes without a worker row (both lists are in node order) */
	while (wc->next < wc->ranks->n && strcmp(wc->ranks->rows[wc->next].node, w->node) < 0)
		wc->next++;
	size_t first = wc->next, n_running = 0;
	while (wc->next < wc->ranks->n && strcmp(wc->ranks->rows[wc->next].node, w->node) == 0) {
		const rank_row_t *r = &wc->ranks->rows[wc->next++];
		n_running += strcmp(r->state, "placed") == 0 || strcmp(r->state, "joined") == 0;
	}
	sbuf_printf(out, ",\"running_ranks\":%zu,\"ranks\":[", n_running);
	for (size_t i = first; i < wc->next; i++) {
		const rank_row_t *r = &wc->ranks->rows[i];
		if (i > first)
			sbuf_putc(out, ',');
		sbuf_puts(out, "{\"job\":");
		sbuf_json_string(out, r->job_id, strlen(r->job_id));
		sbuf_printf(out, ",\"attempt\":%d,\"rank\":%d,\"device\":{\"kind\":", r->attempt, r->rank);
		sbuf_json_string(out, r->device_kind, strlen(r->device_kind));
		sbuf_printf(out, ",\"index\":%d},\"state\":", r->device_index);
		sbuf_json_string(out, r->state, strlen(r->state));
		sbuf_putc(out, '}');
	}
	sbuf_puts(out, "]}");
	return 0;
}

static enum MHD_Result list_workers(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                    int64_t start_us)
{
	store_t *st = ctx_reader(h, c);
	rank_rows_t ranks = {0};
	int r = st ? store_rank_list_active(st, collect_rank, &ranks) : -EIO;
	workers_ctx_t wc = {.out = &c->out, .ranks = &ranks};
	if (r == 0) {
		sbuf_reset(&c->out);
		sbuf_puts(&c->out, "{\"workers\":[");
		r = store_worker_list(st, list_worker_fn, &wc);
		sbuf_puts(&c->out, "]}");
	}
	for (size_t i = 0; i < ranks.n; i++)
		free(ranks.rows[i].node);
	free(ranks.rows);
	if (r < 0)
		return respond_problem(conn, c, R_WORKERS, METRICS_METHOD_GET, start_us, 503,
		                       "the database cannot be read; retry later", NULL, NULL);
	return respond_out(conn, c, R_WORKERS, METRICS_METHOD_GET, start_us, 200, JSON_TYPE);
}

/* ---- GET /v1/jobs/{id}/metrics ---- */

#define METRICS_DEFAULT_LIMIT 1000
#define METRICS_MAX_LIMIT 10000

typedef struct {
	const char *bad_key;
	int n_since, n_limit;
} metrics_query_t;

static enum MHD_Result metrics_query_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
	metrics_query_t *q = cls;
	if (strcmp(key, "since_step") == 0)
		q->n_since++;
	else if (strcmp(key, "limit") == 0)
		q->n_limit++;
	else if (!q->bad_key)
		q->bad_key = key;
	return MHD_YES;
}

typedef struct {
	sbuf_t *out;
	int n;
	long long last_step;
} metric_list_ctx_t;

static int list_metric_fn(const store_metric_t *m, void *userdata)
{
	metric_list_ctx_t *l = userdata;
	if (l->n++)
		sbuf_putc(l->out, ',');
	jobview_metric(l->out, m);
	l->last_step = m->step;
	return 0;
}

static enum MHD_Result list_metrics(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                    int64_t start_us, const char *id, const char *seg, size_t seg_len)
{
	const int R = R_JOB_METRICS;
	const metrics_method_t M = METRICS_METHOD_GET;
	if (!plausible_id(id))
		return not_found_job(conn, c, R, M, start_us, seg, seg_len);
	char detail[256];
	metrics_query_t q = {0};
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, metrics_query_iter, &q);
	if (q.bad_key) {
		snprintf(detail, sizeof detail, "unknown query parameter \"%.64s\" (allowed: since_step, limit)",
		         q.bad_key);
		return respond_problem(conn, c, R, M, start_us, 400, detail, NULL, NULL);
	}
	if (q.n_since > 1 || q.n_limit > 1)
		return respond_problem(conn, c, R, M, start_us, 400, "each query parameter may appear once", NULL,
		                       NULL);
	long long since = 0;
	int limit = METRICS_DEFAULT_LIMIT;
	const char *v;
	if ((v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "since_step"))) {
		char *end;
		errno = 0;
		long long n = strtoll(v, &end, 10);
		if (errno || end == v || *end || n < 0) {
			snprintf(detail, sizeof detail, "since_step must be an integer >= 0 (got \"%.64s\")", v);
			return respond_problem(conn, c, R, M, start_us, 400, detail, "since_step", NULL);
		}
		since = n;
	}
	if ((v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit"))) {
		char *end;
		errno = 0;
		long n = strtol(v, &end, 10);
		if (errno || end == v || *end || n < 1 || n > METRICS_MAX_LIMIT) {
			snprintf(detail, sizeof detail, "limit must be an integer from 1 to %d (got \"%.64s\")",
			         METRICS_MAX_LIMIT, v);
			return respond_problem(conn, c, R, M, start_us, 400, detail, "limit", NULL);
		}
		limit = (int)n;
	}
	store_t *st = ctx_reader(h, c);
	if (!st)
		return respond_problem(conn, c, R, M, start_us, 503, "the database cannot be read; retry later", NULL,
		                       NULL);
	sbuf_reset(&c->out);
	sbuf_puts(&c->out, "{\"metrics\":[");
	metric_list_ctx_t l = {.out = &c->out};
	bool more = false;
	int r = store_metric_list(st, id, since, limit, list_metric_fn, &l, &more);
	if (r == -ENOENT)
		return not_found_job(conn, c, R, M, start_us, seg, seg_len);
	if (r < 0)
		return respond_problem(conn, c, R, M, start_us, 503, "the database cannot be read; retry later", NULL,
		                       NULL);
	sbuf_puts(&c->out, "],\"next_since_step\":");
	if (more && l.n > 0)
		sbuf_printf(&c->out, "%lld", l.last_step + 1);
	else
		sbuf_puts(&c->out, "null");
	sbuf_putc(&c->out, '}');
	return respond_out(conn, c, R, M, start_us, 200, JSON_TYPE);
}

static enum MHD_Result get_readyz(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                  int64_t start_us)
{
	store_t *st = ctx_reader(h, c);
	int64_t n;
	if (!st || store_job_count(st, &n) < 0)
		return respond_problem(conn, c, R_READYZ, METRICS_METHOD_GET, start_us, 503,
		                       "the database is not readable", NULL, NULL);
	broker_client_t *bc = ctx_client(h, c);
	if (!bc || broker_client_ping(bc, PING_TIMEOUT_MS) < 0)
		return respond_problem(conn, c, R_READYZ, METRICS_METHOD_GET, start_us, 503,
		                       "the writer loop did not answer within 1 s", NULL, NULL);
	sbuf_reset(&c->out);
	sbuf_puts(&c->out, "{\"status\":\"ready\"}");
	return respond_out(conn, c, R_READYZ, METRICS_METHOD_GET, start_us, 200, JSON_TYPE);
}

typedef struct {
	metrics_job_t *jobs;
	size_t n, cap;
} job_gauges_t;

static int collect_job_gauge(const store_metric_t *m, void *userdata)
{
	job_gauges_t *g = userdata;
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 8;
		metrics_job_t *j = realloc(g->jobs, cap * sizeof *j);
		if (!j)
			return -ENOMEM;
		g->jobs = j;
		g->cap = cap;
	}
	metrics_job_t *j = &g->jobs[g->n++];
	snprintf(j->job_id, sizeof j->job_id, "%s", m->job_id);
	j->step = m->step;
	j->loss = m->loss;
	j->tokens_per_s = m->tokens_per_s;
	return 0;
}

typedef struct {
	metrics_rank_memory_t *ranks;
	size_t n, cap;
} rank_gauges_t;

static int collect_rank_memory(const store_rank_t *r, void *userdata)
{
	rank_gauges_t *g = userdata;
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		metrics_rank_memory_t *m = realloc(g->ranks, cap * sizeof *m);
		if (!m)
			return -ENOMEM;
		g->ranks = m;
		g->cap = cap;
	}
	metrics_rank_memory_t *m = &g->ranks[g->n++];
	snprintf(m->job_id, sizeof m->job_id, "%s", r->job_id);
	m->rank = r->rank;
	m->memory = r->memory;
	return 0;
}

typedef struct {
	metrics_job_restarts_t *jobs;
	size_t n, cap;
} restart_gauges_t;

static int collect_restarts(const char *job_id, int restarts, void *userdata)
{
	restart_gauges_t *g = userdata;
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 8;
		metrics_job_restarts_t *j = realloc(g->jobs, cap * sizeof *j);
		if (!j)
			return -ENOMEM;
		g->jobs = j;
		g->cap = cap;
	}
	metrics_job_restarts_t *j = &g->jobs[g->n++];
	snprintf(j->job_id, sizeof j->job_id, "%s", job_id);
	j->restarts = restarts;
	return 0;
}

static enum MHD_Result get_metrics(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                   int64_t start_us)
{
	store_t *st = ctx_reader(h, c);
	int64_t counts[STORE_JOB_N_STATES];
	bool have_counts = st && store_job_count_by_state(st, counts) == 0;
	int64_t workers[2];
	bool have_workers = st && store_worker_count_by_state(st, &workers[0], &workers[1]) == 0;
	job_gauges_t g = {0};
	bool have_jobs = st && store_metric_latest_running(st, collect_job_gauge, &g) == 0;
	sbuf_reset(&c->out);
	metrics_render(&c->out, have_counts ? counts : NULL);
	metrics_render_cluster(&c->out, have_workers ? workers : NULL, have_jobs ? g.jobs : NULL,
	                       have_jobs ? g.n : 0);
	free(g.jobs);
	rank_gauges_t rg = {0};
	if (st && store_rank_list_memory_running(st, collect_rank_memory, &rg) == 0)
		metrics_render_rank_memory(&c->out, rg.ranks, rg.n);
	free(rg.ranks);
	restart_gauges_t xg = {0};
	if (st && store_job_list_restarts(st, collect_restarts, &xg) == 0)
		metrics_render_job_restarts(&c->out, xg.jobs, xg.n);
	free(xg.jobs);
	return respond_out(conn, c, R_METRICS, METRICS_METHOD_GET, start_us, 200, METRICS_TYPE);
}

/* ---- POST handlers ---- */

/* application/json, any case, optionally followed by parameters. */
static bool is_json_type(const char *ct)
{
	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	size_t n = strlen(JSON_TYPE);
	if (strncasecmp(ct, JSON_TYPE, n) != 0)
		return false;
	ct += n;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return *ct == '\0' || *ct == ';';
}

/* Offset of the first byte that breaks UTF-8, or -1 if `s` is valid. */
static long utf8_invalid_at(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned char c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		unsigned min;
		unsigned cp;
		if ((c & 0xe0) == 0xc0) {
			len = 2;
			min = 0x80;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3;
			min = 0x800;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4;
			min = 0x10000;
			cp = c & 0x07;
		} else {
			return (long)i;
		}
		if (i + len > n)
			return (long)i;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return (long)i;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return (long)i;
		i += len;
	}
	return -1;
}

/*
 * A spec's resume_from must name a job of this coordinator and one of its
 * committed, not deleted checkpoints. 0 when it does (or the spec has no
 * resume_from); otherwise the HTTP status (422: no such job or checkpoint,
 * 503: the database cannot be read) with `detail` and *ret_pointer set.
 * Checked on a reader, outside the writer's transaction: a checkpoint
 * deleted between this check and the placement fails the job then (fabric.c).
 */
static int check_resume_from(http_t *h, thread_ctx_t *c, const jobspec_t *spec, char *detail,
                             size_t detail_len, const char **ret_pointer)
{
	const char *job = spec->resume_from.job;
	if (!job)
		return 0;
	*ret_pointer = "/resume_from/job";
	store_t *st = ctx_reader(h, c);
	if (!st) {
		snprintf(detail, detail_len, "the database cannot be read to check resume_from; retry later");
		return 503;
	}
	store_job_t src;
	memset(&src, 0, sizeof src);
	int r = plausible_id(job) ? store_job_get(st, job, &src) : -ENOENT;
	if (r == 0)
		store_job_clear(&src);
	if (r == -ENOENT) {
		snprintf(detail, detail_len,
		         "resume_from.job: no job with id %.64s; name a job this coordinator ran "
		         "(GET /v1/jobs lists them)",
		         job);
		return 422;
	}
	char *path = NULL;
	if (r == 0)
		r = store_checkpoint_get(st, job, spec->resume_from.step, &path);
	free(path);
	if (r == -ENOENT) {
		*ret_pointer = "/resume_from/step";
		snprintf(detail, detail_len,
		         "resume_from.step: job %s has no committed checkpoint at step %lld (never taken, "
		         "or removed by retention); GET /v1/jobs/%s/checkpoints lists the ones it has",
		         job, (long long)spec->resume_from.step, job);
		return 422;
	}
	if (r < 0) {
		snprintf(detail, detail_len, "cannot read the checkpoints of job %s to check resume_from: %s; retry later",
		         job, strerror(-r));
		return 503;
	}
	return 0;
}

static enum MHD_Result submit_job(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                  request_t *rq)
{
	const metrics_method_t M = METRICS_METHOD_POST;
	char detail[600];
	if (rq->too_large) {
		snprintf(detail, sizeof detail, "request body is larger than the limit of %zu bytes",
		         h->max_body_bytes);
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, 413, detail, NULL, NULL);
	}
	if (rq->body.len == 0)
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, 400,
		                       "request body is empty; send the job spec as a JSON object", "", NULL);
	if (rq->body.failed)
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, 500,
		                       "out of memory while reading the request body", NULL, NULL);
	long bad = utf8_invalid_at((const unsigned char *)rq->body.data, rq->body.len);
	if (bad >= 0) {
		snprintf(detail, sizeof detail, "request body is not valid UTF-8 (byte offset %ld)", bad);
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, 400, detail, "", NULL);
	}
	jobspec_t spec;
	jobspec_error_t err;
	memset(&spec, 0, sizeof spec);
	memset(&err, 0, sizeof err);
	if (jobspec_parse(rq->body.data, rq->body.len, &spec, &err) < 0) {
		err.pointer[sizeof err.pointer - 1] = '\0';
		err.message[sizeof err.message - 1] = '\0';
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, 400,
		                       err.message[0] ? err.message : "invalid job spec", err.pointer, NULL);
	}
	const char *pointer = NULL;
	int status = check_resume_from(h, c, &spec, detail, sizeof detail, &pointer);
	if (status != 0) {
		jobspec_free(&spec);
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, status, detail, pointer, NULL);
	}
	json_t *doc = jobspec_to_json(&spec);
	char *spec_json = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!spec_json) {
		jobspec_free(&spec);
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, 500,
		                       "out of memory while storing the job spec", NULL, NULL);
	}
	broker_submit_t cmd = {
		.name = spec.name,
		.spec_json = spec_json,
		.priority = spec.priority,
		.world_size = spec.parallel.world_size,
		.idem_key = rq->has_idem_key ? rq->idem_key : NULL,
	};
	crypto_hash_sha256(cmd.body_hash, (const unsigned char *)rq->body.data, rq->body.len);
	broker_client_t *bc = ctx_client(h, c);
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	int r = bc ? broker_client_submit(bc, &cmd, WRITE_TIMEOUT_MS, &reply) : -ENOTCONN;
	free(spec_json);
	jobspec_free(&spec);
	if (r < 0)
		return respond_problem(conn, c, R_JOBS, M, rq->start_us, 503,
		                       r == -ETIMEDOUT ? "the writer loop did not answer in time; the job may or may "
		                                         "not have been stored (retry with the same Idempotency-Key)"
		                                       : "the writer loop cannot be reached; retry later",
		                       NULL, NULL);
	char location[64] = "";
	const char *loc = NULL;
	if (reply.status == 201) {
		/* the id is the first field of the job object: {"id":"j-..." */
		const char *p = strstr(reply.body, "\"id\":\"");
		if (p) {
			p += 6;
			const char *q = strchr(p, '"');
			if (q && q - p < STORE_ID_BYTES) {
				snprintf(location, sizeof location, "/v1/jobs/%.*s", (int)(q - p), p);
				loc = location;
			}
		}
	}
	const char *ctype = reply.status >= 400 ? PROBLEM_CONTENT_TYPE : JSON_TYPE;
	enum MHD_Result mr = respond(conn, R_JOBS, M, rq->start_us, reply.status, ctype, reply.body,
	                             reply.body_len, MHD_RESPMEM_MUST_FREE, NULL, loc, reply.replayed);
	reply.body = NULL; /* owned by the response now */
	return mr;
}

static enum MHD_Result cancel_job(http_t *h, struct MHD_Connection *conn, thread_ctx_t *c,
                                  request_t *rq)
{
	const metrics_method_t M = METRICS_METHOD_POST;
	if (!plausible_id(rq->id))
		return respond_problem(conn, c, R_JOB_CANCEL, M, rq->start_us, 404, "no job with that id", NULL,
		                       NULL);
	broker_client_t *bc = ctx_client(h, c);
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	int r = bc ? broker_client_cancel(bc, rq->id, WRITE_TIMEOUT_MS, &reply) : -ENOTCONN;
	if (r < 0)
		return respond_problem(conn, c, R_JOB_CANCEL, M, rq->start_us, 503,
		                       "the writer loop did not answer in time; retry later", NULL, NULL);
	const char *ctype = reply.status >= 400 ? PROBLEM_CONTENT_TYPE : JSON_TYPE;
	enum MHD_Result mr = respond(conn, R_JOB_CANCEL, M, rq->start_us, reply.status, ctype, reply.body,
	                             reply.body_len, MHD_RESPMEM_MUST_FREE, NULL, NULL, false);
	reply.body = NULL;
	return mr;
}

/* ---- the access handler ---- */

/* Answer requests that need no per-request state: every GET, unknown routes
 * and wrong methods. Runs on the handler's last call, not the first: a
 * response queued on the first call makes libmicrohttpd close the connection
 * (it cannot know the body was consumed), which would defeat keep-alive. */
static enum MHD_Result answer_simple(http_t *h, struct MHD_Connection *conn, const char *url,
                                     const char *method_str)
{
	int64_t start_us = clock_mono_us();
	metrics_method_t method = metrics_method_index(method_str);
	thread_ctx_t *c = ctx_get(h);
	if (!c)
		return MHD_NO;
	char id[STORE_ID_BYTES];
	const char *seg = NULL;
	size_t seg_len = 0;
	int route = match_route(url, id, &seg, &seg_len);
	if (route == R_UNMATCHED) {
		char detail[200];
		snprintf(detail, sizeof detail, "no route %.100s%s (see api/openapi.yaml for the routes served)", url,
		         strlen(url) > 100 ? "..." : "");
		return respond_problem(conn, c, route, method, start_us, 404, detail, NULL, NULL);
	}
	unsigned m = method == METRICS_METHOD_GET ? M_GET : method == METRICS_METHOD_POST ? M_POST : 0;
	if (!(s_routes[route].methods & m)) {
		char detail[200];
		snprintf(detail, sizeof detail, "method %.16s is not allowed on %s (allowed: %s)", method_str,
		         s_routes[route].path, s_routes[route].allow);
		return respond_problem(conn, c, route, method, start_us, 405, detail, NULL, s_routes[route].allow);
	}
	switch (route) {
	case R_JOB: return get_job(h, conn, c, start_us, id, seg, seg_len);
	case R_JOBS: return list_jobs(h, conn, c, start_us);
	case R_JOB_EVENTS: return list_events(h, conn, c, start_us, id, seg, seg_len);
	case R_JOB_METRICS: return list_metrics(h, conn, c, start_us, id, seg, seg_len);
	case R_JOB_CHECKPOINTS: return list_checkpoints(h, conn, c, start_us, id, seg, seg_len);
	case R_JOB_TRACE: return get_trace(h, conn, c, start_us, id, seg, seg_len);
	case R_WORKERS: return list_workers(h, conn, c, start_us);
	case R_READYZ: return get_readyz(h, conn, c, start_us);
	case R_METRICS: return get_metrics(h, conn, c, start_us);
	case R_HEALTHZ:
		sbuf_reset(&c->out);
		sbuf_puts(&c->out, "{\"status\":\"ok\"}");
		return respond_out(conn, c, route, method, start_us, 200, JSON_TYPE);
	default:
		return respond_problem(conn, c, route, method, start_us, 500, "route without a handler", NULL, NULL);
	}
}

/* Marks requests answered by answer_simple (no allocation needed). */
static char s_simple;

static enum MHD_Result first_call(http_t *h, struct MHD_Connection *conn, const char *url,
                                  const char *method_str, void **con_cls)
{
	metrics_method_t method = metrics_method_index(method_str);
	char id[STORE_ID_BYTES];
	const char *seg = NULL;
	size_t seg_len = 0;
	int route = match_route(url, id, &seg, &seg_len);
	if (method != METRICS_METHOD_POST || route == R_UNMATCHED || !(s_routes[route].methods & M_POST)) {
		*con_cls = &s_simple;
		return MHD_YES;
	}
	int64_t start_us = clock_mono_us();
	thread_ctx_t *c = ctx_get(h);
	if (!c)
		return MHD_NO;
	/* POST: refuse early what must not be read (the connection then closes) */
	const char *clen = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (clen) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(clen, &end, 10);
		if (errno || end == clen || n > h->max_body_bytes) {
			char detail[200];
			snprintf(detail, sizeof detail, "request body is larger than the limit of %zu bytes",
			         h->max_body_bytes);
			return respond_problem(conn, c, route, method, start_us, 413, detail, NULL, NULL);
		}
	}
	request_t *rq = calloc(1, sizeof *rq);
	if (!rq)
		return MHD_NO;
	rq->route = route;
	rq->method = method;
	rq->start_us = start_us;
	snprintf(rq->id, sizeof rq->id, "%s", id);
	if (route == R_JOBS) {
		const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
		if (!is_json_type(ct)) {
			free(rq);
			char detail[200];
			snprintf(detail, sizeof detail, "Content-Type must be application/json (got %.64s)",
			         ct ? ct : "none");
			return respond_problem(conn, c, route, method, start_us, 415, detail, NULL, NULL);
		}
		const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
		if (key) {
			size_t n = strlen(key);
			bool ok = n >= 1 && n <= IDEM_KEY_MAX;
			for (size_t i = 0; ok && i < n; i++)
				ok = key[i] >= 0x20 && key[i] <= 0x7e;
			if (!ok) {
				free(rq);
				return respond_problem(conn, c, route, method, start_us, 400,
				                       "Idempotency-Key must be 1 to 255 printable ASCII characters",
				                       NULL, NULL);
			}
			memcpy(rq->idem_key, key, n + 1);
			rq->has_idem_key = true;
		}
	}
	*con_cls = rq;
	return MHD_YES;
}

/* During shutdown: 503 and close, so keep-alive clients let go. */
static enum MHD_Result refuse_stopping(struct MHD_Connection *conn, const char *url, const char *method)
{
	static const char body[] = "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
	                           "\"detail\":\"the coordinator is shutting down; retry shortly\"}";
	char id[STORE_ID_BYTES];
	const char *seg = NULL;
	size_t seg_len = 0;
	int route = match_route(url, id, &seg, &seg_len);
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, PROBLEM_CONTENT_TYPE);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	enum MHD_Result r = MHD_queue_response(conn, 503, resp);
	MHD_destroy_response(resp);
	metrics_record(route, metrics_method_index(method), 503, 0);
	return r;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
	http_t *h = cls;
	request_t *rq = *con_cls;
	if (!rq) {
		atomic_fetch_add_explicit(&h->in_flight, 1, memory_order_relaxed);
		if (atomic_load_explicit(&h->stopping, memory_order_relaxed))
			return refuse_stopping(conn, url, method);
		return first_call(h, conn, url, method, con_cls);
	}
	if ((void *)rq == (void *)&s_simple) {
		if (*upload_data_size > 0) {
			*upload_data_size = 0; /* a body where none is expected: discard */
			return MHD_YES;
		}
		return answer_simple(h, conn, url, method);
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (rq->route != R_JOBS || rq->too_large)
			return MHD_YES; /* cancel takes no body; discard */
		if (rq->body.len + n > h->max_body_bytes) {
			rq->too_large = true; /* chunked upload past the limit: discard the rest */
			sbuf_free(&rq->body);
			return MHD_YES;
		}
		sbuf_append(&rq->body, upload_data, n);
		return MHD_YES;
	}
	thread_ctx_t *c = ctx_get(h);
	if (!c)
		return MHD_NO;
	if (rq->route == R_JOBS)
		return submit_job(h, conn, c, rq);
	return cancel_job(h, conn, c, rq);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
	http_t *h = cls;
	request_t *rq = *con_cls;
	if (rq && (void *)rq != (void *)&s_simple) {
		sbuf_free(&rq->body);
		free(rq);
		*con_cls = NULL;
	}
	atomic_fetch_sub_explicit(&h->in_flight, 1, memory_order_relaxed);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof line, fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	log_warn("libmicrohttpd: %s", line);
}

/* ---- lifecycle ---- */

static int listen_socket(const config_t *cfg, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	int r = getaddrinfo(cfg->listen_host, cfg->listen_port, &hints, &res);
	if (r != 0) {
		snprintf(err, errlen, "cannot listen on %s:%s: %s", cfg->listen_host, cfg->listen_port,
		         gai_strerror(r));
		return -EINVAL;
	}
	int fd = -1, e = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on %s:%s: %s", cfg->listen_host, cfg->listen_port, strerror(e));
		return -e;
	}
	return fd;
}

http_t *http_new(const config_t *cfg, void *zctx, char *err, size_t errlen)
{
	http_t *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->listen_fd = -1;
	h->zctx = zctx;
	h->max_body_bytes = cfg->max_body_bytes;
	snprintf(h->db_path, sizeof h->db_path, "%s", cfg->db);
	pthread_mutex_init(&h->lock, NULL);
	atomic_init(&h->in_flight, 0);
	atomic_init(&h->stopping, false);
	metrics_init(s_route_labels, N_ROUTES);

	h->listen_fd = listen_socket(cfg, err, errlen);
	if (h->listen_fd < 0)
		goto fail;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_TURBO |
	                 MHD_USE_ERROR_LOG;
	h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, handle, h,
	                          MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
	                          MHD_OPTION_LISTEN_SOCKET, (MHD_socket)h->listen_fd,
	                          MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
	                          MHD_OPTION_NOTIFY_COMPLETED, completed, h,
	                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
	                          MHD_OPTION_END);
	if (!h->mhd) {
		snprintf(err, errlen, "cannot start the HTTP server on %s:%s", cfg->listen_host, cfg->listen_port);
		goto fail;
	}
	h->listen_fd = -1; /* libmicrohttpd owns it now */
	return h;
fail:
	http_free(h);
	return NULL;
}

void http_stop(http_t *h, int grace_ms)
{
	if (!h || h->stopped)
		return;
	h->stopped = true;
	if (h->mhd) {
		atomic_store(&h->stopping, true);
		MHD_socket fd = MHD_quiesce_daemon(h->mhd); /* no new connections from here */
		if (fd != MHD_INVALID_SOCKET)
			close(fd);
		int64_t deadline = clock_mono_us() + (int64_t)grace_ms * 1000;
		while (atomic_load(&h->in_flight) > 0 && clock_mono_us() < deadline) {
			struct timespec ts = {0, 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		MHD_stop_daemon(h->mhd);
		h->mhd = NULL;
	}
	/* libmicrohttpd's threads have exited: close what they opened. */
	pthread_mutex_lock(&h->lock);
	thread_ctx_t *c = h->threads;
	h->threads = NULL;
	pthread_mutex_unlock(&h->lock);
	while (c) {
		thread_ctx_t *next = c->next;
		store_close(c->reader);
		broker_client_free(c->client);
		sbuf_free(&c->out);
		free(c);
		c = next;
	}
}

void http_free(http_t *h)
{
	if (!h)
		return;
	http_stop(h, 0);
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
