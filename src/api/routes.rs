//! Route tables: each area declares its routes once, and the const the tests
//! compare with the OpenAPI document and the function actix serves come from the
//! same lines. Used by `api` (REST, OAuth JSON endpoints) and `web` (the consent
//! page under `/v1/oauth`).

use super::error::ApiError;
use actix_web::HttpResponse;

/// Declares a table of routes once: a const listing them (what the OpenAPI test
/// compares the document against) and a `configure` function (what actix
/// serves) come from the same lines. A path that exists answers other methods
/// with 405 `method_not_allowed` and an `Allow` header listing its methods.
/// A path may name middleware functions in brackets, `"/p" [a, b] => {…}`:
/// each wraps the path's resource (`from_fn`), in that order, so the last
/// named is the outermost.
macro_rules! route_table {
    ($(#[$meta:meta])* $table:ident, $configure:ident,
     $($path:literal $([$($wrap:path),+ $(,)?])? => { $($method:ident => $handler:path),+ $(,)? }),+ $(,)?) => {
        $(#[$meta])*
        pub const $table: &[(&str, &str)] = &[$($((stringify!($method), $path),)+)+];

        /// Registers the routes of the table of the same name.
        pub fn $configure(cfg: &mut actix_web::web::ServiceConfig) {
            $(
                let allow = $crate::api::routes::allow_header(&[$(stringify!($method)),+]);
                cfg.service(
                    actix_web::web::resource($path)
                        $($(.wrap(actix_web::middleware::from_fn($wrap)))+)?
                        $(.route(actix_web::web::$method().to($handler)))+
                        .default_service(actix_web::web::to(move || $crate::api::routes::method_not_allowed(allow.clone()))),
                );
            )+
        }
    };
}

pub(crate) use route_table;

/// The `Allow` header of a path: its methods, and HEAD wherever GET is (every
/// GET route answers HEAD).
pub fn allow_header(methods: &[&str]) -> String {
    let mut allow: Vec<String> = methods.iter().map(|m| m.to_ascii_uppercase()).collect();
    if methods.contains(&"get") {
        allow.push("HEAD".to_owned());
    }
    allow.join(", ")
}

/// A path that exists, asked with a method it does not serve: 405 with `Allow`.
pub async fn method_not_allowed(allow: String) -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed { allow })
}
