-- Payments and charges, their refunds, who may list them, and idempotency keys.
-- Times are microseconds since the Unix epoch (UTC); money is integer cents.

CREATE TABLE payments (
    id TEXT PRIMARY KEY NOT NULL,
    -- 'payment' (made by a user) or 'refund' (returns the money of another).
    kind TEXT NOT NULL,
    -- NULL only for a refund of a payment that never reached an account.
    actor_id TEXT REFERENCES users (id),
    -- How the target was addressed: 'user', 'email' or 'phone'.
    target_type TEXT NOT NULL,
    -- Set when the address belongs to an account (at once, or when claimed).
    target_user_id TEXT REFERENCES users (id),
    target_email TEXT,
    target_phone TEXT,
    action TEXT NOT NULL CHECK (action IN ('pay', 'charge')),
    amount_cents BIGINT NOT NULL CHECK (amount_cents > 0),
    note TEXT NOT NULL,
    audience TEXT NOT NULL,
    status TEXT NOT NULL,
    medium TEXT NOT NULL,
    date_created BIGINT NOT NULL,
    date_completed BIGINT,
    -- When the target became an account (at creation, or when claimed): a pending
    -- pay settles TALLY_SETTLEMENT_DELAY after it.
    reached_account_at BIGINT,
    refund_payment_id TEXT REFERENCES payments (id)
);
-- The workers look only at pending payments.
CREATE INDEX payments_pending ON payments (date_created) WHERE status = 'pending';
CREATE INDEX payments_target_email ON payments (target_email) WHERE target_email IS NOT NULL;
CREATE INDEX payments_target_phone ON payments (target_phone) WHERE target_phone IS NOT NULL;

-- The users a payment belongs to (actor and target account), keyed for keyset
-- paging of one user's history, newest first.
CREATE TABLE payment_parties (
    user_id TEXT NOT NULL REFERENCES users (id),
    date_created BIGINT NOT NULL,
    payment_id TEXT NOT NULL REFERENCES payments (id),
    PRIMARY KEY (user_id, date_created, payment_id)
);

-- The first answer to a POST /payments with an Idempotency-Key, per owner.
CREATE TABLE idempotency_keys (
    owner_id TEXT NOT NULL REFERENCES users (id),
    key TEXT NOT NULL,
    -- SHA-256 of the parsed parameters: the same key with others is a conflict.
    fingerprint TEXT NOT NULL,
    payment_id TEXT REFERENCES payments (id),
    balance_cents BIGINT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (owner_id, key)
);

CREATE INDEX ledger_entries_payment ON ledger_entries (payment_id) WHERE payment_id IS NOT NULL;
