//! The operator commands of the OpenID Connect provider (SPEC §10): rotating
//! and listing the ID token signing keys.

use super::operations::{parse_alg, AdminError};
use crate::domain::now_micros;
use crate::oauth::keys::{self, IdTokenAlg, KeyError, KeyRing, KeyStatus};
use crate::store::Store;
use secrecy::SecretString;
use serde::Serialize;
use std::time::Duration;

impl From<KeyError> for AdminError {
    fn from(error: KeyError) -> Self {
        match error {
            KeyError::Store(e) => e.into(),
            KeyError::Unexpected(e) => Self::Unexpected(e),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Rotated {
    /// The new keys: published now, signing from `signs_from`.
    pub keys: Vec<NewKey>,
}

#[derive(Debug, Serialize)]
pub struct NewKey {
    pub kid: String,
    pub alg: String,
    /// Seconds since the epoch.
    pub signs_from: i64,
}

/// `admin keys rotate [--alg A] [--publish-ahead D]`: a new key for `alg`, or
/// for every algorithm.
pub async fn keys_rotate(
    store: &dyn Store,
    secret_key: &SecretString,
    alg: Option<&str>,
    publish_ahead: Option<&str>,
) -> Result<Rotated, AdminError> {
    let algs = match alg {
        Some(name) => vec![parse_alg(name)?],
        None => IdTokenAlg::ALL.to_vec(),
    };
    let publish_ahead = match publish_ahead {
        None => keys::DEFAULT_PUBLISH_AHEAD,
        Some(text) => humantime::parse_duration(text.trim()).map_err(|e| {
            AdminError::Invalid(format!(
                "--publish-ahead {text:?} is not a duration like 1h or 30m: {e}"
            ))
        })?,
    };
    if publish_ahead > Duration::from_secs(366 * 24 * 3600) {
        return Err(AdminError::Invalid(
            "--publish-ahead may be at most a year".to_owned(),
        ));
    }
    let ring = KeyRing::new(secret_key)?;
    // Made first, so the rotated ones follow a key that already signs.
    ring.ensure_first_keys(store).await?;
    let made = ring.rotate(store, &algs, publish_ahead).await?;
    Ok(Rotated {
        keys: made
            .into_iter()
            .map(|row| NewKey {
                kid: row.kid,
                alg: row.alg,
                signs_from: row.signs_from / 1_000_000,
            })
            .collect(),
    })
}

#[derive(Debug, Serialize)]
pub struct KeyList {
    pub keys: Vec<KeyStatus>,
}

/// `admin keys list`: every key and where it stands now.
pub async fn keys_list(store: &dyn Store) -> Result<KeyList, AdminError> {
    let rows = store.signing_keys().await?;
    Ok(KeyList {
        keys: keys::statuses(&rows, now_micros()),
    })
}
