-- A settlement round of the workers (`Store::settle_due`), one round trip: the
-- oldest pays due (pending, reached an account at or before `settle_by` whose
-- owner is not suspended), at most one per movement id given, settled at
-- `settled_at`, each with the movement id at its place in the round (the
-- oldest the first). One row per pay settled. The due read is the one of
-- `SETTLEMENT_DUE_SQL` (store/payments.rs), SQLite's: a change here belongs
-- there too.
--
-- The due read locks the pays as it finds them, skipping those another
-- transaction holds, as a queue read does; then the targets still active are
-- locked, in id order, with one statement that also answers which they are;
-- then the pays held are settled.
--
-- Why the order (pays, then targets) does not deadlock: the pays are taken
-- with SKIP LOCKED, so the round never waits for one. It waits only for
-- targets, in id order, as every transaction that moves money locks users;
-- and a transaction that waits for a pay this round holds (a cancel, see
-- `apply_transition`) locks that pay before any user.
--
-- A target suspended after the due read is left out by the locking read (it
-- sees the suspension once it has waited for it), and its pays stay pending for
-- the worker to fail; the targets it locks stay active until this commits.
-- No bitmap scans: the due read walks the open payments' index in order
-- (decision 005).
CREATE OR REPLACE FUNCTION settle_due(settle_by BIGINT, movement_ids TEXT[], settled_at BIGINT)
RETURNS TABLE (settled_id TEXT)
LANGUAGE plpgsql VOLATILE
SET enable_bitmapscan = off
AS $$
DECLARE
    due TEXT[];
    targets TEXT[];
    active TEXT[];
BEGIN
    SELECT array_agg(d.id ORDER BY d.date_created), array_agg(DISTINCT d.target_user_id)
    INTO due, targets FROM (
        SELECT p.id, p.date_created, p.target_user_id FROM payments p
        JOIN users u ON u.id = p.target_user_id
        WHERE p.date_completed IS NULL AND p.status = 'pending' AND p.action = 'pay'
          AND p.reached_account_at <= settle_by AND NOT u.suspended
        ORDER BY p.date_created LIMIT cardinality(movement_ids)
        FOR UPDATE OF p SKIP LOCKED) AS d;
    IF due IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(t.id) INTO active FROM (
        SELECT id FROM users WHERE id = ANY (targets) AND NOT suspended
        ORDER BY id FOR NO KEY UPDATE) AS t;
    IF active IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH settled AS (
        UPDATE payments SET status = 'settled', date_completed = settled_at
        WHERE payments.id = ANY (due) AND payments.status = 'pending'
          AND payments.target_user_id = ANY (active)
        RETURNING payments.id, payments.target_user_id, payments.amount_cents),
    credit AS (
        UPDATE users SET balance_cents = users.balance_cents + c.cents
        FROM (SELECT target_user_id, sum_cents(amount_cents) AS cents
              FROM settled GROUP BY target_user_id) AS c
        WHERE users.id = c.target_user_id),
    entries AS (
        INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, created_at)
        SELECT m.movement_id, 'settle', e.account, e.cents, settled.id, settled_at
        FROM settled
        JOIN unnest(due, movement_ids[1:cardinality(due)]) AS m (payment_id, movement_id)
            ON m.payment_id = settled.id
        CROSS JOIN LATERAL (VALUES ('@held', -settled.amount_cents),
                                   (settled.target_user_id, settled.amount_cents))
            AS e (account, cents))
    SELECT settled.id FROM settled;
END
$$;
