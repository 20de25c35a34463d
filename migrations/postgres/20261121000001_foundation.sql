-- Accounts, friendships, apps, the double-entry ledger and server settings.
-- Times are microseconds since the Unix epoch (UTC); money is integer cents.
-- Ids compare bytewise (COLLATE "C") so that ordering matches SQLite's.

CREATE TABLE users (
    id TEXT COLLATE "C" PRIMARY KEY,
    username TEXT NOT NULL,
    first_name TEXT NOT NULL DEFAULT '',
    last_name TEXT NOT NULL DEFAULT '',
    about TEXT NOT NULL DEFAULT '',
    profile_picture_url TEXT,
    email TEXT,
    email_verified BOOLEAN NOT NULL DEFAULT FALSE,
    phone TEXT,
    phone_verified BOOLEAN NOT NULL DEFAULT FALSE,
    password_hash TEXT NOT NULL,
    verified BOOLEAN NOT NULL DEFAULT FALSE,
    suspended BOOLEAN NOT NULL DEFAULT FALSE,
    balance_cents BIGINT NOT NULL DEFAULT 0 CHECK (balance_cents >= 0),
    date_joined BIGINT NOT NULL
);
CREATE UNIQUE INDEX users_username_key ON users (lower(username));
CREATE UNIQUE INDEX users_email_key ON users (email);
CREATE UNIQUE INDEX users_phone_key ON users (phone);

CREATE TABLE friendships (
    user_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    friend_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, friend_id),
    CHECK (user_id <> friend_id)
);

CREATE TABLE apps (
    client_id TEXT COLLATE "C" PRIMARY KEY,
    secret_digest TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    redirect_url TEXT,
    site_url TEXT,
    owner_id TEXT COLLATE "C" NOT NULL REFERENCES users (id),
    suspended BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL
);
CREATE INDEX apps_owner ON apps (owner_id);

-- Every movement of money is two or more entries that sum to zero. Accounts are
-- user ids or system accounts whose names start with '@'.
CREATE TABLE ledger_entries (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    movement_id TEXT COLLATE "C" NOT NULL,
    kind TEXT NOT NULL,
    account TEXT COLLATE "C" NOT NULL,
    amount_cents BIGINT NOT NULL,
    payment_id TEXT COLLATE "C",
    created_at BIGINT NOT NULL
);
CREATE INDEX ledger_entries_account ON ledger_entries (account);
CREATE INDEX ledger_entries_movement ON ledger_entries (movement_id);

CREATE TABLE server_settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
