/*
 * store_logs: the job logs of schema 006 (see store.h "job logs" and
 * schema/006_logs.sql): appending the lines of the agents' LOGS messages
 * under the per-job cap, and listing them for GET /v1/jobs/{id}/logs.
 *
 * The statements are prepared per call (a LOGS carries up to 256 lines, so
 * one prepare per batch costs little) rather than in store.c's table, which
 * keeps the subject in one file. log_usage counts the lines kept per job, so
 * that the cap is checked without counting rows.
 */
#include "store_internal.h"

#include <stdio.h>

static int s_prepare(store_t *st, const char *sql, sqlite3_stmt **ret)
{
	int rc = sqlite3_prepare_v2(st->db, sql, -1, ret, NULL);
	return rc == SQLITE_OK ? 0 : (sqlite_err(rc) ? sqlite_err(rc) : -EIO);
}

static int s_exec_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	return rc == SQLITE_DONE ? 0 : (sqlite_err(rc) ? sqlite_err(rc) : -EIO);
}

/* log_usage += (lines, dropped) for the job; its lines kept into *ret_n. */
static int s_usage_add(store_t *st, const char *job_id, int64_t n_lines, int64_t n_dropped, int64_t *ret_n)
{
	sqlite3_stmt *s = NULL;
	int r = s_prepare(st,
	                  "INSERT INTO log_usage (job_id, n_lines, n_dropped) VALUES (?1, ?2, ?3) "
	                  "ON CONFLICT (job_id) DO UPDATE SET n_lines = n_lines + ?2, n_dropped = n_dropped + ?3 "
	                  "RETURNING n_lines",
	                  &s);
	if (r == 0) {
		sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, n_lines);
		sqlite3_bind_int64(s, 3, n_dropped);
		int rc = sqlite3_step(s);
		if (rc == SQLITE_ROW)
			*ret_n = sqlite3_column_int64(s, 0);
		else
			r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
		if (rc == SQLITE_ROW && sqlite3_step(s) != SQLITE_DONE)
			r = -EIO;
	}
	sqlite3_finalize(s);
	return r;
}

/* The job's `n` oldest lines were deleted: kept -= n, dropped += n (an
 * UPDATE: an INSERT's row with a negative count would fail its CHECK). */
static int s_usage_trim(store_t *st, const char *job_id, int64_t n)
{
	sqlite3_stmt *s = NULL;
	int r = s_prepare(st, "UPDATE log_usage SET n_lines = n_lines - ?2, n_dropped = n_dropped + ?2 WHERE job_id = ?1",
	                  &s);
	if (r == 0) {
		sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, n);
		r = s_exec_done(s);
	}
	sqlite3_finalize(s);
	return r;
}

/* Delete the job's `n` oldest lines. */
static int s_delete_oldest(store_t *st, const char *job_id, int64_t n)
{
	sqlite3_stmt *s = NULL;
	int r = s_prepare(st,
	                  "DELETE FROM job_logs WHERE seq IN (SELECT seq FROM job_logs WHERE job_id = ?1 "
	                  "ORDER BY seq LIMIT ?2)",
	                  &s);
	if (r == 0) {
		sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, n);
		r = s_exec_done(s);
	}
	sqlite3_finalize(s);
	return r;
}

/* One line of a LOGS message into *ret (text borrowed); false when malformed. */
static bool s_line_ok(const json_t *l, store_log_line_t *ret)
{
	const json_t *stream = json_object_get(l, "stream"), *t = json_object_get(l, "time_us");
	const json_t *text = json_object_get(l, "text");
	if (!json_is_string(stream) || !json_is_integer(t) || json_integer_value(t) < 0 || !json_is_string(text) ||
	    json_string_length(text) > STORE_LOG_TEXT_MAX_BYTES ||
	    strlen(json_string_value(text)) != json_string_length(text))
		return false;
	if (strcmp(json_string_value(stream), "stdout") == 0)
		ret->stream = 0;
	else if (strcmp(json_string_value(stream), "stderr") == 0)
		ret->stream = 1;
	else
		return false;
	ret->time_us = json_integer_value(t);
	ret->text = json_string_value(text);
	return true;
}

int store_log_append(store_t *st, const char *job_id, int attempt, int rank, const json_t *lines,
                     int64_t dropped, int64_t max_lines, store_log_fn fn, void *userdata)
{
	if (attempt < 0 || rank < 0 || !json_is_array(lines) || dropped < 0)
		return -EINVAL;
	int r = job_exists(st, job_id);
	if (r < 0)
		return r;
	sqlite3_stmt *s = NULL;
	r = s_prepare(st,
	              "INSERT INTO job_logs (job_id, attempt, rank, stream, time_us, text) "
	              "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	              &s);
	int64_t n_stored = 0;
	size_t i;
	const json_t *l;
	json_array_foreach (lines, i, l) {
		if (r < 0)
			break;
		store_log_line_t line = {.attempt = attempt, .rank = rank};
		if (!s_line_ok(l, &line)) {
			dropped++;
			continue;
		}
		sqlite3_reset(s);
		sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
		sqlite3_bind_int(s, 2, attempt);
		sqlite3_bind_int(s, 3, rank);
		sqlite3_bind_int(s, 4, line.stream);
		sqlite3_bind_int64(s, 5, line.time_us);
		sqlite3_bind_text(s, 6, line.text, -1, SQLITE_STATIC);
		r = s_exec_done(s);
		if (r == 0) {
			n_stored++;
			line.seq = sqlite3_last_insert_rowid(st->db);
			if (fn)
				fn(&line, userdata);
		}
	}
	sqlite3_finalize(s);
	int64_t kept = 0;
	if (r == 0 && (n_stored > 0 || dropped > 0))
		r = s_usage_add(st, job_id, n_stored, dropped, &kept);
	if (r == 0 && max_lines > 0 && kept > max_lines) {
		int64_t excess = kept - max_lines;
		r = s_delete_oldest(st, job_id, excess);
		if (r == 0)
			r = s_usage_trim(st, job_id, excess);
	}
	return r;
}

int store_log_list(store_t *st, const char *job_id, const store_log_query_t *q, store_log_fn fn,
                   void *userdata)
{
	int r = job_exists(st, job_id);
	if (r < 0)
		return r;
	/* tail: the newest `tail` lines, turned back to oldest first */
	const char *filter = "job_id = ?1 AND (?2 < 0 OR attempt = ?2) AND (?3 < 0 OR rank = ?3) AND seq > ?4";
	char sql[512];
	if (q->tail > 0)
		snprintf(sql, sizeof sql,
		         "SELECT * FROM (SELECT seq, attempt, rank, stream, time_us, text FROM job_logs WHERE %s "
		         "ORDER BY seq DESC LIMIT ?5) ORDER BY seq",
		         filter);
	else
		snprintf(sql, sizeof sql,
		         "SELECT seq, attempt, rank, stream, time_us, text FROM job_logs WHERE %s ORDER BY seq LIMIT ?5",
		         filter);
	sqlite3_stmt *s = NULL;
	r = s_prepare(st, sql, &s);
	if (r < 0)
		return r;
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, q->attempt);
	sqlite3_bind_int(s, 3, q->rank);
	sqlite3_bind_int64(s, 4, q->since);
	sqlite3_bind_int(s, 5, q->tail > 0 ? q->tail : q->limit);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_log_line_t line = {
			.seq = sqlite3_column_int64(s, 0),
			.attempt = sqlite3_column_int(s, 1),
			.rank = sqlite3_column_int(s, 2),
			.stream = sqlite3_column_int(s, 3),
			.time_us = sqlite3_column_int64(s, 4),
			.text = (const char *)sqlite3_column_text(s, 5),
		};
		if (!line.text)
			line.text = "";
		if ((r = fn(&line, userdata)) != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_finalize(s);
	return r;
}

int store_log_dropped(store_t *st, const char *job_id, int64_t *ret_dropped)
{
	int r = job_exists(st, job_id);
	if (r < 0)
		return r;
	sqlite3_stmt *s = NULL;
	r = s_prepare(st, "SELECT n_dropped FROM log_usage WHERE job_id = ?1", &s);
	if (r < 0)
		return r;
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	*ret_dropped = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_finalize(s);
	return r;
}
