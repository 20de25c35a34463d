//! Request rate limits (SPEC §9): per token on the REST API, per client IP on the
//! OAuth endpoints and on sign-ups, per client IP on requests whose token
//! does not work, and per session and client IP on wrong user codes at
//! `/device` (SPEC §10). Counted in each instance's memory: with several
//! instances behind a balancer, a client may get up to that many times the
//! limit.

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use quick_cache::sync::Cache;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

pub struct RateLimits {
    api: DefaultKeyedRateLimiter<String>,
    oauth: DefaultKeyedRateLimiter<IpAddr>,
    signup: DefaultKeyedRateLimiter<IpAddr>,
    bad_tokens: BadTokens,
    wrong_user_codes: WrongUserCodes,
}

/// Keys seen are forgotten once their buckets are full again, whenever this many
/// have piled up.
const RETAIN_ABOVE: usize = 10_000;

impl RateLimits {
    pub fn new(
        api_per_minute: NonZeroU32,
        oauth_per_minute: NonZeroU32,
        signup_per_minute: NonZeroU32,
        bad_tokens_per_minute: NonZeroU32,
    ) -> Self {
        Self {
            api: RateLimiter::keyed(Quota::per_minute(api_per_minute)),
            oauth: RateLimiter::keyed(Quota::per_minute(oauth_per_minute)),
            signup: RateLimiter::keyed(Quota::per_minute(signup_per_minute)),
            bad_tokens: BadTokens::new(bad_tokens_per_minute),
            wrong_user_codes: WrongUserCodes::new(),
        }
    }

    /// The limit on wrong user codes at `/device`.
    pub fn wrong_user_codes(&self) -> &WrongUserCodes {
        &self.wrong_user_codes
    }

    /// The limit on requests whose token does not work.
    pub fn bad_tokens(&self) -> &BadTokens {
        &self.bad_tokens
    }

    /// `Err(wait)` when the token (by its digest) has used up its quota.
    pub fn check_api(&self, token_digest: &str) -> Result<(), Duration> {
        check(&self.api, &token_digest.to_owned())
    }

    pub fn check_oauth(&self, ip: IpAddr) -> Result<(), Duration> {
        check(&self.oauth, &ip)
    }

    pub fn check_signup(&self, ip: IpAddr) -> Result<(), Duration> {
        check(&self.signup, &ip)
    }
}

fn check<K: Hash + Eq + Clone>(
    limiter: &DefaultKeyedRateLimiter<K>,
    key: &K,
) -> Result<(), Duration> {
    if limiter.len() > RETAIN_ABOVE {
        limiter.retain_recent();
    }
    limiter
        .check_key(key)
        .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
}

/// Failures per key, counted only when they happen: past the allowance, the
/// key is held back before the work it would fail at, until one cell's
/// interval later.
///
/// governor can tell how much allowance a key has left only while counting,
/// so a key whose last failure took its last cell is noted as spent, until
/// one cell's interval later (when GCRA lets at least one more through).
pub struct Failures<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K, StateInformationMiddleware>,
    /// Keys with no allowance left, each until when.
    spent: Cache<K, Instant>,
    /// How long one failure's cell takes to come back.
    cell: Duration,
}

/// Keys remembered as spent; the least used go first (such a key then gets
/// one more try before it is noted again).
const SPENT_CAPACITY: usize = 16_384;

impl<K: Hash + Eq + Clone> Failures<K> {
    pub fn new(per_minute: NonZeroU32) -> Self {
        let quota = Quota::per_minute(per_minute);
        Self {
            limiter: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            spent: Cache::new(SPENT_CAPACITY),
            cell: quota.replenish_interval(),
        }
    }

    /// How long `key` must wait, when it has no allowance left. Counts
    /// nothing.
    pub fn held(&self, key: &K) -> Option<Duration> {
        let until = self.spent.get(key)?;
        let now = Instant::now();
        if until <= now {
            self.spent.remove(key);
            return None;
        }
        Some(until - now)
    }

    /// Counts a failure of `key`. `Err(wait)` when it was past the allowance.
    pub fn failed(&self, key: &K) -> Result<(), Duration> {
        if self.limiter.len() > RETAIN_ABOVE {
            self.limiter.retain_recent();
        }
        let now = Instant::now();
        match self.limiter.check_key(key) {
            Ok(state) => {
                if state.remaining_burst_capacity() == 0 {
                    self.spent.insert(key.clone(), now + self.cell);
                }
                Ok(())
            }
            Err(not_until) => {
                let wait = not_until
                    .wait_time_from(DefaultClock::default().now())
                    .max(self.cell);
                self.spent.insert(key.clone(), now + wait);
                Err(wait)
            }
        }
    }
}

/// Requests whose token is unknown, malformed or dead, per client IP (SPEC
/// §9). Only such failures count; past the allowance a client's next token
/// that is not known to work is refused before the store is asked, so random
/// tokens cannot make the database read for them. Tokens found live lately
/// are noted: their owners go on while their IP is held back (a token is
/// live or not whoever presents it, and no one guesses a live token's
/// digest).
pub struct BadTokens {
    failures: Failures<IpAddr>,
    /// The leading 64 bits of the digests of tokens found live lately.
    live: Cache<u64, ()>,
}

/// Live tokens remembered (8 bytes each, and the cache's own overhead).
const LIVE_CAPACITY: usize = 65_536;

impl BadTokens {
    pub fn new(per_minute: NonZeroU32) -> Self {
        Self {
            failures: Failures::new(per_minute),
            live: Cache::new(LIVE_CAPACITY),
        }
    }

    /// Asked before the token with this digest is looked up in the store:
    /// `Err(wait)` when `ip` has no allowance left and the token is not one
    /// found live lately. Counts nothing.
    pub fn admit(&self, ip: IpAddr, token_digest: &str) -> Result<(), Duration> {
        match self.failures.held(&ip) {
            None => Ok(()),
            Some(_) if self.live.get(&live_key(token_digest)).is_some() => Ok(()),
            Some(wait) => Err(wait),
        }
    }

    /// Counts a request from `ip` whose token did not work (its digest, when
    /// it had one). `Err(wait)` when the request was past the allowance.
    pub fn failed(&self, ip: IpAddr, token_digest: Option<&str>) -> Result<(), Duration> {
        if let Some(digest) = token_digest {
            self.live.remove(&live_key(digest));
        }
        self.failures.failed(&ip)
    }

    /// Notes a token (by its digest) found live.
    pub fn found_live(&self, token_digest: &str) {
        let key = live_key(token_digest);
        if self.live.get(&key).is_none() {
            self.live.insert(key, ());
        }
    }
}

/// Wrong user codes entered at `/device` a minute, per signed-in session.
pub const WRONG_USER_CODES_PER_SESSION: u32 = 5;
/// Wrong user codes entered at `/device` a minute, per client IP.
pub const WRONG_USER_CODES_PER_IP: u32 = 10;

/// Wrong user codes at `/device` (RFC 8628 §5.1), per browser session and per
/// client IP: past either allowance no code is looked up, the right one
/// included, until some allowance comes back, so user codes cannot be
/// guessed at from many sessions or many tabs.
pub struct WrongUserCodes {
    by_session: Failures<String>,
    by_ip: Failures<IpAddr>,
}

impl WrongUserCodes {
    fn new() -> Self {
        let per_minute = |n: u32| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        Self {
            by_session: Failures::new(per_minute(WRONG_USER_CODES_PER_SESSION)),
            by_ip: Failures::new(per_minute(WRONG_USER_CODES_PER_IP)),
        }
    }

    /// Asked before a code is looked up: `Err(wait)` while the session or the
    /// address has no allowance left. Counts nothing.
    pub fn admit(&self, session_id: &str, ip: IpAddr) -> Result<(), Duration> {
        let waits = [
            self.by_session.held(&session_id.to_owned()),
            self.by_ip.held(&ip),
        ];
        match waits.into_iter().flatten().max() {
            Some(wait) => Err(wait),
            None => Ok(()),
        }
    }

    /// Counts a wrong code from this session and address.
    pub fn failed(&self, session_id: &str, ip: IpAddr) {
        // Past an allowance, `admit` holds the next attempt back.
        let _ = self.by_session.failed(&session_id.to_owned());
        let _ = self.by_ip.failed(&ip);
    }
}

/// A digest's leading 64 bits (its first 16 hex digits).
fn live_key(token_digest: &str) -> u64 {
    token_digest
        .get(..16)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const OTHER: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    #[test]
    fn an_ip_is_held_back_after_its_allowance_of_failures_and_live_tokens_go_on() {
        let limits = BadTokens::new(NonZeroU32::MIN.saturating_add(2));
        let ip = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
        let neighbour = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));
        limits.found_live(DIGEST);
        for _ in 0..3 {
            assert_eq!(limits.admit(ip, OTHER), Ok(()));
            assert_eq!(limits.failed(ip, Some(OTHER)), Ok(()));
        }
        // Three a minute: a cell comes back in 20 seconds.
        let held = limits.admit(ip, OTHER);
        assert!(
            matches!(held, Err(wait) if wait > Duration::ZERO && wait <= Duration::from_secs(20)),
            "{held:?}"
        );
        assert_eq!(limits.admit(ip, DIGEST), Ok(()), "a live token goes on");
        assert_eq!(limits.admit(neighbour, OTHER), Ok(()), "other IPs go on");
        assert!(
            limits.failed(ip, None).is_err(),
            "a failure past it is refused"
        );
        // A live token that stops working loses its pass.
        assert!(limits.failed(ip, Some(DIGEST)).is_err());
        assert!(limits.admit(ip, DIGEST).is_err());
    }
}
