//! Secrets shown once (a new client secret, a personal access token): kept on
//! the server for a single showing, so a replayed copy of the session cookie
//! shows nothing. The secret is sealed with a random key that only the
//! session cookie holds, and the row is deleted when shown: neither a copy of
//! the database nor a copy of the cookie yields it.

use super::view::{HeadRequest, PageError};
use crate::domain::now_micros;
use crate::oauth::credentials;
use crate::state::AppState;
use crate::store::NewReveal;
use actix_session::Session;
use actix_web::{HttpMessage, HttpRequest};
use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// An unshown secret is kept this long, then purged (docs/operations.md, "Retention").
pub const REVEAL_TTL: Duration = Duration::from_secs(10 * 60);

const NONCE_BYTES: usize = 12;
const COOKIE_KEY: &str = "reveal";

/// A secret as the page shows it.
#[derive(Debug)]
pub struct OnceSecret {
    /// What it is, e.g. "client secret".
    pub label: String,
    pub value: String,
}

/// What the session cookie holds: where the sealed secret is and its key.
#[derive(Serialize, Deserialize)]
struct PendingReveal {
    id: String,
    key: String,
    label: String,
    /// Whose it is: an app's client id, or the personal-token marker.
    owner: String,
}

fn sealing_failed(e: impl std::fmt::Display) -> PageError {
    PageError::Unexpected(anyhow::anyhow!("cannot seal a secret: {e}"))
}

/// Keeps `value` for one showing on the page of `owner`, to `user_id` only.
pub async fn show_once(
    state: &AppState,
    session: &Session,
    user_id: &str,
    owner: &str,
    label: &str,
    value: &str,
) -> Result<(), PageError> {
    let key: [u8; 32] = rand::random();
    let nonce: [u8; NONCE_BYTES] = rand::random();
    let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key));
    let mut sealed = nonce.to_vec();
    sealed.extend(
        cipher
            .encrypt(Nonce::from_slice(&nonce), value.as_bytes())
            .map_err(sealing_failed)?,
    );
    let id = credentials::random_hex(16);
    state
        .store
        .insert_reveal(&NewReveal {
            id: id.clone(),
            user_id: user_id.to_owned(),
            sealed: hex::encode(sealed),
            created_at: now_micros(),
        })
        .await?;
    session
        .insert(
            COOKIE_KEY,
            PendingReveal {
                id,
                key: hex::encode(key),
                label: label.to_owned(),
                owner: owner.to_owned(),
            },
        )
        .map_err(sealing_failed)
}

/// The secret waiting for the page of `owner`, if any: shown now, never again.
/// A HEAD request (routed as a GET) shows nothing and leaves it waiting: its
/// answer has no body to show it in.
pub async fn take(
    req: &HttpRequest,
    state: &AppState,
    session: &Session,
    user_id: &str,
    owner: &str,
) -> Result<Option<OnceSecret>, PageError> {
    if req.extensions().contains::<HeadRequest>() {
        return Ok(None);
    }
    let Some(pending) = session.get::<PendingReveal>(COOKIE_KEY).ok().flatten() else {
        return Ok(None);
    };
    if pending.owner != owner {
        return Ok(None);
    }
    session.remove(COOKIE_KEY);
    let not_before = now_micros().saturating_sub(crate::domain::micros(REVEAL_TTL));
    let Some(sealed) = state
        .store
        .take_reveal(&pending.id, user_id, not_before)
        .await?
    else {
        return Ok(None);
    };
    Ok(open(&pending.key, &sealed).map(|value| OnceSecret {
        label: pending.label,
        value,
    }))
}

fn open(key: &str, sealed: &str) -> Option<String> {
    let key = hex::decode(key).ok().filter(|k| k.len() == 32)?;
    let sealed = hex::decode(sealed).ok().filter(|s| s.len() > NONCE_BYTES)?;
    let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
    let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key));
    let plain = cipher.decrypt(Nonce::from_slice(nonce), ciphertext).ok()?;
    String::from_utf8(plain).ok()
}
