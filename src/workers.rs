//! Background loops: settlement of pending pays, failure for suspended targets
//! and expiry of unclaimed payments. Every instance runs them; the store's guarded
//! transitions (and `SKIP LOCKED` on PostgreSQL) make each payment change state
//! exactly once however many instances poll.

use crate::domain::now_micros;
use crate::ledger;
use crate::ledger::payments::Timing;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often the workers look for due payments: short, so a settlement delay of
/// 0s settles within a fraction of a second.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Starts the payment worker on the current runtime.
pub fn spawn(store: Arc<dyn Store>, timing: Timing) -> JoinHandle<()> {
    tokio::spawn(async move {
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
    })
}
