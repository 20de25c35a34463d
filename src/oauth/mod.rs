//! The authorization server: apps (clients) and their credentials, grants and
//! tokens, and `introspect`, which the REST API links against.

pub mod clients;
pub mod credentials;
pub mod tokens;

pub use tokens::{introspect, ActiveToken, IntrospectError};
