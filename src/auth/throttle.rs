//! Sign-in throttling (SPEC §9). Failures are counted per (account, client IP)
//! and per client IP over 15 minutes. Past 5 for a pair, or 20 for an IP, each
//! further attempt must wait a back-off that doubles from 30 seconds up to 15
//! minutes. A right password from another address is never affected, so no one
//! can lock another person out. Every typed password is checked through
//! [`confirm_password`]: sign-in and the contact change alike.

use super::password::{PasswordHasher, Requester};
use crate::domain::{micros, now_micros};
use crate::store::{Store, StoreError};
use std::net::IpAddr;
use std::time::Duration;

pub const WINDOW: Duration = Duration::from_secs(15 * 60);
pub const PAIR_LIMIT: i64 = 5;
pub const IP_LIMIT: i64 = 20;
const FIRST_BACKOFF: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// Who is trying: the account (its id, or the identifier typed when there is no
/// such account), the client address, and who waits for the answer.
pub struct Attempt {
    pair_key: String,
    ip_key: String,
    requester: Requester,
}

impl Attempt {
    pub fn new(account: &str, ip: IpAddr) -> Self {
        Self {
            pair_key: format!("pair:{}:{ip}", account.to_lowercase()),
            ip_key: format!("ip:{ip}"),
            requester: Requester::default(),
        }
    }

    /// An attempt at a second factor (SPEC §11): counted like passwords, on
    /// counters of its own, so failed codes and failed passwords do not add up.
    pub fn second_factor(user_id: &str, ip: IpAddr) -> Self {
        Self {
            pair_key: format!("factor:{user_id}:{ip}"),
            ip_key: format!("factor-ip:{ip}"),
            requester: Requester::default(),
        }
    }

    /// The attempt's password is not checked once `requester` has gone.
    pub fn waited_on_by(self, requester: Requester) -> Self {
        Self { requester, ..self }
    }
}

fn backoff(failures: i64, limit: i64) -> Duration {
    let doublings = u32::try_from(failures - limit).unwrap_or(u32::MAX).min(16);
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(MAX_BACKOFF)
}

/// An attempt let through, counted as a failure until `succeeded` says
/// otherwise.
pub struct Admitted {
    at: i64,
}

/// Lets an attempt through, or says how long it must wait (`Err`). The attempt
/// is counted as a failure before its password is checked, in the same
/// transaction as the decision: parallel attempts cannot all pass the check
/// before any of them is counted.
#[tracing::instrument(skip_all)]
async fn admit(
    store: &dyn Store,
    attempt: &Attempt,
) -> Result<Result<Admitted, Duration>, StoreError> {
    let now = now_micros();
    let decide = |seen: &[(i64, Option<i64>)]| {
        for (&(failures, last), limit) in seen.iter().zip([PAIR_LIMIT, IP_LIMIT]) {
            if failures < limit {
                continue;
            }
            let wait = micros(backoff(failures, limit));
            let elapsed = now - last.unwrap_or(now);
            if elapsed < wait {
                return Err(Duration::from_micros(
                    u64::try_from(wait - elapsed).unwrap_or(0),
                ));
            }
        }
        Ok(())
    };
    let keys = [attempt.pair_key.clone(), attempt.ip_key.clone()];
    Ok(store
        .admit_signin(&keys, now - micros(WINDOW), now, &decide)
        .await?
        .map(|()| Admitted { at: now }))
}

/// A right password: this attempt was no failure, and the pair's earlier
/// failures are forgotten (the address's remain).
async fn succeeded(
    store: &dyn Store,
    attempt: &Attempt,
    admitted: Admitted,
) -> Result<(), StoreError> {
    store
        .forget_signin_attempt(
            &attempt.pair_key,
            std::slice::from_ref(&attempt.ip_key),
            admitted.at,
        )
        .await
}

/// What a typed password proved.
#[derive(Debug, PartialEq, Eq)]
pub enum Confirmation {
    Confirmed,
    Refused,
    /// Too many failures lately: nothing was checked; try again after this.
    Wait(Duration),
    /// The hashing queue is full: nothing was checked or counted.
    Busy,
}

/// Checks `password` against an account's `password_hash`, throttled: the
/// attempt is admitted (or must wait) and counted as a failure before the hash
/// is checked, and forgotten when the password is right. `None` stands for an
/// account that does not exist: the same work is done, and it is refused.
/// The attempt takes its place in the hashing queue first, so a full queue
/// costs the account no failure.
pub async fn confirm_password(
    store: &dyn Store,
    hasher: &PasswordHasher,
    attempt: &Attempt,
    password_hash: Option<&str>,
    password: &str,
) -> Result<Confirmation, StoreError> {
    let Ok(reservation) = hasher.reserve() else {
        return Ok(Confirmation::Busy);
    };
    let admitted = match admit(store, attempt).await? {
        Ok(admitted) => admitted,
        Err(wait) => return Ok(Confirmation::Wait(wait)),
    };
    if !reservation
        .verify(&attempt.requester, password_hash, password)
        .await
    {
        return Ok(Confirmation::Refused);
    }
    succeeded(store, attempt, admitted).await?;
    Ok(Confirmation::Confirmed)
}

/// Checks a second factor (`check`: whether it was right) under the
/// throttle, as [`confirm_password`] checks a password: admitted and counted
/// as a failure first, forgotten when right.
pub async fn confirm_second_factor<F>(
    store: &dyn Store,
    attempt: &Attempt,
    check: F,
) -> Result<Confirmation, StoreError>
where
    F: std::future::Future<Output = Result<bool, StoreError>>,
{
    let admitted = match admit(store, attempt).await? {
        Ok(admitted) => admitted,
        Err(wait) => return Ok(Confirmation::Wait(wait)),
    };
    if !check.await? {
        return Ok(Confirmation::Refused);
    }
    succeeded(store, attempt, admitted).await?;
    Ok(Confirmation::Confirmed)
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
