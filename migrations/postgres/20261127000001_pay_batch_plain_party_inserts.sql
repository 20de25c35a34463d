-- pay_batch's party rows as plain inserts: they were written `ON CONFLICT DO
-- NOTHING`, which PostgreSQL runs as a speculative insertion (a probe of the
-- primary key before the insert, and a second WAL record to confirm it):
-- twice the buffers and half again the WAL records of a plain insert, for a
-- conflict that cannot happen here. Each pay's payment id is new and its
-- actor is never its target (paying oneself is refused before any write), so
-- its two rows are distinct and new. Were one ever to collide, the batch would
-- fail and pay_batcher.rs would write its pays one by one with the one-pay
-- statements, which keep the clause.
--
-- Otherwise as in 20261125000001_pay_batch_function.sql.
CREATE OR REPLACE FUNCTION pay_batch(
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
        WHERE u.id IS NOT NULL)
    SELECT p.id, debit.balance_cents FROM p LEFT JOIN debit USING (id);
END
$$;
