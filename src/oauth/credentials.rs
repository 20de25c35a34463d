//! Bearer credentials: 256 random bits behind a type prefix that secret scanners
//! recognise. Only SHA-256 digests are stored, and digests are compared in
//! constant time, so a copy of the database yields nothing usable.

use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    AccessToken,
    RefreshToken,
    AuthorizationCode,
    ClientSecret,
}

impl CredentialKind {
    pub const fn prefix(self) -> &'static str {
        match self {
            Self::AccessToken => "tly_at_",
            Self::RefreshToken => "tly_rt_",
            Self::AuthorizationCode => "tly_code_",
            Self::ClientSecret => "tly_secret_",
        }
    }
}

/// A freshly made credential: the secret to hand out once, and the digest to keep.
pub struct IssuedCredential {
    pub secret: SecretString,
    pub digest: String,
}

pub fn generate(kind: CredentialKind) -> IssuedCredential {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    from_secret(format!("{}{}", kind.prefix(), hex::encode(bytes)))
}

/// Wraps a secret made elsewhere (the demo app's derived secret).
pub fn from_secret(secret: String) -> IssuedCredential {
    let digest = digest(&secret);
    IssuedCredential {
        secret: SecretString::from(secret),
        digest,
    }
}

/// The stored form of a credential: hex SHA-256.
pub fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Whether a presented secret matches a stored digest, in constant time.
pub fn matches(presented: &str, stored_digest: &str) -> bool {
    digest(presented)
        .as_bytes()
        .ct_eq(stored_digest.as_bytes())
        .into()
}

/// Random bytes as hex, for keys that are not bearer credentials.
pub fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buffer);
    hex::encode(buffer)
}

impl IssuedCredential {
    pub fn expose(&self) -> &str {
        self.secret.expose_secret()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_carry_their_prefix_and_256_bits() {
        let issued = generate(CredentialKind::ClientSecret);
        let secret = issued.expose();
        assert!(secret.starts_with("tly_secret_"));
        assert_eq!(secret.len(), "tly_secret_".len() + 64);
        assert!(matches(secret, &issued.digest));
        assert!(!matches("tly_secret_other", &issued.digest));
        assert_ne!(generate(CredentialKind::AccessToken).digest, issued.digest);
    }
}
