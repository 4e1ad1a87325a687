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
 * Transport limits (config.h) are set as libmicrohttpd options where it
 * has one (connections in all and per client address, the idle timeout,
 * the per-connection memory pool) and checked here where it answers HTML
 * or nothing: on the first call the URL with its query must fit 8192
 * bytes (414) and the header fields max_header_bytes (431), both as
 * problem+json. The pool is sized so that a request a little over those
 * limits still reaches us; one too big for the pool is answered by
 * libmicrohttpd itself (431/414 with its own short HTML) and closed.
 * POST /v1/jobs takes a token from the caller's bucket (ratelimit.h):
 * 429 with Retry-After when it is empty. With --tls-cert/--tls-key the
 * same server speaks HTTPS only (tls.h); the streams work unchanged.
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
#include "httpparse.h"
#include "envallow.h"
#include "jobapi.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"
#include "ratelimit.h"
#include "request.h"
#include "routes.h"
#include "sessionapi.h"
#include "streamapi.h"
#include "tls.h"

_Static_assert(HTTPPARSE_IDEM_KEY_MAX == REQUEST_IDEM_KEY_MAX, "request_t.idem_key holds what httpparse accepts");

/* The URL with its query, as decoded: longer is 414. */
#define HTTP_MAX_URL_BYTES 8192
/* Submissions' buckets kept at once (ratelimit.h). */
#define HTTP_RATE_SLOTS 4096

struct http {
	struct MHD_Daemon *mhd;
	int listen_fd;
	void *zctx;
	int submit_rate, submit_burst;
	char db_path[4096];
	size_t max_body_bytes;
	size_t max_header_bytes;
	tls_files_t tls;        /* PEM text libmicrohttpd serves HTTPS with; empty without TLS */
	ratelimit_t *submit_rl; /* NULL: submissions are not limited */
	atomic_bool started;    /* libmicrohttpd's later messages are per-connection: debug */
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

/* The caller's address as text ("" when unknown). */
static void client_address(struct MHD_Connection *conn, char *out, size_t outlen)
{
	out[0] = '\0';
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (!ci || !ci->client_addr)
		return;
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out, (socklen_t)outlen);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out, (socklen_t)outlen);
}

/* POST /v1/jobs: one token from the caller's bucket (its token's name, or its
 * address when it has none). true with the 429 queued in *ret when empty. */
static bool limit_submission(http_t *h, const route_t *route, request_t *rq, enum MHD_Result *ret)
{
	if (!h->submit_rl || route->method != METRICS_METHOD_POST || strcmp(route->path, "/v1/jobs") != 0)
		return false;
	char key[RATELIMIT_KEY_MAX + 1];
	if (rq->who.name[0]) {
		snprintf(key, sizeof key, "token:%s", rq->who.name);
	} else {
		char addr[INET6_ADDRSTRLEN];
		client_address(rq->conn, addr, sizeof addr);
		snprintf(key, sizeof key, "addr:%s", addr);
	}
	int64_t wait_ms;
	if (ratelimit_take(h->submit_rl, key, clock_mono_us(), &wait_ms) == 0)
		return false;
	int64_t wait_s = (wait_ms + 999) / 1000;
	char detail[256];
	snprintf(detail, sizeof detail, "too many submissions from %s: the limit is %d a minute (burst %d); retry in %lld s",
	         rq->who.name[0] ? "this token" : "this address", h->submit_rate, h->submit_burst, (long long)wait_s);
	*ret = request_problem_retry(rq, 429, detail, wait_s);
	return true;
}

/* Hand the request to its route's handler once the caller may use the
 * route (authz.h: 401, 403 or 421 otherwise) and, for a submission, has
 * not run past the rate (checked on the authenticated caller). */
static enum MHD_Result dispatch(http_t *h, const route_t *route, request_t *rq)
{
	enum MHD_Result answer;
	if (authz_check(rq, route->perm, &answer) < 0)
		return answer;
	if (limit_submission(h, route, rq, &answer))
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
	return dispatch(h, route, &rq);
}

/* A JSON body's headers: 0, or the answer already queued (415 or 400). */
static int check_json_headers(request_t *rq, enum MHD_Result *ret)
{
	const char *ct = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (!httpparse_json_type(ct)) {
		char detail[200];
		snprintf(detail, sizeof detail, "Content-Type must be application/json (got %.64s)", ct ? ct : "none");
		*ret = request_problem(rq, 415, detail, NULL);
		return -EINVAL;
	}
	const char *key = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Idempotency-Key");
	if (key) {
		if (!httpparse_idem_key(key)) {
			*ret = request_bad_request(rq, "Idempotency-Key must be 1 to 255 printable ASCII characters",
			                           NULL);
			return -EINVAL;
		}
		memcpy(rq->idem_key, key, strlen(key) + 1);
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

/* Sums the bytes of one kind of connection values (MHD_KeyValueIterator). */
static enum MHD_Result add_value_bytes(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	size_t *n = cls;
	*n += strlen(key) + (value ? strlen(value) : 0) + 4; /* ": " and CRLF, or "=" and "&" */
	return MHD_YES;
}

/* The URL with its query (414) and the header fields (431) within their
 * limits: 0, or the answer queued in *ret. */
static int check_request_size(http_t *h, request_t *probe, enum MHD_Result *ret)
{
	size_t url_bytes = strlen(probe->url);
	MHD_get_connection_values(probe->conn, MHD_GET_ARGUMENT_KIND, add_value_bytes, &url_bytes);
	char detail[200];
	if (url_bytes > HTTP_MAX_URL_BYTES) {
		snprintf(detail, sizeof detail, "the URL with its query is %zu bytes, longer than the limit of %d",
		         url_bytes, HTTP_MAX_URL_BYTES);
		*ret = request_problem(probe, 414, detail, NULL);
		return -EINVAL;
	}
	size_t header_bytes = 0;
	MHD_get_connection_values(probe->conn, MHD_HEADER_KIND, add_value_bytes, &header_bytes);
	if (header_bytes > h->max_header_bytes) {
		snprintf(detail, sizeof detail,
		         "the request's header fields are %zu bytes, more than the limit of %zu (max_header_bytes)",
		         header_bytes, h->max_header_bytes);
		*ret = request_problem(probe, 431, detail, NULL);
		return -EINVAL;
	}
	return 0;
}

static enum MHD_Result first_call(http_t *h, struct MHD_Connection *conn, const char *url, const char *method,
                                  void **con_cls)
{
	request_t probe = {0};
	const route_t *route = route_request(h, conn, url, method, &probe);
	enum MHD_Result too_big;
	if (check_request_size(h, &probe, &too_big) < 0)
		return too_big;
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
		if (httpparse_content_length(clen, h->max_body_bytes) < 0) {
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
	/* authorized on the first call; the rate on the authenticated caller */
	enum MHD_Result limited;
	if (limit_submission(h, br->route, &br->rq, &limited))
		return limited;
	return br->route->handler(&br->rq);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
	http_t *h = cls;
	if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED || toe == MHD_REQUEST_TERMINATED_READ_ERROR ||
	    toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT || toe == MHD_REQUEST_TERMINATED_WITH_ERROR)
		metrics_request_aborted(toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED);
	body_request_t *br = *con_cls;
	if (br && (void *)br != (void *)&s_simple) {
		sbuf_free(&br->rq.body);
		free(br);
		*con_cls = NULL;
	}
	atomic_fetch_sub_explicit(&h->in_flight, 1, memory_order_relaxed);
}

/* libmicrohttpd's messages: while starting, errors (a bad option, a TLS
 * failure); once serving, they are about one connection (a client that
 * reset, timed out or sent garbage), which any client can cause at will, so
 * they are debug lines rather than a warning each. */
static void connection_event(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode code)
{
	metrics_connection_opened(code == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	http_t *h = cls;
	char line[512];
	vsnprintf(line, sizeof line, fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	if (atomic_load_explicit(&h->started, memory_order_relaxed))
		log_debug("libmicrohttpd: %s", line);
	else
		log_error("libmicrohttpd: %s", line);
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

/* The daemon with the transport's options (config.h). */
static struct MHD_Daemon *start_mhd(http_t *h, const config_t *cfg)
{
	/* ALLOW_SUSPEND_RESUME: the event streams (streamapi.c) */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_TURBO |
	                 MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
	/* Each connection's memory pool holds its read buffer (request line and
	 * header fields) and the response's headers: room for a request a
	 * little past our limits, so that it gets our 414/431, not
	 * libmicrohttpd's HTML. */
	size_t pool_bytes = 2 * (cfg->max_header_bytes + HTTP_MAX_URL_BYTES) + 16384;
	struct MHD_OptionItem opts[8];
	int n = 0;
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, (intptr_t)cfg->max_connections, NULL};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)cfg->max_connections_per_ip,
	                                    NULL};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->idle_timeout_s, NULL};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)pool_bytes, NULL};
	if (h->tls.cert_pem) {
		flags |= MHD_USE_TLS;
		opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls.cert_pem};
		opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls.key_pem};
	}
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
	return MHD_start_daemon(flags, 0, NULL, NULL, handle, h,
	                        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
	                        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)h->listen_fd,
	                        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
	                        MHD_OPTION_NOTIFY_COMPLETED, completed, h,
	                        MHD_OPTION_NOTIFY_CONNECTION, connection_event, NULL,
	                        MHD_OPTION_ARRAY, opts,
	                        MHD_OPTION_END);
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
	h->max_header_bytes = cfg->max_header_bytes;
	h->submit_rate = cfg->submit_rate;
	h->submit_burst = cfg->submit_burst;
	atomic_init(&h->started, false);
	snprintf(h->db_path, sizeof h->db_path, "%s", cfg->db);
	pthread_mutex_init(&h->lock, NULL);
	atomic_init(&h->in_flight, 0);
	atomic_init(&h->stopping, false);
	authz_init(cfg);
	sessionapi_init(cfg);
	int n_labels;
	const char *const *labels = route_init(&n_labels);
	metrics_init(labels, n_labels);

	if (cfg->submit_rate > 0 &&
	    !(h->submit_rl = ratelimit_new(cfg->submit_rate, cfg->submit_burst, HTTP_RATE_SLOTS))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (cfg->tls_cert[0] && tls_files_load(cfg->tls_cert, cfg->tls_key, &h->tls, err, errlen) < 0)
		goto fail;
	h->listen_fd = listen_socket(cfg, err, errlen);
	if (h->listen_fd < 0)
		goto fail;
	jobapi_set_max_queued(cfg->max_queued_jobs); /* the queue cap (jobapi.c) */
	envallow_set(cfg->env_allow);                /* program.env's allow-list (envallow.c) */
	envallow_set_job(cfg->job_env_allow);        /* and the spec's env's */
	if (streamapi_init(cfg->max_streams, cfg->stream_keepalive_ms) < 0) {
		snprintf(err, errlen, "cannot start the event streams' ticker thread");
		goto fail;
	}
	h->mhd = start_mhd(h, cfg);
	if (!h->mhd) {
		snprintf(err, errlen, "cannot start the HTTP%s server on %s:%s (see the libmicrohttpd line above)",
		         h->tls.cert_pem ? "S" : "", cfg->listen_host, cfg->listen_port);
		goto fail;
	}
	atomic_store(&h->started, true);
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
	tls_files_clear(&h->tls);
	ratelimit_free(h->submit_rl);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
