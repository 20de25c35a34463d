-- Each user's number of friends, kept beside the account so that `/me` reads
-- one row instead of counting friendships on every request. Triggers keep it
-- in step with friendships, also for rows written by plain SQL.
ALTER TABLE users ADD COLUMN friends_count INTEGER NOT NULL DEFAULT 0;

UPDATE users SET friends_count = (SELECT COUNT(*) FROM friendships f WHERE f.user_id = users.id);

CREATE TRIGGER friendships_count_insert AFTER INSERT ON friendships BEGIN
    UPDATE users SET friends_count = friends_count + 1 WHERE id = NEW.user_id;
END;

CREATE TRIGGER friendships_count_delete AFTER DELETE ON friendships BEGIN
    UPDATE users SET friends_count = friends_count - 1 WHERE id = OLD.user_id;
END;
