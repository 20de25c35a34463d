//! Group commit on SQLite, on a thread and a connection of its own.
//!
//! The writes that are all or nothing by themselves (a new payment, a refresh
//! token's rotation) queue here. A write queued while none is being written
//! leads: it takes every write queued by then (up to [`MAX_GROUP`]) and the
//! group thread commits them in one transaction, each in a savepoint of its
//! own, so each is still all or nothing and one that fails leaves the others
//! in; then the writes queued meanwhile, until none is left. One BEGIN, one
//! COMMIT and one hand-over serve the whole group.
//!
//! Why a thread with its own connection (rusqlite), not sqlx's writer: sqlx
//! runs each SQLite connection on a thread of its own and hands every
//! statement, and every statement's result, across threads. With the server on
//! one core each hand-over is a context switch: about eleven per pay, most of
//! a pay's cost after SQLite's own work. Here a group crosses once each way,
//! and its statements run where they are prepared.
//!
//! The group thread's connection is a second writer of the same file, so the
//! leader holds sqlx's one writer connection while a group is written: the
//! write transactions of `SqliteStore::write` wait for it, as they wait for
//! each other, and neither side ever finds the database locked.

use super::writer::{page_limit, writer_autocheckpoint_pages, WriterHealth};
use crate::store::StoreError;
use rusqlite::types::Value;
use rusqlite::OptionalExtension;
use sqlx::SqlitePool;
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::oneshot;

/// The most writes one group commits together.
const MAX_GROUP: usize = 64;

/// Prepared statements the group thread keeps: every statement of every
/// group write's form, with room to spare.
const STATEMENT_CACHE: usize = 64;

/// A row a group write's statements returned, its columns in order.
pub(crate) type Row = Vec<Value>;

/// One write for the group: it runs on the group thread's connection inside
/// the group's transaction, opens the savepoint `write` first and releases it
/// last (see `sqlite_savepoint!`), so that a write that fails is rolled back
/// alone; its answer is the rows it read.
pub(crate) struct GroupWrite(Box<WriteFn>);

/// What a group write runs on the group thread's connection.
type WriteFn = dyn FnOnce(&rusqlite::Connection) -> Result<Vec<Row>, rusqlite::Error> + Send;

impl GroupWrite {
    /// Statements separated by `;` (never inside a literal), with `$n`
    /// parameters (`$1` the first of `params`), the first `SAVEPOINT write`
    /// and the last `RELEASE write`; the rows of all of them.
    pub(crate) fn statements(sql: impl Into<Cow<'static, str>>, params: Vec<Value>) -> Self {
        let sql = sql.into();
        Self(Box::new(move |conn| run_statements(conn, &sql, &params)))
    }

    /// A write in Rust, run in the savepoint `write`.
    fn in_savepoint(
        write: impl FnOnce(&rusqlite::Connection) -> Result<Vec<Row>, rusqlite::Error> + Send + 'static,
    ) -> Self {
        Self(Box::new(move |conn| {
            conn.execute_batch("SAVEPOINT write")?;
            let rows = write(conn)?;
            conn.execute_batch("RELEASE write")?;
            Ok(rows)
        }))
    }
}

/// The rows of all of a write's statements, in order, once its group has
/// committed.
type Answer = oneshot::Sender<Result<Vec<Row>, StoreError>>;

struct Job {
    write: GroupWrite,
    answer: Answer,
}

/// A group for the thread, and how it tells the leader it is done with it.
struct Group {
    jobs: Vec<Job>,
    done: oneshot::Sender<()>,
}

#[derive(Default)]
struct WriteQueue {
    jobs: Vec<Job>,
    /// A leader is writing: it takes what is queued before it stops.
    writing: bool,
}

pub(super) struct GroupWriter {
    /// sqlx's one writer, held while a group is written (see the module).
    writer: SqlitePool,
    thread: Mutex<mpsc::Sender<Group>>,
    queue: Mutex<WriteQueue>,
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
    /// Starts the group thread on the database at `path`. It stops when the
    /// writer is dropped.
    pub(super) fn start(
        writer: SqlitePool,
        path: PathBuf,
        page_limit_file: Option<PathBuf>,
        health: Arc<WriterHealth>,
    ) -> std::io::Result<Self> {
        let (thread, groups) = mpsc::channel();
        let mut group_thread = GroupThread {
            path,
            page_limit_file,
            health,
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
            thread: Mutex::new(thread),
            queue: Mutex::default(),
        })
    }

    /// Queues `write` and waits for its rows, which come once the group it
    /// ran in has committed.
    pub(super) async fn write(self: &Arc<Self>, write: GroupWrite) -> Result<Vec<Row>, StoreError> {
        let (answer, answered) = oneshot::channel();
        let leads = {
            let mut queue = self.lock_queue();
            queue.jobs.push(Job { write, answer });
            !std::mem::replace(&mut queue.writing, true)
        };
        if leads {
            // A task of its own: a request that goes away cannot leave the
            // writes queued behind it unanswered.
            tokio::spawn(self.clone().write_queued());
        }
        // Unanswered: the group failed before this write ran (or the writer
        // is gone with the store); nothing of it was written.
        answered.await.map_err(|_| {
            StoreError::Unavailable(sqlx::Error::Protocol(
                "the SQLite writer could not run this write".to_owned(),
            ))
        })?
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
            let jobs: Vec<Job> = {
                let mut queue = self.lock_queue();
                if queue.jobs.is_empty() {
                    queue.writing = false;
                    leading.finished = true;
                    return;
                }
                let take = queue.jobs.len().min(MAX_GROUP);
                queue.jobs.drain(..take).collect()
            };
            self.commit(jobs).await;
        }
    }

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
        let sent = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(Group { jobs, done });
        // A thread that is gone drops the group: its writes answer 503.
        if sent.is_ok() {
            let _ = finished.await;
        }
        drop(held);
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, WriteQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The group thread: its connection (opened when first needed, and again
/// after one was found broken) and what it needs to open one.
struct GroupThread {
    path: PathBuf,
    page_limit_file: Option<PathBuf>,
    health: Arc<WriterHealth>,
    conn: Option<rusqlite::Connection>,
}

impl GroupThread {
    /// Commits a group and answers each of its writes: with its rows, with
    /// its own error, or with the group's when the group did not commit.
    fn commit(&mut self, group: Group) {
        let Group { jobs, done } = group;
        let mut answers = Vec::with_capacity(jobs.len());
        let failure = self.run(jobs, &mut answers);
        for (answer, result) in answers {
            let result = match (&failure, result) {
                (_, Err(own)) => Err(own),
                (Some(failure), Ok(_)) => Err(group_error(failure)),
                (None, Ok(rows)) => Ok(rows),
            };
            // The caller may have gone; the write stands all the same.
            let _ = answer.send(result);
        }
        let _ = done.send(());
    }

    /// Runs the writes in one transaction on the thread's connection (opened
    /// now if there is none); the group's failure, if it did not commit. A
    /// write that never ran is dropped (see `GroupWriter::write`).
    fn run(
        &mut self,
        jobs: Vec<Job>,
        answers: &mut Vec<(Answer, Result<Vec<Row>, StoreError>)>,
    ) -> Option<rusqlite::Error> {
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

/// Writes a group in one transaction, each write in its savepoint; the
/// group's failure, if it did not commit.
fn write_group(
    conn: &rusqlite::Connection,
    page_limit_file: Option<&std::path::Path>,
    jobs: Vec<Job>,
    answers: &mut Vec<(Answer, Result<Vec<Row>, StoreError>)>,
) -> Option<rusqlite::Error> {
    if let Err(error) = begin(conn, page_limit_file) {
        return Some(error);
    }
    for job in jobs {
        let result = (job.write.0)(conn);
        let failed = result.is_err();
        answers.push((job.answer, result.map_err(store_error)));
        // When the savepoint is gone, so is the transaction (SQLite rolls a
        // whole transaction back by itself on some errors, e.g. a full disk):
        // that fails the group, so no later write runs outside it and no
        // earlier one is answered as written.
        if failed {
            if let Err(error) = conn.execute_batch("ROLLBACK TO write; RELEASE write") {
                return Some(error);
            }
        }
    }
    conn.execute_batch("COMMIT").err()
}

/// The group thread's connection, set up as sqlx's writer is (the file is
/// in WAL mode already: sqlx made it so).
fn open(path: &std::path::Path) -> Result<rusqlite::Connection, rusqlite::Error> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.execute_batch(concat!(
        "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; ",
        // Savepoints' sub-journals in memory (see sqlx's writer in sqlite.rs).
        "PRAGMA temp_store = MEMORY; ",
        "PRAGMA wal_autocheckpoint = ",
        writer_autocheckpoint_pages!(),
    ))?;
    Ok(conn)
}

/// The test hook of `PAGE_LIMIT_FILE_VARIABLE`, then the transaction.
fn begin(
    conn: &rusqlite::Connection,
    page_limit_file: Option<&std::path::Path>,
) -> Result<(), rusqlite::Error> {
    if let Some(limit) = page_limit(page_limit_file) {
        conn.pragma_update(None, "max_page_count", limit)?;
    }
    conn.execute_batch("BEGIN IMMEDIATE")
}

/// Runs statements separated by `;`, each prepared once and kept; the rows
/// of all.
fn run_statements(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Row>, rusqlite::Error> {
    let mut rows = Vec::new();
    for sql in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
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
fn store_error(error: rusqlite::Error) -> StoreError {
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

/// What the group writes for a new payment: the parameters of the SQLite
/// new-payment statements (`SQLITE_HOLD_SQL` and its kin), in the order
/// `payment_statements` binds them.
pub(super) fn payment_params(
    insert: &crate::store::PaymentInsert,
) -> Result<Vec<Value>, StoreError> {
    let p = &insert.payment;
    let text = |s: &str| Value::Text(s.to_owned());
    let maybe_text = |s: &Option<String>| s.clone().map_or(Value::Null, Value::Text);
    let maybe_int = |i: Option<i64>| i.map_or(Value::Null, Value::Integer);
    let mut params = vec![
        text(&p.id),
        text(p.kind.as_str()),
        maybe_text(&p.actor_id),
        text(p.target_type.as_str()),
        maybe_text(&p.target_user_id),
        maybe_text(&p.target_email),
        maybe_text(&p.target_phone),
        text(p.action.as_str()),
        Value::Integer(p.amount_cents),
        text(&p.note),
        text(p.audience.as_str()),
        text(p.status.as_str()),
        text(p.medium.as_str()),
        Value::Integer(p.date_created),
        maybe_int(p.date_completed),
        maybe_int(p.reached_account_at),
        maybe_text(&p.refund_payment_id),
    ];
    if let Some(hold) = &insert.hold {
        // As `payment_statements`: the statements debit the actor.
        if !insert.hold_is_from_actor() {
            return Err(StoreError::Unexpected(anyhow::anyhow!(
                "a hold must move the payment's amount from its actor"
            )));
        }
        params.extend([text(&hold.id), text(&hold.to), text(hold.kind.as_str())]);
    }
    Ok(params)
}

/// What a new payment's statements' rows say, as `recorded` tells it from
/// sqlx's rows.
pub(super) fn recorded(
    insert: &crate::store::PaymentInsert,
    rows: &[Row],
) -> Result<crate::store::payments::Recorded, StoreError> {
    use crate::store::payments::Recorded;
    if insert.check_target {
        // The target is read with the write, in the last row: the actor's
        // balance, then the account.
        let Some(row) = rows.last() else {
            return Ok(Recorded::NoSuchTarget);
        };
        return Ok(Recorded::Written {
            actor_balance_cents: column(row, 0)?,
            target: Some(Box::new(user(row, 1)?)),
        });
    }
    let actor_balance_cents = match rows.last() {
        Some(row) => Some(column(row, 0)?),
        None => None,
    };
    if actor_balance_cents.is_none() && insert.hold.is_none() {
        return Err(StoreError::NotFound("user"));
    }
    Ok(Recorded::Written {
        actor_balance_cents,
        target: None,
    })
}

/// A refresh token's rotation for the group: the guarded spend, the grant
/// and its user (read only when the spend changed a row), and the
/// successors (inserted only then), as one write.
pub(super) fn rotation(
    token: crate::store::Presented<'_>,
    successors: &[crate::store::NewToken],
) -> GroupWrite {
    use crate::store::payments::{prefixed, SQLITE_SAVEPOINT_CLOSE, SQLITE_SAVEPOINT_OPEN};
    let mut sql = format!(
        "{SQLITE_SAVEPOINT_OPEN}\
         UPDATE oauth_tokens SET used_at = $1 WHERE digest = $2 AND kind = 'refresh' \
           AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $1 \
           AND grant_id IN (SELECT id FROM oauth_grants \
             WHERE client_id = $3 AND revoked_at IS NULL); \
         SELECT g.id AS grant_id, g.scopes AS grant_scopes, {} \
         FROM oauth_grants g JOIN oauth_tokens t ON t.grant_id = g.id \
         JOIN users u ON u.id = g.user_id WHERE changes() = 1 AND t.digest = $2",
        prefixed(crate::store::sql::USER_COLUMNS, "u")
    );
    let mut params = vec![
        Value::Integer(token.now),
        Value::Text(token.digest.to_owned()),
        Value::Text(token.client_id.to_owned()),
    ];
    if !successors.is_empty() {
        sql.push_str(
            "; INSERT INTO oauth_tokens (digest, grant_id, kind, scopes, created_at, expires_at) \
             SELECT v.column1, t.grant_id, v.column2, v.column3, v.column4, v.column5 \
             FROM oauth_tokens t, (VALUES ",
        );
        for (i, successor) in successors.iter().enumerate() {
            let n = params.len();
            sql.push_str(&format!(
                "{}(${}, ${}, ${}, ${}, ${})",
                if i == 0 { "" } else { ", " },
                n + 1,
                n + 2,
                n + 3,
                n + 4,
                n + 5
            ));
            params.extend([
                Value::Text(successor.digest.clone()),
                Value::Text(successor.kind.as_str().to_owned()),
                successor.scopes.clone().map_or(Value::Null, Value::Text),
                Value::Integer(successor.created_at),
                Value::Integer(successor.expires_at),
            ]);
        }
        // Only after a spend (a SELECT leaves changes() alone).
        sql.push_str(") AS v WHERE changes() = 1 AND t.digest = $2");
    }
    sql.push_str(SQLITE_SAVEPOINT_CLOSE);
    GroupWrite::statements(sql, params)
}

/// The grant a rotation read: its id, its scopes, its user.
pub(super) fn rotated_grant(row: &[Value]) -> Result<crate::store::RotatedGrant, StoreError> {
    Ok(crate::store::RotatedGrant {
        grant_id: column(row, 0)?,
        grant_scopes: column(row, 1)?,
        user: user(row, 2)?,
    })
}

/// A user row's columns (`user_columns!`, in `User`'s order) from `at` on.
fn user(row: &[Value], at: usize) -> Result<crate::store::User, StoreError> {
    let c = |i: usize| at + i;
    Ok(crate::store::User {
        id: column(row, c(0))?,
        username: column(row, c(1))?,
        first_name: column(row, c(2))?,
        last_name: column(row, c(3))?,
        about: column(row, c(4))?,
        profile_picture_url: column(row, c(5))?,
        email: column(row, c(6))?,
        email_verified: column(row, c(7))?,
        phone: column(row, c(8))?,
        phone_verified: column(row, c(9))?,
        password_hash: column(row, c(10))?,
        verified: column(row, c(11))?,
        suspended: column(row, c(12))?,
        balance_cents: column(row, c(13))?,
        date_joined: column(row, c(14))?,
    })
}

/// One column of a row, as its Rust type.
fn column<T: rusqlite::types::FromSql>(row: &[Value], index: usize) -> Result<T, StoreError> {
    use rusqlite::types::ValueRef;
    let value = row.get(index).map_or(ValueRef::Null, ValueRef::from);
    T::column_result(value).map_err(|error| {
        StoreError::Unexpected(anyhow::anyhow!(
            "a group write's column {index} did not decode: {error}"
        ))
    })
}

/// Settles pays as `settle_payments` does on PostgreSQL, as one write: each
/// still pending pay whose target account is not suspended becomes settled,
/// each target is credited once with the sum of its pays, and each pay gets
/// its two `settle` entries from `@held`. One prepared statement per row
/// instead of statements as long as the round, which would be prepared anew
/// for each round's length. Rows: the ids settled.
pub(super) fn settlement(settlements: Vec<crate::store::Settlement>, at: i64) -> GroupWrite {
    use rusqlite::params;
    GroupWrite::in_savepoint(move |conn| {
        let mut settle = conn.prepare_cached(
            "UPDATE payments SET status = 'settled', date_completed = ?2 \
             WHERE id = ?1 AND status = 'pending' AND action = 'pay' \
             AND EXISTS (SELECT 1 FROM users u \
                         WHERE u.id = payments.target_user_id AND NOT u.suspended) \
             RETURNING target_user_id, amount_cents",
        )?;
        let mut entry = conn.prepare_cached(
            "INSERT INTO ledger_entries \
             (movement_id, kind, account, amount_cents, payment_id, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        let kind = crate::store::EntryKind::Settle.as_str();
        let mut credits: std::collections::BTreeMap<String, i64> = Default::default();
        let mut settled = Vec::new();
        for s in &settlements {
            let Some((target, cents)) = settle
                .query_row(params![s.payment_id, at], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
                })
                .optional()?
            else {
                continue;
            };
            let (id, movement) = (&s.payment_id, &s.movement_id);
            entry.execute(params![
                movement,
                kind,
                crate::store::accounts::HELD,
                -cents,
                id,
                at
            ])?;
            entry.execute(params![movement, kind, target, cents, id, at])?;
            *credits.entry(target).or_default() += cents;
            settled.push(vec![Value::Text(id.clone())]);
        }
        let mut credit = conn
            .prepare_cached("UPDATE users SET balance_cents = balance_cents + ?2 WHERE id = ?1")?;
        for (account, cents) in &credits {
            credit.execute(params![account, cents])?;
        }
        Ok(settled)
    })
}
