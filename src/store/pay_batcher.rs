//! Group commit of new pays on PostgreSQL: the pays that wait while others
//! are being written go in together, as one statement (`PG_HOLDS_SQL`, which
//! calls the database function `pay_batch`), so one round trip and one
//! commit serve them all. Each is still all or nothing: a pay its actor's
//! balance does not cover, or whose target is missing, writes nothing and
//! leaves the others in.
//!
//! The pays queue in a [`BatchQueue`]; every pay of a batch that failed for
//! something other than the database being unavailable is handed back to its
//! caller to write alone with the one-pay statement (one bad pay must not fail
//! the others).

use super::batch_queue::{answer_failed_batch, submit, BatchQueue, Batches};
use super::payments::{pay_batch_json, Recorded, PG_HOLDS_SQL};
use super::pool::Lender;
use super::{PaymentInsert, RecordedToAccount, StoreError};
use sqlx::{Postgres, Row};
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::oneshot;

/// The most pays one statement writes: their actors' rows stay locked until
/// it commits.
const MAX_BATCH: usize = 64;
/// Batches written at once, at most: two keep the database busy while the
/// answers of the one before are read and the next is sent.
const MAX_LEADERS: usize = 2;

/// What a queued pay is told.
pub(crate) enum Batched {
    Recorded(Recorded),
    /// Write it alone.
    Alone,
}

type Answer = oneshot::Sender<Result<Batched, StoreError>>;

pub(crate) struct QueuedPay {
    insert: PaymentInsert,
    answer: Answer,
}

pub(crate) struct PayBatcher {
    statements: Arc<Lender<Postgres>>,
    /// Batches written at once: one for each core this process may run on, up
    /// to [`MAX_LEADERS`]. On one core there is nothing to overlap, and a
    /// second batch only takes turns on the CPU with the first (the
    /// database's and ours), so both take longer; one batch at a time makes
    /// bigger batches (docs/decisions/004-postgres-pay-batches.md).
    queue: BatchQueue<QueuedPay>,
}

impl PayBatcher {
    pub(crate) fn new(statements: Arc<Lender<Postgres>>) -> Self {
        Self {
            statements,
            queue: BatchQueue::new(
                super::pool::connections_per_core(1, 1, MAX_LEADERS as u32) as usize
            ),
        }
    }

    /// Writes `insert`, a pay without an Idempotency-Key, in a batch with the
    /// pays queued beside it, or says to write it alone.
    pub(crate) async fn pay(
        self: &Arc<Self>,
        insert: &PaymentInsert,
    ) -> Result<Batched, StoreError> {
        if !batchable(insert) {
            return Ok(Batched::Alone);
        }
        submit(self, |answer| QueuedPay {
            insert: insert.clone(),
            answer,
        })
        .await
    }
}

impl Batches for PayBatcher {
    type Item = QueuedPay;
    const UNANSWERED: &'static str = "the pay batch could not run this pay";

    fn queue(&self) -> &BatchQueue<QueuedPay> {
        &self.queue
    }

    fn take(queued: &mut VecDeque<QueuedPay>) -> Vec<QueuedPay> {
        take_batch(queued)
    }

    fn run(&self, batch: Vec<QueuedPay>) -> impl Future<Output = ()> + Send + '_ {
        self.write(batch)
    }
}

impl PayBatcher {
    /// Writes a batch and answers each of its pays.
    async fn write(&self, batch: Vec<QueuedPay>) {
        let rows = match self.statements.lease().await {
            Ok(mut conn) => holds_statement(&batch).fetch_all(&mut *conn).await,
            Err(error) => Err(error),
        };
        let rows = match rows {
            Ok(rows) => rows,
            Err(error) => {
                let error = StoreError::from(error);
                let unavailable = error.is_transient();
                if !unavailable {
                    if let Some(suppressed) = crate::log_throttle::admit("a pay batch failed") {
                        tracing::warn!(%error, suppressed, pays = batch.len(), "a pay batch failed; writing its pays one by one");
                    }
                }
                let answers = batch.into_iter().map(|pay| pay.answer);
                answer_failed_batch(&error, answers, || Batched::Alone);
                return;
            }
        };
        let mut by_pay: HashMap<String, sqlx::postgres::PgRow> = HashMap::with_capacity(rows.len());
        for row in rows {
            match row.try_get::<String, _>("pay_id") {
                Ok(id) => {
                    by_pay.insert(id, row);
                }
                Err(error) => tracing::error!(%error, "a pay batch answered a row without its pay"),
            }
        }
        for pay in batch {
            let recorded = match by_pay.get(&pay.insert.payment.id) {
                Some(row) => recorded(&pay.insert, row),
                None => Err(StoreError::Unexpected(anyhow::anyhow!(
                    "a pay batch did not answer for payment {}",
                    pay.insert.payment.id
                ))),
            };
            // The caller may have gone; the pay stands all the same.
            let _ = pay.answer.send(recorded.map(Batched::Recorded));
        }
    }
}

/// Whether `PG_HOLDS_SQL` writes `insert` as the one-pay statements would: a
/// pay without a key whose hold moves its amount from its actor at its time.
/// The one-pay statements refuse any other hold; they are left to say so.
fn batchable(insert: &PaymentInsert) -> bool {
    insert.idempotency.is_none() && insert.hold_is_from_actor()
}

/// The next batch: the first queued pay of each actor, in queue order, up to
/// [`MAX_BATCH`]; an actor's later pays wait for a later batch, so they are
/// written in the order they came.
fn take_batch(queued: &mut VecDeque<QueuedPay>) -> Vec<QueuedPay> {
    let mut actors = HashSet::new();
    let mut batch = Vec::new();
    let mut rest = VecDeque::with_capacity(queued.len());
    for pay in queued.drain(..) {
        let actor = pay.insert.payment.actor_id.clone();
        if batch.len() < MAX_BATCH && actors.insert(actor) {
            batch.push(pay);
        } else {
            rest.push_back(pay);
        }
    }
    *queued = rest;
    batch
}

/// `PG_HOLDS_SQL` with the batch's pays bound, as one JSON array.
fn holds_statement(
    batch: &[QueuedPay],
) -> sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(PG_HOLDS_SQL).bind(pay_batch_json(batch.iter().map(|pay| &pay.insert)))
}

/// What the batch did for one pay, read from its row.
fn recorded(insert: &PaymentInsert, row: &sqlx::postgres::PgRow) -> Result<Recorded, StoreError> {
    if insert.check_target {
        if row.try_get::<Option<String>, _>("id")?.is_none() {
            return Ok(Recorded::NoSuchTarget);
        }
        let read: RecordedToAccount = sqlx::FromRow::from_row(row)?;
        return Ok(Recorded::Written {
            actor_balance_cents: read.actor_balance_cents,
            target: Some(Box::new(read.target)),
        });
    }
    Ok(Recorded::Written {
        actor_balance_cents: row.try_get("actor_balance_cents")?,
        target: None,
    })
}
