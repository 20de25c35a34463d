-- A settlement round in one round trip: the due read and `settle_batch`
-- were two, and the due read was planned as a bitmap scan of the open
-- payments' index. A bitmap scan visits every entry of that index, and a
-- settled payment's entry stays there, dead, until autovacuum comes by: under
-- a pay load each read visited thousands of them (1 to 5 ms a round, several
-- rounds a tick). An index scan in `date_created` order stops after the
-- round's length of live pays, and marks each dead entry it steps over so that
-- the next scan skips it without reading its row; this function's plans may
-- not take bitmap scans.
--
-- One movement id per pay it may settle, as the round's length; the due pays,
-- oldest first, take them in order.
CREATE FUNCTION settle_due(settle_by BIGINT, movement_ids TEXT[], settled_at BIGINT)
RETURNS TABLE (settled_id TEXT)
LANGUAGE plpgsql VOLATILE
SET enable_bitmapscan = off
AS $$
DECLARE
    due TEXT[];
BEGIN
    SELECT array_agg(d.id ORDER BY d.date_created) INTO due FROM (
        SELECT p.id, p.date_created FROM payments p
        JOIN users u ON u.id = p.target_user_id
        WHERE p.date_completed IS NULL AND p.status = 'pending' AND p.action = 'pay'
          AND p.reached_account_at <= settle_by AND NOT u.suspended
        ORDER BY p.date_created LIMIT cardinality(movement_ids)) AS d;
    IF due IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT s.settled_id
    FROM settle_batch(due, movement_ids[1:cardinality(due)], settled_at) AS s;
END
$$;
