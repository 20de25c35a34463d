-- The settlement of pays: what a pay moves when it becomes settled. The one
-- home of that rule on PostgreSQL; `settle_due` (the workers' rounds),
-- `settle_batch` (pays the workers read) and `pay_batch` (pays due the moment
-- they are made) decide which pays settle and call this.
--
-- Each pay given (`ids`; at the same place in the other arrays its target
-- account, its amount, the movement id of its settlement and the time it
-- settles) that is a pending pay becomes settled, completed at that time; its
-- settlement is one movement, two `settle` entries at that time: its amount
-- out of `@held`, into its target; and each target's balance is credited once,
-- with the sum of its pays; each pay's `payment.settled` event is written
-- (`payment_events`; not even called while no endpoint exists). One row per
-- pay settled: its id.
--
-- `written_settled`: the caller has just inserted the pays' rows already
-- settled (`pay_batch`: a pay due at once is written settled, completed at
-- its creation, so that it never enters the index of open payments), and they
-- get their entries and credits only.
--
-- The caller holds the locks: each pay's row (locked as it read it, or just
-- written) and each target's row, locked in id order before this runs, as
-- every transaction that moves money locks users, and active (a suspended
-- account's pays stay pending for the workers to fail).
CREATE OR REPLACE FUNCTION settle_pays(
    ids TEXT[], targets TEXT[], amounts BIGINT[], movement_ids TEXT[], settled_ats BIGINT[],
    written_settled BOOLEAN
) RETURNS SETOF TEXT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    done TEXT[];
    done_ats BIGINT[];
BEGIN
    WITH given AS (
        SELECT * FROM unnest(ids, targets, amounts, movement_ids, settled_ats)
            AS g (id, target_user_id, amount_cents, movement_id, settled_at)),
    marked AS (
        UPDATE payments SET status = 'settled', date_completed = given.settled_at
        FROM given
        WHERE NOT written_settled AND payments.id = given.id
          AND payments.status = 'pending' AND payments.action = 'pay'
        RETURNING payments.id),
    settled AS (
        SELECT given.* FROM given
        WHERE written_settled OR given.id IN (SELECT marked.id FROM marked)),
    credit AS (
        UPDATE users SET balance_cents = users.balance_cents + c.cents
        FROM (SELECT target_user_id, sum_cents(amount_cents) AS cents
              FROM settled GROUP BY target_user_id) AS c
        WHERE users.id = c.target_user_id),
    entries AS (
        INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, created_at)
        SELECT settled.movement_id, 'settle', e.account, e.cents, settled.id, settled.settled_at
        FROM settled
        CROSS JOIN LATERAL (VALUES ('@held', -settled.amount_cents),
                                   (settled.target_user_id, settled.amount_cents))
            AS e (account, cents))
    SELECT array_agg(settled.id), array_agg(settled.settled_at) INTO done, done_ats
    FROM settled;
    IF done IS NOT NULL THEN
        -- After an endpoint's addition, which takes this lock alone: see
        -- `payment_events`.
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('webhook endpoints', 0));
    END IF;
    IF done IS NOT NULL
       AND EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL) THEN
        PERFORM payment_events(done, 'payment.settled', done_ats);
    END IF;
    RETURN QUERY SELECT unnest(done);
END
$$;
