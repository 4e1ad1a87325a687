/*
 * http: the REST API on libmicrohttpd (see http.h).
 *
 * Request flow: the access handler is called once when the headers are in
 * (first call), then once per body chunk, then once more with no data. Each
 * call routes the URL through the table (routes.h). A request for a route
 * that reads no body (every GET), for no route or with a method the route
 * does not allow is answered on the last call without allocating
 * per-request state. A POST route that reads a body gets a request_t on the
 * first call, where Content-Length (413 before the body is read), and for
 * JSON bodies Content-Type and Idempotency-Key, are checked; the body is
 * collected (still counting, for chunked uploads) and the route's handler
 * answers on the last call.
 *
 * Per-thread state (request_thread_t) holds the thread's reader store_t, its
 * broker client and a reusable output buffer. They are registered in a list
 * so that http_stop can close them after libmicrohttpd's threads have exited.
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

#include <microhttpd.h>

#include "authz.h"
#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"
#include "request.h"
#include "routes.h"
#include "sessionapi.h"
#include "streamapi.h"

struct http {
	struct MHD_Daemon *mhd;
	int listen_fd;
	void *zctx;
	char db_path[4096];
	size_t max_body_bytes;
	pthread_mutex_t lock; /* guards `threads` */
	request_thread_t *threads;
	atomic_int in_flight;
	atomic_bool stopping; /* new requests get 503 and the connection closes */
	bool stopped;
};

static __thread request_thread_t *t_thread;

static request_thread_t *thread_get(http_t *h)
{
	if (t_thread)
		return t_thread;
	request_thread_t *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->db_path = h->db_path;
	t->zctx = h->zctx;
	pthread_mutex_lock(&h->lock);
	t->next = h->threads;
	h->threads = t;
	pthread_mutex_unlock(&h->lock);
	t_thread = t;
	return t;
}

/* Route the request into *rq (a fresh one); the row serving it or NULL. */
static const route_t *route_request(http_t *h, struct MHD_Connection *conn, const char *url, const char *method,
                                    request_t *rq)
{
	rq->conn = conn;
	rq->url = url;
	rq->method_name = method;
	rq->method = metrics_method_index(method);
	rq->start_us = clock_mono_us();
	rq->max_body_bytes = h->max_body_bytes;
	return route_match(url, rq->method, rq);
}

/* Hand the request to its route's handler once the caller may use the
 * route (authz.h: 401, 403 or 421 otherwise). */
static enum MHD_Result dispatch(const route_t *route, request_t *rq)
{
	enum MHD_Result answer;
	if (authz_check(rq, route->perm, &answer) < 0)
		return answer;
	return route->handler(rq);
}

/* Answer a request that needs no per-request state: a route that reads no
 * body (every GET), no route, or a method the route does not allow. Runs on
 * the handler's last call, not the first: a response queued on the first
 * call makes libmicrohttpd close the connection (it cannot know the body was
 * consumed), which would defeat keep-alive. */
static enum MHD_Result answer_simple(http_t *h, struct MHD_Connection *conn, const char *url, const char *method)
{
	request_t rq = {0};
	const route_t *route = route_request(h, conn, url, method, &rq);
	rq.thread = thread_get(h);
	if (!rq.thread)
		return MHD_NO;
	if (!route)
		return rq.allow ? request_method_not_allowed(&rq) : request_no_route(&rq);
	return dispatch(route, &rq);
}

/* application/json, any case, optionally followed by parameters. */
static bool is_json_type(const char *ct)
{
	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	size_t n = strlen(REQUEST_JSON_TYPE);
	if (strncasecmp(ct, REQUEST_JSON_TYPE, n) != 0)
		return false;
	ct += n;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return *ct == '\0' || *ct == ';';
}

/* A JSON body's headers: 0, or the answer already queued (415 or 400). */
static int check_json_headers(request_t *rq, enum MHD_Result *ret)
{
	const char *ct = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (!is_json_type(ct)) {
		char detail[200];
		snprintf(detail, sizeof detail, "Content-Type must be application/json (got %.64s)", ct ? ct : "none");
		*ret = request_problem(rq, 415, detail, NULL);
		return -EINVAL;
	}
	const char *key = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Idempotency-Key");
	if (key) {
		size_t n = strlen(key);
		bool ok = n >= 1 && n <= REQUEST_IDEM_KEY_MAX;
		for (size_t i = 0; ok && i < n; i++)
			ok = key[i] >= 0x20 && key[i] <= 0x7e;
		if (!ok) {
			*ret = request_bad_request(rq, "Idempotency-Key must be 1 to 255 printable ASCII characters",
			                           NULL);
			return -EINVAL;
		}
		memcpy(rq->idem_key, key, n + 1);
		rq->has_idem_key = true;
	}
	return 0;
}

/* Marks requests answered by answer_simple (no allocation needed). */
static char s_simple;

/* Per-request state of a route that reads a body. */
typedef struct {
	request_t rq;
	const route_t *route;
} body_request_t;

static enum MHD_Result first_call(http_t *h, struct MHD_Connection *conn, const char *url, const char *method,
                                  void **con_cls)
{
	request_t probe = {0};
	const route_t *route = route_request(h, conn, url, method, &probe);
	if (!route || route->method != METRICS_METHOD_POST) {
		*con_cls = &s_simple;
		return MHD_YES;
	}
	probe.thread = thread_get(h);
	if (!probe.thread)
		return MHD_NO;
	/* POST: refuse early what must not be read (the connection then closes):
	 * a caller who may not use the route, then a body over the limit */
	enum MHD_Result refused;
	if (authz_check(&probe, route->perm, &refused) < 0)
		return refused;
	const char *clen = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (clen) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(clen, &end, 10);
		if (errno || end == clen || n > h->max_body_bytes) {
			char detail[200];
			snprintf(detail, sizeof detail, "request body is larger than the limit of %zu bytes",
			         h->max_body_bytes);
			return request_problem(&probe, 413, detail, NULL);
		}
	}
	enum MHD_Result answer;
	if (route->body == ROUTE_BODY_JSON && check_json_headers(&probe, &answer) < 0)
		return answer;
	body_request_t *br = calloc(1, sizeof *br);
	if (!br)
		return MHD_NO;
	br->rq = probe;
	br->route = route;
	*con_cls = br;
	return MHD_YES;
}

/* During shutdown: 503 and close, so keep-alive clients let go. */
static enum MHD_Result refuse_stopping(struct MHD_Connection *conn, const char *url, const char *method)
{
	static const char body[] = "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
	                           "\"detail\":\"the coordinator is shutting down; retry shortly\"}";
	request_t rq = {0};
	route_match(url, metrics_method_index(method), &rq);
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, PROBLEM_CONTENT_TYPE);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	enum MHD_Result r = MHD_queue_response(conn, 503, resp);
	MHD_destroy_response(resp);
	metrics_record(rq.label, metrics_method_index(method), 503, 0);
	return r;
}

/* A body chunk of a POST route: kept for a JSON body under the limit. */
static void take_chunk(http_t *h, body_request_t *br, const char *data, size_t n)
{
	request_t *rq = &br->rq;
	if (br->route->body != ROUTE_BODY_JSON || rq->too_large)
		return; /* a route without a body, or past the limit: discard */
	if (rq->body.len + n > h->max_body_bytes) {
		rq->too_large = true; /* chunked upload past the limit: discard the rest */
		sbuf_free(&rq->body);
		return;
	}
	sbuf_append(&rq->body, data, n);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size,
                              void **con_cls)
{
	http_t *h = cls;
	if (!*con_cls) {
		atomic_fetch_add_explicit(&h->in_flight, 1, memory_order_relaxed);
		if (atomic_load_explicit(&h->stopping, memory_order_relaxed))
			return refuse_stopping(conn, url, method);
		return first_call(h, conn, url, method, con_cls);
	}
	if (*con_cls == (void *)&s_simple) {
		if (*upload_data_size > 0) {
			*upload_data_size = 0; /* a body where none is expected: discard */
			return MHD_YES;
		}
		return answer_simple(h, conn, url, method);
	}
	body_request_t *br = *con_cls;
	if (*upload_data_size > 0) {
		take_chunk(h, br, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	br->rq.thread = thread_get(h);
	if (!br->rq.thread)
		return MHD_NO;
	return br->route->handler(&br->rq); /* authorized on the first call */
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
	http_t *h = cls;
	body_request_t *br = *con_cls;
	if (br && (void *)br != (void *)&s_simple) {
		sbuf_free(&br->rq.body);
		free(br);
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
	authz_init(cfg);
	sessionapi_init(cfg);
	int n_labels;
	const char *const *labels = route_init(&n_labels);
	metrics_init(labels, n_labels);

	h->listen_fd = listen_socket(cfg, err, errlen);
	if (h->listen_fd < 0)
		goto fail;
	/* ALLOW_SUSPEND_RESUME: the event streams (streamapi.c) */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_TURBO |
	                 MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
	if (streamapi_init(cfg->max_streams, cfg->stream_keepalive_ms) < 0) {
		snprintf(err, errlen, "cannot start the event streams' ticker thread");
		goto fail;
	}
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
		streamapi_shutdown(); /* the event streams end now */
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
	request_thread_t *t = h->threads;
	h->threads = NULL;
	pthread_mutex_unlock(&h->lock);
	while (t) {
		request_thread_t *next = t->next;
		request_thread_free(t);
		t = next;
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
