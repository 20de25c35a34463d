-- OpenID Connect (SPEC §10): the keys that sign ID tokens. The public half is
-- kept as a JWK (RFC 7517); the private half only sealed (AES-256-GCM under a
-- key derived from TALLY_SECRET_KEY, the kid as associated data), so a copy of
-- the database yields no signing key. Rows are never changed: a key's whole
-- life follows from its own times and those of the keys after it.
CREATE TABLE signing_keys (
    kid TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    -- 'RS256', 'ES256' or 'EdDSA'.
    alg TEXT NOT NULL,
    public_jwk TEXT NOT NULL,
    private_sealed TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    -- When it starts signing (created_at + publish-ahead); published from
    -- created_at on.
    signs_from BIGINT NOT NULL,
    -- The algorithm, on the key made on first start for it (NULL on rotated
    -- ones): instances starting together make one, not one each.
    first_of_alg TEXT UNIQUE
);

-- An app's choice of ID token algorithm; an app without a row gets RS256.
CREATE TABLE oidc_clients (
    client_id TEXT COLLATE "C" PRIMARY KEY NOT NULL REFERENCES apps (client_id),
    id_token_alg TEXT NOT NULL
);
