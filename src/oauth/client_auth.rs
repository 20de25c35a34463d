//! What the token and introspection endpoints share: authenticating the
//! calling client, and the RFC 6749 §5.2 errors they answer.

use super::credentials;
use super::introspection_cache::ClientCache;
use crate::store::{App, Store, StoreError};

/// RFC 6749 §5.2 errors.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    InvalidClient(String),
    #[error("{0}")]
    InvalidGrant(String),
    #[error("{0}")]
    InvalidScope(String),
    #[error(
        "grant_type must be authorization_code, refresh_token or \
         urn:ietf:params:oauth:grant-type:device_code"
    )]
    UnsupportedGrantType,
    /// RFC 8628 §3.5: nobody has answered at `/device` yet.
    #[error("the person has not answered yet; poll again after the interval")]
    AuthorizationPending,
    /// RFC 8628 §3.5: polled sooner than the interval; the new interval.
    #[error("polled sooner than the interval: poll every {0} seconds from now on")]
    SlowDown(i64),
    #[error("{0}")]
    AccessDenied(String),
    /// RFC 8628 §3.5: the device code is past its lifetime.
    #[error("the device code has expired; ask for a new one")]
    ExpiredToken,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl GrantError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::InvalidClient(_) => "invalid_client",
            Self::InvalidGrant(_) => "invalid_grant",
            Self::InvalidScope(_) => "invalid_scope",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::AuthorizationPending => "authorization_pending",
            Self::SlowDown(_) => "slow_down",
            Self::AccessDenied(_) => "access_denied",
            Self::ExpiredToken => "expired_token",
            Self::Store(_) => "server_error",
        }
    }
}

/// Checks a client's id and secret. Every failure reads the same. The app's
/// row may come from `cache` (read within its TTL, and no suspension, secret
/// change or edit committed here since: see `introspection_cache`); the
/// secret is checked against it every time.
#[tracing::instrument(skip_all)]
pub async fn authenticate_client(
    store: &dyn Store,
    cache: &ClientCache,
    client_id: &str,
    secret: &str,
) -> Result<App, GrantError> {
    let epoch = store.revocation_epoch();
    let app = match cache.get(client_id, epoch) {
        Some(remembered) => Some(remembered.value.clone()),
        None => {
            let read_at = std::time::Instant::now();
            let app = store.find_app(client_id).await?;
            if let Some(app) = &app {
                cache.put(client_id.to_owned(), app.clone(), read_at, epoch);
            }
            app
        }
    };
    check_client(
        app.as_ref()
            .map(|a| (a.secret_digest.as_str(), a.suspended)),
        secret,
    )?;
    app.ok_or_else(|| GrantError::InvalidClient("client authentication failed".to_owned()))
}

/// Whether `secret` authenticates an app found with this secret digest and
/// suspended flag (`None`: no such app).
pub fn check_client(app: Option<(&str, bool)>, secret: &str) -> Result<(), GrantError> {
    let refused = || GrantError::InvalidClient("client authentication failed".to_owned());
    let (secret_digest, suspended) = app.ok_or_else(refused)?;
    if !credentials::matches(secret, secret_digest) {
        return Err(refused());
    }
    if suspended {
        return Err(GrantError::InvalidClient("the app is suspended".to_owned()));
    }
    Ok(())
}
