/*
 * store: the coordinator's SQLite database (jobs, events, idempotency keys,
 * workers, ranks of each attempt with their memory, per-step metrics,
 * committed checkpoints, per-step phase traces, schema migrations).
 * store.c opens, migrates and holds the transactions; the queries live by
 * subject in store_jobs.c, store_cluster.c (workers, ranks),
 * store_metrics.c (metrics, traces) and store_checkpoints.c.
 *
 * One store_t wraps one SQLite connection and its prepared statements, and is
 * used by one thread only. The broker loop opens the single writer
 * (STORE_OPEN_WRITER), which applies the embedded migrations (schema/NNN_*.sql,
 * in order, in one transaction, recorded in schema_migrations) and owns every
 * write. Each HTTP thread opens its own reader (STORE_OPEN_READER); WAL mode
 * lets readers run beside the writer. A database whose recorded schema is
 * newer than this binary's is refused, never altered.
 *
 * Writes are grouped by the caller: store_begin(), any number of mutations,
 * store_commit() (durable when it returns: synchronous=FULL), so that requests
 * arriving together share one transaction (group commit).
 *
 * Errors: functions return 0 or a negative errno-style code (-ENOENT: no such
 * row, -EEXIST: duplicate key, -EIO: SQLite error, -ENOMEM, -EPROTO: database
 * schema newer than this binary). store_errmsg() gives the last SQLite message.
 */
#ifndef RINGMASTER_COORDINATORD_STORE_H
#define RINGMASTER_COORDINATORD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct store store_t;

/* Job states, named as in DESIGN.md. */
typedef enum {
	STORE_JOB_QUEUED = 0,
	STORE_JOB_SCHEDULED,
	STORE_JOB_RUNNING,
	STORE_JOB_RECOVERING,
	STORE_JOB_SUCCEEDED,
	STORE_JOB_FAILED,
	STORE_JOB_CANCELLED,
	STORE_JOB_N_STATES
} store_job_state_t;

/* "queued", "scheduled", ...; NULL for an out-of-range value. */
const char *store_job_state_name(store_job_state_t s);
/* Parse a state name; returns 0 and sets *ret_state, or -EINVAL. */
int store_job_state_parse(const char *name, store_job_state_t *ret_state);
/* true for succeeded, failed, cancelled. */
bool store_job_state_is_final(store_job_state_t s);

#define STORE_ID_BYTES 24 /* ids are short ASCII strings, NUL-terminated */

typedef struct {
	char id[STORE_ID_BYTES]; /* "j-" + random base32, unique */
	int64_t seq;             /* insertion order, set by store_job_insert */
	char *name;              /* owned, as sent */
	store_job_state_t state;
	int priority;
	int world_size;
	char *spec_json;         /* owned: the spec with defaults filled in (compact JSON) */
	int attempt;             /* 0 until first started */
	int64_t created_at_us;   /* Unix epoch microseconds */
	int64_t updated_at_us;
	char *state_reason;      /* owned, may be NULL: why it reached its state */
	int restarts;            /* restarts after a failure so far (schema 004) */
	char *submitted_by;      /* owned, may be NULL: the submitting token's name (schema 007) */
	char *cancelled_by;      /* owned, may be NULL: the cancelling token's name (schema 007) */
} store_job_t;

/* Release the strings a store_job_t owns; accepts a zeroed job. */
void store_job_clear(store_job_t *job);

typedef struct {
	int64_t id;            /* increasing */
	char job_id[STORE_ID_BYTES];
	int64_t at_us;
	char *type;            /* owned: "submitted", "state", "cancel_requested", ... */
	char *from_state;      /* owned, NULL when not a transition */
	char *to_state;        /* owned, NULL when not a transition */
	char *reason;          /* owned, may be NULL */
	int attempt;
	char *actor;           /* owned, may be NULL: the token's name that caused it (schema 007) */
} store_event_t;

void store_event_clear(store_event_t *ev);

typedef enum {
	STORE_OPEN_WRITER = 1, /* create if missing, migrate; one per database */
	STORE_OPEN_READER = 2, /* read-only queries; one per reading thread */
} store_open_mode_t;

/*
 * Open the database at `path`. The writer creates the file and its folder's
 * database files if missing, sets WAL + synchronous=FULL + foreign keys and
 * applies pending migrations; a reader requires an up-to-date schema. Returns
 * NULL on failure and, if `errbuf` is given, writes one line naming the path
 * and the cause (for example "database /x.db has schema version 9, newer than
 * this ringmasterd (2): refusing to touch it").
 */
store_t *store_open(const char *path, store_open_mode_t mode, char *errbuf, size_t errlen);

/* Close and free; accepts NULL. Finalizes statements; a writer checkpoints the WAL. */
void store_close(store_t *st);

/* The last SQLite error message of this connection (borrowed). */
const char *store_errmsg(const store_t *st);

/* The schema version this binary knows (highest embedded migration) and the
 * one recorded in the open database. */
int store_schema_version_known(void);
int store_schema_version(store_t *st, int *ret_version);

/* ---- writer only ---- */

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK. store_commit returns once durable. */
int store_begin(store_t *st);
int store_commit(store_t *st);
int store_rollback(store_t *st);

/*
 * Insert a new job (state queued unless job->state says otherwise) and its
 * "submitted" event. job->id, name, spec_json, priority, world_size,
 * created_at_us must be set; job->submitted_by (may be NULL) is stored and
 * is the event's actor; job->seq is written back. -EEXIST on a duplicate id.
 */
int store_job_insert(store_t *st, store_job_t *job);

/*
 * Move a job to `to` and record a "state" event (from, to, reason, attempt).
 * -ENOENT if there is no such job. The caller decides whether the transition
 * is allowed (see store_job_state_is_final).
 */
int store_job_set_state(store_t *st, const char *job_id, store_job_state_t to,
                        const char *reason, int64_t now_us);

/*
 * Cancel a job on behalf of `actor` (a token's name; NULL: nobody named):
 * state cancelled with `reason`, jobs.cancelled_by set, and the "state"
 * event's actor. -ENOENT when there is no such job; the caller checks the
 * job is not final.
 */
int store_job_cancel(store_t *st, const char *job_id, const char *actor, const char *reason, int64_t now_us);

/* The queued jobs submitted by token `name` into *ret_count. */
int store_job_count_queued_by(store_t *st, const char *name, int64_t *ret_count);

/* Append an event of any type (from/to/reason may be NULL). */
int store_event_insert(store_t *st, const char *job_id, const char *type, const char *from_state,
                       const char *to_state, const char *reason, int attempt, int64_t at_us);

/*
 * Idempotency keys for POST /v1/jobs: the stored reply for `key`, with the
 * SHA-256 (32 bytes) of the request body it answered. store_idem_get returns
 * -ENOENT when the key is new; on success *ret_body is malloc'ed (caller frees).
 */
int store_idem_get(store_t *st, const char *key, unsigned char ret_body_hash[32], int *ret_status,
                   char **ret_body, char *ret_job_id /* STORE_ID_BYTES */);
int store_idem_put(store_t *st, const char *key, const unsigned char body_hash[32], int status,
                   const char *body, const char *job_id, int64_t now_us);

/* ---- readers (and the writer) ---- */

/* One job by id: 0 and *ret_job filled (clear with store_job_clear), or -ENOENT. */
int store_job_get(store_t *st, const char *job_id, store_job_t *ret_job);

/*
 * Jobs in insertion order with seq > after_seq, optionally only those in
 * `state` (pass NULL for all), at most `limit`. Calls `fn` for each (the job
 * is borrowed for the call); a non-zero return from fn stops the walk and is
 * returned. *ret_more is set to whether more rows follow the last one given.
 */
typedef int (*store_job_fn)(const store_job_t *job, void *userdata);
int store_job_list(store_t *st, const store_job_state_t *state, int64_t after_seq, int limit,
                   store_job_fn fn, void *userdata, bool *ret_more);

/* Events of a job with id > after_id, oldest first, at most `limit`. -ENOENT if no such job. */
typedef int (*store_event_fn)(const store_event_t *ev, void *userdata);
int store_event_list(store_t *st, const char *job_id, int64_t after_id, int limit,
                     store_event_fn fn, void *userdata, bool *ret_more);

/* Number of jobs in each state; ret_counts has STORE_JOB_N_STATES entries. */
int store_job_count_by_state(store_t *st, int64_t ret_counts[STORE_JOB_N_STATES]);

/* Total number of jobs (for readiness and tests). */
int store_job_count(store_t *st, int64_t *ret_count);

/* ---- workers, ranks, metrics (schema 002) ---- */

typedef struct {
	const char *node;         /* borrowed for the callback */
	const char *state;        /* "alive" or "dead" */
	const char *devices_json; /* [{"kind":"cpu","index":0}, ...] */
	bool has_heartbeat;
	int64_t last_heartbeat_us;
	int64_t registered_at_us; /* 0 when unknown */
	const char *program_json; /* REGISTER's program fields (schema 009); NULL: none */
} store_worker_t;

/* What a rank holds in memory, in bytes (constant over an attempt). */
typedef struct {
	int64_t params_bytes;
	int64_t grads_bytes;
	int64_t optim_bytes;       /* optimizer state (AdamW m and v, or its shard) */
	int64_t activations_bytes; /* the engine's activation arena */
} store_rank_memory_t;

typedef struct {
	char job_id[STORE_ID_BYTES];
	int attempt;
	int rank;
	const char *node;         /* borrowed */
	const char *device_kind;  /* "cpu" or "cuda" */
	int device_index;
	const char *state;        /* placed, joined, done, exited, lost */
	bool has_memory;          /* read back only: the rank has reported its memory */
	store_rank_memory_t memory;
} store_rank_t;

typedef struct {
	char job_id[STORE_ID_BYTES];
	int attempt;
	int rank;
	int64_t step;
	double loss, lr, grad_norm, tokens_per_s, ms; /* not finite: stored as NULL */
	bool has_val_loss;
	double val_loss;
	int64_t at_us;
} store_metric_t;

/* Writer: insert or refresh a worker (state alive, devices, last heartbeat
 * and registration time `now_us`). */
int store_worker_register(store_t *st, const char *node, const char *devices_json, int64_t now_us);
/* Writer: a worker's program fields as its last REGISTER gave them
 * (coordinatord/program.c; NULL: none). -ENOENT for an unknown node. */
int store_worker_set_programs(store_t *st, const char *node, const char *program_json);
/* Writer: set a worker's state ("alive" or "dead"). -ENOENT for an unknown node. */
int store_worker_set_state(store_t *st, const char *node, const char *state);
/* Writer: record a heartbeat time. -ENOENT for an unknown node. */
int store_worker_heartbeat(store_t *st, const char *node, int64_t at_us);

/* Workers in node order; `fn` gets each (borrowed for the call). */
typedef int (*store_worker_fn)(const store_worker_t *w, void *userdata);
int store_worker_list(store_t *st, store_worker_fn fn, void *userdata);
/* Writer: delete the dead workers last heard of (heartbeat, else
 * registration) before `before_us`; *ret_n (may be NULL) the rows deleted.
 * Without it every agent that ever registered keeps a row (issue 22). */
int store_worker_prune_dead(store_t *st, int64_t before_us, int *ret_n);
/* Number of workers alive and dead. */
int store_worker_count_by_state(store_t *st, int64_t *ret_alive, int64_t *ret_dead);

/* Writer: set a job's attempt number (the placement of a new attempt). */
int store_job_set_attempt(store_t *st, const char *job_id, int attempt, int64_t now_us);
/* Queued jobs in scheduling order: priority (higher first), then submission. */
int store_job_list_queued(store_t *st, store_job_fn fn, void *userdata);

/* Writer: one rank of a placed attempt (state "placed" unless r->state says). */
int store_rank_insert(store_t *st, const store_rank_t *r, int64_t now_us);
/* Writer: a rank's new state; exit_code/signal are stored when `has_exit`. */
int store_rank_set_state(store_t *st, const char *job_id, int attempt, int rank, const char *state,
                         bool has_exit, int exit_code, int signal, int64_t now_us);
/* Writer: every rank of the attempt still placed or joined becomes "lost". */
int store_rank_lose_attempt(store_t *st, const char *job_id, int attempt, int64_t now_us);
/* Ranks of the current attempt of every scheduled, running or recovering
 * job, ordered by node, job, rank; `fn` gets each (borrowed). */
typedef int (*store_rank_fn)(const store_rank_t *r, void *userdata);
int store_rank_list_active(store_t *st, store_rank_fn fn, void *userdata);

/* ---- rank memory and checkpoints (schema 003) ---- */

/* Writer: record what rank `rank` of (job, attempt) holds in memory (every
 * figure >= 0, else -EINVAL). -ENOENT when there is no such rank row. */
int store_rank_set_memory(store_t *st, const char *job_id, int attempt, int rank,
                          const store_rank_memory_t *m);
/* Ranks of one attempt of a job, by rank, with their memory when reported;
 * `fn` gets each (borrowed for the call). No rows (an attempt never placed)
 * is not an error: fn is simply not called. */
int store_rank_list_attempt(store_t *st, const char *job_id, int attempt, store_rank_fn fn,
                            void *userdata);
/* Ranks that have reported their memory, of the current attempt of every
 * running job, by job (submission order) then rank. */
int store_rank_list_memory_running(store_t *st, store_rank_fn fn, void *userdata);

/* One committed snapshot of a job. */
typedef struct {
	char job_id[STORE_ID_BYTES];
	int64_t step;
	int attempt;             /* the attempt that committed it */
	int world_size;          /* ranks (shard files) it was written by */
	int64_t bytes;           /* all its files together */
	const char *path;        /* the committed folder; borrowed */
	int64_t committed_at_us;
} store_checkpoint_t;

/*
 * Writer: record checkpoint c->step of c->job_id as committed (call only
 * once rank 0 has reported the folder renamed and fsync'ed). A row for the
 * same (job, step) is replaced, and no longer deleted: a later attempt that
 * commits a step again owns it. -EINVAL for a negative step or bytes, a
 * world size < 1 or a NULL path; -EEXIST (a constraint) for an unknown job.
 */
int store_checkpoint_commit(store_t *st, const store_checkpoint_t *c);
/* Writer: mark checkpoint `step` of a job deleted (retention removed its
 * folder) at `now_us`. -ENOENT when there is no such row not yet deleted. */
int store_checkpoint_delete(store_t *st, const char *job_id, int64_t step, int64_t now_us);
/* Committed, not deleted checkpoints of a job, newest (highest step) first;
 * `fn` gets each (borrowed for the call; a non-zero return stops the walk
 * and is returned). -ENOENT: no such job. */
typedef int (*store_checkpoint_fn)(const store_checkpoint_t *c, void *userdata);
int store_checkpoint_list(store_t *st, const char *job_id, store_checkpoint_fn fn, void *userdata);
/*
 * The latest committed, not deleted checkpoint of a job (the one a restart
 * resumes from): 0 with *ret_step and *ret_path (malloc'ed, the caller
 * frees), written only on success; -ENOENT when the job has none (or does
 * not exist); -ENOMEM; -EIO.
 */
int store_checkpoint_latest(store_t *st, const char *job_id, int64_t *ret_step, char **ret_path);
/*
 * Checkpoint `step` of a job if it is committed and not deleted (a job
 * spec's resume_from): 0 with *ret_path (malloc'ed, the caller frees),
 * written only on success; -ENOENT when there is no such checkpoint (or no
 * such job); -ENOMEM; -EIO.
 */
int store_checkpoint_get(store_t *st, const char *job_id, int64_t step, char **ret_path);

/* ---- restarts (schema 004) ---- */

/* Writer: record that a job has been restarted `restarts` times (>= 0, else
 * -EINVAL). -ENOENT for an unknown job. */
int store_job_set_restarts(store_t *st, const char *job_id, int restarts, int64_t now_us);
/* The restarts of every scheduled, running or recovering job, in submission
 * order; `fn` gets each job id (borrowed for the call). */
typedef int (*store_restarts_fn)(const char *job_id, int restarts, void *userdata);
int store_job_list_restarts(store_t *st, store_restarts_fn fn, void *userdata);

/* ---- traces (schema 005) ---- */

/* One profiled step of one rank (coordinatord/traces.c validates it). */
typedef struct {
	char job_id[STORE_ID_BYTES];
	int attempt;
	int rank;
	int64_t step;
	int64_t start_unix_us;   /* the step's start on the rank's wall clock */
	double dur_us;           /* the step's duration */
	const char *events_json; /* borrowed: [{"name":..., "ts_us":..., "dur_us":...}] */
	int64_t received_at_us;
} store_trace_t;

/* What a job's traces hold, and how many TRACEs were refused at the cap. */
typedef struct {
	int64_t n_rows;
	int64_t n_bytes; /* of events_json, all rows together */
	int64_t n_refused;
} store_trace_usage_t;

/*
 * Writer: store one step's trace. Refused with -ENOSPC, nothing stored,
 * when the job's traces already hold max_rows rows or adding this one would
 * pass max_bytes bytes of events; the job's refusal count goes up by one and
 * is written to *ret_n_refused (may be NULL). -EEXIST when the (job,
 * attempt, rank, step) row exists (the first one is kept, nothing changes);
 * -ENOENT for an unknown job (a foreign key); -EINVAL for a negative
 * attempt, rank, start or duration, a step < 1 or a NULL events_json.
 * Several statements: call it inside store_begin / store_commit.
 */
int store_trace_insert(store_t *st, const store_trace_t *t, int64_t max_rows, int64_t max_bytes,
                       int64_t *ret_n_refused);

/* A job's trace usage (all zero when it has none). -ENOENT: no such job. */
int store_trace_usage(store_t *st, const char *job_id, store_trace_usage_t *ret_usage);

/* The trace rows of a job, of one attempt (attempt >= 0) or all, of one
 * rank (rank >= 0) or all, ordered by attempt, rank and step; `fn` gets each
 * (borrowed for the call; a non-zero return stops the walk and is
 * returned). -ENOENT: no such job (a job without rows is not an error). */
typedef int (*store_trace_fn)(const store_trace_t *t, void *userdata);
int store_trace_list(store_t *st, const char *job_id, int attempt, int rank, store_trace_fn fn,
                     void *userdata);

/* Writer: one metrics row. */
int store_metric_insert(store_t *st, const store_metric_t *m);

/* The highest step of the metrics rows of one attempt of a job (0: none)
 * into *ret_step. 0 or a negative errno. */
int store_metric_last_step(store_t *st, const char *job_id, int attempt, int64_t *ret_step);
/* Metrics rows of a job with step >= since_step, by step then arrival, at
 * most `limit`; *ret_more tells whether more follow. -ENOENT: no such job.
 * Fields stored as NULL come back as NAN (val_loss: has_val_loss false). */
typedef int (*store_metric_fn)(const store_metric_t *m, void *userdata);
int store_metric_list(store_t *st, const char *job_id, int64_t since_step, int limit,
                      store_metric_fn fn, void *userdata, bool *ret_more);
/* Metrics rows of a job with step >= since_step, downsampled to at most
 * max_points (>= 2) rows evenly spread over the rows in step order: the
 * first and the last row always, and between them one row per bucket, a row
 * with a validation loss preferred to one without. All rows when there are
 * no more than max_points. -ENOENT: no such job; -EINVAL: max_points < 2. */
int store_metric_list_sampled(store_t *st, const char *job_id, int64_t since_step, int max_points,
                              store_metric_fn fn, void *userdata);
/* The latest metrics row (highest step) of every running job. */
int store_metric_latest_running(store_t *st, store_metric_fn fn, void *userdata);

/* ---- job logs (schema 006; store_logs.c) ---- */

#define STORE_LOG_MAX_LINES 100000   /* kept per job; past it the oldest go */
#define STORE_LOG_TEXT_MAX_BYTES 4096

/* One stored log line; text is borrowed for a list callback. */
typedef struct {
	int64_t seq;      /* its id: increasing in storage order */
	int attempt;
	int rank;
	int stream;       /* 0 stdout, 1 stderr */
	int64_t time_us;  /* the agent's wall clock when read, Unix microseconds */
	const char *text;
} store_log_line_t;

typedef int (*store_log_fn)(const store_log_line_t *line, void *userdata);

/*
 * Writer: store the lines of one LOGS message (api/wire.h) of rank `rank` of
 * `attempt` of a job, in order. A line that is not {stream: "stdout" |
 * "stderr", time_us: integer >= 0, text: string of at most
 * STORE_LOG_TEXT_MAX_BYTES} is not stored and counts as dropped, as do the
 * `dropped` the agent reports. Past `max_lines` lines kept for the job the
 * oldest are deleted (and counted as dropped). `fn` (may be NULL) gets each
 * line stored, with its seq. Several statements: call it inside
 * store_begin / store_commit. -ENOENT: no such job; -EINVAL: a negative
 * attempt or rank, or lines not an array.
 */
int store_log_append(store_t *st, const char *job_id, int attempt, int rank, const json_t *lines,
                     int64_t dropped, int64_t max_lines, store_log_fn fn, void *userdata);

/* What GET /v1/jobs/{id}/logs asks: -1 for all attempts / ranks; lines with
 * seq > since; tail > 0: only the last `tail` of those; at most `limit`
 * (from the oldest, when tail is 0). */
typedef struct {
	int attempt;
	int rank;
	int64_t since;
	int tail;
	int limit;
} store_log_query_t;

/* The lines matching `q`, oldest first, to `fn` (a non-zero return stops the
 * walk and is returned). -ENOENT: no such job. */
int store_log_list(store_t *st, const char *job_id, const store_log_query_t *q, store_log_fn fn,
                   void *userdata);

/* The lines dropped for a job so far (0 when none). -ENOENT: no such job. */
int store_log_dropped(store_t *st, const char *job_id, int64_t *ret_dropped);

/* ---- API tokens (schema 007; store_tokens.c) ---- */

#define STORE_TOKEN_NAME_MAX 64
#define STORE_TOKEN_PREFIX_MAX 15

/* One token's row; never its secret (only a hash is stored). */
typedef struct {
	int64_t id;
	char name[STORE_TOKEN_NAME_MAX + 1];
	char role[16];                          /* "viewer", "operator", "admin" */
	char prefix[STORE_TOKEN_PREFIX_MAX + 1]; /* the token's first characters, for listings */
	unsigned char hash[32];
	int64_t created_at_us;
	int64_t expires_at_us;   /* 0: never */
	int64_t last_used_at_us; /* 0: never used */
	int64_t revoked_at_us;   /* 0: not revoked */
} store_token_t;

/*
 * Writer: insert a token (t->id and the times as given; expires_at_us 0 is
 * never). t->id is written back. -EEXIST when an unrevoked token has the
 * name (or the hash exists); -EINVAL for an empty name or role.
 */
int store_token_insert(store_t *st, store_token_t *t);
/* Writer: revoke token `id` at `now_us`. -ENOENT when there is no such
 * token not yet revoked. */
int store_token_revoke(store_t *st, int64_t id, int64_t now_us);
/* Writer: record that token `id` was used at `now_us` (no row: no error). */
int store_token_touch(store_t *st, int64_t id, int64_t now_us);
/* The token whose hash is `hash` (revoked or not): 0 and *ret, or -ENOENT. */
int store_token_by_hash(store_t *st, const unsigned char hash[32], store_token_t *ret);
/* Token `id`: 0 and *ret, or -ENOENT. */
int store_token_get(store_t *st, int64_t id, store_token_t *ret);
/* Every token, revoked ones included, by id; `fn` gets each (borrowed for
 * the call; a non-zero return stops the walk and is returned). */
typedef int (*store_token_fn)(const store_token_t *t, void *userdata);
int store_token_list(store_t *st, store_token_fn fn, void *userdata);
/* How many tokens there are (revoked ones included). */
int store_token_count(store_t *st, int64_t *ret_count);

/* ---- the change feed (store_feed.c; writer, after a commit) ---- */

/* The highest event id, metrics row id and log seq stored (0: none). */
int store_feed_max_ids(store_t *st, int64_t *ret_event, int64_t *ret_metric, int64_t *ret_log);

/* Every event row with id > after_id, by id, to `fn` (a non-zero return stops). */
int store_feed_events(store_t *st, int64_t after_id, store_event_fn fn, void *userdata);

/* Every metrics row with id > after_id, by id. */
typedef int (*store_feed_metric_fn)(int64_t id, const store_metric_t *m, void *userdata);
int store_feed_metrics(store_t *st, int64_t after_id, store_feed_metric_fn fn, void *userdata);

/* Every log line with seq > after_seq, by seq. */
typedef int (*store_feed_log_fn)(const char *job_id, const store_log_line_t *l, void *userdata);
int store_feed_logs(store_t *st, int64_t after_seq, store_feed_log_fn fn, void *userdata);

#endif
