-- Payment events waiting to be routed to their endpoints (decision 019). A
-- change writes its events here in its own transaction, as a JSON array (the
-- function payment_events: one row for the pays of a batch, or the pays a
-- round settles); the delivery worker routes each row into
-- webhook_deliveries and deletes it, in one transaction.
CREATE TABLE webhook_outbox (
    seq BIGSERIAL PRIMARY KEY,
    events TEXT NOT NULL
);
