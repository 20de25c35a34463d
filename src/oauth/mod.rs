//! The authorization server: apps (clients) and their credentials, authorization
//! decisions, grants, tokens, and `introspect`, which the REST API links
//! against. Knows nothing of HTTP.

pub mod authorize;
pub mod client_auth;
pub mod clients;
pub mod credentials;
pub mod device;
pub mod grants;
pub mod id_token;
pub mod introspection_cache;
pub mod keys;
pub mod logout;
pub mod tokens;

pub use tokens::{introspect, ActiveToken, IntrospectError};
