-- A secret shown once (a new client secret, a personal access token) waits
-- here for its single showing, sealed with a key that only the session cookie
-- holds: a copy of the database yields no credential, and the showing deletes
-- the row, so a replayed copy of the cookie shows nothing. Unshown rows are
-- purged after a few minutes.
CREATE TABLE secret_reveals (
    id TEXT PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id),
    -- AES-256-GCM nonce and ciphertext, hex.
    sealed TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- When verification links were sent to an address, whoever asked, so every
-- instance limits them alike (one a minute, ten a day). Rows older than a day
-- are purged.
CREATE TABLE verification_sends (
    address TEXT NOT NULL,
    sent_at BIGINT NOT NULL
);
CREATE INDEX verification_sends_address_at ON verification_sends (address, sent_at);
CREATE INDEX verification_sends_at ON verification_sends (sent_at);

-- The retention worker deletes by age (README, "Retention"): these indexes let
-- it find the old rows without reading whole tables.
CREATE INDEX oauth_codes_expires_at ON oauth_codes (expires_at);
CREATE INDEX oauth_codes_used_at ON oauth_codes (used_at) WHERE used_at IS NOT NULL;
CREATE INDEX oauth_tokens_expires_at ON oauth_tokens (expires_at);
CREATE INDEX oauth_tokens_revoked_at ON oauth_tokens (revoked_at) WHERE revoked_at IS NOT NULL;
CREATE INDEX signin_failures_at ON signin_failures (at);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
CREATE INDEX ended_sessions_expires_at ON ended_sessions (expires_at);
CREATE INDEX verification_tokens_expires_at ON verification_tokens (expires_at);
CREATE INDEX secret_reveals_created_at ON secret_reveals (created_at);
