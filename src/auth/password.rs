//! Argon2id password hashes, computed on the blocking pool with a bound on how
//! many run at once, so sign-in storms cannot starve the async workers.

use crate::domain::Password;
use argon2::password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher as _, SaltString};
use argon2::{Algorithm, Argon2, Params, PasswordVerifier, Version};
use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;

/// OWASP's recommended argon2id parameters: 19 MiB, 2 passes, 1 lane.
fn argon2() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).unwrap_or_default();
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// A real hash of a random password, checked when the user is unknown so that
/// the answer takes as long as for a known user.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        argon2()
            .hash_password(crate::domain::new_id().as_bytes(), &salt)
            .map(|h| h.to_string())
            .unwrap_or_default()
    })
}

#[derive(Clone)]
pub struct PasswordHasher {
    permits: Arc<Semaphore>,
}

impl PasswordHasher {
    /// `concurrency` hashes may run at once; the rest wait their turn.
    pub fn new(concurrency: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    pub async fn hash(&self, password: &Password) -> anyhow::Result<String> {
        let plain = password.expose().to_owned();
        let _permit = self.permits.acquire().await?;
        tokio::task::spawn_blocking(move || {
            let salt = SaltString::generate(&mut OsRng);
            argon2()
                .hash_password(plain.as_bytes(), &salt)
                .map(|h| h.to_string())
                .map_err(|e| anyhow::anyhow!("hashing failed: {e}"))
        })
        .await?
    }

    /// Checks a password against a stored hash, or against a dummy hash when
    /// there is no account, taking the same time either way.
    pub async fn verify(&self, stored: Option<&str>, candidate: &str) -> bool {
        let known = stored.is_some();
        let stored = stored.unwrap_or_else(|| dummy_hash()).to_owned();
        let candidate = candidate.to_owned();
        let Ok(_permit) = self.permits.acquire().await else {
            return false;
        };
        let matched = tokio::task::spawn_blocking(move || {
            PasswordHash::new(&stored)
                .map(|parsed| {
                    argon2()
                        .verify_password(candidate.as_bytes(), &parsed)
                        .is_ok()
                })
                .unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        known && matched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_only_its_own_password() -> anyhow::Result<()> {
        let hasher = PasswordHasher::new(2);
        let hash = hasher.hash(&Password::parse("correct horse")?).await?;
        assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"));
        assert!(hasher.verify(Some(&hash), "correct horse").await);
        assert!(!hasher.verify(Some(&hash), "wrong horse").await);
        assert!(!hasher.verify(None, "correct horse").await);
        Ok(())
    }
}
