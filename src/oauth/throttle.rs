//! Sign-in throttling (SPEC §9). Failures are counted per (account, client IP)
//! and per client IP over 15 minutes. Past 5 for a pair, or 20 for an IP, each
//! further attempt must wait a back-off that doubles from 30 seconds up to 15
//! minutes. A right password from another address is never affected, so no one
//! can lock another person out.

use crate::domain::now_micros;
use crate::store::{Store, StoreError};
use std::net::IpAddr;
use std::time::Duration;

pub const WINDOW: Duration = Duration::from_secs(15 * 60);
pub const PAIR_LIMIT: i64 = 5;
pub const IP_LIMIT: i64 = 20;
const FIRST_BACKOFF: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// Who is trying: the account (its id, or the identifier typed when there is no
/// such account) and the client address.
pub struct Attempt {
    pair_key: String,
    ip_key: String,
}

impl Attempt {
    pub fn new(account: &str, ip: IpAddr) -> Self {
        Self {
            pair_key: format!("pair:{}:{ip}", account.to_lowercase()),
            ip_key: format!("ip:{ip}"),
        }
    }
}

fn backoff(failures: i64, limit: i64) -> Duration {
    let doublings = u32::try_from(failures - limit).unwrap_or(u32::MAX).min(16);
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(MAX_BACKOFF)
}

/// `Err(retry_after)` when this attempt must wait.
#[tracing::instrument(skip_all)]
pub async fn check(
    store: &dyn Store,
    attempt: &Attempt,
) -> Result<Result<(), Duration>, StoreError> {
    let now = now_micros();
    let since = now - micros(WINDOW);
    for (key, limit) in [(&attempt.pair_key, PAIR_LIMIT), (&attempt.ip_key, IP_LIMIT)] {
        let (failures, last) = store.signin_failures(key, since).await?;
        if failures < limit {
            continue;
        }
        let wait = micros(backoff(failures, limit));
        let elapsed = now - last.unwrap_or(now);
        if elapsed < wait {
            let remaining = u64::try_from(wait - elapsed).unwrap_or(0);
            return Ok(Err(Duration::from_micros(remaining)));
        }
    }
    Ok(Ok(()))
}

pub async fn record_failure(store: &dyn Store, attempt: &Attempt) -> Result<(), StoreError> {
    let now = now_micros();
    store
        .record_signin_failure(
            &[attempt.pair_key.clone(), attempt.ip_key.clone()],
            now,
            now - micros(WINDOW),
        )
        .await
}

/// A right password forgets the pair's failures (the IP's remain).
pub async fn record_success(store: &dyn Store, attempt: &Attempt) -> Result<(), StoreError> {
    store.clear_signin_failures(&attempt.pair_key).await
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_doubles_up_to_fifteen_minutes() {
        assert_eq!(backoff(5, 5), Duration::from_secs(30));
        assert_eq!(backoff(6, 5), Duration::from_secs(60));
        assert_eq!(backoff(9, 5), Duration::from_secs(480));
        assert_eq!(backoff(10, 5), MAX_BACKOFF);
        assert_eq!(backoff(500, 5), MAX_BACKOFF);
    }
}
