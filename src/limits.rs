//! Request rate limits (SPEC §9): per token on the REST API, per client IP on the
//! OAuth endpoints and on sign-ups. Counted in each instance's memory: with several instances
//! behind a balancer, a client may get up to that many times the limit.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

pub struct RateLimits {
    api: DefaultKeyedRateLimiter<String>,
    oauth: DefaultKeyedRateLimiter<IpAddr>,
    signup: DefaultKeyedRateLimiter<IpAddr>,
}

/// Keys seen are forgotten once their buckets are full again, whenever this many
/// have piled up.
const RETAIN_ABOVE: usize = 10_000;

impl RateLimits {
    pub fn new(
        api_per_minute: NonZeroU32,
        oauth_per_minute: NonZeroU32,
        signup_per_minute: NonZeroU32,
    ) -> Self {
        Self {
            api: RateLimiter::keyed(Quota::per_minute(api_per_minute)),
            oauth: RateLimiter::keyed(Quota::per_minute(oauth_per_minute)),
            signup: RateLimiter::keyed(Quota::per_minute(signup_per_minute)),
        }
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
