//! Group commit on SQLite, on a thread and a connection of its own.
//!
//! The writes that are all or nothing by themselves (a new payment, a refresh
//! token's rotation, a settlement round: `group_writes.rs`) queue here. A
//! write queued while none is being written leads: it takes every write queued by then (up to [`MAX_GROUP`]) and the
//! group thread commits them in one transaction; then the writes queued
//! meanwhile, until none is left. One BEGIN, one COMMIT and one hand-over
//! serve the whole group. Each write is still all or nothing, and one that
//! fails leaves the others in: the group is then written again with each
//! write in a savepoint of its own (see [`write_group`]).
//!
//! Why a thread with its own connection (rusqlite), not sqlx's writer: sqlx
//! runs each SQLite connection on a thread of its own and hands every
//! statement, and every statement's result, across threads. With the server on
//! one core each hand-over is a context switch, about eleven per pay: most of
//! a pay's cost after SQLite's own work (docs/decisions/002-sqlite-group-thread.md). Here a group crosses once each way,
//! and its statements run where they are prepared.
//!
//! The group thread's connection is a second writer of the same file, so the
//! leader holds sqlx's one writer connection while a group is written: the
//! write transactions of `SqliteStore::write` wait for it, as they wait for
//! each other, and neither side ever finds the database locked.

use super::writer::{page_limit, WalRestart, WriterHealth, WRITER_AUTOCHECKPOINT_PAGES};
use crate::store::batch_queue::{submit, take_front, BatchQueue, Batches};
use crate::store::webhooks::OutboxEvent;
use crate::store::StoreError;
use rusqlite::types::Value;
use sqlx::SqlitePool;
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use tokio::sync::oneshot;

/// The most writes one group commits together.
const MAX_GROUP: usize = 64;

/// Prepared statements the group thread keeps: every statement of every
/// group write's form, with room to spare.
const STATEMENT_CACHE: usize = 64;

/// A row a group write's statements returned, its columns in order.
pub(crate) type Row = Vec<Value>;

/// One write for the group: it runs on the group thread's connection inside
/// the group's transaction, when asked in the savepoint `write` (opened first
/// and released last, see `sqlite_savepoint!`) so that if it fails it is
/// rolled back alone; its answer is the rows it read. It may run twice (see
/// [`write_group`]), and must do the same both times.
pub(crate) struct GroupWrite(Box<WriteFn>);

/// What a group write runs on the group thread's connection.
type WriteFn = dyn Fn(&rusqlite::Connection, Savepoint) -> Result<Vec<Row>, rusqlite::Error> + Send;

/// Whether a group write runs in its own savepoint (see [`write_group`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Savepoint {
    Own,
    None,
}

/// The statements of a group write's savepoint, as `sqlite_savepoint!` writes
/// them (a test holds the two to each other).
const SAVEPOINT_OPEN: &str = "SAVEPOINT write";
const SAVEPOINT_RELEASE: &str = "RELEASE write";

impl GroupWrite {
    /// Statements separated by `;` (never inside a literal), with `$n`
    /// parameters (`$1` the first of `params`), the first `SAVEPOINT write`
    /// and the last `RELEASE write`; the rows of all of them.
    pub(crate) fn statements(sql: impl Into<Cow<'static, str>>, params: Vec<Value>) -> Self {
        let sql = sql.into();
        Self(Box::new(move |conn, savepoint| {
            run_statements(conn, &sql, &params, savepoint)
        }))
    }

    /// A write in Rust, run in the savepoint `write` when asked.
    pub(super) fn in_savepoint(
        write: impl Fn(&rusqlite::Connection) -> Result<Vec<Row>, rusqlite::Error> + Send + 'static,
    ) -> Self {
        Self(Box::new(move |conn, savepoint| {
            if savepoint == Savepoint::Own {
                conn.execute_batch(SAVEPOINT_OPEN)?;
            }
            let rows = write(conn)?;
            if savepoint == Savepoint::Own {
                conn.execute_batch(SAVEPOINT_RELEASE)?;
            }
            Ok(rows)
        }))
    }
}

/// The rows of all of a write's statements, in order, once its group has
/// committed.
type Answer = oneshot::Sender<Result<Vec<Row>, StoreError>>;

/// A write's answer and where it goes.
type Answered = (Answer, Result<Vec<Row>, StoreError>);

pub(crate) struct Job {
    write: GroupWrite,
    answer: Answer,
}

/// A group for the thread, and how it hands the leader the group's answers.
struct Group {
    jobs: Vec<Job>,
    done: oneshot::Sender<Vec<Answered>>,
}

pub(super) struct GroupWriter {
    /// sqlx's one writer, held while a group is written (see the module).
    writer: SqlitePool,
    thread: mpsc::Sender<Group>,
    /// The writes queued, and their one leader at a time (the leader
    /// protocol PostgreSQL's pay batches and `/me`'s reads use too).
    queue: BatchQueue<Job>,
}

impl GroupWriter {
    /// Starts the group thread on the database at `path`. It stops when the
    /// writer is dropped.
    pub(super) fn start(
        writer: SqlitePool,
        path: PathBuf,
        page_limit_file: Option<PathBuf>,
        health: Arc<WriterHealth>,
        wal_restart: Arc<WalRestart>,
    ) -> std::io::Result<Self> {
        let (thread, groups) = mpsc::channel();
        let mut group_thread = GroupThread {
            path,
            page_limit_file,
            health,
            wal_restart,
            conn: None,
        };
        std::thread::Builder::new()
            .name("sqlite-group".to_owned())
            .spawn(move || {
                for group in groups {
                    group_thread.commit(group);
                }
            })?;
        Ok(Self {
            writer,
            thread,
            queue: BatchQueue::new(1),
        })
    }

    /// Queues `write` and waits for its rows, which come once the group it
    /// ran in has committed.
    pub(super) async fn write(self: &Arc<Self>, write: GroupWrite) -> Result<Vec<Row>, StoreError> {
        // Unanswered: the group failed before this write ran (or the writer
        // is gone with the store); nothing of it was written.
        submit(self, |answer| Job { write, answer }).await
    }
}

/// A leader takes up to [`MAX_GROUP`] writes a group, until nothing is
/// queued. If it ends early (a panic, or its runtime shutting down), the
/// writes still queued are dropped, so their callers answer 503 instead of
/// waiting, and the next write leads.
impl Batches for GroupWriter {
    type Item = Job;
    const UNANSWERED: &'static str = "the SQLite writer could not run this write";

    fn queue(&self) -> &BatchQueue<Job> {
        &self.queue
    }

    fn take(queued: &mut std::collections::VecDeque<Job>) -> Vec<Job> {
        take_front(queued, MAX_GROUP)
    }

    fn run(&self, jobs: Vec<Job>) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.commit(jobs)
    }
}

impl GroupWriter {
    /// Has the group thread commit `jobs` while sqlx's writer is held.
    async fn commit(&self, jobs: Vec<Job>) {
        let held = match self.writer.acquire().await {
            Ok(held) => held,
            Err(error) => {
                let error = StoreError::from(error);
                let message = error.to_string();
                for job in jobs {
                    let _ = job.answer.send(Err(unavailable(&message)));
                }
                return;
            }
        };
        let (done, finished) = oneshot::channel();
        let sent = self.thread.send(Group { jobs, done });
        // A thread that is gone drops the group: its writes answer 503.
        if sent.is_ok() {
            if let Ok(answers) = finished.await {
                drop(held);
                // Answered here, on the runtime: each answer wakes its
                // caller's task without a wake of this thread from the group
                // thread, which would take the core from it once per write.
                for (answer, result) in answers {
                    // The caller may have gone; the write stands all the same.
                    let _ = answer.send(result);
                }
            }
        }
    }
}

/// The group thread: its connection (opened when first needed, and again
/// after one was found broken) and what it needs to open one.
struct GroupThread {
    path: PathBuf,
    page_limit_file: Option<PathBuf>,
    health: Arc<WriterHealth>,
    wal_restart: Arc<WalRestart>,
    conn: Option<rusqlite::Connection>,
}

impl GroupThread {
    /// Commits a group and hands the leader the answer to each of its
    /// writes: its rows, its own error, or the group's when the group did not
    /// commit.
    fn commit(&mut self, group: Group) {
        let Group { jobs, done } = group;
        let mut answers = Vec::with_capacity(jobs.len());
        let failure = self.run(jobs, &mut answers);
        let answers = answers
            .into_iter()
            .map(|(answer, result)| {
                let result = match (&failure, result) {
                    (_, Err(own)) => Err(own),
                    (Some(failure), Ok(_)) => Err(group_error(failure)),
                    (None, Ok(rows)) => Ok(rows),
                };
                (answer, result)
            })
            .collect();
        // A leader that is gone (its runtime shutting down) cannot pass them
        // on: answered from here instead.
        if let Err(answers) = done.send(answers) {
            for (answer, result) in answers {
                let _ = answer.send(result);
            }
        }
        if failure.is_none() && self.wal_restart.take() {
            self.finish_checkpoint();
        }
    }

    /// Copies into the database file what the checkpointer left of the WAL
    /// (see [`WalRestart`]), so that the next group's write starts it over.
    /// A failure here loses nothing: the checkpointer and the backstop go on.
    fn finish_checkpoint(&self) {
        let Some(conn) = &self.conn else { return };
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            if let Some(suppressed) = crate::log_throttle::admit("sqlite checkpoint failed") {
                tracing::warn!(%error, suppressed, "the SQLite WAL could not be checkpointed");
            }
        }
    }

    /// Runs the writes in one transaction on the thread's connection (opened
    /// now if there is none); the group's failure, if it did not commit. A
    /// write that never ran is dropped (see `GroupWriter::write`).
    fn run(&mut self, jobs: Vec<Job>, answers: &mut Vec<Answered>) -> Option<rusqlite::Error> {
        if self.conn.is_none() {
            match open(&self.path) {
                Ok(conn) => self.conn = Some(conn),
                Err(error) => return Some(error),
            }
        }
        let conn = self.conn.as_ref()?;
        let failure = write_group(conn, self.page_limit_file.as_deref(), jobs, answers);
        if let Some(error) = &failure {
            self.after_failure(is_busy(error));
        } else if answers
            .iter()
            .any(|(_, result)| matches!(result, Err(StoreError::Unavailable(_))))
        {
            // A write refused for a cause outside it (a full disk, an I/O
            // error) while the others committed: the next may be refused too,
            // and readiness must say so even when it finds the writer too busy
            // to probe.
            self.health.failed();
        }
        failure
    }

    /// Rolls back what is left of a group that failed. When no transaction is
    /// left, either BEGIN did not get the lock (busy: nothing is wrong with
    /// the writer) or SQLite rolled back by itself (e.g. a full disk), and the
    /// writer counts as failed a moment. Any other failure: a fresh
    /// connection for the next group.
    fn after_failure(&mut self, busy: bool) {
        let Some(conn) = &self.conn else { return };
        if let Err(rollback) = conn.execute_batch("ROLLBACK") {
            if !rollback.to_string().contains("no transaction is active") {
                self.health.failed();
                self.conn = None;
            } else if !busy {
                self.health.failed();
            }
        }
    }
}

/// Writes a group in one transaction; the group's failure, if it did not
/// commit.
///
/// The writes run first without savepoints: a savepoint copies each page
/// before its write first changes it, about a twentieth of a pay's time, and
/// writes almost never fail (a pay the balance does not cover writes nothing,
/// by its guards, without an error). When one does fail, the whole group is
/// rolled back and written again with each write in its savepoint, so that
/// the one that fails is rolled back alone and the others are written.
fn write_group(
    conn: &rusqlite::Connection,
    page_limit_file: Option<&std::path::Path>,
    jobs: Vec<Job>,
    answers: &mut Vec<Answered>,
) -> Option<rusqlite::Error> {
    if let Err(error) = begin(conn, page_limit_file) {
        return Some(error);
    }
    let written: Result<Vec<Vec<Row>>, _> = jobs
        .iter()
        .map(|job| (job.write.0)(conn, Savepoint::None))
        .collect();
    match written {
        Ok(rows) => {
            let answered = jobs.into_iter().zip(rows);
            answers.extend(answered.map(|(job, rows)| (job.answer, Ok(rows))));
            if let Err(error) = write_outbox(conn) {
                return Some(error);
            }
            conn.execute_batch("COMMIT").err()
        }
        Err(_) => {
            // SQLite may have rolled back by itself (e.g. a full disk).
            if !conn.is_autocommit() {
                if let Err(error) = conn.execute_batch("ROLLBACK") {
                    return Some(error);
                }
            }
            if let Err(error) = begin(conn, page_limit_file) {
                return Some(error);
            }
            write_each_in_savepoint(conn, jobs, answers)
        }
    }
}

/// Writes a group in the open transaction, each write in its savepoint; the
/// group's failure, if it did not commit.
fn write_each_in_savepoint(
    conn: &rusqlite::Connection,
    jobs: Vec<Job>,
    answers: &mut Vec<Answered>,
) -> Option<rusqlite::Error> {
    for job in jobs {
        let events_before = EVENTS.with_borrow(Vec::len);
        let result = (job.write.0)(conn, Savepoint::Own);
        let failed = result.is_err();
        answers.push((job.answer, result.map_err(store_error)));
        // When the savepoint is gone, so is the transaction (SQLite rolls a
        // whole transaction back by itself on some errors, e.g. a full disk):
        // that fails the group, so no later write runs outside it and no
        // earlier one is answered as written.
        if failed {
            EVENTS.with_borrow_mut(|events| events.truncate(events_before));
            if let Err(error) = conn.execute_batch(ROLL_BACK_WRITE) {
                return Some(error);
            }
        }
    }
    if let Err(error) = write_outbox(conn) {
        return Some(error);
    }
    conn.execute_batch("COMMIT").err()
}

/// How long a statement waits for another connection's lock on the file
/// before it fails as busy: every connection the SQLite store opens, sqlx's
/// and its own (this thread's, the audit's).
pub(super) const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The group thread's connection, set up as sqlx's writer is (the file is
/// in WAL mode already: sqlx made it so).
pub(super) fn open(path: &std::path::Path) -> Result<rusqlite::Connection, rusqlite::Error> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_handler(Some(wait_for_lock))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.execute_batch(concat!(
        "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; ",
        // Savepoints' sub-journals in memory (see sqlx's writer in sqlite.rs).
        "PRAGMA temp_store = MEMORY; ",
    ))?;
    conn.pragma_update(None, "wal_autocheckpoint", WRITER_AUTOCHECKPOINT_PAGES)?;
    Ok(conn)
}

/// The wait before try `attempt` (0 for the first retry) at a lock another
/// connection holds, `None` once [`BUSY_TIMEOUT`] has been waited: short
/// sleeps for [`LOCK_SPIN`], then a millisecond each. SQLite's own handler
/// (`busy_timeout`) sleeps 1, 2, 5, 10 … ms, so a lock held for a
/// millisecond (the delivery worker recording its attempts) cost the
/// group thread many times that, every pay waiting behind it (decision 019
/// has the measurement).
fn lock_wait(attempt: i32) -> Option<std::time::Duration> {
    use std::time::Duration;
    const SHORT: Duration = Duration::from_micros(50);
    const LONG: Duration = Duration::from_millis(1);
    let attempt = u32::try_from(attempt).ok()?;
    let short_tries = LOCK_SPIN.as_micros() / SHORT.as_micros();
    let long_tries = BUSY_TIMEOUT.saturating_sub(LOCK_SPIN).as_micros() / LONG.as_micros();
    let attempt = u128::from(attempt);
    if attempt < short_tries {
        Some(SHORT)
    } else if attempt < short_tries + long_tries {
        Some(LONG)
    } else {
        None
    }
}

/// How long the group thread retries a held lock in short sleeps.
const LOCK_SPIN: std::time::Duration = std::time::Duration::from_millis(10);

/// The group thread's busy handler: waits [`lock_wait`], or gives up.
fn wait_for_lock(attempt: i32) -> bool {
    lock_wait(attempt).map(std::thread::sleep).is_some()
}

/// The test hook of `PAGE_LIMIT_FILE_VARIABLE`, then the transaction.
fn begin(
    conn: &rusqlite::Connection,
    page_limit_file: Option<&std::path::Path>,
) -> Result<(), rusqlite::Error> {
    if let Some(limit) = page_limit(page_limit_file) {
        conn.pragma_update(None, "max_page_count", limit)?;
    }
    ENDPOINTS.set(None);
    EVENTS.take();
    conn.execute_batch("BEGIN IMMEDIATE")
}

std::thread_local! {
    /// The payment events of the open group transaction's writes so far
    /// (see [`push_event`]).
    static EVENTS: std::cell::RefCell<Vec<OutboxEvent>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Whether an enabled webhook endpoint exists, as the group thread's
    /// open transaction found it (`None`: not looked yet); see
    /// [`endpoints_exist`].
    static ENDPOINTS: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether an enabled webhook endpoint exists, read once per group
/// transaction: its writes hold the database's write lock from `BEGIN
/// IMMEDIATE` to `COMMIT`, so no connection, in this process or another
/// (`tally admin app webhook add`), adds one meanwhile. Without one, a
/// group's payment events write nothing and are skipped, so that pays
/// without a subscriber cost one read of an empty table per group.
pub(super) fn endpoints_exist(conn: &rusqlite::Connection) -> Result<bool, rusqlite::Error> {
    if let Some(known) = ENDPOINTS.get() {
        if !conn.is_autocommit() {
            return Ok(known);
        }
    }
    let exist = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL)",
        )?
        .query_row([], |row| row.get(0))?;
    if !conn.is_autocommit() {
        ENDPOINTS.set(Some(exist));
    }
    Ok(exist)
}

/// Adds a payment event of the write being run to its group's outbox row,
/// which [`write_outbox`] writes when the group's writes are done: one row
/// appended per group, however many events its writes have, instead of
/// statements per event on the pays' one pipeline (decision 019). A write
/// rolled back to its savepoint loses its events with it
/// ([`write_each_in_savepoint`]).
pub(super) fn push_event(event: OutboxEvent) {
    EVENTS.with_borrow_mut(|events| events.push(event));
}

/// Writes the group's payment events, if it has any, as one outbox row.
fn write_outbox(conn: &rusqlite::Connection) -> Result<(), rusqlite::Error> {
    let events = EVENTS.take();
    if events.is_empty() {
        return Ok(());
    }
    let json = serde_json::to_string(&events)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    conn.prepare_cached("INSERT INTO webhook_outbox (events) VALUES (?1)")?
        .execute([json])?;
    Ok(())
}

/// Rolls a group write back to its savepoint, and closes it.
const ROLL_BACK_WRITE: &str = "ROLLBACK TO write; RELEASE write";

/// Runs statements separated by `;` as [`run_statements`] does outside a
/// write's own savepoint (its `SAVEPOINT write` and `RELEASE write` left out),
/// for a write in Rust that runs them among others.
pub(super) fn run_in_write(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Row>, rusqlite::Error> {
    run_statements(conn, sql, params, Savepoint::None)
}

/// Runs statements separated by `;`, each prepared once and kept (without
/// the write's savepoint unless asked); the rows of all.
fn run_statements(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[Value],
    savepoint: Savepoint,
) -> Result<Vec<Row>, rusqlite::Error> {
    let mut rows = Vec::new();
    let statements = sql.split(';').map(str::trim).filter(|s| !s.is_empty());
    let wanted =
        |s: &&str| savepoint == Savepoint::Own || !matches!(*s, SAVEPOINT_OPEN | SAVEPOINT_RELEASE);
    for sql in statements.filter(wanted) {
        let mut statement = conn.prepare_cached(sql)?;
        for index in 1..=statement.parameter_count() {
            let value = statement
                .parameter_name(index)
                .and_then(|name| name.strip_prefix('$'))
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| params.get(n.checked_sub(1)?))
                .ok_or(rusqlite::Error::InvalidParameterCount(index, params.len()))?;
            statement.raw_bind_parameter(index, value)?;
        }
        let columns = statement.column_count();
        let mut results = statement.raw_query();
        while let Some(row) = results.next()? {
            rows.push(
                (0..columns)
                    .map(|i| row.get::<_, Value>(i))
                    .collect::<Result<Row, _>>()?,
            );
        }
    }
    Ok(rows)
}

/// SQLITE_BUSY or SQLITE_LOCKED: another connection holds the lock.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// A write's own error, told as sqlx's would be.
pub(super) fn store_error(error: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(failure, message) = &error {
        let text = message.clone().unwrap_or_else(|| failure.to_string());
        if crate::store::error::sqlite_transient(failure.extended_code) {
            return unavailable(&text);
        }
        // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY.
        if matches!(failure.extended_code, 2067 | 1555) {
            return StoreError::Conflict(crate::store::error::conflicting_field(&text));
        }
    }
    StoreError::Unexpected(anyhow::Error::new(error).context("database error"))
}

/// The error of a write whose group did not commit.
fn group_error(failure: &rusqlite::Error) -> StoreError {
    let message = format!("the write's group failed: {failure}");
    match failure {
        rusqlite::Error::SqliteFailure(code, _)
            if crate::store::error::sqlite_transient(code.extended_code) =>
        {
            unavailable(&message)
        }
        _ => StoreError::Unexpected(anyhow::anyhow!(message)),
    }
}

fn unavailable(message: &str) -> StoreError {
    StoreError::Unavailable(sqlx::Error::Protocol(message.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_retried_in_short_sleeps_then_given_up_after_the_timeout() {
        let waits: Vec<_> = (0..).map_while(lock_wait).collect();
        let total: std::time::Duration = waits.iter().sum();
        assert_eq!(total, BUSY_TIMEOUT);
        assert!(waits[0] < std::time::Duration::from_millis(1));
        assert_eq!(lock_wait(-1), None);
    }

    /// The statements the group leaves out of a write run without its
    /// savepoint are the ones `sqlite_savepoint!` puts in.
    #[test]
    fn the_savepoint_left_out_is_the_one_the_statements_open() {
        let statements = |sql: &str| {
            sql.split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let open = crate::store::payments::SQLITE_SAVEPOINT_OPEN;
        let close = crate::store::payments::SQLITE_SAVEPOINT_CLOSE;
        assert_eq!(statements(open), [SAVEPOINT_OPEN]);
        assert_eq!(statements(close), [SAVEPOINT_RELEASE]);
        assert_eq!(
            statements(ROLL_BACK_WRITE)[1],
            SAVEPOINT_RELEASE,
            "the rollback closes the same savepoint"
        );
    }
}
