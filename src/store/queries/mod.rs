//! The one implementation of the store traits, written once as ordinary code
//! and compiled for each backend: `sqlite.rs` and `postgres.rs` each include
//! this module (`#[path = "queries/mod.rs"] mod queries;`), so each copy works on
//! its backend's concrete types. (sqlx cannot check one query against two
//! databases, and code generic over `sqlx::Database` needs unwieldy bounds.)
//!
//! What a backend supplies is named here and nowhere else: the items in the
//! `use super::…` below (its sqlx database `Db`, its store `ThisStore`, its
//! `NAME`, and its dialect: the constants `SKIP_LOCKED`, `KEY_LOCK` and
//! `KEY_LOCK_SHARED`, the
//! new-payment statements `HOLD_SQL` and `CHARGE_SQL` and, for a target
//! account named by id, `TO_ACCOUNT_SQL`, and user search's walk of a
//! trigram's index entries, `USERS_NAMED_LIKE`, the statement that writes a
//! payment event to the outbox, `PAYMENT_EVENTS_SQL`, and the two that route
//! an outbox row, `ROUTE_ORIGINS_SQL` and `ROUTE_DELIVERIES_SQL`), and the
//! `Backend` trait:
//! its connections and its hot operations, each written once in
//! `sqlite.rs` or `postgres.rs`. Only what both backends run is here. The
//! files below take what they need from this module by name.

mod accounts;
mod device;
mod factors;
mod oauth;
mod oidc;
mod payments;
mod users;
mod webhooks;

use super::{
    Db, ThisStore, CHARGE_SQL, HOLD_SQL, KEY_LOCK, KEY_LOCK_SHARED, NAME, PAYMENT_EVENTS_SQL,
    ROUTE_DELIVERIES_SQL, ROUTE_ORIGINS_SQL, SKIP_LOCKED, TO_ACCOUNT_SQL, USERS_NAMED_LIKE,
};
use crate::store::pool::{Lease, RevocationEpoch};
use crate::store::{Store, StoreError};
use sqlx::Transaction;

/// The arguments of a statement on this backend.
type Args<'q> = <Db as sqlx::Database>::Arguments<'q>;

/// A row type a statement on this backend decodes into.
trait Row: for<'r> sqlx::FromRow<'r, <Db as sqlx::Database>::Row> + Send + Unpin {}
impl<T> Row for T where T: for<'r> sqlx::FromRow<'r, <Db as sqlx::Database>::Row> + Send + Unpin {}

/// A transaction on this backend, which the helpers of a write take by `&mut`.
type Tx = Transaction<'static, Db>;

/// What each backend implements once, its own way: its connections and
/// transactions, and its hot operations (pay, rotate, settle, settle due,
/// the audit's snapshot). Every method is required: none answers "not
/// handled here".
pub(super) trait Backend {
    /// Applies pending migrations (on PostgreSQL, then installs the database
    /// functions of `sql/postgres/functions/`).
    async fn run_migrations(&self) -> Result<(), StoreError>;
    /// Whether the database can serve reads and writes now.
    async fn ready(&self) -> Result<(), StoreError>;
    /// Opens every pooled connection now; see `Store::open_all_connections`.
    async fn open_connections(&self) -> Result<(), StoreError>;
    /// Writes a consistent copy of the database to `path`; `Unsupported`
    /// where the backend has its own tools for that.
    async fn copy_into(&self, path: &str) -> Result<(), StoreError>;
    /// Rewrites what holds deleted rows' bytes, so that no copy of the
    /// database made afterwards holds them (see `Store::forget_server_setting`).
    async fn erase_deleted(&self) -> Result<(), StoreError>;
    /// A connection for reads that need no transaction (and, on PostgreSQL,
    /// writes that are one statement).
    async fn lease(&self) -> Result<Lease<'_, Db>, StoreError>;
    /// Begins a write transaction.
    async fn write(&self) -> Result<Tx, StoreError>;
    /// Begins a write transaction whose commit does not wait for the disk:
    /// for bookkeeping that a crash of the database's machine may lose
    /// without harm (the sign-in attempt records), so that a slow disk
    /// cannot stall sign-ins. Other connections see the commit at once.
    /// SQLite commits every transaction so (`synchronous = NORMAL`).
    async fn write_unsynced(&self) -> Result<Tx, StoreError>;
    /// Writes a new payment without an Idempotency-Key (the hot pay): on
    /// PostgreSQL a pay in one call of `pay_batch` with the pays queued
    /// beside it, or alone in one statement; on SQLite every one, committed
    /// by the group writer with the other writes queued.
    async fn record_pay(
        &self,
        insert: &crate::store::PaymentInsert,
    ) -> Result<crate::store::payments::Recorded, StoreError>;
    /// Rotates a refresh token (the guarded spend, the grant read, the
    /// successors written) as one write: on SQLite by the group writer with
    /// the writes queued beside it, on PostgreSQL one statement of its own.
    /// The grant spent, if the spend changed a row.
    async fn rotate(
        &self,
        token: crate::store::Presented<'_>,
        successors: &[crate::store::NewToken],
    ) -> Result<Option<crate::store::RotatedGrant>, StoreError>;
    /// `/me`'s user reads, made together (`user_reads.rs`).
    fn user_reads(&self) -> &std::sync::Arc<crate::store::user_reads::UserReads>;
    /// Settles a round of pays (see `settle_payments`), as one write: on
    /// SQLite committed by the group writer with the writes queued beside it,
    /// on PostgreSQL one statement (a function). The ids settled.
    async fn settle_in_batch(
        &self,
        settlements: &[crate::store::Settlement],
        at: i64,
    ) -> Result<Vec<String>, StoreError>;
    /// Settles the pays due (see `Store::settle_due`): on SQLite found and
    /// settled by the group writer, a slice of the round per trip; on
    /// PostgreSQL found and settled in one statement (the `settle_due`
    /// function, which settles as `settle_in_batch` does). How many were
    /// settled.
    async fn settle_due_in_batch(
        &self,
        settle_by: i64,
        at: i64,
        limit: i64,
    ) -> Result<usize, StoreError>;
    /// The audit's snapshot (see `PaymentStore::audit_snapshot`): on SQLite
    /// one walk of the payment index (`sqlite/audit.rs`), on PostgreSQL sums
    /// and the suspects' pass in SQL (`postgres/audit.rs`).
    async fn read_audit_snapshot(
        &self,
        chunk: i64,
        each: &mut (dyn FnMut(crate::store::AuditChunk) + Send),
    ) -> Result<crate::store::AuditSnapshot, StoreError>;
    /// This store's count of committed revocations.
    fn revocations(&self) -> &RevocationEpoch;
}

/// Appends the values, each bound, separated by commas: the inside of an
/// `IN (…)` list.
fn push_binds<'args, T>(
    query: &mut sqlx::QueryBuilder<'args, Db>,
    values: impl IntoIterator<Item = T>,
) where
    T: 'args + sqlx::Encode<'args, Db> + sqlx::Type<Db>,
{
    let mut list = query.separated(", ");
    for value in values {
        list.push_bind(value);
    }
}

impl ThisStore {
    /// Runs one statement in a write transaction of its own; how many rows it
    /// changed.
    async fn write_one<'q>(
        &self,
        statement: sqlx::query::Query<'q, Db, Args<'q>>,
    ) -> Result<u64, StoreError> {
        let mut tx = self.write().await?;
        let changed = statement.execute(&mut *tx).await?.rows_affected();
        tx.commit().await?;
        Ok(changed)
    }

    /// Runs one statement that returns at most one row (`RETURNING`) in a
    /// write transaction of its own.
    async fn write_returning<'q, T: Row>(
        &self,
        statement: sqlx::query::QueryAs<'q, Db, T, Args<'q>>,
    ) -> Result<Option<T>, StoreError> {
        let mut tx = self.write().await?;
        let row = statement.fetch_optional(&mut *tx).await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Runs one statement in a write transaction of its own; whether it
    /// changed a row.
    async fn write_changed<'q>(
        &self,
        statement: sqlx::query::Query<'q, Db, Args<'q>>,
    ) -> Result<bool, StoreError> {
        Ok(self.write_one(statement).await? > 0)
    }

    /// `write_returning` for a change the caches must see: a row returned
    /// drops what they remember (see `RevocationEpoch`).
    async fn write_revoking<'q, T: Row>(
        &self,
        statement: sqlx::query::QueryAs<'q, Db, T, Args<'q>>,
    ) -> Result<Option<T>, StoreError> {
        let row = self.write_returning(statement).await?;
        if row.is_some() {
            self.revocations().bump();
        }
        Ok(row)
    }

    /// Commits `tx`; then, if it revoked or changed what the caches remember,
    /// drops what they remember.
    async fn commit_revoking(&self, tx: Tx, revoked: bool) -> Result<(), StoreError> {
        tx.commit().await?;
        if revoked {
            self.revocations().bump();
        }
        Ok(())
    }

    /// The row of `statement`, if any, read on a lent connection.
    async fn read_optional<'q, T: Row>(
        &self,
        statement: sqlx::query::QueryAs<'q, Db, T, Args<'q>>,
    ) -> Result<Option<T>, StoreError> {
        Ok(statement.fetch_optional(&mut *self.lease().await?).await?)
    }

    /// The value (one column) of `statement`'s row, if any, read on a lent
    /// connection.
    async fn read_value<'q, T>(
        &self,
        statement: sqlx::query::QueryScalar<'q, Db, T, Args<'q>>,
    ) -> Result<Option<T>, StoreError>
    where
        (T,): Row,
        T: Send + Unpin,
    {
        Ok(statement.fetch_optional(&mut *self.lease().await?).await?)
    }

    /// The rows of `statement`, read on a lent connection.
    async fn read_all<'q, T: Row>(
        &self,
        statement: sqlx::query::QueryAs<'q, Db, T, Args<'q>>,
    ) -> Result<Vec<T>, StoreError> {
        Ok(statement.fetch_all(&mut *self.lease().await?).await?)
    }

    /// The rows of `select`, a statement that ends in an open `IN (`, for the
    /// given values.
    async fn fetch_in<T: Row>(
        &self,
        select: String,
        values: &[String],
    ) -> Result<Vec<T>, StoreError> {
        let mut query = sqlx::QueryBuilder::<Db>::new(select);
        push_binds(&mut query, values.iter().cloned());
        query.push(")");
        Ok(query
            .build_query_as::<T>()
            .fetch_all(&mut *self.lease().await?)
            .await?)
    }
}

#[async_trait::async_trait]
impl Store for ThisStore {
    fn backend(&self) -> &'static str {
        NAME
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        self.run_migrations().await
    }

    #[tracing::instrument(skip_all)]
    async fn ping(&self) -> Result<(), StoreError> {
        self.ready().await
    }

    async fn open_all_connections(&self) -> Result<(), StoreError> {
        self.open_connections().await
    }

    async fn backup_into(&self, path: &str) -> Result<(), StoreError> {
        self.copy_into(path).await
    }

    fn revocation_epoch(&self) -> u64 {
        self.revocations().current()
    }

    #[tracing::instrument(skip_all, fields(key))]
    async fn server_setting_or_insert(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<String, StoreError> {
        let mut tx = self.write().await?;
        sqlx::query(
            "INSERT INTO server_settings (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(candidate)
        .execute(&mut *tx)
        .await?;
        let value: String = sqlx::query_scalar("SELECT value FROM server_settings WHERE key = $1")
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(value)
    }

    async fn server_setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.read_value(
            sqlx::query_scalar("SELECT value FROM server_settings WHERE key = $1").bind(key),
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(key))]
    async fn forget_server_setting(&self, key: &str) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let deleted = sqlx::query("DELETE FROM server_settings WHERE key = $1")
            .bind(key)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        tx.commit().await?;
        if deleted {
            self.erase_deleted().await?;
        }
        Ok(deleted)
    }

    #[tracing::instrument(skip_all)]
    async fn purge(&self, r: &crate::store::Retention) -> Result<u64, StoreError> {
        // Nothing references codes, tokens or the other rows deleted
        // here (grants stay, and payments do not point at their keys).
        let statements: [(&str, i64); 14] = [
            // Events delivered (or failed for good) and their attempts.
            (
                "DELETE FROM webhook_deliveries WHERE occurred_at < $1 AND state <> 'pending'",
                r.webhooks_before,
            ),
            (
                "DELETE FROM webhook_attempts WHERE at < $1",
                r.webhooks_before,
            ),
            (
                "DELETE FROM oauth_codes WHERE expires_at < $1",
                r.codes_before,
            ),
            ("DELETE FROM oauth_codes WHERE used_at < $1", r.codes_before),
            // A device code is used, if at all, before it expires.
            (
                "DELETE FROM device_codes WHERE expires_at < $1",
                r.codes_before,
            ),
            (
                "DELETE FROM webauthn_ceremonies WHERE expires_at < $1",
                r.codes_before,
            ),
            (
                "DELETE FROM oauth_tokens WHERE expires_at < $1",
                r.tokens_before,
            ),
            (
                "DELETE FROM oauth_tokens WHERE revoked_at < $1",
                r.tokens_before,
            ),
            (
                "DELETE FROM signin_failures WHERE at < $1",
                r.signin_failures_before,
            ),
            (
                "DELETE FROM idempotency_keys WHERE created_at < $1",
                r.idempotency_keys_before,
            ),
            (
                "DELETE FROM ended_sessions WHERE expires_at < $1",
                r.ended_sessions_before,
            ),
            (
                "DELETE FROM verification_tokens WHERE expires_at < $1",
                r.verification_links_before,
            ),
            (
                "DELETE FROM secret_reveals WHERE created_at < $1",
                r.reveals_before,
            ),
            (
                "DELETE FROM verification_sends WHERE sent_at < $1",
                r.verification_sends_before,
            ),
        ];
        let mut deleted = 0;
        // One short transaction per statement, so no lock is held long.
        for (sql, before) in statements {
            deleted += self.write_one(sqlx::query(sql).bind(before)).await?;
        }
        Ok(deleted)
    }
}
