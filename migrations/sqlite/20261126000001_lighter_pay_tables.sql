-- Every pay writes two payment_parties rows and four ledger entries, each row
-- with its indexes, on the one writer. Two of those b-trees were of no use:
--
-- * payment_parties is all primary key, which a rowid table keeps twice (the
--   table, and the index behind its PRIMARY KEY). WITHOUT ROWID keeps it once,
--   in the order history pages are read in.
-- * ledger_entries.id was AUTOINCREMENT, which reads and rewrites its row in
--   sqlite_sequence with every insert. Entries are never deleted, so a plain
--   INTEGER PRIMARY KEY never reuses an id either.
--
-- Measured on the pay statements alone, settlement included: 1 to 22% less time
-- per pay (medians 170 and 153 µs). The ids, rows and index names stay as they
-- were.

CREATE TABLE payment_parties_rebuilt (
    user_id TEXT NOT NULL REFERENCES users (id),
    date_created INTEGER NOT NULL,
    payment_id TEXT NOT NULL REFERENCES payments (id),
    PRIMARY KEY (user_id, date_created, payment_id)
) WITHOUT ROWID;
INSERT INTO payment_parties_rebuilt (user_id, date_created, payment_id)
SELECT user_id, date_created, payment_id FROM payment_parties;
DROP TABLE payment_parties;
ALTER TABLE payment_parties_rebuilt RENAME TO payment_parties;

CREATE TABLE ledger_entries_rebuilt (
    id INTEGER PRIMARY KEY,
    movement_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    account TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    payment_id TEXT,
    created_at INTEGER NOT NULL
);
INSERT INTO ledger_entries_rebuilt
    (id, movement_id, kind, account, amount_cents, payment_id, created_at)
SELECT id, movement_id, kind, account, amount_cents, payment_id, created_at
FROM ledger_entries;
DROP TABLE ledger_entries;
ALTER TABLE ledger_entries_rebuilt RENAME TO ledger_entries;
CREATE INDEX ledger_entries_account ON ledger_entries (account, amount_cents);
CREATE INDEX ledger_entries_movement ON ledger_entries (movement_id, amount_cents);
CREATE INDEX ledger_entries_payment ON ledger_entries (payment_id, account, amount_cents)
    WHERE payment_id IS NOT NULL;
DELETE FROM sqlite_sequence WHERE name = 'ledger_entries';
