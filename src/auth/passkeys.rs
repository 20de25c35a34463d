//! Passkeys and security keys (SPEC §11) through `webauthn-rs`: attestation
//! `none`, user verification required, any number per user. The relying
//! party id is the host of `TALLY_PUBLIC_URL`; where that host is an IP
//! address (which WebAuthn cannot be bound to) passkeys are not offered.
//!
//! A ceremony's state stays on the server (`webauthn_ceremonies`) between its
//! options and its answer, taken once; the browser holds only a random id.

use crate::domain::{micros, now_micros};
use crate::oauth::credentials;
use crate::store::{Ceremony, PasskeyRow, Store, StoreError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use std::time::Duration;
use webauthn_rs::prelude::{
    DiscoverableAuthentication, Passkey, PasskeyAuthentication, PasskeyRegistration,
    PublicKeyCredential, RegisterPublicKeyCredential, Url, Uuid, Webauthn, WebauthnBuilder,
};

/// How long a ceremony may take between its options and its answer.
pub const CEREMONY_TTL: Duration = Duration::from_secs(5 * 60);
/// The longest passkey name kept (bytes).
pub const MAX_NAME_BYTES: usize = 64;

/// What a ceremony is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Adding a passkey to the signed-in user.
    Register,
    /// A passkey after the password (or for step-up): the user is known.
    SecondFactor,
    /// "Sign in with a passkey": a discoverable credential, no password.
    Passwordless,
}

impl Kind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Register => "register",
            Self::SecondFactor => "second_factor",
            Self::Passwordless => "passwordless",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PasskeyError {
    /// The ceremony is unknown, expired, used, or of another kind or user.
    #[error("the passkey request has expired; try again")]
    NoCeremony,
    /// The browser's answer did not verify (wrong origin, signature, replayed
    /// sign count, no user verification, unknown credential …).
    #[error("the passkey could not be verified")]
    Refused,
    /// The credential is already registered.
    #[error("this passkey is already registered")]
    Taken,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

/// A passkey that verified: whose, and how (for `amr`).
#[derive(Debug)]
pub struct Verified {
    pub user_id: String,
    pub credential_id: String,
    pub use_: crate::auth::factors::PasskeyUse,
}

/// The deployment's WebAuthn relying party.
pub struct Passkeys {
    webauthn: Webauthn,
}

fn unexpected(what: &str, e: impl std::fmt::Display) -> PasskeyError {
    PasskeyError::Unexpected(anyhow::anyhow!("{what}: {e}"))
}

/// A user id (32 hex digits, `domain::new_id`) as WebAuthn's user handle.
fn user_handle(user_id: &str) -> Result<Uuid, PasskeyError> {
    Uuid::parse_str(user_id).map_err(|e| unexpected("a user id that is no UUID", e))
}

pub fn credential_id_text(id: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(id)
}

impl Passkeys {
    /// The relying party of `public_origin`; `None` when its host is an IP
    /// address (or it has none).
    pub fn new(public_origin: &str) -> anyhow::Result<Option<Self>> {
        let origin = Url::parse(public_origin)?;
        let Some(url::Host::Domain(host)) = origin.host() else {
            return Ok(None);
        };
        let host = host.to_owned();
        let webauthn = WebauthnBuilder::new(&host, &origin)
            .map_err(|e| anyhow::anyhow!("WebAuthn cannot use {public_origin}: {e}"))?
            .rp_name("Tally")
            .build()
            .map_err(|e| anyhow::anyhow!("WebAuthn cannot use {public_origin}: {e}"))?;
        Ok(Some(Self { webauthn }))
    }

    async fn keep(
        store: &dyn Store,
        kind: Kind,
        user_id: Option<&str>,
        state: String,
    ) -> Result<String, PasskeyError> {
        let id = credentials::random_hex(32);
        store
            .insert_ceremony(
                &credentials::digest(&id),
                &Ceremony {
                    user_id: user_id.map(str::to_owned),
                    kind: kind.as_str().to_owned(),
                    state,
                },
                now_micros() + micros(CEREMONY_TTL),
            )
            .await?;
        Ok(id)
    }

    async fn take(
        store: &dyn Store,
        id: &str,
        kind: Kind,
        user_id: Option<&str>,
    ) -> Result<String, PasskeyError> {
        let ceremony = store
            .take_ceremony(&credentials::digest(id), now_micros())
            .await?
            .ok_or(PasskeyError::NoCeremony)?;
        if ceremony.kind != kind.as_str() || ceremony.user_id.as_deref() != user_id {
            return Err(PasskeyError::NoCeremony);
        }
        Ok(ceremony.state)
    }

    /// Starts adding a passkey: the creation options (as JSON) and the
    /// ceremony's id. The user's passkeys are excluded (no double).
    pub async fn start_registration(
        &self,
        store: &dyn Store,
        user_id: &str,
        username: &str,
        display_name: &str,
        existing: &[PasskeyRow],
    ) -> Result<(serde_json::Value, String), PasskeyError> {
        let exclude = existing
            .iter()
            .filter_map(|p| URL_SAFE_NO_PAD.decode(&p.credential_id).ok())
            .collect::<Vec<_>>();
        let (options, state) = self
            .webauthn
            .start_passkey_registration(
                user_handle(user_id)?,
                username,
                display_name,
                Some(exclude),
            )
            .map_err(|e| unexpected("cannot start a passkey registration", e))?;
        let state = serde_json::to_string(&state).map_err(|e| unexpected("state", e))?;
        let id = Self::keep(store, Kind::Register, Some(user_id), state).await?;
        let mut options = serde_json::to_value(options).map_err(|e| unexpected("options", e))?;
        // A discoverable credential where the authenticator can make one, so
        // the passkey also signs in alone (WebAuthn L2 §5.4.4; the crate asks
        // for none, and checks nothing of it when the answer comes).
        if let Some(selection) = options["publicKey"]["authenticatorSelection"].as_object_mut() {
            selection.insert("residentKey".to_owned(), "preferred".into());
        }
        Ok((options, id))
    }

    /// Finishes adding a passkey: the row to store.
    pub async fn finish_registration(
        &self,
        store: &dyn Store,
        ceremony_id: &str,
        user_id: &str,
        name: &str,
        credential: &RegisterPublicKeyCredential,
    ) -> Result<PasskeyRow, PasskeyError> {
        let state = Self::take(store, ceremony_id, Kind::Register, Some(user_id)).await?;
        let state: PasskeyRegistration =
            serde_json::from_str(&state).map_err(|e| unexpected("state", e))?;
        let passkey = self
            .webauthn
            .finish_passkey_registration(credential, &state)
            .map_err(|e| {
                tracing::info!(error = %e, "a passkey registration was refused");
                PasskeyError::Refused
            })?;
        let json = serde_json::to_value(&passkey).map_err(|e| unexpected("passkey", e))?;
        let flag = |name: &str| json["cred"][name].as_bool().unwrap_or(false);
        Ok(PasskeyRow {
            credential_id: credential_id_text(passkey.cred_id().as_ref()),
            user_id: user_id.to_owned(),
            name: name.to_owned(),
            credential: json.to_string(),
            sign_count: json["cred"]["counter"].as_i64().unwrap_or(0),
            backup_eligible: flag("backup_eligible"),
            created_at: now_micros(),
            last_used_at: None,
        })
    }

    /// Starts an assertion: for `user_id`'s passkeys (after the password, or
    /// for step-up), or, with `None`, for any discoverable credential.
    pub async fn start_authentication(
        &self,
        store: &dyn Store,
        user: Option<(&str, &[PasskeyRow])>,
    ) -> Result<(serde_json::Value, String), PasskeyError> {
        let (options, kind, user_id, state) = match user {
            Some((user_id, rows)) => {
                let passkeys = rows
                    .iter()
                    .filter_map(|row| serde_json::from_str::<Passkey>(&row.credential).ok())
                    .collect::<Vec<_>>();
                if passkeys.is_empty() {
                    return Err(PasskeyError::Refused);
                }
                let (options, state) = self
                    .webauthn
                    .start_passkey_authentication(&passkeys)
                    .map_err(|e| unexpected("cannot start a passkey assertion", e))?;
                let state = serde_json::to_string(&state).map_err(|e| unexpected("state", e))?;
                (
                    serde_json::to_value(options),
                    Kind::SecondFactor,
                    Some(user_id),
                    state,
                )
            }
            None => {
                let (mut options, state) = self
                    .webauthn
                    .start_discoverable_authentication()
                    .map_err(|e| unexpected("cannot start a passkey assertion", e))?;
                // A button asks, not the username field's autofill.
                options.mediation = None;
                let state = serde_json::to_string(&state).map_err(|e| unexpected("state", e))?;
                (
                    serde_json::to_value(options),
                    Kind::Passwordless,
                    None,
                    state,
                )
            }
        };
        let options = options.map_err(|e| unexpected("options", e))?;
        let id = Self::keep(store, kind, user_id, state).await?;
        Ok((options, id))
    }

    /// Finishes an assertion started by [`Self::start_authentication`] with
    /// the same `user_id` (or `None`): verifies it against the stored
    /// credential and records its new sign count, which must have grown
    /// (a replayed or cloned count is refused).
    pub async fn finish_authentication(
        &self,
        store: &dyn Store,
        ceremony_id: &str,
        user_id: Option<&str>,
        assertion: &PublicKeyCredential,
    ) -> Result<Verified, PasskeyError> {
        let kind = if user_id.is_some() {
            Kind::SecondFactor
        } else {
            Kind::Passwordless
        };
        let state = Self::take(store, ceremony_id, kind, user_id).await?;
        let credential_id = credential_id_text(assertion.get_credential_id());
        let row = store
            .find_passkey(&credential_id)
            .await?
            .ok_or(PasskeyError::Refused)?;
        if user_id.is_some_and(|id| id != row.user_id) {
            return Err(PasskeyError::Refused);
        }
        let mut passkey: Passkey =
            serde_json::from_str(&row.credential).map_err(|e| unexpected("passkey", e))?;
        let refused = |e: webauthn_rs::prelude::WebauthnError| {
            tracing::info!(error = %e, "a passkey assertion was refused");
            PasskeyError::Refused
        };
        let result = match user_id {
            Some(_) => {
                let state: PasskeyAuthentication =
                    serde_json::from_str(&state).map_err(|e| unexpected("state", e))?;
                self.webauthn
                    .finish_passkey_authentication(assertion, &state)
                    .map_err(refused)?
            }
            None => {
                let state: DiscoverableAuthentication =
                    serde_json::from_str(&state).map_err(|e| unexpected("state", e))?;
                let (handle, _) = self
                    .webauthn
                    .identify_discoverable_authentication(assertion)
                    .map_err(refused)?;
                if handle.simple().to_string() != row.user_id {
                    return Err(PasskeyError::Refused);
                }
                self.webauthn
                    .finish_discoverable_authentication_v2(assertion, state, &passkey)
                    .map_err(refused)?
            }
        };
        passkey.update_credential(&result);
        let json = serde_json::to_string(&passkey).map_err(|e| unexpected("passkey", e))?;
        let count = i64::from(result.counter());
        if !store
            .record_passkey_use(&credential_id, &json, count, now_micros())
            .await?
        {
            // Another use with this count got there first: a replay.
            return Err(PasskeyError::Refused);
        }
        Ok(Verified {
            user_id: row.user_id,
            credential_id,
            use_: crate::auth::factors::PasskeyUse {
                synced: row.backup_eligible || result.backup_eligible(),
                user_verified: result.user_verified(),
            },
        })
    }
}
