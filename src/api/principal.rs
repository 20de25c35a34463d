//! The token owner of an API request. A handler that takes a `Principal` cannot
//! run without a live token (DESIGN habit 4). It lives at the HTTP edge, beside
//! the error it answers with; `auth/` keeps the rules without actix.

use super::error::ApiError;
use super::params::BodySlot;
use crate::domain::{Scope, ScopeSet};
use crate::oauth::{self, IntrospectError};
use crate::state::AppState;
use crate::store::{TokenKind, User};
use crate::web::signin::client_ip;
use actix_web::dev::Payload;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use std::future::Future;
use std::pin::Pin;

#[derive(Debug, Clone)]
pub struct Principal {
    pub user: User,
    pub scopes: ScopeSet,
    /// `None` for a personal access token.
    pub client_id: Option<String>,
    pub grant_id: String,
    /// The stored digest of the presented token (for revocation and rate limits).
    pub token_digest: String,
}

impl Principal {
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(scope)
    }

    /// Refuses with 403 `insufficient_scope` naming the scope.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::InsufficientScope(vec![scope.as_str()]))
        }
    }

    /// Passes when the token has any of `scopes`; the refusal names them all.
    pub fn require_any(&self, scopes: &[Scope]) -> Result<(), ApiError> {
        if scopes.iter().any(|s| self.has(*s)) {
            Ok(())
        } else {
            Err(ApiError::InsufficientScope(
                scopes.iter().map(|s| s.as_str()).collect(),
            ))
        }
    }

    /// The principal of a request; with `with_friends_count`, also the count of
    /// its user's friends, read in the same statement. A request whose token
    /// does not work counts against its client IP's allowance of such
    /// requests (SPEC §9), and past it one whose token is not known to work
    /// is refused before the store is asked.
    async fn authenticate(
        req: HttpRequest,
        body: BodySlot,
        with_friends_count: bool,
    ) -> Result<(Self, Option<i64>), ApiError> {
        let state = req
            .app_data::<web::Data<AppState>>()
            .ok_or_else(|| ApiError::Unexpected(anyhow::anyhow!("application state missing")))?;
        let bad_tokens = state.rate_limits.bad_tokens();
        let ip = client_ip(&req);
        let mut presented = None;
        let result =
            Self::check_token(&req, body, state, with_friends_count, ip, &mut presented).await;
        match result {
            Err(
                refusal @ (ApiError::InvalidToken(_)
                | ApiError::TokenExpired
                | ApiError::AccountSuspended),
            ) => match bad_tokens.failed(ip, presented.as_deref()) {
                Ok(()) => Err(refusal),
                Err(wait) => Err(ApiError::RateLimited {
                    retry_after_secs: wait.as_secs() + 1,
                }),
            },
            other => other,
        }
    }

    /// `authenticate` without the count of failures; `digest` is set to the
    /// presented token's digest once there is one.
    async fn check_token(
        req: &HttpRequest,
        body: BodySlot,
        state: &AppState,
        with_friends_count: bool,
        ip: std::net::IpAddr,
        digest: &mut Option<String>,
    ) -> Result<(Self, Option<i64>), ApiError> {
        let params = body.params(req).await?;
        let from_header = match req.headers().get(AUTHORIZATION) {
            None => None,
            Some(value) => {
                let value = value.to_str().unwrap_or("");
                match value.split_once(' ') {
                    Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
                        Some(token.trim().to_owned())
                    }
                    _ => {
                        return Err(ApiError::InvalidToken(
                            "the Authorization header must be 'Bearer <token>'".to_owned(),
                        ))
                    }
                }
            }
        };
        let from_params = params.text("access_token")?.map(str::to_owned);
        let token = match (from_header, from_params) {
            (Some(a), Some(b)) if a != b => {
                return Err(ApiError::InvalidRequest(
                    "the access token is given twice with different values".to_owned(),
                ))
            }
            (Some(token), _) | (None, Some(token)) => token,
            (None, None) => return Err(ApiError::MissingToken),
        };
        let token_digest = crate::oauth::credentials::digest(&token);
        *digest = Some(token_digest.clone());
        let bad_tokens = state.rate_limits.bad_tokens();
        let gate = |digest: &str| bad_tokens.admit(ip, digest);
        let store = state.store.as_ref();
        let found = if with_friends_count {
            oauth::tokens::introspect_with_friends_count(store, &state.token_cache, &token, &gate)
                .await
                .map(|(active, count)| (active, Some(count)))
        } else {
            oauth::introspect(store, &state.token_cache, &token, &gate)
                .await
                .map(|active| (active, None))
        };
        let (active, friends_count) = found.map_err(|e| match e {
            IntrospectError::Invalid => {
                ApiError::InvalidToken("the access token is invalid or revoked".to_owned())
            }
            IntrospectError::Expired => ApiError::TokenExpired,
            IntrospectError::Suspended => ApiError::AccountSuspended,
            IntrospectError::Throttled(wait) => ApiError::RateLimited {
                retry_after_secs: wait.as_secs() + 1,
            },
            IntrospectError::Store(e) => e.into(),
        })?;
        if active.kind != TokenKind::Access {
            return Err(ApiError::InvalidToken(
                "a refresh token is not an access token".to_owned(),
            ));
        }
        bad_tokens.found_live(&token_digest);
        if let Err(wait) = state.rate_limits.check_api(&token_digest) {
            return Err(ApiError::RateLimited {
                retry_after_secs: wait.as_secs() + 1,
            });
        }
        state.grant_usage.record(&state.store, &active.grant_id);
        // A real API request from here on (authenticated, its body arrived):
        // the password hashing threads make way for it until it is answered.
        req.extensions_mut().insert(state.hasher.api_request());
        let principal = Self {
            user: active.user,
            scopes: active.scopes,
            client_id: active.client_id,
            grant_id: active.grant_id,
            token_digest,
        };
        Ok((principal, friends_count))
    }
}

/// What both extractors answer with: the token checked once, the friend count
/// read with it when asked for.
type Extraction<T> = Pin<Box<dyn Future<Output = Result<T, ApiError>>>>;

fn extract<T: 'static>(
    req: &HttpRequest,
    payload: &mut Payload,
    with_friends_count: bool,
    build: fn(Principal, Option<i64>) -> T,
) -> Extraction<T> {
    let (req, body) = (req.clone(), BodySlot::of(req, payload));
    Box::pin(async move {
        let (principal, friends_count) =
            Principal::authenticate(req, body, with_friends_count).await?;
        Ok(build(principal, friends_count))
    })
}

impl FromRequest for Principal {
    type Error = ApiError;
    type Future = Extraction<Self>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        extract(req, payload, false, |principal, _| principal)
    }
}

/// A principal read together with the count of its user's friends, in the one
/// statement that checks the token (what `/me` answers with). Its user row is
/// read with it, so it is as fresh as the request.
pub struct PrincipalWithFriendsCount {
    pub principal: Principal,
    pub friends_count: i64,
}

impl FromRequest for PrincipalWithFriendsCount {
    type Error = ApiError;
    type Future = Extraction<Self>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        extract(req, payload, true, |principal, friends_count| Self {
            principal,
            friends_count: friends_count.unwrap_or_default(),
        })
    }
}
