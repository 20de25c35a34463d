use super::pay_batcher::{Batched, PayBatcher};
use super::pool::{
    check_after_trouble, connections_per_core, BatchFuture, Lease, Lender, RevocationEpoch,
};
use super::user_reads::{user_with_friends_count_columns, ReadUsers, UserReads};
use super::*;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

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
        // few per core: with 8 in all on two cores, 32 clients left a few
        // requests waiting seconds for one (p99 646 ms, a 503).
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

impl queries::Connections for PgStore {
    async fn run_migrations(&self) -> Result<(), StoreError> {
        // sqlx takes an advisory lock, so instances starting together are safe.
        sqlx::migrate!("migrations/postgres")
            .run(&self.pool)
            .await?;
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
    async fn copy_into(&self, _path: &str) -> Result<Option<()>, StoreError> {
        Ok(None)
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

    /// Runs `batch`, one statement that is its own transaction.
    async fn write_batch<O, F>(&self, batch: F) -> Result<O, StoreError>
    where
        O: Send + 'static,
        F: for<'c> FnOnce(&'c mut sqlx::PgConnection) -> BatchFuture<'c, O> + Send + 'static,
    {
        let mut conn = self.statements.lease().await?;
        Ok(batch(&mut conn).await?)
    }

    async fn record_in_batch(
        &self,
        insert: &PaymentInsert,
    ) -> Result<Option<super::payments::Recorded>, StoreError> {
        Ok(match self.pays.pay(insert).await? {
            Batched::Recorded(recorded) => Some(recorded),
            Batched::Alone => None,
        })
    }

    fn user_reads(&self) -> &Arc<UserReads> {
        &self.user_reads
    }

    /// One statement: the migration's `settle_due` function, which reads
    /// the due pays and settles them as `settle_in_batch`; the movement ids
    /// are made here, one for each pay the round may settle.
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

    /// One statement: the migration's `settle_batch` function, which first
    /// locks the targets.
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

    /// One statement of its own: data-modifying CTEs.
    async fn rotate_in_batch(
        &self,
        _token: super::Presented<'_>,
        _successors: &[super::NewToken],
    ) -> Result<Option<Option<super::RotatedGrant>>, StoreError> {
        Ok(None)
    }

    async fn snapshot(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?)
    }

    /// The statements of `PaymentStore::audit_snapshot` read it: merge joins
    /// over the covering indexes (see `AUDIT_SETTINGS`).
    async fn own_audit_snapshot(
        &self,
        _chunk: i64,
        _each: &mut (dyn FnMut(crate::store::AuditChunk) + Send),
    ) -> Result<Option<crate::store::AuditSnapshot>, StoreError> {
        Ok(None)
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

/// User search's walk of one trigram's index entries (`$6`), keeping the
/// users whose names match `$1`, at most `$7`: the migration's
/// `users_named_like` function, whose one plan (see the migration) reads each
/// entry's user by primary key.
const USERS_NAMED_LIKE: &str = "SELECT * FROM users_named_like($1, $6, $7)";

/// A new payment's movement, one statement (see payments.rs).
const HOLD_SQL: &str = super::payments::PG_HOLD_SQL;
const CHARGE_SQL: &str = super::payments::PG_CHARGE_SQL;
/// …and to an account named by id, read in the same statement (pay, charge).
const TO_ACCOUNT_SQL: (&str, &str) = (
    super::payments::PG_HOLD_TO_ACCOUNT_SQL,
    super::payments::PG_CHARGE_TO_ACCOUNT_SQL,
);

/// The audit's snapshot reads every sum in the order of an index that holds
/// all it needs: the covering indexes on ledger_entries, and the payments'
/// primary key walked beside the entries' payment index (merge joins). The
/// planner would rather hash or sort millions of rows, which at a million
/// payments took up to three times as long (the sums by account: 2.4 s by hash
/// against 0.8 s in index order) and can spill to disk; work_mem is room for
/// what must still be sorted. No JIT, whose compiling costs seconds here and
/// saves none. No parallel workers: the scans cost little per row, so splitting
/// them saves little even on idle cores, and on a busy or one-core server the
/// workers only add their start-up and the merging of their partial results
/// (3.1 s against 1.5 s for the sums by account on one core).
const AUDIT_SETTINGS: &[&str] = &[
    "SET LOCAL work_mem = '64MB'",
    "SET LOCAL jit = off",
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL enable_hashagg = off",
    "SET LOCAL enable_hashjoin = off",
    "SET LOCAL enable_sort = off",
];
/// The audit's sum of cents: `sum_cents` (a migration's aggregate) adds
/// bigints into a bigint; the built-in `sum` answers numeric, whose making and
/// comparing, once per payment and per movement, cost about a second of the
/// audit at a million payments.
const AUDIT_SUM: &str = "sum_cents";

/// The audit's list of suspect payment ids, as a JSON array.
const AUDIT_JSON_LIST: &str = "json_agg";
/// Entries that name no payment, looked for only when the suspects' pass
/// matched fewer entries than name a payment: the payment index and the
/// payments' primary key walked side by side (a merge anti-join, see
/// `AUDIT_SETTINGS`), then the few left made distinct. Distinct first, PostgreSQL would hash or
/// sort the millions of entries, then look up each payment.
const AUDIT_ENTRIES_WITHOUT_PAYMENT: &str = "\
    SELECT DISTINCT e.payment_id FROM ledger_entries e \
    WHERE e.payment_id IS NOT NULL AND NOT EXISTS ( \
      SELECT 1 FROM payments p WHERE p.id = e.payment_id AND p.kind = 'payment')";

type Db = Postgres;
type ThisStore = PgStore;
const NAME: &str = "postgres";

/// The store traits' implementation, compiled for PostgreSQL.
// Both backends include the one implementation, each compiled for its own types.
#[allow(clippy::duplicate_mod)]
#[path = "queries/mod.rs"]
mod queries;
