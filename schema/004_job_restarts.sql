-- 004_job_restarts: how many times each job's rank group was restarted after
-- a failure (issue 6, recovery). restarts counts the restarts decided so far
-- (the job went `recovering`), compared with the spec's restart.max_restarts;
-- attempt keeps counting placements.

ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0 CHECK (restarts >= 0);
