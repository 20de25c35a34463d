-- Keeps each user's `friends_count` in step with friendships, a statement at a
-- time (a bulk load updates each user once), also for rows written by plain
-- SQL: the triggers `friendships_count_insert` and `friendships_count_delete`
-- run it with the statement's rows as `added` or `removed` (migration
-- 20261125000002 creates them, enabled ALWAYS).
CREATE OR REPLACE FUNCTION friendships_count_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- In id order, as every transaction that moves money locks users.
    IF TG_OP = 'INSERT' THEN
        PERFORM 1 FROM users WHERE id IN (SELECT user_id FROM added) ORDER BY id
            FOR NO KEY UPDATE;
        UPDATE users SET friends_count = users.friends_count + c.n
        FROM (SELECT user_id, COUNT(*) AS n FROM added GROUP BY user_id) AS c
        WHERE users.id = c.user_id;
    ELSE
        PERFORM 1 FROM users WHERE id IN (SELECT user_id FROM removed) ORDER BY id
            FOR NO KEY UPDATE;
        UPDATE users SET friends_count = users.friends_count - c.n
        FROM (SELECT user_id, COUNT(*) AS n FROM removed GROUP BY user_id) AS c
        WHERE users.id = c.user_id;
    END IF;
    RETURN NULL;
END
$$;
