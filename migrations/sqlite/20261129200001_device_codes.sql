-- The device authorization grant (RFC 8628, SPEC §10): a device's request for
-- tokens, from `POST /oauth/device_authorization` to the one poll of the token
-- endpoint that gets them. Both codes are stored only as SHA-256 digests.
CREATE TABLE device_codes (
    -- The device code's digest (led by its issue time, like tokens').
    digest TEXT PRIMARY KEY NOT NULL,
    -- The user code's digest: what the person types at /device.
    user_code_digest TEXT NOT NULL UNIQUE,
    client_id TEXT NOT NULL REFERENCES apps (client_id),
    -- The exact scope set asked for, normalized.
    scopes TEXT NOT NULL,
    -- Seconds the device must wait between polls; a slow_down adds 5.
    interval_secs INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    last_polled_at INTEGER,
    -- 'pending', 'allowed' or 'denied'.
    status TEXT NOT NULL DEFAULT 'pending',
    decided_at INTEGER,
    -- The grant made when the person allowed it.
    grant_id TEXT REFERENCES oauth_grants (id),
    -- When a poll got the tokens: a device code works once.
    used_at INTEGER
);
-- Retention deletes expired codes by this.
CREATE INDEX device_codes_expiry ON device_codes (expires_at);
