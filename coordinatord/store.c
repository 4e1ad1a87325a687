/*
 * store: the coordinator's SQLite database (see store.h for the contract):
 * opening, schema migrations, transactions, and the SQL of every prepared
 * statement. The queries themselves live by subject, each file with its
 * part of store.h: store_jobs.c (jobs, their events, idempotency keys,
 * attempts and restarts), store_cluster.c (workers, ranks and the ranks'
 * memory), store_metrics.c (training metrics and profiler traces) and
 * store_checkpoints.c (committed checkpoints). store_internal.h is what
 * they share.
 *
 * Each store_t is one connection with its statements prepared once at open.
 * The writer checks the recorded schema version before it changes anything
 * in the file (a newer database is refused untouched), then switches to WAL,
 * and applies the pending embedded migrations in one IMMEDIATE transaction,
 * recording each in schema_migrations. Readers open the existing file
 * read-write but with query_only set, so they can share the WAL index and
 * never write.
 */
#include "store_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <sqlite3.h>

#include "fsutil.h"
#include "store_migrations.h"

static const char *const stmt_sql[ST_N] = {
	[ST_JOB_INSERT] = "INSERT INTO jobs (id, name, state, priority, world_size, spec_json, attempt, "
	                  "created_at_us, updated_at_us, state_reason, submitted_by) VALUES (?1, ?2, ?3, ?4, ?5, "
	                  "?6, ?7, ?8, ?8, ?9, ?10)",
	[ST_JOB_SET_STATE] = "UPDATE jobs SET state = ?2, state_reason = ?3, updated_at_us = ?4 WHERE id = ?1 "
	                     "RETURNING attempt",
	[ST_JOB_GET] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, created_at_us, "
	               "updated_at_us, state_reason, restarts, submitted_by, cancelled_by FROM jobs WHERE id = ?1",
	[ST_JOB_LIST] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, created_at_us, "
	                "updated_at_us, state_reason, restarts, submitted_by, cancelled_by FROM jobs WHERE seq > ?1 ORDER BY seq LIMIT ?2",
	[ST_JOB_LIST_STATE] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, "
	                      "created_at_us, updated_at_us, state_reason, restarts, submitted_by, cancelled_by FROM jobs WHERE state = ?3 AND "
	                      "seq > ?1 ORDER BY seq LIMIT ?2",
	[ST_JOB_COUNT_BY_STATE] = "SELECT state, count(*) FROM jobs GROUP BY state",
	[ST_JOB_COUNT] = "SELECT count(*) FROM jobs",
	[ST_EVENT_INSERT] = "INSERT INTO events (job_id, at_us, type, from_state, to_state, reason, attempt, actor) "
	                    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
	[ST_EVENT_LIST] = "SELECT id, job_id, at_us, type, from_state, to_state, reason, attempt, actor FROM events "
	                  "WHERE job_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
	[ST_JOB_EXISTS] = "SELECT 1 FROM jobs WHERE id = ?1",
	[ST_IDEM_GET] = "SELECT body_hash, status, body, job_id FROM idempotency_keys WHERE key = ?1",
	[ST_IDEM_PUT] = "INSERT INTO idempotency_keys (key, body_hash, status, body, job_id, created_at_us) "
	                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[ST_WORKER_LIST] = "SELECT node, state, devices_json, last_heartbeat_us, registered_at_us, program_json FROM workers "
	                   "ORDER BY node",
	[ST_WORKER_REGISTER] = "INSERT INTO workers (node, state, devices_json, last_heartbeat_us, "
	                       "registered_at_us) VALUES (?1, 'alive', ?2, ?3, ?3) ON CONFLICT (node) DO "
	                       "UPDATE SET state = 'alive', devices_json = ?2, last_heartbeat_us = ?3, "
	                       "registered_at_us = ?3",
	[ST_WORKER_SET_STATE] = "UPDATE workers SET state = ?2 WHERE node = ?1",
	[ST_WORKER_HEARTBEAT] = "UPDATE workers SET last_heartbeat_us = ?2 WHERE node = ?1",
	[ST_WORKER_COUNT] = "SELECT state, count(*) FROM workers GROUP BY state",
	[ST_WORKER_SET_PROGRAMS] = "UPDATE workers SET program_json = ?2 WHERE node = ?1",
	[ST_JOB_SET_ATTEMPT] = "UPDATE jobs SET attempt = ?2, updated_at_us = ?3 WHERE id = ?1",
	[ST_JOB_LIST_QUEUED] = "SELECT seq, id, name, state, priority, world_size, spec_json, attempt, "
	                       "created_at_us, updated_at_us, state_reason, restarts, submitted_by, cancelled_by FROM jobs WHERE state = 'queued' "
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
	/* dead workers whose last sign of life is older than ?1 (issue 22) */
	[ST_WORKER_PRUNE] = "DELETE FROM workers WHERE state = 'dead' AND "
	                    "COALESCE(last_heartbeat_us, registered_at_us, 0) < ?1",
	[ST_JOB_SET_CANCELLED_BY] = "UPDATE jobs SET cancelled_by = ?2 WHERE id = ?1",
	[ST_JOB_COUNT_QUEUED_BY] = "SELECT count(*) FROM jobs WHERE submitted_by = ?1 AND state = 'queued'",
	[ST_TOKEN_INSERT] = "INSERT INTO tokens (name, role, hash, prefix, created_at_us, expires_at_us) VALUES "
	                    "(?1, ?2, ?3, ?4, ?5, ?6)",
	[ST_TOKEN_REVOKE] = "UPDATE tokens SET revoked_at_us = ?2 WHERE id = ?1 AND revoked_at_us IS NULL",
	[ST_TOKEN_TOUCH] = "UPDATE tokens SET last_used_at_us = ?2 WHERE id = ?1",
	[ST_TOKEN_BY_HASH] = "SELECT id, name, role, prefix, hash, created_at_us, expires_at_us, last_used_at_us, "
	                     "revoked_at_us FROM tokens WHERE hash = ?1",
	[ST_TOKEN_GET] = "SELECT id, name, role, prefix, hash, created_at_us, expires_at_us, last_used_at_us, "
	                 "revoked_at_us FROM tokens WHERE id = ?1",
	[ST_TOKEN_LIST] = "SELECT id, name, role, prefix, hash, created_at_us, expires_at_us, last_used_at_us, "
	                  "revoked_at_us FROM tokens ORDER BY id",
	[ST_TOKEN_COUNT] = "SELECT count(*) FROM tokens",
};

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
