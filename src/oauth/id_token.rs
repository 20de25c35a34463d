//! ID tokens (OpenID Connect Core 1.0 §2, §3.1.3.6, §12.2): the claims of a
//! grant whose scope holds `openid`, signed with the app's algorithm by the
//! key ring.

use super::keys::{IdTokenAlg, KeyError, KeyRing, ID_TOKEN_TTL};
use crate::domain::now_micros;
use crate::store::{NewOidcGrant, Store};
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};

/// The authentication methods a password sign-in used (RFC 8176).
pub const AMR_PASSWORD: &str = "pwd";

#[derive(Debug, Serialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: String,
    exp: i64,
    iat: i64,
    auth_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    nonce: Option<String>,
    at_hash: String,
    amr: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    acr: Option<String>,
    sid: String,
}

/// What an ID token is issued for.
pub struct IdTokenFor<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub user_id: &'a str,
    pub grant_id: &'a str,
    /// The access token issued beside it, for `at_hash`.
    pub access_token: &'a str,
    /// From a refresh: the first `auth_time`, and no `nonce` (§12.2).
    pub refreshed: bool,
}

/// The ID token of a grant, signed; `None` when the grant was not an OpenID
/// Connect authentication (it has no sign-in recorded).
pub async fn issue(
    store: &dyn Store,
    keys: &KeyRing,
    what: IdTokenFor<'_>,
) -> Result<Option<String>, KeyError> {
    let Some(grant) = store.oidc_grant(what.grant_id).await? else {
        return Ok(None);
    };
    let alg = grant
        .id_token_alg
        .as_deref()
        .and_then(IdTokenAlg::parse)
        .unwrap_or(IdTokenAlg::DEFAULT);
    let claims = claims(&grant.sign_in, &what, alg, now_micros() / 1_000_000);
    keys.sign(store, alg, claims).await.map(Some)
}

fn claims(grant: &NewOidcGrant, what: &IdTokenFor<'_>, alg: IdTokenAlg, now: i64) -> Claims {
    let ttl = i64::try_from(ID_TOKEN_TTL.as_secs()).unwrap_or(3600);
    Claims {
        iss: what.issuer.to_owned(),
        sub: what.user_id.to_owned(),
        aud: what.client_id.to_owned(),
        exp: now + ttl,
        iat: now,
        auth_time: grant.auth_time / 1_000_000,
        nonce: grant.nonce.clone().filter(|_| !what.refreshed),
        at_hash: token_hash(alg, what.access_token),
        amr: grant
            .amr
            .split(' ')
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect(),
        acr: grant.acr.clone(),
        sid: grant.sid.clone(),
    }
}

/// What an ID token hint (RP-Initiated Logout 1.0 §2) says, once it is known
/// to be an ID token this deployment signed.
#[derive(Debug, Clone, Deserialize)]
pub struct Hint {
    /// The user it was issued for (`sub`).
    #[serde(rename = "sub")]
    pub subject: String,
    /// The app it was issued to (`aud`: one client id, as Tally issues it).
    #[serde(rename = "aud")]
    pub audience: String,
    /// The browser session it came from (`sid`).
    pub sid: Option<String>,
}

/// Reads an ID token hint: `None` unless one of our keys signed it for
/// `issuer`. An expired one is read all the same.
pub async fn read_hint(
    store: &dyn Store,
    keys: &KeyRing,
    issuer: &str,
    token: &str,
) -> Result<Option<Hint>, KeyError> {
    keys.verify::<Hint>(store, issuer, token).await
}

/// `at_hash` (Core §3.1.3.6): the left half of the access token's hash, with
/// the hash of the JWS algorithm (SHA-256 for RS256 and ES256; SHA-512 for
/// Ed25519, as OpenID's EdDSA guidance and common providers use).
pub fn token_hash(alg: IdTokenAlg, token: &str) -> String {
    let digest = match alg {
        IdTokenAlg::Rs256 | IdTokenAlg::Es256 => Sha256::digest(token.as_bytes()).to_vec(),
        IdTokenAlg::EdDsa => Sha512::digest(token.as_bytes()).to_vec(),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..digest.len() / 2])
}

/// The `sid` of a browser session in ID tokens: a digest of its id, so an ID
/// token does not carry the id that ends the session.
pub fn session_sid(session_id: &str) -> String {
    hex::encode(&Sha256::digest(format!("tally sid {session_id}").as_bytes())[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_hash_follows_the_openid_example() {
        // OpenID Connect Core 1.0, Appendix A.3 (RS256).
        assert_eq!(
            token_hash(
                IdTokenAlg::Rs256,
                "jHkWEdUXMU1BwAsC4vtUsZwnNvTIxEl0z9K3vx5KF0Y"
            ),
            "77QmUPtjPfzWtF2AnpK9RQ"
        );
    }
}
