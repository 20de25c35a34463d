use super::pool::{connections_per_core, BatchFuture, Lease, Lender, RevocationEpoch};
use super::*;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Sqlite, SqliteConnection, SqlitePool, Transaction};
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

/// How long readiness waits for the writer to probe it.
const READINESS_WRITER_WAIT: Duration = Duration::from_millis(250);

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
    /// Reads that need no transaction: no ping, one trip each.
    readers: Lender<Sqlite>,
    /// Snapshots (read transactions), readiness and backups.
    reader: SqlitePool,
    /// The one writer: transactions take it through this pool, and the group
    /// writer takes it for each group.
    writer: SqlitePool,
    /// Group commit of the one-trip writes (see [`GroupWriter`]).
    group_writer: Arc<GroupWriter>,
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
            .connect_with(
                options
                    .clone()
                    .thread_name(|_| "sqlite-writer".to_owned())
                    .pragma("wal_autocheckpoint", WRITER_AUTOCHECKPOINT_PAGES)
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
        let readers = Lender::new(
            options.clone(),
            connections_per_core(2, 2, 8),
            Duration::from_secs(10),
        );
        let reader = SqlitePoolOptions::new()
            .max_connections(2)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let page_limit_file = std::env::var_os(PAGE_LIMIT_FILE_VARIABLE).map(PathBuf::from);
        let group_writer = Arc::new(GroupWriter {
            writer: writer.clone(),
            health: health.clone(),
            page_limit_file: page_limit_file.clone(),
            queue: Mutex::default(),
        });
        tokio::spawn(checkpoint_wal(checkpointer, Arc::downgrade(&group_writer)));
        Ok(Self {
            readers,
            reader,
            writer,
            group_writer,
            health,
            page_limit_file,
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

    /// Nothing to do: SQLite connections run on threads of their own.
    async fn open_connections(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Ready when a reader answers and the writer can write: it was not just
    /// found broken and, when it is free within [`READINESS_WRITER_WAIT`], it
    /// can take the write lock and room for a row (the probe is rolled back).
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
    async fn copy_into(&self, path: &str) -> Result<Option<()>, StoreError> {
        sqlx::query("VACUUM INTO $1")
            .bind(path)
            .execute(&self.reader)
            .await?;
        Ok(Some(()))
    }

    async fn lease(&self) -> Result<Lease<'_, Sqlite>, StoreError> {
        Ok(self.readers.lease().await?)
    }

    async fn write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        self.apply_page_limit(&mut tx).await?;
        Ok(tx)
    }

    /// Queues `batch` for the group writer and waits for its answer, which
    /// comes once the group it ran in has committed.
    async fn write_batch<O, F>(&self, batch: F) -> Result<O, StoreError>
    where
        O: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BatchFuture<'c, O> + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: WriteJob = Box::new(move |conn| {
            Box::pin(async move {
                let result = batch(conn).await;
                let ran = result.is_ok();
                let answer: Answer = Box::new(move |group_failure| {
                    let reply = match (result, group_failure) {
                        (Err(own), _) => Err(StoreError::from(own)),
                        (Ok(_), Some(failure)) => Err(failure),
                        (Ok(out), None) => Ok(out),
                    };
                    // The caller may have gone; the write stands all the same.
                    let _ = answer.send(reply);
                });
                (ran, answer)
            })
        });
        // Unanswered: the group failed before this write ran (or the writer
        // is gone with the store); nothing of it was written.
        let unanswered = || {
            StoreError::Unavailable(sqlx::Error::Protocol(
                "the SQLite writer could not run this write".to_owned(),
            ))
        };
        if self.group_writer.enqueue(job) {
            // This write leads: it commits what is queued, its own first,
            // as a task of its own on this thread's runtime (a request that
            // goes away cannot leave the writer inside a half-sent
            // transaction, and no other thread is woken for it).
            tokio::spawn(self.group_writer.clone().write_queued());
        }
        answered.await.map_err(|_| unanswered())?
    }

    /// The group writer commits writes together already.
    async fn record_in_batch(
        &self,
        _insert: &crate::store::PaymentInsert,
    ) -> Result<Option<crate::store::payments::Recorded>, StoreError> {
        Ok(None)
    }

    /// A read transaction sees one snapshot of the WAL.
    async fn snapshot(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.reader.begin().await?)
    }

    fn revocations(&self) -> &RevocationEpoch {
        &self.revocations
    }
}

/// How often the WAL is checkpointed (see [`checkpoint_wal`]).
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// The writer still checkpoints by itself past this many WAL pages (80 MB):
/// a backstop should the checkpointer fall behind.
const WRITER_AUTOCHECKPOINT_PAGES: &str = "20000";

/// Copies committed pages from the WAL into the database file every
/// [`CHECKPOINT_INTERVAL`] (a passive checkpoint: it never waits for the
/// writer or readers), on a connection of its own. SQLite would otherwise do
/// it on the committing connection, the one writer, every 1,000 pages: a
/// third of its time under load, during which no write can go on. It stops
/// when the store is dropped.
async fn checkpoint_wal(checkpointer: SqlitePool, store: std::sync::Weak<GroupWriter>) {
    let mut ticks = tokio::time::interval(CHECKPOINT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if store.strong_count() == 0 {
            return;
        }
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&checkpointer)
            .await
        {
            if let Some(suppressed) = crate::log_throttle::admit("sqlite checkpoint failed") {
                tracing::warn!(%error, suppressed, "the SQLite WAL could not be checkpointed");
            }
        }
    }
}

/// The most writes one group commits together.
const MAX_GROUP: usize = 64;

/// What a queued write leaves for the end of its group: it sends its caller
/// the answer, given the group's failure if the group did not commit.
type Answer = Box<dyn FnOnce(Option<StoreError>) + Send>;

/// A queued write: runs its statements on the writer and says whether they
/// succeeded (else the writer rolls back to the write's savepoint).
type WriteJob = Box<
    dyn for<'c> FnOnce(
            &'c mut SqliteConnection,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = (bool, Answer)> + Send + 'c>,
        > + Send,
>;

/// Group commit. A write queued while none is being written leads: it takes
/// every write queued by then (up to [`MAX_GROUP`]) and commits them in one
/// transaction, each in a savepoint of its own, so each is still all or
/// nothing and one that fails leaves the others in; then the writes queued
/// meanwhile, until none is left. One BEGIN, one COMMIT and one hand-over of
/// the writer serve the whole group.
struct GroupWriter {
    writer: SqlitePool,
    health: Arc<WriterHealth>,
    page_limit_file: Option<PathBuf>,
    queue: Mutex<WriteQueue>,
}

#[derive(Default)]
struct WriteQueue {
    jobs: Vec<WriteJob>,
    /// A leader is writing: it takes what is queued before it stops.
    writing: bool,
}

/// A leader's turn. If it ends early (a panic, or its runtime shutting down),
/// the writes still queued are dropped, so their callers answer 503 instead
/// of waiting, and the next write leads.
struct Leading<'a> {
    writer: &'a GroupWriter,
    finished: bool,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let mut queue = self.writer.lock_queue();
            queue.jobs.clear();
            queue.writing = false;
        }
    }
}

impl GroupWriter {
    /// Queues `job`; true when its caller is to lead.
    fn enqueue(&self, job: WriteJob) -> bool {
        let mut queue = self.lock_queue();
        queue.jobs.push(job);
        !std::mem::replace(&mut queue.writing, true)
    }

    /// Commits what is queued, a group at a time, until nothing is. The
    /// queue's lock decides: a write queued before the leader sees it empty
    /// is taken by this leader, one queued after leads itself.
    async fn write_queued(self: Arc<Self>) {
        let mut leading = Leading {
            writer: &self,
            finished: false,
        };
        loop {
            let group: Vec<WriteJob> = {
                let mut queue = self.lock_queue();
                if queue.jobs.is_empty() {
                    queue.writing = false;
                    leading.finished = true;
                    return;
                }
                let take = queue.jobs.len().min(MAX_GROUP);
                queue.jobs.drain(..take).collect()
            };
            self.commit(group).await;
        }
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, WriteQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn commit(&self, jobs: Vec<WriteJob>) {
        let mut conn = match self.writer.acquire().await {
            Ok(conn) => conn,
            Err(error) => return fail_all(jobs.into_iter().map(Err), &error),
        };
        if let Err(error) = self.begin(&mut conn).await {
            self.after_failure(&mut conn, is_busy(&error)).await;
            return fail_all(jobs.into_iter().map(Err), &error);
        }
        let count = jobs.len();
        let mut answers: Vec<Answer> = Vec::with_capacity(count);
        let mut jobs = jobs.into_iter().enumerate();
        while let Some((i, job)) = jobs.next() {
            // The write opens and releases its own savepoint (see
            // `sqlite_savepoint!`): no trip here unless it failed.
            let (ran, answer) = job(&mut conn).await;
            answers.push(answer);
            let rolled_back = match ran {
                true => Ok(()),
                false => roll_back_write(&mut conn).await,
            };
            let closed = match (rolled_back, i + 1 == count) {
                (Ok(()), true) => sqlx::query("COMMIT").execute(&mut *conn).await.map(drop),
                (done, _) => done,
            };
            if let Err(error) = closed {
                self.after_failure(&mut conn, is_busy(&error)).await;
                let answered = answers.into_iter().map(Ok);
                let waiting = jobs.map(|(_, job)| Err(job));
                return fail_all(answered.chain(waiting), &error);
            }
        }
        drop(conn);
        for answer in answers {
            answer(None);
        }
    }

    async fn begin(&self, conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
        apply_page_limit(self.page_limit_file.as_deref(), conn)
            .await
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        sqlx::query("BEGIN IMMEDIATE").execute(conn).await?;
        Ok(())
    }

    /// Rolls back what is left of a group that failed. When no transaction is
    /// left, either BEGIN did not get the lock (busy: nothing is wrong with
    /// the writer) or SQLite rolled back by itself (e.g. a full disk), and the
    /// writer counts as failed a moment. Any other failure: a fresh writer.
    async fn after_failure(&self, conn: &mut sqlx::pool::PoolConnection<Sqlite>, busy: bool) {
        if let Err(rollback) = sqlx::query("ROLLBACK").execute(&mut **conn).await {
            if !rollback.to_string().contains("no transaction is active") {
                self.health.failed();
                conn.close_on_drop();
            } else if !busy {
                self.health.failed();
            }
        }
    }
}

/// Rolls back the savepoint of a write that failed. When the savepoint is
/// gone, so is the group's transaction (SQLite rolls a whole transaction back
/// by itself on some errors, e.g. a full disk): that fails the group, so no
/// later write runs outside it and no earlier one is answered as written.
async fn roll_back_write(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    sqlx::query("ROLLBACK TO write; RELEASE write")
        .execute(conn)
        .await
        .map(drop)
}

/// Answers every write of a group that did not commit with the group's error
/// (a write that failed by itself keeps its own). A write that never ran is
/// dropped, and its caller gets the same kind of error (see `write_batch`).
fn fail_all(jobs: impl Iterator<Item = Result<Answer, WriteJob>>, error: &sqlx::Error) {
    let transient = super::error::is_transient(error);
    for answer in jobs.flatten() {
        let message = format!("the write's group failed: {error}");
        answer(Some(if transient {
            StoreError::Unavailable(sqlx::Error::Protocol(message))
        } else {
            StoreError::Unexpected(anyhow::anyhow!(message))
        }));
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

/// No data-modifying CTEs: a write of several tables is statements sent at once.
const DATA_MODIFYING_CTES: bool = false;
/// A new payment's statements, sent to the writer at once (see payments.rs).
const HOLD_SQL: &str = super::payments::SQLITE_HOLD_SQL;
const CHARGE_SQL: &str = super::payments::SQLITE_CHARGE_SQL;
/// …and to an account named by id, read by the same trip to the writer (pay,
/// charge): a trip to a reader first would cost more than the read.
const TO_ACCOUNT_SQL: (&str, &str) = (
    super::payments::SQLITE_HOLD_TO_ACCOUNT_SQL,
    super::payments::SQLITE_CHARGE_TO_ACCOUNT_SQL,
);
/// The one writer already excludes every other settlement.
const LOCK_SETTLED_TARGETS: Option<(&str, &str)> = None;

/// SQLite's planner needs no settings for the audit.
const AUDIT_SETTINGS: &[&str] = &[];
/// The audit's sum of cents: SQLite's own sum of integers is one.
const AUDIT_SUM: &str = "SUM";
/// Entries that name no payment: each named payment once (read in order from
/// the payment index), then looked up.
const AUDIT_ENTRIES_WITHOUT_PAYMENT: &str = "\
    SELECT e.payment_id FROM (SELECT DISTINCT payment_id FROM ledger_entries \
      WHERE payment_id IS NOT NULL) e \
    WHERE NOT EXISTS ( \
      SELECT 1 FROM payments p WHERE p.id = e.payment_id AND p.kind = 'payment')";

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

    /// Writes queued together commit in one group, each in its own savepoint:
    /// one that fails half-way is rolled back to its savepoint and answered
    /// with its own error, and the others of its group are written.
    #[tokio::test]
    async fn a_write_that_fails_in_a_group_leaves_the_others_written() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("tally.db").display());
        let store = std::sync::Arc::new(SqliteStore::connect(&url).await?);
        store.run_migrations().await?;
        let insert = |keys: &'static [&'static str]| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .write_batch(move |conn| {
                        let mut sql = String::from(crate::store::payments::SQLITE_SAVEPOINT_OPEN);
                        for key in keys {
                            sql.push_str(&format!(
                                "INSERT INTO server_settings (key, value) VALUES ('{key}', 'v'); "
                            ));
                        }
                        sql.push_str(
                            crate::store::payments::SQLITE_SAVEPOINT_CLOSE.trim_start_matches("; "),
                        );
                        Box::pin(async move { sqlx::query(&sql).execute(conn).await.map(drop) })
                    })
                    .await
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
