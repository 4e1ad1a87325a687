/*
 * store_checkpoints: the checkpoints a job has committed (a snapshot folder
 * per step): commit (idempotent re-commit), soft delete, the list newest
 * first, the latest and a given step. Recovery reads the latest from here.
 * See store.h for the contracts.
 */
#include "store_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

int store_checkpoint_commit(store_t *st, const store_checkpoint_t *c)
{
	if (c->step < 0 || c->bytes < 0 || c->world_size < 1 || !c->path)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_CHECKPOINT_COMMIT);
	sqlite3_bind_text(s, 1, c->job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, c->step);
	sqlite3_bind_int(s, 3, c->attempt);
	sqlite3_bind_int(s, 4, c->world_size);
	sqlite3_bind_int64(s, 5, c->bytes);
	sqlite3_bind_text(s, 6, c->path, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 7, c->committed_at_us);
	return step_done(s);
}

int store_checkpoint_delete(store_t *st, const char *job_id, int64_t step, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_CHECKPOINT_DELETE);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, step);
	sqlite3_bind_int64(s, 3, now_us_);
	return step_update(st, s);
}

int store_checkpoint_list(store_t *st, const char *job_id, store_checkpoint_fn fn, void *userdata)
{
	int rc = job_exists(st, job_id);
	if (rc != 0)
		return rc;
	sqlite3_stmt *s = stmt(st, ST_CHECKPOINT_LIST);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	int r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_checkpoint_t c;
		memset(&c, 0, sizeof c);
		const char *id = (const char *)sqlite3_column_text(s, 0);
		snprintf(c.job_id, sizeof c.job_id, "%s", id ? id : "");
		c.step = sqlite3_column_int64(s, 1);
		c.attempt = sqlite3_column_int(s, 2);
		c.world_size = sqlite3_column_int(s, 3);
		c.bytes = sqlite3_column_int64(s, 4);
		c.path = (const char *)sqlite3_column_text(s, 5);
		c.committed_at_us = sqlite3_column_int64(s, 6);
		if (!c.path) {
			r = -ENOMEM;
			break;
		}
		r = fn(&c, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

/* Step a bound statement that selects at most one checkpoint: its path
 * (column path_col, malloc'ed) and, when ret_step is not NULL, its step
 * (column 0). 0, -ENOENT for no row, -ENOMEM or an SQLite error. */
static int checkpoint_row(sqlite3_stmt *s, int path_col, int64_t *ret_step, char **ret_path)
{
	int rc = sqlite3_step(s);
	int r;
	if (rc == SQLITE_ROW) {
		char *path = column_strdup(s, path_col);
		if (path) {
			if (ret_step)
				*ret_step = sqlite3_column_int64(s, 0);
			*ret_path = path;
			r = 0;
		} else {
			r = -ENOMEM;
		}
	} else {
		r = rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	}
	sqlite3_reset(s);
	return r;
}

int store_checkpoint_latest(store_t *st, const char *job_id, int64_t *ret_step, char **ret_path)
{
	sqlite3_stmt *s = stmt(st, ST_CHECKPOINT_LATEST);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	return checkpoint_row(s, 1, ret_step, ret_path);
}

int store_checkpoint_get(store_t *st, const char *job_id, int64_t step, char **ret_path)
{
	sqlite3_stmt *s = stmt(st, ST_CHECKPOINT_GET);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, step);
	return checkpoint_row(s, 0, NULL, ret_path);
}
