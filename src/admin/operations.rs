//! The operator commands behind `tally admin …`. Each parses its input into
//! domain types, acts, and returns a value that prints as one JSON object.

use crate::accounts::{self, CreateAccountError, NewAccount};
use crate::auth::password::{PasswordHasher, Requester};
use crate::domain::{now_micros, Amount, Email, Money, Password, Phone, Username};
use crate::ledger;
use crate::oauth::clients::{self, AppDetails};
use crate::oauth::keys::IdTokenAlg;
use crate::store::{Store, StoreError, User, UserFlags, UserKey};
use secrecy::ExposeSecret;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The input is unusable; the message says which part and why.
    #[error("{0}")]
    Invalid(String),
    #[error("no such user: {0}")]
    UnknownUser(String),
    #[error("no such app: {0}")]
    UnknownApp(String),
    #[error("{0}")]
    Conflict(String),
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl AdminError {
    /// A stable code for `--json` output.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_request",
            Self::UnknownUser(_) | Self::UnknownApp(_) => "not_found",
            Self::Conflict(_) => "conflict",
            Self::Unavailable(_) => "unavailable",
            Self::Unexpected(_) => "internal_error",
        }
    }
}

impl From<StoreError> for AdminError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Conflict(field) => Self::Conflict(format!("{field} is already taken")),
            StoreError::NotFound(what) => Self::Invalid(format!("no such {what}")),
            StoreError::Unsupported(instead) => Self::Invalid(instead.to_owned()),
            StoreError::Unavailable(e) => Self::Unavailable(e.to_string()),
            StoreError::Unexpected(e) => Self::Unexpected(e),
        }
    }
}

fn invalid(error: impl std::fmt::Display) -> AdminError {
    AdminError::Invalid(error.to_string())
}

// The input of `admin user add`, as given on the command line. (A `//`
// comment: clap would show a doc comment as the command's help.)
#[derive(Debug, Default, Clone, clap::Args)]
pub struct UserAdd {
    #[arg(long)]
    pub username: String,
    #[arg(long)]
    pub password: String,
    #[arg(long)]
    pub first_name: Option<String>,
    #[arg(long)]
    pub last_name: Option<String>,
    #[arg(long)]
    pub email: Option<String>,
    #[arg(long)]
    pub phone: Option<String>,
    #[arg(long)]
    pub about: Option<String>,
    /// Mark the account, its e-mail and its phone verified.
    #[arg(long)]
    pub verified: bool,
}

#[derive(Debug, Serialize)]
pub struct UserCreated {
    pub id: String,
    pub username: String,
}

pub async fn user_add(
    store: &dyn Store,
    hasher: &PasswordHasher,
    input: UserAdd,
) -> Result<UserCreated, AdminError> {
    let account = NewAccount {
        username: Username::parse(&input.username).map_err(invalid)?,
        password: Password::parse(&input.password).map_err(invalid)?,
        first_name: accounts::profile_text("first name", input.first_name.as_deref(), 50)
            .map_err(invalid)?,
        last_name: accounts::profile_text("last name", input.last_name.as_deref(), 50)
            .map_err(invalid)?,
        email: input
            .email
            .as_deref()
            .map(Email::parse)
            .transpose()
            .map_err(invalid)?,
        phone: input
            .phone
            .as_deref()
            .map(Phone::parse)
            .transpose()
            .map_err(invalid)?,
        about: accounts::profile_text("about", input.about.as_deref(), 500).map_err(invalid)?,
        verified: input.verified,
    };
    let user = accounts::create(store, hasher, &Requester::default(), account)
        .await
        .map_err(|e| match e {
            CreateAccountError::Taken(field) => {
                AdminError::Conflict(format!("{field} is already taken"))
            }
            CreateAccountError::Store(e) => e.into(),
            CreateAccountError::Busy(e) => AdminError::Unexpected(e.into()),
            CreateAccountError::Unexpected(e) => AdminError::Unexpected(e),
        })?;
    Ok(UserCreated {
        id: user.id,
        username: user.username,
    })
}

#[derive(Debug, Serialize)]
pub struct UserStatus {
    pub id: String,
    pub username: String,
    pub verified: bool,
    pub suspended: bool,
}

pub async fn find_user(store: &dyn Store, username: &str) -> Result<User, AdminError> {
    store
        .find_user(UserKey::Username(username.trim()))
        .await?
        .ok_or_else(|| AdminError::UnknownUser(username.to_owned()))
}

/// Sets account flags. Verifying an account verifies its e-mail and phone, which
/// claims the pending payments sent to them.
pub async fn user_flags(
    store: &dyn Store,
    username: &str,
    flags: UserFlags,
) -> Result<UserStatus, AdminError> {
    let user = find_user(store, username).await?;
    let user = store
        .update_user_flags(&user.id, flags)
        .await?
        .ok_or_else(|| AdminError::UnknownUser(username.to_owned()))?;
    if flags.verified == Some(true) {
        ledger::claim(store, &user, now_micros()).await?;
    }
    Ok(UserStatus {
        id: user.id,
        username: user.username,
        verified: user.verified,
        suspended: user.suspended,
    })
}

/// What `admin user reset-factors` did.
#[derive(Debug, Serialize)]
pub struct FactorsReset {
    pub username: String,
    pub factors_removed: u64,
}

/// Removes every second factor and recovery code of `username` (SPEC §11).
pub async fn reset_factors(store: &dyn Store, username: &str) -> Result<FactorsReset, AdminError> {
    let user = find_user(store, username).await?;
    let factors_removed = store.reset_factors(&user.id).await?;
    Ok(FactorsReset {
        username: user.username,
        factors_removed,
    })
}

// The input of `admin app add`, as given on the command line.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct AppAdd {
    #[arg(long)]
    pub owner: String,
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub redirect_url: String,
    #[arg(long)]
    pub description: Option<String>,
    #[arg(long)]
    pub site_url: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AppCreated {
    pub client_id: String,
    pub client_secret: String,
}

pub async fn app_add(store: &dyn Store, input: AppAdd) -> Result<AppCreated, AdminError> {
    let details = AppDetails::parse(
        &input.name,
        input.description.as_deref(),
        &input.redirect_url,
        input.site_url.as_deref(),
    )
    .map_err(invalid)?;
    let owner = find_user(store, &input.owner).await?;
    let (app, secret) = clients::register(store, &owner.id, &details).await?;
    Ok(AppCreated {
        client_id: app.client_id,
        client_secret: secret.secret.expose_secret().to_owned(),
    })
}

#[derive(Debug, Serialize)]
pub struct AppStatus {
    pub client_id: String,
    pub suspended: bool,
}

pub async fn app_suspend(
    store: &dyn Store,
    client_id: &str,
    suspended: bool,
) -> Result<AppStatus, AdminError> {
    store
        .set_app_suspended(client_id.trim(), suspended)
        .await?
        .map(|app| AppStatus {
            client_id: app.client_id,
            suspended: app.suspended,
        })
        .ok_or_else(|| AdminError::UnknownApp(client_id.to_owned()))
}

/// The input of `admin app set`: each setting given is changed, the others
/// stay as they are.
#[derive(Debug, Default, Clone)]
pub struct AppSet {
    pub client_id: String,
    /// Whether the app is a resource server: introspection answers it about
    /// any app's tokens (SPEC §6).
    pub introspect_any: Option<bool>,
    /// The algorithm of the app's ID tokens (SPEC §10), as typed: RS256,
    /// ES256 or EdDSA in any letter case.
    pub id_token_alg: Option<String>,
}

/// An app's settings after `admin app set`, as they stand now.
#[derive(Debug, Serialize)]
pub struct AppSettings {
    pub client_id: String,
    /// A resource server: introspection answers it about any app's tokens.
    pub introspect_any: bool,
    /// The algorithm its ID tokens are signed with.
    pub id_token_alg: String,
}

/// Changes the settings `input` names. Every input is checked before anything
/// is changed, so a refused command changes nothing.
pub async fn app_set(store: &dyn Store, input: AppSet) -> Result<AppSettings, AdminError> {
    let client_id = input.client_id.trim();
    if input.introspect_any.is_none() && input.id_token_alg.is_none() {
        return Err(invalid(
            "nothing to set: give --introspect-any, --no-introspect-any or --id-token-alg",
        ));
    }
    let alg = input.id_token_alg.as_deref().map(parse_alg).transpose()?;
    let Some(mut app) = store.find_app(client_id).await? else {
        return Err(AdminError::UnknownApp(client_id.to_owned()));
    };
    if let Some(introspect_any) = input.introspect_any {
        app = store
            .set_app_introspect_any(client_id, introspect_any)
            .await?
            .ok_or_else(|| AdminError::UnknownApp(client_id.to_owned()))?;
    }
    if let Some(alg) = alg {
        if !store.set_id_token_alg(client_id, alg.as_str()).await? {
            return Err(AdminError::UnknownApp(client_id.to_owned()));
        }
    }
    let id_token_alg = store
        .id_token_alg(client_id)
        .await?
        .and_then(|name| IdTokenAlg::parse(&name))
        .unwrap_or(IdTokenAlg::DEFAULT);
    Ok(AppSettings {
        client_id: app.client_id,
        introspect_any: app.introspect_any,
        id_token_alg: id_token_alg.as_str().to_owned(),
    })
}

/// An algorithm's name, as an operator typed it.
pub(super) fn parse_alg(name: &str) -> Result<IdTokenAlg, AdminError> {
    IdTokenAlg::parse(name).ok_or_else(|| {
        AdminError::Invalid(format!(
            "unknown ID token algorithm {name:?}: use RS256, ES256 or EdDSA"
        ))
    })
}

#[derive(Debug, Serialize)]
pub struct Deposited {
    pub username: String,
    pub balance: Money,
}

/// Largest single deposit an operator may record.
pub const MAX_DEPOSIT: Money = Money::from_cents(100_000_000);

pub async fn deposit(
    store: &dyn Store,
    username: &str,
    amount: &str,
) -> Result<Deposited, AdminError> {
    let amount = Amount::parse_positive(amount).map_err(invalid)?;
    if amount.money() > MAX_DEPOSIT {
        return Err(AdminError::Invalid(format!(
            "amount must be at most {MAX_DEPOSIT}"
        )));
    }
    let user = find_user(store, username).await?;
    let balance = ledger::deposit(store, &user.id, amount).await?;
    Ok(Deposited {
        username: user.username,
        balance,
    })
}

#[derive(Debug, Serialize)]
pub struct BackedUp {
    /// The copy, as an absolute path.
    pub path: String,
    pub bytes: u64,
}

/// Copies the SQLite database to a new file while the server runs. Never
/// overwrites: an existing file at `path` is refused.
pub async fn backup(store: &dyn Store, path: &std::path::Path) -> Result<BackedUp, AdminError> {
    if path.exists() {
        return Err(AdminError::Conflict(format!(
            "{} already exists; a backup never overwrites a file",
            path.display()
        )));
    }
    let text = path
        .to_str()
        .ok_or_else(|| AdminError::Invalid("the backup path must be valid UTF-8".to_owned()))?;
    store.backup_into(text).await?;
    let written = |e: std::io::Error| {
        AdminError::Unexpected(anyhow::Error::new(e).context("the backup was not written"))
    };
    let bytes = std::fs::metadata(path).map_err(written)?.len();
    let absolute = std::fs::canonicalize(path).map_err(written)?;
    Ok(BackedUp {
        path: absolute.display().to_string(),
        bytes,
    })
}

#[derive(Debug, Serialize)]
pub struct Done {
    pub ok: bool,
}

pub async fn friend_add(store: &dyn Store, a: &str, b: &str) -> Result<Done, AdminError> {
    let first = find_user(store, a).await?;
    let second = find_user(store, b).await?;
    if first.id == second.id {
        return Err(AdminError::Invalid(
            "a user cannot be their own friend".to_owned(),
        ));
    }
    store
        .add_friendship(&first.id, &second.id, now_micros())
        .await?;
    Ok(Done { ok: true })
}
