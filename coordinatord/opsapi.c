/*
 * opsapi: the operator's routes (see opsapi.h).
 */
#include "opsapi.h"
#include "workerapi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobview.h"
#include "metrics.h"
#include "store.h"

#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define PING_TIMEOUT_MS 1000

/* ---- GET /v1/workers ---- */

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
	json_t *workers;
	rank_rows_t *ranks;
	size_t next; /* first rank row not yet consumed */
} workers_ctx_t;

/* The worker's ranks: the rank rows of its node, which start at wc->next
 * (both lists are in node order); *ret_n_running of them placed or joined. */
static json_t *worker_ranks(workers_ctx_t *wc, const char *node, size_t *ret_n_running)
{
	/* skip rank rows of nodes without a worker row */
	while (wc->next < wc->ranks->n && strcmp(wc->ranks->rows[wc->next].node, node) < 0)
		wc->next++;
	json_t *ranks = json_array();
	size_t n_running = 0;
	while (wc->next < wc->ranks->n && strcmp(wc->ranks->rows[wc->next].node, node) == 0) {
		const rank_row_t *r = &wc->ranks->rows[wc->next++];
		n_running += strcmp(r->state, "placed") == 0 || strcmp(r->state, "joined") == 0;
		json_t *v = json_pack("{so si si s{so si} so}", "job", jobview_string(r->job_id), "attempt", r->attempt,
		                      "rank", r->rank, "device", "kind", jobview_string(r->device_kind), "index",
		                      r->device_index, "state", jobview_string(r->state));
		if (!v || json_array_append_new(ranks, v) < 0) {
			json_decref(ranks);
			return NULL;
		}
	}
	*ret_n_running = n_running;
	return ranks;
}

static int list_worker_fn(const store_worker_t *w, void *userdata)
{
	workers_ctx_t *wc = userdata;
	size_t n_running = 0;
	json_t *ranks = worker_ranks(wc, w->node, &n_running);
	json_t *devices = json_loads(w->devices_json ? w->devices_json : "null", JSON_DECODE_ANY, NULL);
	json_t *v = json_pack("{so so so so so sI so}", "node", jobview_string(w->node), "state",
	                      jobview_string(w->state), "devices", devices, "last_heartbeat",
	                      w->has_heartbeat ? jobview_time(w->last_heartbeat_us) : json_null(), "registered_at",
	                      w->registered_at_us ? jobview_time(w->registered_at_us) : json_null(),
	                      "running_ranks", (json_int_t)n_running, "ranks", ranks);
	if (!v || json_array_append_new(wc->workers, v) < 0)
		return -ENOMEM;
	return 0;
}

enum MHD_Result opsapi_workers(request_t *rq)
{
	store_t *st = request_reader(rq);
	rank_rows_t ranks = {0};
	int r = st ? store_rank_list_active(st, collect_rank, &ranks) : -EIO;
	workers_ctx_t wc = {.workers = json_array(), .ranks = &ranks};
	if (r == 0)
		r = wc.workers ? store_worker_list(st, list_worker_fn, &wc) : -ENOMEM;
	if (r == 0)
		workerapi_annotate_keys(st, wc.workers); /* each worker's key {id, name} */
	for (size_t i = 0; i < ranks.n; i++)
		free(ranks.rows[i].node);
	free(ranks.rows);
	if (r < 0) {
		json_decref(wc.workers);
		if (r == -ENOMEM)
			return request_problem(rq, 500, "out of memory while building the response", NULL);
		return request_db_unavailable(rq);
	}
	return request_reply_json(rq, 200, json_pack("{so}", "workers", wc.workers));
}

/* ---- GET /healthz, /readyz ---- */

enum MHD_Result opsapi_healthz(request_t *rq)
{
	return request_reply_json(rq, 200, json_pack("{ss}", "status", "ok"));
}

enum MHD_Result opsapi_readyz(request_t *rq)
{
	store_t *st = request_reader(rq);
	int64_t n;
	if (!st || store_job_count(st, &n) < 0)
		return request_problem(rq, 503, "the database is not readable", NULL);
	broker_client_t *bc = request_client(rq);
	if (!bc || broker_client_ping(bc, PING_TIMEOUT_MS) < 0)
		return request_problem(rq, 503, "the writer loop did not answer within 1 s", NULL);
	return request_reply_json(rq, 200, json_pack("{ss}", "status", "ready"));
}

/* ---- GET /metrics ---- */

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

enum MHD_Result opsapi_metrics(request_t *rq)
{
	store_t *st = request_reader(rq);
	sbuf_t *out = &rq->thread->out;
	int64_t counts[STORE_JOB_N_STATES];
	bool have_counts = st && store_job_count_by_state(st, counts) == 0;
	int64_t workers[2];
	bool have_workers = st && store_worker_count_by_state(st, &workers[0], &workers[1]) == 0;
	job_gauges_t g = {0};
	bool have_jobs = st && store_metric_latest_running(st, collect_job_gauge, &g) == 0;
	sbuf_reset(out);
	metrics_render(out, have_counts ? counts : NULL);
	metrics_render_cluster(out, have_workers ? workers : NULL, have_jobs ? g.jobs : NULL,
	                       have_jobs ? g.n : 0);
	free(g.jobs);
	rank_gauges_t rg = {0};
	if (st && store_rank_list_memory_running(st, collect_rank_memory, &rg) == 0)
		metrics_render_rank_memory(out, rg.ranks, rg.n);
	free(rg.ranks);
	restart_gauges_t xg = {0};
	if (st && store_job_list_restarts(st, collect_restarts, &xg) == 0)
		metrics_render_job_restarts(out, xg.jobs, xg.n);
	free(xg.jobs);
	return request_reply_out(rq, 200, METRICS_TYPE);
}
