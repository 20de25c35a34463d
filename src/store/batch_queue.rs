//! Work that goes to the database in batches, one round trip for everything
//! that waited together: what is queued while a batch runs goes in the next.
//!
//! A caller that queues while fewer than the queue's most leaders are running
//! leads: it spawns a task of its own (a request that goes away must not stop
//! a batch half-way, nor leave the work queued behind it unanswered) that
//! takes what is queued, its own first, runs it, and goes on until the queue
//! is empty. Nothing waits for a timer, so a lone caller's work runs at once.
//! The one leader protocol of both backends: SQLite's group writer (one
//! leader), PostgreSQL's pay batches and `/me`'s user reads use it.

use super::StoreError;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

pub(crate) struct BatchQueue<T> {
    /// Batches run at once, at most.
    most_leaders: usize,
    state: Mutex<Queued<T>>,
}

struct Queued<T> {
    items: VecDeque<T>,
    /// Leaders running, each of which takes what is queued before it stops.
    leaders: usize,
}

/// A leader's turn. If it ends early (a panic, or its runtime shutting down)
/// and no other leader is left, what is still queued is dropped, so that its
/// callers (whose answer channels close) fail instead of waiting for ever.
struct Leading<'a, T> {
    queue: &'a BatchQueue<T>,
    finished: bool,
}

impl<T> Drop for Leading<'_, T> {
    fn drop(&mut self) {
        if !self.finished {
            let mut state = self.queue.lock();
            state.leaders -= 1;
            if state.leaders == 0 {
                state.items.clear();
            }
        }
    }
}

impl<T> BatchQueue<T> {
    pub(crate) fn new(most_leaders: usize) -> Self {
        Self {
            most_leaders: most_leaders.max(1),
            state: Mutex::new(Queued {
                items: VecDeque::new(),
                leaders: 0,
            }),
        }
    }

    /// Queues `item`; whether the caller is to spawn a leader, which runs
    /// [`BatchQueue::lead`].
    pub(crate) fn push(&self, item: T) -> bool {
        let mut state = self.lock();
        state.items.push_back(item);
        let leads = state.leaders < self.most_leaders;
        if leads {
            state.leaders += 1;
        }
        leads
    }

    /// Runs batches until nothing is queued: each is what `take` takes from
    /// the queue (it leaves the rest for later batches), handed to `run`.
    pub(crate) async fn lead<Run, Ran>(&self, take: fn(&mut VecDeque<T>) -> Vec<T>, mut run: Run)
    where
        Run: FnMut(Vec<T>) -> Ran,
        Ran: Future<Output = ()>,
    {
        let mut leading = Leading {
            queue: self,
            finished: false,
        };
        loop {
            let batch = {
                let mut state = self.lock();
                if state.items.is_empty() {
                    state.leaders -= 1;
                    leading.finished = true;
                    return;
                }
                take(&mut state.items)
            };
            run(batch).await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queued<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What queues its work in a [`BatchQueue`]: PostgreSQL's pay batches,
/// `/me`'s user reads, SQLite's group writer.
pub(crate) trait Batches: Send + Sync + 'static {
    /// One caller's work, with where its answer goes.
    type Item: Send + 'static;
    /// Why a caller's answer channel closed unanswered (its batch ended
    /// before answering it): told to that caller as unavailable (a 503).
    const UNANSWERED: &'static str;
    fn queue(&self) -> &BatchQueue<Self::Item>;
    /// The next batch from the queue; it leaves the rest for later ones.
    fn take(queued: &mut VecDeque<Self::Item>) -> Vec<Self::Item>;
    /// Runs a batch and answers each of its items.
    fn run(&self, batch: Vec<Self::Item>) -> impl Future<Output = ()> + Send + '_;
}

/// Queues the item `with` makes of its answer channel and waits for the
/// answer. A caller that leads spawns the task that runs batches until the
/// queue is empty (see the module).
pub(crate) async fn submit<B: Batches, A>(
    batches: &Arc<B>,
    with: impl FnOnce(oneshot::Sender<Result<A, StoreError>>) -> B::Item,
) -> Result<A, StoreError> {
    let (answer, answered) = oneshot::channel();
    if batches.queue().push(with(answer)) {
        let leader = batches.clone();
        tokio::spawn(async move {
            leader
                .queue()
                .lead(B::take, |batch| leader.run(batch))
                .await;
        });
    }
    answered
        .await
        .map_err(|_| StoreError::Unavailable(sqlx::Error::Protocol(B::UNANSWERED.to_owned())))?
}

/// Answers the callers of a batch that failed with `error`: each is to run
/// its work alone (to get its own answer) unless the database is unavailable,
/// which each is told (a 503).
pub(crate) fn answer_failed_batch<A>(
    error: &StoreError,
    answers: impl IntoIterator<Item = oneshot::Sender<Result<A, StoreError>>>,
    alone: fn() -> A,
) {
    let message = error.to_string();
    for answer in answers {
        let told = match error.is_transient() {
            true => Err(StoreError::Unavailable(sqlx::Error::Protocol(
                message.clone(),
            ))),
            false => Ok(alone()),
        };
        // The caller may have gone.
        let _ = answer.send(told);
    }
}

/// Up to `most` items from the front of the queue.
pub(crate) fn take_front<T>(queued: &mut VecDeque<T>, most: usize) -> Vec<T> {
    let n = queued.len().min(most);
    queued.drain(..n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_two(queued: &mut VecDeque<u32>) -> Vec<u32> {
        take_front(queued, 2)
    }

    #[tokio::test]
    async fn a_leader_runs_what_queued_behind_it_in_batches_then_stops() {
        let queue = Arc::new(BatchQueue::new(1));
        assert!(queue.push(1), "the first caller leads");
        assert!(!queue.push(2), "one leader at most: the second waits");
        assert!(!queue.push(3));
        let mut batches = Vec::new();
        queue
            .lead(take_two, |batch| {
                batches.push(batch);
                std::future::ready(())
            })
            .await;
        assert_eq!(batches, vec![vec![1, 2], vec![3]]);
        assert!(queue.push(4), "with its leader gone, the next caller leads");
    }

    #[tokio::test]
    async fn a_leader_that_ends_early_drops_what_is_queued() {
        let queue = Arc::new(BatchQueue::new(1));
        let (first, first_answered) = tokio::sync::oneshot::channel::<()>();
        assert!(queue.push(first));
        let leader = {
            let queue = queue.clone();
            tokio::spawn(async move {
                let take_one = |q: &mut VecDeque<_>| take_front(q, 1);
                queue
                    .lead(take_one, |_batch| std::future::pending::<()>())
                    .await;
            })
        };
        tokio::task::yield_now().await;
        let (second, second_answered) = tokio::sync::oneshot::channel::<()>();
        assert!(!queue.push(second), "the leader is still running");
        leader.abort();
        let _ = leader.await;
        assert!(first_answered.await.is_err(), "the batch's caller is told");
        assert!(
            second_answered.await.is_err(),
            "so is the caller queued behind it"
        );
        let (third, _third_answered) = tokio::sync::oneshot::channel::<()>();
        assert!(queue.push(third), "a new leader can start");
    }
}
