//! Background loops: settlement of pending pays, failure for suspended targets
//! and expiry of unclaimed payments; and retention, which deletes what is no
//! longer needed (SPEC §9). Every instance runs them; the store's guarded
//! transitions (and `SKIP LOCKED` on PostgreSQL) make each payment change state
//! exactly once however many instances poll, and deleting old rows twice is
//! harmless.

use crate::domain::now_micros;
use crate::ledger;
use crate::ledger::payments::Timing;
use crate::store::{Retention, Store, StoreError};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often the workers look for due payments: short, so a settlement delay of
/// 0s settles within a fraction of a second.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How often retention runs: the rules count in minutes and days.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(60);

/// Codes are kept a day after they expire or are used.
pub const CODE_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Tokens are kept 30 days after they expire or are revoked.
pub const TOKEN_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Verification links are kept a day after they expire.
pub const LINK_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Starts the payment, retention and webhook delivery workers on the
/// current runtime.
pub fn spawn(
    store: Arc<dyn Store>,
    timing: Timing,
    webhooks: crate::webhooks::delivery::Deliverer,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::join!(
            payments(store.clone(), timing),
            retention(store),
            webhooks.run()
        );
    })
}

async fn payments(store: Arc<dyn Store>, timing: Timing) {
    every(POLL_INTERVAL, "payment worker round", || async {
        let n = ledger::payments::process_due(store.as_ref(), timing, now_micros()).await?;
        if n > 0 {
            tracing::debug!(payments = n, "processed due payments");
        }
        Ok(())
    })
    .await
}

async fn retention(store: Arc<dyn Store>) {
    every(PURGE_INTERVAL, "retention round", || async {
        let n = purge(store.as_ref(), now_micros()).await?;
        if n > 0 {
            tracing::debug!(rows = n, "purged rows no longer needed");
        }
        Ok(())
    })
    .await
}

/// Runs `round` every `period`, for ever. A failed round is logged (repeats of
/// one cause throttled) and the next tick tries again; a late tick is not
/// made up for.
async fn every<Round>(period: Duration, name: &str, mut round: impl FnMut() -> Round)
where
    Round: Future<Output = Result<(), StoreError>>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(e) = round().await {
            let cause = format!("{name}: {e}");
            if let Some(suppressed) = crate::log_throttle::admit(&cause) {
                tracing::warn!(error = %e, suppressed, "{name} failed");
            }
        }
    }
}

/// Deletes, as of `now`, every row the retention rules no longer need
/// (docs/operations.md, "Retention"); how many. `now` is a parameter so tests move time on.
pub async fn purge(store: &dyn Store, now: i64) -> Result<u64, StoreError> {
    let before = |d: Duration| now.saturating_sub(crate::domain::micros(d));
    store
        .purge(&Retention {
            codes_before: before(CODE_RETENTION),
            signin_failures_before: before(crate::auth::throttle::WINDOW),
            idempotency_keys_before: before(ledger::payments::IDEMPOTENCY_WINDOW),
            tokens_before: before(TOKEN_RETENTION),
            // An ended session's record already holds when its cookie expires.
            ended_sessions_before: now,
            verification_links_before: before(LINK_RETENTION),
            reveals_before: before(crate::web::reveal::REVEAL_TTL),
            webhooks_before: before(crate::webhooks::RETENTION),
            verification_sends_before: before(crate::verification::SEND_WINDOW),
        })
        .await
}
