use super::pool::{connections_per_core, Lease, Lender, RevocationEpoch};
use super::user_reads::{user_with_friends_count_columns, ReadUsers, UserReads};
use super::webhooks::{route_deliveries, route_origins, route_origins_where, sqlite_links};
use super::*;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Sqlite, SqlitePool, Transaction};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

mod audit;
mod group;
mod group_writes;
mod writer;
#[cfg(test)]
use group::GroupWrite;
use group::GroupWriter;
use writer::{
    page_limit, DatabaseFile, WalRestart, WriterHealth, WAL_RESTART_PAGES,
    WRITER_AUTOCHECKPOINT_PAGES,
};

/// Test hook: a file holding a page count that every write transaction applies
/// as `PRAGMA max_page_count` (the database's size when it is smaller), or no
/// limit when the file is missing. It lets the fault tests fill "the disk" of a
/// running server and free it again.
pub const PAGE_LIMIT_FILE_VARIABLE: &str = "TALLY_TEST_SQLITE_PAGE_LIMIT_FILE";

/// How long readiness waits for the writer to probe it.
const READINESS_WRITER_WAIT: Duration = Duration::from_millis(250);

/// SQLite in WAL mode: many readers, and every write through one connection with
/// `BEGIN IMMEDIATE`, so writers queue instead of failing with SQLITE_BUSY (other
/// processes, such as `tally admin`, wait on the busy timeout).
pub struct SqliteStore {
    /// Reads that need no transaction: no ping, one trip each.
    readers: Arc<Lender<Sqlite>>,
    /// `/me`'s user reads, made together.
    user_reads: Arc<UserReads>,
    /// Snapshots (read transactions), readiness and backups.
    reader: SqlitePool,
    /// The one writer: transactions take it through this pool, and the group
    /// writer takes it for each group.
    writer: SqlitePool,
    /// Group commit of the one-trip writes (see [`GroupWriter`]).
    group_writer: Arc<GroupWriter>,
    health: Arc<WriterHealth>,
    page_limit_file: Option<PathBuf>,
    /// The database file, which the audit opens a connection of its own to.
    path: PathBuf,
    revocations: RevocationEpoch,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let page_limit_file = std::env::var_os(PAGE_LIMIT_FILE_VARIABLE).map(PathBuf::from);
        Self::connect_with_page_limit(url, page_limit_file).await
    }

    /// [`Self::connect`] with the page-limit test hook's file given, not read
    /// from [`PAGE_LIMIT_FILE_VARIABLE`].
    async fn connect_with_page_limit(
        url: &str,
        page_limit_file: Option<PathBuf>,
    ) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(group::BUSY_TIMEOUT);
        let path = options.get_filename().to_owned();
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
            .connect_with(
                options
                    .clone()
                    .thread_name(|_| "sqlite-writer".to_owned())
                    .pragma(
                        "wal_autocheckpoint",
                        WRITER_AUTOCHECKPOINT_PAGES.to_string(),
                    )
                    // Each write's savepoint keeps the pages it changes in a
                    // sub-journal, which SQLite moves to a temporary file past
                    // 64 KiB: in memory it costs no file writes and no file.
                    .pragma("temp_store", "MEMORY"),
            )
            .await?;
        // The WAL is copied into the database file by a connection of its own
        // (see `checkpoint_wal`), so the one writer, which every write waits
        // for, does not spend its time on it.
        let checkpointer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(
                options
                    .clone()
                    .thread_name(|_| "sqlite-checkpoint".to_owned()),
            );
        // Each reader is a thread of its own running statements: two per core
        // keep every core busy without queueing threads for the CPU.
        let options = options
            .read_only(true)
            .thread_name(|n| format!("sqlite-reader-{n}"));
        let readers = Arc::new(Lender::new(
            options.clone(),
            connections_per_core(2, 2, 8),
            Duration::from_secs(10),
        ));
        let reader = SqlitePoolOptions::new()
            .max_connections(2)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let wal_restart = Arc::new(WalRestart::default());
        let group_writer = Arc::new(
            GroupWriter::start(
                writer.clone(),
                path.clone(),
                page_limit_file.clone(),
                health.clone(),
                wal_restart.clone(),
            )
            .map_err(|e| StoreError::Unexpected(anyhow::Error::new(e)))?,
        );
        let checkpointer = Checkpointer {
            pool: checkpointer,
            file: DatabaseFile::open(&path),
            synced: 0,
            health: health.clone(),
        };
        tokio::spawn(checkpoint_wal(
            checkpointer,
            Arc::downgrade(&group_writer),
            wal_restart,
        ));
        Ok(Self {
            user_reads: Arc::new(UserReads::new(read_users(readers.clone()))),
            readers,
            reader,
            writer,
            group_writer,
            health,
            page_limit_file,
            path: path.clone(),
            revocations: RevocationEpoch::default(),
        })
    }

    /// The test hook of [`PAGE_LIMIT_FILE_VARIABLE`], if set.
    async fn apply_page_limit(&self, conn: &mut sqlx::SqliteConnection) -> Result<(), StoreError> {
        apply_page_limit(self.page_limit_file.as_deref(), conn).await
    }
}

impl queries::Backend for SqliteStore {
    async fn run_migrations(&self) -> Result<(), StoreError> {
        sqlx::migrate!("migrations/sqlite")
            .run(&self.writer)
            .await?;
        Ok(())
    }

    /// Nothing to do: SQLite connections run on threads of their own.
    async fn open_connections(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Ready when a reader answers and the writer can write: it was not just
    /// found broken (nor a write refused for room) and, when it is free
    /// within [`READINESS_WRITER_WAIT`], it can take the write lock and room
    /// for a row (the probe is rolled back).
    /// A writer busy for all that wait is working, so readiness never queues
    /// long behind the writes it would slow down.
    async fn ready(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&mut *self.readers.lease().await?)
            .await?;
        if self.health.failed_recently() {
            return Err(StoreError::Unavailable(sqlx::Error::Protocol(
                "the SQLite writer failed a moment ago".to_owned(),
            )));
        }
        // A writer that stays busy for the whole wait is writing, and counts as
        // working; one that frees up soon is probed, so a write that held it a
        // moment (a settlement round failing on a full disk, say) cannot hide
        // that no write can succeed.
        let Ok(writer) = tokio::time::timeout(READINESS_WRITER_WAIT, self.writer.acquire()).await
        else {
            return Ok(());
        };
        let mut writer = writer?;
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
    async fn copy_into(&self, path: &str) -> Result<(), StoreError> {
        sqlx::query("VACUUM INTO $1")
            .bind(path)
            .execute(&self.reader)
            .await?;
        Ok(())
    }

    /// `VACUUM` writes every page of the database anew and drops the free
    /// ones, where deleted rows' bytes stay; the checkpoint then copies it
    /// into the database file and truncates the WAL, which held the old
    /// pages. A checkpoint that readers keep from finishing is tried again.
    async fn erase_deleted(&self) -> Result<(), StoreError> {
        let mut writer = self.writer.acquire().await?;
        sqlx::query("VACUUM").execute(&mut *writer).await?;
        for _ in 0..50 {
            let (busy,): (i64,) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
                .fetch_one(&mut *writer)
                .await?;
            if busy == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(StoreError::Unavailable(sqlx::Error::Protocol(
            "readers kept the WAL from being emptied for 5 s".to_owned(),
        )))
    }

    async fn lease(&self) -> Result<Lease<'_, Sqlite>, StoreError> {
        Ok(self.readers.lease().await?)
    }

    async fn write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        self.apply_page_limit(&mut tx).await?;
        Ok(tx)
    }

    async fn write_unsynced(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.write().await
    }

    /// Every new payment without an Idempotency-Key: the group writer
    /// commits it with the writes queued beside it.
    async fn record_pay(
        &self,
        insert: &crate::store::PaymentInsert,
    ) -> Result<crate::store::payments::Recorded, StoreError> {
        let write = group_writes::payment(
            Self::payment_sql(insert),
            group_writes::payment_params(insert)?,
            insert,
        );
        let rows = self.group_writer.write(write).await?;
        group_writes::recorded(insert, &rows)
    }

    fn user_reads(&self) -> &Arc<UserReads> {
        &self.user_reads
    }

    /// Every rotation: the group writer commits it with the writes queued
    /// beside it.
    async fn rotate(
        &self,
        token: Presented<'_>,
        successors: &[NewToken],
    ) -> Result<Option<RotatedGrant>, StoreError> {
        let rows = self
            .group_writer
            .write(group_writes::rotation(token, successors))
            .await?;
        rows.last()
            .map(|row| group_writes::rotated_grant(row))
            .transpose()
    }

    /// Every round: the group writer commits it with the writes queued
    /// beside it.
    async fn settle_in_batch(
        &self,
        settlements: &[crate::store::Settlement],
        at: i64,
    ) -> Result<Vec<String>, StoreError> {
        let rows = self
            .group_writer
            .write(group_writes::settlement(settlements.to_vec(), at))
            .await?;
        group_writes::settled_ids(&rows)
    }

    /// The group writer finds the pays due inside its transaction, so none
    /// of them crosses to this side and back. It is only asked when a read
    /// finds one due: an idle server takes no write lock.
    async fn settle_due_in_batch(
        &self,
        settle_by: i64,
        at: i64,
        limit: i64,
    ) -> Result<usize, StoreError> {
        let one_due: Option<String> =
            sqlx::query_scalar(crate::store::payments::SETTLEMENT_DUE_SQL)
                .bind(settle_by)
                .bind(1_i64)
                .fetch_optional(&mut *self.lease().await?)
                .await?;
        if one_due.is_none() {
            return Ok(0);
        }
        // In slices, each a group write of its own: the pays queued behind a
        // slice wait for it, not for the whole round.
        let mut settled = 0;
        let mut left = limit;
        while left > 0 {
            let slice = left.min(SETTLEMENT_SLICE);
            let rows = self
                .group_writer
                .write(group_writes::settlement_of_due(settle_by, at, slice))
                .await?;
            settled += rows.len();
            if i64::try_from(rows.len()).unwrap_or(i64::MAX) < slice {
                break;
            }
            left -= slice;
        }
        Ok(settled)
    }

    /// Read on a connection of its own, in one read transaction, by a walk of
    /// the payment index (`sqlite/audit.rs`), on a blocking thread; the
    /// suspects come back a chunk at a time, so no more than one is held.
    async fn read_audit_snapshot(
        &self,
        chunk: i64,
        each: &mut (dyn FnMut(crate::store::AuditChunk) + Send),
    ) -> Result<crate::store::AuditSnapshot, StoreError> {
        let path = self.path.clone();
        let (chunks, mut read) = tokio::sync::mpsc::channel(1);
        let reading = tokio::task::spawn_blocking(move || {
            audit::snapshot(&path, chunk.max(1) as usize, &mut |suspects| {
                // If the audit was dropped, what is left is read for nothing.
                let _ = chunks.blocking_send(suspects);
            })
        });
        while let Some(suspects) = read.recv().await {
            each(suspects);
        }
        reading
            .await
            .map_err(|e| StoreError::Unexpected(anyhow::Error::new(e)))?
            .map_err(group::store_error)
    }

    fn revocations(&self) -> &RevocationEpoch {
        &self.revocations
    }
}

/// How `/me`'s batched reads read their users: one statement on a reader
/// thread, the ids bound as one JSON array (each found through the primary
/// key).
fn read_users(readers: Arc<Lender<Sqlite>>) -> ReadUsers {
    const SQL: &str = concat!(
        "SELECT ",
        user_with_friends_count_columns!(),
        " FROM users WHERE id IN (SELECT value FROM json_each($1))"
    );
    Box::new(move |ids| {
        let readers = readers.clone();
        Box::pin(async move {
            let ids = serde_json::to_string(&ids).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
            sqlx::query_as(SQL)
                .bind(ids)
                .fetch_all(&mut *readers.lease().await?)
                .await
        })
    })
}

/// The most pays one group write of a settlement round settles (see
/// `settle_due_in_batch`).
const SETTLEMENT_SLICE: i64 = 64;

/// Passes the checkpointer makes after a large WAL's first, at most, to
/// catch up with the writes before it asks for the restart.
const CATCH_UP_PASSES: usize = 6;

/// A pass that found fewer new WAL pages than this has caught up: about a
/// pass's worth of the pay load's writes.
const CAUGHT_UP_PAGES: i64 = 300;

/// How often the WAL is checkpointed (see [`checkpoint_wal`]).
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);

/// Copies committed pages from the WAL into the database file every
/// [`CHECKPOINT_INTERVAL`] (a passive checkpoint: it never waits for the
/// writer or readers), on a connection of its own, and syncs the file (see
/// [`DatabaseFile`]). SQLite would otherwise do it on the committing
/// connection, the one writer, every 1,000 pages: a third of its time under
/// load, during which no write can go on. It stops when the store is dropped.
async fn checkpoint_wal(
    mut checkpointer: Checkpointer,
    store: std::sync::Weak<GroupWriter>,
    wal_restart: Arc<WalRestart>,
) {
    let mut ticks = tokio::time::interval(CHECKPOINT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if store.strong_count() == 0 {
            return;
        }
        let caught_up = match checkpointer.pass().await {
            Some(pages) if pages >= WAL_RESTART_PAGES => checkpointer.catch_up(pages).await,
            _ => false,
        };
        if caught_up {
            wal_restart.request();
            // A full interval before the next pass: the catch-up passes have
            // usually made the tick overdue, and a pass at once would hold the
            // checkpoint lock the group thread's finish needs. The finish then
            // found it busy (8-10 of a pay row's 20 finishes) and the WAL grew
            // on until the next catch-up.
            ticks.reset();
        }
    }
}

/// The checkpointer's connection and the database file it syncs.
struct Checkpointer {
    pool: SqlitePool,
    /// `None` for a database without a file.
    file: Option<Arc<DatabaseFile>>,
    /// How many of the WAL's pages were in the file at its last sync.
    synced: i64,
    health: Arc<WriterHealth>,
}

impl Checkpointer {
    /// A passive checkpoint, then a sync of the file if it copied pages: the
    /// WAL's size in pages when every one of them was copied and synced,
    /// `None` if some are left or something failed.
    async fn pass(&mut self) -> Option<i64> {
        // busy, the WAL's pages, the pages copied
        let outcome: Result<(i64, i64, i64), _> = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(&self.pool)
            .await;
        match outcome {
            Ok((0, pages, copied)) => {
                if let Some(file) = self.file.as_ref().filter(|_| copied != self.synced) {
                    if !file.sync().await {
                        // Linux may report a failed write-back once only, so
                        // SQLite's own sync could pass without these pages on
                        // the disk: no restart, and readiness shows it.
                        self.health.failed();
                        return None;
                    }
                    self.synced = copied;
                }
                (pages == copied).then_some(pages)
            }
            Ok(_) => None,
            Err(error) => {
                if let Some(suppressed) = crate::log_throttle::admit("sqlite checkpoint failed") {
                    tracing::warn!(%error, suppressed, "the SQLite WAL could not be checkpointed");
                }
                None
            }
        }
    }

    /// After a pass copied a large WAL to its end (`pages`, as it was when
    /// the pass began), more passes copy what was written during the one
    /// before, until one finds only a moment's worth new: what the group
    /// thread is then left to copy and sync at the restart, with every write
    /// waiting. Whether it caught up within [`CATCH_UP_PASSES`].
    async fn catch_up(&mut self, mut pages: i64) -> bool {
        for _ in 0..CATCH_UP_PASSES {
            match self.pass().await {
                Some(now) if now < pages + CAUGHT_UP_PAGES => return true,
                Some(now) => pages = now,
                None => return false,
            }
        }
        false
    }
}

/// The test hook of [`PAGE_LIMIT_FILE_VARIABLE`], if set.
async fn apply_page_limit(
    page_limit_file: Option<&std::path::Path>,
    conn: &mut sqlx::SqliteConnection,
) -> Result<(), StoreError> {
    if let Some(limit) = page_limit(page_limit_file) {
        // A number, so nothing but digits reaches the SQL.
        sqlx::query(&format!("PRAGMA max_page_count = {limit}"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// User search's walk of one trigram's index entries (`$6`), keeping the
/// users whose names match `$1`, at most `$7` (PostgreSQL's database
/// function `users_named_like` runs the same statement: a test below holds
/// the two to each other). SQLite's planner only loops:
/// the entries in index order, each one's user by primary key.
const USERS_NAMED_LIKE: &str = "\
    SELECT u.* FROM user_search_trigrams t JOIN users u ON u.id = t.user_id \
    WHERE t.trigram = $6 AND u.suspended = FALSE \
      AND (lower(u.username) LIKE $1 ESCAPE '\\' \
        OR lower(u.first_name || ' ' || u.last_name) LIKE $1 ESCAPE '\\') \
    ORDER BY t.sort_key, t.user_id LIMIT $7";

/// SQLite has one writer, so a write transaction already excludes every other.
const SKIP_LOCKED: &str = "";
/// …and needs no lock on a key either (the statement only keeps the shape).
const KEY_LOCK: &str = "SELECT $1";
const KEY_LOCK_SHARED: &str = "SELECT $1";

/// A payment event, written in the change's transaction as an outbox row of
/// its own (`$1` the payment, `$2` the type, `$3` the time, the rest as the
/// change left the payment): nothing while no enabled endpoint exists, or
/// when the payment was not written. (The group writer writes one row for
/// all the events of a group: `group_writes::payment_event`.)
const PAYMENT_EVENTS_SQL: &str = "INSERT INTO webhook_outbox (events) \
    SELECT json_array(json_object('payment_id', p.id, 'type', $2, 'at', $3, 'origin', NULL, \
      'status', p.status, 'date_completed', p.date_completed, \
      'target_user_id', p.target_user_id, 'refund_payment_id', p.refund_payment_id)) \
    FROM payments p WHERE p.id = $1 \
      AND EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL)";

/// An outbox row's events (`$1`) as a table `c` (see `webhooks::OutboxEvent`).
macro_rules! outbox_events {
    () => {
        "(SELECT json_extract(value, '$.payment_id') AS payment_id, \
           json_extract(value, '$.type') AS type, json_extract(value, '$.at') AS at, \
           json_extract(value, '$.origin') AS origin, \
           json_extract(value, '$.status') AS status, \
           json_extract(value, '$.date_completed') AS date_completed, \
           json_extract(value, '$.target_user_id') AS target_user_id, \
           json_extract(value, '$.refund_payment_id') AS refund_payment_id \
         FROM json_each($1)) AS c"
    };
}

/// Routing an outbox row (see `WebhookStore::route_events`): the origins
/// its events carry, then their deliveries.
const ROUTE_ORIGINS_SQL: &str = concat!(route_origins!(), outbox_events!(), route_origins_where!());
const ROUTE_DELIVERIES_SQL: &str = concat!(route_deliveries!(), outbox_events!(), sqlite_links!());

/// A new payment's statements, sent to the writer at once (see payments.rs).
const HOLD_SQL: &str = super::payments::SQLITE_HOLD_SQL;
const CHARGE_SQL: &str = super::payments::SQLITE_CHARGE_SQL;
/// …and to an account named by id, read by the same trip to the writer (pay,
/// charge): a trip to a reader first would cost more than the read.
const TO_ACCOUNT_SQL: (&str, &str) = (
    super::payments::SQLITE_HOLD_TO_ACCOUNT_SQL,
    super::payments::SQLITE_CHARGE_TO_ACCOUNT_SQL,
);

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
    use super::queries::Backend;
    use super::*;

    /// Writes queued together commit in one group: one that fails half-way
    /// has the group written again, each write in its own savepoint, so that
    /// it is rolled back alone and answered with its own error, and the others
    /// of its group are written once.
    #[tokio::test]
    async fn a_write_that_fails_in_a_group_leaves_the_others_written() -> anyhow::Result<()> {
        let (_dir, store) = migrated_store().await?;
        let store = std::sync::Arc::new(store);
        let insert = |keys: &'static [&'static str]| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut sql = String::from(crate::store::payments::SQLITE_SAVEPOINT_OPEN);
                for key in keys {
                    sql.push_str(&format!(
                        "INSERT INTO server_settings (key, value) VALUES ('{key}', $1); "
                    ));
                }
                sql.push_str(
                    crate::store::payments::SQLITE_SAVEPOINT_CLOSE.trim_start_matches("; "),
                );
                let write =
                    GroupWrite::statements(sql, vec![rusqlite::types::Value::Text("v".to_owned())]);
                store.group_writer.write(write).await
            })
        };
        // Held writer: the first write leads and waits for it; the next three
        // queue behind it and form one group.
        let held = store.write().await?;
        let first = insert(&["first"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = insert(&["before"]);
        let failing = insert(&["half", "first"]);
        let after = insert(&["after"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.commit().await?;
        first.await??;
        before.await??;
        assert!(matches!(failing.await?, Err(StoreError::Conflict(_))));
        after.await??;
        let keys: Vec<String> = sqlx::query_scalar("SELECT key FROM server_settings ORDER BY key")
            .fetch_all(&mut *store.lease().await?)
            .await?;
        assert_eq!(keys, ["after", "before", "first"]);
        Ok(())
    }

    /// Each statement the group writer runs for a refresh rotation or a new
    /// payment finds its rows through an index: none reads a whole table,
    /// whatever the number of grants, tokens, users and payments (a
    /// rotation's spend once built the list of every grant of its client).
    #[tokio::test]
    async fn the_group_writes_read_no_table_whole() -> anyhow::Result<()> {
        let (_dir, store) = migrated_store().await?;
        let token = crate::store::Presented {
            digest: "digest",
            client_id: "client",
            now: 1,
        };
        let successor = |kind| crate::store::NewToken {
            digest: format!("{kind:?}"),
            kind,
            scopes: None,
            created_at: 1,
            expires_at: 2,
        };
        let successors = [
            successor(crate::store::TokenKind::Access),
            successor(crate::store::TokenKind::Refresh),
        ];
        let (rotation, _) = group_writes::rotation_statements(token, &successors);
        let writes = [
            ("rotation", rotation.as_str(), 3),
            ("hold", crate::store::payments::SQLITE_HOLD_SQL, 4),
            (
                "hold to an account",
                crate::store::payments::SQLITE_HOLD_TO_ACCOUNT_SQL,
                5,
            ),
            ("charge", crate::store::payments::SQLITE_CHARGE_SQL, 3),
            (
                "charge to an account",
                crate::store::payments::SQLITE_CHARGE_TO_ACCOUNT_SQL,
                3,
            ),
        ];
        let mut lease = store.lease().await?;
        // Without the foreign-key programs: a parent row inserted by an
        // INSERT ... SELECT gets a scan of each child table in its plan, which
        // SQLite runs only while the statement has a violation outstanding.
        sqlx::query("PRAGMA foreign_keys = OFF")
            .execute(&mut *lease)
            .await?;
        for (write, sql, statements) in writes {
            let mut explained = 0;
            for statement in sql.split(';').map(str::trim) {
                if statement.is_empty()
                    || statement.starts_with("SAVEPOINT")
                    || statement.starts_with("RELEASE")
                {
                    continue;
                }
                let plan = explain(&mut lease, statement).await?;
                // Subqueries the plan runs as co-routines or materializes:
                // scanning one reads no table.
                let subqueries: Vec<&str> = plan
                    .iter()
                    .filter_map(|step| {
                        step.strip_prefix("CO-ROUTINE ")
                            .or_else(|| step.strip_prefix("MATERIALIZE "))
                    })
                    .collect();
                for step in &plan {
                    let Some(scanned) = step.strip_prefix("SCAN ") else {
                        continue;
                    };
                    let reads_no_table = scanned.starts_with("CONSTANT ROW")
                        || scanned.ends_with("VALUES CLAUSE")
                        || subqueries.contains(&scanned);
                    assert!(
                        reads_no_table,
                        "{write}: {step} in {plan:?}\nof {statement}"
                    );
                }
                explained += 1;
            }
            assert_eq!(explained, statements, "{write}: {sql}");
        }
        sqlx::query("PRAGMA foreign_keys = ON")
            .execute(&mut *lease)
            .await?;
        Ok(())
    }

    /// Both writers run with the backstop `WRITER_AUTOCHECKPOINT_PAGES`,
    /// which the checkpointer's restart (`WAL_RESTART_PAGES`) is checked to
    /// come before when the crate compiles.
    #[tokio::test]
    async fn both_writers_keep_the_checkpoint_backstop() -> anyhow::Result<()> {
        let (dir, store) = migrated_store().await?;
        let pages: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
            .fetch_one(&store.writer)
            .await?;
        assert_eq!(pages, WRITER_AUTOCHECKPOINT_PAGES);
        let group = group::open(&dir.path().join("tally.db"))?;
        let pages: i64 = group.query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0))?;
        assert_eq!(pages, WRITER_AUTOCHECKPOINT_PAGES);
        Ok(())
    }

    /// The statements SQLite runs in place are the ones PostgreSQL's
    /// functions run, but for the names of their parameters: the due read
    /// of a settlement round (`settle_due`) and user search's walk
    /// (`users_named_like`).
    #[test]
    fn sqlites_statements_are_those_of_postgresqls_functions() {
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let cases = [
            (
                crate::store::payments::SETTLEMENT_DUE_SQL
                    .trim_start_matches("SELECT p.id ")
                    .replace("$1", "settle_by")
                    .replace("$2", "cardinality(movement_ids)"),
                include_str!("../../sql/postgres/functions/settle_due.sql"),
            ),
            (
                USERS_NAMED_LIKE
                    .replace("$1", "pattern")
                    .replace("$6", "users_named_like.trigram")
                    .replace("$7", "most"),
                include_str!("../../sql/postgres/functions/users_named_like.sql"),
            ),
        ];
        for (statement, function) in cases {
            assert!(
                words(function).contains(&words(&statement)),
                "{statement}\nis not in\n{function}"
            );
        }
    }

    /// A store on a fresh, migrated database file in a directory of its own
    /// (deleted with the returned guard).
    async fn migrated_store() -> anyhow::Result<(tempfile::TempDir, SqliteStore)> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("tally.db").display());
        let store = SqliteStore::connect(&url).await?;
        store.run_migrations().await?;
        Ok((dir, store))
    }

    /// The steps of a statement's query plan.
    async fn explain(
        lease: &mut Lease<'_, Sqlite>,
        statement: &str,
    ) -> anyhow::Result<Vec<String>> {
        use sqlx::Row as _;
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {statement}"))
            .fetch_all(&mut **lease)
            .await?;
        Ok(rows.iter().map(|row| row.get::<String, _>(3)).collect())
    }

    /// The state of issue 10: SQLite rolled a transaction back by itself (as it
    /// does when a COMMIT finds the disk full), so sqlx's COMMIT and ROLLBACK
    /// both fail and the connection stays counted inside a transaction. The
    /// next write must get a working writer, not "non-zero transaction depth".
    #[tokio::test]
    async fn a_write_after_sqlite_rolled_back_by_itself_succeeds() -> anyhow::Result<()> {
        let (_dir, store) = migrated_store().await?;
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

    /// A write refused for want of room fails readiness at once, even while
    /// the writer is too busy for readiness to probe it (as under load, when
    /// a settlement round holds it past the wait).
    #[tokio::test]
    async fn a_write_refused_on_a_full_disk_fails_readiness_while_the_writer_is_busy(
    ) -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("tally.db").display());
        let limit = dir.path().join("page-limit");
        let store = SqliteStore::connect_with_page_limit(&url, Some(limit.clone())).await?;
        store.run_migrations().await?;
        store.ready().await?;
        // "The disk is full": no page beyond the database's present size.
        std::fs::write(&limit, "1")?;
        // Small rows, as pays are: SQLite refuses the one that needs a new
        // page and keeps the transaction, so the group commits without it.
        let mut refused = Ok(Vec::new());
        for n in 0..1000 {
            refused = store
                .group_writer
                .write(GroupWrite::statements(
                    "SAVEPOINT write; \
                     INSERT INTO server_settings (key, value) \
                     VALUES ($1 || ' a', hex(randomblob(100))), ($1 || ' b', hex(randomblob(100))); \
                     RELEASE write",
                    vec![format!("row {n}").into()],
                ))
                .await;
            if refused.is_err() {
                break;
            }
        }
        assert!(
            matches!(refused, Err(StoreError::Unavailable(_))),
            "{refused:?}"
        );
        let _busy = store.writer.acquire().await?;
        assert!(store.ready().await.is_err());
        Ok(())
    }

    /// A pass, tried again while the store's own checkpointer (running beside
    /// the test's) holds the checkpoint lock and so makes ours copy nothing.
    async fn pass_when_free(checkpointer: &mut Checkpointer) -> Option<i64> {
        for _ in 0..100 {
            if let Some(pages) = checkpointer.pass().await {
                return Some(pages);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        None
    }

    /// A checkpointer pass copies the WAL into the database file and syncs
    /// the file once for what it copied; only a pass that copied every page
    /// (and synced them) reports the WAL's size, which may ask for a restart.
    #[tokio::test]
    async fn a_checkpointer_pass_syncs_what_it_copied() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("tally.db");
        let url = format!("sqlite://{}", path.display());
        let store = SqliteStore::connect(&url).await?;
        store.run_migrations().await?;
        let mut checkpointer = Checkpointer {
            pool: SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(SqliteConnectOptions::from_str(&url)?)
                .await?,
            file: DatabaseFile::open(&path),
            synced: 0,
            health: store.health.clone(),
        };
        assert!(checkpointer.file.is_some());
        let mut tx = store.write().await?;
        sqlx::query("INSERT INTO server_settings (key, value) VALUES ('k', 'v')")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let pages = pass_when_free(&mut checkpointer).await.unwrap_or_default();
        assert!(pages > 0, "every page copied, and the WAL's size reported");
        assert_eq!(checkpointer.synced, pages);
        assert_eq!(
            pass_when_free(&mut checkpointer).await,
            Some(pages),
            "nothing new to copy"
        );
        let mut caught_up = false;
        for _ in 0..100 {
            caught_up = checkpointer.catch_up(pages).await;
            if caught_up {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(caught_up, "a pass that finds nothing new has caught up");
        assert!(!store.health.failed_recently());
        assert!(DatabaseFile::open(&dir.path().join("missing.db")).is_none());
        Ok(())
    }
}
