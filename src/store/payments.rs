//! Storage of payments, their refunds and idempotency keys, and the reads of the
//! social graph. Every state change is one guarded statement (`WHERE status =
//! 'pending'`) in the same transaction as the money it moves, so a payment
//! changes state exactly once however many instances race for it.

use super::{EntryKind, Move, Movement};
use crate::domain::{Audience, Medium, PaymentAction, PaymentKind, PaymentStatus, TargetType};

/// The payment row, described once: each column's name, in order, with how
/// its value is read from a `Payment`. Every binder binds from it (`bind_payment`
/// on both backends, SQLite's group writer, PostgreSQL's pay batches), and the
/// statements' column list and placeholders (`payment_columns!`,
/// `payment_placeholders!`, literals so that statements can be `concat!`ed at
/// compile time) are checked against it by a test. A column is added here,
/// in those two literals, in the migrations, and in `pay_batch`'s record type
/// (`sql/postgres/functions/pay_batch.sql`), which reads it by name from
/// [`pay_batch_json`].
pub(crate) const PAYMENT_ROW: [PaymentColumn; 17] = [
    PaymentColumn::text("id", |p| Some(p.id.clone())),
    PaymentColumn::text("kind", |p| Some(p.kind.as_str().to_owned())),
    PaymentColumn::text("actor_id", |p| p.actor_id.clone()),
    PaymentColumn::text("target_type", |p| Some(p.target_type.as_str().to_owned())),
    PaymentColumn::text("target_user_id", |p| p.target_user_id.clone()),
    PaymentColumn::text("target_email", |p| p.target_email.clone()),
    PaymentColumn::text("target_phone", |p| p.target_phone.clone()),
    PaymentColumn::text("action", |p| Some(p.action.as_str().to_owned())),
    PaymentColumn::int("amount_cents", |p| Some(p.amount_cents)),
    PaymentColumn::text("note", |p| Some(p.note.clone())),
    PaymentColumn::text("audience", |p| Some(p.audience.as_str().to_owned())),
    PaymentColumn::text("status", |p| Some(p.status.as_str().to_owned())),
    PaymentColumn::text("medium", |p| Some(p.medium.as_str().to_owned())),
    PaymentColumn::int("date_created", |p| Some(p.date_created)),
    PaymentColumn::int("date_completed", |p| p.date_completed),
    PaymentColumn::int("reached_account_at", |p| p.reached_account_at),
    PaymentColumn::text("refund_payment_id", |p| p.refund_payment_id.clone()),
];

/// One column of [`PAYMENT_ROW`].
pub(crate) struct PaymentColumn {
    pub(crate) name: &'static str,
    pub(crate) value: ColumnValue,
}

/// How a column's value is read, by its SQL type.
#[derive(Clone, Copy)]
pub(crate) enum ColumnValue {
    Text(fn(&Payment) -> Option<String>),
    Int(fn(&Payment) -> Option<i64>),
}

impl PaymentColumn {
    const fn text(name: &'static str, value: fn(&Payment) -> Option<String>) -> Self {
        Self {
            name,
            value: ColumnValue::Text(value),
        }
    }

    const fn int(name: &'static str, value: fn(&Payment) -> Option<i64>) -> Self {
        Self {
            name,
            value: ColumnValue::Int(value),
        }
    }
}

/// [`PAYMENT_ROW`]'s names, as a literal.
macro_rules! payment_columns {
    () => {
        "id, kind, actor_id, target_type, target_user_id, target_email, target_phone, \
         action, amount_cents, note, audience, status, medium, date_created, date_completed, \
         reached_account_at, refund_payment_id"
    };
}

pub(crate) use payment_columns;

/// [`PAYMENT_ROW`]'s placeholders, `$1` its first column: the payment row's
/// place in every new-payment statement, whose further parameters start at
/// `$18`.
macro_rules! payment_placeholders {
    () => {
        "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17"
    };
}

pub(crate) use payment_placeholders;

/// [`PAYMENT_ROW`]'s columns, each prefixed by a table alias.
pub(crate) fn payment_columns_of(alias: &str) -> String {
    PAYMENT_ROW
        .iter()
        .map(|column| format!("{alias}.{}", column.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A new payment's movement, as statements both backends share the binds of:
/// `$1`..`$17` the payment row (`PAYMENT_ROW`, `payment_placeholders!`) (`$3` the actor, `$5`
/// the target account, `$9` the amount, `$14` the time), and for a pay the hold
/// the ledger decided: `$18` its movement id, `$19` the account it credits and
/// `$20` its entries' kind. Each returns the actor's
/// balance afterwards as its only row; a pay returns no row when the balance
/// does not cover it.
///
/// PostgreSQL: one statement (data-modifying CTEs), so one round trip and its
/// own transaction; the actor's row is locked only while it runs, and nothing
/// is written unless the guarded debit took the money.
pub(crate) const PG_HOLD_SQL: &str = concat!(
    "WITH debit AS (UPDATE users SET balance_cents = balance_cents - $9 \
       WHERE id = $3 AND balance_cents >= $9 RETURNING balance_cents), ",
    pg_hold_rows!(),
    " SELECT balance_cents FROM debit"
);

/// What a pay writes once its debit took the money: the row, the hold's two
/// entries, the parties.
macro_rules! pg_hold_rows {
    () => {
        concat!(
            "made AS (INSERT INTO payments (",
            payment_columns!(),
            ") SELECT ",
            payment_placeholders!(),
            " FROM debit RETURNING id), \
             hold AS (INSERT INTO ledger_entries \
               (movement_id, kind, account, amount_cents, payment_id, created_at) \
               SELECT $18, $20, e.account, e.cents, made.id, $14 FROM made \
               CROSS JOIN (VALUES ($3, -$9), ($19, $9)) AS e (account, cents)), \
             parties AS (INSERT INTO payment_parties (user_id, date_created, payment_id) \
               SELECT u.id, $14, made.id FROM made CROSS JOIN (VALUES ($3), ($5)) AS u (id) \
               WHERE u.id IS NOT NULL ON CONFLICT DO NOTHING)"
        )
    };
}
use pg_hold_rows;

/// A pay to an account named by id that was not read: the statement reads it
/// too, moves nothing unless it exists, and returns it beside the actor's
/// balance (NULL when not covered); no row when there is no such account. One
/// round trip instead of a read and then the pay.
pub(crate) const PG_HOLD_TO_ACCOUNT_SQL: &str = concat!(
    "WITH target AS (SELECT ",
    super::sql::user_columns!(),
    " FROM users WHERE id = $5), \
     debit AS (UPDATE users SET balance_cents = balance_cents - $9 \
       WHERE id = $3 AND balance_cents >= $9 AND EXISTS (SELECT 1 FROM target) \
       RETURNING balance_cents), ",
    pg_hold_rows!(),
    " SELECT (SELECT balance_cents FROM debit) AS actor_balance_cents, target.* FROM target"
);

/// A charge to an account named by id that was not read: as
/// `PG_HOLD_TO_ACCOUNT_SQL`, nothing is written without the account.
pub(crate) const PG_CHARGE_TO_ACCOUNT_SQL: &str = concat!(
    "WITH target AS (SELECT ",
    super::sql::user_columns!(),
    " FROM users WHERE id = $5), \
     made AS (INSERT INTO payments (",
    payment_columns!(),
    ") SELECT ",
    payment_placeholders!(),
    " FROM target RETURNING id), \
     parties AS (INSERT INTO payment_parties (user_id, date_created, payment_id) \
       SELECT u.id, $14, made.id FROM made CROSS JOIN (VALUES ($3), ($5)) AS u (id) \
       WHERE u.id IS NOT NULL ON CONFLICT DO NOTHING) \
     SELECT (SELECT balance_cents FROM users WHERE id = $3) AS actor_balance_cents, target.* \
     FROM target"
);

/// A charge moves nothing: the row, its parties, and the actor's balance.
pub(crate) const PG_CHARGE_SQL: &str = concat!(
    "WITH made AS (INSERT INTO payments (",
    payment_columns!(),
    ") VALUES (",
    payment_placeholders!(),
    ") RETURNING id), \
     parties AS (INSERT INTO payment_parties (user_id, date_created, payment_id) \
       SELECT u.id, $14, made.id FROM made CROSS JOIN (VALUES ($3), ($5)) AS u (id) \
       WHERE u.id IS NOT NULL ON CONFLICT DO NOTHING) \
     SELECT balance_cents FROM users WHERE id = $3"
);

/// Many pays in one round trip (PostgreSQL's pay batches, see
/// `pay_batcher.rs`), each all or nothing as `PG_HOLD_SQL` and
/// `PG_HOLD_TO_ACCOUNT_SQL` make one: the database function `pay_batch`
/// (`sql/postgres/functions/pay_batch.sql`, which says why) locks the actors'
/// rows and those of the targets it may credit, writes the pays, then settles
/// those due at once with `settle_pays`. `$1` is the pays as one JSON array
/// ([`pay_batch_json`]). One row per pay: its id (`pay_id`), the actor's
/// balance after it (NULL when nothing was written: not covered, or no such
/// target), and, when its target account was named by id and not read
/// (`check_target`), that account's columns (NULL when there is none).
pub(crate) const PG_HOLDS_SQL: &str = concat!(
    "SELECT b.pay_id, b.actor_balance_cents, t.* FROM pay_batch($1::jsonb) AS b \
     JOIN jsonb_to_recordset($1::jsonb) AS q (id text, target_user_id text, check_target bool) \
       ON q.id = b.pay_id \
     LEFT JOIN LATERAL (SELECT ",
    super::sql::user_columns!(),
    " FROM users WHERE q.check_target AND users.id = q.target_user_id) AS t ON true"
);

/// The argument of `pay_batch`: one JSON object per pay, its payment row's
/// columns named as in [`PAYMENT_ROW`], then its hold (`hold_id`,
/// `hold_account`, `hold_kind`), `check_target`, `settle_id` (the movement
/// id of its settlement when it is to settle at once,
/// `PaymentInsert::settle_at_once`; else null) and `origin` (the app whose
/// token made it, for its webhook events; else null).
pub(crate) fn pay_batch_json<'a>(pays: impl Iterator<Item = &'a PaymentInsert>) -> String {
    use serde_json::Value;
    let pays: Vec<Value> = pays
        .map(|insert| {
            let mut pay: serde_json::Map<String, Value> = PAYMENT_ROW
                .iter()
                .map(|column| {
                    let value = match column.value {
                        ColumnValue::Text(value) => value(&insert.payment).into(),
                        ColumnValue::Int(value) => value(&insert.payment).into(),
                    };
                    (column.name.to_owned(), value)
                })
                .collect();
            let hold = insert.hold.as_ref();
            pay.insert("hold_id".into(), hold.map(|h| h.id.clone()).into());
            pay.insert("hold_account".into(), hold.map(|h| h.to.clone()).into());
            pay.insert("hold_kind".into(), hold.map(|h| h.kind.as_str()).into());
            pay.insert("check_target".into(), insert.check_target.into());
            pay.insert("settle_id".into(), insert.settle_at_once.clone().into());
            pay.insert("origin".into(), insert.origin.clone().into());
            Value::Object(pay)
        })
        .collect();
    Value::Array(pays).to_string()
}

/// On SQLite, the statements of a write that the group writer runs open this
/// savepoint first and release it last, so
/// that the writer can roll back just that write when one of them fails,
/// without trips of its own before and after it.
macro_rules! sqlite_savepoint {
    (open) => {
        "SAVEPOINT write; "
    };
    (close) => {
        "; RELEASE write"
    };
}

/// The ids of the pays due for settlement (`Store::settle_due`): pending,
/// reached an account at or before `$1` that is not suspended; the oldest
/// `$2`. `date_completed IS NULL` as in `due_payments`, for PostgreSQL's
/// index of open payments. SQLite's settlement reads it; on PostgreSQL the
/// function `settle_due` (`sql/postgres/functions/settle_due.sql`) runs the
/// same read (a test in `sqlite.rs` holds the two to each other, and the
/// store conformance tests to the same pays).
pub(crate) const SETTLEMENT_DUE_SQL: &str = "SELECT p.id FROM payments p \
     JOIN users u ON u.id = p.target_user_id \
     WHERE p.date_completed IS NULL AND p.status = 'pending' AND p.action = 'pay' \
     AND p.reached_account_at <= $1 AND NOT u.suspended \
     ORDER BY p.date_created LIMIT $2";

pub(crate) const SQLITE_SAVEPOINT_OPEN: &str = sqlite_savepoint!(open);
pub(crate) const SQLITE_SAVEPOINT_CLOSE: &str = sqlite_savepoint!(close);

/// SQLite has no data-modifying CTEs, but runs several statements sent at once
/// (one trip to its connection thread). Each write is guarded, so when the
/// debit finds the balance short (no row) nothing at all is written. They run
/// in a savepoint of their own (see `sqlite_savepoint!`), inside the caller's
/// transaction or the group writer's.
pub(crate) const SQLITE_HOLD_SQL: &str = concat!(
    sqlite_savepoint!(open),
    "UPDATE users SET balance_cents = balance_cents - $9 \
       WHERE id = $3 AND balance_cents >= $9 RETURNING balance_cents; ",
    sqlite_hold_rows!(),
    sqlite_savepoint!(close)
);

/// What a pay writes on SQLite once its debit (the statement before) took the
/// money: the row, the hold's two entries, the parties.
macro_rules! sqlite_hold_rows {
    () => {
        concat!(
            "INSERT INTO payments (",
            payment_columns!(),
            ") SELECT ",
            payment_placeholders!(),
            " WHERE changes() = 1; \
             INSERT INTO ledger_entries \
               (movement_id, kind, account, amount_cents, payment_id, created_at) \
               SELECT $18, $20, e.account, e.cents, $1, $14 \
               FROM (SELECT $3 AS account, -$9 AS cents UNION ALL SELECT $19, $9) AS e \
               WHERE EXISTS (SELECT 1 FROM payments WHERE id = $1); ",
            sqlite_parties!(),
            " AND EXISTS (SELECT 1 FROM payments WHERE id = $1) ON CONFLICT DO NOTHING"
        )
    };
}
use sqlite_hold_rows;

/// The parties of a new payment (`$1`), its actor and target account; the
/// caller ends the `WHERE` clause.
macro_rules! sqlite_parties {
    () => {
        "INSERT INTO payment_parties (user_id, date_created, payment_id) \
           SELECT id, $14, $1 FROM (SELECT $3 AS id UNION ALL SELECT $5) \
           WHERE id IS NOT NULL"
    };
}
use sqlite_parties;

/// The last statement of a write to an account named by id on SQLite: the
/// account, beside the actor's balance when the payment was written (NULL when
/// a pay was not covered); no row when there is no such account.
macro_rules! sqlite_recorded_to_account {
    () => {
        concat!(
            "; SELECT (SELECT balance_cents FROM users WHERE id = $3 \
                 AND EXISTS (SELECT 1 FROM payments WHERE id = $1)) AS actor_balance_cents, ",
            super::sql::user_columns!(),
            " FROM users WHERE id = $5"
        )
    };
}

/// A pay to an account named by id that was not read, on SQLite: as
/// `PG_HOLD_TO_ACCOUNT_SQL`, one trip to the writer that moves nothing unless
/// the account exists, and reads it back.
pub(crate) const SQLITE_HOLD_TO_ACCOUNT_SQL: &str = concat!(
    sqlite_savepoint!(open),
    "UPDATE users SET balance_cents = balance_cents - $9 \
       WHERE id = $3 AND balance_cents >= $9 AND EXISTS (SELECT 1 FROM users WHERE id = $5); ",
    sqlite_hold_rows!(),
    sqlite_recorded_to_account!(),
    sqlite_savepoint!(close)
);

pub(crate) const SQLITE_CHARGE_SQL: &str = concat!(
    sqlite_savepoint!(open),
    "INSERT INTO payments (",
    payment_columns!(),
    ") VALUES (",
    payment_placeholders!(),
    "); ",
    sqlite_parties!(),
    " ON CONFLICT DO NOTHING; \
     SELECT balance_cents FROM users WHERE id = $3",
    sqlite_savepoint!(close)
);

/// A charge to an account named by id that was not read, on SQLite: nothing
/// is written without the account.
pub(crate) const SQLITE_CHARGE_TO_ACCOUNT_SQL: &str = concat!(
    sqlite_savepoint!(open),
    "INSERT INTO payments (",
    payment_columns!(),
    ") SELECT ",
    payment_placeholders!(),
    " WHERE EXISTS (SELECT 1 FROM users WHERE id = $5); ",
    sqlite_parties!(),
    " AND EXISTS (SELECT 1 FROM payments WHERE id = $1) ON CONFLICT DO NOTHING",
    sqlite_recorded_to_account!(),
    sqlite_savepoint!(close)
);

/// What a new payment's statements did.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// The target account named by id does not exist; nothing was written.
    NoSuchTarget,
    /// The actor's balance afterwards (None: a pay was not covered, and
    /// nothing was written), with the target account when the statements
    /// read it.
    Written {
        actor_balance_cents: Option<i64>,
        target: Option<Box<super::User>>,
    },
}

impl Recorded {
    /// What a new payment's statements say by their last row (`None`: they
    /// returned none), which each backend reads with its own rows: `balance`
    /// reads the actor's balance alone, `to_account` the balance (NULL when a
    /// pay was not covered) beside the target account read with the write.
    pub(crate) fn from_last_row<R>(
        insert: &PaymentInsert,
        last: Option<&R>,
        balance: impl FnOnce(&R) -> Result<i64, super::StoreError>,
        to_account: impl FnOnce(&R) -> Result<(Option<i64>, super::User), super::StoreError>,
    ) -> Result<Self, super::StoreError> {
        if insert.check_target {
            let Some(row) = last else {
                return Ok(Self::NoSuchTarget);
            };
            let (actor_balance_cents, target) = to_account(row)?;
            return Ok(Self::Written {
                actor_balance_cents,
                target: Some(Box::new(target)),
            });
        }
        let actor_balance_cents = last.map(balance).transpose()?;
        if actor_balance_cents.is_none() && insert.hold.is_none() {
            return Err(super::StoreError::NotFound("user"));
        }
        Ok(Self::Written {
            actor_balance_cents,
            target: None,
        })
    }
}

/// A payment, charge or refund as stored. `amount_cents` is positive; `action`
/// tells the direction. Its words are read back as their types (see
/// `models.rs`), so a row with any other word fails to load instead of reaching
/// the rules.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Payment {
    pub id: String,
    pub kind: PaymentKind,
    pub actor_id: Option<String>,
    pub target_type: TargetType,
    pub target_user_id: Option<String>,
    pub target_email: Option<String>,
    pub target_phone: Option<String>,
    pub action: PaymentAction,
    pub amount_cents: i64,
    pub note: String,
    pub audience: Audience,
    pub status: PaymentStatus,
    pub medium: Medium,
    pub date_created: i64,
    pub date_completed: Option<i64>,
    /// When the target became an account (at creation or claim).
    pub reached_account_at: Option<i64>,
    pub refund_payment_id: Option<String>,
}

/// An Idempotency-Key presented with a new payment or a payment update.
#[derive(Debug, Clone)]
pub struct IdempotencyKey {
    pub owner_id: String,
    pub key: String,
    /// Digest of the parsed parameters.
    pub fingerprint: String,
    pub now: i64,
    /// Keys created before this time are forgotten.
    pub expired_before: i64,
}

/// A payment to insert, with what comes with it.
#[derive(Debug, Clone)]
pub struct PaymentInsert {
    pub payment: Payment,
    /// For a pay: the movement that holds its amount from its actor, as the
    /// ledger decided it. It is written only if the actor's balance covers it.
    pub hold: Option<Movement>,
    pub idempotency: Option<IdempotencyKey>,
    /// The target account (`payment.target_user_id`) was named by the request
    /// and not read: the store writes nothing unless it exists, and returns it.
    pub check_target: bool,
    /// For a pay due for settlement the moment it is made (a pay to an
    /// account under a settlement delay of 0): the movement id of its
    /// settlement, `@held` to the target at `date_created`. A store may settle
    /// it with the pay, in the same transaction, if the target is active then
    /// (PostgreSQL's pay batches do); otherwise the pay stays pending and the
    /// workers settle it at their next round, as any due pay.
    pub settle_at_once: Option<String>,
    /// The app whose token made it (SPEC §12: its events reach that app).
    pub origin: Option<String>,
}

impl PaymentInsert {
    /// Whether its hold moves its amount from its actor at its time: the
    /// only hold the new-payment statements write (they debit the actor).
    pub(crate) fn hold_is_from_actor(&self) -> bool {
        let p = &self.payment;
        self.hold.as_ref().is_some_and(|hold| {
            p.actor_id.as_deref() == Some(hold.from.as_str())
                && hold.cents == p.amount_cents
                && hold.at == p.date_created
        })
    }
}

/// What the store read of a payment's target account as it wrote the payment
/// (see `PaymentInsert::check_target`), with the actor's balance afterwards.
#[derive(Debug, sqlx::FromRow)]
pub struct RecordedToAccount {
    /// None when the actor's balance did not cover a pay.
    pub actor_balance_cents: Option<i64>,
    #[sqlx(flatten)]
    pub target: super::User,
}

/// A key as stored: what it was first used for and what that answered.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredIdempotencyKey {
    pub fingerprint: String,
    /// The payment made or changed; none while its first request is in flight.
    pub payment_id: Option<String>,
    pub balance_cents: Option<i64>,
}

#[derive(Debug)]
pub enum InsertOutcome {
    Created {
        payment: Payment,
        actor_balance_cents: i64,
        /// The target account, when the store read it (`check_target`).
        target: Option<Box<super::User>>,
    },
    /// `check_target`: no account has the target's id; nothing was written.
    NoSuchTarget,
    /// The actor's balance does not cover the hold; nothing was written.
    InsufficientFunds,
    /// The key was used before with the same parameters: the first result.
    Replayed {
        payment: Payment,
        actor_balance_cents: i64,
    },
    /// The key was used before with other parameters.
    KeyConflict,
}

/// A pending payment reaching a new status, with the money that moves with it.
#[derive(Debug, Clone)]
pub struct Transition {
    pub payment_id: String,
    pub status: PaymentStatus,
    pub at: i64,
    pub movement_id: String,
    /// What the movement is, written on its ledger entries.
    pub entry_kind: EntryKind,
    pub moves: Vec<Move>,
    /// A refund payment to insert and link from the payment.
    pub refund: Option<Payment>,
    /// Workers pass by payments another instance holds (PostgreSQL `SKIP LOCKED`).
    pub skip_locked: bool,
    /// Applies only while no account has claimed the payment (expiry must not
    /// overtake a claim that committed after the worker looked).
    pub unclaimed_only: bool,
    /// Applies only while this account is not suspended, as the database has
    /// it when the payment changes (a settlement must not credit an account
    /// suspended after the worker looked).
    pub only_if_active: Option<String>,
    /// Taken in the same transaction, so a committed change always has its key.
    pub idempotency: Option<IdempotencyKey>,
}

/// A pending pay to an account, to settle from the hold into that account.
#[derive(Debug, Clone)]
pub struct Settlement {
    pub payment_id: String,
    /// The ledger movement of the two `settle` entries.
    pub movement_id: String,
}

#[derive(Debug)]
pub enum TransitionOutcome {
    Applied {
        payment: Box<Payment>,
        refund: Option<Box<Payment>>,
    },
    /// The payment is no longer pending (or another worker holds it).
    NotPending,
    /// A debited balance is short; nothing changed.
    InsufficientFunds,
    /// The transition's Idempotency-Key was taken first; nothing changed.
    KeyTaken,
}

/// Which of a user's payments to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct PaymentFilter {
    pub owner_id: String,
    pub action: Option<PaymentAction>,
    pub actor_ids: Vec<String>,
    pub statuses: Vec<PaymentStatus>,
    /// Strict lower bound on `date_created`.
    pub after: Option<i64>,
    /// Strict upper bound on `(date_created, id)`; without an id, on the time alone.
    pub before: Option<(i64, Option<String>)>,
    pub limit: i64,
}

/// A pending payment whose time has come, with its target account's state.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DuePayment {
    #[sqlx(flatten)]
    pub payment: Payment,
    pub target_suspended: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct UserSearch {
    /// The lower-case text usernames and names must contain.
    pub needle: String,
    /// `needle` as a `LIKE` pattern (already escaped).
    pub pattern: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

/// The first three characters of a search needle, the key of the search index
/// (`user_search_trigrams`), or `None` when it is shorter.
pub(crate) fn first_trigram(needle: &str) -> Option<&str> {
    let end = needle
        .char_indices()
        .nth(3)
        .map_or(needle.len(), |(i, _)| i);
    (needle.chars().count() >= 3).then(|| &needle[..end])
}

/// `columns` with each name prefixed by a table alias.
pub(crate) fn prefixed(columns: &str, alias: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literals the statements are built from say what `PAYMENT_ROW`
    /// says: its names in order, and a placeholder for each.
    #[test]
    fn the_payment_rows_literals_are_its_description() {
        let names: Vec<&str> = PAYMENT_ROW.iter().map(|column| column.name).collect();
        let listed: Vec<&str> = payment_columns!().split(',').map(str::trim).collect();
        assert_eq!(listed, names);
        let placeholders: Vec<String> = (1..=PAYMENT_ROW.len()).map(|i| format!("${i}")).collect();
        assert_eq!(payment_placeholders!(), placeholders.join(", "));
        assert_eq!(payment_columns_of("p"), prefixed(payment_columns!(), "p"));
    }

    /// The hot statements as they are sent, whole (`tests/golden/hot_statements.txt`).
    /// After a deliberate change, `TALLY_BLESS_GOLDEN=1 cargo test --lib
    /// golden` writes them anew, and the diff shows what changed.
    #[test]
    fn the_hot_statements_are_their_golden_text() -> std::io::Result<()> {
        let statements: [(&str, &str); 10] = [
            ("PG_HOLD_SQL", PG_HOLD_SQL),
            ("PG_HOLD_TO_ACCOUNT_SQL", PG_HOLD_TO_ACCOUNT_SQL),
            ("PG_CHARGE_SQL", PG_CHARGE_SQL),
            ("PG_CHARGE_TO_ACCOUNT_SQL", PG_CHARGE_TO_ACCOUNT_SQL),
            ("PG_HOLDS_SQL", PG_HOLDS_SQL),
            ("SQLITE_HOLD_SQL", SQLITE_HOLD_SQL),
            ("SQLITE_HOLD_TO_ACCOUNT_SQL", SQLITE_HOLD_TO_ACCOUNT_SQL),
            ("SQLITE_CHARGE_SQL", SQLITE_CHARGE_SQL),
            ("SQLITE_CHARGE_TO_ACCOUNT_SQL", SQLITE_CHARGE_TO_ACCOUNT_SQL),
            ("SETTLEMENT_DUE_SQL", SETTLEMENT_DUE_SQL),
        ];
        let text: String = statements
            .iter()
            .map(|(name, sql)| format!("-- {name}\n{sql}\n\n"))
            .collect();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/hot_statements.txt"
        );
        if std::env::var_os("TALLY_BLESS_GOLDEN").is_some() {
            std::fs::write(path, &text)?;
        }
        assert_eq!(text, std::fs::read_to_string(path)?);
        Ok(())
    }
}
