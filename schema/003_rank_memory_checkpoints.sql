-- 003_rank_memory_checkpoints: what each rank holds in memory, and the
-- committed snapshots (checkpoints) of each job.
--
-- ranks.*_bytes: the bytes a rank reports holding (parameters, gradients,
-- optimizer state, the activation arena; constant over an attempt), from its
-- METRICS; NULL until it has reported them.
-- checkpoints: one row per committed snapshot step of a job, written only
-- after rank 0 reported SNAPSHOT_COMMITTED (the folder step-<NNNNNNNN> is
-- renamed and fsync'ed); shards written but never committed are not here.
-- A later attempt that commits the same step again replaces its row.
-- deleted_at_us is set when retention removed the folder; the row stays.

ALTER TABLE ranks ADD COLUMN params_bytes INTEGER CHECK (params_bytes >= 0);
ALTER TABLE ranks ADD COLUMN grads_bytes INTEGER CHECK (grads_bytes >= 0);
ALTER TABLE ranks ADD COLUMN optim_bytes INTEGER CHECK (optim_bytes >= 0);
ALTER TABLE ranks ADD COLUMN activations_bytes INTEGER CHECK (activations_bytes >= 0);

CREATE TABLE checkpoints (
	job_id          TEXT    NOT NULL REFERENCES jobs (id),
	step            INTEGER NOT NULL CHECK (step >= 0),
	attempt         INTEGER NOT NULL,
	world_size      INTEGER NOT NULL CHECK (world_size >= 1),
	bytes           INTEGER NOT NULL CHECK (bytes >= 0),
	path            TEXT    NOT NULL,
	committed_at_us INTEGER NOT NULL,
	deleted_at_us   INTEGER,
	PRIMARY KEY (job_id, step)
);
