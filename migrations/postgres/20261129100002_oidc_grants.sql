-- An OpenID Connect authentication (SPEC §10): what the ID tokens of a grant
-- whose scope holds `openid` say about the sign-in behind it. Written with the
-- grant, never changed.
CREATE TABLE oidc_grants (
    grant_id TEXT COLLATE "C" PRIMARY KEY NOT NULL REFERENCES oauth_grants (id),
    -- When the user signed in (microseconds): `auth_time`, also on refreshes.
    auth_time BIGINT NOT NULL,
    -- The browser session's `sid`.
    sid TEXT NOT NULL,
    nonce TEXT,
    -- The `acr` given, when one was asked for.
    acr TEXT,
    -- RFC 8176 methods, space-separated (e.g. 'pwd').
    amr TEXT NOT NULL
);
