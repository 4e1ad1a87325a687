/*
 * store_metrics: what running ranks report for people to look at: training
 * metrics per step (NaN and infinity are stored as NULL and read back as
 * NaN) and profiler traces, the latter under per-job row and byte caps
 * whose refusals are counted. See store.h for the contracts.
 */
#include "store_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

static void bind_real(sqlite3_stmt *s, int i, double v)
{
	if (isfinite(v))
		sqlite3_bind_double(s, i, v);
	else
		sqlite3_bind_null(s, i);
}

static double column_real(sqlite3_stmt *s, int i)
{
	return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

int store_metric_insert(store_t *st, const store_metric_t *m)
{
	sqlite3_stmt *s = stmt(st, ST_METRIC_INSERT);
	sqlite3_bind_text(s, 1, m->job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, m->attempt);
	sqlite3_bind_int(s, 3, m->rank);
	sqlite3_bind_int64(s, 4, m->step);
	bind_real(s, 5, m->loss);
	bind_real(s, 6, m->lr);
	bind_real(s, 7, m->grad_norm);
	bind_real(s, 8, m->tokens_per_s);
	bind_real(s, 9, m->ms);
	if (m->has_val_loss)
		bind_real(s, 10, m->val_loss);
	else
		sqlite3_bind_null(s, 10);
	sqlite3_bind_int64(s, 11, m->at_us);
	return step_done(s);
}

int store_metric_last_step(store_t *st, const char *job_id, int attempt, int64_t *ret_step)
{
	sqlite3_stmt *s = stmt(st, ST_METRIC_LAST_STEP);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	int rc = sqlite3_step(s);
	if (rc != SQLITE_ROW)
		return sqlite_err(rc);
	*ret_step = sqlite3_column_int64(s, 0);
	return 0;
}

static void metric_from_row(sqlite3_stmt *s, store_metric_t *m)
{
	memset(m, 0, sizeof *m);
	const char *id = (const char *)sqlite3_column_text(s, 0);
	snprintf(m->job_id, sizeof m->job_id, "%s", id ? id : "");
	m->attempt = sqlite3_column_int(s, 1);
	m->rank = sqlite3_column_int(s, 2);
	m->step = sqlite3_column_int64(s, 3);
	m->loss = column_real(s, 4);
	m->lr = column_real(s, 5);
	m->grad_norm = column_real(s, 6);
	m->tokens_per_s = column_real(s, 7);
	m->ms = column_real(s, 8);
	m->has_val_loss = sqlite3_column_type(s, 9) != SQLITE_NULL;
	m->val_loss = m->has_val_loss ? sqlite3_column_double(s, 9) : NAN;
	m->at_us = sqlite3_column_int64(s, 10);
}

int store_metric_list(store_t *st, const char *job_id, int64_t since_step, int limit,
                      store_metric_fn fn, void *userdata, bool *ret_more)
{
	if (limit < 0)
		return -EINVAL;
	int rc = job_exists(st, job_id);
	if (rc != 0)
		return rc;

	sqlite3_stmt *s = stmt(st, ST_METRIC_LIST);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, since_step);
	sqlite3_bind_int64(s, 3, (int64_t)limit + 1);
	int n = 0, r = 0;
	bool more = false;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (n == limit) {
			more = true;
			break;
		}
		store_metric_t m;
		metric_from_row(s, &m);
		r = fn(&m, userdata);
		n++;
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	if (ret_more)
		*ret_more = more;
	return r;
}

/* Sampling state of store_metric_list_sampled: the rows are numbered 0 ..
 * total-1; row 0 and row total-1 are emitted alone, the rows between fall
 * into max_points-2 buckets of which each emits one row (its first row with
 * a validation loss, else its first row). */
typedef struct {
	int64_t total, n_mid_buckets;
	int64_t bucket;   /* the bucket `held` belongs to; -1 when none is held */
	bool held_val;    /* held has a validation loss */
	store_metric_t held;
} sample_t;

static int64_t sample_bucket(const sample_t *sp, int64_t i)
{
	return (i - 1) * sp->n_mid_buckets / (sp->total - 2);
}

static int sample_flush(sample_t *sp, store_metric_fn fn, void *userdata)
{
	if (sp->bucket < 0)
		return 0;
	sp->bucket = -1;
	return fn(&sp->held, userdata);
}

/* Whether row i (with a validation loss or not) can change what is emitted:
 * the others are skipped without being decoded. */
static bool sample_wants(const sample_t *sp, int64_t i, bool has_val)
{
	if (i == 0 || i == sp->total - 1)
		return true;
	if (sp->n_mid_buckets <= 0)
		return false;
	return sample_bucket(sp, i) != sp->bucket || (has_val && !sp->held_val);
}

/* Feed row i; emits the rows it decides on through fn. */
static int sample_row(sample_t *sp, int64_t i, const store_metric_t *m, store_metric_fn fn, void *userdata)
{
	if (i == 0 || i == sp->total - 1) {
		int r = sample_flush(sp, fn, userdata);
		return r ? r : fn(m, userdata);
	}
	if (sp->n_mid_buckets <= 0)
		return 0;
	int64_t b = sample_bucket(sp, i);
	if (b != sp->bucket) {
		int r = sample_flush(sp, fn, userdata);
		if (r)
			return r;
		sp->bucket = b;
		sp->held = *m;
		sp->held_val = m->has_val_loss;
	} else if (m->has_val_loss && !sp->held_val) {
		sp->held = *m;
		sp->held_val = true;
	}
	return 0;
}

int store_metric_list_sampled(store_t *st, const char *job_id, int64_t since_step, int max_points,
                              store_metric_fn fn, void *userdata)
{
	if (max_points < 2)
		return -EINVAL;
	int rc = job_exists(st, job_id);
	if (rc != 0)
		return rc;
	sqlite3_stmt *c = NULL;
	rc = sqlite3_prepare_v2(st->db, "SELECT count(*) FROM metrics WHERE job_id = ?1 AND step >= ?2", -1, &c,
	                        NULL);
	if (rc != SQLITE_OK)
		return sqlite_err(rc);
	sqlite3_bind_text(c, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(c, 2, since_step);
	rc = sqlite3_step(c);
	int64_t total = rc == SQLITE_ROW ? sqlite3_column_int64(c, 0) : 0;
	sqlite3_finalize(c);
	if (rc != SQLITE_ROW)
		return sqlite_err(rc);

	sample_t sp = {.total = total, .n_mid_buckets = max_points - 2, .bucket = -1};
	sqlite3_stmt *s = stmt(st, ST_METRIC_LIST);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, since_step);
	sqlite3_bind_int64(s, 3, total);
	int64_t i = 0;
	int r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW && i < total) {
		if (total > max_points && !sample_wants(&sp, i, sqlite3_column_type(s, 9) != SQLITE_NULL)) {
			i++;
			continue;
		}
		store_metric_t m;
		metric_from_row(s, &m);
		r = total <= max_points ? fn(&m, userdata) : sample_row(&sp, i, &m, fn, userdata);
		i++;
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	if (r == 0)
		r = sample_flush(&sp, fn, userdata); /* rows deleted since the count */
	return r;
}

int store_metric_latest_running(store_t *st, store_metric_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_METRIC_LATEST_RUNNING);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_metric_t m;
		metric_from_row(s, &m);
		r = fn(&m, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

/* ---- traces (schema 005) ---- */

/* The usage row of a job (zeros when it has none). */
static int trace_usage_get(store_t *st, const char *job_id, store_trace_usage_t *ret_usage)
{
	sqlite3_stmt *s = stmt(st, ST_TRACE_USAGE_GET);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	store_trace_usage_t u = {0};
	if (rc == SQLITE_ROW) {
		u.n_rows = sqlite3_column_int64(s, 0);
		u.n_bytes = sqlite3_column_int64(s, 1);
		u.n_refused = sqlite3_column_int64(s, 2);
	}
	sqlite3_reset(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	*ret_usage = u;
	return 0;
}

/* A refused TRACE: count it; its new count to *ret_n_refused. */
static int trace_refuse(store_t *st, const char *job_id, int64_t *ret_n_refused)
{
	sqlite3_stmt *s = stmt(st, ST_TRACE_REFUSE);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	int64_t n = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
	int r = rc == SQLITE_ROW ? step_done(s) : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (r < 0)
		return r;
	if (ret_n_refused)
		*ret_n_refused = n;
	return -ENOSPC;
}

int store_trace_insert(store_t *st, const store_trace_t *t, int64_t max_rows, int64_t max_bytes,
                       int64_t *ret_n_refused)
{
	if (t->attempt < 0 || t->rank < 0 || t->step < 1 || t->start_unix_us < 0 || !(t->dur_us >= 0) ||
	    !t->events_json)
		return -EINVAL;
	const int64_t bytes = (int64_t)strlen(t->events_json);
	store_trace_usage_t u;
	int r = trace_usage_get(st, t->job_id, &u);
	if (r < 0)
		return r;
	if (u.n_rows >= max_rows || u.n_bytes + bytes > max_bytes)
		return job_exists(st, t->job_id) == -ENOENT ? -ENOENT : trace_refuse(st, t->job_id, ret_n_refused);
	sqlite3_stmt *s = stmt(st, ST_TRACE_INSERT);
	sqlite3_bind_text(s, 1, t->job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, t->attempt);
	sqlite3_bind_int(s, 3, t->rank);
	sqlite3_bind_int64(s, 4, t->step);
	sqlite3_bind_int64(s, 5, t->start_unix_us);
	sqlite3_bind_double(s, 6, t->dur_us);
	sqlite3_bind_text(s, 7, t->events_json, (int)bytes, SQLITE_STATIC);
	sqlite3_bind_int64(s, 8, t->received_at_us);
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
		return -ENOENT;
	if (rc != SQLITE_DONE)
		return sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	if (sqlite3_changes(st->db) == 0)
		return -EEXIST;
	s = stmt(st, ST_TRACE_USAGE_ADD);
	sqlite3_bind_text(s, 1, t->job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, bytes);
	return step_done(s);
}

int store_trace_usage(store_t *st, const char *job_id, store_trace_usage_t *ret_usage)
{
	int r = job_exists(st, job_id);
	return r < 0 ? r : trace_usage_get(st, job_id, ret_usage);
}

int store_trace_list(store_t *st, const char *job_id, int attempt, int rank, store_trace_fn fn,
                     void *userdata)
{
	int rc = job_exists(st, job_id);
	if (rc != 0)
		return rc;
	sqlite3_stmt *s = stmt(st, ST_TRACE_LIST);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int(s, 3, rank);
	int r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_trace_t t;
		memset(&t, 0, sizeof t);
		const char *id = (const char *)sqlite3_column_text(s, 0);
		snprintf(t.job_id, sizeof t.job_id, "%s", id ? id : "");
		t.attempt = sqlite3_column_int(s, 1);
		t.rank = sqlite3_column_int(s, 2);
		t.step = sqlite3_column_int64(s, 3);
		t.start_unix_us = sqlite3_column_int64(s, 4);
		t.dur_us = sqlite3_column_double(s, 5);
		t.events_json = (const char *)sqlite3_column_text(s, 6);
		t.received_at_us = sqlite3_column_int64(s, 7);
		if (!t.events_json) {
			r = -ENOMEM;
			break;
		}
		r = fn(&t, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}
