//! Standard Webhooks 1.0 signatures: `v1,` then the base64 HMAC-SHA256 of
//! `id.timestamp.body` under the secret (the bytes after `whsec_`, base64).
//! Secrets are kept sealed under `TALLY_SECRET_KEY`, the endpoint id as
//! associated data.

use crate::secret_key::Sealer;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// What a signing secret starts with.
pub const SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a secret (SPEC: at least 24).
const SECRET_BYTES: usize = 32;

/// A new signing secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> SecretString {
    let bytes: [u8; SECRET_BYTES] = rand::random();
    SecretString::from(format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes)))
}

fn sealer(secret_key: &SecretString) -> anyhow::Result<Sealer> {
    Sealer::new(secret_key, b"tally webhook secrets")
}

/// A secret sealed for the endpoint `endpoint_id`.
pub fn seal(
    secret_key: &SecretString,
    endpoint_id: &str,
    secret: &SecretString,
) -> anyhow::Result<String> {
    sealer(secret_key)?.seal(endpoint_id.as_bytes(), secret.expose_secret().as_bytes())
}

/// The secret sealed for `endpoint_id`.
pub fn open(
    secret_key: &SecretString,
    endpoint_id: &str,
    sealed: &str,
) -> anyhow::Result<SecretString> {
    let plain = sealer(secret_key)?.open(endpoint_id.as_bytes(), sealed)?;
    Ok(SecretString::from(String::from_utf8(plain)?))
}

/// One signature entry: `v1,` and the base64 HMAC-SHA256 of
/// `{id}.{timestamp}.{body}`.
pub fn sign(secret: &SecretString, id: &str, timestamp: i64, body: &str) -> anyhow::Result<String> {
    let encoded = secret.expose_secret();
    let key = STANDARD.decode(encoded.strip_prefix(SECRET_PREFIX).unwrap_or(encoded))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key)?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The `webhook-signature` header: an entry for each secret that signs,
/// separated by spaces.
pub fn signature_header(
    secrets: &[SecretString],
    id: &str,
    timestamp: i64,
    body: &str,
) -> anyhow::Result<String> {
    let entries = secrets
        .iter()
        .map(|s| sign(s, id, timestamp, body))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(entries.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks reference library's own test vector.
    #[test]
    fn the_signature_is_the_one_of_the_reference_library_s_example() -> anyhow::Result<()> {
        let secret = SecretString::from("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_owned());
        let body = r#"{"email":"test@example.com","username":"test_user"}"#;
        assert_eq!(
            sign(&secret, "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553, body)?,
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
        Ok(())
    }

    #[test]
    fn a_new_secret_has_the_prefix_and_at_least_24_random_bytes() -> anyhow::Result<()> {
        let secret = new_secret();
        let encoded = secret
            .expose_secret()
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| anyhow::anyhow!("no whsec_ prefix"))?;
        assert!(STANDARD.decode(encoded)?.len() >= 24);
        Ok(())
    }
}
