-- New pays written together (the pay batches of pay_batcher.rs), one round trip
-- for the batch. The arguments are arrays of the payment rows' columns (in
-- PAYMENT_COLUMNS order), of their holds' movement ids, credited accounts and
-- entry kinds, and of whether each target account was named by id and must
-- exist. No two pays have one actor.
--
-- The actors' rows are locked first, in id order, as every other transaction
-- that moves money locks users, and in a statement of their own: the writes
-- then run on a snapshot taken after the locks. Locking and writing in one
-- statement (one snapshot, taken before the locks were waited for) made the
-- update revisit the row versions it saw before the wait, which deadlocked
-- with other batches queued on those versions.
--
-- One row per pay: its id and the actor's balance after it (NULL when nothing
-- was written: not covered, or no such target). Each pay is all or nothing.
CREATE FUNCTION pay_batch(
    ids TEXT[], kinds TEXT[], actor_ids TEXT[], target_types TEXT[],
    target_user_ids TEXT[], target_emails TEXT[], target_phones TEXT[],
    actions TEXT[], amounts BIGINT[], notes TEXT[], audiences TEXT[],
    statuses TEXT[], media TEXT[], dates_created BIGINT[], dates_completed BIGINT[],
    reached_account_ats BIGINT[], refund_payment_ids TEXT[],
    hold_ids TEXT[], hold_accounts TEXT[], hold_kinds TEXT[], check_targets BOOLEAN[]
) RETURNS TABLE (pay_id TEXT, actor_balance_cents BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM users WHERE id = ANY (actor_ids) ORDER BY id FOR NO KEY UPDATE;
    RETURN QUERY
    WITH p AS (
        SELECT * FROM unnest(ids, kinds, actor_ids, target_types, target_user_ids,
            target_emails, target_phones, actions, amounts, notes, audiences, statuses,
            media, dates_created, dates_completed, reached_account_ats, refund_payment_ids,
            hold_ids, hold_accounts, hold_kinds, check_targets)
        AS p (id, kind, actor_id, target_type, target_user_id, target_email, target_phone,
            action, amount_cents, note, audience, status, medium, date_created,
            date_completed, reached_account_at, refund_payment_id,
            hold_id, hold_account, hold_kind, check_target)),
    debit AS (
        UPDATE users SET balance_cents = users.balance_cents - p.amount_cents FROM p
        WHERE users.id = p.actor_id AND users.balance_cents >= p.amount_cents
          AND (NOT p.check_target
               OR EXISTS (SELECT 1 FROM users t WHERE t.id = p.target_user_id))
        RETURNING p.id, users.balance_cents),
    made AS (
        INSERT INTO payments (id, kind, actor_id, target_type, target_user_id, target_email,
            target_phone, action, amount_cents, note, audience, status, medium, date_created,
            date_completed, reached_account_at, refund_payment_id)
        SELECT p.id, p.kind, p.actor_id, p.target_type, p.target_user_id, p.target_email,
            p.target_phone, p.action, p.amount_cents, p.note, p.audience, p.status, p.medium,
            p.date_created, p.date_completed, p.reached_account_at, p.refund_payment_id
        FROM p JOIN debit USING (id) RETURNING payments.id),
    hold AS (
        INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, created_at)
        SELECT p.hold_id, p.hold_kind, e.account, e.cents, p.id, p.date_created
        FROM made JOIN p USING (id) CROSS JOIN LATERAL
            (VALUES (p.actor_id, -p.amount_cents), (p.hold_account, p.amount_cents)) AS e (account, cents)),
    parties AS (
        INSERT INTO payment_parties (user_id, date_created, payment_id)
        SELECT u.id, p.date_created, p.id FROM made JOIN p USING (id)
        CROSS JOIN LATERAL (VALUES (p.actor_id), (p.target_user_id)) AS u (id)
        WHERE u.id IS NOT NULL ON CONFLICT DO NOTHING)
    SELECT p.id, debit.balance_cents FROM p LEFT JOIN debit USING (id);
END
$$;
