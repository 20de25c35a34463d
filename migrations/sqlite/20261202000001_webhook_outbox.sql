-- Payment events waiting to be routed to their endpoints (decision 019). A
-- change writes its events here in its own transaction, as a JSON array: the
-- SQLite group writer one row for all the events of a group, the other
-- writes one row per change. The delivery worker routes each row into
-- webhook_deliveries and deletes it, in one transaction. A rowid table: a
-- row goes at the end of one b-tree.
CREATE TABLE webhook_outbox (
    seq INTEGER PRIMARY KEY,
    events TEXT NOT NULL
);
