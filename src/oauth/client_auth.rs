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
    #[error("grant_type must be authorization_code or refresh_token")]
    UnsupportedGrantType,
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
