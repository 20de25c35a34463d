//! Storage of the OpenID Connect provider (SPEC §10): the signing keys and
//! each app's choice of ID token algorithm.

use super::{NewCode, NewGrant, StoreError};
use async_trait::async_trait;

/// A signing key as stored: the public half as a JWK, the private half sealed
/// (see `oauth::keys`). Never changed once written.
#[derive(Clone, sqlx::FromRow)]
pub struct SigningKeyRow {
    pub kid: String,
    pub alg: String,
    pub public_jwk: String,
    pub private_sealed: String,
    pub created_at: i64,
    /// When it starts signing; it is published from `created_at` on.
    pub signs_from: i64,
}

impl std::fmt::Debug for SigningKeyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKeyRow")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

/// What an OpenID Connect authentication records with its grant: the
/// sign-in behind it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NewOidcGrant {
    /// When the user signed in (microseconds).
    pub auth_time: i64,
    pub sid: String,
    pub nonce: Option<String>,
    pub acr: Option<String>,
    /// RFC 8176 methods, space-separated.
    pub amr: String,
}

/// The sign-in behind a grant, with the algorithm its app chose.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OidcGrant {
    #[sqlx(flatten)]
    pub sign_in: NewOidcGrant,
    pub id_token_alg: Option<String>,
}

/// The OpenID Connect provider's state.
#[async_trait]
pub trait OidcStore: Send + Sync {
    /// Stores a signing key. With `first_of_alg`, only if no first key of its
    /// algorithm was stored before (instances starting together make one);
    /// whether it was stored.
    async fn insert_signing_key(
        &self,
        key: &SigningKeyRow,
        first_of_alg: bool,
    ) -> Result<bool, StoreError>;

    /// Every signing key, oldest first.
    async fn signing_keys(&self) -> Result<Vec<SigningKeyRow>, StoreError>;

    /// Sets the algorithm of an app's ID tokens; whether the app exists.
    async fn set_id_token_alg(&self, client_id: &str, alg: &str) -> Result<bool, StoreError>;

    /// The algorithm an app chose, if it chose one.
    async fn id_token_alg(&self, client_id: &str) -> Result<Option<String>, StoreError>;

    /// Stores a grant, its code and the OpenID Connect authentication behind
    /// them, together.
    async fn insert_grant_with_code_and_oidc(
        &self,
        grant: &NewGrant,
        code: &NewCode,
        oidc: &NewOidcGrant,
    ) -> Result<(), StoreError>;

    /// The OpenID Connect authentication behind a grant, if it was one.
    async fn oidc_grant(&self, grant_id: &str) -> Result<Option<OidcGrant>, StoreError>;
}
