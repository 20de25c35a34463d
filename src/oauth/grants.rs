//! The token endpoint's grants (RFC 6749 §4.1.3, §6; RFC 7636 §4.6; RFC 8628
//! §3.4): client authentication, code exchange, refresh-token rotation and
//! device codes.

use super::client_auth::GrantError;
use super::credentials::{self, IssuedCredential};
use super::tokens::{self, REFRESH_TTL, SERVER_SIDE_TTL};
use crate::domain::{now_micros, ScopeSet};
use crate::store::{
    App, CodeRecord, CodeUse, NewToken, Presented, RefreshUse, Store, StoreError, TokenKind, User,
    UserKey,
};
use base64::Engine;
use sha2::{Digest, Sha256};

/// What a client asks the token endpoint for, parsed.
#[derive(Debug)]
pub enum GrantRequest {
    AuthorizationCode {
        code: String,
        redirect_uri: Option<String>,
        code_verifier: Option<String>,
    },
    RefreshToken {
        refresh_token: String,
        /// RFC 6749 §6: may not exceed what was granted; when given, the new
        /// access token carries exactly these scopes (the answer's `scope`).
        scope: Option<ScopeSet>,
    },
    /// RFC 8628 §3.4: a device's poll.
    DeviceCode { device_code: String },
}

/// What a successful grant hands out.
pub struct IssuedTokens {
    pub access_token: IssuedCredential,
    pub refresh_token: IssuedCredential,
    pub scopes: ScopeSet,
    pub user: User,
    /// The grant the tokens belong to.
    pub grant_id: String,
    /// Issued by a refresh (not a code exchange).
    pub refreshed: bool,
}

/// Exchanges a code or a refresh token for a new access and refresh token.
#[tracing::instrument(skip_all, fields(client_id = %app.client_id))]
pub async fn exchange(
    store: &dyn Store,
    app: &App,
    request: GrantRequest,
) -> Result<IssuedTokens, GrantError> {
    let now = now_micros();
    let (access, access_row) = tokens::mint(TokenKind::Access, now, SERVER_SIDE_TTL);
    let (refresh, refresh_row) = tokens::mint(TokenKind::Refresh, now, REFRESH_TTL);
    let refreshed = matches!(request, GrantRequest::RefreshToken { .. });
    let (user_id, scopes, user, grant_id) = match request {
        GrantRequest::AuthorizationCode {
            code,
            redirect_uri,
            code_verifier,
        } => {
            let check =
                |record: &CodeRecord| check_code(record, now, &redirect_uri, &code_verifier);
            let code = Presented {
                digest: &credentials::digest(&code),
                client_id: &app.client_id,
                now,
            };
            match store
                .exchange_code(code, &check, &[access_row, refresh_row])
                .await?
            {
                CodeUse::Issued(record) => (record.user_id, record.scopes, None, record.grant_id),
                CodeUse::Refused(reason) => return Err(GrantError::InvalidGrant(reason)),
                CodeUse::Revoked => {
                    return Err(GrantError::InvalidGrant(
                        "the authorization was revoked".into(),
                    ))
                }
                CodeUse::Replayed => {
                    return Err(GrantError::InvalidGrant(
                        "the code was already presented (codes work once, even when the \
                         first exchange failed); any token issued from it is now revoked"
                            .into(),
                    ))
                }
                CodeUse::Unknown => {
                    return Err(GrantError::InvalidGrant("the code is unknown".into()))
                }
            }
        }
        GrantRequest::RefreshToken {
            refresh_token,
            scope,
        } => {
            // RFC 6749 §6: the new access token carries the narrower scope
            // asked for; the new refresh token keeps the presented one's.
            let access_row = NewToken {
                scopes: scope.as_ref().map(ScopeSet::to_string),
                ..access_row
            };
            let digest = credentials::digest(&refresh_token);
            let presented = Presented {
                digest: &digest,
                client_id: &app.client_id,
                now,
            };
            if let Some(requested) = &scope {
                // Compared only for a token the rotation would spend, so a
                // foreign or dead one gets the same invalid_grant as without a
                // scope, learning nothing; a refused request leaves it usable.
                if let Some(granted) = store.live_refresh_token_scopes(presented).await? {
                    let granted = ScopeSet::parse(&granted).map_err(|e| {
                        StoreError::Unexpected(anyhow::anyhow!("stored scopes unreadable: {e}"))
                    })?;
                    if !requested.is_subset(&granted) {
                        return Err(GrantError::InvalidScope(format!(
                            "scope may not exceed what was granted: {granted}"
                        )));
                    }
                }
            }
            match store
                .rotate_refresh_token(presented, &[access_row, refresh_row])
                .await?
            {
                RefreshUse::Rotated(grant) => (
                    grant.user.id.clone(),
                    scope
                        .as_ref()
                        .map_or(grant.grant_scopes, ScopeSet::to_string),
                    Some(grant.user),
                    grant.grant_id,
                ),
                RefreshUse::Replayed => {
                    return Err(GrantError::InvalidGrant(
                        "the refresh token was already used; its whole family is revoked".into(),
                    ))
                }
                RefreshUse::Invalid => {
                    // The same words whatever the reason: nothing about whose
                    // token it is, or what it holds.
                    return Err(GrantError::InvalidGrant(
                        "the refresh token is unknown, expired, revoked or another client's".into(),
                    ));
                }
            }
        }
        GrantRequest::DeviceCode { device_code } => {
            let redeemed = super::device::redeem(
                store,
                &app.client_id,
                &device_code,
                now,
                &[access_row, refresh_row],
            )
            .await?;
            (redeemed.user_id, redeemed.scopes, None, redeemed.grant_id)
        }
    };
    // A rotation read the user with the grant; a code exchange (or a device
    // code's) reads it now.
    let user = match user {
        Some(user) => user,
        None => store
            .find_user(UserKey::Id(&user_id))
            .await?
            .ok_or_else(|| GrantError::InvalidGrant("the account no longer exists".into()))?,
    };
    if user.suspended {
        return Err(GrantError::InvalidGrant("the account is suspended".into()));
    }
    let scopes = ScopeSet::parse(&scopes)
        .map_err(|e| StoreError::Unexpected(anyhow::anyhow!("stored scopes unreadable: {e}")))?;
    Ok(IssuedTokens {
        access_token: access,
        refresh_token: refresh,
        scopes,
        user,
        grant_id,
        refreshed,
    })
}

/// The checks of RFC 6749 §4.1.3 and RFC 7636 §4.6 on a code being spent; a
/// failure spends it all the same.
fn check_code(
    record: &CodeRecord,
    now: i64,
    redirect_uri: &Option<String>,
    code_verifier: &Option<String>,
) -> Result<(), String> {
    if record.expires_at <= now {
        return Err("the code has expired".into());
    }
    if record.redirect_uri.is_some() && record.redirect_uri != *redirect_uri {
        return Err("redirect_uri does not match the one given at authorization".into());
    }
    match (&record.code_challenge, code_verifier) {
        (Some(challenge), Some(verifier)) if !pkce_matches(challenge, verifier) => {
            Err("code_verifier does not match the code_challenge".into())
        }
        (Some(_), None) => Err("code_verifier is required".into()),
        (None, Some(_)) => Err("code_verifier given but no code_challenge was".into()),
        _ => Ok(()),
    }
}

/// RFC 7636 §4.6: BASE64URL(SHA256(verifier)) == challenge.
fn pkce_matches(challenge: &str, verifier: &str) -> bool {
    if !super::authorize::is_pkce_value(verifier) {
        return false;
    }
    let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    use subtle::ConstantTimeEq;
    computed.as_bytes().ct_eq(challenge.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn pkce_follows_rfc_7636_appendix_b() {
        assert!(super::pkce_matches(
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        ));
        assert!(!super::pkce_matches(
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXX"
        ));
    }
}
