-- A payment's actor and target accounts are checked by the statement that
-- writes it: every path reads the target account, or names it by id with a
-- check that it exists, in the same transaction, and accounts are never
-- deleted nor their ids changed (suspension and closing are flags). The two
-- foreign keys added nothing to that, and cost the most of any check: each
-- new payment locked both accounts' rows FOR KEY SHARE, and the settlement
-- updates the targets' rows (their balances) while pays keep locking them,
-- so nearly every pay built a MultiXact of the lockers (GetMultiXactIdMembers
-- in profiles). Measured with 32 payers, PostgreSQL beside Tally on one
-- core: the database's CPU per pay 225 -> 176-188 us, pays a second +16-25%.
-- SQLite's checks are b-tree probes in process and take no locks: it keeps
-- them, as it keeps payment_parties' (see 20261126000002).
ALTER TABLE payments
    DROP CONSTRAINT payments_actor_id_fkey,
    DROP CONSTRAINT payments_target_user_id_fkey;
