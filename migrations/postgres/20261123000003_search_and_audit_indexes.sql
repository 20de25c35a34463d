-- User search by substring reads an index instead of every user: each distinct
-- three-character piece (trigram) of a user's lower-cased username and display
-- name ("first last"), stored next to the order results are listed in, so a
-- page is read in order from the entries of one of the query's trigrams and
-- stops when it is full (a GIN trigram index finds the same users, but in no
-- order, so every match would be read and sorted). A trigger keeps it in step
-- with users, also for rows written by plain SQL, bulk loads included.
CREATE TABLE user_search_trigrams (
    trigram TEXT NOT NULL,
    sort_key TEXT NOT NULL, -- lower(username): search results are ordered by it, then id
    user_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (trigram, sort_key, user_id)
);

CREATE FUNCTION user_search_trigrams_of(username TEXT, first_name TEXT, last_name TEXT)
RETURNS SETOF TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT DISTINCT substr(f.v, i, 3)
    FROM unnest(ARRAY[lower(username), lower(first_name || ' ' || last_name)]) AS f(v),
         generate_series(1, length(f.v) - 2) AS i
$$;

CREATE FUNCTION users_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER users_search_sync
    AFTER INSERT OR DELETE OR UPDATE OF id, username, first_name, last_name ON users
    FOR EACH ROW EXECUTE FUNCTION users_search_sync();
-- Also when a bulk load skips ordinary triggers (session_replication_role = replica).
ALTER TABLE users ENABLE ALWAYS TRIGGER users_search_sync;

INSERT INTO user_search_trigrams (trigram, sort_key, user_id)
SELECT t, lower(u.username), u.id
FROM users u, user_search_trigrams_of(u.username, u.first_name, u.last_name) AS t;

-- The audit sums the ledger by account, by movement and by payment and account;
-- with the amount in the index each sum can be read from the index alone. Same
-- names, so the indexes still serve every lookup they served.
DROP INDEX ledger_entries_account;
CREATE INDEX ledger_entries_account ON ledger_entries (account, amount_cents);
DROP INDEX ledger_entries_movement;
CREATE INDEX ledger_entries_movement ON ledger_entries (movement_id, amount_cents);
DROP INDEX ledger_entries_payment;
CREATE INDEX ledger_entries_payment ON ledger_entries (payment_id, account, amount_cents)
    WHERE payment_id IS NOT NULL;
