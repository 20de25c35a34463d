-- Consent is remembered per response type too (SPEC §6): a consent given to
-- the code flow never approves a client-side request. Each consent kept is
-- given the response types its user actually used with those exact scopes
-- (their grants' flows); one with no such grant left is dropped and asked again.
CREATE TABLE oauth_consents_by_type (
    user_id TEXT NOT NULL REFERENCES users (id),
    client_id TEXT NOT NULL REFERENCES apps (client_id),
    scopes TEXT NOT NULL,
    -- 'token' or 'code'.
    response_type TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (user_id, client_id, scopes, response_type)
);
INSERT INTO oauth_consents_by_type (user_id, client_id, scopes, response_type, created_at)
SELECT DISTINCT c.user_id, c.client_id, c.scopes, g.flow, c.created_at
FROM oauth_consents c
JOIN oauth_grants g
  ON g.user_id = c.user_id AND g.client_id = c.client_id AND g.scopes = c.scopes
WHERE g.flow IN ('token', 'code');
DROP TABLE oauth_consents;
ALTER TABLE oauth_consents_by_type RENAME TO oauth_consents;

-- A refresh may ask for fewer scopes than were granted (RFC 6749 §6): the
-- access token it issues then carries its own, narrower set. NULL: the grant's.
ALTER TABLE oauth_tokens ADD COLUMN scopes TEXT;
