-- The authorization server's state. Codes and tokens are stored only as SHA-256
-- digests. A grant is one authorization of an app by a user (or a personal access
-- token); every token issued under it belongs to its family, and revoking the
-- grant revokes them all.

CREATE TABLE oauth_consents (
    user_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    client_id TEXT COLLATE "C" NOT NULL REFERENCES apps (client_id),
    -- The exact scope set, normalized: space-separated in a fixed order.
    scopes TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, client_id, scopes)
);

CREATE TABLE oauth_grants (
    id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    -- NULL for a personal access token.
    client_id TEXT COLLATE "C" REFERENCES apps (client_id),
    scopes TEXT NOT NULL,
    -- 'token' (client-side flow), 'code' (server-side flow) or 'personal'.
    flow TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX oauth_grants_user ON oauth_grants (user_id, client_id);

CREATE TABLE oauth_tokens (
    digest TEXT PRIMARY KEY NOT NULL,
    grant_id TEXT COLLATE "C" NOT NULL REFERENCES oauth_grants (id),
    -- 'access' or 'refresh'.
    kind TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    -- Set when a refresh token has been exchanged for a new pair.
    used_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX oauth_tokens_grant ON oauth_tokens (grant_id);

CREATE TABLE oauth_codes (
    digest TEXT PRIMARY KEY NOT NULL,
    grant_id TEXT COLLATE "C" NOT NULL REFERENCES oauth_grants (id),
    -- The redirect_uri given at authorize, which the exchange must repeat.
    redirect_uri TEXT,
    code_challenge TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);
