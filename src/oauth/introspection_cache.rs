//! A short memory of token and client checks. SPEC §6 lets a revoked token, or one of a
//! suspended user or app, work for up to 1 second on another instance; this
//! instance forgets at once (its store's revocation epoch changes with each
//! such change it commits, and with each change of a user's profile or
//! contacts, which the remembered rows carry).
//!
//! A row in use is read again before it is forgotten: past half its life,
//! the one request that comes first reads it anew while the others go on
//! with what is remembered. Otherwise every request in flight for a busy
//! token missed at once when it expired, each reading the same row, and
//! stalled `GET /v1/me` twice a second (docs/decisions/007-token-and-client-caches.md).

use crate::store::{App, IntrospectingClient, TokenRecord};
use quick_cache::sync::Cache;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// A request was told to read it again (see the module's comment).
    renewing: AtomicBool,
}

/// Past this age a remembered row is read again by the next request that
/// asks for it.
const RENEW_AFTER: Duration = Duration::from_millis(250);

impl<V> Default for RecentReads<V> {
    fn default() -> Self {
        Self {
            entries: Cache::new(CAPACITY),
        }
    }
}

impl<V> RecentReads<V> {
    /// What was read under `key` less than `TTL` ago, if nothing was revoked
    /// or suspended through this store since (`epoch`). `None` also for the
    /// first caller after [`RENEW_AFTER`], which is to read the row again and
    /// `put` it.
    pub fn get(&self, key: &str, epoch: u64) -> Option<Arc<Stamped<V>>> {
        let remembered = self.entries.get(key)?;
        let age = remembered.read_at.elapsed();
        if remembered.epoch != epoch || age >= TTL {
            return None;
        }
        if age >= RENEW_AFTER && !remembered.renewing.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(remembered)
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
                renewing: AtomicBool::new(false),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_past_half_its_life_is_read_again_by_one_request_only() {
        let cache = RecentReads::<u32>::default();
        let ago = |ms| Instant::now() - Duration::from_millis(ms);
        cache.put("fresh".to_owned(), 1, ago(0), 7);
        cache.put("ageing".to_owned(), 2, ago(300), 7);
        cache.put("expired".to_owned(), 3, ago(600), 7);
        let value = |key: &str, epoch| cache.get(key, epoch).map(|r| r.value);
        assert_eq!((value("fresh", 7), value("fresh", 7)), (Some(1), Some(1)));
        // The first asker reads it again; the others are answered meanwhile.
        assert_eq!(value("ageing", 7), None);
        assert_eq!((value("ageing", 7), value("ageing", 7)), (Some(2), Some(2)));
        assert_eq!(value("expired", 7), None);
        assert_eq!(value("fresh", 8), None, "revoked since");
        // What the renewing request read starts a new life.
        cache.put("ageing".to_owned(), 4, ago(0), 7);
        assert_eq!(value("ageing", 7), Some(4));
    }
}
