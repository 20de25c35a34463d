//! Typed settings read from the environment. Nothing reads the environment after
//! start-up: `Settings` is built once and passed down, and tests build their own.

use secrecy::SecretString;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;
use url::Url;

/// Which database a deployment runs on, with the URL as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite(String),
    Postgres(String),
}

impl DatabaseUrl {
    pub fn parse(input: &str) -> Result<Self, String> {
        let url = input.trim();
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite(url.to_owned()))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Url::parse(url).map_err(|e| format!("not a valid PostgreSQL URL ({e})"))?;
            Ok(Self::Postgres(url.to_owned()))
        } else {
            Err("must start with sqlite:// or postgres://".to_owned())
        }
    }
}

/// The shortest `TALLY_SECRET_KEY` (or key file) taken.
pub const SECRET_KEY_MIN_CHARS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeveloperSignup {
    Open,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How long after its headers a request's body must have arrived whole
/// (SPEC §9); `Settings::body_deadline`, which tests shorten.
pub const BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: DatabaseUrl,
    pub listen: SocketAddr,
    /// The origin clients see; `None` means `http(s)://` + the bound address.
    pub public_url: Option<Url>,
    pub tls: Option<TlsFiles>,
    /// When unset: on SQLite the key file beside the database, made on the
    /// first start; on PostgreSQL the start is refused (see `secret_key.rs`).
    pub secret_key: Option<SecretString>,
    pub settlement_delay: Duration,
    pub unclaimed_expiry: Duration,
    pub developer_signup: DeveloperSignup,
    pub log_filter: String,
    pub log_format: LogFormat,
    /// REST API requests a minute per token.
    pub api_rate_limit: NonZeroU32,
    /// OAuth endpoint requests a minute per client IP.
    pub oauth_rate_limit: NonZeroU32,
    /// Sign-ups a minute per client IP.
    pub signup_rate_limit: NonZeroU32,
    /// Password checks and hashes that may wait at once (queued or being
    /// hashed); `None`: 16 for each hashing thread.
    pub password_queue: Option<usize>,
    /// API requests a minute per client IP whose token is unknown, malformed
    /// or dead.
    pub bad_token_rate_limit: NonZeroU32,
    /// How verification links are sent: `None` writes them to the log.
    pub smtp: Option<SmtpSettings>,
    /// A payment from the account page over this many cents needs a second
    /// factor used within `step_up_window` (SPEC §11, `TALLY_STEP_UP_AMOUNT`).
    pub step_up_amount_cents: i64,
    /// How long a second factor used in a session vouches for its sensitive
    /// actions (`TALLY_STEP_UP_WINDOW`, default 5m).
    pub step_up_window: Duration,
    /// Webhook endpoints may use `http` and resolve to loopback or private
    /// addresses (`TALLY_WEBHOOK_ALLOW_PRIVATE`; local development and tests
    /// only, SPEC §12).
    pub webhook_allow_private: bool,
    /// How long a request's body may take to arrive after its headers:
    /// always `BODY_DEADLINE` (no variable sets it); tests shorten it.
    #[doc(hidden)]
    pub body_deadline: Duration,
}

/// An SMTP server to send mail through (`TALLY_SMTP_URL`, `TALLY_MAIL_FROM`).
#[derive(Debug, Clone)]
pub struct SmtpSettings {
    /// e.g. `smtps://user:password@mail.example.com` or
    /// `smtp://mail.example.com:587?tls=required` (lettre's URL form).
    pub url: SecretString,
    pub from: lettre::message::Mailbox,
}

/// A setting whose value cannot be used. Displays as one line naming it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid setting {setting}: {problem}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub problem: String,
}

/// The setting that names an optional file of further settings.
pub const CONFIG_FILE_SETTING: &str = "TALLY_CONFIG";

impl Settings {
    /// Settings from the environment and, when `TALLY_CONFIG` names one, a file
    /// of `NAME=value` lines (dotenv syntax); the environment wins over the file.
    pub fn from_env() -> Result<Self, ConfigError> {
        let file = match std::env::var(CONFIG_FILE_SETTING) {
            Ok(path) if !path.trim().is_empty() => read_config_file(Path::new(path.trim()))?,
            _ => HashMap::new(),
        };
        Self::from_env_and_file(|name| std::env::var(name).ok(), &file)
    }

    /// Settings from a lookup (the environment) over the values of a config
    /// file. A name in the file that no setting reads is refused, so a typo does
    /// not go unnoticed.
    pub fn from_env_and_file(
        lookup: impl Fn(&str) -> Option<String>,
        file: &HashMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let read = RefCell::new(HashSet::new());
        let settings = Self::from_lookup(|name| {
            read.borrow_mut().insert(name.to_owned());
            lookup(name)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| file.get(name).cloned())
        })?;
        let read = read.into_inner();
        let mut unknown: Vec<&String> = file.keys().filter(|k| !read.contains(*k)).collect();
        unknown.sort();
        if let Some(name) = unknown.first() {
            return Err(ConfigError {
                setting: CONFIG_FILE_SETTING,
                problem: format!("{name} is not a setting of Tally"),
            });
        }
        Ok(settings)
    }

    /// Builds settings from any source of `TALLY_*` variables.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let bad = |setting: &'static str, problem: String| ConfigError { setting, problem };

        let database_url = DatabaseUrl::parse(
            &get("TALLY_DATABASE_URL").unwrap_or_else(|| "sqlite://tally.db".to_owned()),
        )
        .map_err(|p| bad("TALLY_DATABASE_URL", p))?;

        let listen_text = get("TALLY_LISTEN").unwrap_or_else(|| "127.0.0.1:8080".to_owned());
        let listen: SocketAddr = listen_text.trim().parse().map_err(|_| {
            bad(
                "TALLY_LISTEN",
                format!("'{listen_text}' is not an address such as 127.0.0.1:8080"),
            )
        })?;

        let tls = match (get("TALLY_TLS_CERT"), get("TALLY_TLS_KEY")) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: existing_file("TALLY_TLS_CERT", &cert)?,
                key: existing_file("TALLY_TLS_KEY", &key)?,
            }),
            (Some(_), None) => {
                return Err(bad(
                    "TALLY_TLS_KEY",
                    "must be set with TALLY_TLS_CERT".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(bad(
                    "TALLY_TLS_CERT",
                    "must be set with TALLY_TLS_KEY".into(),
                ))
            }
        };

        let public_url = get("TALLY_PUBLIC_URL")
            .map(|text| parse_public_url(&text).map_err(|p| bad("TALLY_PUBLIC_URL", p)))
            .transpose()?;

        let secret_key = match get("TALLY_SECRET_KEY") {
            Some(key) if key.len() < SECRET_KEY_MIN_CHARS => {
                return Err(bad(
                    "TALLY_SECRET_KEY",
                    format!("must be at least {SECRET_KEY_MIN_CHARS} characters long"),
                ))
            }
            Some(key) => Some(SecretString::from(key)),
            None => None,
        };

        let settlement_delay = duration(&get, "TALLY_SETTLEMENT_DELAY", "0s")?;
        let unclaimed_expiry = duration(&get, "TALLY_UNCLAIMED_EXPIRY", "30d")?;
        if unclaimed_expiry.is_zero() {
            return Err(bad(
                "TALLY_UNCLAIMED_EXPIRY",
                "must be longer than 0s".into(),
            ));
        }

        let developer_signup = match get("TALLY_DEVELOPER_SIGNUP")
            .unwrap_or_else(|| "open".to_owned())
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "open" => DeveloperSignup::Open,
            "closed" => DeveloperSignup::Closed,
            other => {
                return Err(bad(
                    "TALLY_DEVELOPER_SIGNUP",
                    format!("'{other}' is neither 'open' nor 'closed'"),
                ))
            }
        };

        let log_filter = get("TALLY_LOG").unwrap_or_else(|| "info".to_owned());
        tracing_subscriber::EnvFilter::try_new(&log_filter).map_err(|e| {
            bad(
                "TALLY_LOG",
                format!("'{log_filter}' is not a log filter ({e})"),
            )
        })?;
        let log_format = match get("TALLY_LOG_FORMAT").as_deref().map(str::trim) {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(bad(
                    "TALLY_LOG_FORMAT",
                    format!("'{other}' is neither 'text' nor 'json'"),
                ))
            }
        };

        let api_rate_limit = per_minute(&get, "TALLY_API_RATE_LIMIT", 600)?;
        let oauth_rate_limit = per_minute(&get, "TALLY_OAUTH_RATE_LIMIT", 300)?;
        let signup_rate_limit = per_minute(&get, "TALLY_SIGNUP_RATE_LIMIT", 10)?;
        let password_queue = match get("TALLY_PASSWORD_QUEUE") {
            None => None,
            Some(text) => Some(
                text.trim()
                    .parse::<NonZeroU32>()
                    .map(|n| n.get() as usize)
                    .map_err(|_| {
                        bad(
                            "TALLY_PASSWORD_QUEUE",
                            format!("'{text}' is not a positive number of passwords"),
                        )
                    })?,
            ),
        };
        let bad_token_rate_limit = per_minute(&get, "TALLY_BAD_TOKEN_RATE_LIMIT", 60)?;

        let smtp = smtp_settings(&get)?;

        let step_up_text = get("TALLY_STEP_UP_AMOUNT").unwrap_or_else(|| "100.00".to_owned());
        let step_up_amount_cents = crate::domain::Amount::parse_positive(step_up_text.trim())
            .map(crate::domain::Amount::cents)
            .map_err(|e| {
                bad(
                    "TALLY_STEP_UP_AMOUNT",
                    format!("'{step_up_text}' is not an amount in dollars such as 100.00 ({e})"),
                )
            })?;
        let step_up_window = duration(&get, "TALLY_STEP_UP_WINDOW", "5m")?;
        let webhook_allow_private = match get("TALLY_WEBHOOK_ALLOW_PRIVATE")
            .unwrap_or_else(|| "false".to_owned())
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "false" | "" => false,
            "true" => true,
            other => {
                return Err(bad(
                    "TALLY_WEBHOOK_ALLOW_PRIVATE",
                    format!("'{other}' is neither 'true' nor 'false'"),
                ))
            }
        };

        Ok(Self {
            database_url,
            listen,
            public_url,
            tls,
            secret_key,
            settlement_delay,
            unclaimed_expiry,
            developer_signup,
            log_filter,
            log_format,
            api_rate_limit,
            oauth_rate_limit,
            signup_rate_limit,
            password_queue,
            bad_token_rate_limit,
            smtp,
            step_up_amount_cents,
            step_up_window,
            webhook_allow_private,
            body_deadline: BODY_DEADLINE,
        })
    }

    /// The origin clients see, without a trailing slash, for a server bound to
    /// `bound` (which differs from `listen` when the port is 0).
    pub fn public_origin(&self, bound: SocketAddr) -> String {
        match &self.public_url {
            Some(url) => url.as_str().trim_end_matches('/').to_owned(),
            None => {
                let scheme = if self.tls.is_some() { "https" } else { "http" };
                format!("{scheme}://{bound}")
            }
        }
    }
}

fn smtp_settings(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<SmtpSettings>, ConfigError> {
    use lettre::{AsyncSmtpTransport, Tokio1Executor};
    let bad = |setting: &'static str, problem: String| ConfigError { setting, problem };
    let from = get("TALLY_MAIL_FROM");
    let Some(url) = get("TALLY_SMTP_URL") else {
        return match from {
            Some(_) => Err(bad(
                "TALLY_MAIL_FROM",
                "is used only with TALLY_SMTP_URL".into(),
            )),
            None => Ok(None),
        };
    };
    // The URL may hold a password: it is never echoed back.
    AsyncSmtpTransport::<Tokio1Executor>::from_url(url.trim()).map_err(|_| {
        bad(
            "TALLY_SMTP_URL",
            "is not an SMTP URL such as smtps://user:password@mail.example.com".into(),
        )
    })?;
    let from = from.ok_or_else(|| {
        bad(
            "TALLY_MAIL_FROM",
            "must be set with TALLY_SMTP_URL, e.g. 'Tally <no-reply@example.com>'".into(),
        )
    })?;
    let from = from
        .trim()
        .parse::<lettre::message::Mailbox>()
        .map_err(|e| {
            bad(
                "TALLY_MAIL_FROM",
                format!("'{from}' is not an address such as 'Tally <no-reply@example.com>' ({e})"),
            )
        })?;
    Ok(Some(SmtpSettings {
        url: SecretString::from(url.trim().to_owned()),
        from,
    }))
}

fn parse_public_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text.trim()).map_err(|e| format!("'{text}' is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("'{text}' must be an http:// or https:// URL"));
    }
    if url.query().is_some() || url.fragment().is_some() || url.path() != "/" {
        return Err(format!("'{text}' must be an origin, without path or query"));
    }
    Ok(url)
}

fn existing_file(setting: &'static str, path: &str) -> Result<PathBuf, ConfigError> {
    let path = PathBuf::from(path.trim());
    if path.is_file() {
        Ok(path)
    } else {
        Err(ConfigError {
            setting,
            problem: format!("'{}' is not a readable file", path.display()),
        })
    }
}

fn per_minute(
    get: &impl Fn(&str) -> Option<String>,
    setting: &'static str,
    default: u32,
) -> Result<NonZeroU32, ConfigError> {
    match get(setting) {
        None => Ok(NonZeroU32::new(default).unwrap_or(NonZeroU32::MIN)),
        Some(text) => text.trim().parse::<NonZeroU32>().map_err(|_| ConfigError {
            setting,
            problem: format!("'{text}' is not a positive number of requests a minute"),
        }),
    }
}

fn duration(
    get: &impl Fn(&str) -> Option<String>,
    setting: &'static str,
    default: &str,
) -> Result<Duration, ConfigError> {
    let text = get(setting).unwrap_or_else(|| default.to_owned());
    humantime::parse_duration(text.trim()).map_err(|e| ConfigError {
        setting,
        problem: format!("'{text}' is not a duration such as 30s, 5m or 30d ({e})"),
    })
}

/// Reads a config file of `NAME=value` lines (dotenv syntax: comments, quotes).
fn read_config_file(path: &Path) -> Result<HashMap<String, String>, ConfigError> {
    let bad = |problem: String| ConfigError {
        setting: CONFIG_FILE_SETTING,
        problem,
    };
    let entries = dotenvy::from_path_iter(path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    entries
        .map(|entry| entry.map_err(|e| bad(format!("{}: {e}", path.display()))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_match_the_contract() -> Result<(), ConfigError> {
        let s = settings(&[])?;
        assert_eq!(
            s.database_url,
            DatabaseUrl::Sqlite("sqlite://tally.db".into())
        );
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.public_origin(s.listen), "http://127.0.0.1:8080");
        assert_eq!(s.settlement_delay, Duration::ZERO);
        assert_eq!(s.unclaimed_expiry, Duration::from_secs(30 * 86_400));
        assert_eq!(s.body_deadline, Duration::from_secs(10));
        assert_eq!(s.developer_signup, DeveloperSignup::Open);
        assert!(s.smtp.is_none());
        Ok(())
    }

    #[test]
    fn smtp_needs_a_url_and_a_sender_and_never_echoes_the_password() -> Result<(), ConfigError> {
        let s = settings(&[
            ("TALLY_SMTP_URL", "smtp://user:pw@127.0.0.1:2525"),
            ("TALLY_MAIL_FROM", "Tally <no-reply@example.com>"),
        ])?;
        let smtp = s.smtp.ok_or_else(|| ConfigError {
            setting: "TALLY_SMTP_URL",
            problem: "was not read".into(),
        })?;
        assert_eq!(smtp.from.email.to_string(), "no-reply@example.com");
        let line = settings(&[("TALLY_SMTP_URL", "smtp://user:pw@127.0.0.1:2525")])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(line.contains("TALLY_MAIL_FROM"), "{line}");
        let line = settings(&[
            ("TALLY_SMTP_URL", "ftp://user:secretpw@host"),
            ("TALLY_MAIL_FROM", "a@example.com"),
        ])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            line.contains("TALLY_SMTP_URL") && !line.contains("secretpw"),
            "{line}"
        );
        Ok(())
    }

    #[test]
    fn each_bad_value_names_its_setting() {
        for (name, value) in [
            ("TALLY_DATABASE_URL", "mysql://x"),
            ("TALLY_LISTEN", "localhost"),
            ("TALLY_PUBLIC_URL", "ftp://x"),
            ("TALLY_PUBLIC_URL", "https://x.org/base"),
            ("TALLY_SECRET_KEY", "short"),
            ("TALLY_SETTLEMENT_DELAY", "soon"),
            ("TALLY_UNCLAIMED_EXPIRY", "-1d"),
            ("TALLY_DEVELOPER_SIGNUP", "maybe"),
            ("TALLY_LOG_FORMAT", "xml"),
            ("TALLY_API_RATE_LIMIT", "0"),
            ("TALLY_OAUTH_RATE_LIMIT", "lots"),
            ("TALLY_BAD_TOKEN_RATE_LIMIT", "0"),
            ("TALLY_TLS_CERT", "/nonexistent.pem"),
            ("TALLY_SMTP_URL", "mail.example.com"),
            ("TALLY_MAIL_FROM", "tally@example.com"),
        ] {
            let err = settings(&[(name, value)]).err();
            let line = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(line.contains(name), "{name}={value}: {line}");
            assert!(!line.contains('\n'));
        }
    }
}
