-- The deliveries of payment events (SPEC §12), written in the transaction of
-- the change they report: the outbox. For each payment given (`ids`, at the
-- same place in `ats` the time of its change), read after the change so that
-- its state is the change's, one row per endpoint that is enabled, wants
-- `event_type`, and whose app the payment is linked to: it was made through
-- the app (`payment_origins`), or one of its parties has a live grant to the
-- app that reads payments (`access_profile` or `access_payment_history`).
-- The event id is `evt_` + the type's last word + the payment id (each
-- payment reaches each state once).
--
-- It first takes the shared advisory lock 'webhook endpoints', which an
-- endpoint's addition (and removal) takes alone: an addition waits for the
-- changes writing their events, and a change that comes after it waits for
-- it to commit, so its statements (READ COMMITTED: each sees what committed
-- before it began) see the endpoint. So no change that commits after an
-- endpoint was added is without its event for it. (SQLite needs no lock:
-- its writes are one at a time.)
--
-- PL/pgSQL with one generic plan, not SQL: a session plans its statement
-- once, where an SQL function's was parsed and planned at every call. The
-- linked apps are a LATERAL union read by key for each payment: as `OR`ed
-- `EXISTS` (SQLite's form) or `IN (SELECT …)`, PostgreSQL hashed the whole
-- of payment_origins at every call, a cost growing with the table (most of
-- a subscribed pay's cost, decision 019).
--
-- SQLite runs the same statement for one payment (`PAYMENT_EVENT_SQL` in
-- `store/webhooks.rs`; a test in `store/sqlite.rs` holds the two to each
-- other). The callers: `settle_pays` (every settlement), `pay_batch` (new
-- pays) and the store's transactions (`PAYMENT_EVENTS_SQL`).
CREATE OR REPLACE FUNCTION payment_events(ids TEXT[], event_type TEXT, ats BIGINT[])
RETURNS void
LANGUAGE plpgsql VOLATILE
-- Its one plan, whatever the arrays: PostgreSQL's choice between a plan for
-- the values at hand and one for any kept planning the statement anew at
-- every call.
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('webhook endpoints', 0));
    INSERT INTO webhook_deliveries (id, endpoint_id, event_id, client_id, type, occurred_at,
      payment_id, status, date_completed, target_user_id, refund_payment_id, next_attempt_at)
    SELECT e.id || '/evt_' || substr(event_type, 9) || '_' || p.id, e.id,
      'evt_' || substr(event_type, 9) || '_' || p.id, e.client_id, event_type, c.at,
      p.id, p.status, p.date_completed, p.target_user_id, p.refund_payment_id, c.at
    FROM unnest(ids, ats) AS c (id, at)
    JOIN payments p ON p.id = c.id
    CROSS JOIN LATERAL (
        SELECT o.client_id FROM payment_origins o WHERE o.payment_id = p.id
        UNION
        SELECT g.client_id FROM oauth_grants g
          WHERE g.user_id IN (p.actor_id, p.target_user_id) AND g.revoked_at IS NULL
            AND (' ' || g.scopes || ' ' LIKE '% access_profile %'
              OR ' ' || g.scopes || ' ' LIKE '% access_payment_history %')
    ) AS linked (client_id)
    JOIN webhook_endpoints e ON e.client_id = linked.client_id AND e.disabled_at IS NULL
      AND (e.events = '*' OR e.events LIKE '%,' || event_type || ',%');
END
$$;
