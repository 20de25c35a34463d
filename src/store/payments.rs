//! Storage of payments, their refunds and idempotency keys, and the reads of the
//! social graph. Every state change is one guarded statement (`WHERE status =
//! 'pending'`) in the same transaction as the money it moves, so a payment
//! changes state exactly once however many instances race for it.

use super::{Movement, StoreError, User};
use crate::domain::{Audience, Medium, PaymentAction, PaymentKind, PaymentStatus};
use async_trait::async_trait;

macro_rules! payment_columns {
    () => {
        "id, kind, actor_id, target_type, target_user_id, target_email, target_phone, \
         action, amount_cents, note, audience, status, medium, date_created, date_completed, \
         reached_account_at, refund_payment_id"
    };
}

pub const PAYMENT_COLUMNS: &str = payment_columns!();

/// A new payment's movement, as statements both backends share the binds of:
/// `$1`..`$17` the payment row in `PAYMENT_COLUMNS` order (`$3` the actor, `$5`
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
       WHERE id = $3 AND balance_cents >= $9 RETURNING balance_cents), \
     made AS (INSERT INTO payments (",
    payment_columns!(),
    ") SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17 \
       FROM debit RETURNING id), \
     hold AS (INSERT INTO ledger_entries \
       (movement_id, kind, account, amount_cents, payment_id, created_at) \
       SELECT $18, $20, e.account, e.cents, made.id, $14 FROM made \
       CROSS JOIN (VALUES ($3, -$9), ($19, $9)) AS e (account, cents)), \
     parties AS (INSERT INTO payment_parties (user_id, date_created, payment_id) \
       SELECT u.id, $14, made.id FROM made CROSS JOIN (VALUES ($3), ($5)) AS u (id) \
       WHERE u.id IS NOT NULL ON CONFLICT DO NOTHING) \
     SELECT balance_cents FROM debit"
);

/// A charge moves nothing: the row, its parties, and the actor's balance.
pub(crate) const PG_CHARGE_SQL: &str = concat!(
    "WITH made AS (INSERT INTO payments (",
    payment_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
       RETURNING id), \
     parties AS (INSERT INTO payment_parties (user_id, date_created, payment_id) \
       SELECT u.id, $14, made.id FROM made CROSS JOIN (VALUES ($3), ($5)) AS u (id) \
       WHERE u.id IS NOT NULL ON CONFLICT DO NOTHING) \
     SELECT balance_cents FROM users WHERE id = $3"
);

/// SQLite has no data-modifying CTEs, but runs several statements sent at once
/// (one trip to its connection thread). They run inside the caller's `BEGIN
/// IMMEDIATE`: when the debit returns no row, the caller rolls all back.
pub(crate) const SQLITE_HOLD_SQL: &str = concat!(
    "UPDATE users SET balance_cents = balance_cents - $9 \
       WHERE id = $3 AND balance_cents >= $9 RETURNING balance_cents; \
     INSERT INTO payments (",
    payment_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17); \
     INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, created_at) \
       VALUES ($18, $20, $3, -$9, $1, $14), ($18, $20, $19, $9, $1, $14); \
     INSERT INTO payment_parties (user_id, date_created, payment_id) \
       SELECT id, $14, $1 FROM (SELECT $3 AS id UNION ALL SELECT $5) \
       WHERE id IS NOT NULL ON CONFLICT DO NOTHING"
);

pub(crate) const SQLITE_CHARGE_SQL: &str = concat!(
    "INSERT INTO payments (",
    payment_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17); \
     INSERT INTO payment_parties (user_id, date_created, payment_id) \
       SELECT id, $14, $1 FROM (SELECT $3 AS id UNION ALL SELECT $5) \
       WHERE id IS NOT NULL ON CONFLICT DO NOTHING; \
     SELECT balance_cents FROM users WHERE id = $3"
);

/// A payment, charge or refund as stored. `amount_cents` is positive; `action`
/// tells the direction. Its words are read back as their types, so a row with
/// any other word fails to load instead of reaching the rules.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Payment {
    pub id: String,
    #[sqlx(try_from = "String")]
    pub kind: PaymentKind,
    pub actor_id: Option<String>,
    /// `user`, `email` or `phone`.
    pub target_type: String,
    pub target_user_id: Option<String>,
    pub target_email: Option<String>,
    pub target_phone: Option<String>,
    #[sqlx(try_from = "String")]
    pub action: PaymentAction,
    pub amount_cents: i64,
    pub note: String,
    #[sqlx(try_from = "String")]
    pub audience: Audience,
    #[sqlx(try_from = "String")]
    pub status: PaymentStatus,
    #[sqlx(try_from = "String")]
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
    },
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

/// `cents` going from one ledger account to another (a user id or an `@` system
/// account). A user account is debited only if its balance covers it.
#[derive(Debug, Clone)]
pub struct Move {
    pub from: String,
    pub to: String,
    pub cents: i64,
}

/// A pending payment reaching a new status, with the money that moves with it.
#[derive(Debug, Clone)]
pub struct Transition {
    pub payment_id: String,
    pub status: PaymentStatus,
    pub at: i64,
    pub movement_id: String,
    /// The ledger entries' kind (`settle`, `refund`, `charge`).
    pub entry_kind: &'static str,
    pub moves: Vec<Move>,
    /// A refund payment to insert and link from the payment.
    pub refund: Option<Payment>,
    /// Whose balance to report afterwards.
    pub balance_of: Option<String>,
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
        balance_cents: Option<i64>,
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

#[async_trait]
pub trait PaymentStore: Send + Sync {
    /// Inserts a payment; for a pay, moves the amount from the actor to `@held`
    /// with a guarded debit. With a key, records it or replays its first result.
    async fn insert_payment(&self, insert: &PaymentInsert) -> Result<InsertOutcome, StoreError>;

    /// Moves a pending payment to a new status with its money, in one transaction.
    async fn apply_transition(
        &self,
        transition: &Transition,
    ) -> Result<TransitionOutcome, StoreError>;

    /// Settles pending pays, all in one transaction: each one still pending,
    /// held by no other worker (PostgreSQL `SKIP LOCKED`) and whose target
    /// account is not suspended as the database has it then, becomes settled
    /// with its `settle` movement from `@held`; the others stay as they are.
    /// Returns the ids of those settled.
    async fn settle_payments(
        &self,
        settlements: &[Settlement],
        at: i64,
    ) -> Result<Vec<String>, StoreError>;

    async fn find_payments(&self, ids: &[String]) -> Result<Vec<Payment>, StoreError>;

    /// The owner's key, unless it was created before `created_since`.
    async fn find_idempotency_key(
        &self,
        owner_id: &str,
        key: &str,
        created_since: i64,
    ) -> Result<Option<StoredIdempotencyKey>, StoreError>;

    async fn list_payments(&self, filter: &PaymentFilter) -> Result<Vec<Payment>, StoreError>;

    /// Pending pays that reached an account at or before `settle_by`, and
    /// pending payments to unclaimed addresses made at or before `expire_by`.
    async fn due_payments(
        &self,
        settle_by: i64,
        expire_by: i64,
        limit: i64,
    ) -> Result<Vec<DuePayment>, StoreError>;

    /// Points pending payments to this e-mail or phone at the user (unless the
    /// user made them), as of `now`. Returns how many were claimed.
    async fn claim_payments(
        &self,
        user_id: &str,
        email: Option<&str>,
        phone: Option<&str>,
        now: i64,
    ) -> Result<u64, StoreError>;

    async fn find_users(&self, ids: &[String]) -> Result<Vec<User>, StoreError>;
    async fn search_users(&self, search: &UserSearch) -> Result<Vec<User>, StoreError>;
    /// A user's friends ordered by id, after the id `after`.
    async fn list_friends(
        &self,
        user_id: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<User>, StoreError>;
    async fn count_friends(&self, user_id: &str) -> Result<i64, StoreError>;
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

macro_rules! impl_payment_store {
    ($store:ty) => {
        impl $store {
            /// Takes an Idempotency-Key for this transaction, forgetting an
            /// expired one first. False if the key is held: one atomic statement
            /// takes it, so a racing request waits for this transaction and then
            /// finds it taken.
            async fn take_idempotency_key(
                tx: &mut sqlx::Transaction<'static, Backend>,
                key: &$crate::store::IdempotencyKey,
            ) -> Result<bool, StoreError> {
                sqlx::query(
                    "DELETE FROM idempotency_keys \
                     WHERE owner_id = $1 AND key = $2 AND created_at < $3",
                )
                .bind(&key.owner_id)
                .bind(&key.key)
                .bind(key.expired_before)
                .execute(&mut **tx)
                .await?;
                let taken = sqlx::query(
                    "INSERT INTO idempotency_keys (owner_id, key, fingerprint, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                )
                .bind(&key.owner_id)
                .bind(&key.key)
                .bind(&key.fingerprint)
                .bind(key.now)
                .execute(&mut **tx)
                .await?;
                Ok(taken.rows_affected() == 1)
            }

            /// Records what a key's first request changed and answered.
            async fn complete_idempotency_key(
                tx: &mut sqlx::Transaction<'static, Backend>,
                key: &$crate::store::IdempotencyKey,
                payment_id: &str,
                balance_cents: Option<i64>,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "UPDATE idempotency_keys SET payment_id = $3, balance_cents = $4 \
                     WHERE owner_id = $1 AND key = $2",
                )
                .bind(&key.owner_id)
                .bind(&key.key)
                .bind(payment_id)
                .bind(balance_cents)
                .execute(&mut **tx)
                .await?;
                Ok(())
            }

            async fn insert_payment_row(
                tx: &mut sqlx::Transaction<'static, Backend>,
                p: &$crate::store::Payment,
            ) -> Result<(), StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "INSERT INTO payments ({}) VALUES \
                         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
                        $crate::store::payments::PAYMENT_COLUMNS
                    )
                });
                Self::bind_payment(sqlx::query(&SQL), p)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            /// Binds `$1`..`$17`: the payment row in `PAYMENT_COLUMNS` order.
            fn bind_payment<'q>(
                query: sqlx::query::Query<'q, Backend, <Backend as sqlx::Database>::Arguments<'q>>,
                p: &'q $crate::store::Payment,
            ) -> sqlx::query::Query<'q, Backend, <Backend as sqlx::Database>::Arguments<'q>> {
                query
                    .bind(&p.id)
                    .bind(p.kind.as_str())
                    .bind(&p.actor_id)
                    .bind(&p.target_type)
                    .bind(&p.target_user_id)
                    .bind(&p.target_email)
                    .bind(&p.target_phone)
                    .bind(p.action.as_str())
                    .bind(p.amount_cents)
                    .bind(&p.note)
                    .bind(p.audience.as_str())
                    .bind(p.status.as_str())
                    .bind(p.medium.as_str())
                    .bind(p.date_created)
                    .bind(p.date_completed)
                    .bind(p.reached_account_at)
                    .bind(&p.refund_payment_id)
            }

            /// Writes a new payment with its parties and, for a pay, the hold:
            /// `HOLD_SQL` or `CHARGE_SQL` in one call. Returns the actor's
            /// balance afterwards, or None when a pay is not covered (the caller
            /// then rolls back: on SQLite the rows were already written).
            async fn record_payment<'e, E>(
                executor: E,
                insert: &$crate::store::PaymentInsert,
            ) -> Result<Option<i64>, StoreError>
            where
                E: sqlx::Executor<'e, Database = Backend>,
            {
                let p = &insert.payment;
                let sql = if insert.hold.is_some() {
                    HOLD_SQL
                } else {
                    CHARGE_SQL
                };
                let mut query = Self::bind_payment(sqlx::query(sql), p);
                if let Some(hold) = &insert.hold {
                    // The statement debits the payment's actor by its amount at
                    // its time; a hold of anything else is not what it writes.
                    if p.actor_id.as_deref() != Some(hold.from.as_str())
                        || hold.cents != p.amount_cents
                        || hold.at != p.date_created
                    {
                        return Err(StoreError::Unexpected(anyhow::anyhow!(
                            "a hold must move the payment's amount from its actor"
                        )));
                    }
                    query = query.bind(&hold.id).bind(&hold.to).bind(hold.kind);
                }
                // Every row, so that each of SQLite's statements runs.
                let balance = match query.fetch_all(executor).await?.pop() {
                    Some(row) => Some(sqlx::Row::try_get::<i64, _>(&row, 0)?),
                    None => None,
                };
                if balance.is_none() && insert.hold.is_none() {
                    return Err(StoreError::NotFound("user"));
                }
                Ok(balance)
            }

            async fn payment_in(
                tx: &mut sqlx::Transaction<'static, Backend>,
                id: &str,
            ) -> Result<$crate::store::Payment, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "SELECT {} FROM payments WHERE id = $1",
                        $crate::store::payments::PAYMENT_COLUMNS
                    )
                });
                Ok(sqlx::query_as::<_, $crate::store::Payment>(&SQL)
                    .bind(id)
                    .fetch_one(&mut **tx)
                    .await?)
            }

            async fn balance_in(
                tx: &mut sqlx::Transaction<'static, Backend>,
                user_id: &str,
            ) -> Result<i64, StoreError> {
                sqlx::query_scalar::<_, i64>("SELECT balance_cents FROM users WHERE id = $1")
                    .bind(user_id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or(StoreError::NotFound("user"))
            }

            async fn ledger_move(
                tx: &mut sqlx::Transaction<'static, Backend>,
                movement_id: &str,
                kind: &str,
                payment_id: &str,
                at: i64,
                m: &$crate::store::Move,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO ledger_entries \
                     (movement_id, kind, account, amount_cents, payment_id, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6), ($1, $2, $7, $8, $5, $6)",
                )
                .bind(movement_id)
                .bind(kind)
                .bind(&m.from)
                .bind(-m.cents)
                .bind(payment_id)
                .bind(at)
                .bind(&m.to)
                .bind(m.cents)
                .execute(&mut **tx)
                .await?;
                Ok(())
            }

            /// Applies net balance changes in user-id order, so concurrent
            /// transactions lock user rows in one order and cannot deadlock.
            /// Returns false if a debit is not covered.
            async fn apply_balances(
                tx: &mut sqlx::Transaction<'static, Backend>,
                moves: &[$crate::store::Move],
            ) -> Result<bool, StoreError> {
                let mut net: std::collections::BTreeMap<&str, i64> = Default::default();
                for m in moves {
                    *net.entry(m.from.as_str()).or_default() -= m.cents;
                    *net.entry(m.to.as_str()).or_default() += m.cents;
                }
                for (account, delta) in net {
                    if account.starts_with('@') || delta == 0 {
                        continue;
                    }
                    let done = sqlx::query(
                        "UPDATE users SET balance_cents = balance_cents + $1 \
                         WHERE id = $2 AND balance_cents + $1 >= 0",
                    )
                    .bind(delta)
                    .bind(account)
                    .execute(&mut **tx)
                    .await?;
                    if done.rows_affected() == 0 {
                        return Ok(false);
                    }
                }
                Ok(true)
            }

            async fn users_where(
                &self,
                condition: &str,
                binds: &[String],
            ) -> Result<Vec<$crate::store::User>, StoreError> {
                let mut query = sqlx::QueryBuilder::<Backend>::new(format!(
                    "SELECT {} FROM users WHERE {condition} (",
                    $crate::store::sql::USER_COLUMNS
                ));
                let mut list = query.separated(", ");
                for value in binds {
                    list.push_bind(value.clone());
                }
                query.push(")");
                Ok(query
                    .build_query_as::<$crate::store::User>()
                    .fetch_all(self.reader())
                    .await?)
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::PaymentStore for $store {
            #[tracing::instrument(skip_all, fields(payment_id = %insert.payment.id))]
            async fn insert_payment(
                &self,
                insert: &$crate::store::PaymentInsert,
            ) -> Result<$crate::store::InsertOutcome, StoreError> {
                use $crate::store::InsertOutcome;
                let p = &insert.payment;
                p.actor_id.as_deref().ok_or(StoreError::NotFound("actor"))?;
                let created = |balance: Option<i64>| match balance {
                    Some(balance) => InsertOutcome::Created {
                        payment: p.clone(),
                        actor_balance_cents: balance,
                    },
                    None => InsertOutcome::InsufficientFunds,
                };
                let Some(key) = &insert.idempotency else {
                    if let Some(pool) = self.statement_pool() {
                        return Ok(created(Self::record_payment(pool, insert).await?));
                    }
                    let mut tx = self.write().await?;
                    let balance = Self::record_payment(&mut *tx, insert).await?;
                    // A short balance rolls back at once: the row locks go now.
                    match balance {
                        Some(_) => tx.commit().await?,
                        None => tx.rollback().await?,
                    }
                    return Ok(created(balance));
                };
                let mut tx = self.write().await?;
                if !Self::take_idempotency_key(&mut tx, key).await? {
                    let (fingerprint, payment_id, balance): (String, Option<String>, Option<i64>) =
                        sqlx::query_as(
                            "SELECT fingerprint, payment_id, balance_cents \
                             FROM idempotency_keys WHERE owner_id = $1 AND key = $2",
                        )
                        .bind(&key.owner_id)
                        .bind(&key.key)
                        .fetch_one(&mut *tx)
                        .await?;
                    let outcome = match payment_id {
                        Some(id) if fingerprint == key.fingerprint => InsertOutcome::Replayed {
                            payment: Self::payment_in(&mut tx, &id).await?,
                            actor_balance_cents: balance.unwrap_or(0),
                        },
                        _ => InsertOutcome::KeyConflict,
                    };
                    tx.commit().await?;
                    return Ok(outcome);
                }
                let Some(balance) = Self::record_payment(&mut *tx, insert).await? else {
                    // Rolled back now, not when the connection is next used:
                    // the key and the row locks go at once.
                    tx.rollback().await?;
                    return Ok(InsertOutcome::InsufficientFunds);
                };
                sqlx::query(
                    "UPDATE idempotency_keys SET payment_id = $3, balance_cents = $4 \
                     WHERE owner_id = $1 AND key = $2",
                )
                .bind(&key.owner_id)
                .bind(&key.key)
                .bind(&p.id)
                .bind(balance)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(created(Some(balance)))
            }

            #[tracing::instrument(skip_all, fields(payment_id = %t.payment_id, status = t.status.as_str()))]
            async fn apply_transition(
                &self,
                t: &$crate::store::Transition,
            ) -> Result<$crate::store::TransitionOutcome, StoreError> {
                use $crate::store::TransitionOutcome;
                let mut tx = self.write().await?;
                if let Some(key) = &t.idempotency {
                    if !Self::take_idempotency_key(&mut tx, key).await? {
                        tx.rollback().await?;
                        return Ok(TransitionOutcome::KeyTaken);
                    }
                }
                if t.skip_locked {
                    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                        format!(
                            "SELECT id FROM payments WHERE id = $1 AND status = 'pending'{SKIP_LOCKED}"
                        )
                    });
                    let free: Option<String> = sqlx::query_scalar(&SQL)
                        .bind(&t.payment_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if free.is_none() {
                        tx.rollback().await?;
                        return Ok(TransitionOutcome::NotPending);
                    }
                }
                // The refund row exists before the payment points at it; if the
                // guarded update below finds the payment settled, all rolls back.
                if let Some(refund) = &t.refund {
                    Self::insert_payment_row(&mut tx, refund).await?;
                }
                let sql = format!(
                    "UPDATE payments SET status = $2, date_completed = $3, \
                     refund_payment_id = $4 WHERE id = $1 AND status = 'pending'{}{}",
                    if t.unclaimed_only { " AND target_user_id IS NULL" } else { "" },
                    if t.only_if_active.is_some() {
                        " AND EXISTS (SELECT 1 FROM users WHERE id = $5 AND NOT suspended)"
                    } else {
                        ""
                    }
                );
                let mut update = sqlx::query(&sql)
                    .bind(&t.payment_id)
                    .bind(t.status.as_str())
                    .bind(t.at)
                    .bind(t.refund.as_ref().map(|r| r.id.clone()));
                if let Some(user_id) = &t.only_if_active {
                    update = update.bind(user_id);
                }
                let changed = update.execute(&mut *tx).await?;
                // Early answers roll back at once (a dropped transaction would
                // keep its row locks until its connection is next used).
                if changed.rows_affected() == 0 {
                    tx.rollback().await?;
                    return Ok(TransitionOutcome::NotPending);
                }
                if !Self::apply_balances(&mut tx, &t.moves).await? {
                    tx.rollback().await?;
                    return Ok(TransitionOutcome::InsufficientFunds);
                }
                for m in &t.moves {
                    Self::ledger_move(&mut tx, &t.movement_id, t.entry_kind, &t.payment_id, t.at, m)
                        .await?;
                }
                let payment = Self::payment_in(&mut tx, &t.payment_id).await?;
                let balance_cents = match &t.balance_of {
                    Some(user_id) => Some(Self::balance_in(&mut tx, user_id).await?),
                    None => None,
                };
                if let Some(key) = &t.idempotency {
                    Self::complete_idempotency_key(&mut tx, key, &t.payment_id, balance_cents)
                        .await?;
                }
                tx.commit().await?;
                Ok(TransitionOutcome::Applied {
                    payment: Box::new(payment),
                    refund: t.refund.clone().map(Box::new),
                    balance_cents,
                })
            }

            async fn find_idempotency_key(
                &self,
                owner_id: &str,
                key: &str,
                created_since: i64,
            ) -> Result<Option<$crate::store::StoredIdempotencyKey>, StoreError> {
                Ok(sqlx::query_as(
                    "SELECT fingerprint, payment_id, balance_cents FROM idempotency_keys \
                     WHERE owner_id = $1 AND key = $2 AND created_at >= $3",
                )
                .bind(owner_id)
                .bind(key)
                .bind(created_since)
                .fetch_optional(self.reader())
                .await?)
            }

            #[tracing::instrument(skip_all, fields(count = settlements.len()))]
            async fn settle_payments(
                &self,
                settlements: &[$crate::store::Settlement],
                at: i64,
            ) -> Result<Vec<String>, StoreError> {
                if settlements.is_empty() {
                    return Ok(Vec::new());
                }
                let push_ids = |query: &mut sqlx::QueryBuilder<'_, Backend>| {
                    let mut list = query.separated(", ");
                    for s in settlements {
                        list.push_bind(s.payment_id.clone());
                    }
                };
                let mut tx = self.write().await?;
                if let Some((head, tail)) = LOCK_SETTLED_TARGETS {
                    let mut lock = sqlx::QueryBuilder::<Backend>::new(head);
                    push_ids(&mut lock);
                    lock.push(tail);
                    lock.build().fetch_all(&mut *tx).await?;
                }
                let mut update = sqlx::QueryBuilder::<Backend>::new(
                    "UPDATE payments SET status = 'settled', date_completed = ",
                );
                update
                    .push_bind(at)
                    .push(" WHERE id IN (SELECT id FROM payments WHERE id IN (");
                push_ids(&mut update);
                update.push(format!(
                    ") AND status = 'pending'{SKIP_LOCKED}) \
                     AND status = 'pending' AND action = 'pay' \
                     AND EXISTS (SELECT 1 FROM users u \
                                 WHERE u.id = payments.target_user_id AND NOT u.suspended) \
                     RETURNING id, target_user_id, amount_cents"
                ));
                let settled: Vec<(String, String, i64)> =
                    update.build_query_as().fetch_all(&mut *tx).await?;
                if settled.is_empty() {
                    tx.rollback().await?;
                    return Ok(Vec::new());
                }
                let mut credits: std::collections::BTreeMap<&str, i64> = Default::default();
                for (_, target, cents) in &settled {
                    *credits.entry(target.as_str()).or_default() += cents;
                }
                let mut credit = sqlx::QueryBuilder::<Backend>::new(
                    "UPDATE users SET balance_cents = balance_cents + CASE id",
                );
                for (account, cents) in &credits {
                    credit
                        .push(" WHEN ")
                        .push_bind(account.to_string())
                        .push(" THEN ")
                        .push_bind(*cents);
                }
                credit.push(" END WHERE id IN (");
                let mut list = credit.separated(", ");
                for account in credits.keys() {
                    list.push_bind(account.to_string());
                }
                credit.push(")");
                credit.build().execute(&mut *tx).await?;
                let movements: std::collections::HashMap<&str, &str> = settlements
                    .iter()
                    .map(|s| (s.payment_id.as_str(), s.movement_id.as_str()))
                    .collect();
                let mut entries = sqlx::QueryBuilder::<Backend>::new(
                    "INSERT INTO ledger_entries \
                     (movement_id, kind, account, amount_cents, payment_id, created_at) ",
                );
                let mut rows = Vec::with_capacity(settled.len() * 2);
                for (id, target, cents) in &settled {
                    let movement = *movements
                        .get(id.as_str())
                        .ok_or(StoreError::NotFound("settlement"))?;
                    rows.push((movement, $crate::store::accounts::HELD, -cents, id));
                    rows.push((movement, target.as_str(), *cents, id));
                }
                entries.push_values(rows, |mut row, (movement, account, cents, id)| {
                    row.push_bind(movement.to_owned())
                        .push_bind("settle")
                        .push_bind(account.to_owned())
                        .push_bind(cents)
                        .push_bind(id.clone())
                        .push_bind(at);
                });
                entries.build().execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(settled.into_iter().map(|(id, _, _)| id).collect())
            }

            #[tracing::instrument(skip_all, fields(count = ids.len()))]
            async fn find_payments(
                &self,
                ids: &[String],
            ) -> Result<Vec<$crate::store::Payment>, StoreError> {
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "SELECT {} FROM payments WHERE id IN (",
                        $crate::store::payments::PAYMENT_COLUMNS
                    )
                });
                let mut query = sqlx::QueryBuilder::<Backend>::new(SQL.as_str());
                let mut list = query.separated(", ");
                for id in ids {
                    list.push_bind(id.clone());
                }
                query.push(")");
                Ok(query
                    .build_query_as::<$crate::store::Payment>()
                    .fetch_all(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn list_payments(
                &self,
                f: &$crate::store::PaymentFilter,
            ) -> Result<Vec<$crate::store::Payment>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "SELECT {} FROM payment_parties pp JOIN payments p ON p.id = pp.payment_id \
                         WHERE pp.user_id = ",
                        $crate::store::payments::prefixed(
                            $crate::store::payments::PAYMENT_COLUMNS,
                            "p"
                        )
                    )
                });
                let mut query = sqlx::QueryBuilder::<Backend>::new(SQL.as_str());
                query.push_bind(f.owner_id.clone());
                if let Some(after) = f.after {
                    query.push(" AND pp.date_created > ").push_bind(after);
                }
                match &f.before {
                    // A row comparison, so both databases walk the primary key
                    // (user_id, date_created, payment_id) straight to the spot.
                    Some((at, Some(id))) => {
                        query
                            .push(" AND (pp.date_created, pp.payment_id) < (")
                            .push_bind(*at)
                            .push(", ")
                            .push_bind(id.clone())
                            .push(")");
                    }
                    Some((at, None)) => {
                        query.push(" AND pp.date_created < ").push_bind(*at);
                    }
                    None => {}
                }
                if let Some(action) = f.action {
                    query.push(" AND p.action = ").push_bind(action.as_str());
                }
                if !f.actor_ids.is_empty() {
                    query.push(" AND p.actor_id IN (");
                    let mut list = query.separated(", ");
                    for id in &f.actor_ids {
                        list.push_bind(id.clone());
                    }
                    query.push(")");
                }
                if !f.statuses.is_empty() {
                    query.push(" AND p.status IN (");
                    let mut list = query.separated(", ");
                    for status in &f.statuses {
                        list.push_bind(status.as_str());
                    }
                    query.push(")");
                }
                query
                    .push(" ORDER BY pp.date_created DESC, pp.payment_id DESC LIMIT ")
                    .push_bind(f.limit);
                Ok(query
                    .build_query_as::<$crate::store::Payment>()
                    .fetch_all(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn due_payments(
                &self,
                settle_by: i64,
                expire_by: i64,
                limit: i64,
            ) -> Result<Vec<$crate::store::DuePayment>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "SELECT {}, u.suspended AS target_suspended FROM payments p \
                         LEFT JOIN users u ON u.id = p.target_user_id \
                         WHERE p.status = 'pending' AND ( \
                           (p.action = 'pay' AND p.target_user_id IS NOT NULL \
                             AND p.reached_account_at <= $1) \
                           OR (p.target_user_id IS NULL AND p.date_created <= $2)) \
                         ORDER BY p.date_created LIMIT $3",
                        $crate::store::payments::prefixed(
                            $crate::store::payments::PAYMENT_COLUMNS,
                            "p"
                        )
                    )
                });
                Ok(sqlx::query_as::<_, $crate::store::DuePayment>(&SQL)
                    .bind(settle_by)
                    .bind(expire_by)
                    .bind(limit)
                    .fetch_all(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all, fields(user_id))]
            async fn claim_payments(
                &self,
                user_id: &str,
                email: Option<&str>,
                phone: Option<&str>,
                now: i64,
            ) -> Result<u64, StoreError> {
                if email.is_none() && phone.is_none() {
                    return Ok(0);
                }
                let mut tx = self.write().await?;
                let claimed: Vec<(String, i64)> = sqlx::query_as(
                    "UPDATE payments SET target_user_id = $1, reached_account_at = $4 \
                     WHERE status = 'pending' AND kind = 'payment' AND target_user_id IS NULL \
                       AND actor_id <> $1 \
                       AND ((target_email IS NOT NULL AND target_email = $2) \
                         OR (target_phone IS NOT NULL AND target_phone = $3)) \
                     RETURNING id, date_created",
                )
                .bind(user_id)
                .bind(email)
                .bind(phone)
                .bind(now)
                .fetch_all(&mut *tx)
                .await?;
                for (id, date_created) in &claimed {
                    sqlx::query(
                        "INSERT INTO payment_parties (user_id, date_created, payment_id) \
                         VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    )
                    .bind(user_id)
                    .bind(date_created)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(claimed.len() as u64)
            }

            #[tracing::instrument(skip_all, fields(count = ids.len()))]
            async fn find_users(
                &self,
                ids: &[String],
            ) -> Result<Vec<$crate::store::User>, StoreError> {
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                self.users_where("id IN", ids).await
            }

            #[tracing::instrument(skip_all)]
            async fn search_users(
                &self,
                s: &$crate::store::UserSearch,
            ) -> Result<Vec<$crate::store::User>, StoreError> {
                let Some(trigram) = $crate::store::payments::first_trigram(&s.needle) else {
                    // Shorter than a trigram: no index can narrow it, read every user.
                    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                        let columns = $crate::store::sql::USER_COLUMNS;
                        format!(
                            "SELECT {columns} FROM users WHERE suspended = FALSE AND ( \
                               lower(username) LIKE $1 ESCAPE '\\' \
                               OR lower(first_name || ' ' || last_name) LIKE $1 ESCAPE '\\' \
                               OR (email = $2 AND email_verified) OR (phone = $3 AND phone_verified)) \
                             ORDER BY lower(username), id LIMIT $4 OFFSET $5"
                        )
                    });
                    return Ok(sqlx::query_as::<_, $crate::store::User>(&SQL)
                        .bind(&s.pattern)
                        .bind(&s.email)
                        .bind(&s.phone)
                        .bind(s.limit)
                        .bind(s.offset)
                        .fetch_all(self.reader())
                        .await?);
                };
                // Every name that contains the needle contains its first trigram:
                // walk that trigram's index entries in listing order, keep the
                // users the full condition matches and stop once `offset + limit`
                // are found; add the few e-mail and phone matches; page the union.
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    let columns = $crate::store::sql::USER_COLUMNS;
                    format!(
                        "SELECT {columns} FROM ( \
                           SELECT * FROM ( \
                             SELECT {} FROM user_search_trigrams t JOIN users u ON u.id = t.user_id \
                             WHERE t.trigram = $6 AND u.suspended = FALSE \
                               AND (lower(u.username) LIKE $1 ESCAPE '\\' \
                                 OR lower(u.first_name || ' ' || u.last_name) LIKE $1 ESCAPE '\\') \
                             ORDER BY t.sort_key, t.user_id LIMIT $7) named \
                           UNION \
                           SELECT {columns} FROM users WHERE suspended = FALSE \
                             AND ((email = $2 AND email_verified) OR (phone = $3 AND phone_verified)) \
                         ) found ORDER BY lower(username), id LIMIT $4 OFFSET $5",
                        $crate::store::payments::prefixed(columns, "u")
                    )
                });
                Ok(sqlx::query_as::<_, $crate::store::User>(&SQL)
                    .bind(&s.pattern)
                    .bind(&s.email)
                    .bind(&s.phone)
                    .bind(s.limit)
                    .bind(s.offset)
                    .bind(trigram)
                    .bind(s.limit.saturating_add(s.offset))
                    .fetch_all(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all, fields(user_id))]
            async fn list_friends(
                &self,
                user_id: &str,
                after: Option<&str>,
                limit: i64,
            ) -> Result<Vec<$crate::store::User>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "SELECT {} FROM friendships f JOIN users u ON u.id = f.friend_id \
                         WHERE f.user_id = $1 AND f.friend_id > $2 ORDER BY f.friend_id LIMIT $3",
                        $crate::store::payments::prefixed($crate::store::sql::USER_COLUMNS, "u")
                    )
                });
                Ok(sqlx::query_as::<_, $crate::store::User>(&SQL)
                    .bind(user_id)
                    .bind(after.unwrap_or(""))
                    .bind(limit)
                    .fetch_all(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all, fields(user_id))]
            async fn count_friends(&self, user_id: &str) -> Result<i64, StoreError> {
                Ok(sqlx::query_scalar::<_, i64>(
                    "SELECT CAST(COUNT(*) AS BIGINT) FROM friendships WHERE user_id = $1",
                )
                .bind(user_id)
                .fetch_one(self.reader())
                .await?)
            }
        }
    };
}

pub(crate) use impl_payment_store;
