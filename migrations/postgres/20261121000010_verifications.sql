-- Links that verify an account's e-mail address or phone number. Like every
-- credential, a link's token is stored only as its SHA-256 digest; it works
-- once and until it expires.
CREATE TABLE verification_tokens (
    digest TEXT PRIMARY KEY NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    -- 'email' or 'phone'.
    channel TEXT NOT NULL,
    -- The address the link was sent to: a later change of address voids it.
    address TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);
CREATE INDEX verification_tokens_user ON verification_tokens (user_id);
