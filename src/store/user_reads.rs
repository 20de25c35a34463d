//! `/me`'s read of its user, made for all the requests waiting at once in one
//! statement, as the pays are written together: one round trip (on
//! PostgreSQL, one turn of a database backend; on SQLite, one hand-over to a
//! reader thread and back) serves them all. Each request's row is still read
//! by a statement sent after the request queued, so it is as fresh as a read
//! of its own (a balance just changed shows), and requests for one user share
//! its row. Each backend says how it reads a batch of ids
//! ([`UserReads::new`]).
//!
//! If a batch fails for something other than the database being
//! unavailable, each of its requests reads alone, to get its own answer.

use super::batch_queue::{answer_failed_batch, submit, take_front, BatchQueue, Batches};
use super::models::UserWithFriendsCount;
use super::{StoreError, User};
use futures_util::future::BoxFuture;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::oneshot;

/// The most requests one statement answers.
const MAX_BATCH: usize = 256;
/// Batches read at once, at most, as for PostgreSQL's pays
/// (`pay_batcher.rs`): one per core this process may run on.
const MAX_LEADERS: u32 = 2;

/// Reads the users of the ids given (each once), with their friend counts.
pub(crate) type ReadUsers = Box<
    dyn Fn(Vec<String>) -> BoxFuture<'static, Result<Vec<UserWithFriendsCount>, sqlx::Error>>
        + Send
        + Sync,
>;

/// The columns a batch reads, for each backend's statement.
macro_rules! user_with_friends_count_columns {
    () => {
        concat!(crate::store::sql::user_columns!(), ", friends_count")
    };
}
pub(crate) use user_with_friends_count_columns;

/// What a queued read is told: the user with its friend count, if it exists.
// One per request, moved once: its size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum BatchedRead {
    Found(Option<(User, i64)>),
    /// Read it alone.
    Alone,
}

pub(crate) struct QueuedRead {
    user_id: String,
    answer: oneshot::Sender<Result<BatchedRead, StoreError>>,
}

pub(crate) struct UserReads {
    read_users: ReadUsers,
    queue: BatchQueue<QueuedRead>,
}

impl UserReads {
    pub(crate) fn new(read_users: ReadUsers) -> Self {
        Self {
            read_users,
            queue: BatchQueue::new(super::pool::connections_per_core(1, 1, MAX_LEADERS) as usize),
        }
    }

    /// Reads the user `user_id` and its friend count with the reads queued
    /// beside it, or says to read it alone.
    pub(crate) async fn read(self: &Arc<Self>, user_id: &str) -> Result<BatchedRead, StoreError> {
        submit(self, |answer| QueuedRead {
            user_id: user_id.to_owned(),
            answer,
        })
        .await
    }
}

impl Batches for UserReads {
    type Item = QueuedRead;
    const UNANSWERED: &'static str = "the user read batch could not run this read";

    fn queue(&self) -> &BatchQueue<QueuedRead> {
        &self.queue
    }

    fn take(queued: &mut std::collections::VecDeque<QueuedRead>) -> Vec<QueuedRead> {
        take_front(queued, MAX_BATCH)
    }

    fn run(&self, batch: Vec<QueuedRead>) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.read_batch(batch)
    }
}

impl UserReads {
    /// Reads a batch and answers each of its requests.
    async fn read_batch(&self, batch: Vec<QueuedRead>) {
        let ids: Vec<String> = {
            let mut seen = HashSet::with_capacity(batch.len());
            batch
                .iter()
                .map(|read| read.user_id.as_str())
                .filter(|id| seen.insert(*id))
                .map(str::to_owned)
                .collect()
        };
        let rows = (self.read_users)(ids).await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(error) => {
                let answers = batch.into_iter().map(|read| read.answer);
                answer_failed_batch(&error.into(), answers, || BatchedRead::Alone);
                return;
            }
        };
        let by_id: HashMap<&str, &UserWithFriendsCount> =
            rows.iter().map(|row| (row.user.id.as_str(), row)).collect();
        for read in batch {
            let found = by_id
                .get(read.user_id.as_str())
                .map(|row| (row.user.clone(), row.friends_count));
            // The caller may have gone.
            let _ = read.answer.send(Ok(BatchedRead::Found(found)));
        }
    }
}
