-- User search by substring reads an index instead of every user: each distinct
-- three-character piece (trigram) of a user's lower-cased username and display
-- name ("first last"), stored next to the order results are listed in, so a
-- page is read in order from the entries of one of the query's trigrams and
-- stops when it is full. Triggers keep it in step with users, also for rows
-- written by plain SQL.
CREATE TABLE user_search_trigrams (
    trigram TEXT NOT NULL,
    sort_key TEXT NOT NULL, -- lower(username): search results are ordered by it, then id
    user_id TEXT NOT NULL,
    PRIMARY KEY (trigram, sort_key, user_id)
) WITHOUT ROWID;

-- Triggers cannot use WITH, so positions come from json_each over an array
-- of length(text) zeros.
CREATE TRIGGER users_search_insert AFTER INSERT ON users BEGIN
    INSERT INTO user_search_trigrams (trigram, sort_key, user_id)
    SELECT DISTINCT substr(f.v, p.key + 1, 3), lower(NEW.username), NEW.id
    FROM (SELECT lower(NEW.username) AS v
          UNION ALL SELECT lower(NEW.first_name || ' ' || NEW.last_name)) f,
         json_each('[' || replace(hex(zeroblob(length(f.v))), '00', '0,') || '0]') p
    WHERE p.key + 3 <= length(f.v);
END;

CREATE TRIGGER users_search_update AFTER UPDATE OF id, username, first_name, last_name ON users
BEGIN
    DELETE FROM user_search_trigrams
    WHERE sort_key = lower(OLD.username) AND user_id = OLD.id AND trigram IN (
        SELECT substr(f.v, p.key + 1, 3)
        FROM (SELECT lower(OLD.username) AS v
              UNION ALL SELECT lower(OLD.first_name || ' ' || OLD.last_name)) f,
             json_each('[' || replace(hex(zeroblob(length(f.v))), '00', '0,') || '0]') p
        WHERE p.key + 3 <= length(f.v));
    INSERT INTO user_search_trigrams (trigram, sort_key, user_id)
    SELECT DISTINCT substr(f.v, p.key + 1, 3), lower(NEW.username), NEW.id
    FROM (SELECT lower(NEW.username) AS v
          UNION ALL SELECT lower(NEW.first_name || ' ' || NEW.last_name)) f,
         json_each('[' || replace(hex(zeroblob(length(f.v))), '00', '0,') || '0]') p
    WHERE p.key + 3 <= length(f.v);
END;

CREATE TRIGGER users_search_delete AFTER DELETE ON users BEGIN
    DELETE FROM user_search_trigrams
    WHERE sort_key = lower(OLD.username) AND user_id = OLD.id AND trigram IN (
        SELECT substr(f.v, p.key + 1, 3)
        FROM (SELECT lower(OLD.username) AS v
              UNION ALL SELECT lower(OLD.first_name || ' ' || OLD.last_name)) f,
             json_each('[' || replace(hex(zeroblob(length(f.v))), '00', '0,') || '0]') p
        WHERE p.key + 3 <= length(f.v));
END;

INSERT INTO user_search_trigrams (trigram, sort_key, user_id)
SELECT DISTINCT substr(f.v, p.key + 1, 3), f.sort_key, f.id
FROM (SELECT id, lower(username) AS sort_key, lower(username) AS v FROM users
      UNION ALL SELECT id, lower(username), lower(first_name || ' ' || last_name) FROM users) f,
     json_each('[' || replace(hex(zeroblob(length(f.v))), '00', '0,') || '0]') p
WHERE p.key + 3 <= length(f.v);

-- The audit sums the ledger by account, by movement and by payment and account;
-- with the amount in the index each sum is read from the index alone. Same names,
-- so the indexes still serve every lookup they served.
DROP INDEX ledger_entries_account;
CREATE INDEX ledger_entries_account ON ledger_entries (account, amount_cents);
DROP INDEX ledger_entries_movement;
CREATE INDEX ledger_entries_movement ON ledger_entries (movement_id, amount_cents);
DROP INDEX ledger_entries_payment;
CREATE INDEX ledger_entries_payment ON ledger_entries (payment_id, account, amount_cents)
    WHERE payment_id IS NOT NULL;
