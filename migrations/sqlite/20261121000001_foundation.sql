-- Accounts, friendships, apps, the double-entry ledger and server settings.
-- Times are microseconds since the Unix epoch (UTC); money is integer cents.

CREATE TABLE users (
    id TEXT PRIMARY KEY NOT NULL,
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
    balance_cents INTEGER NOT NULL DEFAULT 0 CHECK (balance_cents >= 0),
    date_joined INTEGER NOT NULL
);
CREATE UNIQUE INDEX users_username_key ON users (lower(username));
CREATE UNIQUE INDEX users_email_key ON users (email);
CREATE UNIQUE INDEX users_phone_key ON users (phone);

CREATE TABLE friendships (
    user_id TEXT NOT NULL REFERENCES users (id),
    friend_id TEXT NOT NULL REFERENCES users (id),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (user_id, friend_id),
    CHECK (user_id <> friend_id)
);

CREATE TABLE apps (
    client_id TEXT PRIMARY KEY NOT NULL,
    secret_digest TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    redirect_url TEXT,
    site_url TEXT,
    owner_id TEXT NOT NULL REFERENCES users (id),
    suspended BOOLEAN NOT NULL DEFAULT FALSE,
    created_at INTEGER NOT NULL
);
CREATE INDEX apps_owner ON apps (owner_id);

-- Every movement of money is two or more entries that sum to zero. Accounts are
-- user ids or system accounts whose names start with '@'.
CREATE TABLE ledger_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    movement_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    account TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    payment_id TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX ledger_entries_account ON ledger_entries (account);
CREATE INDEX ledger_entries_movement ON ledger_entries (movement_id);

CREATE TABLE server_settings (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
