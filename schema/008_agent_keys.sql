-- 008_agent_keys: the worker channel's keys (issue 22, part C).
--
-- agent_keys: the CurveZMQ public keys admitted on the broker, one row per
-- key (coordinatord/store_keys.c). public_key is the key's Z85 text (40
-- characters). node is the agent name the key speaks for: set at enrollment
-- or at the key's first REGISTER, then fixed (another key claiming the same
-- node is refused). A revoked key (revoked_at_us set) is refused at the next
-- handshake. join_tokens: the one-time tokens `ringctl worker enroll`
-- prints; only a hash of the token (crypto_generichash, 32 bytes) is kept.
CREATE TABLE agent_keys (
	id              INTEGER PRIMARY KEY,
	name            TEXT    NOT NULL,
	public_key      TEXT    NOT NULL UNIQUE CHECK (length(public_key) = 40),
	node            TEXT,
	checkpoint_root TEXT,
	created_at_us   INTEGER NOT NULL,
	last_used_at_us INTEGER,
	revoked_at_us   INTEGER
);
CREATE INDEX agent_keys_by_node ON agent_keys (node);

CREATE TABLE join_tokens (
	id            INTEGER PRIMARY KEY,
	hash          BLOB    NOT NULL UNIQUE,
	uses_left     INTEGER NOT NULL CHECK (uses_left >= 0),
	expires_at_us INTEGER NOT NULL,
	created_at_us INTEGER NOT NULL
);
