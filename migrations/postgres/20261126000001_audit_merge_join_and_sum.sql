-- The audit checks every payment against its ledger entries by walking the
-- payments' primary key and the entries' payment index side by side (a merge
-- join). That needs both in one order: the entries' payment_id now sorts by
-- the database's collation, as payments.id does, instead of "C". Equality is
-- the same under either, so every lookup by payment_id answers as before; the
-- index is rebuilt, the table is not rewritten.
ALTER TABLE ledger_entries ALTER COLUMN payment_id TYPE TEXT COLLATE "default";

-- The audit's sum of cents: bigints added into a bigint (an overflow is an
-- error, as for any bigint). The built-in sum(bigint) answers numeric, whose
-- making and comparing once per payment and per movement costs about a second
-- of the audit at a million payments.
CREATE AGGREGATE sum_cents (BIGINT) (
    SFUNC = int8pl,
    STYPE = BIGINT,
    INITCOND = '0',
    COMBINEFUNC = int8pl,
    PARALLEL = SAFE
);
