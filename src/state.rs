//! What every handler reaches: the application state and the body limit. Its own
//! module so that `startup` (which registers the routes) and the handlers in
//! `api` and `web` all import it without importing each other.

use crate::auth::password::PasswordHasher;
use crate::auth::usage::GrantUsage;
use crate::config::Settings;
use crate::limits::RateLimits;
use crate::mailer::Mailer;
use crate::oauth::introspection_cache::{ClientCache, IntrospectionCache, TokenCache};
use crate::store::Store;
use secrecy::SecretString;
use std::sync::Arc;

/// How long a request's body may take to arrive after its headers (SPEC §9);
/// the setting itself is `config::Settings::body_deadline`.
pub use crate::config::BODY_DEADLINE;

/// What an unknown method's 405 names in `Allow` (RFC 9110 §15.5.6): every
/// method some route of the server takes.
pub const SERVED_METHODS: &str = "GET, HEAD, POST, PUT, DELETE";

/// Largest request body accepted (SPEC §9).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler can reach.
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub settings: Arc<Settings>,
    /// The origin clients see, e.g. `http://127.0.0.1:8080`.
    pub public_origin: String,
    pub secret_key: SecretString,
    pub hasher: PasswordHasher,
    pub rate_limits: RateLimits,
    pub mailer: Mailer,
    pub grant_usage: GrantUsage,
    /// What `POST /oauth/introspect` read in the last moments.
    pub introspection_cache: IntrospectionCache,
    /// What the API's token checks read in the last moments (not `/me`,
    /// which shows the balance as it is).
    pub token_cache: TokenCache,
    /// The apps the token endpoint authenticated in the last moments.
    pub client_cache: ClientCache,
    /// The keys that sign ID tokens (SPEC §10).
    pub signing_keys: crate::oauth::keys::KeyRing,
    /// The WebAuthn relying party; `None` when the public URL's host is an
    /// IP address (passkeys are then not offered, SPEC §11).
    pub passkeys: Option<crate::auth::passkeys::Passkeys>,
}
