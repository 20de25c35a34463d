-- The webhook rows a subscribed pay writes, lighter (decision 019): each
-- b-tree a row goes into is a write on the one writer.
--
-- * webhook_deliveries and webhook_attempts are keyed by text, which a rowid
--   table keeps twice (the table, and the index behind its PRIMARY KEY).
--   WITHOUT ROWID keeps them once.
-- * webhook_deliveries_endpoint goes: a delivery's id starts with its
--   endpoint's id and a slash, so an endpoint's deliveries are a range of
--   the primary key (`id >= endpoint || '/' AND id < endpoint || '0'`).
-- * payment_origins is all primary key: WITHOUT ROWID too.
--
-- A delivery row then goes into two b-trees (itself and, while pending, the
-- due index) instead of four; an origin into one instead of two.

CREATE TABLE webhook_deliveries_rebuilt (
    id TEXT PRIMARY KEY NOT NULL,
    endpoint_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    type TEXT NOT NULL,
    occurred_at INTEGER NOT NULL,
    payment_id TEXT,
    status TEXT,
    date_completed INTEGER,
    target_user_id TEXT,
    refund_payment_id TEXT,
    body TEXT,
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    claim TEXT
) WITHOUT ROWID;
INSERT INTO webhook_deliveries_rebuilt
SELECT id, endpoint_id, event_id, client_id, type, occurred_at, payment_id, status,
    date_completed, target_user_id, refund_payment_id, body, state, attempts,
    next_attempt_at, claim
FROM webhook_deliveries;
DROP TABLE webhook_deliveries;
ALTER TABLE webhook_deliveries_rebuilt RENAME TO webhook_deliveries;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';

CREATE TABLE webhook_attempts_rebuilt (
    delivery_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    endpoint_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    answer INTEGER,
    error TEXT,
    PRIMARY KEY (delivery_id, attempt)
) WITHOUT ROWID;
INSERT INTO webhook_attempts_rebuilt
SELECT delivery_id, attempt, endpoint_id, at, answer, error FROM webhook_attempts;
DROP TABLE webhook_attempts;
ALTER TABLE webhook_attempts_rebuilt RENAME TO webhook_attempts;
CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_id, at);

CREATE TABLE payment_origins_rebuilt (
    payment_id TEXT PRIMARY KEY NOT NULL,
    client_id TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO payment_origins_rebuilt SELECT payment_id, client_id FROM payment_origins;
DROP TABLE payment_origins;
ALTER TABLE payment_origins_rebuilt RENAME TO payment_origins;
