use super::pay_batcher::{Batched, PayBatcher};
use super::pool::{
    check_after_trouble, connections_per_core, BatchFuture, Lease, Lender, RevocationEpoch,
};
use super::user_reads::{user_with_friends_count_columns, ReadUsers, UserReads};
use super::webhooks::{postgres_links, route_deliveries, route_origins, route_origins_where};
use super::*;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

mod audit;
mod functions;
mod rotate;

/// PostgreSQL, shared by every instance of a deployment. Writes rely on guarded
/// updates and row locks rather than on a single writer.
pub struct PgStore {
    /// Transactions (sqlx's pool: its ping on release also flushes the
    /// rollback of a transaction dropped half-way).
    pool: PgPool,
    /// Single statements, reads and writes: no ping, one round trip each.
    statements: Arc<Lender<Postgres>>,
    /// New pays written together (group commit).
    pays: Arc<PayBatcher>,
    /// `/me`'s user reads, made together.
    user_reads: Arc<UserReads>,
    revocations: RevocationEpoch,
}

impl PgStore {
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)?;
        // No ping (a round trip) before each use of a connection: a broken one
        // fails its statement, and the pool drops it. Nearly every request is
        // single statements; transactions (settlement batches, payments with an
        // idempotency key, the rarer writes) need fewer connections. Requests
        // waiting on row locks or the network keep their connection, so a
        // few per core: too few left requests waiting seconds for one under
        // 32 clients (docs/decisions/010-connection-lending.md).
        let pool = PgPoolOptions::new()
            .max_connections(connections_per_core(2, 6, 16))
            .test_before_acquire(false)
            .before_acquire(|conn, meta| check_after_trouble(conn, meta))
            .acquire_timeout(Duration::from_secs(5))
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await?;
        let statements = Arc::new(Lender::new(
            options,
            connections_per_core(6, 12, 32),
            Duration::from_secs(5),
        ));
        Ok(Self {
            pool,
            pays: Arc::new(PayBatcher::new(statements.clone())),
            user_reads: Arc::new(UserReads::new(read_users(statements.clone()))),
            statements,
            revocations: RevocationEpoch::default(),
        })
    }
}

/// How `/me`'s batched reads read their users: one statement, the ids bound
/// as one array.
fn read_users(statements: Arc<Lender<Postgres>>) -> ReadUsers {
    const SQL: &str = concat!(
        "SELECT ",
        user_with_friends_count_columns!(),
        " FROM users WHERE id = ANY($1)"
    );
    Box::new(move |ids| {
        let statements = statements.clone();
        Box::pin(async move {
            sqlx::query_as(SQL)
                .bind(ids)
                .fetch_all(&mut *statements.lease().await?)
                .await
        })
    })
}

impl PgStore {
    /// Runs `batch`, one statement that is its own transaction.
    async fn write_batch<O, F>(&self, batch: F) -> Result<O, StoreError>
    where
        O: Send + 'static,
        F: for<'c> FnOnce(&'c mut sqlx::PgConnection) -> BatchFuture<'c, O> + Send + 'static,
    {
        let mut conn = self.statements.lease().await?;
        Ok(batch(&mut conn).await?)
    }
}

impl queries::Backend for PgStore {
    /// The migrations, then the database functions (`functions.rs`). Each
    /// takes an advisory lock, so instances starting together are safe.
    async fn run_migrations(&self) -> Result<(), StoreError> {
        sqlx::migrate!("migrations/postgres")
            .run(&self.pool)
            .await?;
        functions::install(&self.pool).await?;
        Ok(())
    }

    /// A connection's socket belongs to the runtime that opened it. One an
    /// actix worker opened dies with that worker's runtime, and at shutdown
    /// the workers stop one by one, so a request still running on another
    /// worker could get a dead connection (a 503). Opened here, on the main
    /// runtime, and kept (no idle timeout, no lifetime), they outlive every
    /// worker.
    async fn open_connections(&self) -> Result<(), StoreError> {
        let all = self.pool.options().get_max_connections();
        futures_util::future::try_join_all((0..all).map(|_| self.pool.acquire())).await?;
        self.statements.open_all().await?;
        Ok(())
    }

    /// Ready when a connection that requests use answers.
    async fn ready(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&mut *self.statements.lease().await?)
            .await?;
        Ok(())
    }

    /// PostgreSQL has its own tools for this (pg_dump, base backups).
    async fn copy_into(&self, _path: &str) -> Result<(), StoreError> {
        Err(StoreError::Unsupported(
            "tally admin backup copies an SQLite database; back up PostgreSQL with pg_dump \
             (or your provider's backups)",
        ))
    }

    /// `VACUUM FULL` writes the table anew and drops its old file, dead rows
    /// and all (a role that does not own the table gets a warning from
    /// PostgreSQL and nothing done). Outside a transaction, as VACUUM must be.
    async fn erase_deleted(&self) -> Result<(), StoreError> {
        sqlx::raw_sql("VACUUM FULL server_settings")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn lease(&self) -> Result<Lease<'_, Postgres>, StoreError> {
        Ok(self.statements.lease().await?)
    }

    async fn write(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    async fn write_unsynced(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// A pay in one call of `pay_batch` with the pays queued beside it, or,
    /// when the batcher hands it back, alone: the new-payment statement, one
    /// statement that is all or nothing by itself.
    async fn record_pay(
        &self,
        insert: &PaymentInsert,
    ) -> Result<super::payments::Recorded, StoreError> {
        if let Batched::Recorded(recorded) = self.pays.pay(insert).await? {
            return Ok(recorded);
        }
        // Alone (a charge, or a pay a batch handed back): the payment's
        // statement and its `payment.created` event in one transaction.
        let mut tx = self.write().await?;
        let recorded = Self::record_payment(&mut tx, insert).await?;
        if let super::payments::Recorded::Written {
            actor_balance_cents: Some(_),
            ..
        } = recorded
        {
            Self::created_event(&mut tx, insert).await?;
        }
        tx.commit().await?;
        Ok(recorded)
    }

    fn user_reads(&self) -> &Arc<UserReads> {
        &self.user_reads
    }

    /// One statement: the database function `settle_due`, which reads the
    /// due pays and settles them with `settle_pays`, as `settle_batch` does;
    /// the movement ids are made here, one for each pay the round may settle.
    async fn settle_due_in_batch(
        &self,
        settle_by: i64,
        at: i64,
        limit: i64,
    ) -> Result<usize, StoreError> {
        let movements: Vec<String> = (0..limit.max(0)).map(|_| crate::domain::new_id()).collect();
        let settled: Vec<String> =
            sqlx::query_scalar("SELECT settled_id FROM settle_due($1, $2::text[], $3)")
                .bind(settle_by)
                .bind(movements)
                .bind(at)
                .fetch_all(&mut *self.statements.lease().await?)
                .await?;
        Ok(settled.len())
    }

    /// One statement: the database function `settle_batch`, which first
    /// locks the targets, then settles with `settle_pays`.
    async fn settle_in_batch(
        &self,
        settlements: &[super::Settlement],
        at: i64,
    ) -> Result<Vec<String>, StoreError> {
        let (ids, movements): (Vec<&str>, Vec<&str>) = settlements
            .iter()
            .map(|s| (s.payment_id.as_str(), s.movement_id.as_str()))
            .unzip();
        Ok(
            sqlx::query_scalar("SELECT settled_id FROM settle_batch($1::text[], $2::text[], $3)")
                .bind(ids)
                .bind(movements)
                .bind(at)
                .fetch_all(&mut *self.statements.lease().await?)
                .await?,
        )
    }

    /// One statement of its own: data-modifying CTEs (`postgres/rotate.rs`).
    async fn rotate(
        &self,
        token: super::Presented<'_>,
        successors: &[super::NewToken],
    ) -> Result<Option<super::RotatedGrant>, StoreError> {
        self.rotate_in_one_statement(token, successors).await
    }

    /// Sums and the suspects' pass in SQL: merge joins over the covering
    /// indexes (`postgres/audit.rs`).
    async fn read_audit_snapshot(
        &self,
        chunk: i64,
        each: &mut (dyn FnMut(crate::store::AuditChunk) + Send),
    ) -> Result<crate::store::AuditSnapshot, StoreError> {
        self.audit_snapshot_in_sql(chunk, each).await
    }

    fn revocations(&self) -> &RevocationEpoch {
        &self.revocations
    }
}

/// Workers pass by payments another instance is already working on.
const SKIP_LOCKED: &str = " FOR UPDATE SKIP LOCKED";
/// Serializes transactions about one key (e.g. a sign-in throttle key) until
/// they commit, on every instance.
const KEY_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";
/// The same key's lock shared: transactions sharing it run together, and
/// one taking it alone (`KEY_LOCK`) waits for them and they for it.
const KEY_LOCK_SHARED: &str = "SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))";

/// User search's walk of one trigram's index entries (`$6`), keeping the
/// users whose names match `$1`, at most `$7`: the database function
/// `users_named_like`, whose one plan (see its file) reads each entry's user
/// by primary key.
const USERS_NAMED_LIKE: &str = "SELECT * FROM users_named_like($1, $6, $7)";

/// A payment event, written in the change's transaction as an outbox row:
/// the database function `payment_events`, as the settlements and the pay
/// batches write theirs.
const PAYMENT_EVENTS_SQL: &str = "SELECT payment_events(ARRAY[$1]::text[], $2, ARRAY[$3]::int8[])";

/// An outbox row's events (`$1`) as a table `c` (see `webhooks::OutboxEvent`).
macro_rules! outbox_events {
    () => {
        "json_to_recordset($1::json) AS c (payment_id TEXT, type TEXT, at BIGINT, \
           origin TEXT, status TEXT, date_completed BIGINT, target_user_id TEXT, \
           refund_payment_id TEXT)"
    };
}

/// Routing an outbox row (see `WebhookStore::route_events`): the origins
/// its events carry, then their deliveries.
const ROUTE_ORIGINS_SQL: &str = concat!(route_origins!(), outbox_events!(), route_origins_where!());
const ROUTE_DELIVERIES_SQL: &str =
    concat!(route_deliveries!(), outbox_events!(), postgres_links!());

/// A new payment's movement, one statement (see payments.rs).
const HOLD_SQL: &str = super::payments::PG_HOLD_SQL;
const CHARGE_SQL: &str = super::payments::PG_CHARGE_SQL;
/// …and to an account named by id, read in the same statement (pay, charge).
const TO_ACCOUNT_SQL: (&str, &str) = (
    super::payments::PG_HOLD_TO_ACCOUNT_SQL,
    super::payments::PG_CHARGE_TO_ACCOUNT_SQL,
);

type Db = Postgres;
type ThisStore = PgStore;
const NAME: &str = "postgres";

/// The store traits' implementation, compiled for PostgreSQL.
// Both backends include the one implementation, each compiled for its own types.
#[allow(clippy::duplicate_mod)]
#[path = "queries/mod.rs"]
mod queries;
