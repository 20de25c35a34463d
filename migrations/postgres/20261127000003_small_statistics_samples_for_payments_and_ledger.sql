-- Smaller ANALYZE samples for the two tables every pay grows. ANALYZE reads
-- 300 rows per unit of the largest statistics target among a table's columns:
-- 30,000 rows at the default of 100. Autovacuum analyzes a table again each
-- time a tenth of it has changed, so under a steady pay load it keeps
-- analyzing these two; each run sorts that sample column by column, a second
-- or more of one core, and the statements it shares the core with wait (a
-- hand-run ANALYZE of ledger_entries in the middle of a `/me` load on the same
-- core: 1.8-2.0 s, and `/me`'s p99 18-21 ms; with a target of 10 for every
-- column, 0.22-0.24 s and 13-15 ms).
--
-- No plan here needs more: their columns are ids, times, amounts and a few
-- states. Queries reach a payment or its entries by key, the workers' by
-- the partial index of open payments, and the audit reads whole indexes in
-- order; a sample of 3,000 rows still finds the few common values (the
-- states, the `@held` account) and the near-uniqueness of the ids.
ALTER TABLE ledger_entries
    ALTER COLUMN id SET STATISTICS 10,
    ALTER COLUMN movement_id SET STATISTICS 10,
    ALTER COLUMN kind SET STATISTICS 10,
    ALTER COLUMN account SET STATISTICS 10,
    ALTER COLUMN amount_cents SET STATISTICS 10,
    ALTER COLUMN payment_id SET STATISTICS 10,
    ALTER COLUMN created_at SET STATISTICS 10;

ALTER TABLE payments
    ALTER COLUMN id SET STATISTICS 10,
    ALTER COLUMN kind SET STATISTICS 10,
    ALTER COLUMN actor_id SET STATISTICS 10,
    ALTER COLUMN target_type SET STATISTICS 10,
    ALTER COLUMN target_user_id SET STATISTICS 10,
    ALTER COLUMN target_email SET STATISTICS 10,
    ALTER COLUMN target_phone SET STATISTICS 10,
    ALTER COLUMN action SET STATISTICS 10,
    ALTER COLUMN amount_cents SET STATISTICS 10,
    ALTER COLUMN note SET STATISTICS 10,
    ALTER COLUMN audience SET STATISTICS 10,
    ALTER COLUMN status SET STATISTICS 10,
    ALTER COLUMN medium SET STATISTICS 10,
    ALTER COLUMN date_created SET STATISTICS 10,
    ALTER COLUMN date_completed SET STATISTICS 10,
    ALTER COLUMN reached_account_at SET STATISTICS 10,
    ALTER COLUMN refund_payment_id SET STATISTICS 10;
