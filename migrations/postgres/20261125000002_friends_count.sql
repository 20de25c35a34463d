-- Each user's number of friends, kept beside the account so that `/me` reads
-- one row instead of counting friendships on every request. A trigger keeps it
-- in step with friendships, a statement at a time (bulk loads update each user
-- once), also for rows written by plain SQL.
ALTER TABLE users ADD COLUMN friends_count BIGINT NOT NULL DEFAULT 0;

UPDATE users SET friends_count = f.n
FROM (SELECT user_id, COUNT(*) AS n FROM friendships GROUP BY user_id) AS f
WHERE users.id = f.user_id;

CREATE FUNCTION friendships_count_sync() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER friendships_count_insert AFTER INSERT ON friendships
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION friendships_count_sync();
CREATE TRIGGER friendships_count_delete AFTER DELETE ON friendships
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION friendships_count_sync();
-- Also when a bulk load skips ordinary triggers (session_replication_role = replica).
ALTER TABLE friendships ENABLE ALWAYS TRIGGER friendships_count_insert;
ALTER TABLE friendships ENABLE ALWAYS TRIGGER friendships_count_delete;
