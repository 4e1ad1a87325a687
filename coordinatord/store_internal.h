/*
 * store_internal: what the store's source files share, and nothing else
 * includes: the numbers of the prepared statements (their SQL is the table
 * in store.c), the store_t layout, and the small helpers every query uses to
 * take a statement, bind, step and map SQLite result codes to the
 * errno-style codes of store.h. The helpers are static inline so that each
 * query file reads as it did when the store was one file.
 */
#ifndef RINGMASTER_STORE_INTERNAL_H
#define RINGMASTER_STORE_INTERNAL_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store.h"

/* The prepared statements, one per query; store.c holds their SQL. */
enum {
	ST_JOB_INSERT,
	ST_JOB_SET_STATE,
	ST_JOB_GET,
	ST_JOB_LIST,
	ST_JOB_LIST_STATE,
	ST_JOB_COUNT_BY_STATE,
	ST_JOB_COUNT,
	ST_EVENT_INSERT,
	ST_EVENT_LIST,
	ST_JOB_EXISTS,
	ST_IDEM_GET,
	ST_IDEM_PUT,
	ST_WORKER_LIST,
	ST_WORKER_REGISTER,
	ST_WORKER_SET_STATE,
	ST_WORKER_HEARTBEAT,
	ST_WORKER_COUNT,
	ST_WORKER_SET_PROGRAMS,
	ST_JOB_SET_ATTEMPT,
	ST_JOB_LIST_QUEUED,
	ST_RANK_INSERT,
	ST_RANK_SET_STATE,
	ST_RANK_LOSE_ATTEMPT,
	ST_RANK_LIST_ACTIVE,
	ST_METRIC_INSERT,
	ST_METRIC_LAST_STEP,
	ST_METRIC_LIST,
	ST_METRIC_LATEST_RUNNING,
	ST_RANK_SET_MEMORY,
	ST_RANK_LIST_ATTEMPT,
	ST_RANK_LIST_MEMORY_RUNNING,
	ST_CHECKPOINT_COMMIT,
	ST_CHECKPOINT_DELETE,
	ST_CHECKPOINT_LIST,
	ST_CHECKPOINT_LATEST,
	ST_CHECKPOINT_GET,
	ST_JOB_SET_RESTARTS,
	ST_JOB_LIST_RESTARTS,
	ST_TRACE_USAGE_GET,
	ST_TRACE_REFUSE,
	ST_TRACE_INSERT,
	ST_TRACE_USAGE_ADD,
	ST_TRACE_LIST,
	ST_WORKER_PRUNE,
	ST_JOB_SET_CANCELLED_BY,
	ST_JOB_COUNT_QUEUED_BY,
	ST_TOKEN_INSERT,
	ST_TOKEN_REVOKE,
	ST_TOKEN_TOUCH,
	ST_TOKEN_BY_HASH,
	ST_TOKEN_GET,
	ST_TOKEN_LIST,
	ST_TOKEN_COUNT,
	ST_N
};

struct store {
	sqlite3 *db;
	store_open_mode_t mode;
	sqlite3_stmt *stmt[ST_N];
};

/* Map an SQLite result code to the errno-style codes of store.h. */
static inline int sqlite_err(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return 0;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	default:
		return -EIO;
	}
}

/* Take a prepared statement, reset and cleared for binding. */
static inline sqlite3_stmt *stmt(store_t *st, int which)
{
	sqlite3_stmt *s = st->stmt[which];
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return s;
}

static inline void bind_text_or_null(sqlite3_stmt *s, int i, const char *text)
{
	if (text)
		sqlite3_bind_text(s, i, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

/* Run a statement that returns no rows. */
static inline int step_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	return r;
}

/* SQLITE_DONE -> 0, anything else -> a negative errno. */
static inline int rc_done(int rc)
{
	return rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
}

/* Run an UPDATE and map "no row changed" to -ENOENT. */
static inline int step_update(store_t *st, sqlite3_stmt *s)
{
	int r = step_done(s);
	if (r == 0 && sqlite3_changes(st->db) == 0)
		return -ENOENT;
	return r;
}

static inline char *column_strdup(sqlite3_stmt *s, int i)
{
	if (sqlite3_column_type(s, i) == SQLITE_NULL)
		return NULL;
	const unsigned char *t = sqlite3_column_text(s, i);
	int n = sqlite3_column_bytes(s, i);
	char *out = malloc((size_t)n + 1);
	if (!out)
		return NULL;
	memcpy(out, t, (size_t)n);
	out[n] = '\0';
	return out;
}

/* 0 when job `job_id` exists, -ENOENT when not, or a store error. */
static inline int job_exists(store_t *st, const char *job_id)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_EXISTS);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	sqlite3_reset(s);
	if (rc == SQLITE_DONE)
		return -ENOENT;
	if (rc != SQLITE_ROW)
		return sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	return 0;
}

#endif
