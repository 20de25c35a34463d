-- Payment events (SPEC §12), written to the outbox in the transaction of
-- the change they report: for the payments given (`ids`, at the same place
-- in `ats` the time of its change), read after the change so that each
-- event keeps the state the change left, one row of `webhook_outbox`
-- holding them all (a JSON array of `webhooks::OutboxEvent`); nothing
-- while no enabled endpoint exists. The delivery
-- worker routes the row to the endpoints whose apps each payment is linked
-- to, later and off the change's path (`WebhookStore::route_events`).
--
-- It first takes the shared advisory lock 'webhook endpoints', which an
-- endpoint's addition (and removal) takes alone: an addition waits for the
-- changes writing their events, and a change that comes after it waits for
-- it to commit, so its check for an endpoint (READ COMMITTED: each
-- statement sees what committed before it began) sees the endpoint. So no
-- change that commits after an endpoint was added is without its event.
-- (SQLite needs no lock: its writes are one at a time.)
--
-- The callers: `settle_pays` (every settlement), `pay_batch` (new pays) and
-- the store's transactions (`PAYMENT_EVENTS_SQL`).
CREATE OR REPLACE FUNCTION payment_events(ids TEXT[], event_type TEXT, ats BIGINT[])
RETURNS void
LANGUAGE plpgsql VOLATILE
-- Its one plan, whatever the arrays.
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('webhook endpoints', 0));
    INSERT INTO webhook_outbox (events)
    SELECT json_agg(json_build_object('payment_id', p.id, 'type', event_type, 'at', c.at,
        'origin', NULL, 'status', p.status, 'date_completed', p.date_completed,
        'target_user_id', p.target_user_id, 'refund_payment_id', p.refund_payment_id))::text
    FROM unnest(ids, ats) AS c (id, at)
    JOIN payments p ON p.id = c.id
    WHERE EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL)
    HAVING count(*) > 0;
END
$$;
