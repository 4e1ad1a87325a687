/*
 * traces: check, store and render per-step phase traces (see traces.h and
 * docs/profiling.md).
 *
 * A TRACE is checked in full before anything is written, and stored as the
 * compact JSON array of its events with only the fields the trace needs, so
 * that a rank cannot make the coordinator keep anything else. Rendering
 * streams the rows (ordered by attempt, rank, step) into the response
 * buffer: every row becomes a "step N" slice and its phases nested inside
 * it, on the rank's own track (pid = rank); the metadata naming the tracks
 * follows once every rank has been seen.
 */
#include "traces.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

#define S_STR_(x) #x
#define S_STR(x) S_STR_(x)

/* A number for a trace field: finite and >= 0. */
static bool s_time_ok(const json_t *v)
{
	return json_is_number(v) && isfinite(json_number_value(v)) && json_number_value(v) >= 0;
}

/* Check the events and build their stored form (a new array) in *ret. */
static int s_check_events(const json_t *events, json_t **ret, char *err, size_t errlen)
{
	size_t n = json_array_size(events);
	if (!json_is_array(events)) {
		snprintf(err, errlen, "TRACE: events must be an array");
		return -EINVAL;
	}
	if (n > TRACES_MAX_EVENTS) {
		snprintf(err, errlen, "TRACE: events has %zu entries, more than %d", n, TRACES_MAX_EVENTS);
		return -EINVAL;
	}
	json_t *out = json_array();
	if (!out) {
		snprintf(err, errlen, "TRACE: out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(events, i);
		const json_t *name = json_object_get(e, "name");
		const json_t *ts = json_object_get(e, "ts_us"), *dur = json_object_get(e, "dur_us");
		const char *bad = NULL;
		if (!json_is_object(e))
			bad = "must be an object {name, ts_us, dur_us}";
		else if (!json_is_string(name) || json_string_length(name) == 0 ||
		         json_string_length(name) > TRACES_NAME_MAX_BYTES)
			bad = "name must be a string of 1 to " S_STR(TRACES_NAME_MAX_BYTES) " bytes";
		else if (!s_time_ok(ts))
			bad = "ts_us must be a finite number >= 0";
		else if (!s_time_ok(dur))
			bad = "dur_us must be a finite number >= 0";
		if (bad) {
			snprintf(err, errlen, "TRACE: events[%zu]: %s", i, bad);
			json_decref(out);
			return -EINVAL;
		}
		if (json_array_append_new(out, json_pack("{s:O, s:f, s:f}", "name", name, "ts_us",
		                                         json_number_value(ts), "dur_us",
		                                         json_number_value(dur))) < 0) {
			snprintf(err, errlen, "TRACE: out of memory");
			json_decref(out);
			return -ENOMEM;
		}
	}
	*ret = out;
	return 0;
}

int traces_record(store_t *st, const char *job_id, int attempt, int rank, const json_t *p, char *err,
                  size_t errlen)
{
	const json_t *step = json_object_get(p, "step"), *start = json_object_get(p, "start_unix_us");
	const json_t *dur = json_object_get(p, "dur_us");
	if (!json_is_integer(step) || json_integer_value(step) < 1) {
		snprintf(err, errlen, "TRACE: step must be an integer >= 1 (steps count from 1)");
		return -EINVAL;
	}
	if (!json_is_integer(start) || json_integer_value(start) < 0 || !s_time_ok(dur)) {
		snprintf(err, errlen, "TRACE: start_unix_us must be an integer >= 0 and dur_us a finite number >= 0");
		return -EINVAL;
	}
	json_t *events = NULL;
	int r = s_check_events(json_object_get(p, "events"), &events, err, errlen);
	if (r < 0) {
		log_warn("job %s attempt %d rank %d: %s; not stored", job_id, attempt, rank, err);
		return r == -EINVAL ? r : -ENOMEM;
	}
	char *text = json_dumps(events, JSON_COMPACT);
	json_decref(events);
	if (!text) {
		snprintf(err, errlen, "TRACE: out of memory");
		log_error("job %s attempt %d rank %d: the trace of step %lld is not stored: out of memory",
		          job_id, attempt, rank, (long long)json_integer_value(step));
		return -ENOMEM;
	}
	store_trace_t t;
	memset(&t, 0, sizeof t);
	snprintf(t.job_id, sizeof t.job_id, "%s", job_id);
	t.attempt = attempt;
	t.rank = rank;
	t.step = json_integer_value(step);
	t.start_unix_us = json_integer_value(start);
	t.dur_us = json_number_value(dur);
	t.events_json = text;
	t.received_at_us = clock_wall_us();
	int64_t n_refused = 0;
	r = store_trace_insert(st, &t, TRACES_MAX_ROWS_PER_JOB, TRACES_MAX_BYTES_PER_JOB, &n_refused);
	free(text);
	if (r == -ENOSPC) {
		if (n_refused == 1 || n_refused % 1000 == 0)
			log_warn("job %s: its traces reached the cap of %d rows or %d MiB: the trace of step %lld "
			         "from rank %d (attempt %d) and later ones are not stored (%lld refused so far)",
			         job_id, TRACES_MAX_ROWS_PER_JOB, TRACES_MAX_BYTES_PER_JOB >> 20, (long long)t.step, rank,
			         attempt, (long long)n_refused);
		return 0;
	}
	if (r == -EEXIST) {
		log_debug("job %s attempt %d rank %d: the trace of step %lld came again; the first is kept", job_id,
		          attempt, rank, (long long)t.step);
		return 0;
	}
	if (r < 0) {
		snprintf(err, errlen, "TRACE: not stored: %s", strerror(-r));
		log_error("store: trace of job %s step %lld rank %d failed (%s): %s", job_id, (long long)t.step, rank,
		          strerror(-r), store_errmsg(st));
		return r == -EINVAL ? -EIO : r;
	}
	return 0;
}

/* ---- rendering ---- */

typedef struct {
	sbuf_t *out;
	int n_rows;
	int n_events;   /* written to traceEvents so far */
	bool *ranks;    /* (n_ranks) the ranks seen */
	int n_ranks;
	int error;
} render_t;

/* Microseconds `base_us + rel_us` with nanosecond digits, without the
 * rounding a double of ~1.7e15 would add. */
static void s_put_us(sbuf_t *b, int64_t base_us, double rel_us)
{
	int64_t ns = base_us * 1000 + (int64_t)llround(rel_us * 1000.0);
	sbuf_printf(b, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void s_put_dur(sbuf_t *b, double dur_us)
{
	int64_t ns = (int64_t)llround(dur_us * 1000.0);
	sbuf_printf(b, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* One complete event. */
static void s_put_x(render_t *r, const char *name, size_t name_len, const char *cat, const store_trace_t *t,
                    double rel_us, double dur_us)
{
	sbuf_t *b = r->out;
	if (r->n_events++)
		sbuf_putc(b, ',');
	sbuf_puts(b, "{\"name\":");
	sbuf_json_string(b, name, name_len);
	sbuf_printf(b, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":", cat);
	s_put_us(b, t->start_unix_us, rel_us);
	sbuf_puts(b, ",\"dur\":");
	s_put_dur(b, dur_us);
	sbuf_printf(b, ",\"pid\":%d,\"tid\":0,\"args\":{\"step\":%lld,\"attempt\":%d}}", t->rank,
	            (long long)t->step, t->attempt);
}

/* Note that rank r was seen. */
static int s_see_rank(render_t *r, int rank)
{
	if (rank >= r->n_ranks) {
		int n = rank + 1 > 2 * r->n_ranks ? rank + 1 : 2 * r->n_ranks;
		bool *more = realloc(r->ranks, (size_t)n * sizeof *more);
		if (!more)
			return -ENOMEM;
		memset(more + r->n_ranks, 0, (size_t)(n - r->n_ranks) * sizeof *more);
		r->ranks = more;
		r->n_ranks = n;
	}
	r->ranks[rank] = true;
	return 0;
}

static int s_render_row(const store_trace_t *t, void *userdata)
{
	render_t *r = userdata;
	json_error_t jerr;
	json_t *events = json_loads(t->events_json, 0, &jerr);
	if (!json_is_array(events) || t->rank < 0 || s_see_rank(r, t->rank) < 0) {
		log_error("trace of job %s attempt %d rank %d step %lld cannot be read: %s", t->job_id, t->attempt,
		          t->rank, (long long)t->step, events ? "not an array" : jerr.text);
		json_decref(events);
		r->error = -EIO;
		return -EIO;
	}
	char step_name[40];
	int n = snprintf(step_name, sizeof step_name, "step %lld", (long long)t->step);
	s_put_x(r, step_name, (size_t)n, "step", t, 0, t->dur_us);
	size_t i;
	json_t *e;
	json_array_foreach(events, i, e) {
		const json_t *name = json_object_get(e, "name");
		s_put_x(r, json_string_value(name), json_string_length(name), "phase", t,
		        json_number_value(json_object_get(e, "ts_us")), json_number_value(json_object_get(e, "dur_us")));
	}
	json_decref(events);
	r->n_rows++;
	return 0;
}

int traces_render(store_t *st, const char *job_id, int attempt, int rank, sbuf_t *out)
{
	render_t r = {.out = out};
	sbuf_puts(out, "{\"traceEvents\":[");
	int rc = store_trace_list(st, job_id, attempt < 0 ? -1 : attempt, rank < 0 ? -1 : rank, s_render_row, &r);
	if (rc < 0 || r.error < 0) {
		free(r.ranks);
		return rc < 0 ? rc : r.error;
	}
	for (int k = 0; k < r.n_ranks; k++) {
		if (!r.ranks[k])
			continue;
		if (r.n_events++)
			sbuf_putc(out, ',');
		sbuf_printf(out,
		            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},"
		            "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},"
		            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"training loop\"}}",
		            k, k, k, k, k);
	}
	free(r.ranks);
	sbuf_puts(out, "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"job\":");
	sbuf_json_string(out, job_id, strlen(job_id));
	sbuf_puts(out, "}}");
	return r.n_rows;
}
