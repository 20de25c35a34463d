-- The audit's sum of cents: bigints added into a bigint (an overflow is an
-- error, as for any bigint). The built-in sum(bigint) answers numeric, whose
-- making and comparing once per payment and per movement is a measurable part
-- of the audit at a million payments (decision 011). The settlement uses it
-- for each credited account's sum.
CREATE OR REPLACE AGGREGATE sum_cents (BIGINT) (
    SFUNC = int8pl,
    STYPE = BIGINT,
    INITCOND = '0',
    COMBINEFUNC = int8pl,
    PARALLEL = SAFE
);
