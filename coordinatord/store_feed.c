/*
 * store_feed: what the writer committed since it last looked, across all
 * jobs, for the change feed (coordinatord/feed.c): event rows by id,
 * metrics rows by id, log lines by seq, and the highest of each at start.
 * Each is a range scan of a rowid, so looking after every commit is cheap.
 */
#include "store_internal.h"

#include <math.h>
#include <stdio.h>

static int s_prepare(store_t *st, const char *sql, sqlite3_stmt **ret)
{
	int rc = sqlite3_prepare_v2(st->db, sql, -1, ret, NULL);
	return rc == SQLITE_OK ? 0 : (sqlite_err(rc) ? sqlite_err(rc) : -EIO);
}

static int s_done(sqlite3_stmt *s, int rc, int r)
{
	if (r == 0 && rc != SQLITE_DONE && rc != SQLITE_ROW)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_finalize(s);
	return r;
}

int store_feed_max_ids(store_t *st, int64_t *ret_event, int64_t *ret_metric, int64_t *ret_log)
{
	sqlite3_stmt *s = NULL;
	int r = s_prepare(st,
	                  "SELECT (SELECT coalesce(max(id), 0) FROM events), (SELECT coalesce(max(id), 0) FROM metrics), "
	                  "(SELECT coalesce(max(seq), 0) FROM job_logs)",
	                  &s);
	if (r < 0)
		return r;
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*ret_event = sqlite3_column_int64(s, 0);
		*ret_metric = sqlite3_column_int64(s, 1);
		*ret_log = sqlite3_column_int64(s, 2);
	}
	return s_done(s, rc, 0);
}

int store_feed_events(store_t *st, int64_t after_id, store_event_fn fn, void *userdata)
{
	sqlite3_stmt *s = NULL;
	int r = s_prepare(st,
	                  "SELECT id, job_id, at_us, type, from_state, to_state, reason, attempt, actor FROM events "
	                  "WHERE id > ?1 ORDER BY id",
	                  &s);
	if (r < 0)
		return r;
	sqlite3_bind_int64(s, 1, after_id);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_event_t ev;
		memset(&ev, 0, sizeof ev);
		ev.id = sqlite3_column_int64(s, 0);
		const char *jid = (const char *)sqlite3_column_text(s, 1);
		snprintf(ev.job_id, sizeof ev.job_id, "%s", jid ? jid : "");
		ev.at_us = sqlite3_column_int64(s, 2);
		ev.type = column_strdup(s, 3);
		ev.from_state = column_strdup(s, 4);
		ev.to_state = column_strdup(s, 5);
		ev.reason = column_strdup(s, 6);
		ev.attempt = sqlite3_column_int(s, 7);
		ev.actor = column_strdup(s, 8);
		r = ev.type ? fn(&ev, userdata) : -ENOMEM;
		store_event_clear(&ev);
		if (r != 0)
			break;
	}
	return s_done(s, rc, r);
}

static double s_real(sqlite3_stmt *s, int i)
{
	return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

int store_feed_metrics(store_t *st, int64_t after_id, store_feed_metric_fn fn, void *userdata)
{
	sqlite3_stmt *s = NULL;
	int r = s_prepare(st,
	                  "SELECT job_id, attempt, rank, step, loss, lr, grad_norm, tokens_per_s, ms, val_loss, at_us, id "
	                  "FROM metrics WHERE id > ?1 ORDER BY id",
	                  &s);
	if (r < 0)
		return r;
	sqlite3_bind_int64(s, 1, after_id);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_metric_t m;
		memset(&m, 0, sizeof m);
		const char *jid = (const char *)sqlite3_column_text(s, 0);
		snprintf(m.job_id, sizeof m.job_id, "%s", jid ? jid : "");
		m.attempt = sqlite3_column_int(s, 1);
		m.rank = sqlite3_column_int(s, 2);
		m.step = sqlite3_column_int64(s, 3);
		m.loss = s_real(s, 4);
		m.lr = s_real(s, 5);
		m.grad_norm = s_real(s, 6);
		m.tokens_per_s = s_real(s, 7);
		m.ms = s_real(s, 8);
		m.has_val_loss = sqlite3_column_type(s, 9) != SQLITE_NULL;
		m.val_loss = m.has_val_loss ? sqlite3_column_double(s, 9) : NAN;
		m.at_us = sqlite3_column_int64(s, 10);
		if ((r = fn(sqlite3_column_int64(s, 11), &m, userdata)) != 0)
			break;
	}
	return s_done(s, rc, r);
}

int store_feed_logs(store_t *st, int64_t after_seq, store_feed_log_fn fn, void *userdata)
{
	sqlite3_stmt *s = NULL;
	int r = s_prepare(st,
	                  "SELECT seq, attempt, rank, stream, time_us, text, job_id FROM job_logs WHERE seq > ?1 "
	                  "ORDER BY seq",
	                  &s);
	if (r < 0)
		return r;
	sqlite3_bind_int64(s, 1, after_seq);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_log_line_t l = {
			.seq = sqlite3_column_int64(s, 0),
			.attempt = sqlite3_column_int(s, 1),
			.rank = sqlite3_column_int(s, 2),
			.stream = sqlite3_column_int(s, 3),
			.time_us = sqlite3_column_int64(s, 4),
			.text = (const char *)sqlite3_column_text(s, 5),
		};
		const char *jid = (const char *)sqlite3_column_text(s, 6);
		if (!l.text)
			l.text = "";
		if ((r = fn(jid ? jid : "", &l, userdata)) != 0)
			break;
	}
	return s_done(s, rc, r);
}
