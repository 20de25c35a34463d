-- Failed sign-ins, counted per (account, client IP) and per client IP, so every
-- instance of a deployment throttles alike. Rows older than the window are
-- deleted as new ones arrive.
CREATE TABLE signin_failures (
    key TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX signin_failures_key_at ON signin_failures (key, at);
