/*
 * jobapi: the job routes (see jobapi.h).
 */
#include "jobapi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "capacity.h"
#include "envallow.h"
#include "jobspec.h"
#include "jobview.h"
#include "memfit.h"
#include "problem.h"
#include "store.h"
#include "traces.h"

#define WRITE_TIMEOUT_MS 10000
#define LIST_DEFAULT_LIMIT 100
#define LIST_MAX_LIMIT 1000

/* ---- GET handlers ---- */

/*
 * A list being filled by a store_*_list callback: the views so far and the
 * key of the last one (for the next page). A callback returns -ENOMEM when
 * the view cannot be built, which stops the listing.
 */
typedef struct {
	json_t *items;
	long long last;
} list_ctx_t;

static int list_append(list_ctx_t *l, json_t *item, long long key)
{
	if (!item || json_array_append_new(l->items, item) < 0)
		return -ENOMEM;
	l->last = key;
	return 0;
}

static int rank_fn(const store_rank_t *r, void *userdata)
{
	return list_append(userdata, jobview_rank(r), r->rank);
}

static int checkpoint_fn(const store_checkpoint_t *cp, void *userdata)
{
	return list_append(userdata, jobview_checkpoint(cp), cp->step);
}

static int event_fn(const store_event_t *ev, void *userdata)
{
	return list_append(userdata, jobview_event(ev), ev->id);
}

static int metric_fn(const store_metric_t *m, void *userdata)
{
	return list_append(userdata, jobview_metric(m), m->step);
}

/*
 * Answer a listing that ended with `r`: 404 (-ENOENT, no such job), 500 (a
 * view could not be built), 503 (the store failed) or 200 with `doc` (a
 * json_pack format taking the list and `next`, both stolen). Takes l->items
 * and `next` in every case.
 */
static enum MHD_Result list_reply(request_t *rq, int r, list_ctx_t *l, const char *key, json_t *next,
                                  const char *next_key)
{
	if (r < 0 || !l->items) {
		json_decref(l->items);
		json_decref(next);
		if (r == -ENOENT)
			return request_job_not_found(rq);
		if (r == -ENOMEM || !l->items)
			return request_problem(rq, 500, "out of memory while building the response", NULL);
		return request_db_unavailable(rq);
	}
	json_t *doc = next_key ? json_pack("{so so}", key, l->items, next_key, next ? next : json_null())
	                       : json_pack("{so}", key, l->items);
	return request_reply_json(rq, 200, doc);
}

/* A page of job objects, written by hand into `out`. */
typedef struct {
	sbuf_t *out;
	int n;
	long long last;
} job_list_t;

static int job_fn(const store_job_t *job, void *userdata)
{
	job_list_t *l = userdata;
	if (l->n++)
		sbuf_putc(l->out, ',');
	jobview_job(l->out, job);
	l->last = job->seq;
	return 0;
}

/* next_cursor: the cursor after the page's last item, null on the last page. */
static json_t *next_cursor(bool more, const list_ctx_t *l)
{
	if (!more || json_array_size(l->items) == 0)
		return json_null();
	char cur[JOBVIEW_CURSOR_BYTES];
	jobview_cursor_encode(l->last, cur);
	return json_string(cur);
}

/* ---- GET handlers ---- */

enum MHD_Result jobapi_get(request_t *rq)
{
	const char *id = rq->id;
	if (!request_plausible_id(id))
		return request_job_not_found(rq);
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	store_job_t job;
	memset(&job, 0, sizeof job);
	int r = store_job_get(st, id, &job);
	if (r == -ENOENT)
		return request_job_not_found(rq);
	if (r < 0)
		return request_db_unavailable(rq);
	list_ctx_t l = {.items = json_array()};
	r = l.items ? store_rank_list_attempt(st, id, job.attempt, rank_fn, &l) : -ENOMEM;
	char *ranks = r == 0 ? json_dumps(l.items, JSON_COMPACT) : NULL;
	if (r == 0 && !ranks)
		r = -ENOMEM;
	if (r < 0) {
		store_job_clear(&job);
		if (r == -ENOENT)
			r = -EIO; /* the job was there a moment ago */
		return list_reply(rq, r, &l, NULL, NULL, NULL);
	}
	json_decref(l.items);
	/* the job object by hand (jobview.h says why), its ranks from jansson */
	sbuf_t *out = &rq->thread->out;
	sbuf_reset(out);
	jobview_job_open(out, &job);
	store_job_clear(&job);
	sbuf_puts(out, ",\"ranks\":");
	sbuf_puts(out, ranks);
	sbuf_putc(out, '}');
	free(ranks);
	return request_reply_out(rq, 200, REQUEST_JSON_TYPE);
}

enum MHD_Result jobapi_checkpoints(request_t *rq)
{
	const char *id = rq->id;
	if (!request_plausible_id(id))
		return request_job_not_found(rq);
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	list_ctx_t l = {.items = json_array()};
	int r = l.items ? store_checkpoint_list(st, id, checkpoint_fn, &l) : -ENOMEM;
	return list_reply(rq, r, &l, "checkpoints", NULL, NULL);
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
static int query_int(request_t *rq, const char *key, long lo, long hi, long *ret, char *detail,
                     size_t detail_len)
{
	const char *v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, key);
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
enum MHD_Result jobapi_trace(request_t *rq)
{
	const char *id = rq->id;
	if (!request_plausible_id(id))
		return request_job_not_found(rq);
	char detail[512];
	trace_query_t q = {0};
	MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, trace_query_iter, &q);
	if (q.bad_key) {
		snprintf(detail, sizeof detail, "unknown query parameter \"%.64s\" (allowed: attempt, rank)", q.bad_key);
		return request_bad_request(rq, detail, NULL);
	}
	if (q.n_attempt > 1 || q.n_rank > 1)
		return request_bad_request(rq, "each query parameter may appear once", NULL);
	long attempt = -1, rank = -1;
	if (query_int(rq, "attempt", 1, INT32_MAX, &attempt, detail, sizeof detail) < 0)
		return request_bad_request(rq, detail, "attempt");
	if (query_int(rq, "rank", 0, JOBSPEC_MAX_WORLD_SIZE - 1, &rank, detail, sizeof detail) < 0)
		return request_bad_request(rq, detail, "rank");
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	store_job_t job;
	memset(&job, 0, sizeof job);
	int r = store_job_get(st, id, &job);
	if (r == -ENOENT)
		return request_job_not_found(rq);
	if (r < 0)
		return request_db_unavailable(rq);
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
		return request_problem(rq, 404, detail, NULL);
	}
	sbuf_reset(&rq->thread->out);
	r = traces_render(st, id, (int)attempt, (int)rank, &rq->thread->out);
	if (r == -ENOENT)
		return request_job_not_found(rq);
	if (r < 0)
		return request_problem(rq, 503, "the job's trace cannot be read; retry later", NULL);
	if (r == 0) {
		store_trace_usage_t u = {0};
		if (store_trace_usage(st, id, &u) < 0)
			return request_problem(rq, 503, "the job's trace cannot be read; retry later", NULL);
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
		return request_problem(rq, 404, detail, NULL);
	}
	return request_reply_out(rq, 200, REQUEST_JSON_TYPE);
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
static int parse_paging(request_t *rq, bool allow_state, int *ret_limit,
                        long long *ret_after, bool *ret_has_state, store_job_state_t *ret_state,
                        char *detail, size_t detail_len, const char **ret_pointer)
{
	query_check_t q = {.allow_state = allow_state};
	MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, query_iter, &q);
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
	if (allow_state && (v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "state"))) {
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
	if ((v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "limit"))) {
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
	if ((v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "cursor"))) {
		if (jobview_cursor_decode(v, ret_after) < 0) {
			snprintf(detail, detail_len,
			         "cursor is not one this server gave out; pass next_cursor from a previous page unchanged");
			*ret_pointer = "cursor";
			return -EINVAL;
		}
	}
	return 0;
}

enum MHD_Result jobapi_list(request_t *rq)
{
	char detail[256];
	const char *pointer = NULL;
	int limit;
	long long after;
	bool has_state;
	store_job_state_t state;
	if (parse_paging(rq, true, &limit, &after, &has_state, &state, detail, sizeof detail, &pointer) < 0)
		return request_bad_request(rq, detail, pointer);
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	/* job objects by hand (jobview.h says why) */
	sbuf_t *out = &rq->thread->out;
	sbuf_reset(out);
	sbuf_puts(out, "{\"jobs\":[");
	job_list_t l = {.out = out};
	bool more = false;
	int r = store_job_list(st, has_state ? &state : NULL, after, limit, job_fn, &l, &more);
	if (r < 0)
		return request_db_unavailable(rq);
	sbuf_puts(out, "],\"next_cursor\":");
	if (more && l.n > 0) {
		char cur[JOBVIEW_CURSOR_BYTES];
		jobview_cursor_encode(l.last, cur);
		sbuf_printf(out, "\"%s\"", cur);
	} else {
		sbuf_puts(out, "null");
	}
	sbuf_putc(out, '}');
	return request_reply_out(rq, 200, REQUEST_JSON_TYPE);
}

enum MHD_Result jobapi_events(request_t *rq)
{
	const char *id = rq->id;
	if (!request_plausible_id(id))
		return request_job_not_found(rq);
	char detail[256];
	const char *pointer = NULL;
	int limit;
	long long after;
	bool has_state;
	store_job_state_t state;
	if (parse_paging(rq, false, &limit, &after, &has_state, &state, detail, sizeof detail, &pointer) < 0)
		return request_bad_request(rq, detail, pointer);
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	list_ctx_t l = {.items = json_array()};
	bool more = false;
	int r = l.items ? store_event_list(st, id, after, limit, event_fn, &l, &more) : -ENOMEM;
	return list_reply(rq, r, &l, "events", r == 0 ? next_cursor(more, &l) : NULL, "next_cursor");
}

/* ---- GET /v1/jobs/{id}/metrics ---- */

#define METRICS_DEFAULT_LIMIT 1000
#define METRICS_MAX_LIMIT 10000
#define METRICS_MAX_POINTS 100000

typedef struct {
	const char *bad_key;
	int n_since, n_limit, n_max_points;
} metrics_query_t;

static enum MHD_Result metrics_query_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                          const char *value)
{
	metrics_query_t *q = cls;
	if (strcmp(key, "since_step") == 0)
		q->n_since++;
	else if (strcmp(key, "limit") == 0)
		q->n_limit++;
	else if (strcmp(key, "max_points") == 0)
		q->n_max_points++;
	else if (!q->bad_key)
		q->bad_key = key;
	return MHD_YES;
}

enum MHD_Result jobapi_metrics(request_t *rq)
{
	const char *id = rq->id;
	if (!request_plausible_id(id))
		return request_job_not_found(rq);
	char detail[256];
	metrics_query_t q = {0};
	MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, metrics_query_iter, &q);
	if (q.bad_key) {
		snprintf(detail, sizeof detail, "unknown query parameter \"%.64s\" (allowed: since_step, limit, max_points)",
		         q.bad_key);
		return request_bad_request(rq, detail, NULL);
	}
	if (q.n_since > 1 || q.n_limit > 1 || q.n_max_points > 1)
		return request_bad_request(rq, "each query parameter may appear once", NULL);
	if (q.n_limit && q.n_max_points)
		return request_bad_request(rq, "max_points and limit cannot be combined", "max_points");
	long long since = 0;
	int limit = METRICS_DEFAULT_LIMIT;
	const char *v;
	if ((v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "since_step"))) {
		char *end;
		errno = 0;
		long long n = strtoll(v, &end, 10);
		if (errno || end == v || *end || n < 0) {
			snprintf(detail, sizeof detail, "since_step must be an integer >= 0 (got \"%.64s\")", v);
			return request_bad_request(rq, detail, "since_step");
		}
		since = n;
	}
	if ((v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "limit"))) {
		char *end;
		errno = 0;
		long n = strtol(v, &end, 10);
		if (errno || end == v || *end || n < 1 || n > METRICS_MAX_LIMIT) {
			snprintf(detail, sizeof detail, "limit must be an integer from 1 to %d (got \"%.64s\")",
			         METRICS_MAX_LIMIT, v);
			return request_bad_request(rq, detail, "limit");
		}
		limit = (int)n;
	}
	int max_points = 0;
	if ((v = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "max_points"))) {
		char *end;
		errno = 0;
		long n = strtol(v, &end, 10);
		if (errno || end == v || *end || n < 2 || n > METRICS_MAX_POINTS) {
			snprintf(detail, sizeof detail, "max_points must be an integer from 2 to %d (got \"%.64s\")",
			         METRICS_MAX_POINTS, v);
			return request_bad_request(rq, detail, "max_points");
		}
		max_points = (int)n;
	}
	store_t *st = request_reader(rq);
	if (!st)
		return request_db_unavailable(rq);
	list_ctx_t l = {.items = json_array()};
	if (max_points) {
		/* downsampled: every matching row is covered, so no next page */
		int r = l.items ? store_metric_list_sampled(st, id, since, max_points, metric_fn, &l) : -ENOMEM;
		return list_reply(rq, r, &l, "metrics", NULL, "next_since_step");
	}
	bool more = false;
	int r = l.items ? store_metric_list(st, id, since, limit, metric_fn, &l, &more) : -ENOMEM;
	json_t *next = r == 0 && more && json_array_size(l.items) > 0 ? json_integer(l.last + 1) : NULL;
	return list_reply(rq, r, &l, "metrics", next, "next_since_step");
}

/*
 * A spec's resume_from must name a job of this coordinator and one of its
 * committed, not deleted checkpoints. 0 when it does (or the spec has no
 * resume_from); otherwise the HTTP status (422: no such job or checkpoint,
 * 503: the database cannot be read) with `detail` and *ret_pointer set.
 * Checked on a reader, outside the writer's transaction: a checkpoint
 * deleted between this check and the placement fails the job then (fabric.c).
 */
static int s_max_queued = 10000; /* --max-queued-jobs (config.h's default) */

void jobapi_set_max_queued(int max_queued_jobs)
{
	s_max_queued = max_queued_jobs;
}

/* 429 when the queue holds --max-queued-jobs jobs already (issue 22: an
 * unbounded queue is a disk and a scheduler pass without end), 0 when there
 * is room, 500 when the count cannot be read. */
static int check_queue_cap(request_t *rq, char *detail, size_t detail_len)
{
	int64_t counts[STORE_JOB_N_STATES];
	store_t *st = request_reader(rq);
	if (!st || store_job_count_by_state(st, counts) < 0) {
		snprintf(detail, detail_len, "cannot count the queued jobs");
		return 500;
	}
	if (counts[STORE_JOB_QUEUED] < s_max_queued)
		return 0;
	snprintf(detail, detail_len,
	         "the queue is full: %lld jobs are queued, the most this server accepts"
	         " (max_queued_jobs = %d); retry when some have started or cancel some",
	         (long long)counts[STORE_JOB_QUEUED], s_max_queued);
	return 429;
}

/* 422 when a CPU job's rank needs more memory than the largest alive
 * worker offers (memfit.h's estimate; issue 22), while every alive worker
 * said what it offers. With no worker alive, or one that did not say, the
 * job is taken and waits, with the reason, for a worker that can hold it. */
static int check_memory_fit(const jobspec_t *spec, char *detail, size_t detail_len)
{
	if (spec->parallel.device != JOBSPEC_DEVICE_CPU || jobspec_is_program(spec)) /* a program's memory is its own */
		return 0;
	capacity_t cap;
	capacity_get(&cap);
	if (cap.n_workers == 0 || !cap.all_known || cap.largest_bytes <= 0)
		return 0;
	memfit_t m;
	memfit_estimate(spec, &m);
	if (m.total_bytes <= (double)cap.largest_bytes)
		return 0;
	char est[256];
	memfit_describe(&m, est, sizeof est);
	snprintf(detail, detail_len,
	         "the job cannot fit any worker: each rank needs %s, and the largest alive worker (%.100s)"
	         " offers %.2f GiB (%lld bytes); lower train.batch_size, model.seq_len or the model's size,"
	         " or shard it (parallel.sharding, docs/jobspec.md \"Memory\")",
	         est, cap.largest_node, (double)cap.largest_bytes / 1073741824.0,
	         (long long)cap.largest_bytes);
	return 422;
}

static int check_resume_from(request_t *rq, const jobspec_t *spec, char *detail,
                             size_t detail_len, const char **ret_pointer)
{
	const char *job = spec->resume_from.job;
	if (!job)
		return 0;
	*ret_pointer = "/resume_from/job";
	store_t *st = request_reader(rq);
	if (!st) {
		snprintf(detail, detail_len, "the database cannot be read to check resume_from; retry later");
		return 503;
	}
	store_job_t src;
	memset(&src, 0, sizeof src);
	int r = request_plausible_id(job) ? store_job_get(st, job, &src) : -ENOENT;
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

enum MHD_Result jobapi_submit(request_t *rq)
{
	char detail[600];
	if (rq->too_large) {
		snprintf(detail, sizeof detail, "request body is larger than the limit of %zu bytes",
		         rq->max_body_bytes);
		return request_problem(rq, 413, detail, NULL);
	}
	if (rq->body.len == 0)
		return request_bad_request(rq, "request body is empty; send the job spec as a JSON object", "");
	if (rq->body.failed)
		return request_problem(rq, 500, "out of memory while reading the request body", NULL);
	/* jansson's own check: a string it refuses is not valid UTF-8 */
	json_t *utf8 = json_stringn(rq->body.data, rq->body.len);
	if (!utf8)
		return request_bad_request(rq, "request body is not valid UTF-8", "");
	json_decref(utf8);
	jobspec_t spec;
	jobspec_error_t err;
	memset(&spec, 0, sizeof spec);
	memset(&err, 0, sizeof err);
	if (jobspec_parse(rq->body.data, rq->body.len, &spec, &err) < 0) {
		err.pointer[sizeof err.pointer - 1] = '\0';
		err.message[sizeof err.message - 1] = '\0';
		return request_bad_request(rq, err.message[0] ? err.message : "invalid job spec", err.pointer);
	}
	if (jobspec_check_paths(&spec, &err) < 0) { /* issue 22: confined to the agents' roots */
		jobspec_free(&spec);
		return request_bad_request(rq, err.message, err.pointer);
	}
	const char *pointer = NULL;
	int status = check_resume_from(rq, &spec, detail, sizeof detail, &pointer);
	if (status != 0) {
		jobspec_free(&spec);
		return request_problem(rq, status, detail, pointer);
	}
	char env_pointer[300];
	status = envallow_check(&spec, detail, sizeof detail, env_pointer, sizeof env_pointer);
	if (status != 0) { /* issue 26: program.env against the operator's env_allow */
		jobspec_free(&spec);
		return request_problem(rq, status, detail, env_pointer);
	}
	status = check_memory_fit(&spec, detail, sizeof detail);
	if (status != 0) {
		jobspec_free(&spec);
		return request_problem(rq, status, detail, NULL);
	}
	status = check_queue_cap(rq, detail, sizeof detail);
	if (status != 0) {
		jobspec_free(&spec);
		return request_problem(rq, status, detail, NULL);
	}
	json_t *doc = jobspec_to_json(&spec);
	char *spec_json = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!spec_json) {
		jobspec_free(&spec);
		return request_problem(rq, 500, "out of memory while storing the job spec", NULL);
	}
	broker_submit_t cmd = {
		.name = spec.name,
		.spec_json = spec_json,
		.priority = spec.priority,
		.world_size = spec.parallel.world_size,
		.idem_key = rq->has_idem_key ? rq->idem_key : NULL,
		.submitted_by = rq->who.name,
	};
	crypto_hash_sha256(cmd.body_hash, (const unsigned char *)rq->body.data, rq->body.len);
	broker_client_t *bc = request_client(rq);
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	int r = bc ? broker_client_submit(bc, &cmd, WRITE_TIMEOUT_MS, &reply) : -ENOTCONN;
	free(spec_json);
	jobspec_free(&spec);
	if (r < 0)
		return request_problem(rq, 503,
		                       r == -ETIMEDOUT ? "the writer loop did not answer in time; the job may or may "
		                                         "not have been stored (retry with the same Idempotency-Key)"
		                                       : "the writer loop cannot be reached; retry later",
		                       NULL);
	char location[64];
	snprintf(location, sizeof location, "/v1/jobs/%s", reply.job_id);
	return request_reply_broker(rq, &reply, reply.status == 201 && reply.job_id[0] ? location : NULL);
}

enum MHD_Result jobapi_cancel(request_t *rq)
{
	if (!request_plausible_id(rq->id))
		return request_problem(rq, 404, "no job with that id", NULL);
	broker_client_t *bc = request_client(rq);
	broker_reply_t reply;
	memset(&reply, 0, sizeof reply);
	int r = bc ? broker_client_cancel(bc, rq->id, rq->who.name, WRITE_TIMEOUT_MS, &reply) : -ENOTCONN;
	if (r < 0)
		return request_problem(rq, 503, "the writer loop did not answer in time; retry later", NULL);
	return request_reply_broker(rq, &reply, NULL);
}
