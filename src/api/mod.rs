//! The REST surface: the JSON envelope, the error type that renders
//! `{"error":{"message","code"}}`, and the handlers by resource.

pub mod error;
pub mod health;
pub mod oauth;
pub mod params;

pub use error::ApiError;

/// The REST API's routes, registered inside the `/v1` scope.
pub fn configure(_cfg: &mut actix_web::web::ServiceConfig) {}
