//! The deployment's secret key (SPEC §1, `TALLY_SECRET_KEY`). It signs the
//! session cookies and CSRF tokens, and it is never stored in the database, so
//! that a copy of the database lets no one forge a session:
//!
//! - `TALLY_SECRET_KEY` set: that key (at least 32 characters, see `config`).
//! - Unset, SQLite: the key file beside the database file (`tally.db` →
//!   `tally.db.key`), made on the first start with mode 0600 and read on every
//!   later one. It is made whole under a temporary name and linked into place,
//!   so that servers starting at once end with one key and none reads half a
//!   file. A key file that others may read (any group or other permission
//!   bit), that is not a file, or that does not hold a key stops the start. An
//!   in-memory database gets a random key for the process.
//! - Unset, PostgreSQL: the start is refused; the instances of a deployment
//!   must share one key, and the database they share must not hold it.
//!
//! A key an older version kept in the database (`server_settings`, key
//! `secret_key`) is moved out. On SQLite without `TALLY_SECRET_KEY` it is
//! written to the key file first (synced), and only then deleted from the
//! database, so a crash in between loses nothing; sessions signed under it go
//! on. On PostgreSQL without `TALLY_SECRET_KEY` the start is refused with the
//! fix (set `TALLY_SECRET_KEY` to the stored value). With `TALLY_SECRET_KEY`
//! set the row is unused (it was unused by older versions too), so it is
//! deleted. The deletion also erases the bytes the row leaves behind in the
//! database's files (see `Store::forget_server_setting`).

use crate::config::{DatabaseUrl, Settings, SECRET_KEY_MIN_CHARS};
use crate::oauth::credentials;
use crate::store::Store;
use anyhow::anyhow;
use secrecy::{ExposeSecret, SecretString};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The `server_settings` key under which older versions kept the secret key.
pub const OLD_SETTING: &str = "secret_key";

/// The one-line fix named when PostgreSQL holds an old key and none is set.
pub const POSTGRES_UPGRADE_FIX: &str = "set TALLY_SECRET_KEY on every instance to the value of \
     `SELECT value FROM server_settings WHERE key = 'secret_key'` and start again \
     (the row is then deleted, and sessions go on)";

/// The key the deployment signs with, following the rules above. Its errors
/// are one line each, for `tally serve` to print as it stops.
pub async fn resolve(settings: &Settings, store: &dyn Store) -> anyhow::Result<SecretString> {
    let old = store.server_setting(OLD_SETTING).await?;
    if let Some(key) = &settings.secret_key {
        if let Some(old) = old {
            store.forget_server_setting(OLD_SETTING).await?;
            if old == key.expose_secret() {
                tracing::info!("deleted the secret key an older version kept in the database (TALLY_SECRET_KEY holds the same key)");
            } else {
                tracing::warn!("deleted the secret key an older version kept in the database; it differed from TALLY_SECRET_KEY, the key in use");
            }
        }
        return Ok(key.clone());
    }
    let url = match &settings.database_url {
        DatabaseUrl::Sqlite(url) => url,
        DatabaseUrl::Postgres(_) => {
            return Err(match old {
                Some(_) => anyhow!(
                    "TALLY_SECRET_KEY is required on PostgreSQL, and this database holds the \
                     secret key of an older version, which must not stay there: {POSTGRES_UPGRADE_FIX}"
                ),
                None => anyhow!(
                    "TALLY_SECRET_KEY is required on PostgreSQL (every instance of the deployment \
                     sets the same one): set it to a random value of at least \
                     {SECRET_KEY_MIN_CHARS} characters, e.g. the output of `openssl rand -hex 32`"
                ),
            });
        }
    };
    let Some(path) = key_file_path(url)? else {
        return Ok(SecretString::from(credentials::random_hex(32)));
    };
    let key = match old {
        Some(old) => {
            let key = adopt(&path, old)?;
            store.forget_server_setting(OLD_SETTING).await?;
            tracing::info!(key_file = %path.display(), "moved the secret key an older version kept in the database to the key file");
            key
        }
        None => read_or_create(&path)?,
    };
    Ok(SecretString::from(key))
}

/// Seals secrets kept in the database (signing keys, TOTP seeds) with
/// AES-256-GCM under a key derived from the deployment's secret key by
/// HKDF-SHA256 (RFC 5869), with a salt naming what is sealed, and with
/// associated data naming whose it is, so a sealed value cannot be passed off
/// as another's. A copy of the database alone opens none of them.
pub struct Sealer(aes_gcm::Aes256Gcm);

const NONCE_BYTES: usize = 12;

impl Sealer {
    pub fn new(secret_key: &SecretString, salt: &[u8]) -> anyhow::Result<Self> {
        use aes_gcm::KeyInit as _;
        let hkdf =
            hkdf::Hkdf::<sha2::Sha256>::new(Some(salt), secret_key.expose_secret().as_bytes());
        let mut key = [0u8; 32];
        hkdf.expand(b"aes-256-gcm", &mut key)
            .map_err(|e| anyhow!("cannot derive the sealing key: {e}"))?;
        Ok(Self(aes_gcm::Aes256Gcm::new(aes_gcm::Key::<
            aes_gcm::Aes256Gcm,
        >::from_slice(&key))))
    }

    /// `plain` sealed, as hex: the nonce, then the ciphertext and its tag.
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> anyhow::Result<String> {
        use aes_gcm::aead::{Aead as _, Payload};
        let nonce: [u8; NONCE_BYTES] = rand::random();
        let mut sealed = nonce.to_vec();
        sealed.extend(
            self.0
                .encrypt(
                    aes_gcm::Nonce::from_slice(&nonce),
                    Payload { msg: plain, aad },
                )
                .map_err(|e| anyhow!("cannot seal: {e}"))?,
        );
        Ok(hex::encode(sealed))
    }

    /// What `seal` sealed with the same `aad`, under the same secret key.
    pub fn open(&self, aad: &[u8], sealed: &str) -> anyhow::Result<Vec<u8>> {
        use aes_gcm::aead::{Aead as _, Payload};
        let sealed = hex::decode(sealed)
            .ok()
            .filter(|s| s.len() > NONCE_BYTES)
            .ok_or_else(|| anyhow!("not sealed as expected"))?;
        let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
        self.0
            .decrypt(
                aes_gcm::Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .map_err(|_| anyhow!("cannot be opened under this TALLY_SECRET_KEY"))
    }
}

/// The key file of the SQLite database `url` names (its path plus `.key`), or
/// `None` for an in-memory database.
pub fn key_file_path(url: &str) -> anyhow::Result<Option<PathBuf>> {
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
        .map_err(|e| anyhow!("TALLY_DATABASE_URL: not an SQLite URL ({e})"))?;
    // As sqlx reads the URL: `:memory:` as the database, or `mode=memory`.
    let rest = url.trim().trim_start_matches("sqlite:");
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (database, parameters) = rest.split_once('?').unwrap_or((rest, ""));
    let in_memory = database == ":memory:"
        || url::form_urlencoded::parse(parameters.as_bytes())
            .any(|(name, value)| name == "mode" && value == "memory");
    if in_memory {
        return Ok(None);
    }
    let mut path = options.get_filename().as_os_str().to_owned();
    path.push(".key");
    Ok(Some(PathBuf::from(path)))
}

/// The key in the key file, made with a new random key if there is none.
fn read_or_create(path: &Path) -> anyhow::Result<String> {
    if let Some(key) = read(path)? {
        return Ok(key);
    }
    let made = credentials::random_hex(32);
    if write_new(path, &made)? {
        tracing::info!(key_file = %path.display(), "made a new secret key; back this file up with the database");
        return Ok(made);
    }
    // Another server made it first: its key is the one.
    read(path)?.ok_or_else(|| anyhow!("the key file {} vanished as it was made", path.display()))
}

/// Writes the key `old` (found in the database) to the key file, or checks
/// that the key file already holds it (a start that stopped after writing the
/// file and before deleting the row).
fn adopt(path: &Path, old: String) -> anyhow::Result<String> {
    check_key(&old).map_err(|problem| {
        anyhow!(
            "the secret key an older version kept in the database {problem}: \
             set TALLY_SECRET_KEY instead, or delete the row \
             (DELETE FROM server_settings WHERE key = 'secret_key') to make a new key, \
             which signs everyone out"
        )
    })?;
    if !write_new(path, &old)? {
        let existing = read(path)?.unwrap_or_default();
        if existing != old {
            return Err(anyhow!(
                "the key file {} and the database (the secret key an older version kept there) \
                 hold different keys: keep the one in use in the key file, then delete the row \
                 (DELETE FROM server_settings WHERE key = 'secret_key')",
                path.display()
            ));
        }
    }
    Ok(old)
}

/// The key the key file holds, `None` when there is no key file.
fn read(path: &Path) -> anyhow::Result<Option<String>> {
    let shown = path.display();
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("cannot read the key file {shown}: {e}")),
    };
    if !metadata.is_file() {
        return Err(anyhow!(
            "the key file {shown} is not a file: it must hold the secret key"
        ));
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(anyhow!(
            "the key file {shown} may be used by other users (mode {mode:03o}): \
             make it its owner's alone (chmod 600 {shown})"
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("cannot read the key file {shown}: {e}"))?;
    let key = text.trim();
    check_key(key).map_err(|problem| {
        anyhow!(
            "the key file {shown} {problem}: restore it from the backup made with the database \
             (a new key signs everyone out)"
        )
    })?;
    Ok(Some(key.to_owned()))
}

/// Why `key` cannot be a secret key, if it cannot.
fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("is empty".to_owned());
    }
    if key.len() < SECRET_KEY_MIN_CHARS {
        return Err(format!(
            "holds a key shorter than {SECRET_KEY_MIN_CHARS} characters"
        ));
    }
    if key.chars().any(char::is_control) {
        return Err("holds a key with control characters".to_owned());
    }
    Ok(())
}

/// Makes the key file holding `key`, unless one exists (then `false`): the
/// key is written and synced under a temporary name in the same directory,
/// with mode 0600 from its creation, then linked to the key file's name (which
/// fails if that exists), and the directory synced.
fn write_new(path: &Path, key: &str) -> anyhow::Result<bool> {
    let shown = path.display();
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = directory.join(format!(".{name}.{}.tmp", credentials::random_hex(8)));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(format!("{key}\n").as_bytes())?;
        file.sync_all()
    })();
    let linked = written.and_then(|()| std::fs::hard_link(&temporary, path));
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => {
            std::fs::File::open(directory)
                .and_then(|d| d.sync_all())
                .map_err(|e| anyhow!("cannot sync the directory of the key file {shown}: {e}"))?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(anyhow!("cannot make the key file {shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_file_is_the_database_file_plus_key_and_memory_has_none() -> anyhow::Result<()> {
        for (url, file) in [
            ("sqlite://tally.db", Some("tally.db.key")),
            ("sqlite:tally.db", Some("tally.db.key")),
            (
                "sqlite:///var/lib/tally/t.db",
                Some("/var/lib/tally/t.db.key"),
            ),
            ("sqlite://data/t.db?mode=rwc", Some("data/t.db.key")),
            ("sqlite::memory:", None),
            ("sqlite://t.db?mode=memory", None),
            ("sqlite://:memory:", None),
        ] {
            let path = key_file_path(url)?;
            assert_eq!(path.as_deref(), file.map(Path::new), "{url}");
        }
        Ok(())
    }
}
