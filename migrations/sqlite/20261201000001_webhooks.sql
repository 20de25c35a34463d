-- Webhooks (SPEC §12). An app's endpoints (at most 5, enforced by the
-- code that adds them), each with its signing secret sealed under
-- TALLY_SECRET_KEY (AES-256-GCM, the endpoint id as associated data), so a
-- copy of the database yields no secret; after a rotation the previous one
-- keeps signing beside it until `previous_until`.
CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY NOT NULL,
    client_id TEXT NOT NULL REFERENCES apps (client_id),
    url TEXT NOT NULL,
    -- The events it wants: '*' for every one, else ',a,b,' (commas around
    -- each name, so one LIKE finds a name).
    events TEXT NOT NULL,
    secret_sealed TEXT NOT NULL,
    previous_secret_sealed TEXT,
    previous_until INTEGER,
    created_at INTEGER NOT NULL,
    -- The first failure since the last success; NULL while it succeeds.
    failing_since INTEGER,
    -- Set when it has failed for 5 days without a success: nothing is sent.
    disabled_at INTEGER
);
CREATE INDEX webhook_endpoints_client ON webhook_endpoints (client_id);

-- The apps a payment was made through (with one of their tokens), written
-- with the payment only when the app has an endpoint, so that the payment's
-- later events reach it too.
CREATE TABLE payment_origins (
    payment_id TEXT PRIMARY KEY NOT NULL,
    client_id TEXT NOT NULL
);

-- The outbox: one row per event and endpoint, written in the transaction of
-- the change it reports. A payment event keeps the payment's state at the
-- change (status, completion, target account, refund); its body is rendered
-- from it at the first attempt and kept, so every retry sends the same bytes.
CREATE TABLE webhook_deliveries (
    -- endpoint_id || '/' || event_id
    id TEXT PRIMARY KEY NOT NULL,
    endpoint_id TEXT NOT NULL,
    -- The webhook-id: the same on every retry and for every endpoint.
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
    -- 'pending', 'delivered' or 'failed'.
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    -- When it is due; while claimed, when the claim lapses.
    next_attempt_at INTEGER NOT NULL,
    -- The claim of the instance sending it now.
    claim TEXT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, occurred_at);

-- Each attempt: its answer's status code (NULL when none came: refused,
-- timed out, not public), what went wrong in words, and when.
CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    endpoint_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    answer INTEGER,
    error TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_id, at);
