-- 001_init: jobs, their events, idempotency keys for POST /v1/jobs, workers.
--
-- Applied once, in one transaction with every other pending migration, by the
-- store's writer; schema_migrations (created by the store itself) records it.
-- Times are Unix epoch microseconds. Strings are stored exactly as sent.

CREATE TABLE jobs (
	seq           INTEGER PRIMARY KEY AUTOINCREMENT, -- insertion order, the list cursor
	id            TEXT    NOT NULL UNIQUE,
	name          TEXT    NOT NULL,
	state         TEXT    NOT NULL CHECK (state IN ('queued', 'scheduled', 'running',
	                                         'recovering', 'succeeded', 'failed', 'cancelled')),
	priority      INTEGER NOT NULL DEFAULT 0,
	world_size    INTEGER NOT NULL CHECK (world_size >= 1),
	spec_json     TEXT    NOT NULL,
	attempt       INTEGER NOT NULL DEFAULT 0,
	created_at_us INTEGER NOT NULL,
	updated_at_us INTEGER NOT NULL,
	state_reason  TEXT
);

CREATE INDEX jobs_by_state ON jobs (state, seq);

CREATE TABLE events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	job_id     TEXT    NOT NULL REFERENCES jobs (id),
	at_us      INTEGER NOT NULL,
	type       TEXT    NOT NULL,
	from_state TEXT,
	to_state   TEXT,
	reason     TEXT,
	attempt    INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX events_by_job ON events (job_id, id);

CREATE TABLE idempotency_keys (
	key        TEXT    PRIMARY KEY,
	body_hash  BLOB    NOT NULL CHECK (length(body_hash) = 32),
	status     INTEGER NOT NULL,
	body       TEXT    NOT NULL,
	job_id     TEXT,
	created_at_us INTEGER NOT NULL
);

CREATE TABLE workers (
	node              TEXT    PRIMARY KEY,
	state             TEXT    NOT NULL,
	devices_json      TEXT    NOT NULL DEFAULT '[]',
	last_heartbeat_us INTEGER,
	running_ranks     INTEGER NOT NULL DEFAULT 0
);
