//! Creating accounts: the rules every way in (operator command, sign-up) shares.

use crate::auth::password::PasswordHasher;
use crate::domain::{new_id, now_micros, Email, Password, Phone, Username};
use crate::store::{NewUser, Store, StoreError, User};

/// A new account, parsed.
#[derive(Debug)]
pub struct NewAccount {
    pub username: Username,
    pub password: Password,
    pub first_name: String,
    pub last_name: String,
    pub email: Option<Email>,
    pub phone: Option<Phone>,
    pub about: String,
    pub verified: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{0} must be at most {1} characters long")]
    TooLong(&'static str, usize),
}

/// Checks a free-text profile field and trims it.
pub fn profile_text(
    field: &'static str,
    value: Option<&str>,
    max: usize,
) -> Result<String, ProfileError> {
    let value = value.unwrap_or("").trim();
    if value.chars().count() > max {
        return Err(ProfileError::TooLong(field, max));
    }
    Ok(value.to_owned())
}

#[derive(Debug, thiserror::Error)]
pub enum CreateAccountError {
    #[error("{0} is already taken")]
    Taken(&'static str),
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

#[tracing::instrument(skip_all, fields(username = %account.username))]
pub async fn create(
    store: &dyn Store,
    hasher: &PasswordHasher,
    account: NewAccount,
) -> Result<User, CreateAccountError> {
    let password_hash = hasher.hash(&account.password).await?;
    store
        .insert_user(&NewUser {
            id: new_id(),
            username: account.username.as_str().to_owned(),
            first_name: account.first_name,
            last_name: account.last_name,
            about: account.about,
            email: account.email.map(|e| e.as_str().to_owned()),
            phone: account.phone.map(|p| p.as_str().to_owned()),
            password_hash,
            verified: account.verified,
            date_joined: now_micros(),
        })
        .await
        .map_err(|e| match e {
            StoreError::Conflict(field) => CreateAccountError::Taken(field),
            other => CreateAccountError::Store(other),
        })
}
