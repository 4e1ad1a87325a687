/*
 * metrics: Prometheus text exposition (format 0.0.4) of the coordinator.
 *
 * HTTP threads record each request (route template, method, status, time to
 * produce the response) with relaxed atomic increments: no lock and no
 * allocation on the request path. /metrics renders the counters together with
 * gauges that the caller supplies (jobs by state, workers by state, running
 * jobs' latest step, loss and tokens/s, their ranks' memory). Every metric is prefixed
 * ringmaster_.
 */
#ifndef RINGMASTER_COORDINATORD_METRICS_H
#define RINGMASTER_COORDINATORD_METRICS_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "sbuf.h"
#include "store.h"

#define METRICS_MAX_ROUTES 40

typedef enum {
	METRICS_METHOD_GET = 0,
	METRICS_METHOD_HEAD,
	METRICS_METHOD_POST,
	METRICS_METHOD_PUT,
	METRICS_METHOD_DELETE,
	METRICS_METHOD_PATCH,
	METRICS_METHOD_OPTIONS,
	METRICS_METHOD_OTHER,
	METRICS_N_METHODS
} metrics_method_t;

/* Map an HTTP method string to its index (METRICS_METHOD_OTHER if unknown). */
metrics_method_t metrics_method_index(const char *method);
/* The method's name ("GET"; "OTHER" for METRICS_METHOD_OTHER), static. */
const char *metrics_method_name(metrics_method_t method);

/* Register the route labels (borrowed, must outlive the process' use of
 * metrics); index n is the `route` argument of metrics_record. At most
 * METRICS_MAX_ROUTES. Call once before serving. */
void metrics_init(const char *const *route_names, int n_routes);

/* Count one request. `status` 100..599; `duration_us` time to the response. */
void metrics_record(int route, metrics_method_t method, int status, int64_t duration_us);

/* Writer-loop counters: one group commit of `n_commands` commands. */
void metrics_record_commit(int n_commands, int ok);

/* Append the whole exposition. `job_counts` may be NULL when the store could
 * not be read (the jobs gauge is then omitted). */
void metrics_render(sbuf_t *out, const int64_t job_counts[STORE_JOB_N_STATES]);

/* Server-Sent Events streams (streamapi.c): open ones (+1 / -1) and those
 * refused at the cap; shown as ringmaster_http_streams_open and
 * ringmaster_http_streams_rejected_total. */
void metrics_stream_opened(int delta);
void metrics_stream_rejected(void);

/* HTTP connections (http.c): open ones (+1 / -1), and requests that ended
 * without their answer sent: the client went away or reset, or the
 * connection hit idle_timeout_s; shown as ringmaster_http_connections_open,
 * ringmaster_http_requests_aborted_total and
 * ringmaster_http_requests_timed_out_total (libmicrohttpd's per-connection
 * messages are debug lines; these are what to watch). */
void metrics_connection_opened(int delta);
void metrics_request_aborted(bool timed_out);

/* The latest metrics of one running job, for the per-job gauges. */
typedef struct {
	char job_id[STORE_ID_BYTES];
	long long step;
	double loss, tokens_per_s; /* NAN when not reported */
} metrics_job_t;

/* Append the cluster gauges: workers by state (`workers` = {alive, dead}, or
 * NULL when unreadable) and, per running job with metrics, its latest step,
 * loss and tokens/s (labels job="ID"). */
void metrics_render_cluster(sbuf_t *out, const int64_t *workers, const metrics_job_t *jobs, size_t n_jobs);

/* What one rank of a running job holds in memory. */
typedef struct {
	char job_id[STORE_ID_BYTES];
	int rank;
	store_rank_memory_t memory;
} metrics_rank_memory_t;

/* Append the gauge ringmaster_rank_memory_bytes{job,rank,kind} (kind params,
 * grads, optimizer, activations) for `n` ranks; nothing when n is 0. */
void metrics_render_rank_memory(sbuf_t *out, const metrics_rank_memory_t *ranks, size_t n);

/* One job's restarts so far (a scheduled, running or recovering job). */
typedef struct {
	char job_id[STORE_ID_BYTES];
	int restarts;
} metrics_job_restarts_t;

/* Append the counter ringmaster_job_restarts_total{job} for `n` jobs;
 * nothing when n is 0. */
void metrics_render_job_restarts(sbuf_t *out, const metrics_job_restarts_t *jobs, size_t n);

#endif
