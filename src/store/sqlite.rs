use super::pool::{connections_per_core, BatchFuture, RevocationEpoch};
use super::*;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Sqlite, SqlitePool, Transaction};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Test hook: a file holding a page count that every write transaction applies
/// as `PRAGMA max_page_count` (the database's size when it is smaller), or no
/// limit when the file is missing. It lets the fault tests fill "the disk" of a
/// running server and free it again.
pub const PAGE_LIMIT_FILE_VARIABLE: &str = "TALLY_TEST_SQLITE_PAGE_LIMIT_FILE";

/// SQLite's own largest page count: "no limit".
const NO_PAGE_LIMIT: u32 = 4_294_967_294;

/// How long readiness reports a writer that was found broken.
const WRITER_FAILURE_SHOWN_FOR: Duration = Duration::from_secs(5);

/// When the writer last had to be replaced after a failed transaction.
#[derive(Default)]
struct WriterHealth {
    failed_at: Mutex<Option<Instant>>,
}

impl WriterHealth {
    fn failed(&self) {
        *self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    fn failed_recently(&self) -> bool {
        self.failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < WRITER_FAILURE_SHOWN_FOR)
    }
}

/// SQLite in WAL mode: many readers, and every write through one connection with
/// `BEGIN IMMEDIATE`, so writers queue instead of failing with SQLITE_BUSY (other
/// processes, such as `tally admin`, wait on the busy timeout).
pub struct SqliteStore {
    reader: SqlitePool,
    writer: SqlitePool,
    health: Arc<WriterHealth>,
    page_limit_file: Option<PathBuf>,
    revocations: RevocationEpoch,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let health = Arc::new(WriterHealth::default());
        let on_release = health.clone();
        // No ping before handing out a connection: an SQLite connection is a
        // file handle in this process, and a failed statement reports itself.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30))
            // After a failed COMMIT or ROLLBACK (SQLite may already have rolled
            // back by itself, e.g. on "database or disk is full") sqlx still
            // counts a transaction that no longer exists, and would refuse every
            // later BEGIN. Such a connection is closed; the pool opens a fresh
            // one for the next write.
            .after_release(move |conn, _| {
                let health = on_release.clone();
                Box::pin(async move {
                    // Nothing pending after a commit: no trip to the writer's
                    // thread. Otherwise the ping runs the rollback a dropped
                    // transaction queued, and the check below sees its result.
                    if !conn.is_in_transaction() {
                        return Ok(true);
                    }
                    conn.ping().await?;
                    if conn.is_in_transaction() {
                        health.failed();
                        if crate::log_throttle::admit("sqlite writer reopened").is_some() {
                            tracing::warn!(
                                "the SQLite writer was left in a failed transaction; reopening it"
                            );
                        }
                        return Ok(false);
                    }
                    Ok(true)
                })
            })
            .connect_with(options.clone())
            .await?;
        // Each reader is a thread of its own running statements: two per core
        // keep every core busy without queueing threads for the CPU.
        let reader = SqlitePoolOptions::new()
            .max_connections(connections_per_core(2, 2, 8))
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.read_only(true))
            .await?;
        Ok(Self {
            reader,
            writer,
            health,
            page_limit_file: std::env::var_os(PAGE_LIMIT_FILE_VARIABLE).map(PathBuf::from),
            revocations: RevocationEpoch::default(),
        })
    }

    /// The test hook of [`PAGE_LIMIT_FILE_VARIABLE`], if set.
    async fn apply_page_limit(&self, conn: &mut sqlx::SqliteConnection) -> Result<(), StoreError> {
        apply_page_limit(self.page_limit_file.as_deref(), conn).await
    }
}

impl queries::Connections for SqliteStore {
    async fn run_migrations(&self) -> Result<(), StoreError> {
        sqlx::migrate!("migrations/sqlite")
            .run(&self.writer)
            .await?;
        Ok(())
    }

    /// Ready when a reader answers and the writer can write: it was not just
    /// found broken and, when idle, it can take the write lock and room for a
    /// row (the probe is rolled back). A writer busy with a write is working,
    /// so readiness never queues behind the writes it would slow down.
    /// Nothing to do: SQLite connections run on threads of their own.
    async fn open_connections(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn ready(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        if self.health.failed_recently() {
            return Err(StoreError::Unavailable(sqlx::Error::Protocol(
                "the SQLite writer failed a moment ago".to_owned(),
            )));
        }
        let Some(mut writer) = self.writer.try_acquire() else {
            return Ok(());
        };
        let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
        self.apply_page_limit(&mut tx).await?;
        sqlx::query(
            "INSERT INTO server_settings (key, value) \
             VALUES ('readiness probe', hex(randomblob(4096)))",
        )
        .execute(&mut *tx)
        .await?;
        tx.rollback().await?;
        Ok(())
    }

    /// `VACUUM INTO` reads one snapshot of the WAL on a reader, so writers go
    /// on; it refuses a file that exists and is not empty.
    async fn copy_into(&self, path: &str) -> Result<Option<()>, StoreError> {
        sqlx::query("VACUUM INTO $1")
            .bind(path)
            .execute(&self.reader)
            .await?;
        Ok(Some(()))
    }

    fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    async fn write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        self.apply_page_limit(&mut tx).await?;
        Ok(tx)
    }

    /// Runs `batch`, statements sent to the writer at once that begin with
    /// `BEGIN IMMEDIATE` and end with `COMMIT` and guard their own writes, so
    /// the whole write is one trip to the writer's thread instead of three.
    /// It runs as a task of its own: a request that goes away cannot leave the
    /// writer inside a half-sent transaction. When a statement fails, what ran
    /// is rolled back here (sqlx does not know of this transaction).
    async fn write_batch<O, F>(&self, batch: F) -> Result<O, StoreError>
    where
        O: Send + 'static,
        F: for<'c> FnOnce(&'c mut sqlx::SqliteConnection) -> BatchFuture<'c, O> + Send + 'static,
    {
        let writer = self.writer.clone();
        let health = self.health.clone();
        let page_limit_file = self.page_limit_file.clone();
        let task = tokio::spawn(async move {
            let mut conn = writer.acquire().await?;
            apply_page_limit(page_limit_file.as_deref(), &mut conn).await?;
            match batch(&mut conn).await {
                Ok(out) => Ok(out),
                Err(error) => {
                    if let Err(rollback) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
                        // No transaction left although BEGIN got the lock:
                        // SQLite rolled back by itself (a full disk), and the
                        // writer counts as failed a moment, as after a failed
                        // COMMIT. Any other failure: a fresh writer.
                        if !rollback.to_string().contains("no transaction is active") {
                            health.failed();
                            conn.close_on_drop();
                        } else if !is_busy(&error) {
                            health.failed();
                        }
                    }
                    Err(StoreError::from(error))
                }
            }
        });
        task.await
            .map_err(|e| StoreError::Unexpected(anyhow::anyhow!("a write task failed: {e}")))?
    }

    /// None: every write begins with `BEGIN IMMEDIATE` on the one writer, even a
    /// single statement, so writers queue instead of failing.
    fn statement_pool(&self) -> Option<&SqlitePool> {
        None
    }

    /// A read transaction sees one snapshot of the WAL.
    async fn snapshot(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.reader.begin().await?)
    }

    fn revocations(&self) -> &RevocationEpoch {
        &self.revocations
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED: another connection holds the lock (so a
/// `BEGIN IMMEDIATE` found no transaction to begin).
fn is_busy(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|db| db.code())
        .and_then(|code| code.parse::<i64>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

/// The test hook of [`PAGE_LIMIT_FILE_VARIABLE`], if set.
async fn apply_page_limit(
    page_limit_file: Option<&std::path::Path>,
    conn: &mut sqlx::SqliteConnection,
) -> Result<(), StoreError> {
    if let Some(file) = page_limit_file {
        let limit = std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .unwrap_or(NO_PAGE_LIMIT);
        // A number parsed above, so nothing but digits reaches the SQL.
        sqlx::query(&format!("PRAGMA max_page_count = {limit}"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// SQLite has one writer, so a write transaction already excludes every other.
const SKIP_LOCKED: &str = "";
/// …and needs no lock on a key either (the statement only keeps the shape).
const KEY_LOCK: &str = "SELECT $1";

/// A new payment's statements, sent to the writer at once (see payments.rs).
const HOLD_SQL: &str = super::payments::SQLITE_HOLD_SQL;
const CHARGE_SQL: &str = super::payments::SQLITE_CHARGE_SQL;
/// …and the same as whole transactions, for a payment without an idempotency key.
const HOLD_BATCH: &str = super::payments::SQLITE_HOLD_BATCH;
const CHARGE_BATCH: &str = super::payments::SQLITE_CHARGE_BATCH;
/// The one writer already excludes every other settlement.
const LOCK_SETTLED_TARGETS: Option<(&str, &str)> = None;

/// SQLite's planner needs no settings for the audit.
const AUDIT_SETTINGS: &[&str] = &[];
const AUDIT_SUSPECTS_SETTINGS: (&[&str], &[&str]) = (&[], &[]);

type Db = Sqlite;
type ThisStore = SqliteStore;
const NAME: &str = "sqlite";

/// The store traits' implementation, compiled for SQLite.
// Both backends include the one implementation, each compiled for its own types.
#[allow(clippy::duplicate_mod)]
#[path = "queries/mod.rs"]
mod queries;

#[cfg(test)]
mod tests {
    use super::queries::Connections;
    use super::*;

    /// The state of issue 10: SQLite rolled a transaction back by itself (as it
    /// does when a COMMIT finds the disk full), so sqlx's COMMIT and ROLLBACK
    /// both fail and the connection stays counted inside a transaction. The
    /// next write must get a working writer, not "non-zero transaction depth".
    #[tokio::test]
    async fn a_write_after_sqlite_rolled_back_by_itself_succeeds() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("tally.db").display());
        let store = SqliteStore::connect(&url).await?;
        store.run_migrations().await?;
        {
            let mut tx = store.write().await?;
            sqlx::query("ROLLBACK").execute(&mut *tx).await?;
            assert!(tx.commit().await.is_err());
        }
        for value in ["a", "b"] {
            let mut tx = store.write().await?;
            sqlx::query("INSERT INTO server_settings (key, value) VALUES ($1, $1)")
                .bind(value)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        assert!(store.health.failed_recently());
        assert!(store.ready().await.is_err());
        Ok(())
    }
}
