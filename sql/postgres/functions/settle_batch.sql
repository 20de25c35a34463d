-- Settles the pays the workers read as due (`Store::settle_payments`), one
-- round trip. The arguments are the pays to settle and, in the same order, the
-- ledger movement of each one's two `settle` entries.
--
-- The credited accounts are locked first, in id order and in a statement of
-- their own, as every other transaction that moves money locks users (see
-- pay_batch). Then each pay still pending, not held by another worker (SKIP
-- LOCKED) and whose target account is not suspended becomes settled: its
-- target is credited once with the sum of its pays, and it gets its entries
-- from `@held`. The others stay as they are. One row per pay settled.
CREATE OR REPLACE FUNCTION settle_batch(ids TEXT[], movement_ids TEXT[], settled_at BIGINT)
RETURNS TABLE (settled_id TEXT)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM users WHERE id IN (
        SELECT target_user_id FROM payments WHERE id = ANY (ids)) ORDER BY id FOR NO KEY UPDATE;
    RETURN QUERY
    WITH settled AS (
        UPDATE payments SET status = 'settled', date_completed = settled_at
        WHERE payments.id IN (SELECT p.id FROM payments p
                              WHERE p.id = ANY (ids) AND p.status = 'pending'
                              FOR UPDATE SKIP LOCKED)
          AND payments.status = 'pending' AND payments.action = 'pay'
          AND EXISTS (SELECT 1 FROM users u
                      WHERE u.id = payments.target_user_id AND NOT u.suspended)
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
        JOIN unnest(ids, movement_ids) AS m (payment_id, movement_id) ON m.payment_id = settled.id
        CROSS JOIN LATERAL (VALUES ('@held', -settled.amount_cents),
                                   (settled.target_user_id, settled.amount_cents))
            AS e (account, cents))
    SELECT settled.id FROM settled;
END
$$;
