-- 006_logs: the job logs (issue 21): what each rank printed on stdout and
-- stderr, forwarded by its agent in LOGS messages (api/wire.h).
--
-- job_logs: one row per line; seq (the rowid) is the line's id, increasing
-- in the order lines were stored (per rank, the order the rank printed them).
-- stream: 0 stdout, 1 stderr. time_us: the agent's wall clock when it read
-- the line (Unix microseconds). At most STORE_LOG_MAX_LINES lines are kept
-- per job (coordinatord/store_logs.c): past it the oldest are deleted.
-- log_usage: per job, the lines kept and the lines dropped (by the agent's
-- rate cap, as unreadable, or deleted past the cap), so that the cap is
-- checked without counting rows.

CREATE TABLE job_logs (
	seq     INTEGER PRIMARY KEY,
	job_id  TEXT    NOT NULL REFERENCES jobs (id),
	attempt INTEGER NOT NULL CHECK (attempt >= 0),
	rank    INTEGER NOT NULL CHECK (rank >= 0),
	stream  INTEGER NOT NULL CHECK (stream IN (0, 1)),
	time_us INTEGER NOT NULL,
	text    TEXT    NOT NULL
);
CREATE INDEX job_logs_by_job ON job_logs (job_id, seq);

CREATE TABLE log_usage (
	job_id    TEXT    PRIMARY KEY REFERENCES jobs (id),
	n_lines   INTEGER NOT NULL DEFAULT 0 CHECK (n_lines >= 0),
	n_dropped INTEGER NOT NULL DEFAULT 0 CHECK (n_dropped >= 0)
);
