//! A short memory of what `POST /oauth/introspect` reads. SPEC §6 lets a
//! revoked token, or one of a suspended user or app, work for up to 1 second on
//! another instance; this instance forgets at once (its store's revocation
//! epoch changes with each such change it commits).

use crate::store::{IntrospectingClient, TokenRecord};
use quick_cache::sync::Cache;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a read answers from memory: half of the second SPEC §6 allows, so
/// a change made through another instance (or `tally admin`) is seen within it.
pub const TTL: Duration = Duration::from_millis(500);
/// Pairs of calling app and token remembered; the least used go first.
const CAPACITY: usize = 4_096;

/// The calling app's and the token's rows, as read together.
pub struct Remembered {
    pub client: IntrospectingClient,
    pub token: TokenRecord,
    /// Taken before the read began, so the age is never understated.
    read_at: Instant,
    epoch: u64,
}

pub struct IntrospectionCache {
    entries: Cache<String, Arc<Remembered>>,
}

impl Default for IntrospectionCache {
    fn default() -> Self {
        Self {
            entries: Cache::new(CAPACITY),
        }
    }
}

fn key(client_id: &str, token_digest: &str) -> String {
    format!("{token_digest} {client_id}")
}

impl IntrospectionCache {
    /// What was read for this app and token less than `TTL` ago, if nothing
    /// was revoked or suspended through this store since (`epoch`).
    pub fn get(&self, client_id: &str, token_digest: &str, epoch: u64) -> Option<Arc<Remembered>> {
        self.entries
            .get(&key(client_id, token_digest))
            .filter(|r| r.epoch == epoch && r.read_at.elapsed() < TTL)
    }

    /// Remembers rows read from `read_at` on, when the store's epoch was `epoch`.
    pub fn put(
        &self,
        client: IntrospectingClient,
        token_digest: &str,
        token: TokenRecord,
        read_at: Instant,
        epoch: u64,
    ) {
        let key = key(&client.client_id, token_digest);
        self.entries.insert(
            key,
            Arc::new(Remembered {
                client,
                token,
                read_at,
                epoch,
            }),
        );
    }
}
