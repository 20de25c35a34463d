-- The audit now sums the entries that name a payment by account during its
-- walk of the payment index (store/sqlite/audit.rs), so the index on the
-- entries' account keeps only the entries that name no payment (deposits and
-- other movements, which no pay writes) for the audit's other sums. Over every
-- entry, each pay and settlement wrote it at scattered places: about two WAL
-- pages a pay.
DROP INDEX ledger_entries_account;
CREATE INDEX ledger_entries_account ON ledger_entries (account, amount_cents)
    WHERE payment_id IS NULL;
