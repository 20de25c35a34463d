//! Storage of the OpenID Connect provider (SPEC §10): the signing keys and
//! each app's choice of ID token algorithm.

use super::StoreError;
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
}
