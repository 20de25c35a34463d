-- Many pays in one round trip and one commit (PostgreSQL's pay batches,
-- `store/pay_batcher.rs`, decision 004), each all or nothing as the one-pay
-- statements make one: a pay its actor's balance does not cover, or whose
-- target account (named by id and not read, `check_target`) is missing,
-- writes nothing and leaves the others in. `pays` is a JSON array with one
-- object per pay: its payment row's columns by name (`PAYMENT_ROW` in
-- `store/payments.rs` writes them), its hold (`hold_id`, the movement;
-- `hold_account`, the account it credits; `hold_kind`), `check_target`,
-- `settle_id`, and `origin` (the app whose token made it, or null).
--
-- `settle_id` is, for a pay due for settlement the moment it is made (a pay
-- to an account under a settlement delay of 0), the movement id of its
-- settlement (null for the others). Such a pay to an active account is settled
-- in the same transaction, at its `date_created`, by `settle_pays`: its row is
-- written settled, so that it never enters the index of open payments. A pay
-- to a suspended account stays pending for the workers to fail, as any pay to
-- it.
--
-- The actors and the targets to credit are locked first, together, in id
-- order and in a statement of their own, as every transaction that moves money
-- locks users (locking and writing in one statement deadlocked: its snapshot
-- predates the lock). The settlements are a statement after the pays: one user
-- may be both debited (an actor) and credited (a target) in a batch, and one
-- statement may not update a row twice. Party rows are inserted plainly: the
-- pay's id is new and its actor is never its target.
--
-- Each pay written gets its `payment.created` event (`payment_events`), in
-- a statement after the pays so that it reads them, and before the
-- settlements so that a pay settled at once has both; the app it was made
-- through is kept first (`payment_origins`) when that app has an endpoint.
-- While no endpoint exists (one read of an index per batch), neither is
-- written: no endpoint would get them.
--
-- One row per pay: its id and its actor's balance after it (NULL when nothing
-- was written).
CREATE OR REPLACE FUNCTION pay_batch(pays JSONB)
RETURNS TABLE (pay_id TEXT, actor_balance_cents BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    actor_ids TEXT[];
    to_credit TEXT[];
    active TEXT[];
    answered TEXT[];
    balances BIGINT[];
    settling TEXT[];
    settling_targets TEXT[];
    settling_amounts BIGINT[];
    settlements TEXT[];
    settling_ats BIGINT[];
    written TEXT[];
    written_ats BIGINT[];
BEGIN
    SELECT array_agg(s.actor_id),
           coalesce(array_agg(s.target_user_id)
                    FILTER (WHERE s.settle_id IS NOT NULL AND s.target_user_id IS NOT NULL),
                    '{}')
    INTO actor_ids, to_credit
    FROM jsonb_to_recordset(pays) AS s (actor_id TEXT, target_user_id TEXT, settle_id TEXT);
    SELECT array_agg(u.id) FILTER (WHERE u.id = ANY (to_credit) AND NOT u.suspended)
    INTO active FROM (
        SELECT id, suspended FROM users
        WHERE id = ANY (actor_ids) OR (id = ANY (to_credit) AND NOT suspended)
        ORDER BY id FOR NO KEY UPDATE) AS u;
    WITH p AS (
        SELECT u.*, (u.settle_id IS NOT NULL AND u.target_user_id = ANY (active)) AS settles
        FROM jsonb_to_recordset(pays)
        AS u (id TEXT, kind TEXT, actor_id TEXT, target_type TEXT, target_user_id TEXT,
            target_email TEXT, target_phone TEXT, action TEXT, amount_cents BIGINT,
            note TEXT, audience TEXT, status TEXT, medium TEXT, date_created BIGINT,
            date_completed BIGINT, reached_account_at BIGINT, refund_payment_id TEXT,
            hold_id TEXT, hold_account TEXT, hold_kind TEXT, check_target BOOLEAN,
            settle_id TEXT)),
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
            p.target_phone, p.action, p.amount_cents, p.note, p.audience,
            CASE WHEN p.settles THEN 'settled' ELSE p.status END, p.medium, p.date_created,
            CASE WHEN p.settles THEN p.date_created ELSE p.date_completed END,
            p.reached_account_at, p.refund_payment_id
        FROM p JOIN debit USING (id) RETURNING payments.id),
    entries AS (
        INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, created_at)
        SELECT p.hold_id, p.hold_kind, e.account, e.cents, p.id, p.date_created
        FROM made JOIN p USING (id) CROSS JOIN LATERAL
            (VALUES (p.actor_id, -p.amount_cents), (p.hold_account, p.amount_cents))
            AS e (account, cents)),
    parties AS (
        INSERT INTO payment_parties (user_id, date_created, payment_id)
        SELECT u.id, p.date_created, p.id FROM made JOIN p USING (id)
        CROSS JOIN LATERAL (VALUES (p.actor_id), (p.target_user_id)) AS u (id)
        WHERE u.id IS NOT NULL)
    SELECT array_agg(p.id), array_agg(debit.balance_cents),
           array_agg(p.id) FILTER (WHERE w.settles),
           array_agg(p.target_user_id) FILTER (WHERE w.settles),
           array_agg(p.amount_cents) FILTER (WHERE w.settles),
           array_agg(p.settle_id) FILTER (WHERE w.settles),
           array_agg(p.date_created) FILTER (WHERE w.settles),
           array_agg(p.id) FILTER (WHERE debit.id IS NOT NULL),
           array_agg(p.date_created) FILTER (WHERE debit.id IS NOT NULL)
    INTO answered, balances, settling, settling_targets, settling_amounts, settlements,
         settling_ats, written, written_ats
    FROM p LEFT JOIN debit USING (id)
    CROSS JOIN LATERAL (SELECT p.settles AND debit.id IS NOT NULL) AS w (settles);
    IF written IS NOT NULL THEN
        -- After an endpoint's addition, which takes this lock alone: see
        -- `payment_events`.
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('webhook endpoints', 0));
    END IF;
    IF written IS NOT NULL
       AND EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL) THEN
        INSERT INTO payment_origins (payment_id, client_id)
        SELECT o.id, o.origin FROM jsonb_to_recordset(pays) AS o (id TEXT, origin TEXT)
        WHERE o.origin IS NOT NULL AND o.id = ANY (written)
          AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.client_id = o.origin);
        PERFORM payment_events(written, 'payment.created', written_ats);
    END IF;
    IF settling IS NOT NULL THEN
        PERFORM settle_pays(settling, settling_targets, settling_amounts, settlements,
                            settling_ats, true);
    END IF;
    RETURN QUERY SELECT * FROM unnest(answered, balances);
END
$$;
