/*
 * metrics: lock-free request counters and the Prometheus exposition (see
 * metrics.h). Counters are indexed [route][method][status - 100]; only
 * non-zero series are exported, so the page stays short.
 */
#include "metrics.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define N_STATUS 500 /* 100..599 */

static const double s_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                  0.1,    0.25,  0.5,    1.0,   2.5,  5.0};
#define N_BUCKETS (sizeof s_bounds / sizeof s_bounds[0])

typedef struct {
	_Atomic uint64_t buckets[N_BUCKETS]; /* non-cumulative; +Inf is count */
	_Atomic uint64_t count;
	_Atomic uint64_t sum_us;
} histogram_t;

static const char *const *s_route_names;
static int s_n_routes;
static _Atomic uint64_t s_requests[METRICS_MAX_ROUTES][METRICS_N_METHODS][N_STATUS];
static histogram_t s_latency[METRICS_MAX_ROUTES];
static _Atomic uint64_t s_commits_ok, s_commits_failed, s_commit_commands;
static int64_t s_start_time_s;
static _Atomic int64_t s_streams_open;
static _Atomic uint64_t s_streams_rejected;
static _Atomic int64_t s_connections_open;
static _Atomic uint64_t s_requests_aborted, s_requests_timed_out;

static const char *const s_method_names[METRICS_N_METHODS] = {
	"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "OTHER",
};

metrics_method_t metrics_method_index(const char *method)
{
	for (int i = 0; i < METRICS_METHOD_OTHER; i++)
		if (strcmp(method, s_method_names[i]) == 0)
			return (metrics_method_t)i;
	return METRICS_METHOD_OTHER;
}

const char *metrics_method_name(metrics_method_t method)
{
	return (unsigned)method < METRICS_N_METHODS ? s_method_names[method] : "OTHER";
}

void metrics_init(const char *const *route_names, int n_routes)
{
	s_route_names = route_names;
	s_n_routes = n_routes < METRICS_MAX_ROUTES ? n_routes : METRICS_MAX_ROUTES;
	s_start_time_s = (int64_t)time(NULL);
}

void metrics_record(int route, metrics_method_t method, int status, int64_t duration_us)
{
	if (route < 0 || route >= s_n_routes || status < 100 || status > 599)
		return;
	atomic_fetch_add_explicit(&s_requests[route][method][status - 100], 1, memory_order_relaxed);
	histogram_t *h = &s_latency[route];
	double secs = (double)duration_us / 1e6;
	for (size_t i = 0; i < N_BUCKETS; i++) {
		if (secs <= s_bounds[i]) {
			atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
			break;
		}
	}
	atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_us, (uint64_t)(duration_us < 0 ? 0 : duration_us),
	                          memory_order_relaxed);
}

void metrics_record_commit(int n_commands, int ok)
{
	atomic_fetch_add_explicit(ok ? &s_commits_ok : &s_commits_failed, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s_commit_commands, (uint64_t)n_commands, memory_order_relaxed);
}

static uint64_t load(_Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

void metrics_stream_opened(int delta)
{
	atomic_fetch_add_explicit(&s_streams_open, delta, memory_order_relaxed);
}

void metrics_stream_rejected(void)
{
	atomic_fetch_add_explicit(&s_streams_rejected, 1, memory_order_relaxed);
}

void metrics_connection_opened(int delta)
{
	atomic_fetch_add_explicit(&s_connections_open, delta, memory_order_relaxed);
}

void metrics_request_aborted(bool timed_out)
{
	atomic_fetch_add_explicit(timed_out ? &s_requests_timed_out : &s_requests_aborted, 1, memory_order_relaxed);
}

void metrics_render(sbuf_t *out, const int64_t job_counts[STORE_JOB_N_STATES])
{
	sbuf_puts(out, "# HELP ringmaster_build_info Build of this ringmasterd.\n"
	               "# TYPE ringmaster_build_info gauge\n"
	               "ringmaster_build_info{version=\"" RINGMASTER_VERSION "\"} 1\n"
	               "# HELP ringmaster_up 1 while the coordinator serves.\n"
	               "# TYPE ringmaster_up gauge\n"
	               "ringmaster_up 1\n"
	               "# HELP ringmaster_process_start_time_seconds Start time of the process since the Unix epoch.\n"
	               "# TYPE ringmaster_process_start_time_seconds gauge\n");
	sbuf_printf(out, "ringmaster_process_start_time_seconds %lld\n", (long long)s_start_time_s);
	sbuf_printf(out,
	            "# HELP ringmaster_http_streams_open Server-Sent Events streams open now.\n"
	            "# TYPE ringmaster_http_streams_open gauge\n"
	            "ringmaster_http_streams_open %lld\n"
	            "# HELP ringmaster_http_streams_rejected_total Streams refused with 503 because max_streams were open.\n"
	            "# TYPE ringmaster_http_streams_rejected_total counter\n"
	            "ringmaster_http_streams_rejected_total %llu\n",
	            (long long)atomic_load_explicit(&s_streams_open, memory_order_relaxed),
	            (unsigned long long)load(&s_streams_rejected));
	sbuf_printf(out,
	            "# HELP ringmaster_http_connections_open HTTP connections open now.\n"
	            "# TYPE ringmaster_http_connections_open gauge\n"
	            "ringmaster_http_connections_open %lld\n"
	            "# HELP ringmaster_http_requests_aborted_total Requests the client reset or left before the answer.\n"
	            "# TYPE ringmaster_http_requests_aborted_total counter\n"
	            "ringmaster_http_requests_aborted_total %llu\n"
	            "# HELP ringmaster_http_requests_timed_out_total Requests closed by idle_timeout_s.\n"
	            "# TYPE ringmaster_http_requests_timed_out_total counter\n"
	            "ringmaster_http_requests_timed_out_total %llu\n",
	            (long long)atomic_load_explicit(&s_connections_open, memory_order_relaxed),
	            (unsigned long long)load(&s_requests_aborted), (unsigned long long)load(&s_requests_timed_out));

	if (job_counts) {
		sbuf_puts(out, "# HELP ringmaster_jobs Jobs in the store by state.\n"
		               "# TYPE ringmaster_jobs gauge\n");
		for (int s = 0; s < STORE_JOB_N_STATES; s++)
			sbuf_printf(out, "ringmaster_jobs{state=\"%s\"} %lld\n",
			            store_job_state_name((store_job_state_t)s), (long long)job_counts[s]);
	}

	sbuf_puts(out, "# HELP ringmaster_http_requests_total HTTP requests by route template, method and status.\n"
	               "# TYPE ringmaster_http_requests_total counter\n");
	for (int r = 0; r < s_n_routes; r++)
		for (int m = 0; m < METRICS_N_METHODS; m++)
			for (int s = 0; s < N_STATUS; s++) {
				uint64_t n = load(&s_requests[r][m][s]);
				if (n)
					sbuf_printf(out,
					            "ringmaster_http_requests_total{route=\"%s\",method=\"%s\",status=\"%d\"} %llu\n",
					            s_route_names[r], s_method_names[m], s + 100, (unsigned long long)n);
			}

	sbuf_puts(out, "# HELP ringmaster_http_request_duration_seconds Time to produce an HTTP response, by route template.\n"
	               "# TYPE ringmaster_http_request_duration_seconds histogram\n");
	for (int r = 0; r < s_n_routes; r++) {
		histogram_t *h = &s_latency[r];
		uint64_t count = load(&h->count);
		if (!count)
			continue;
		uint64_t cum = 0;
		for (size_t i = 0; i < N_BUCKETS; i++) {
			cum += load(&h->buckets[i]);
			sbuf_printf(out, "ringmaster_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
			            s_route_names[r], s_bounds[i], (unsigned long long)cum);
		}
		if (cum > count) /* buckets were bumped after count was read */
			count = cum;
		sbuf_printf(out, "ringmaster_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n",
		            s_route_names[r], (unsigned long long)count);
		sbuf_printf(out, "ringmaster_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n",
		            s_route_names[r], (double)load(&h->sum_us) / 1e6);
		sbuf_printf(out, "ringmaster_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
		            s_route_names[r], (unsigned long long)count);
	}

	sbuf_printf(out,
	            "# HELP ringmaster_store_commits_total Group-commit transactions of the writer loop by outcome.\n"
	            "# TYPE ringmaster_store_commits_total counter\n"
	            "ringmaster_store_commits_total{outcome=\"ok\"} %llu\n"
	            "ringmaster_store_commits_total{outcome=\"failed\"} %llu\n"
	            "# HELP ringmaster_store_commands_total Mutations applied by the writer loop.\n"
	            "# TYPE ringmaster_store_commands_total counter\n"
	            "ringmaster_store_commands_total %llu\n",
	            (unsigned long long)load(&s_commits_ok), (unsigned long long)load(&s_commits_failed),
	            (unsigned long long)load(&s_commit_commands));
}

static void put_gauge_value(sbuf_t *out, double v)
{
	if (isfinite(v))
		sbuf_printf(out, "%.17g\n", v);
	else
		sbuf_puts(out, "NaN\n");
}

void metrics_render_cluster(sbuf_t *out, const int64_t *workers, const metrics_job_t *jobs, size_t n_jobs)
{
	if (workers)
		sbuf_printf(out,
		            "# HELP ringmaster_workers Worker agents by state.\n"
		            "# TYPE ringmaster_workers gauge\n"
		            "ringmaster_workers{state=\"alive\"} %lld\n"
		            "ringmaster_workers{state=\"dead\"} %lld\n",
		            (long long)workers[0], (long long)workers[1]);
	if (!jobs || n_jobs == 0)
		return;
	sbuf_puts(out, "# HELP ringmaster_job_step Latest step reported by a running job's rank 0.\n"
	               "# TYPE ringmaster_job_step gauge\n");
	for (size_t i = 0; i < n_jobs; i++)
		sbuf_printf(out, "ringmaster_job_step{job=\"%s\"} %lld\n", jobs[i].job_id, jobs[i].step);
	sbuf_puts(out, "# HELP ringmaster_job_loss Latest training loss of a running job (mean over ranks).\n"
	               "# TYPE ringmaster_job_loss gauge\n");
	for (size_t i = 0; i < n_jobs; i++) {
		sbuf_printf(out, "ringmaster_job_loss{job=\"%s\"} ", jobs[i].job_id);
		put_gauge_value(out, jobs[i].loss);
	}
	sbuf_puts(out, "# HELP ringmaster_job_tokens_per_second Latest training throughput of a running job.\n"
	               "# TYPE ringmaster_job_tokens_per_second gauge\n");
	for (size_t i = 0; i < n_jobs; i++) {
		sbuf_printf(out, "ringmaster_job_tokens_per_second{job=\"%s\"} ", jobs[i].job_id);
		put_gauge_value(out, jobs[i].tokens_per_s);
	}
}

void metrics_render_rank_memory(sbuf_t *out, const metrics_rank_memory_t *ranks, size_t n)
{
	if (!ranks || n == 0)
		return;
	sbuf_puts(out, "# HELP ringmaster_rank_memory_bytes Memory a rank of a running job holds, by kind "
	               "(parameters, gradients, optimizer state, activations).\n"
	               "# TYPE ringmaster_rank_memory_bytes gauge\n");
	for (size_t i = 0; i < n; i++) {
		const metrics_rank_memory_t *r = &ranks[i];
		const struct {
			const char *kind;
			int64_t bytes;
		} kinds[] = {
			{"params", r->memory.params_bytes},
			{"grads", r->memory.grads_bytes},
			{"optimizer", r->memory.optim_bytes},
			{"activations", r->memory.activations_bytes},
		};
		for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
			sbuf_printf(out, "ringmaster_rank_memory_bytes{job=\"%s\",rank=\"%d\",kind=\"%s\"} %lld\n",
			            r->job_id, r->rank, kinds[k].kind, (long long)kinds[k].bytes);
	}
}

void metrics_render_job_restarts(sbuf_t *out, const metrics_job_restarts_t *jobs, size_t n)
{
	if (!jobs || n == 0)
		return;
	sbuf_puts(out, "# HELP ringmaster_job_restarts_total Restarts of a job's rank group after a failure "
	               "(scheduled, running and recovering jobs).\n"
	               "# TYPE ringmaster_job_restarts_total counter\n");
	for (size_t i = 0; i < n; i++)
		sbuf_printf(out, "ringmaster_job_restarts_total{job=\"%s\"} %d\n", jobs[i].job_id, jobs[i].restarts);
}
