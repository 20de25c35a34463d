-- A settlement round of the workers (`Store::settle_due`), one round trip: the
-- oldest pays due (pending, reached an account at or before `settle_by` whose
-- owner is not suspended), at most one per movement id given, settled by
-- `settle_pays` at `settled_at`, each with the movement id at its place in the
-- round (the oldest the first). One row per pay settled. The due read is the
-- one of `SETTLEMENT_DUE_SQL` (store/payments.rs), SQLite's: a test in
-- store/sqlite.rs fails when the two differ.
--
-- The due read locks the pays as it finds them, skipping those another
-- transaction holds (so the round never waits for a pay, and several instances
-- never settle one twice); then the targets still active are locked, in id
-- order, with one statement that also answers which they are; then the pays to
-- those targets are settled.
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
    due_targets TEXT[];
    due_amounts BIGINT[];
    targets TEXT[];
    active TEXT[];
BEGIN
    SELECT array_agg(d.id ORDER BY d.date_created),
           array_agg(d.target_user_id ORDER BY d.date_created),
           array_agg(d.amount_cents ORDER BY d.date_created),
           array_agg(DISTINCT d.target_user_id)
    INTO due, due_targets, due_amounts, targets FROM (
        SELECT p.id, p.date_created, p.target_user_id, p.amount_cents FROM payments p
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
    SELECT settled.id FROM (
        SELECT array_agg(d.id ORDER BY d.n) AS ids,
               array_agg(d.target_user_id ORDER BY d.n) AS targets,
               array_agg(d.amount_cents ORDER BY d.n) AS amounts,
               array_agg(movement_ids[d.n] ORDER BY d.n) AS movements,
               array_agg(settled_at ORDER BY d.n) AS settled_ats
        FROM unnest(due, due_targets, due_amounts) WITH ORDINALITY
            AS d (id, target_user_id, amount_cents, n)
        WHERE d.target_user_id = ANY (active)) AS s
    CROSS JOIN LATERAL settle_pays(s.ids, s.targets, s.amounts, s.movements, s.settled_ats, false)
        AS settled (id);
END
$$;
