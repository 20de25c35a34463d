-- Settles the pays the workers read as due (`Store::settle_payments`), one
-- round trip: the pays `ids`, each with the movement id at its place in
-- `movement_ids`, settled by `settle_pays` at `settled_at`. One row per pay
-- settled.
--
-- The credited accounts are locked first, in id order and in a statement of
-- their own, as every other transaction that moves money locks users (see
-- `pay_batch`). Then each pay still pending, not held by another worker (SKIP
-- LOCKED) and whose target account is not suspended is locked and settled. The
-- others stay as they are.
CREATE OR REPLACE FUNCTION settle_batch(ids TEXT[], movement_ids TEXT[], settled_at BIGINT)
RETURNS TABLE (settled_id TEXT)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM users WHERE id IN (
        SELECT target_user_id FROM payments WHERE id = ANY (ids)) ORDER BY id FOR NO KEY UPDATE;
    RETURN QUERY
    SELECT settled.id FROM (
        SELECT array_agg(p.id) AS ids, array_agg(p.target_user_id) AS targets,
               array_agg(p.amount_cents) AS amounts, array_agg(m.movement_id) AS movements,
               array_agg(settled_at) AS settled_ats
        FROM (SELECT p.id, p.target_user_id, p.amount_cents FROM payments p
              WHERE p.id = ANY (ids) AND p.status = 'pending' AND p.action = 'pay'
                AND EXISTS (SELECT 1 FROM users u
                            WHERE u.id = p.target_user_id AND NOT u.suspended)
              FOR UPDATE OF p SKIP LOCKED) AS p
        JOIN unnest(ids, movement_ids) AS m (payment_id, movement_id) ON m.payment_id = p.id) AS s
    CROSS JOIN LATERAL settle_pays(s.ids, s.targets, s.amounts, s.movements, s.settled_ats, false)
        AS settled (id);
END
$$;
