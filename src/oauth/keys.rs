//! The keys that sign ID tokens (SPEC §10): made with RustCrypto (`rsa`,
//! `p256`, `ed25519-dalek`), published and used through the `jsonwebtoken`
//! crate (JWK, JWS), their private halves kept only sealed under
//! `TALLY_SECRET_KEY`. Key generation and signing run on the blocking pool,
//! never on the async workers.
//!
//! A key's life follows from its rows alone (they are never changed): it is
//! published from `created_at`, signs from `signs_from` until the next key of
//! its algorithm starts signing (it is then retired), and stays published
//! until every ID token it signed has expired (`ID_TOKEN_TTL` after that).

use crate::domain::{micros, now_micros};
use crate::store::{SigningKeyRow, Store, StoreError};
use base64::Engine;
use jsonwebtoken::jwk::{
    AlgorithmParameters, CommonParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm,
    OctetKeyPairParameters, OctetKeyPairType, PublicKeyUse, ThumbprintHash,
};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::SecretString;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// ID tokens live one hour (SPEC §10).
pub const ID_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// How long a new key is published before it signs, by default: long enough
/// for key sets cached by apps to learn it first.
pub const DEFAULT_PUBLISH_AHEAD: Duration = Duration::from_secs(3600);

/// How long the key rows read from the database are reused: a rotation made
/// by another process is seen within it.
const ROWS_TTL: Duration = Duration::from_secs(1);

/// The algorithms an app may choose for its ID tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdTokenAlg {
    Rs256,
    Es256,
    EdDsa,
}

impl IdTokenAlg {
    pub const ALL: [Self; 3] = [Self::Rs256, Self::Es256, Self::EdDsa];
    /// What an app that chose nothing gets.
    pub const DEFAULT: Self = Self::Rs256;

    /// The JWS `alg` name (RFC 7518 §3.1, RFC 8037 §3.1).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Rs256 => "RS256",
            Self::Es256 => "ES256",
            Self::EdDsa => "EdDSA",
        }
    }

    /// Reads an algorithm name in any letter case.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(name.trim()))
    }

    const fn jws(self) -> Algorithm {
        match self {
            Self::Rs256 => Algorithm::RS256,
            Self::Es256 => Algorithm::ES256,
            Self::EdDsa => Algorithm::EdDSA,
        }
    }

    const fn jwk(self) -> KeyAlgorithm {
        match self {
            Self::Rs256 => KeyAlgorithm::RS256,
            Self::Es256 => KeyAlgorithm::ES256,
            Self::EdDsa => KeyAlgorithm::EdDSA,
        }
    }

    fn encoding_key(self, der: &[u8]) -> EncodingKey {
        match self {
            Self::Rs256 => EncodingKey::from_rsa_der(der),
            Self::Es256 => EncodingKey::from_ec_der(der),
            Self::EdDsa => EncodingKey::from_ed_der(der),
        }
    }
}

impl std::fmt::Display for IdTokenAlg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

/// Private keys are sealed (`secret_key::Sealer`) under a key derived for
/// them alone, with the key id as associated data, so a sealed key cannot be
/// passed off as another's.
struct Sealer(crate::secret_key::Sealer);

impl Sealer {
    fn new(secret_key: &SecretString) -> Result<Self, KeyError> {
        Ok(Self(crate::secret_key::Sealer::new(
            secret_key,
            b"tally signing keys",
        )?))
    }

    fn seal(&self, kid: &str, plain: &[u8]) -> Result<String, KeyError> {
        self.0
            .seal(kid.as_bytes(), plain)
            .map_err(|e| anyhow::anyhow!("cannot seal a signing key: {e}").into())
    }

    fn open(&self, kid: &str, sealed: &str) -> Result<Vec<u8>, KeyError> {
        self.0.open(kid.as_bytes(), sealed).map_err(|_| {
            anyhow::anyhow!(
                "signing key {kid} cannot be opened: TALLY_SECRET_KEY is not the one it \
                 was sealed under (run `tally admin keys rotate --publish-ahead 0s`)"
            )
            .into()
        })
    }
}

/// A new key of `alg`: its private half in DER (PKCS#1 for RSA, PKCS#8
/// otherwise, as `jsonwebtoken` reads them) and its public JWK. Slow for RSA:
/// call it off the async workers.
fn generate(alg: IdTokenAlg) -> Result<(Vec<u8>, Jwk), KeyError> {
    use ed25519_dalek::pkcs8::EncodePrivateKey as _;
    use rsa::pkcs1::EncodeRsaPrivateKey as _;
    let fail =
        |e: &dyn std::fmt::Display| KeyError::from(anyhow::anyhow!("cannot make a key: {e}"));
    // The DER and the public parameters `jsonwebtoken` derives from it.
    let with_public = |der: &[u8], encoding_key: fn(&[u8]) -> EncodingKey| {
        let public = Jwk::from_encoding_key(&encoding_key(der), alg.jws()).map_err(|e| fail(&e))?;
        Ok::<_, KeyError>((der.to_vec(), public.algorithm))
    };
    let (der, algorithm) = match alg {
        IdTokenAlg::Rs256 => {
            let key =
                rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).map_err(|e| fail(&e))?;
            let der = key.to_pkcs1_der().map_err(|e| fail(&e))?;
            with_public(der.as_bytes(), EncodingKey::from_rsa_der)?
        }
        IdTokenAlg::Es256 => {
            let key = p256::SecretKey::random(&mut rsa::rand_core::OsRng);
            let der = p256::pkcs8::EncodePrivateKey::to_pkcs8_der(&key).map_err(|e| fail(&e))?;
            with_public(der.as_bytes(), EncodingKey::from_ec_der)?
        }
        IdTokenAlg::EdDsa => {
            let key = ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>());
            let der = key
                .to_pkcs8_der()
                .map_err(|e| fail(&e))?
                .as_bytes()
                .to_vec();
            // `Jwk::from_encoding_key` has no Ed25519 arm; RFC 8037 §2 names
            // the public key's bytes `x`.
            let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(key.verifying_key().as_bytes());
            let params = OctetKeyPairParameters {
                key_type: OctetKeyPairType::OctetKeyPair,
                curve: EllipticCurve::Ed25519,
                x,
            };
            (der, AlgorithmParameters::OctetKeyPair(params))
        }
    };
    let mut jwk = Jwk {
        common: CommonParameters::default(),
        algorithm,
    };
    // RFC 7638: the key id is the key's own thumbprint.
    let kid = jwk.thumbprint(ThumbprintHash::SHA256);
    jwk.common = CommonParameters {
        public_key_use: Some(PublicKeyUse::Signature),
        key_algorithm: Some(alg.jwk()),
        key_id: Some(kid),
        ..CommonParameters::default()
    };
    Ok((der, jwk))
}

/// A key's place in its life at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct KeyStatus {
    pub kid: String,
    pub alg: String,
    /// Seconds since the epoch.
    pub created_at: i64,
    pub signs_from: i64,
    /// When the next key of its algorithm started signing, if one has.
    pub retired_at: Option<i64>,
    /// Until when it stays in the key set, once retired.
    pub published_until: Option<i64>,
    pub published: bool,
    pub signing: bool,
}

/// The life of every key at `now` (microseconds), oldest first by algorithm.
pub fn statuses(rows: &[SigningKeyRow], now: i64) -> Vec<KeyStatus> {
    let mut all = Vec::with_capacity(rows.len());
    for alg in IdTokenAlg::ALL {
        let mut keys: Vec<&SigningKeyRow> = rows.iter().filter(|r| r.alg == alg.as_str()).collect();
        keys.sort_by(|a, b| {
            (a.signs_from, a.created_at, &a.kid).cmp(&(b.signs_from, b.created_at, &b.kid))
        });
        for (i, key) in keys.iter().enumerate() {
            let next_started = keys.get(i + 1).filter(|n| n.signs_from <= now);
            let retired_at = next_started.map(|n| n.signs_from);
            let published_until = retired_at.map(|r| r.saturating_add(micros(ID_TOKEN_TTL)));
            let signing = key.signs_from <= now && retired_at.is_none();
            all.push(KeyStatus {
                kid: key.kid.clone(),
                alg: key.alg.clone(),
                created_at: key.created_at / 1_000_000,
                signs_from: key.signs_from / 1_000_000,
                retired_at: retired_at.map(|r| r / 1_000_000),
                published_until: published_until.map(|p| p / 1_000_000),
                published: key.created_at <= now && published_until.is_none_or(|p| p > now),
                signing,
            });
        }
    }
    all
}

/// The signing keys of this deployment, as the running service uses them.
pub struct KeyRing {
    sealer: Sealer,
    rows: Mutex<Option<(Instant, Arc<Vec<SigningKeyRow>>)>>,
    opened: Mutex<HashMap<String, Arc<EncodingKey>>>,
}

impl KeyRing {
    pub fn new(secret_key: &SecretString) -> Result<Self, KeyError> {
        Ok(Self {
            sealer: Sealer::new(secret_key)?,
            rows: Mutex::new(None),
            opened: Mutex::new(HashMap::new()),
        })
    }

    /// Makes a key for each algorithm that has none yet, signing at once
    /// (the first start). Instances starting together make one each, not
    /// several: the store keeps the first.
    #[tracing::instrument(skip_all)]
    pub async fn ensure_first_keys(&self, store: &dyn Store) -> Result<(), KeyError> {
        let rows = store.signing_keys().await?;
        for alg in IdTokenAlg::ALL {
            if rows.iter().any(|r| r.alg == alg.as_str()) {
                continue;
            }
            let now = now_micros();
            let row = self.make(alg, now, now).await?;
            // Another instance may have stored its first key just before:
            // then this one is dropped.
            store.insert_signing_key(&row, true).await?;
        }
        // The rows read before may lack keys stored since, by this instance
        // or by another (even when this one stored none: another may have
        // finished between that read and the one above), so the next use
        // reads them again (this runs at start, before a rotation, and when
        // the rows lacked a key: rarely).
        self.forget_rows();
        Ok(())
    }

    /// Makes a new key of `alg` (on the blocking pool), sealed, signing from
    /// `signs_from`.
    async fn make(
        &self,
        alg: IdTokenAlg,
        created_at: i64,
        signs_from: i64,
    ) -> Result<SigningKeyRow, KeyError> {
        let (der, jwk) = tokio::task::spawn_blocking(move || generate(alg))
            .await
            .map_err(|e| anyhow::anyhow!("key generation stopped: {e}"))??;
        let kid = jwk.common.key_id.clone().unwrap_or_default();
        let public_jwk = serde_json::to_string(&jwk).map_err(anyhow::Error::from)?;
        Ok(SigningKeyRow {
            private_sealed: self.sealer.seal(&kid, &der)?,
            kid,
            alg: alg.as_str().to_owned(),
            public_jwk,
            created_at,
            signs_from,
        })
    }

    /// `tally admin keys rotate`: a new key for each of `algs`, published now
    /// and signing after `publish_ahead`.
    pub async fn rotate(
        &self,
        store: &dyn Store,
        algs: &[IdTokenAlg],
        publish_ahead: Duration,
    ) -> Result<Vec<SigningKeyRow>, KeyError> {
        let mut made = Vec::new();
        for alg in algs {
            let now = now_micros();
            let row = self
                .make(*alg, now, now.saturating_add(micros(publish_ahead)))
                .await?;
            store.insert_signing_key(&row, false).await?;
            made.push(row);
        }
        self.forget_rows();
        Ok(made)
    }

    fn forget_rows(&self) {
        if let Ok(mut rows) = self.rows.lock() {
            *rows = None;
        }
    }

    /// The key rows, read at most once a `ROWS_TTL`.
    async fn rows(&self, store: &dyn Store) -> Result<Arc<Vec<SigningKeyRow>>, KeyError> {
        if let Ok(rows) = self.rows.lock() {
            if let Some((read_at, rows)) = rows.as_ref() {
                if read_at.elapsed() < ROWS_TTL {
                    return Ok(rows.clone());
                }
            }
        }
        let fresh = Arc::new(store.signing_keys().await?);
        if let Ok(mut rows) = self.rows.lock() {
            *rows = Some((Instant::now(), fresh.clone()));
        }
        Ok(fresh)
    }

    /// The keys rows as they are now, with the first keys made if missing.
    async fn current_rows(&self, store: &dyn Store) -> Result<Arc<Vec<SigningKeyRow>>, KeyError> {
        let rows = self.rows(store).await?;
        if IdTokenAlg::ALL
            .iter()
            .all(|alg| rows.iter().any(|r| r.alg == alg.as_str()))
        {
            return Ok(rows);
        }
        self.ensure_first_keys(store).await?;
        self.rows(store).await
    }

    /// The published public keys (RFC 7517), for `/oauth/jwks`.
    pub async fn jwks(&self, store: &dyn Store) -> Result<JwkSet, KeyError> {
        let rows = self.current_rows(store).await?;
        let now = now_micros();
        let published: Vec<String> = statuses(&rows, now)
            .into_iter()
            .filter(|s| s.published)
            .map(|s| s.kid)
            .collect();
        let mut keys = Vec::new();
        for row in rows.iter().filter(|r| published.contains(&r.kid)) {
            keys.push(serde_json::from_str::<Jwk>(&row.public_jwk).map_err(anyhow::Error::from)?);
        }
        Ok(JwkSet { keys })
    }

    /// Signs `claims` as a JWS with the key of `alg` signing now, on the
    /// blocking pool.
    pub async fn sign<C>(
        &self,
        store: &dyn Store,
        alg: IdTokenAlg,
        claims: C,
    ) -> Result<String, KeyError>
    where
        C: Serialize + Send + 'static,
    {
        let rows = self.current_rows(store).await?;
        let now = now_micros();
        let status = statuses(&rows, now)
            .into_iter()
            .find(|s| s.signing && s.alg == alg.as_str())
            .ok_or_else(|| anyhow::anyhow!("no {alg} key signs now"))?;
        let row = rows
            .iter()
            .find(|r| r.kid == status.kid)
            .ok_or_else(|| anyhow::anyhow!("signing key {} vanished", status.kid))?;
        let key = self.opened_key(alg, row)?;
        let mut header = Header::new(alg.jws());
        header.kid = Some(row.kid.clone());
        tokio::task::spawn_blocking(move || jsonwebtoken::encode(&header, &claims, &key))
            .await
            .map_err(|e| anyhow::anyhow!("signing stopped: {e}"))?
            .map_err(|e| KeyError::from(anyhow::anyhow!("cannot sign: {e}")))
    }

    /// The claims of `token` when it is a JWS one of this deployment's keys
    /// signed (published or retired: the rows keep every key) with `issuer`
    /// as its `iss`; `None` for anything else. Its `exp` is not checked: an
    /// expired ID token still says whom it was issued for and to which app
    /// (RP-Initiated Logout 1.0 §2). On the blocking pool.
    pub async fn verify<C>(
        &self,
        store: &dyn Store,
        issuer: &str,
        token: &str,
    ) -> Result<Option<C>, KeyError>
    where
        C: DeserializeOwned + Send + 'static,
    {
        let Ok(header) = jsonwebtoken::decode_header(token) else {
            return Ok(None);
        };
        let Some(kid) = header.kid.as_deref() else {
            return Ok(None);
        };
        // The rows as cached: a key signs only after it was stored, and
        // every instance sees a new one within `ROWS_TTL`.
        let rows = self.rows(store).await?;
        let Some(row) = rows.iter().find(|r| r.kid == kid) else {
            return Ok(None);
        };
        let Some(alg) = IdTokenAlg::parse(&row.alg).filter(|a| a.jws() == header.alg) else {
            return Ok(None);
        };
        let jwk: Jwk = serde_json::from_str(&row.public_jwk).map_err(anyhow::Error::from)?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| anyhow::anyhow!("signing key {kid} has no usable public key: {e}"))?;
        let mut validation = Validation::new(alg.jws());
        validation.validate_exp = false;
        validation.validate_aud = false;
        validation.set_issuer(&[issuer]);
        validation.set_required_spec_claims(&["iss", "sub", "aud"]);
        let token = token.to_owned();
        let decoded = tokio::task::spawn_blocking(move || {
            jsonwebtoken::decode::<C>(&token, &key, &validation)
        })
        .await
        .map_err(|e| anyhow::anyhow!("verifying stopped: {e}"))?;
        Ok(decoded.ok().map(|data| data.claims))
    }

    /// The private key of `row`, unsealed once and then remembered.
    fn opened_key(
        &self,
        alg: IdTokenAlg,
        row: &SigningKeyRow,
    ) -> Result<Arc<EncodingKey>, KeyError> {
        if let Some(key) = self
            .opened
            .lock()
            .ok()
            .and_then(|o| o.get(&row.kid).cloned())
        {
            return Ok(key);
        }
        let der = self.sealer.open(&row.kid, &row.private_sealed)?;
        let key = Arc::new(alg.encoding_key(&der));
        if let Ok(mut opened) = self.opened.lock() {
            opened.insert(row.kid.clone(), key.clone());
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kid: &str, created_at: i64, signs_from: i64) -> SigningKeyRow {
        SigningKeyRow {
            kid: kid.to_owned(),
            alg: "RS256".to_owned(),
            public_jwk: String::new(),
            private_sealed: String::new(),
            created_at,
            signs_from,
        }
    }

    #[test]
    fn a_new_key_is_published_at_once_and_signs_after_publish_ahead() {
        let hour = micros(Duration::from_secs(3600));
        let rows = [row("old", 0, 0), row("new", 10 * hour, 11 * hour)];
        let at = |now: i64| {
            statuses(&rows, now)
                .into_iter()
                .map(|s| (s.kid, s.published, s.signing))
                .collect::<Vec<_>>()
        };
        let s = |kid: &str, p, g| (kid.to_owned(), p, g);
        // Before the rotation only the old key exists.
        assert_eq!(at(5 * hour), [s("old", true, true), s("new", false, false)]);
        // Published ahead: both in the set, the old one still signs.
        assert_eq!(at(10 * hour), [s("old", true, true), s("new", true, false)]);
        // The new one signs; the old one stays published for the ID tokens
        // it signed, until they have all expired.
        assert_eq!(at(11 * hour), [s("old", true, false), s("new", true, true)]);
        assert_eq!(
            at(12 * hour - 1),
            [s("old", true, false), s("new", true, true)]
        );
        assert_eq!(
            at(12 * hour),
            [s("old", false, false), s("new", true, true)]
        );
    }

    #[test]
    fn a_sealed_key_opens_only_under_its_secret_and_its_kid() -> Result<(), KeyError> {
        let sealer = Sealer::new(&SecretString::from("one secret"))?;
        let sealed = sealer.seal("kid1", b"private")?;
        assert_eq!(sealer.open("kid1", &sealed)?, b"private");
        assert!(sealer.open("kid2", &sealed).is_err());
        let other = Sealer::new(&SecretString::from("another secret"))?;
        assert!(other.open("kid1", &sealed).is_err());
        Ok(())
    }
}
