/*
 * store: the coordinator's SQLite database (see store.h for the contract).
 *
 * Each store_t is one connection with its statements prepared once at open.
 * The writer checks the recorded schema version before it changes anything
 * in the file (a newer database is refused untouched), then switches to WAL,
 * and applies the pending embedded migrations in one IMMEDIATE transaction,
 * recording each in schema_migrations. Readers open the existing file
 * read-write but with query_only set, so they can share the WAL index and
 * never write.
 */
#include "store.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <sqlite3.h>

#include "fsutil.h"
#include "store_migrations.h"

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
	ST_N
};

static const char *const stmt_sql[ST_N] = {
	[ST_JOB_INSERT] = "INSERT INTO jobs (id, name, state, priority, world_size, spec_json, attempt, "
	                  "created_at_us, updated_at_us, state_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
	                  "?8, ?8, ?9)",
	[ST_JOB_SET_STATE] = "UPDATE jobs SET state = ?2, state_reason = ?3, updated_at_us = ?4 WHERE id = ?1 "
	                     "RETURNING attempt",
	[ST_JOB_GET] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, created_at_us, "
	               "updated_at_us, state_reason, restarts FROM jobs WHERE id = ?1",
	[ST_JOB_LIST] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, created_at_us, "
	                "updated_at_us, state_reason, restarts FROM jobs WHERE seq > ?1 ORDER BY seq LIMIT ?2",
	[ST_JOB_LIST_STATE] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, "
	                      "created_at_us, updated_at_us, state_reason, restarts FROM jobs WHERE state = ?3 AND "
	                      "seq > ?1 ORDER BY seq LIMIT ?2",
	[ST_JOB_COUNT_BY_STATE] = "SELECT state, count(*) FROM jobs GROUP BY state",
	[ST_JOB_COUNT] = "SELECT count(*) FROM jobs",
	[ST_EVENT_INSERT] = "INSERT INTO events (job_id, at_us, type, from_state, to_state, reason, attempt) "
	                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[ST_EVENT_LIST] = "SELECT id, job_id, at_us, type, from_state, to_state, reason, attempt FROM events "
	                  "WHERE job_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
	[ST_JOB_EXISTS] = "SELECT 1 FROM jobs WHERE id = ?1",
	[ST_IDEM_GET] = "SELECT body_hash, status, body, job_id FROM idempotency_keys WHERE key = ?1",
	[ST_IDEM_PUT] = "INSERT INTO idempotency_keys (key, body_hash, status, body, job_id, created_at_us) "
	                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[ST_WORKER_LIST] = "SELECT node, state, devices_json, last_heartbeat_us, registered_at_us FROM workers "
	                   "ORDER BY node",
	[ST_WORKER_REGISTER] = "INSERT INTO workers (node, state, devices_json, last_heartbeat_us, "
	                       "registered_at_us) VALUES (?1, 'alive', ?2, ?3, ?3) ON CONFLICT (node) DO "
	                       "UPDATE SET state = 'alive', devices_json = ?2, last_heartbeat_us = ?3, "
	                       "registered_at_us = ?3",
	[ST_WORKER_SET_STATE] = "UPDATE workers SET state = ?2 WHERE node = ?1",
	[ST_WORKER_HEARTBEAT] = "UPDATE workers SET last_heartbeat_us = ?2 WHERE node = ?1",
	[ST_WORKER_COUNT] = "SELECT state, count(*) FROM workers GROUP BY state",
	[ST_JOB_SET_ATTEMPT] = "UPDATE jobs SET attempt = ?2, updated_at_us = ?3 WHERE id = ?1",
	[ST_JOB_LIST_QUEUED] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, "
	                       "created_at_us, updated_at_us, state_reason, restarts FROM jobs WHERE state = 'queued' "
	                       "ORDER BY priority DESC, seq",
	[ST_RANK_INSERT] = "INSERT INTO ranks (job_id, attempt, rank, node, device_kind, device_index, state, "
	                   "updated_at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
	[ST_RANK_SET_STATE] = "UPDATE ranks SET state = ?4, exit_code = CASE WHEN ?5 THEN ?6 ELSE exit_code END, "
	                      "signal = CASE WHEN ?5 THEN ?7 ELSE signal END, updated_at_us = ?8 "
	                      "WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3",
	[ST_RANK_LOSE_ATTEMPT] = "UPDATE ranks SET state = 'lost', updated_at_us = ?3 WHERE job_id = ?1 AND "
	                         "attempt = ?2 AND state IN ('placed', 'joined')",
	[ST_RANK_LIST_ACTIVE] = "SELECT r.job_id, r.attempt, r.rank, r.node, r.device_kind, r.device_index, "
	                        "r.state FROM ranks r JOIN jobs j ON j.id = r.job_id AND j.attempt = r.attempt "
	                        "WHERE j.state IN ('scheduled', 'running', 'recovering') "
	                        "ORDER BY r.node, r.job_id, r.rank",
	[ST_METRIC_INSERT] = "INSERT INTO metrics (job_id, attempt, rank, step, loss, lr, grad_norm, "
	                     "tokens_per_s, ms, val_loss, at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
	                     "?10, ?11)",
	[ST_METRIC_LAST_STEP] = "SELECT coalesce(max(step), 0) FROM metrics WHERE job_id = ?1 AND attempt = ?2",
	[ST_METRIC_LIST] = "SELECT job_id, attempt, rank, step, loss, lr, grad_norm, tokens_per_s, ms, "
	                   "val_loss, at_us FROM metrics WHERE job_id = ?1 AND step >= ?2 ORDER BY step, id "
	                   "LIMIT ?3",
	[ST_METRIC_LATEST_RUNNING] = "SELECT m.job_id, m.attempt, m.rank, m.step, m.loss, m.lr, m.grad_norm, "
	                             "m.tokens_per_s, m.ms, m.val_loss, m.at_us FROM jobs j JOIN metrics m ON "
	                             "m.id = (SELECT id FROM metrics WHERE job_id = j.id ORDER BY step DESC, id "
	                             "DESC LIMIT 1) WHERE j.state = 'running' ORDER BY j.seq",
	[ST_RANK_SET_MEMORY] = "UPDATE ranks SET params_bytes = ?4, grads_bytes = ?5, optim_bytes = ?6, "
	                       "activations_bytes = ?7 WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3",
	[ST_RANK_LIST_ATTEMPT] = "SELECT job_id, attempt, rank, node, device_kind, device_index, state, "
	                         "params_bytes, grads_bytes, optim_bytes, activations_bytes FROM ranks "
	                         "WHERE job_id = ?1 AND attempt = ?2 ORDER BY rank",
	[ST_RANK_LIST_MEMORY_RUNNING] = "SELECT r.job_id, r.attempt, r.rank, r.node, r.device_kind, "
	                                "r.device_index, r.state, r.params_bytes, r.grads_bytes, r.optim_bytes, "
	                                "r.activations_bytes FROM jobs j JOIN ranks r ON r.job_id = j.id AND "
	                                "r.attempt = j.attempt WHERE j.state = 'running' AND r.params_bytes IS "
	                                "NOT NULL ORDER BY j.seq, r.rank",
	[ST_CHECKPOINT_COMMIT] = "INSERT INTO checkpoints (job_id, step, attempt, world_size, bytes, path, "
	                         "committed_at_us, deleted_at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL) "
	                         "ON CONFLICT (job_id, step) DO UPDATE SET attempt = ?3, world_size = ?4, "
	                         "bytes = ?5, path = ?6, committed_at_us = ?7, deleted_at_us = NULL",
	[ST_CHECKPOINT_DELETE] = "UPDATE checkpoints SET deleted_at_us = ?3 WHERE job_id = ?1 AND step = ?2 "
	                         "AND deleted_at_us IS NULL",
	[ST_CHECKPOINT_LIST] = "SELECT job_id, step, attempt, world_size, bytes, path, committed_at_us FROM "
	                       "checkpoints WHERE job_id = ?1 AND deleted_at_us IS NULL ORDER BY step DESC",
	[ST_JOB_SET_RESTARTS] = "UPDATE jobs SET restarts = ?2, updated_at_us = ?3 WHERE id = ?1",
	[ST_JOB_LIST_RESTARTS] = "SELECT id, restarts FROM jobs WHERE state IN ('scheduled', 'running', "
	                         "'recovering') ORDER BY seq",
	[ST_CHECKPOINT_LATEST] = "SELECT step, path FROM checkpoints WHERE job_id = ?1 AND deleted_at_us IS "
	                         "NULL ORDER BY step DESC LIMIT 1",
	[ST_CHECKPOINT_GET] = "SELECT path FROM checkpoints WHERE job_id = ?1 AND step = ?2 AND deleted_at_us "
	                      "IS NULL",
	[ST_TRACE_USAGE_GET] = "SELECT n_rows, n_bytes, n_refused FROM trace_usage WHERE job_id = ?1",
	[ST_TRACE_REFUSE] = "INSERT INTO trace_usage (job_id, n_refused) VALUES (?1, 1) ON CONFLICT (job_id) DO "
	                    "UPDATE SET n_refused = n_refused + 1 RETURNING n_refused",
	[ST_TRACE_INSERT] = "INSERT INTO traces (job_id, attempt, rank, step, start_unix_us, dur_us, events, "
	                    "received_at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (job_id, "
	                    "attempt, rank, step) DO NOTHING",
	[ST_TRACE_USAGE_ADD] = "INSERT INTO trace_usage (job_id, n_rows, n_bytes) VALUES (?1, 1, ?2) ON CONFLICT "
	                       "(job_id) DO UPDATE SET n_rows = n_rows + 1, n_bytes = n_bytes + ?2",
	[ST_TRACE_LIST] = "SELECT job_id, attempt, rank, step, start_unix_us, dur_us, events, received_at_us "
	                  "FROM traces WHERE job_id = ?1 AND (?2 < 0 OR attempt = ?2) AND (?3 < 0 OR rank = ?3) "
	                  "ORDER BY attempt, rank, step",
};

struct store {
	sqlite3 *db;
	store_open_mode_t mode;
	sqlite3_stmt *stmt[ST_N];
};

static const char *const state_names[STORE_JOB_N_STATES] = {
	[STORE_JOB_QUEUED] = "queued",         [STORE_JOB_SCHEDULED] = "scheduled",
	[STORE_JOB_RUNNING] = "running",       [STORE_JOB_RECOVERING] = "recovering",
	[STORE_JOB_SUCCEEDED] = "succeeded",   [STORE_JOB_FAILED] = "failed",
	[STORE_JOB_CANCELLED] = "cancelled",
};

const char *store_job_state_name(store_job_state_t s)
{
	if ((int)s < 0 || s >= STORE_JOB_N_STATES)
		return NULL;
	return state_names[s];
}

int store_job_state_parse(const char *name, store_job_state_t *ret_state)
{
	for (int i = 0; name && i < STORE_JOB_N_STATES; i++) {
		if (strcmp(name, state_names[i]) == 0) {
			*ret_state = (store_job_state_t)i;
			return 0;
		}
	}
	return -EINVAL;
}

bool store_job_state_is_final(store_job_state_t s)
{
	return s == STORE_JOB_SUCCEEDED || s == STORE_JOB_FAILED || s == STORE_JOB_CANCELLED;
}

void store_job_clear(store_job_t *job)
{
	if (!job)
		return;
	free(job->name);
	free(job->spec_json);
	free(job->state_reason);
	job->name = job->spec_json = job->state_reason = NULL;
}

void store_event_clear(store_event_t *ev)
{
	if (!ev)
		return;
	free(ev->type);
	free(ev->from_state);
	free(ev->to_state);
	free(ev->reason);
	ev->type = ev->from_state = ev->to_state = ev->reason = NULL;
}

int store_schema_version_known(void)
{
	return store_n_migrations;
}

const char *store_errmsg(const store_t *st)
{
	return st && st->db ? sqlite3_errmsg(st->db) : "no database";
}

static int64_t now_us(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* Map an SQLite result code to the errno-style codes of store.h. */
static int sqlite_err(int rc)
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

static void errorf(char *errbuf, size_t errlen, const char *fmt, ...)
{
	if (!errbuf || errlen == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
}

static int exec(store_t *st, const char *sql)
{
	return sqlite_err(sqlite3_exec(st->db, sql, NULL, NULL, NULL));
}

/* The highest version recorded in schema_migrations; 0 when the table does
 * not exist (a new file). */
static int recorded_version(store_t *st, int *ret_version)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(st->db,
	                            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = "
	                            "'schema_migrations'",
	                            -1, &s, NULL);
	if (rc != SQLITE_OK)
		return sqlite_err(rc);
	rc = sqlite3_step(s);
	int exists = rc == SQLITE_ROW ? sqlite3_column_int(s, 0) : 0;
	sqlite3_finalize(s);
	if (rc != SQLITE_ROW)
		return sqlite_err(rc);
	*ret_version = 0;
	if (!exists)
		return 0;
	rc = sqlite3_prepare_v2(st->db, "SELECT coalesce(max(version), 0) FROM schema_migrations", -1, &s,
	                        NULL);
	if (rc != SQLITE_OK)
		return sqlite_err(rc);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*ret_version = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	return rc == SQLITE_ROW ? 0 : sqlite_err(rc);
}

int store_schema_version(store_t *st, int *ret_version)
{
	return recorded_version(st, ret_version);
}

/* Apply the migrations above `from` in one transaction. */
static int migrate(store_t *st, const char *path, char *errbuf, size_t errlen)
{
	int r = exec(st, "BEGIN IMMEDIATE");
	if (r < 0)
		goto fail;
	r = exec(st, "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
	             "name TEXT NOT NULL, applied_at_us INTEGER NOT NULL)");
	if (r < 0)
		goto rollback;
	/* Re-read under the write lock: another writer may have migrated. */
	int now = 0;
	r = recorded_version(st, &now);
	if (r < 0)
		goto rollback;
	if (now > store_n_migrations) {
		exec(st, "ROLLBACK");
		errorf(errbuf, errlen,
		       "database %s has schema version %d, newer than this ringmasterd (%d): refusing to touch it",
		       path, now, store_n_migrations);
		return -EPROTO;
	}
	for (int i = now; i < store_n_migrations; i++) {
		const store_migration_t *m = &store_migrations[i];
		r = exec(st, m->sql);
		if (r < 0)
			goto rollback;
		sqlite3_stmt *s = NULL;
		int rc = sqlite3_prepare_v2(st->db,
		                            "INSERT INTO schema_migrations (version, name, applied_at_us) "
		                            "VALUES (?1, ?2, ?3)",
		                            -1, &s, NULL);
		if (rc == SQLITE_OK) {
			sqlite3_bind_int(s, 1, m->version);
			sqlite3_bind_text(s, 2, m->name, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, 3, now_us());
			rc = sqlite3_step(s);
		}
		sqlite3_finalize(s);
		if (rc != SQLITE_DONE) {
			r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
			goto rollback;
		}
	}
	r = exec(st, "COMMIT");
	if (r < 0)
		goto rollback;
	return 0;
rollback: {
	char msg[256];
	snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(st->db));
	exec(st, "ROLLBACK");
	errorf(errbuf, errlen, "database %s: applying schema migrations failed: %s", path, msg);
	return r;
}
fail:
	errorf(errbuf, errlen, "database %s: cannot start the migration transaction: %s", path,
	       sqlite3_errmsg(st->db));
	return r;
}

store_t *store_open(const char *path, store_open_mode_t mode, char *errbuf, size_t errlen)
{
	if (!path || !path[0]) {
		errorf(errbuf, errlen, "database path is empty");
		return NULL;
	}
	store_t *st = calloc(1, sizeof *st);
	if (!st) {
		errorf(errbuf, errlen, "database %s: out of memory", path);
		return NULL;
	}
	st->mode = mode;
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
	if (mode == STORE_OPEN_WRITER) {
		flags |= SQLITE_OPEN_CREATE;
		int r = fs_mkdir_parent(path, 0750);
		if (r < 0) {
			errorf(errbuf, errlen, "database %s: cannot create its folder: %s", path, strerror(-r));
			goto fail;
		}
	}
	int rc = sqlite3_open_v2(path, &st->db, flags, NULL);
	if (rc != SQLITE_OK) {
		errorf(errbuf, errlen, "database %s: cannot open: %s", path,
		       st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
		goto fail;
	}
	sqlite3_extended_result_codes(st->db, 1);
	sqlite3_busy_timeout(st->db, 5000);

	int version = 0;
	if (recorded_version(st, &version) < 0) {
		errorf(errbuf, errlen, "database %s: cannot read it (is it an SQLite database?): %s", path,
		       sqlite3_errmsg(st->db));
		goto fail;
	}
	if (version > store_n_migrations) {
		errorf(errbuf, errlen,
		       "database %s has schema version %d, newer than this ringmasterd (%d): refusing to touch it",
		       path, version, store_n_migrations);
		goto fail;
	}
	if (mode == STORE_OPEN_WRITER) {
		if (exec(st, "PRAGMA journal_mode = WAL") < 0 || exec(st, "PRAGMA synchronous = FULL") < 0 ||
		    exec(st, "PRAGMA foreign_keys = ON") < 0) {
			errorf(errbuf, errlen, "database %s: cannot configure it: %s", path,
			       sqlite3_errmsg(st->db));
			goto fail;
		}
		if (version < store_n_migrations && migrate(st, path, errbuf, errlen) < 0)
			goto fail;
	} else {
		if (version < store_n_migrations) {
			errorf(errbuf, errlen,
			       "database %s has schema version %d, older than this ringmasterd (%d): the writer "
			       "must migrate it first",
			       path, version, store_n_migrations);
			goto fail;
		}
		if (exec(st, "PRAGMA query_only = ON") < 0) {
			errorf(errbuf, errlen, "database %s: %s", path, sqlite3_errmsg(st->db));
			goto fail;
		}
	}
	for (int i = 0; i < ST_N; i++) {
		rc = sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i], NULL);
		if (rc != SQLITE_OK) {
			errorf(errbuf, errlen, "database %s: preparing a statement failed: %s", path,
			       sqlite3_errmsg(st->db));
			goto fail;
		}
	}
	return st;
fail:
	store_close(st);
	return NULL;
}

void store_close(store_t *st)
{
	if (!st)
		return;
	for (int i = 0; i < ST_N; i++)
		sqlite3_finalize(st->stmt[i]);
	if (st->db && st->mode == STORE_OPEN_WRITER)
		sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	sqlite3_close(st->db);
	free(st);
}

int store_begin(store_t *st)
{
	return exec(st, "BEGIN IMMEDIATE");
}

int store_commit(store_t *st)
{
	return exec(st, "COMMIT");
}

int store_rollback(store_t *st)
{
	if (sqlite3_get_autocommit(st->db))
		return 0; /* nothing open (SQLite may have rolled back on its own) */
	return exec(st, "ROLLBACK");
}

/* Take a prepared statement, reset and cleared for binding. */
static sqlite3_stmt *stmt(store_t *st, int which)
{
	sqlite3_stmt *s = st->stmt[which];
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return s;
}

static void bind_text_or_null(sqlite3_stmt *s, int i, const char *text)
{
	if (text)
		sqlite3_bind_text(s, i, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

/* Run a statement that returns no rows. */
static int step_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	return r;
}

int store_event_insert(store_t *st, const char *job_id, const char *type, const char *from_state,
                       const char *to_state, const char *reason, int attempt, int64_t at_us)
{
	sqlite3_stmt *s = stmt(st, ST_EVENT_INSERT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, at_us);
	sqlite3_bind_text(s, 3, type, -1, SQLITE_STATIC);
	bind_text_or_null(s, 4, from_state);
	bind_text_or_null(s, 5, to_state);
	bind_text_or_null(s, 6, reason);
	sqlite3_bind_int(s, 7, attempt);
	return step_done(s);
}

int store_job_insert(store_t *st, store_job_t *job)
{
	const char *state = store_job_state_name(job->state);
	if (!state || !job->name || !job->spec_json)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_JOB_INSERT);
	sqlite3_bind_text(s, 1, job->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, job->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, state, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 4, job->priority);
	sqlite3_bind_int(s, 5, job->world_size);
	sqlite3_bind_text(s, 6, job->spec_json, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 7, job->attempt);
	sqlite3_bind_int64(s, 8, job->created_at_us);
	bind_text_or_null(s, 9, job->state_reason);
	int r = step_done(s);
	if (r < 0)
		return r;
	job->seq = sqlite3_last_insert_rowid(st->db);
	job->updated_at_us = job->created_at_us;
	return store_event_insert(st, job->id, "submitted", NULL, state, NULL, job->attempt,
	                          job->created_at_us);
}

static char *column_strdup(sqlite3_stmt *s, int i)
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

/* Fill a job from a row of the job SELECTs. -ENOMEM or -EIO on failure. */
static int job_from_row(sqlite3_stmt *s, store_job_t *job)
{
	memset(job, 0, sizeof *job);
	job->seq = sqlite3_column_int64(s, 0);
	const char *id = (const char *)sqlite3_column_text(s, 1);
	snprintf(job->id, sizeof job->id, "%s", id ? id : "");
	job->name = column_strdup(s, 2);
	if (store_job_state_parse((const char *)sqlite3_column_text(s, 3), &job->state) < 0)
		job->state = STORE_JOB_FAILED; /* cannot happen: a CHECK constraint guards it */
	job->priority = sqlite3_column_int(s, 4);
	job->world_size = sqlite3_column_int(s, 5);
	job->spec_json = column_strdup(s, 6);
	job->attempt = sqlite3_column_int(s, 7);
	job->created_at_us = sqlite3_column_int64(s, 8);
	job->updated_at_us = sqlite3_column_int64(s, 9);
	job->state_reason = column_strdup(s, 10);
	job->restarts = sqlite3_column_int(s, 11);
	if (!job->name || !job->spec_json ||
	    (!job->state_reason && sqlite3_column_type(s, 10) != SQLITE_NULL)) {
		store_job_clear(job);
		return -ENOMEM;
	}
	return 0;
}

int store_job_get(store_t *st, const char *job_id, store_job_t *ret_job)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_GET);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	int r;
	if (rc == SQLITE_ROW)
		r = job_from_row(s, ret_job);
	else
		r = rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	return r;
}

int store_job_set_state(store_t *st, const char *job_id, store_job_state_t to, const char *reason,
                        int64_t now_us_)
{
	store_job_t old;
	int r = store_job_get(st, job_id, &old);
	if (r < 0)
		return r;
	const char *from = store_job_state_name(old.state);
	int attempt = old.attempt;
	store_job_clear(&old);
	const char *to_name = store_job_state_name(to);
	if (!to_name)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_JOB_SET_STATE);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, to_name, -1, SQLITE_STATIC);
	bind_text_or_null(s, 3, reason);
	sqlite3_bind_int64(s, 4, now_us_);
	int rc = sqlite3_step(s);
	r = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (r < 0)
		return r;
	return store_event_insert(st, job_id, "state", from, to_name, reason, attempt, now_us_);
}

int store_idem_get(store_t *st, const char *key, unsigned char ret_body_hash[32], int *ret_status,
                   char **ret_body, char *ret_job_id)
{
	sqlite3_stmt *s = stmt(st, ST_IDEM_GET);
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	int rc = sqlite3_step(s);
	int r = 0;
	if (rc == SQLITE_ROW) {
		if (sqlite3_column_bytes(s, 0) != 32) {
			r = -EIO;
		} else {
			memcpy(ret_body_hash, sqlite3_column_blob(s, 0), 32);
			*ret_status = sqlite3_column_int(s, 1);
			*ret_body = column_strdup(s, 2);
			const char *id = (const char *)sqlite3_column_text(s, 3);
			snprintf(ret_job_id, STORE_ID_BYTES, "%s", id ? id : "");
			if (!*ret_body)
				r = -ENOMEM;
		}
	} else {
		r = rc == SQLITE_DONE ? -ENOENT : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	}
	sqlite3_reset(s);
	return r;
}

int store_idem_put(store_t *st, const char *key, const unsigned char body_hash[32], int status,
                   const char *body, const char *job_id, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_IDEM_PUT);
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_blob(s, 2, body_hash, 32, SQLITE_STATIC);
	sqlite3_bind_int(s, 3, status);
	sqlite3_bind_text(s, 4, body, -1, SQLITE_STATIC);
	bind_text_or_null(s, 5, job_id);
	sqlite3_bind_int64(s, 6, now_us_);
	return step_done(s);
}

int store_job_list(store_t *st, const store_job_state_t *state, int64_t after_seq, int limit,
                   store_job_fn fn, void *userdata, bool *ret_more)
{
	if (limit < 0)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, state ? ST_JOB_LIST_STATE : ST_JOB_LIST);
	sqlite3_bind_int64(s, 1, after_seq);
	sqlite3_bind_int64(s, 2, (int64_t)limit + 1); /* one more row tells whether more follow */
	if (state) {
		const char *name = store_job_state_name(*state);
		if (!name)
			return -EINVAL;
		sqlite3_bind_text(s, 3, name, -1, SQLITE_STATIC);
	}
	int n = 0, r = 0, rc;
	bool more = false;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (n == limit) {
			more = true;
			break;
		}
		store_job_t job;
		r = job_from_row(s, &job);
		if (r < 0)
			break;
		r = fn(&job, userdata);
		store_job_clear(&job);
		n++;
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (ret_more)
		*ret_more = more;
	return r;
}

/* 0 when job `job_id` exists, -ENOENT when not, or a store error. */
static int job_exists(store_t *st, const char *job_id)
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

int store_event_list(store_t *st, const char *job_id, int64_t after_id, int limit, store_event_fn fn,
                     void *userdata, bool *ret_more)
{
	if (limit < 0)
		return -EINVAL;
	int rc = job_exists(st, job_id);
	if (rc != 0)
		return rc;

	sqlite3_stmt *s = stmt(st, ST_EVENT_LIST);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, after_id);
	sqlite3_bind_int64(s, 3, (int64_t)limit + 1);
	int n = 0, r = 0;
	bool more = false;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (n == limit) {
			more = true;
			break;
		}
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
		if (!ev.type) {
			store_event_clear(&ev);
			r = -ENOMEM;
			break;
		}
		r = fn(&ev, userdata);
		store_event_clear(&ev);
		n++;
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (ret_more)
		*ret_more = more;
	return r;
}

int store_job_count_by_state(store_t *st, int64_t ret_counts[STORE_JOB_N_STATES])
{
	for (int i = 0; i < STORE_JOB_N_STATES; i++)
		ret_counts[i] = 0;
	sqlite3_stmt *s = stmt(st, ST_JOB_COUNT_BY_STATE);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_job_state_t state;
		if (store_job_state_parse((const char *)sqlite3_column_text(s, 0), &state) == 0)
			ret_counts[state] = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	return rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
}

int store_job_count(store_t *st, int64_t *ret_count)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_COUNT);
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*ret_count = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	return rc == SQLITE_ROW ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
}

/* SQLITE_DONE -> 0, anything else -> a negative errno. */
static int rc_done(int rc)
{
	return rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
}

/* Run an UPDATE and map "no row changed" to -ENOENT. */
static int step_update(store_t *st, sqlite3_stmt *s)
{
	int r = step_done(s);
	if (r == 0 && sqlite3_changes(st->db) == 0)
		return -ENOENT;
	return r;
}

int store_worker_register(store_t *st, const char *node, const char *devices_json, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_REGISTER);
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, devices_json ? devices_json : "[]", -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, now_us_);
	return step_done(s);
}

int store_worker_set_state(store_t *st, const char *node, const char *state)
{
	if (!state || (strcmp(state, "alive") != 0 && strcmp(state, "dead") != 0))
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_WORKER_SET_STATE);
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, state, -1, SQLITE_STATIC);
	return step_update(st, s);
}

int store_worker_heartbeat(store_t *st, const char *node, int64_t at_us)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_HEARTBEAT);
	sqlite3_bind_text(s, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, at_us);
	return step_update(st, s);
}

int store_worker_list(store_t *st, store_worker_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_WORKER_LIST);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_worker_t w = {
			.node = (const char *)sqlite3_column_text(s, 0),
			.state = (const char *)sqlite3_column_text(s, 1),
			.devices_json = (const char *)sqlite3_column_text(s, 2),
			.has_heartbeat = sqlite3_column_type(s, 3) != SQLITE_NULL,
			.last_heartbeat_us = sqlite3_column_int64(s, 3),
			.registered_at_us = sqlite3_column_int64(s, 4),
		};
		if (!w.node || !w.state) {
			r = -ENOMEM;
			break;
		}
		if (!w.devices_json)
			w.devices_json = "[]";
		r = fn(&w, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

int store_worker_count_by_state(store_t *st, int64_t *ret_alive, int64_t *ret_dead)
{
	int64_t alive = 0, dead = 0;
	sqlite3_stmt *s = stmt(st, ST_WORKER_COUNT);
	int rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *state = (const char *)sqlite3_column_text(s, 0);
		if (state && strcmp(state, "alive") == 0)
			alive = sqlite3_column_int64(s, 1);
		else if (state && strcmp(state, "dead") == 0)
			dead = sqlite3_column_int64(s, 1);
	}
	sqlite3_reset(s);
	int r = rc_done(rc);
	if (r == 0) {
		*ret_alive = alive;
		*ret_dead = dead;
	}
	return r;
}

int store_job_set_attempt(store_t *st, const char *job_id, int attempt, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_SET_ATTEMPT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int64(s, 3, now_us_);
	return step_update(st, s);
}

int store_job_list_queued(store_t *st, store_job_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_LIST_QUEUED);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_job_t job;
		r = job_from_row(s, &job);
		if (r < 0)
			break;
		r = fn(&job, userdata);
		store_job_clear(&job);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

static bool rank_state_valid(const char *state)
{
	static const char *const names[] = {"placed", "joined", "done", "exited", "lost"};
	for (size_t i = 0; state && i < sizeof names / sizeof names[0]; i++)
		if (strcmp(state, names[i]) == 0)
			return true;
	return false;
}

int store_rank_insert(store_t *st, const store_rank_t *r, int64_t now_us_)
{
	const char *state = r->state ? r->state : "placed";
	if (!r->node || !r->device_kind || !rank_state_valid(state))
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_RANK_INSERT);
	sqlite3_bind_text(s, 1, r->job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, r->attempt);
	sqlite3_bind_int(s, 3, r->rank);
	sqlite3_bind_text(s, 4, r->node, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 5, r->device_kind, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 6, r->device_index);
	sqlite3_bind_text(s, 7, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 8, now_us_);
	return step_done(s);
}

int store_rank_set_state(store_t *st, const char *job_id, int attempt, int rank, const char *state,
                         bool has_exit, int exit_code, int signal, int64_t now_us_)
{
	if (!rank_state_valid(state))
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_RANK_SET_STATE);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int(s, 3, rank);
	sqlite3_bind_text(s, 4, state, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 5, has_exit);
	sqlite3_bind_int(s, 6, exit_code);
	sqlite3_bind_int(s, 7, signal);
	sqlite3_bind_int64(s, 8, now_us_);
	return step_update(st, s);
}

int store_rank_lose_attempt(store_t *st, const char *job_id, int attempt, int64_t now_us_)
{
	sqlite3_stmt *s = stmt(st, ST_RANK_LOSE_ATTEMPT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int64(s, 3, now_us_);
	return step_done(s);
}

int store_rank_list_active(store_t *st, store_rank_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_RANK_LIST_ACTIVE);
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_rank_t rk;
		memset(&rk, 0, sizeof rk);
		const char *id = (const char *)sqlite3_column_text(s, 0);
		snprintf(rk.job_id, sizeof rk.job_id, "%s", id ? id : "");
		rk.attempt = sqlite3_column_int(s, 1);
		rk.rank = sqlite3_column_int(s, 2);
		rk.node = (const char *)sqlite3_column_text(s, 3);
		rk.device_kind = (const char *)sqlite3_column_text(s, 4);
		rk.device_index = sqlite3_column_int(s, 5);
		rk.state = (const char *)sqlite3_column_text(s, 6);
		if (!rk.node || !rk.device_kind || !rk.state) {
			r = -ENOMEM;
			break;
		}
		r = fn(&rk, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

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

/* ---- rank memory and checkpoints ---- */

int store_rank_set_memory(store_t *st, const char *job_id, int attempt, int rank,
                          const store_rank_memory_t *m)
{
	if (m->params_bytes < 0 || m->grads_bytes < 0 || m->optim_bytes < 0 || m->activations_bytes < 0)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_RANK_SET_MEMORY);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	sqlite3_bind_int(s, 3, rank);
	sqlite3_bind_int64(s, 4, m->params_bytes);
	sqlite3_bind_int64(s, 5, m->grads_bytes);
	sqlite3_bind_int64(s, 6, m->optim_bytes);
	sqlite3_bind_int64(s, 7, m->activations_bytes);
	return step_update(st, s);
}

/* Walk the rows of a rank SELECT with the memory columns (7..10). */
static int rank_walk(sqlite3_stmt *s, store_rank_fn fn, void *userdata)
{
	int rc, r = 0;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		store_rank_t rk;
		memset(&rk, 0, sizeof rk);
		const char *id = (const char *)sqlite3_column_text(s, 0);
		snprintf(rk.job_id, sizeof rk.job_id, "%s", id ? id : "");
		rk.attempt = sqlite3_column_int(s, 1);
		rk.rank = sqlite3_column_int(s, 2);
		rk.node = (const char *)sqlite3_column_text(s, 3);
		rk.device_kind = (const char *)sqlite3_column_text(s, 4);
		rk.device_index = sqlite3_column_int(s, 5);
		rk.state = (const char *)sqlite3_column_text(s, 6);
		rk.has_memory = sqlite3_column_type(s, 7) != SQLITE_NULL;
		rk.memory.params_bytes = sqlite3_column_int64(s, 7);
		rk.memory.grads_bytes = sqlite3_column_int64(s, 8);
		rk.memory.optim_bytes = sqlite3_column_int64(s, 9);
		rk.memory.activations_bytes = sqlite3_column_int64(s, 10);
		if (!rk.node || !rk.device_kind || !rk.state) {
			r = -ENOMEM;
			break;
		}
		r = fn(&rk, userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_ROW)
		r = rc_done(rc);
	sqlite3_reset(s);
	return r;
}

int store_rank_list_attempt(store_t *st, const char *job_id, int attempt, store_rank_fn fn,
                            void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_RANK_LIST_ATTEMPT);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, attempt);
	return rank_walk(s, fn, userdata);
}

int store_rank_list_memory_running(store_t *st, store_rank_fn fn, void *userdata)
{
	return rank_walk(stmt(st, ST_RANK_LIST_MEMORY_RUNNING), fn, userdata);
}

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

/* ---- restarts (schema 004) ---- */

int store_job_set_restarts(store_t *st, const char *job_id, int restarts, int64_t now_us_)
{
	if (restarts < 0)
		return -EINVAL;
	sqlite3_stmt *s = stmt(st, ST_JOB_SET_RESTARTS);
	sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, restarts);
	sqlite3_bind_int64(s, 3, now_us_);
	int rc = sqlite3_step(s);
	int r = rc == SQLITE_DONE ? 0 : sqlite_err(rc) ? sqlite_err(rc) : -EIO;
	sqlite3_reset(s);
	if (r == 0 && sqlite3_changes(st->db) == 0)
		r = -ENOENT;
	return r;
}

int store_job_list_restarts(store_t *st, store_restarts_fn fn, void *userdata)
{
	sqlite3_stmt *s = stmt(st, ST_JOB_LIST_RESTARTS);
	int r = 0, rc;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(s, 0);
		r = fn(id ? id : "", sqlite3_column_int(s, 1), userdata);
		if (r != 0)
			break;
	}
	if (r == 0 && rc != SQLITE_DONE && rc != SQLITE_ROW)
		r = sqlite_err(rc) ? sqlite_err(rc) : -EIO;
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
