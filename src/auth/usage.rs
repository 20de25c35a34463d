//! When each grant was last used, for the account page. Recorded off the request
//! path and at most once a minute per grant and instance, so checking a token
//! stays a single read.

use crate::domain::now_micros;
use crate::store::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How stale `last_used_at` may get.
pub const RESOLUTION: Duration = Duration::from_secs(60);
/// Grants remembered before the old ones are forgotten.
const RETAIN_ABOVE: usize = 10_000;

#[derive(Default)]
pub struct GrantUsage {
    recorded: Mutex<HashMap<String, Instant>>,
}

impl GrantUsage {
    /// Notes that `grant_id` was used now; writes to the store in the background
    /// unless this instance did so less than a minute ago.
    pub fn record(&self, store: &Arc<dyn Store>, grant_id: &str) {
        let now = Instant::now();
        {
            let Ok(mut recorded) = self.recorded.lock() else {
                return;
            };
            if recorded
                .get(grant_id)
                .is_some_and(|at| now.duration_since(*at) < RESOLUTION)
            {
                return;
            }
            if recorded.len() > RETAIN_ABOVE {
                recorded.retain(|_, at| now.duration_since(*at) < RESOLUTION);
            }
            recorded.insert(grant_id.to_owned(), now);
        }
        let store = store.clone();
        let grant_id = grant_id.to_owned();
        tokio::spawn(async move {
            let now = now_micros();
            let stale_before = now.saturating_sub(crate::domain::micros(RESOLUTION));
            if let Err(error) = store.touch_grant(&grant_id, now, stale_before).await {
                tracing::warn!(%error, "cannot record the use of a grant");
            }
        });
    }
}
