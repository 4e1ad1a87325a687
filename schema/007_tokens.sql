-- 007_tokens: API tokens (issue 22) and who did what to a job.
--
-- tokens: one row per API token. Only a hash of the token is stored
-- (crypto_generichash, 32 bytes, of the whole "rmt_..." string); prefix is
-- its first 12 characters, shown in listings so that a user can tell tokens
-- apart without the secret. role: viewer < operator < admin. expires_at_us:
-- NULL for a token that never expires. A revoked token keeps its row
-- (revoked_at_us set) so that jobs naming it stay explained; a name is unique
-- among the unrevoked tokens only, so a revoked name can be given again.
-- last_used_at_us is written at most once a minute per token
-- (coordinatord/auth.c).
--
-- jobs.submitted_by / jobs.cancelled_by and events.actor: the name of the
-- token that submitted or cancelled the job, or caused the event; NULL for
-- the coordinator's own doings and for rows from before this migration.

CREATE TABLE tokens (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	name            TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
	role            TEXT    NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
	hash            BLOB    NOT NULL UNIQUE CHECK (length(hash) = 32),
	prefix          TEXT    NOT NULL,
	created_at_us   INTEGER NOT NULL,
	expires_at_us   INTEGER,
	last_used_at_us INTEGER,
	revoked_at_us   INTEGER
);
CREATE UNIQUE INDEX tokens_live_name ON tokens (name) WHERE revoked_at_us IS NULL;

ALTER TABLE jobs ADD COLUMN submitted_by TEXT;
ALTER TABLE jobs ADD COLUMN cancelled_by TEXT;
CREATE INDEX jobs_queued_by ON jobs (submitted_by, state);
ALTER TABLE events ADD COLUMN actor TEXT;
