/*
 * test_store: the coordinator's SQLite store on real database files.
 *
 * Migrations (a new file gets the whole schema and its record; reopening
 * applies nothing twice; a database from a newer version is refused and left
 * byte-for-byte unchanged; a reader refuses an unmigrated file; a file in
 * the way of the database's folder is refused), job and
 * event CRUD, list filters and paging, idempotency keys, group commit and
 * rollback, strings stored exactly as sent, readers running on their own
 * connections while the writer commits, ranks' memory, committed
 * checkpoints (commit, re-commit, delete, list newest first, latest), and
 * traces (insert, the first of a repeated step kept, the per-job row and
 * byte caps with their refusal count, filters by attempt and rank, order),
 * API tokens (looked up by hash, a live name unique but reusable once
 * revoked, revocation, last use) and who submitted and cancelled a job.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store.h"
#include "check.h"

static char tmpdir[256];

static void path_in_tmp(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", tmpdir, name);
}

static store_t *open_writer(const char *path)
{
	char err[512] = "";
	store_t *st = store_open(path, STORE_OPEN_WRITER, err, sizeof err);
	CHECK(st != NULL, "writer open of %s: %s", path, err);
	return st;
}

static int insert_job(store_t *st, const char *id, const char *name, int priority)
{
	store_job_t job;
	memset(&job, 0, sizeof job);
	snprintf(job.id, sizeof job.id, "%s", id);
	job.name = (char *)name;
	job.spec_json = (char *)"{\"name\":\"x\"}";
	job.priority = priority;
	job.world_size = 2;
	job.state = STORE_JOB_QUEUED;
	job.created_at_us = 1000;
	return store_job_insert(st, &job);
}

static void test_states(void)
{
	for (int i = 0; i < STORE_JOB_N_STATES; i++) {
		store_job_state_t s;
		const char *name = store_job_state_name((store_job_state_t)i);
		CHECK(name != NULL, "state %d has no name", i);
		CHECK(store_job_state_parse(name, &s) == 0 && (int)s == i, "round trip of %s", name);
	}
	store_job_state_t s;
	CHECK(store_job_state_parse("Queued", &s) == -EINVAL, "state names are case-sensitive");
	CHECK(store_job_state_parse(NULL, &s) == -EINVAL, "NULL name");
	CHECK(store_job_state_name(STORE_JOB_N_STATES) == NULL, "out of range");
	CHECK(store_job_state_is_final(STORE_JOB_CANCELLED) && !store_job_state_is_final(STORE_JOB_RUNNING),
	      "final states");
}

static void test_migrations(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "sub/dir/m.db");
	store_t *st = open_writer(path); /* creates the folders too */
	if (!st)
		return;
	int v = -1;
	CHECK(store_schema_version(st, &v) == 0 && v == store_schema_version_known(),
	      "new database at version %d, known %d", v, store_schema_version_known());
	CHECK(store_schema_version_known() >= 1, "no embedded migration");
	store_close(st);

	/* Reopen: nothing applied twice (the record has one row per version). */
	st = open_writer(path);
	store_close(st);
	sqlite3 *db = NULL;
	CHECK(sqlite3_open(path, &db) == SQLITE_OK, "sqlite open");
	sqlite3_stmt *s = NULL;
	sqlite3_prepare_v2(db, "SELECT count(*), max(version) FROM schema_migrations", -1, &s, NULL);
	CHECK(sqlite3_step(s) == SQLITE_ROW, "schema_migrations readable");
	CHECK(sqlite3_column_int(s, 0) == store_schema_version_known(), "migrations recorded %d times",
	      sqlite3_column_int(s, 0));
	sqlite3_finalize(s);
	sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL);
	CHECK(sqlite3_step(s) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(s, 0), "wal") == 0,
	      "journal mode is not WAL");
	sqlite3_finalize(s);

	/* A newer database: refused, and the file is not touched. */
	CHECK(sqlite3_exec(db, "INSERT INTO schema_migrations VALUES (4242, '4242_future', 0)", NULL, NULL,
	                   NULL) == SQLITE_OK,
	      "insert future version");
	sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
	sqlite3_close(db);
	struct stat before, after;
	stat(path, &before);
	char err[512] = "";
	st = store_open(path, STORE_OPEN_WRITER, err, sizeof err);
	CHECK(st == NULL, "a newer database was opened");
	CHECK(strstr(err, "4242") && strstr(err, "newer") && strstr(err, path), "message: %s", err);
	store_close(st);
	st = store_open(path, STORE_OPEN_READER, err, sizeof err);
	CHECK(st == NULL, "a reader opened a newer database");
	store_close(st);
	stat(path, &after);
	CHECK(before.st_size == after.st_size && before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
	          before.st_mtim.tv_nsec == after.st_mtim.tv_nsec,
	      "the newer database file changed");

	/* A reader never creates or migrates. */
	path_in_tmp(path, sizeof path, "absent.db");
	st = store_open(path, STORE_OPEN_READER, err, sizeof err);
	CHECK(st == NULL && access(path, F_OK) != 0, "reader created %s", path);
	store_close(st);

	/* Not a database. */
	path_in_tmp(path, sizeof path, "garbage.db");
	FILE *f = fopen(path, "w");
	fputs("this is not an sqlite file, not at all, it is text and it is long enough\n", f);
	fclose(f);
	st = store_open(path, STORE_OPEN_WRITER, err, sizeof err);
	CHECK(st == NULL && strstr(err, path), "garbage file: %s", err);
	store_close(st);

	/* A file where the database's folder should be: refused by the
	 * writer's mkdir -p (fs_mkdir_parent), with the path in the message. */
	path_in_tmp(path, sizeof path, "garbage.db/sub/x.db");
	st = store_open(path, STORE_OPEN_WRITER, err, sizeof err);
	CHECK(st == NULL && strstr(err, path) && strstr(err, "cannot create its folder") &&
	          strstr(err, strerror(ENOTDIR)),
	      "a file in the way of the folder: %s", err);
	store_close(st);
}

typedef struct {
	int n;
	char ids[16][STORE_ID_BYTES];
	int64_t last_seq;
} collect_t;

static int collect(const store_job_t *job, void *userdata)
{
	collect_t *c = userdata;
	if (c->n < 16)
		snprintf(c->ids[c->n], STORE_ID_BYTES, "%s", job->id);
	c->n++;
	c->last_seq = job->seq;
	return 0;
}

static int count_events(const store_event_t *ev, void *userdata)
{
	int *n = userdata;
	(*n)++;
	if (*n == 1)
		CHECK(strcmp(ev->type, "submitted") == 0 && ev->from_state == NULL &&
		          strcmp(ev->to_state, "queued") == 0,
		      "first event is %s", ev->type);
	if (*n == 2)
		CHECK(strcmp(ev->type, "state") == 0 && strcmp(ev->from_state, "queued") == 0 &&
		          strcmp(ev->to_state, "cancelled") == 0 && strcmp(ev->reason, "by test") == 0,
		      "second event is %s", ev->type);
	return 0;
}

static int count_worker(const store_worker_t *w, void *userdata)
{
	(*(int *)userdata)++;
	return 0;
}

static void test_jobs(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "jobs.db");
	store_t *st = open_writer(path);
	if (!st)
		return;
	/* Strings exactly as sent: quotes, SQL metacharacters, UTF-8. */
	const char *odd = "x'); DROP TABLE jobs; -- \"é\" 名前";
	CHECK(store_begin(st) == 0, "begin");
	char id[STORE_ID_BYTES];
	for (int i = 0; i < 10; i++) {
		snprintf(id, sizeof id, "j-%02d", i);
		CHECK(insert_job(st, id, i == 3 ? odd : "plain", i) == 0, "insert %s: %s", id, store_errmsg(st));
	}
	CHECK(insert_job(st, "j-03", "dup", 0) == -EEXIST, "duplicate id accepted");
	CHECK(store_commit(st) == 0, "commit");

	store_job_t job;
	CHECK(store_job_get(st, "j-03", &job) == 0, "get");
	CHECK(strcmp(job.name, odd) == 0 && job.state == STORE_JOB_QUEUED && job.priority == 3 &&
	          job.world_size == 2 && job.created_at_us == 1000 && job.state_reason == NULL,
	      "job read back differs: %s", job.name);
	store_job_clear(&job);
	CHECK(store_job_get(st, "j-nope", &job) == -ENOENT, "missing job");

	CHECK(store_begin(st) == 0, "begin");
	CHECK(store_job_set_state(st, "j-05", STORE_JOB_CANCELLED, "by test", 2000) == 0, "set state");
	CHECK(store_job_set_state(st, "j-nope", STORE_JOB_CANCELLED, "x", 2000) == -ENOENT, "missing job");
	CHECK(store_commit(st) == 0, "commit");
	CHECK(store_job_get(st, "j-05", &job) == 0 && job.state == STORE_JOB_CANCELLED &&
	          job.updated_at_us == 2000 && strcmp(job.state_reason, "by test") == 0,
	      "state change not stored");
	store_job_clear(&job);

	int n_ev = 0;
	bool more = true;
	CHECK(store_event_list(st, "j-05", 0, 100, count_events, &n_ev, &more) == 0 && n_ev == 2 && !more,
	      "events: %d", n_ev);
	CHECK(store_event_list(st, "j-nope", 0, 100, count_events, &n_ev, &more) == -ENOENT, "events of none");

	/* Paging: limit 4 over 10 jobs, cursor = last seq. */
	collect_t c = {0};
	int64_t after = 0;
	int pages = 0;
	do {
		int before = c.n;
		CHECK(store_job_list(st, NULL, after, 4, collect, &c, &more) == 0, "list");
		after = c.last_seq;
		pages++;
		CHECK(c.n - before <= 4, "page too long");
	} while (more && pages < 10);
	CHECK(c.n == 10 && pages == 3, "paging gave %d jobs in %d pages", c.n, pages);
	CHECK(strcmp(c.ids[0], "j-00") == 0 && strcmp(c.ids[9], "j-09") == 0, "insertion order");

	store_job_state_t cancelled = STORE_JOB_CANCELLED;
	collect_t c2 = {0};
	CHECK(store_job_list(st, &cancelled, 0, 100, collect, &c2, &more) == 0 && c2.n == 1 &&
	          strcmp(c2.ids[0], "j-05") == 0,
	      "state filter gave %d", c2.n);

	int64_t counts[STORE_JOB_N_STATES], total = 0;
	CHECK(store_job_count_by_state(st, counts) == 0 && counts[STORE_JOB_QUEUED] == 9 &&
	          counts[STORE_JOB_CANCELLED] == 1 && counts[STORE_JOB_RUNNING] == 0,
	      "counts");
	CHECK(store_job_count(st, &total) == 0 && total == 10, "total %lld", (long long)total);

	/* Rollback: nothing of the group stays. */
	CHECK(store_begin(st) == 0, "begin");
	CHECK(insert_job(st, "j-rolled", "r", 0) == 0, "insert");
	CHECK(store_rollback(st) == 0, "rollback");
	CHECK(store_job_get(st, "j-rolled", &job) == -ENOENT, "rolled-back job exists");

	int n_workers = 0;
	CHECK(store_worker_list(st, count_worker, &n_workers) == 0 && n_workers == 0, "workers %d", n_workers);
	store_close(st);

	/* Everything is still there after a reopen. */
	st = open_writer(path);
	if (st) {
		CHECK(store_job_count(st, &total) == 0 && total == 10, "after reopen %lld", (long long)total);
		store_close(st);
	}
}

static void test_idempotency(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "idem.db");
	store_t *st = open_writer(path);
	if (!st)
		return;
	unsigned char hash[32], got[32];
	for (int i = 0; i < 32; i++)
		hash[i] = (unsigned char)(i * 7);
	int status = 0;
	char *body = NULL;
	char job_id[STORE_ID_BYTES];
	CHECK(store_idem_get(st, "k1", got, &status, &body, job_id) == -ENOENT, "new key");
	CHECK(store_begin(st) == 0, "begin");
	CHECK(store_idem_put(st, "k1", hash, 201, "{\"id\":\"j-1\"}", "j-1", 5) == 0, "put");
	CHECK(store_idem_put(st, "k1", hash, 201, "{}", "j-2", 5) == -EEXIST, "second put of a key");
	CHECK(store_commit(st) == 0, "commit");
	CHECK(store_idem_get(st, "k1", got, &status, &body, job_id) == 0 && status == 201 &&
	          memcmp(got, hash, 32) == 0 && strcmp(body, "{\"id\":\"j-1\"}") == 0 &&
	          strcmp(job_id, "j-1") == 0,
	      "stored reply differs");
	free(body);
	store_close(st);
}

/* Readers on their own connections during a stream of writer commits: every
 * read succeeds and the count never goes down. */
typedef struct {
	const char *path;
	atomic_bool *stop;
	int reads, errors, regressions;
} reader_arg_t;

static void *reader_main(void *p)
{
	reader_arg_t *a = p;
	char err[512];
	store_t *st = store_open(a->path, STORE_OPEN_READER, err, sizeof err);
	if (!st) {
		fprintf(stderr, "reader open: %s\n", err);
		a->errors++;
		return NULL;
	}
	int64_t last = 0;
	while (!atomic_load(a->stop)) {
		int64_t n = 0;
		if (store_job_count(st, &n) < 0) {
			a->errors++;
			continue;
		}
		if (n < last)
			a->regressions++;
		last = n;
		store_job_t job;
		int r = store_job_get(st, "r-00000", &job);
		if (r == 0)
			store_job_clear(&job);
		else if (r != -ENOENT)
			a->errors++;
		a->reads++;
	}
	/* A reader refuses to write. */
	if (store_begin(st) == 0 && insert_job(st, "r-from-reader", "x", 0) == 0)
		a->errors++;
	store_rollback(st);
	store_close(st);
	return NULL;
}

static void test_readers_during_writes(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "rw.db");
	store_t *st = open_writer(path);
	if (!st)
		return;
	atomic_bool stop = false;
	reader_arg_t args[3];
	pthread_t th[3];
	for (int i = 0; i < 3; i++) {
		args[i] = (reader_arg_t){.path = path, .stop = &stop};
		pthread_create(&th[i], NULL, reader_main, &args[i]);
	}
	int inserted = 0;
	for (int g = 0; g < 60; g++) {
		CHECK(store_begin(st) == 0, "begin: %s", store_errmsg(st));
		for (int k = 0; k < 5; k++) {
			char id[STORE_ID_BYTES];
			snprintf(id, sizeof id, "r-%05d", inserted);
			if (insert_job(st, id, "rw", 0) == 0)
				inserted++;
		}
		CHECK(store_commit(st) == 0, "commit: %s", store_errmsg(st));
	}
	atomic_store(&stop, true);
	int reads = 0;
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		CHECK(args[i].errors == 0, "reader %d had %d errors", i, args[i].errors);
		CHECK(args[i].regressions == 0, "reader %d saw the count go down", i);
		reads += args[i].reads;
	}
	CHECK(inserted == 300, "inserted %d", inserted);
	CHECK(reads > 0, "readers did not read");
	int64_t total = 0;
	CHECK(store_job_count(st, &total) == 0 && total == 300, "total %lld", (long long)total);
	store_close(st);
}

/* ---- schema 002: workers, ranks, metrics ---- */

typedef struct {
	char names[8][32];
	char states[8][8];
	char devices[8][128];
	int64_t hb[8];
	int n;
} worker_seen_t;

static int see_worker(const store_worker_t *w, void *userdata)
{
	worker_seen_t *s = userdata;
	if (s->n < 8) {
		snprintf(s->names[s->n], sizeof s->names[0], "%s", w->node);
		snprintf(s->states[s->n], sizeof s->states[0], "%s", w->state);
		snprintf(s->devices[s->n], sizeof s->devices[0], "%s", w->devices_json);
		s->hb[s->n] = w->has_heartbeat ? w->last_heartbeat_us : -1;
	}
	s->n++;
	return 0;
}

typedef struct {
	char text[16][96];
	int n;
} rank_seen_t;

static int see_rank(const store_rank_t *r, void *userdata)
{
	rank_seen_t *s = userdata;
	if (s->n < 16)
		snprintf(s->text[s->n], sizeof s->text[0], "%s/%d/%d@%s:%s%d:%s", r->job_id, r->attempt, r->rank,
		         r->node, r->device_kind, r->device_index, r->state);
	s->n++;
	return 0;
}

typedef struct {
	store_metric_t rows[16];
	int n;
} metric_seen_t;

static int see_metric(const store_metric_t *m, void *userdata)
{
	metric_seen_t *s = userdata;
	if (s->n < 16)
		s->rows[s->n] = *m;
	s->n++;
	return 0;
}

static int see_queued(const store_job_t *job, void *userdata)
{
	char *out = userdata;
	strcat(out, job->id);
	strcat(out, " ");
	return 0;
}

static void test_cluster_tables(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "cluster.db");
	store_t *st = open_writer(path);
	if (!st)
		return;

	/* workers: register (insert, then update), heartbeat, state, counts */
	CHECK(store_begin(st) == 0, "begin");
	CHECK(store_worker_register(st, "n2", "[{\"kind\":\"cpu\",\"index\":0}]", 100) == 0, "register n2");
	CHECK(store_worker_register(st, "n1", "[]", 100) == 0, "register n1");
	CHECK(store_worker_register(st, "n1", "[{\"kind\":\"cuda\",\"index\":1}]", 200) == 0, "re-register n1");
	CHECK(store_worker_heartbeat(st, "n2", 300) == 0, "heartbeat");
	CHECK(store_worker_heartbeat(st, "nope", 300) == -ENOENT, "heartbeat of an unknown node");
	CHECK(store_worker_set_state(st, "n2", "dead") == 0, "dead");
	CHECK(store_worker_set_state(st, "n2", "zombie") == -EINVAL, "a state that does not exist");
	CHECK(store_worker_set_state(st, "nope", "dead") == -ENOENT, "state of an unknown node");
	CHECK(store_commit(st) == 0, "commit");
	worker_seen_t ws = {0};
	CHECK(store_worker_list(st, see_worker, &ws) == 0 && ws.n == 2, "workers listed %d", ws.n);
	CHECK(strcmp(ws.names[0], "n1") == 0 && strcmp(ws.states[0], "alive") == 0 && ws.hb[0] == 200 &&
	          strcmp(ws.devices[0], "[{\"kind\":\"cuda\",\"index\":1}]") == 0,
	      "n1: %s %s %lld %s", ws.names[0], ws.states[0], (long long)ws.hb[0], ws.devices[0]);
	CHECK(strcmp(ws.names[1], "n2") == 0 && strcmp(ws.states[1], "dead") == 0 && ws.hb[1] == 300,
	      "n2: %s %s %lld", ws.names[1], ws.states[1], (long long)ws.hb[1]);
	int64_t alive = -1, dead = -1;
	CHECK(store_worker_count_by_state(st, &alive, &dead) == 0 && alive == 1 && dead == 1, "counts %lld %lld",
	      (long long)alive, (long long)dead);

	/* queued order: priority first, then submission */
	CHECK(insert_job(st, "j-low", "a", 0) == 0 && insert_job(st, "j-high", "b", 5) == 0 &&
	          insert_job(st, "j-low2", "c", 0) == 0 && insert_job(st, "j-high2", "d", 5) == 0,
	      "insert jobs");
	char order[256] = "";
	CHECK(store_job_list_queued(st, see_queued, order) == 0 && strcmp(order, "j-high j-high2 j-low j-low2 ") == 0,
	      "queued order: %s", order);

	/* ranks: placement of attempt 1 of j-high, listed while the job is live */
	CHECK(store_begin(st) == 0, "begin");
	CHECK(store_job_set_attempt(st, "j-high", 1, 500) == 0, "attempt");
	CHECK(store_job_set_attempt(st, "j-none", 1, 500) == -ENOENT, "attempt of an unknown job");
	for (int r = 0; r < 2; r++) {
		store_rank_t rk = {.attempt = 1, .rank = r, .node = r ? "n2" : "n1", .device_kind = "cpu",
		                   .device_index = r};
		snprintf(rk.job_id, sizeof rk.job_id, "j-high");
		CHECK(store_rank_insert(st, &rk, 500) == 0, "rank %d", r);
		CHECK(store_rank_insert(st, &rk, 500) == -EEXIST, "rank %d twice", r);
	}
	store_rank_t bad = {.attempt = 1, .rank = 3, .node = "n1", .device_kind = "tpu", .device_index = 0};
	snprintf(bad.job_id, sizeof bad.job_id, "j-high");
	CHECK(store_rank_insert(st, &bad, 500) < 0, "a device kind that does not exist");
	CHECK(store_job_set_state(st, "j-high", STORE_JOB_SCHEDULED, "placed", 500) == 0, "scheduled");
	CHECK(store_rank_set_state(st, "j-high", 1, 0, "joined", false, 0, 0, 600) == 0, "joined");
	CHECK(store_rank_set_state(st, "j-high", 1, 1, "sleeping", false, 0, 0, 600) == -EINVAL, "bad rank state");
	CHECK(store_rank_set_state(st, "j-high", 1, 7, "joined", false, 0, 0, 600) == -ENOENT, "unknown rank");
	CHECK(store_commit(st) == 0, "commit");
	rank_seen_t rs = {0};
	CHECK(store_rank_list_active(st, see_rank, &rs) == 0 && rs.n == 2, "active ranks %d", rs.n);
	CHECK(strcmp(rs.text[0], "j-high/1/0@n1:cpu0:joined") == 0 && strcmp(rs.text[1], "j-high/1/1@n2:cpu1:placed") == 0,
	      "ranks: %s | %s", rs.text[0], rs.text[1]);
	order[0] = '\0';
	CHECK(store_job_list_queued(st, see_queued, order) == 0 && strcmp(order, "j-high2 j-low j-low2 ") == 0,
	      "queued after placement: %s", order);

	/* an exit is recorded with its status; losing the attempt spares finished ranks */
	CHECK(store_begin(st) == 0, "begin");
	CHECK(store_rank_set_state(st, "j-high", 1, 1, "exited", true, -1, 9, 700) == 0, "exited");
	CHECK(store_rank_lose_attempt(st, "j-high", 1, 800) == 0, "lose");
	CHECK(store_commit(st) == 0, "commit");
	rs.n = 0;
	CHECK(store_rank_list_active(st, see_rank, &rs) == 0 && rs.n == 2 &&
	          strcmp(rs.text[0], "j-high/1/0@n1:cpu0:lost") == 0 &&
	          strcmp(rs.text[1], "j-high/1/1@n2:cpu1:exited") == 0,
	      "after lose: %d %s | %s", rs.n, rs.text[0], rs.text[1]);
	{
		sqlite3 *db = NULL;
		sqlite3_stmt *s = NULL;
		CHECK(sqlite3_open(path, &db) == SQLITE_OK, "open");
		sqlite3_prepare_v2(db, "SELECT exit_code, signal FROM ranks WHERE rank = 1", -1, &s, NULL);
		CHECK(sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) == -1 && sqlite3_column_int(s, 1) == 9,
		      "exit status stored");
		sqlite3_finalize(s);
		sqlite3_close(db);
	}
	/* a final job's ranks are not active any more */
	CHECK(store_job_set_state(st, "j-high", STORE_JOB_FAILED, "rank 1 exited: killed by signal 9", 900) == 0,
	      "failed");
	rs.n = 0;
	CHECK(store_rank_list_active(st, see_rank, &rs) == 0 && rs.n == 0, "active after failure %d", rs.n);

	/* metrics: insert in one transaction, list by step with paging, NULLs */
	CHECK(store_job_set_state(st, "j-high2", STORE_JOB_RUNNING, "all joined", 900) == 0, "running");
	CHECK(store_begin(st) == 0, "begin");
	for (int step = 1; step <= 5; step++) {
		store_metric_t m = {.attempt = 1, .rank = 0, .step = step, .loss = 5.0 - step * 0.5, .lr = 1e-3,
		                    .grad_norm = 1.5, .tokens_per_s = 1000.0 * step, .ms = 12.5, .at_us = 1000 + step};
		snprintf(m.job_id, sizeof m.job_id, "j-high2");
		m.has_val_loss = step == 4;
		m.val_loss = 3.25;
		if (step == 5)
			m.grad_norm = NAN;
		CHECK(store_metric_insert(st, &m) == 0, "metric %d", step);
	}
	CHECK(store_commit(st) == 0, "commit");
	metric_seen_t ms = {0};
	bool more = true;
	CHECK(store_metric_list(st, "j-high2", 0, 100, see_metric, &ms, &more) == 0 && ms.n == 5 && !more,
	      "all metrics %d", ms.n);
	CHECK(ms.rows[0].step == 1 && ms.rows[0].loss == 4.5 && ms.rows[0].lr == 1e-3 && ms.rows[0].ms == 12.5 &&
	          !ms.rows[0].has_val_loss && ms.rows[0].at_us == 1001,
	      "row 1");
	CHECK(ms.rows[3].has_val_loss && ms.rows[3].val_loss == 3.25, "val_loss of step 4");
	CHECK(isnan(ms.rows[4].grad_norm), "a NaN is stored as NULL and read back as NaN");
	ms.n = 0;
	CHECK(store_metric_list(st, "j-high2", 2, 2, see_metric, &ms, &more) == 0 && ms.n == 2 && more &&
	          ms.rows[0].step == 2 && ms.rows[1].step == 3,
	      "since_step 2, limit 2: %d rows, more %d", ms.n, more);
	ms.n = 0;
	CHECK(store_metric_list(st, "j-high2", 99, 10, see_metric, &ms, &more) == 0 && ms.n == 0 && !more,
	      "past the end");
	CHECK(store_metric_list(st, "j-nope", 0, 10, see_metric, &ms, &more) == -ENOENT, "unknown job");
	ms.n = 0;
	CHECK(store_metric_latest_running(st, see_metric, &ms) == 0 && ms.n == 1 && ms.rows[0].step == 5 &&
	          strcmp(ms.rows[0].job_id, "j-high2") == 0 && ms.rows[0].tokens_per_s == 5000.0,
	      "latest of running jobs: %d", ms.n);
	store_close(st);

	/* a reader sees it all */
	char err[512] = "";
	store_t *rd = store_open(path, STORE_OPEN_READER, err, sizeof err);
	CHECK(rd != NULL, "reader: %s", err);
	if (rd) {
		ms.n = 0;
		CHECK(store_metric_list(rd, "j-high2", 0, 100, see_metric, &ms, &more) == 0 && ms.n == 5, "reader metrics");
		ws.n = 0;
		CHECK(store_worker_list(rd, see_worker, &ws) == 0 && ws.n == 2, "reader workers");
		store_close(rd);
	}
}

typedef struct {
	int n;
	int64_t steps[8];
	char paths[8][64];
} ckpt_seen_t;

static int see_ckpt(const store_checkpoint_t *c, void *userdata)
{
	ckpt_seen_t *s = userdata;
	if (s->n < 8) {
		s->steps[s->n] = c->step;
		snprintf(s->paths[s->n], sizeof s->paths[0], "%s@%d/%d:%lld", c->path, c->attempt, c->world_size,
		         (long long)c->bytes);
	}
	s->n++;
	return 0;
}

static int see_mem(const store_rank_t *r, void *userdata)
{
	char *out = userdata;
	size_t len = strlen(out);
	if (r->has_memory)
		snprintf(out + len, 512 - len, "%s/%d/%d:%lld,%lld,%lld,%lld ", r->job_id, r->attempt, r->rank,
		         (long long)r->memory.params_bytes, (long long)r->memory.grads_bytes,
		         (long long)r->memory.optim_bytes, (long long)r->memory.activations_bytes);
	else
		snprintf(out + len, 512 - len, "%s/%d/%d:- ", r->job_id, r->attempt, r->rank);
	return 0;
}

static void test_memory_and_checkpoints(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "ckpt.db");
	store_t *st = open_writer(path);
	if (!st)
		return;
	CHECK(store_begin(st) == 0, "begin");
	CHECK(insert_job(st, "j-ck", "ck", 0) == 0 && insert_job(st, "j-other", "o", 0) == 0, "jobs");
	CHECK(store_job_set_attempt(st, "j-ck", 1, 500) == 0, "attempt");
	for (int r = 0; r < 2; r++) {
		store_rank_t rk = {.attempt = 1, .rank = r, .node = "n1", .device_kind = "cpu", .device_index = r};
		snprintf(rk.job_id, sizeof rk.job_id, "j-ck");
		CHECK(store_rank_insert(st, &rk, 500) == 0, "rank %d", r);
	}
	CHECK(store_job_set_state(st, "j-ck", STORE_JOB_RUNNING, "joined", 600) == 0, "running");
	store_rank_memory_t m = {.params_bytes = 10, .grads_bytes = 20, .optim_bytes = 40, .activations_bytes = 5};
	CHECK(store_rank_set_memory(st, "j-ck", 1, 1, &m) == 0, "memory of rank 1");
	CHECK(store_rank_set_memory(st, "j-ck", 1, 9, &m) == -ENOENT, "memory of a rank that does not exist");
	store_rank_memory_t neg = m;
	neg.optim_bytes = -1;
	CHECK(store_rank_set_memory(st, "j-ck", 1, 0, &neg) == -EINVAL, "negative memory");
	CHECK(store_commit(st) == 0, "commit");
	char text[512] = "";
	CHECK(store_rank_list_attempt(st, "j-ck", 1, see_mem, text) == 0 &&
	          strcmp(text, "j-ck/1/0:- j-ck/1/1:10,20,40,5 ") == 0,
	      "attempt ranks: %s", text);
	text[0] = '\0';
	CHECK(store_rank_list_attempt(st, "j-ck", 2, see_mem, text) == 0 && text[0] == '\0', "no such attempt");
	CHECK(store_rank_list_memory_running(st, see_mem, text) == 0 && strcmp(text, "j-ck/1/1:10,20,40,5 ") == 0,
	      "running ranks with memory: %s", text);

	/* checkpoints: none, then commits, a re-commit, deletes */
	int64_t step = -1;
	char *cpath = NULL;
	CHECK(store_checkpoint_latest(st, "j-ck", &step, &cpath) == -ENOENT && step == -1 && !cpath, "none yet");
	ckpt_seen_t cs = {0};
	CHECK(store_checkpoint_list(st, "j-ck", see_ckpt, &cs) == 0 && cs.n == 0, "empty list");
	CHECK(store_checkpoint_list(st, "j-nope", see_ckpt, &cs) == -ENOENT, "list of an unknown job");
	CHECK(store_begin(st) == 0, "begin");
	for (int64_t s2 = 10; s2 <= 30; s2 += 10) {
		char p[64];
		snprintf(p, sizeof p, "/ck/step-%08lld", (long long)s2);
		store_checkpoint_t c = {.step = s2, .attempt = 1, .world_size = 2, .bytes = 100 * s2, .path = p,
		                        .committed_at_us = 1000 + s2};
		snprintf(c.job_id, sizeof c.job_id, "j-ck");
		CHECK(store_checkpoint_commit(st, &c) == 0, "commit step %lld", (long long)s2);
	}
	store_checkpoint_t bad = {.step = 5, .attempt = 1, .world_size = 0, .bytes = 1, .path = "/x"};
	snprintf(bad.job_id, sizeof bad.job_id, "j-ck");
	CHECK(store_checkpoint_commit(st, &bad) == -EINVAL, "world size 0");
	snprintf(bad.job_id, sizeof bad.job_id, "j-nope");
	bad.world_size = 1;
	CHECK(store_checkpoint_commit(st, &bad) < 0, "checkpoint of an unknown job");
	CHECK(store_checkpoint_delete(st, "j-ck", 30, 2000) == 0, "delete 30");
	CHECK(store_checkpoint_delete(st, "j-ck", 30, 2001) == -ENOENT, "delete 30 twice");
	CHECK(store_checkpoint_delete(st, "j-ck", 99, 2001) == -ENOENT, "delete a step never committed");
	CHECK(store_commit(st) == 0, "commit");
	cs.n = 0;
	CHECK(store_checkpoint_list(st, "j-ck", see_ckpt, &cs) == 0 && cs.n == 2 && cs.steps[0] == 20 &&
	          cs.steps[1] == 10 && strcmp(cs.paths[0], "/ck/step-00000020@1/2:2000") == 0,
	      "list: %d rows, %lld %lld %s", cs.n, (long long)cs.steps[0], (long long)cs.steps[1], cs.paths[0]);
	CHECK(store_checkpoint_latest(st, "j-ck", &step, &cpath) == 0 && step == 20 && cpath &&
	          strcmp(cpath, "/ck/step-00000020") == 0,
	      "latest %lld %s", (long long)step, cpath ? cpath : "(null)");
	free(cpath);
	cpath = NULL;
	CHECK(store_checkpoint_latest(st, "j-other", &step, &cpath) == -ENOENT, "another job has none");
	/* a later attempt commits step 30 again: it is back, and its own */
	CHECK(store_begin(st) == 0, "begin");
	store_checkpoint_t again = {.step = 30, .attempt = 2, .world_size = 4, .bytes = 7, .path = "/ck/again",
	                            .committed_at_us = 3000};
	snprintf(again.job_id, sizeof again.job_id, "j-ck");
	CHECK(store_checkpoint_commit(st, &again) == 0, "re-commit 30");
	CHECK(store_commit(st) == 0, "commit");
	cs.n = 0;
	CHECK(store_checkpoint_list(st, "j-ck", see_ckpt, &cs) == 0 && cs.n == 3 && cs.steps[0] == 30 &&
	          strcmp(cs.paths[0], "/ck/again@2/4:7") == 0,
	      "after re-commit: %d rows, %s", cs.n, cs.paths[0]);
	CHECK(store_checkpoint_latest(st, "j-ck", &step, &cpath) == 0 && step == 30 && strcmp(cpath, "/ck/again") == 0,
	      "latest after re-commit");
	free(cpath);
	store_close(st);
	/* durable: a reader of the reopened file sees them */
	char err[512] = "";
	store_t *rd = store_open(path, STORE_OPEN_READER, err, sizeof err);
	CHECK(rd != NULL, "reader: %s", err);
	if (rd) {
		cs.n = 0;
		CHECK(store_checkpoint_list(rd, "j-ck", see_ckpt, &cs) == 0 && cs.n == 3, "reader list %d", cs.n);
		store_close(rd);
	}
}

typedef struct {
	int n;
	char text[1024];
} trace_seen_t;

static int see_trace(const store_trace_t *t, void *userdata)
{
	trace_seen_t *ts = userdata;
	size_t len = strlen(ts->text);
	snprintf(ts->text + len, sizeof ts->text - len, "%d/%d/%lld:%lld+%g%s ", t->attempt, t->rank,
	         (long long)t->step, (long long)t->start_unix_us, t->dur_us, t->events_json);
	ts->n++;
	return 0;
}

static int stop_trace_walk(const store_trace_t *t, void *userdata)
{
	(*(int *)userdata)++;
	return 42;
}

static store_trace_t trace_row(const char *job, int attempt, int rank, int64_t step, const char *events)
{
	store_trace_t t = {.attempt = attempt, .rank = rank, .step = step, .start_unix_us = 1000 * step + rank,
	                   .dur_us = 12.5, .events_json = events, .received_at_us = 5};
	snprintf(t.job_id, sizeof t.job_id, "%s", job);
	return t;
}

static void test_traces(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "traces.db");
	store_t *st = open_writer(path);
	if (!st)
		return;
	const char *ev = "[{\"name\":\"forward\",\"ts_us\":1.5,\"dur_us\":2}]";
	CHECK(store_begin(st) == 0, "begin");
	CHECK(insert_job(st, "j-tr", "tr", 0) == 0 && insert_job(st, "j-cap", "cap", 0) == 0 &&
	          insert_job(st, "j-none", "none", 0) == 0,
	      "jobs");
	/* inserted out of order: listed by attempt, rank, step */
	int64_t refused = -1;
	store_trace_t rows[] = {trace_row("j-tr", 1, 1, 3, ev), trace_row("j-tr", 1, 0, 3, ev),
	                        trace_row("j-tr", 1, 0, 2, ev), trace_row("j-tr", 2, 0, 3, "[]")};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		CHECK(store_trace_insert(st, &rows[i], 100, 1 << 20, &refused) == 0, "insert %zu", i);
	CHECK(refused == -1, "refused written without a refusal");
	/* the same (job, attempt, rank, step) again: the first is kept */
	store_trace_t dup = trace_row("j-tr", 1, 0, 3, "[]");
	dup.dur_us = 99;
	CHECK(store_trace_insert(st, &dup, 100, 1 << 20, NULL) == -EEXIST, "repeated step");
	store_trace_t t = trace_row("j-nope", 1, 0, 1, ev);
	CHECK(store_trace_insert(st, &t, 100, 1 << 20, NULL) == -ENOENT, "unknown job");
	t = trace_row("j-tr", 1, 0, 0, ev);
	CHECK(store_trace_insert(st, &t, 100, 1 << 20, NULL) == -EINVAL, "step 0");
	t = trace_row("j-tr", -1, 0, 1, ev);
	CHECK(store_trace_insert(st, &t, 100, 1 << 20, NULL) == -EINVAL, "attempt -1");
	t = trace_row("j-tr", 1, 0, 1, ev);
	t.dur_us = NAN;
	CHECK(store_trace_insert(st, &t, 100, 1 << 20, NULL) == -EINVAL, "NaN duration");
	t = trace_row("j-tr", 1, 0, 1, NULL);
	CHECK(store_trace_insert(st, &t, 100, 1 << 20, NULL) == -EINVAL, "no events");

	/* the caps: 2 rows, then (another job) the bytes */
	for (int64_t s2 = 1; s2 <= 2; s2++) {
		t = trace_row("j-cap", 1, 0, s2, ev);
		CHECK(store_trace_insert(st, &t, 2, 1 << 20, &refused) == 0, "cap job step %lld", (long long)s2);
	}
	for (int64_t s2 = 3; s2 <= 5; s2++) {
		t = trace_row("j-cap", 1, 0, s2, ev);
		CHECK(store_trace_insert(st, &t, 2, 1 << 20, &refused) == -ENOSPC && refused == s2 - 2,
		      "step %lld past the row cap: refused %lld", (long long)s2, (long long)refused);
	}
	const int64_t len = (int64_t)strlen(ev);
	t = trace_row("j-none", 1, 0, 1, ev);
	CHECK(store_trace_insert(st, &t, 100, 2 * len, &refused) == 0, "bytes 1");
	t = trace_row("j-none", 1, 0, 2, ev);
	CHECK(store_trace_insert(st, &t, 100, 2 * len, &refused) == 0, "bytes 2: exactly the cap");
	t = trace_row("j-none", 1, 0, 3, "[]");
	CHECK(store_trace_insert(st, &t, 100, 2 * len, &refused) == -ENOSPC && refused == 1, "past the byte cap");
	CHECK(store_commit(st) == 0, "commit");

	store_trace_usage_t u;
	CHECK(store_trace_usage(st, "j-tr", &u) == 0 && u.n_rows == 4 && u.n_refused == 0 &&
	          u.n_bytes == 3 * len + 2,
	      "usage of j-tr: %lld rows %lld bytes %lld refused", (long long)u.n_rows, (long long)u.n_bytes,
	      (long long)u.n_refused);
	CHECK(store_trace_usage(st, "j-cap", &u) == 0 && u.n_rows == 2 && u.n_refused == 3, "usage of j-cap");
	CHECK(store_trace_usage(st, "j-nope", &u) == -ENOENT, "usage of an unknown job");

	trace_seen_t seen = {0};
	CHECK(store_trace_list(st, "j-tr", -1, -1, see_trace, &seen) == 0 && seen.n == 4, "all rows: %d", seen.n);
	char want[1024];
	snprintf(want, sizeof want, "1/0/2:2000+12.5%s 1/0/3:3000+12.5%s 1/1/3:3001+12.5%s 2/0/3:3000+12.5[] ", ev, ev,
	         ev);
	CHECK(strcmp(seen.text, want) == 0, "order and contents:\n  %s\nwant\n  %s", seen.text, want);
	memset(&seen, 0, sizeof seen);
	CHECK(store_trace_list(st, "j-tr", 1, -1, see_trace, &seen) == 0 && seen.n == 3, "attempt 1: %d", seen.n);
	memset(&seen, 0, sizeof seen);
	CHECK(store_trace_list(st, "j-tr", -1, 0, see_trace, &seen) == 0 && seen.n == 3, "rank 0: %d", seen.n);
	memset(&seen, 0, sizeof seen);
	CHECK(store_trace_list(st, "j-tr", 2, 1, see_trace, &seen) == 0 && seen.n == 0, "attempt 2 rank 1: %d",
	      seen.n);
	CHECK(store_trace_list(st, "j-nope", -1, -1, see_trace, &seen) == -ENOENT, "list of an unknown job");
	int calls = 0;
	CHECK(store_trace_list(st, "j-tr", -1, -1, stop_trace_walk, &calls) == 42 && calls == 1, "walk stopped");
	store_close(st);

	/* a reader of the reopened file sees them */
	char err[512] = "";
	store_t *rd = store_open(path, STORE_OPEN_READER, err, sizeof err);
	CHECK(rd != NULL, "reader: %s", err);
	if (rd) {
		memset(&seen, 0, sizeof seen);
		CHECK(store_trace_list(rd, "j-cap", -1, -1, see_trace, &seen) == 0 && seen.n == 2, "reader: %d", seen.n);
		store_close(rd);
	}
}

typedef struct {
	char text[512];
	int n;
} log_seen_t;

static int see_log(const store_log_line_t *l, void *userdata)
{
	log_seen_t *ls = userdata;
	size_t n = strlen(ls->text);
	snprintf(ls->text + n, sizeof ls->text - n, "%d/%d/%d:%s ", l->attempt, l->rank, l->stream, l->text);
	ls->n++;
	return 0;
}

static json_t *log_lines(const char *const *texts, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:s, s:I, s:s}", "stream", i % 2 ? "stderr" : "stdout", "time_us",
		                                   (json_int_t)(1000 + i), "text", texts[i]));
	return a;
}

/* Job logs (schema 006): lines kept in order, malformed ones and the
 * agent's drops counted, filters, tail, since, and the per-job cap deleting
 * the oldest lines. */
static void test_logs(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "logs.db");
	store_t *st = open_writer(path);
	if (!st)
		return;
	CHECK(store_begin(st) == 0, "begin");
	CHECK(insert_job(st, "j-lg", "lg", 0) == 0, "job");
	const char *t1[] = {"a", "b", "c"};
	json_t *lines = log_lines(t1, 3);
	json_array_append_new(lines, json_pack("{s:s, s:i, s:s}", "stream", "stdin", "time_us", 1, "text", "bad"));
	CHECK(store_log_append(st, "j-lg", 1, 0, lines, 2, 5, NULL, NULL) == 0, "append attempt 1");
	json_decref(lines);
	const char *t2[] = {"d", "e", "f", "g"};
	lines = log_lines(t2, 4);
	CHECK(store_log_append(st, "j-lg", 2, 1, lines, 0, 5, NULL, NULL) == 0, "append attempt 2");
	CHECK(store_log_append(st, "j-nope", 1, 0, lines, 0, 5, NULL, NULL) == -ENOENT, "unknown job");
	CHECK(store_log_append(st, "j-lg", -1, 0, lines, 0, 5, NULL, NULL) == -EINVAL, "negative attempt");
	json_decref(lines);
	CHECK(store_commit(st) == 0, "commit");
	int64_t dropped = -1;
	/* 3 + 4 = 7 kept > 5: the 2 oldest went; 1 malformed + 2 reported + 2 deleted */
	CHECK(store_log_dropped(st, "j-lg", &dropped) == 0 && dropped == 5, "dropped %lld", (long long)dropped);
	log_seen_t seen = {0};
	store_log_query_t q = {.attempt = -1, .rank = -1, .since = 0, .tail = 0, .limit = 100};
	CHECK(store_log_list(st, "j-lg", &q, see_log, &seen) == 0 &&
	          strcmp(seen.text, "1/0/0:c 2/1/0:d 2/1/1:e 2/1/0:f 2/1/1:g ") == 0,
	      "all: %s", seen.text);
	memset(&seen, 0, sizeof seen);
	q.attempt = 2;
	q.tail = 2;
	CHECK(store_log_list(st, "j-lg", &q, see_log, &seen) == 0 && strcmp(seen.text, "2/1/0:f 2/1/1:g ") == 0,
	      "attempt 2, tail 2: %s", seen.text);
	memset(&seen, 0, sizeof seen);
	q = (store_log_query_t){.attempt = -1, .rank = 0, .since = 0, .limit = 100};
	CHECK(store_log_list(st, "j-lg", &q, see_log, &seen) == 0 && strcmp(seen.text, "1/0/0:c ") == 0,
	      "rank 0: %s", seen.text);
	memset(&seen, 0, sizeof seen);
	q = (store_log_query_t){.attempt = -1, .rank = -1, .since = 0, .limit = 2};
	CHECK(store_log_list(st, "j-lg", &q, see_log, &seen) == 0 && seen.n == 2, "limit 2: %d", seen.n);
	CHECK(store_log_list(st, "j-nope", &q, see_log, &seen) == -ENOENT, "list of an unknown job");
	CHECK(store_log_dropped(st, "j-nope", &dropped) == -ENOENT, "dropped of an unknown job");
	store_close(st);
}

static int token_names(const store_token_t *t, void *userdata)
{
	char *out = userdata;
	size_t n = strlen(out);
	snprintf(out + n, 256 - n, "%s%s:%s", n ? "," : "", t->name, t->revoked_at_us ? "revoked" : "live");
	return 0;
}

static int actor_fn(const store_event_t *ev, void *userdata)
{
	char *out = userdata;
	size_t n = strlen(out);
	snprintf(out + n, 256 - n, "%s%s/%s", n ? "," : "", ev->type, ev->actor ? ev->actor : "-");
	return 0;
}

/* Tokens (schema 007) and the job's submitted_by / cancelled_by / actor. */
static void test_tokens(void)
{
	char path[512];
	path_in_tmp(path, sizeof path, "tokens.db");
	store_t *st = open_writer(path);
	if (!st)
		return;
	store_token_t t;
	memset(&t, 0, sizeof t);
	snprintf(t.name, sizeof t.name, "alice");
	snprintf(t.role, sizeof t.role, "operator");
	snprintf(t.prefix, sizeof t.prefix, "rmt_abcdefgh");
	memset(t.hash, 0xab, sizeof t.hash);
	t.created_at_us = 1000;
	t.expires_at_us = 5000;
	int64_t n = -1;
	CHECK(store_token_count(st, &n) == 0 && n == 0, "a new database has %lld tokens", (long long)n);
	CHECK(store_begin(st) == 0, "begin");
	CHECK(store_token_insert(st, &t) == 0 && t.id > 0, "insert: %s", store_errmsg(st));
	store_token_t dup = t;
	memset(dup.hash, 0xcd, sizeof dup.hash);
	CHECK(store_token_insert(st, &dup) == -EEXIST, "a second live token named alice");
	CHECK(store_commit(st) == 0, "commit");

	store_token_t got;
	unsigned char other[32];
	memset(other, 0x11, sizeof other);
	CHECK(store_token_by_hash(st, other, &got) == -ENOENT, "an unknown hash found");
	CHECK(store_token_by_hash(st, t.hash, &got) == 0 && got.id == t.id && strcmp(got.name, "alice") == 0 &&
	          strcmp(got.role, "operator") == 0 && got.expires_at_us == 5000 && got.revoked_at_us == 0 &&
	          got.last_used_at_us == 0 && memcmp(got.hash, t.hash, 32) == 0,
	      "token read back differs");
	CHECK(store_begin(st) == 0, "begin");
	CHECK(store_token_touch(st, t.id, 1500) == 0, "touch");
	CHECK(store_token_revoke(st, t.id, 2000) == 0, "revoke");
	CHECK(store_token_revoke(st, t.id, 2001) == -ENOENT, "revoked twice");
	CHECK(store_token_insert(st, &dup) == 0, "the name of a revoked token cannot be given again");
	CHECK(store_token_insert(st, &dup) == -EEXIST, "the same hash twice");
	CHECK(store_commit(st) == 0, "commit");
	CHECK(store_token_get(st, t.id, &got) == 0 && got.revoked_at_us == 2000 && got.last_used_at_us == 1500,
	      "revocation or last use not stored");
	char names[256] = "";
	CHECK(store_token_list(st, token_names, names) == 0 && strcmp(names, "alice:revoked,alice:live") == 0,
	      "list: %s", names);

	/* a job submitted by one token, cancelled by another */
	store_job_t job;
	memset(&job, 0, sizeof job);
	snprintf(job.id, sizeof job.id, "j-tok");
	job.name = (char *)"x";
	job.spec_json = (char *)"{}";
	job.world_size = 1;
	job.created_at_us = 1000;
	job.submitted_by = (char *)"alice";
	CHECK(store_begin(st) == 0 && store_job_insert(st, &job) == 0, "insert job: %s", store_errmsg(st));
	CHECK(store_job_count_queued_by(st, "alice", &n) == 0 && n == 1, "alice's queued jobs: %lld", (long long)n);
	CHECK(store_job_cancel(st, "j-tok", "bob", "cancelled by request", 3000) == 0, "cancel");
	CHECK(store_job_cancel(st, "j-none", "bob", "x", 3000) == -ENOENT, "cancel of no job");
	CHECK(store_commit(st) == 0, "commit");
	CHECK(store_job_count_queued_by(st, "alice", &n) == 0 && n == 0, "alice's queued jobs after the cancel");
	CHECK(store_job_get(st, "j-tok", &job) == 0 && job.state == STORE_JOB_CANCELLED &&
	          strcmp(job.submitted_by, "alice") == 0 && strcmp(job.cancelled_by, "bob") == 0,
	      "submitted_by / cancelled_by not stored");
	store_job_clear(&job);
	char actors[256] = "";
	bool more = false;
	CHECK(store_event_list(st, "j-tok", 0, 10, actor_fn, actors, &more) == 0 &&
	          strcmp(actors, "submitted/alice,state/bob") == 0,
	      "event actors: %s", actors);
	store_close(st);
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test-store-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_states();
	test_migrations();
	test_jobs();
	test_idempotency();
	test_readers_during_writes();
	test_cluster_tables();
	test_memory_and_checkpoints();
	test_traces();
	test_logs();
	test_tokens();
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("store: all checks passed\n");
	return 0;
}
