-- Browser sessions live in an encrypted, signed cookie. Signing out records the
-- session's random id here until the cookie would have expired anyway, so a
-- copy of the cookie stops working at once, on every instance.
CREATE TABLE ended_sessions (
    session_id TEXT PRIMARY KEY NOT NULL,
    expires_at BIGINT NOT NULL
);
