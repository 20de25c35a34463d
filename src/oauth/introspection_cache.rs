//! A short memory of token and client checks. SPEC §6 lets a revoked token, or one of a
//! suspended user or app, work for up to 1 second on another instance; this
//! instance forgets at once (its store's revocation epoch changes with each
//! such change it commits, and with each change of a user's profile or
//! contacts, which the remembered rows carry).

use crate::store::{App, IntrospectingClient, TokenRecord};
use quick_cache::sync::Cache;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a read answers from memory: half of the second SPEC §6 allows, so
/// a change made through another instance (or `tally admin`) is seen within it.
pub const TTL: Duration = Duration::from_millis(500);
/// Entries remembered; the least used go first.
const CAPACITY: usize = 4_096;

/// Rows read in the last [`TTL`], by key.
pub struct RecentReads<V> {
    entries: Cache<String, Arc<Stamped<V>>>,
}

/// A value with when it was read and the store's revocation epoch then.
pub struct Stamped<V> {
    pub value: V,
    /// Taken before the read began, so the age is never understated.
    read_at: Instant,
    epoch: u64,
}

impl<V> Default for RecentReads<V> {
    fn default() -> Self {
        Self {
            entries: Cache::new(CAPACITY),
        }
    }
}

impl<V> RecentReads<V> {
    /// What was read under `key` less than `TTL` ago, if nothing was revoked
    /// or suspended through this store since (`epoch`).
    pub fn get(&self, key: &str, epoch: u64) -> Option<Arc<Stamped<V>>> {
        self.entries
            .get(key)
            .filter(|r| r.epoch == epoch && r.read_at.elapsed() < TTL)
    }

    /// Remembers `value`, read from `read_at` on, when the store's epoch was
    /// `epoch`.
    pub fn put(&self, key: String, value: V, read_at: Instant, epoch: u64) {
        self.entries.insert(
            key,
            Arc::new(Stamped {
                value,
                read_at,
                epoch,
            }),
        );
    }
}

/// What `POST /oauth/introspect` reads: the calling app's and the token's rows,
/// by app and token (see [`introspection_key`]).
pub type IntrospectionCache = RecentReads<Remembered>;

/// The calling app's and the token's rows, as read together.
pub struct Remembered {
    pub client: IntrospectingClient,
    pub token: TokenRecord,
}

pub fn introspection_key(client_id: &str, token_digest: &str) -> String {
    format!("{token_digest} {client_id}")
}

/// What the API's token checks read: a token's row with its grant, user and
/// app, by the token's digest.
pub type TokenCache = RecentReads<TokenRecord>;

/// What the token endpoint's client authentication reads: an app's row, by
/// its client id.
pub type ClientCache = RecentReads<App>;
