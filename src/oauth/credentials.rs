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
    /// A device's credential in the device grant (RFC 8628).
    DeviceCode,
    ClientSecret,
}

/// The kinds whose credentials lead with their issue time (see `digest`):
/// tokens and codes, which are made and looked up often. Client secrets are
/// made rarely and checked against the app's row.
const KINDS_WITH_ISSUE_TIME: [CredentialKind; 4] = [
    CredentialKind::AccessToken,
    CredentialKind::RefreshToken,
    CredentialKind::AuthorizationCode,
    CredentialKind::DeviceCode,
];

impl CredentialKind {
    pub const fn prefix(self) -> &'static str {
        match self {
            Self::AccessToken => "tly_at_",
            Self::RefreshToken => "tly_rt_",
            Self::AuthorizationCode => "tly_code_",
            Self::DeviceCode => "tly_device_",
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
    let random = hex::encode(bytes);
    if KINDS_WITH_ISSUE_TIME.contains(&kind) {
        let issued = crate::domain::now_micros().max(0);
        from_secret(format!(
            "{}{issued:0ISSUE_TIME_DIGITS$x}{random}",
            kind.prefix()
        ))
    } else {
        from_secret(format!("{}{random}", kind.prefix()))
    }
}

/// Wraps a secret made elsewhere (the demo app's derived secret).
pub fn from_secret(secret: String) -> IssuedCredential {
    let digest = digest(&secret);
    IssuedCredential {
        secret: SecretString::from(secret),
        digest,
    }
}

/// Hex digits of the issue time (microseconds since the epoch) that lead a
/// token's or code's random part; enough until the year 10889.
const ISSUE_TIME_DIGITS: usize = 14;
/// Hex digits of a credential's 256 random bits.
const RANDOM_DIGITS: usize = 64;

/// The stored form of a credential: hex SHA-256, led by the issue time when
/// the credential carries one. The time is public (it is the token's own
/// first digits, not its random bits), and leading the key with it makes
/// each new row's key the largest yet: the digest index grows at its right
/// edge, on pages already in the cache, instead of on a random page per
/// token.
pub fn digest(secret: &str) -> String {
    let sha = hex::encode(Sha256::digest(secret.as_bytes()));
    match issue_time(secret) {
        Some(issued) => format!("{issued}{sha}"),
        None => sha,
    }
}

/// The issue-time digits of a token or code that carries them.
fn issue_time(secret: &str) -> Option<&str> {
    let body = KINDS_WITH_ISSUE_TIME
        .iter()
        .find_map(|kind| secret.strip_prefix(kind.prefix()))?;
    (body.len() == ISSUE_TIME_DIGITS + RANDOM_DIGITS && body.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| &body[..ISSUE_TIME_DIGITS])
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

    #[test]
    fn tokens_lead_with_their_issue_time_and_keep_256_random_bits() -> Result<(), String> {
        let before = crate::domain::now_micros();
        let issued = generate(CredentialKind::RefreshToken);
        let token = issued.expose();
        let body = token.strip_prefix("tly_rt_").ok_or("no prefix")?;
        assert_eq!(body.len(), ISSUE_TIME_DIGITS + RANDOM_DIGITS);
        let time =
            i64::from_str_radix(&body[..ISSUE_TIME_DIGITS], 16).map_err(|e| e.to_string())?;
        assert!(time >= before && time <= crate::domain::now_micros());
        // The stored key is the issue time, then the SHA-256 of the whole token.
        assert_eq!(issued.digest.len(), ISSUE_TIME_DIGITS + 64);
        assert!(issued.digest.starts_with(&body[..ISSUE_TIME_DIGITS]));
        assert!(matches(token, &issued.digest));
        // A later token's key sorts after an earlier one's.
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert!(generate(CredentialKind::AccessToken).digest > issued.digest);
        Ok(())
    }

    #[test]
    fn tokens_without_an_issue_time_keep_their_plain_digest() {
        // Tokens issued before the issue time led them are still found.
        let legacy = format!("tly_at_{}", "ab".repeat(32));
        assert_eq!(
            digest(&legacy),
            hex::encode(Sha256::digest(legacy.as_bytes()))
        );
        // Anything not shaped like a token gets the plain digest too.
        for odd in [
            "tly_at_",
            "tly_at_xyz",
            "garbage",
            "tly_",
            "tly_at_00000000000000zz",
        ] {
            assert_eq!(digest(odd).len(), 64, "{odd}");
        }
        let tampered = format!("tly_at_{}{}", "0".repeat(13), "g".repeat(65));
        assert_eq!(digest(&tampered).len(), 64);
    }
}
