-- The audit counts the entries that name no payment (deposits and other
-- movements, which no pay or settlement writes) from this small index, and
-- every entry from its sums by account, so it need not walk the whole
-- payment index a second time to count the entries that name a payment.
CREATE INDEX ledger_entries_without_payment ON ledger_entries (account)
    WHERE payment_id IS NULL;
