//! The REST surface: the JSON envelope, the error type that renders
//! `{"error":{"message","code"}}`, and the handlers by resource.

pub mod error;
pub mod health;
pub mod oauth;
pub mod params;
pub mod payments;
pub mod query;
pub mod render;
pub mod users;

pub use error::{ApiError, UNAVAILABLE_RETRY_AFTER_SECS};

use actix_web::{web, HttpResponse};

/// Declares a table of routes once: a const listing them (what the OpenAPI test
/// compares the document against) and a `configure` function (what actix
/// serves) come from the same lines. A path that exists answers other methods
/// with 405 `method_not_allowed` and an `Allow` header listing its methods.
macro_rules! route_table {
    ($(#[$meta:meta])* $table:ident, $configure:ident,
     $($path:literal => { $($method:ident => $handler:path),+ $(,)? }),+ $(,)?) => {
        $(#[$meta])*
        pub const $table: &[(&str, &str)] = &[$($((stringify!($method), $path),)+)+];

        /// Registers the routes of the table of the same name.
        pub fn $configure(cfg: &mut web::ServiceConfig) {
            $(
                let allow = [$(stringify!($method)),+].map(str::to_ascii_uppercase).join(", ");
                cfg.service(
                    web::resource($path)
                        $(.route(web::$method().to($handler)))+
                        .default_service(web::to(move || method_not_allowed(allow.clone()))),
                );
            )+
        }
    };
}

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
    /// The authorization server's routes under `/v1/oauth`: its pages
    /// (`web::authorize`) and its JSON endpoints (`api::oauth`).
    OAUTH_ROUTES, configure_oauth,
    "/authorize" => { get => crate::web::authorize::show, post => crate::web::authorize::decide },
    "/access_token" => { post => oauth::token, delete => oauth::revoke_presented },
    "/token" => { post => oauth::token },
    "/revoke" => { post => oauth::revoke },
    "/introspect" => { post => oauth::introspection },
}

/// The OpenAPI 3.1 document of the REST API and the OAuth endpoints.
pub const OPENAPI: &str = include_str!("../../openapi.json");

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(OPENAPI)
}

/// Any path under `/v1` that no route serves.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}

async fn method_not_allowed(allow: String) -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed { allow })
}
