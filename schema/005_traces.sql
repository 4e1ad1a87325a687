-- 005_traces: per-step phase traces of profiled jobs (issue 7, profiling).
--
-- traces: one row per (job, attempt, rank, step) of a job spec's profile
-- range, from the rank's TRACE message: the step's start on the rank's wall
-- clock (Unix microseconds), its duration, and its phases as the compact JSON
-- array [{"name": ..., "ts_us": ..., "dur_us": ...}] (ts_us from the step's
-- start) that coordinatord/traces.c validated. A repeated TRACE for the same
-- key is ignored (the first is kept). GET /v1/jobs/{id}/trace renders them
-- as a Chrome trace.
-- trace_usage: per job, the rows and bytes of events stored and the TRACEs
-- refused because the job reached the cap (traces.c), so that the cap is
-- checked without counting rows and a misbehaving rank cannot fill the disk.

CREATE TABLE traces (
	job_id         TEXT    NOT NULL REFERENCES jobs (id),
	attempt        INTEGER NOT NULL CHECK (attempt >= 0),
	rank           INTEGER NOT NULL CHECK (rank >= 0),
	step           INTEGER NOT NULL CHECK (step >= 1),
	start_unix_us  INTEGER NOT NULL CHECK (start_unix_us >= 0),
	dur_us         REAL    NOT NULL CHECK (dur_us >= 0),
	events         TEXT    NOT NULL,
	received_at_us INTEGER NOT NULL,
	PRIMARY KEY (job_id, attempt, rank, step)
);

CREATE TABLE trace_usage (
	job_id    TEXT    PRIMARY KEY REFERENCES jobs (id),
	n_rows    INTEGER NOT NULL DEFAULT 0 CHECK (n_rows >= 0),
	n_bytes   INTEGER NOT NULL DEFAULT 0 CHECK (n_bytes >= 0),
	n_refused INTEGER NOT NULL DEFAULT 0 CHECK (n_refused >= 0)
);
