//! The OpenID Connect provider's JSON endpoints (SPEC §10): the public
//! signing keys (RFC 7517).

use super::ApiError;
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

/// `GET /oauth/jwks`: the published keys, each with `kid`, `use` and `alg`.
pub async fn jwks(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let keys = state.signing_keys.jwks(state.store.as_ref()).await?;
    Ok(HttpResponse::Ok().json(keys))
}
