//! Second factors without actix (SPEC §11): the authenticator app (TOTP, RFC
//! 6238, through `totp-rs`), its seed sealed under `TALLY_SECRET_KEY`, the QR
//! code of its `otpauth://` URI drawn as SVG (`qrcode`), recovery codes (kept
//! as digests), what a typed code proves, and the RFC 8176 methods (`amr`) a
//! sign-in used.

use super::throttle::{confirm_second_factor, Attempt, Confirmation};
use crate::domain::now_micros;
use crate::oauth::credentials;
use crate::secret_key::Sealer;
use crate::store::{Factors, Store, StoreError};
use secrecy::SecretString;
use std::net::IpAddr;
use totp_rs::{Algorithm, Builder, Totp};

/// The issuer an authenticator app shows beside the account.
const ISSUER: &str = "Tally";
/// RFC 6238 §5.2's step, and the seed's size (RFC 4226 §4 recommends 160 bits).
const STEP_SECS: u64 = 30;
const SEED_BYTES: usize = 20;
/// Recovery codes shown when the first factor is added (and when renewed).
pub const RECOVERY_CODES: usize = 10;
/// Each recovery code: 16 letters and digits of RFC 4648's base32 alphabet
/// (80 bits), shown in groups of four.
const RECOVERY_CODE_CHARS: usize = 16;
const RECOVERY_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// The sealer of TOTP seeds: its own derived key, the user id as associated
/// data, so a seed cannot be moved to another account.
fn sealer(secret_key: &SecretString) -> anyhow::Result<Sealer> {
    Sealer::new(secret_key, b"tally totp seeds")
}

/// A new seed, sealed for `user_id`, and its base32 text (shown once, at
/// set-up).
pub fn new_seed(secret_key: &SecretString, user_id: &str) -> anyhow::Result<(String, Vec<u8>)> {
    let seed: [u8; SEED_BYTES] = rand::random();
    let sealed = sealer(secret_key)?.seal(user_id.as_bytes(), &seed)?;
    Ok((sealed, seed.to_vec()))
}

/// The seed sealed for `user_id`.
pub fn open_seed(
    secret_key: &SecretString,
    user_id: &str,
    sealed: &str,
) -> anyhow::Result<Vec<u8>> {
    sealer(secret_key)?.open(user_id.as_bytes(), sealed)
}

/// The RFC 6238 generator of a seed: SHA-1, 6 digits, 30-second steps, one
/// step of drift either way.
pub fn totp(seed: &[u8], username: &str) -> anyhow::Result<Totp> {
    Builder::new()
        .with_algorithm(Algorithm::SHA1)
        .with_digits(6)
        .with_skew(1)
        .with_step_duration(STEP_SECS)
        .with_secret(seed.to_vec())
        .with_account_name(username.replace(':', ""))
        .with_issuer(Some(ISSUER))
        .build()
        .map_err(|e| anyhow::anyhow!("cannot make the TOTP generator: {e}"))
}

/// What the set-up page shows: the secret as base32 text, the `otpauth://`
/// URI, and that URI as an SVG QR code.
pub struct TotpSetup {
    pub secret_base32: String,
    pub uri: String,
    pub qr_svg: String,
}

pub fn setup(seed: &[u8], username: &str) -> anyhow::Result<TotpSetup> {
    let totp = totp(seed, username)?;
    let uri = totp
        .to_url()
        .map_err(|e| anyhow::anyhow!("cannot write the otpauth URI: {e}"))?;
    let code = qrcode::QrCode::new(uri.as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot draw the QR code: {e}"))?;
    let qr_svg = code
        .render::<qrcode::render::svg::Color<'_>>()
        .min_dimensions(200, 200)
        .dark_color(qrcode::render::svg::Color("#000000"))
        .light_color(qrcode::render::svg::Color("#ffffff"))
        .build();
    Ok(TotpSetup {
        secret_base32: totp.secret().to_base32(),
        uri,
        qr_svg,
    })
}

/// The step whose code `code` is, within the drift allowed around now.
pub fn step_of(totp: &Totp, code: &str) -> Option<i64> {
    let now = u64::try_from(now_micros() / 1_000_000).unwrap_or(0);
    totp.check(code, now)
        .and_then(|step| i64::try_from(step).ok())
}

/// New recovery codes: as shown (`XXXX-XXXX-XXXX-XXXX`) and as stored.
pub fn new_recovery_codes() -> (Vec<String>, Vec<String>) {
    use rand::Rng as _;
    let mut rng = rand::rng();
    let shown: Vec<String> = (0..RECOVERY_CODES)
        .map(|_| {
            let chars: String = (0..RECOVERY_CODE_CHARS)
                .map(|_| {
                    char::from(RECOVERY_ALPHABET[rng.random_range(0..RECOVERY_ALPHABET.len())])
                })
                .collect();
            chars
                .as_bytes()
                .chunks(4)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
                .join("-")
        })
        .collect();
    let digests = shown
        .iter()
        .filter_map(|code| recovery_digest(code))
        .collect();
    (shown, digests)
}

/// The digest of a typed recovery code (any letter case, with or without
/// dashes and spaces); `None` when it cannot be one.
pub fn recovery_digest(typed: &str) -> Option<String> {
    let plain: String = typed
        .chars()
        .filter(|c| !matches!(c, '-' | ' '))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (plain.len() == RECOVERY_CODE_CHARS && plain.bytes().all(|b| RECOVERY_ALPHABET.contains(&b)))
        .then(|| credentials::digest(&format!("tly_recovery_{plain}")))
}

/// What a typed code was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeKind {
    Totp,
    Recovery,
}

/// What checking a typed code gave.
#[derive(Debug, PartialEq, Eq)]
pub enum CodeCheck {
    Accepted(CodeKind),
    Refused,
    /// Too many failures lately from this address: nothing was checked.
    Wait(std::time::Duration),
}

/// Checks a code typed as a second factor (an authenticator app's code, or
/// a recovery code), under the second-factor throttle of the (user, client
/// IP) pair. A code is spent when accepted: a TOTP code's step (and every
/// earlier one), a recovery code itself.
pub async fn check_code(
    store: &dyn Store,
    secret_key: &SecretString,
    user_id: &str,
    username: &str,
    factors: &Factors,
    typed: &str,
    ip: IpAddr,
) -> Result<CodeCheck, StoreError> {
    let typed: String = typed.chars().filter(|c| !c.is_whitespace()).collect();
    let mut kind = None;
    let check = async {
        if typed.len() == 6 && typed.bytes().all(|b| b.is_ascii_digit()) {
            let Some(row) = factors.totp.as_ref().filter(|t| t.confirmed_at.is_some()) else {
                return Ok(false);
            };
            let seed = open_seed(secret_key, user_id, &row.secret_sealed)?;
            let Some(step) = step_of(&totp(&seed, username)?, &typed) else {
                return Ok(false);
            };
            let used = store.use_totp_step(user_id, step).await?;
            if used {
                kind = Some(CodeKind::Totp);
            }
            return Ok(used);
        }
        let Some(digest) = recovery_digest(&typed) else {
            return Ok(false);
        };
        let used = store
            .use_recovery_code(user_id, &digest, now_micros())
            .await?;
        if used {
            kind = Some(CodeKind::Recovery);
        }
        Ok::<bool, CheckError>(used)
    };
    let attempt = Attempt::second_factor(user_id, ip);
    let confirmation = confirm_second_factor(store, &attempt, async {
        check.await.map_err(|e: CheckError| match e {
            CheckError::Store(e) => e,
            CheckError::Unexpected(e) => StoreError::from(e),
        })
    })
    .await?;
    Ok(match confirmation {
        Confirmation::Confirmed => kind.map_or(CodeCheck::Refused, CodeCheck::Accepted),
        Confirmation::Wait(wait) => CodeCheck::Wait(wait),
        Confirmation::Refused | Confirmation::Busy => CodeCheck::Refused,
    })
}

#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

/// How a passkey was used, for `amr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasskeyUse {
    /// A key that may be synced (backup eligible): `swk`, else `hwk`.
    pub synced: bool,
    /// The authenticator verified the user (PIN, biometrics): `user`.
    pub user_verified: bool,
}

/// The RFC 8176 methods of a sign-in (SPEC §11): `pwd` for the password,
/// `otp` for an app's or a recovery code, `hwk`/`swk` for a passkey with
/// `user` when it verified the user, and `mfa` when two kinds were used or a
/// passkey verified the user. Space-separated, as stored with a grant.
pub fn amr(password: bool, code: bool, passkey: Option<PasskeyUse>) -> String {
    let mut methods = Vec::new();
    if password {
        methods.push("pwd");
    }
    if code {
        methods.push("otp");
    }
    if let Some(passkey) = passkey {
        methods.push(if passkey.synced { "swk" } else { "hwk" });
        if passkey.user_verified {
            methods.push("user");
        }
    }
    let kinds = usize::from(password) + usize::from(code) + usize::from(passkey.is_some());
    if kinds >= 2 || passkey.is_some_and(|p| p.user_verified) {
        methods.push("mfa");
    }
    methods.join(" ")
}

/// Whether `amr` (space-separated) says a second factor was used.
pub fn is_multi_factor(amr: &str) -> bool {
    amr.split(' ').any(|m| m == "mfa")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amr_names_each_method_and_mfa_when_two_kinds_or_a_verifying_passkey() {
        assert_eq!(amr(true, false, None), "pwd");
        assert_eq!(amr(true, true, None), "pwd otp mfa");
        let hwk = PasskeyUse {
            synced: false,
            user_verified: true,
        };
        assert_eq!(amr(false, false, Some(hwk)), "hwk user mfa");
        assert_eq!(
            amr(
                true,
                false,
                Some(PasskeyUse {
                    synced: true,
                    user_verified: false
                })
            ),
            "pwd swk mfa"
        );
    }

    #[test]
    fn recovery_codes_are_read_in_any_case_with_or_without_dashes() {
        let (shown, digests) = new_recovery_codes();
        assert_eq!(shown.len(), RECOVERY_CODES);
        assert_eq!(digests.len(), RECOVERY_CODES);
        let typed = shown[0].replace('-', " ").to_lowercase();
        assert_eq!(
            recovery_digest(&typed).as_deref(),
            Some(digests[0].as_str())
        );
        assert_eq!(recovery_digest("123456"), None);
    }
}
