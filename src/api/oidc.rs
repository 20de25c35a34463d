//! The OpenID Connect provider's JSON endpoints (SPEC §10): the public
//! signing keys (RFC 7517) and userinfo.

use super::principal::Principal;
use super::render::UserView;
use super::ApiError;
use crate::domain::Scope;
use crate::oauth::keys::KeyError;
use crate::state::AppState;
use actix_web::{web, HttpResponse};

impl From<KeyError> for ApiError {
    fn from(error: KeyError) -> Self {
        match error {
            KeyError::Store(e) => e.into(),
            KeyError::Unexpected(e) => Self::Unexpected(e),
        }
    }
}

/// `GET /.well-known/openid-configuration` (OpenID Connect Discovery 1.0), at
/// the origin: the same document as RFC 8414's.
pub async fn discovery(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(super::oauth::server_metadata(&state.public_origin))
}

/// `GET /oauth/jwks`: the published keys, each with `kid`, `use` and `alg`.
pub async fn jwks(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let keys = state.signing_keys.jwks(state.store.as_ref()).await?;
    Ok(HttpResponse::Ok().json(keys))
}

/// `GET` and `POST /oauth/userinfo` (OpenID Connect Core §5.3): `sub` and the
/// claims of the granted scopes; only verified addresses are released. A
/// token without `openid` gets 403 with `error="insufficient_scope"`.
pub async fn userinfo(principal: Principal) -> Result<HttpResponse, ApiError> {
    principal.require(Scope::OpenId)?;
    let user = &principal.user;
    let mut claims = serde_json::Map::new();
    claims.insert("sub".into(), user.id.clone().into());
    if principal.has(Scope::Profile) {
        let view = UserView::from(user);
        claims.insert("name".into(), view.display_name.into());
        if let Some(given) = view.first_name {
            claims.insert("given_name".into(), given.into());
        }
        if let Some(family) = view.last_name {
            claims.insert("family_name".into(), family.into());
        }
        claims.insert("preferred_username".into(), user.username.clone().into());
        if let Some(picture) = view.profile_picture_url {
            claims.insert("picture".into(), picture.into());
        }
        // Seconds since the epoch: the last change of the name, or the
        // account's making.
        let updated_at = user.profile_updated_at.unwrap_or(user.date_joined);
        claims.insert("updated_at".into(), (updated_at / 1_000_000).into());
    }
    if principal.has(Scope::Email) {
        if let Some(email) = user.email.as_ref().filter(|_| user.email_verified) {
            claims.insert("email".into(), email.clone().into());
            claims.insert("email_verified".into(), true.into());
        }
    }
    if principal.has(Scope::Phone) {
        if let Some(phone) = user.phone.as_ref().filter(|_| user.phone_verified) {
            claims.insert("phone_number".into(), phone.clone().into());
            claims.insert("phone_number_verified".into(), true.into());
        }
    }
    Ok(HttpResponse::Ok().json(claims))
}
