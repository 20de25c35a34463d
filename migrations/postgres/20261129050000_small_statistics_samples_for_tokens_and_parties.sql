-- Smaller ANALYZE samples for the other two tables a steady load grows: the
-- tokens (every code exchange and refresh writes two rows and a refresh
-- updates two more) and the payments' parties (two rows a pay). The reasons
-- are those of 20261127000003 for payments and ledger_entries: autovacuum
-- analyzes a table again each time a tenth of it has changed, each run sorts a
-- 30,000-row sample column by column, and the statements sharing the core
-- wait. In a full yardstick run the tokens' analyze took 0.9-3.4 s of a
-- loaded core right after the refresh phase.
--
-- No plan here needs more: tokens are reached by their digest, their grant,
-- or the retention worker's indexes on expiry and revocation; a user's
-- parties by the primary key's prefix (keyset paging); every column is an id,
-- a time or a small state.
ALTER TABLE oauth_tokens
    ALTER COLUMN digest SET STATISTICS 10,
    ALTER COLUMN grant_id SET STATISTICS 10,
    ALTER COLUMN kind SET STATISTICS 10,
    ALTER COLUMN created_at SET STATISTICS 10,
    ALTER COLUMN expires_at SET STATISTICS 10,
    ALTER COLUMN used_at SET STATISTICS 10,
    ALTER COLUMN revoked_at SET STATISTICS 10,
    ALTER COLUMN scopes SET STATISTICS 10;

ALTER TABLE payment_parties
    ALTER COLUMN user_id SET STATISTICS 10,
    ALTER COLUMN date_created SET STATISTICS 10,
    ALTER COLUMN payment_id SET STATISTICS 10;
