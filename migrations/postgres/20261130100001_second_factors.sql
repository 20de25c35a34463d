-- Second factors (SPEC §11). A user's authenticator app: its TOTP seed,
-- sealed under TALLY_SECRET_KEY (AES-256-GCM, the user id as associated data),
-- so a copy of the database yields no seed.
CREATE TABLE totp_factors (
    user_id TEXT COLLATE "C" PRIMARY KEY NOT NULL REFERENCES users (id),
    secret_sealed TEXT NOT NULL,
    -- NULL while the user is setting it up (not yet a factor).
    confirmed_at BIGINT,
    -- The last 30-second step whose code was accepted: each code works once,
    -- and no code of an earlier step works after it.
    last_step BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
);

-- Recovery codes, as SHA-256 digests only; each works once.
CREATE TABLE recovery_codes (
    digest TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    created_at BIGINT NOT NULL,
    used_at BIGINT
);
CREATE INDEX recovery_codes_user ON recovery_codes (user_id);

-- Passkeys and security keys (WebAuthn): the public credential as the
-- WebAuthn crate keeps it (JSON: public key, sign count, flags).
CREATE TABLE passkeys (
    -- The credential id, base64url.
    credential_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    user_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    name TEXT NOT NULL,
    credential TEXT NOT NULL,
    sign_count BIGINT NOT NULL DEFAULT 0,
    -- Whether it may be synced (backup eligible): amr swk, else hwk.
    backup_eligible BOOLEAN NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT
);
CREATE INDEX passkeys_user ON passkeys (user_id);

-- A WebAuthn ceremony between its options and its answer: the crate's state,
-- kept server-side (the browser holds only a random id, here as a digest).
CREATE TABLE webauthn_ceremonies (
    digest TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    user_id TEXT COLLATE "C",
    -- 'register', 'second_factor' or 'passwordless'.
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX webauthn_ceremonies_expiry ON webauthn_ceremonies (expires_at);

-- Sessions of a user signed in before this time have ended (a password
-- change ends the user's other sessions, SPEC §8).
CREATE TABLE session_cuts (
    user_id TEXT COLLATE "C" PRIMARY KEY NOT NULL REFERENCES users (id),
    cut_at BIGINT NOT NULL
);
