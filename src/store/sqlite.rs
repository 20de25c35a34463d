use super::oauth::impl_oauth_store;
use super::pages::impl_pages_store;
use super::payments::impl_payment_store;
use super::sql::impl_store;
use super::*;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use std::str::FromStr;
use std::time::Duration;

/// SQLite in WAL mode: many readers, and every write through one connection with
/// `BEGIN IMMEDIATE`, so writers queue instead of failing with SQLITE_BUSY (other
/// processes, such as `tally admin`, wait on the busy timeout).
pub struct SqliteStore {
    reader: SqlitePool,
    writer: SqlitePool,
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
        // No ping before handing out a connection: an SQLite connection is a
        // file handle in this process, and a failed statement reports itself.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await?;
        // Each reader is a thread of its own running statements: two per core
        // keep every core busy without queueing threads for the CPU.
        let reader = SqlitePoolOptions::new()
            .max_connections(super::connections_per_core(2, 2, 8))
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.read_only(true))
            .await?;
        Ok(Self {
            reader,
            writer,
            revocations: RevocationEpoch::default(),
        })
    }

    async fn run_migrations(&self) -> Result<(), StoreError> {
        sqlx::migrate!("migrations/sqlite")
            .run(&self.writer)
            .await?;
        Ok(())
    }

    fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    async fn write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
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
}

/// SQLite has one writer, so a write transaction already excludes every other.
const SKIP_LOCKED: &str = "";
/// …and needs no lock on a key either (the statement only keeps the shape).
const KEY_LOCK: &str = "SELECT $1";

/// A new payment's statements, sent to the writer at once (see payments.rs).
const HOLD_SQL: &str = super::payments::SQLITE_HOLD_SQL;
const CHARGE_SQL: &str = super::payments::SQLITE_CHARGE_SQL;
/// The one writer already excludes every other settlement.
const LOCK_SETTLED_TARGETS: Option<(&str, &str)> = None;

type Backend = Sqlite;

impl_store!(SqliteStore, "sqlite");
impl_oauth_store!(SqliteStore);
impl_payment_store!(SqliteStore);
impl_pages_store!(SqliteStore);
