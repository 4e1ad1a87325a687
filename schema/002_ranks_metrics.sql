-- 002_ranks_metrics: the ranks of each attempt (where they run), the metrics
-- rank 0 reports per step, and the workers' registration time.
--
-- ranks: one row per (job, attempt, rank), written when the scheduler places
-- the attempt; `state` follows the rank: placed (SPAWN sent), joined (JOIN
-- received), done (DONE received), exited (its agent reported the process
-- gone), lost (its node was declared dead or its job ended before it exited).
-- metrics: one row per step reported by rank 0 (its loss is the global mean);
-- val_loss is NULL on steps without a validation pass; a value that is not
-- finite is stored as NULL.

CREATE TABLE ranks (
	job_id        TEXT    NOT NULL REFERENCES jobs (id),
	attempt       INTEGER NOT NULL,
	rank          INTEGER NOT NULL CHECK (rank >= 0),
	node          TEXT    NOT NULL,
	device_kind   TEXT    NOT NULL CHECK (device_kind IN ('cpu', 'cuda')),
	device_index  INTEGER NOT NULL,
	state         TEXT    NOT NULL CHECK (state IN ('placed', 'joined', 'done', 'exited', 'lost')),
	exit_code     INTEGER,
	signal        INTEGER,
	updated_at_us INTEGER NOT NULL,
	PRIMARY KEY (job_id, attempt, rank)
);

CREATE INDEX ranks_by_node ON ranks (node);

CREATE TABLE metrics (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	job_id       TEXT    NOT NULL REFERENCES jobs (id),
	attempt      INTEGER NOT NULL,
	rank         INTEGER NOT NULL,
	step         INTEGER NOT NULL,
	loss         REAL,
	lr           REAL,
	grad_norm    REAL,
	tokens_per_s REAL,
	ms           REAL,
	val_loss     REAL,
	at_us        INTEGER NOT NULL
);

CREATE INDEX metrics_by_job_step ON metrics (job_id, step, id);

ALTER TABLE workers ADD COLUMN registered_at_us INTEGER;
