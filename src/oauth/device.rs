//! The device authorization grant (RFC 8628, SPEC §10): a device without a
//! browser (a CLI, a TV) asks for a device code and a user code; the person
//! enters the user code at `/device`, signed in, and allows or denies; the
//! device polls the token endpoint until it gets its tokens, once.

use super::authorize::Authentication;
use super::client_auth::GrantError;
use super::credentials::{self, CredentialKind, IssuedCredential};
use super::id_token::session_sid;
use crate::domain::{micros, new_id, now_micros, Scope, ScopeSet};
use crate::store::{
    DeviceCodeRow, DevicePoll, DeviceRefusal, DeviceStatus, DeviceStep, NewDeviceCode, NewGrant,
    NewOidcGrant, NewToken, PendingDeviceCode, Presented, Store, StoreError,
};
use rand::Rng;
use sha2::{Digest, Sha256};
use std::fmt;
use std::time::Duration;

/// The token endpoint's `grant_type` for a device code (RFC 8628 §3.4).
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// A device code and its user code live 10 minutes.
pub const CODE_TTL: Duration = Duration::from_secs(600);

/// Seconds a device waits between polls at first (RFC 8628 §3.2 `interval`).
pub const INTERVAL_SECS: i64 = 5;

/// What a `slow_down` adds to a device code's interval (RFC 8628 §3.5).
pub const SLOW_DOWN_SECS: i64 = 5;

/// The grants' (and consents') flow of an allowed device.
pub const FLOW: &str = "device";

/// The letters of a user code: no vowels, so no word is spelt by chance, and
/// none that reads like a digit (RFC 8628 §6.1).
const ALPHABET: &[u8; 20] = b"BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_LETTERS: usize = 8;

/// How often a user code is drawn again when the one drawn is taken.
const DRAWS: usize = 8;

/// What a person types at `/device`: 8 letters of [`ALPHABET`], shown as
/// `XXXX-XXXX`, read in any letter case, with or without the dash.
#[derive(Clone, PartialEq, Eq)]
pub struct UserCode(String);

impl UserCode {
    pub fn generate() -> Self {
        let mut rng = rand::rng();
        Self(
            (0..USER_CODE_LETTERS)
                .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
                .collect(),
        )
    }

    /// Reads a code as a person types it: letter case, the dash and spaces
    /// do not matter (RFC 8628 §6.1). `None` when it cannot be a user code.
    pub fn parse(input: &str) -> Option<Self> {
        let letters: String = input
            .chars()
            .filter(|c| *c != '-' && !c.is_whitespace())
            .map(|c| c.to_ascii_uppercase())
            .collect();
        let valid = letters.len() == USER_CODE_LETTERS
            && letters
                .bytes()
                .all(|b| b.is_ascii() && ALPHABET.contains(&b));
        valid.then_some(Self(letters))
    }

    /// The stored form: SHA-256 of the 8 letters, in hex.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }
}

/// Shown as `XXXX-XXXX`.
impl fmt::Display for UserCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (first, second) = self.0.split_at(USER_CODE_LETTERS / 2);
        write!(f, "{first}-{second}")
    }
}

/// Never in a log line.
impl fmt::Debug for UserCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UserCode(..)")
    }
}

/// What `POST /oauth/device_authorization` hands out.
pub struct DeviceAuthorization {
    pub device_code: IssuedCredential,
    pub user_code: UserCode,
    pub expires_in: Duration,
    pub interval_secs: i64,
}

/// Stores a device's request for `scopes` of the app `client_id`.
#[tracing::instrument(skip_all, fields(client_id = %client_id))]
pub async fn start(
    store: &dyn Store,
    client_id: &str,
    scopes: &ScopeSet,
) -> Result<DeviceAuthorization, StoreError> {
    let now = now_micros();
    let device_code = credentials::generate(CredentialKind::DeviceCode);
    // A user code names one stored request: a taken one is drawn again.
    for _ in 0..DRAWS {
        let user_code = UserCode::generate();
        let stored = store
            .insert_device_code(&NewDeviceCode {
                digest: device_code.digest.clone(),
                user_code_digest: user_code.digest(),
                client_id: client_id.to_owned(),
                scopes: scopes.to_string(),
                interval_secs: INTERVAL_SECS,
                created_at: now,
                expires_at: now.saturating_add(micros(CODE_TTL)),
            })
            .await?;
        if stored {
            return Ok(DeviceAuthorization {
                device_code,
                user_code,
                expires_in: CODE_TTL,
                interval_secs: INTERVAL_SECS,
            });
        }
    }
    Err(StoreError::Unexpected(anyhow::anyhow!(
        "no free user code in {DRAWS} draws"
    )))
}

/// The pending request a user code names, if it is unexpired.
pub async fn pending(
    store: &dyn Store,
    code: &UserCode,
) -> Result<Option<PendingDeviceCode>, StoreError> {
    store
        .pending_device_code(&code.digest(), now_micros())
        .await
}

/// The scopes a pending request asks for.
pub fn scopes(pending: &PendingDeviceCode) -> Result<ScopeSet, StoreError> {
    ScopeSet::parse(&pending.scopes)
        .map_err(|e| StoreError::Unexpected(anyhow::anyhow!("stored scopes unreadable: {e}")))
}

/// The person allowed the request they were shown (`pending`): its grant is
/// made, with the sign-in behind it when it asks for `openid`. `false` when
/// the request is no longer pending (expired, or answered meanwhile).
#[tracing::instrument(skip_all, fields(client_id = %pending.client_id))]
pub async fn allow(
    store: &dyn Store,
    user_id: &str,
    code: &UserCode,
    pending: &PendingDeviceCode,
    signed_in: &Authentication,
) -> Result<bool, StoreError> {
    let grant = NewGrant {
        id: new_id(),
        user_id: user_id.to_owned(),
        client_id: Some(pending.client_id.clone()),
        scopes: pending.scopes.clone(),
        flow: FLOW,
        created_at: now_micros(),
    };
    // What the grant's ID tokens will say of this sign-in (no nonce: the
    // device sent none).
    let oidc = scopes(pending)?
        .contains(Scope::OpenId)
        .then(|| NewOidcGrant {
            auth_time: signed_in.auth_time,
            sid: session_sid(&signed_in.session_id),
            nonce: None,
            acr: None,
            amr: signed_in.amr.clone(),
        });
    store
        .allow_device_code(&code.digest(), &grant, oidc.as_ref())
        .await
}

/// The person denied the request; `false` when it is no longer pending.
pub async fn deny(store: &dyn Store, code: &UserCode) -> Result<bool, StoreError> {
    store.deny_device_code(&code.digest(), now_micros()).await
}

/// A device code's grant, once its poll got the tokens.
pub struct Redeemed {
    pub user_id: String,
    pub scopes: String,
    pub grant_id: String,
}

/// A poll of the token endpoint with a device code of `client_id`: `tokens`
/// are stored under its grant when the person allowed it, or the answer of
/// RFC 8628 §3.5 says why not.
#[tracing::instrument(skip_all, fields(client_id = %client_id))]
pub(super) async fn redeem(
    store: &dyn Store,
    client_id: &str,
    device_code: &str,
    now: i64,
    tokens: &[NewToken],
) -> Result<Redeemed, GrantError> {
    let digest = credentials::digest(device_code);
    let presented = Presented {
        digest: &digest,
        client_id,
        now,
    };
    let decide = |row: &DeviceCodeRow| step(row, now);
    match store.poll_device_code(presented, &decide, tokens).await? {
        DevicePoll::Issued { row, user_id } => Ok(Redeemed {
            user_id,
            scopes: row.scopes,
            grant_id: row.grant_id.unwrap_or_default(),
        }),
        DevicePoll::GrantRevoked => Err(GrantError::AccessDenied(
            "the authorization was revoked before the device got its tokens".into(),
        )),
        DevicePoll::Unknown => Err(GrantError::InvalidGrant(
            "the device code is unknown".into(),
        )),
        DevicePoll::Stepped { row, step } => Err(match step {
            DeviceStep::RecordPoll { interval_secs } if interval_secs > row.interval_secs => {
                GrantError::SlowDown(interval_secs)
            }
            DeviceStep::RecordPoll { .. } => GrantError::AuthorizationPending,
            DeviceStep::Refuse(DeviceRefusal::Denied) => {
                GrantError::AccessDenied("the person denied the request".into())
            }
            DeviceStep::Refuse(DeviceRefusal::Expired) => GrantError::ExpiredToken,
            DeviceStep::RevokeReplayed | DeviceStep::Issue => GrantError::InvalidGrant(
                "the device code was already used (it works once); any token issued from it \
                 is now revoked"
                    .into(),
            ),
        }),
    }
}

/// What a poll at `now` does with a device code (RFC 8628 §3.5).
fn step(row: &DeviceCodeRow, now: i64) -> DeviceStep {
    if row.used_at.is_some() {
        return DeviceStep::RevokeReplayed;
    }
    if row.expires_at <= now {
        return DeviceStep::Refuse(DeviceRefusal::Expired);
    }
    match row.status {
        DeviceStatus::Allowed => DeviceStep::Issue,
        DeviceStatus::Denied => DeviceStep::Refuse(DeviceRefusal::Denied),
        DeviceStatus::Pending => {
            // Polled before the interval passed since the last poll:
            // slow_down, and the interval grows for this code from now on.
            let too_soon = row.last_polled_at.is_some_and(|last| {
                now < last.saturating_add(row.interval_secs.saturating_mul(1_000_000))
            });
            let interval_secs = if too_soon {
                row.interval_secs.saturating_add(SLOW_DOWN_SECS)
            } else {
                row.interval_secs
            };
            DeviceStep::RecordPoll { interval_secs }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_codes_are_eight_letters_of_the_alphabet_shown_with_a_dash() {
        for _ in 0..100 {
            let code = UserCode::generate();
            let shown = code.to_string();
            assert_eq!(shown.len(), 9);
            assert_eq!(&shown[4..5], "-");
            assert!(shown
                .bytes()
                .filter(|b| *b != b'-')
                .all(|b| ALPHABET.contains(&b)));
            assert_eq!(UserCode::parse(&shown), Some(code));
        }
    }

    #[test]
    fn user_codes_are_read_in_any_case_with_or_without_the_dash() {
        let code = UserCode::parse("BCDF-GHJK");
        assert!(code.is_some());
        for typed in [
            "bcdfghjk",
            "bcdf-ghjk",
            "BcDf-gHjK",
            " bcdf ghjk ",
            "BCDFGHJK",
        ] {
            assert_eq!(UserCode::parse(typed), code, "{typed}");
        }
        for wrong in [
            "",
            "BCDF-GHJ",
            "BCDF-GHJKL",
            "ABCD-EFGH",
            "BCDF-GHJ1",
            "BCDF_GHJK",
            "ВCDF-GHJK",
        ] {
            assert_eq!(UserCode::parse(wrong), None, "{wrong}");
        }
        assert_eq!(
            code.map(|c| c.digest()),
            Some(hex::encode(Sha256::digest(b"BCDFGHJK")))
        );
    }

    fn row(status: DeviceStatus, last_polled_at: Option<i64>) -> DeviceCodeRow {
        DeviceCodeRow {
            client_id: "app".into(),
            status,
            grant_id: None,
            scopes: "access_profile".into(),
            expires_at: 1_000_000_000,
            interval_secs: 5,
            last_polled_at,
            used_at: None,
        }
    }

    #[test]
    fn a_poll_before_the_interval_slows_the_device_down_by_five_seconds() {
        let now = 100_000_000;
        let pending = |last| step(&row(DeviceStatus::Pending, last), now);
        assert_eq!(pending(None), DeviceStep::RecordPoll { interval_secs: 5 });
        assert_eq!(
            pending(Some(now - 5_000_000)),
            DeviceStep::RecordPoll { interval_secs: 5 }
        );
        assert_eq!(
            pending(Some(now - 4_999_999)),
            DeviceStep::RecordPoll { interval_secs: 10 }
        );
        let mut slowed = row(DeviceStatus::Pending, Some(now - 6_000_000));
        slowed.interval_secs = 10;
        assert_eq!(
            step(&slowed, now),
            DeviceStep::RecordPoll { interval_secs: 15 }
        );
    }

    #[test]
    fn answers_expiry_and_spending_come_before_the_interval() {
        let now = 100_000_000;
        let soon = Some(now - 1);
        assert_eq!(
            step(&row(DeviceStatus::Allowed, soon), now),
            DeviceStep::Issue
        );
        assert_eq!(
            step(&row(DeviceStatus::Denied, soon), now),
            DeviceStep::Refuse(DeviceRefusal::Denied)
        );
        let mut expired = row(DeviceStatus::Allowed, soon);
        expired.expires_at = now;
        assert_eq!(
            step(&expired, now),
            DeviceStep::Refuse(DeviceRefusal::Expired)
        );
        let mut spent = row(DeviceStatus::Allowed, soon);
        spent.used_at = Some(now - 10);
        spent.expires_at = now - 1;
        assert_eq!(step(&spent, now), DeviceStep::RevokeReplayed);
    }
}
