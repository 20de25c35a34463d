//! Issuing and checking tokens. `introspect` is what the REST API links against
//! to validate a bearer token (SPEC §6), and what `POST /oauth/introspect` serves.

use super::client_auth::{check_client, GrantError};
use super::credentials::{self, CredentialKind, IssuedCredential};
use super::introspection_cache::{introspection_key, IntrospectionCache, Remembered, TokenCache};
use crate::domain::{micros, new_id, now_micros, ScopeSet};
use crate::store::{NewGrant, NewToken, Store, StoreError, TokenKind, TokenRecord, User};
use std::time::{Duration, Instant};

/// Client-side (implicit) access tokens live 30 minutes.
pub const CLIENT_SIDE_TTL: Duration = Duration::from_secs(30 * 60);
/// Server-side access tokens and personal access tokens live 60 days.
pub const SERVER_SIDE_TTL: Duration = Duration::from_secs(60 * 86_400);
/// Refresh tokens live 180 days (each refresh issues a new one).
pub const REFRESH_TTL: Duration = Duration::from_secs(180 * 86_400);

/// A token to hand out, with the row that records it.
pub(crate) fn mint(kind: TokenKind, now: i64, ttl: Duration) -> (IssuedCredential, NewToken) {
    let credential = credentials::generate(match kind {
        TokenKind::Access => CredentialKind::AccessToken,
        TokenKind::Refresh => CredentialKind::RefreshToken,
    });
    let row = NewToken {
        digest: credential.digest.clone(),
        kind,
        scopes: None,
        created_at: now,
        expires_at: now.saturating_add(micros(ttl)),
    };
    (credential, row)
}

/// Issues an access token under a new grant of its own: the client-side flow
/// (`client_id` set, 30 minutes) or a personal access token (no client, 60 days).
#[tracing::instrument(skip_all, fields(user_id, flow))]
pub async fn issue_access_token(
    store: &dyn Store,
    user_id: &str,
    client_id: Option<&str>,
    scopes: &ScopeSet,
    flow: &'static str,
    ttl: Duration,
) -> Result<IssuedCredential, StoreError> {
    let now = now_micros();
    let (credential, row) = mint(TokenKind::Access, now, ttl);
    let grant = NewGrant {
        id: new_id(),
        user_id: user_id.to_owned(),
        client_id: client_id.map(str::to_owned),
        scopes: scopes.to_string(),
        flow,
        created_at: now,
    };
    store.insert_grant_with_tokens(&grant, &[row]).await?;
    Ok(credential)
}

/// A personal access token for one's own account (SPEC §8): 60 days, revocable.
pub async fn issue_personal_access_token(
    store: &dyn Store,
    user_id: &str,
    scopes: &ScopeSet,
) -> Result<IssuedCredential, StoreError> {
    issue_access_token(store, user_id, None, scopes, "personal", SERVER_SIDE_TTL).await
}

/// A token that is alive: known, not revoked, not expired, and neither its user
/// nor its app is suspended.
#[derive(Debug, Clone)]
pub struct ActiveToken {
    pub kind: TokenKind,
    pub user: User,
    pub scopes: ScopeSet,
    pub client_id: Option<String>,
    pub grant_id: String,
    pub issued_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum IntrospectError {
    #[error("the token is unknown or revoked")]
    Invalid,
    #[error("the token has expired")]
    Expired,
    #[error("the token's account or app is suspended")]
    Suspended,
    /// The token was not looked up: the caller's gate refused the read
    /// (too many bad tokens from its client lately), for this long.
    #[error("too many unusable tokens lately")]
    Throttled(Duration),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The kind a presented token claims by its prefix; `None` when malformed.
fn claimed_kind(token: &str) -> Option<TokenKind> {
    if token.starts_with(CredentialKind::AccessToken.prefix()) {
        Some(TokenKind::Access)
    } else if token.starts_with(CredentialKind::RefreshToken.prefix()) {
        Some(TokenKind::Refresh)
    } else {
        None
    }
}

/// Asked with a token's digest before the store is read for it (never for a
/// token answered from memory): `Err(wait)` refuses the read.
pub type ReadGate<'a> = &'a (dyn Fn(&str) -> Result<(), Duration> + Sync);

/// Checks a presented token. Malformed tokens are refused without a look-up;
/// `gate` may refuse the look-up of the others.
#[tracing::instrument(skip_all)]
pub async fn introspect(
    store: &dyn Store,
    cache: &TokenCache,
    token: &str,
    gate: ReadGate<'_>,
) -> Result<ActiveToken, IntrospectError> {
    let kind = claimed_kind(token).ok_or(IntrospectError::Invalid)?;
    // The primary key is the digest itself, so the look-up compares digests in
    // the index; nothing secret is compared byte by byte here.
    let digest = credentials::digest(token);
    let epoch = store.revocation_epoch();
    let record = match cache.get(&digest, epoch) {
        Some(remembered) => Some(remembered.value.clone()),
        None => {
            gate(&digest).map_err(IntrospectError::Throttled)?;
            let read_at = Instant::now();
            let record = store.find_token(&digest).await?;
            if let Some(record) = &record {
                cache.put(digest, record.clone(), read_at, epoch);
            }
            record
        }
    };
    // Expiry is checked on every use, remembered or not.
    check(kind, record)
}

/// `introspect`, with the count of the user's friends (for `/me`). The user's
/// row and the count are always read as of the request; the token's check is
/// remembered as `introspect` remembers it, so a token checked a moment ago
/// costs a read of its user by primary key instead of the four-table join.
#[tracing::instrument(skip_all)]
pub async fn introspect_with_friends_count(
    store: &dyn Store,
    cache: &TokenCache,
    token: &str,
    gate: ReadGate<'_>,
) -> Result<(ActiveToken, i64), IntrospectError> {
    let kind = claimed_kind(token).ok_or(IntrospectError::Invalid)?;
    let digest = credentials::digest(token);
    let epoch = store.revocation_epoch();
    if let Some(remembered) = cache.get(&digest, epoch) {
        // A dead token costs no read of its user.
        dead(kind, &remembered.value)?;
        let found = store
            .find_user_with_friends_count(&remembered.value.user.id)
            .await?;
        let Some((user, friends_count)) = found else {
            return Err(IntrospectError::Invalid);
        };
        let record = TokenRecord {
            user,
            ..remembered.value.clone()
        };
        return Ok((check(kind, Some(record))?, friends_count));
    }
    gate(&digest).map_err(IntrospectError::Throttled)?;
    let read_at = Instant::now();
    let record = store.find_token_with_friends_count(&digest).await?;
    let friends_count = record
        .as_ref()
        .and_then(|r| r.friends_count)
        .unwrap_or_default();
    if let Some(record) = &record {
        cache.put(digest, record.clone(), read_at, epoch);
    }
    Ok((check(kind, record)?, friends_count))
}

/// What `POST /oauth/introspect` finds: the calling app authenticated, and the
/// token checked, read together in one statement. A token issued to another
/// app (or a personal access token) is as good as unknown, unless the caller
/// may introspect any token.
#[tracing::instrument(skip_all)]
pub async fn introspect_for_client(
    store: &dyn Store,
    cache: &IntrospectionCache,
    client_id: &str,
    client_secret: &str,
    token: &str,
) -> Result<Result<ActiveToken, IntrospectError>, GrantError> {
    // A malformed token cannot match a digest: the look-up still authenticates
    // the caller, and the token then is just inactive.
    let kind = claimed_kind(token);
    let digest = credentials::digest(token);
    let epoch = store.revocation_epoch();
    let key = introspection_key(client_id, &digest);
    let (client, record) = match cache.get(&key, epoch) {
        Some(remembered) => (
            Some(remembered.value.client.clone()),
            Some(remembered.value.token.clone()),
        ),
        None => {
            let read_at = Instant::now();
            match store.find_client_and_token(client_id, &digest).await? {
                Some((client, Some(record))) => {
                    let remembered = Remembered {
                        client: client.clone(),
                        token: record.clone(),
                    };
                    cache.put(key, remembered, read_at, epoch);
                    (Some(client), Some(record))
                }
                Some((client, None)) => (Some(client), None),
                None => (None, None),
            }
        }
    };
    check_client(
        client
            .as_ref()
            .map(|c| (c.secret_digest.as_str(), c.suspended)),
        client_secret,
    )?;
    // RFC 7662 §4, RFC 9700 R36: an app learns only about its own tokens,
    // unless an operator made it a resource server.
    let may_see = |record: &TokenRecord| {
        client.as_ref().is_some_and(|c| c.introspect_any)
            || record.client_id.as_deref() == Some(client_id)
    };
    Ok(match kind {
        Some(kind) => check(kind, record.filter(may_see)),
        None => Err(IntrospectError::Invalid),
    })
}

/// Refuses a token revoked, expired, or presented as another kind.
fn dead(kind: TokenKind, record: &TokenRecord) -> Result<(), IntrospectError> {
    if record.revoked || record.token_kind != kind.as_str() {
        return Err(IntrospectError::Invalid);
    }
    if record.expires_at <= now_micros() {
        return Err(IntrospectError::Expired);
    }
    Ok(())
}

/// Whether a token found (or not) under a presented token's digest is alive.
fn check(kind: TokenKind, record: Option<TokenRecord>) -> Result<ActiveToken, IntrospectError> {
    let record = record.ok_or(IntrospectError::Invalid)?;
    dead(kind, &record)?;
    if record.user.suspended || record.app_suspended {
        return Err(IntrospectError::Suspended);
    }
    let scopes = ScopeSet::parse(&record.scopes).map_err(|e| {
        IntrospectError::Store(StoreError::Unexpected(anyhow::anyhow!(
            "stored scopes are unreadable: {e}"
        )))
    })?;
    Ok(ActiveToken {
        kind,
        user: record.user,
        scopes,
        client_id: record.client_id,
        grant_id: record.grant_id,
        issued_at: record.created_at,
        expires_at: record.expires_at,
    })
}
