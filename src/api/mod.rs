//! The REST surface: the JSON envelope, the error type that renders
//! `{"error":{"message","code"}}`, and the handlers by resource.

pub mod error;
pub mod health;
pub mod oauth;
pub mod oidc;
pub mod params;
pub mod payments;
pub mod principal;
pub mod query;
pub mod render;
pub mod routes;
pub mod users;

pub use error::{ApiError, UNAVAILABLE_RETRY_AFTER_SECS};

use routes::route_table;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::HttpResponse;

route_table! {
    /// Every REST route under `/v1`, as (method, path) in actix/OpenAPI syntax.
    ROUTES, configure,
    "/me" => { get => users::me },
    "/users" => { get => users::search },
    "/users/{user_id}" => { get => users::show },
    "/users/{user_id}/friends" => { get => users::friends },
    "/payments" => { get => payments::list, post => payments::create },
    "/payments/{payment_id}" => { get => payments::show, put => payments::update },
    "/openapi.json" => { get => openapi },
}

route_table! {
    /// The authorization server's JSON endpoints under `/v1/oauth`; its page
    /// (`/authorize`) is registered by `web::configure_oauth`.
    OAUTH_ROUTES, configure_oauth,
    "/access_token" => { post => oauth::token, delete => oauth::revoke_presented },
    "/token" => { post => oauth::token },
    "/device_authorization" => { post => oauth::device_authorization },
    "/revoke" => { post => oauth::revoke },
    "/introspect" => { post => oauth::introspection },
    "/jwks" => { get => oidc::jwks },
    "/userinfo" => { get => oidc::userinfo, post => oidc::userinfo },
}

/// The OpenAPI 3.1 document of the REST API and the OAuth endpoints.
pub const OPENAPI: &str = include_str!("../../openapi.json");

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(OPENAPI)
}

/// Every answer under `/v1` carries `Cache-Control: no-store` (SPEC §2): it may
/// hold balances and addresses, and the request may carry the token in its URL.
pub async fn no_store(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    match next.call(req).await {
        Ok(mut response) => {
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, NO_STORE.clone());
            Ok(response)
        }
        Err(error) => Err(NoStoreError(error).into()),
    }
}

const NO_STORE: header::HeaderValue = header::HeaderValue::from_static("no-store");

/// An error raised by inner middleware (the OAuth rate limit), rendered with
/// `Cache-Control: no-store` like every other API answer.
#[derive(Debug)]
struct NoStoreError(actix_web::Error);

impl std::fmt::Display for NoStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl actix_web::ResponseError for NoStoreError {
    fn status_code(&self) -> actix_web::http::StatusCode {
        self.0.as_response_error().status_code()
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = self.0.error_response();
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, NO_STORE.clone());
        response
    }
}

/// Any path under `/v1` that no route serves.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}
