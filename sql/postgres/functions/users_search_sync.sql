-- Keeps user search's index (`user_search_trigrams`) in step with users, also
-- for rows written by plain SQL, bulk loads included: the trigger
-- `users_search_sync` runs it after each insert, delete, or update of a
-- searched column (migration 20261123000003 creates the trigger, enabled
-- ALWAYS).
CREATE OR REPLACE FUNCTION users_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        DELETE FROM user_search_trigrams
        WHERE sort_key = lower(OLD.username) AND user_id = OLD.id
          AND trigram IN (SELECT user_search_trigrams_of(OLD.username, OLD.first_name, OLD.last_name));
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO user_search_trigrams (trigram, sort_key, user_id)
        SELECT t, lower(NEW.username), NEW.id
        FROM user_search_trigrams_of(NEW.username, NEW.first_name, NEW.last_name) AS t;
    END IF;
    RETURN NULL;
END
$$;
