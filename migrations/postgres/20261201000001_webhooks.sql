-- Webhooks (SPEC §12) on PostgreSQL, as on SQLite. An app's endpoints (at most 5, enforced by the
-- code that adds them), each with its signing secret sealed under
-- TALLY_SECRET_KEY (AES-256-GCM, the endpoint id as associated data), so a
-- copy of the database yields no secret; after a rotation the previous one
-- keeps signing beside it until `previous_until`.
CREATE TABLE webhook_endpoints (
    id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    client_id TEXT COLLATE "C" NOT NULL REFERENCES apps (client_id),
    url TEXT NOT NULL,
    -- The events it wants: '*' for every one, else ',a,b,' (commas around
    -- each name, so one LIKE finds a name).
    events TEXT NOT NULL,
    secret_sealed TEXT NOT NULL,
    previous_secret_sealed TEXT,
    previous_until BIGINT,
    created_at BIGINT NOT NULL,
    -- The first failure since the last success; NULL while it succeeds.
    failing_since BIGINT,
    -- Set when it has failed for 5 days without a success: nothing is sent.
    disabled_at BIGINT
);
CREATE INDEX webhook_endpoints_client ON webhook_endpoints (client_id);

-- The apps a payment was made through (with one of their tokens), written
-- with the payment only when the app has an endpoint, so that the payment's
-- later events reach it too.
CREATE TABLE payment_origins (
    payment_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    client_id TEXT COLLATE "C" NOT NULL
);

-- The outbox: one row per event and endpoint, written in the transaction of
-- the change it reports. A payment event keeps the payment's state at the
-- change (status, completion, target account, refund); its body is rendered
-- from it at the first attempt and kept, so every retry sends the same bytes.
CREATE TABLE webhook_deliveries (
    -- endpoint_id || '/' || event_id
    id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    endpoint_id TEXT COLLATE "C" NOT NULL,
    -- The webhook-id: the same on every retry and for every endpoint.
    event_id TEXT COLLATE "C" NOT NULL,
    client_id TEXT COLLATE "C" NOT NULL,
    type TEXT COLLATE "C" NOT NULL,
    occurred_at BIGINT NOT NULL,
    payment_id TEXT COLLATE "C",
    status TEXT COLLATE "C",
    date_completed BIGINT,
    target_user_id TEXT COLLATE "C",
    refund_payment_id TEXT COLLATE "C",
    body TEXT,
    -- 'pending', 'delivered' or 'failed'.
    state TEXT COLLATE "C" NOT NULL DEFAULT 'pending',
    attempts BIGINT NOT NULL DEFAULT 0,
    -- When it is due; while claimed, when the claim lapses.
    next_attempt_at BIGINT NOT NULL,
    -- The claim of the instance sending it now.
    claim TEXT COLLATE "C"
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, occurred_at);

-- Each attempt: its answer's status code (NULL when none came: refused,
-- timed out, not public), what went wrong in words, and when.
CREATE TABLE webhook_attempts (
    delivery_id TEXT COLLATE "C" NOT NULL,
    attempt BIGINT NOT NULL,
    endpoint_id TEXT COLLATE "C" NOT NULL,
    at BIGINT NOT NULL,
    answer BIGINT,
    error TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_id, at);
