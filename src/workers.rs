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

/// Starts the payment and retention workers on the current runtime.
pub fn spawn(store: Arc<dyn Store>, timing: Timing) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::join!(payments(store.clone(), timing), retention(store));
    })
}

async fn payments(store: Arc<dyn Store>, timing: Timing) {
    let mut ticks = tokio::time::interval(POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match ledger::payments::process_due(store.as_ref(), timing, now_micros()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(payments = n, "processed due payments"),
            Err(e) => {
                let cause = format!("payment worker round: {e}");
                if let Some(suppressed) = crate::log_throttle::admit(&cause) {
                    tracing::warn!(error = %e, suppressed, "payment worker round failed");
                }
            }
        }
    }
}

async fn retention(store: Arc<dyn Store>) {
    let mut ticks = tokio::time::interval(PURGE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match purge(store.as_ref(), now_micros()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(rows = n, "purged rows no longer needed"),
            Err(e) => {
                let cause = format!("retention round: {e}");
                if let Some(suppressed) = crate::log_throttle::admit(&cause) {
                    tracing::warn!(error = %e, suppressed, "retention round failed");
                }
            }
        }
    }
}

/// Deletes, as of `now`, every row the retention rules no longer need
/// (README, "Retention"); how many. `now` is a parameter so tests move time on.
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
            verification_sends_before: before(crate::verification::SEND_WINDOW),
        })
        .await
}
