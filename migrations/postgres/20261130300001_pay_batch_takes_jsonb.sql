-- `pay_batch` takes its pays as one JSONB array of objects
-- (sql/postgres/functions/pay_batch.sql, installed after the migrations)
-- instead of 22 arrays, one per column. A new signature is a new function:
-- the old one goes, so that no caller reaches a body that is no longer kept.
DROP FUNCTION IF EXISTS pay_batch(TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[], TEXT[],
    TEXT[], TEXT[], TEXT[], BOOLEAN[], TEXT[]);
