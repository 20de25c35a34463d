//! Creating accounts: the rules every way in (operator command, sign-up) shares.

use crate::auth::password::PasswordHasher;
use crate::domain::{new_id, now_micros, Email, Password, Phone, Username};
use crate::store::{NewUser, Store, StoreError, User, UserKey};

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
    if let Some(field) =
        verified_elsewhere(store, account.email.as_ref(), account.phone.as_ref(), None)
            .await
            .map_err(CreateAccountError::Store)?
    {
        return Err(CreateAccountError::Taken(field));
    }
    let password_hash = hasher.hash(&account.password).await?;
    let user = store
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
        })?;
    // An account created verified (by an operator) owns its addresses at once,
    // so payments already waiting for them are its to claim.
    if user.verified {
        crate::ledger::claim(store, &user, now_micros())
            .await
            .map_err(CreateAccountError::Store)?;
    }
    Ok(user)
}

/// Which of these addresses (`"email"` or `"phone"`) another account than
/// `except` has verified, which makes it theirs. An unverified address may be
/// held by several accounts until one of them verifies it, so nobody can keep
/// an address from its owner by signing up with it first.
pub async fn verified_elsewhere(
    store: &dyn Store,
    email: Option<&Email>,
    phone: Option<&Phone>,
    except: Option<&str>,
) -> Result<Option<&'static str>, StoreError> {
    let other = |u: &User| except != Some(u.id.as_str());
    if let Some(email) = email {
        let holder = store.find_user(UserKey::Email(email.as_str())).await?;
        if holder.is_some_and(|u| u.email_verified && other(&u)) {
            return Ok(Some("email"));
        }
    }
    if let Some(phone) = phone {
        let holder = store.find_user(UserKey::Phone(phone.as_str())).await?;
        if holder.is_some_and(|u| u.phone_verified && other(&u)) {
            return Ok(Some("phone"));
        }
    }
    Ok(None)
}

#[derive(Debug, thiserror::Error)]
pub enum ChangeContactsError {
    /// Another account has verified this address (`"email"` or `"phone"`).
    #[error("another account uses this {0}")]
    Taken(&'static str),
    #[error("the account no longer exists")]
    Gone,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Gives `user` these e-mail and phone addresses. An address that changes is
/// unverified until its link is followed; one another account has verified
/// is refused (the unique index on verified addresses settles a race).
pub async fn change_contacts(
    store: &dyn Store,
    user: &User,
    email: &Email,
    phone: Option<&Phone>,
) -> Result<User, ChangeContactsError> {
    if let Some(field) = verified_elsewhere(store, Some(email), phone, Some(&user.id)).await? {
        return Err(ChangeContactsError::Taken(field));
    }
    match store
        .update_contacts(&user.id, email.as_str(), phone.map(Phone::as_str))
        .await
    {
        Ok(Some(updated)) => Ok(updated),
        Ok(None) => Err(ChangeContactsError::Gone),
        Err(StoreError::Conflict(field)) => Err(ChangeContactsError::Taken(field)),
        Err(other) => Err(other.into()),
    }
}

/// Why a password chosen at sign-up is refused, in words to show.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct WeakPassword(pub String);

/// zxcvbn's estimate must reach 3 of 4 ("safely unguessable"), taking the
/// person's own names and addresses into account as guesses.
pub fn check_password_strength(password: &str, own_words: &[&str]) -> Result<(), WeakPassword> {
    let estimate = zxcvbn::zxcvbn(password, own_words);
    if estimate.score() >= zxcvbn::Score::Three {
        return Ok(());
    }
    let mut advice = vec!["This password is too easy to guess.".to_owned()];
    if let Some(feedback) = estimate.feedback() {
        if let Some(warning) = feedback.warning() {
            advice.push(format!("{warning}."));
        }
        advice.extend(feedback.suggestions().iter().map(|s| s.to_string()));
    }
    if advice.len() == 1 {
        advice.push("Add more words or characters that do not belong together.".to_owned());
    }
    Err(WeakPassword(advice.join(" ")))
}

/// Called whenever an e-mail address or phone number of `user` has just become
/// verified: payments waiting for that address are claimed by the account
/// (SPEC §5). The one place that links verification to the ledger.
#[tracing::instrument(skip_all, fields(user_id = %user.id))]
pub async fn on_contact_verified(
    store: &dyn Store,
    user: &User,
    _settings: &crate::config::Settings,
) -> Result<(), StoreError> {
    let claimed = crate::ledger::claim(store, user, crate::domain::now_micros()).await?;
    tracing::info!(
        email_verified = user.email_verified,
        phone_verified = user.phone_verified,
        claimed,
        "contact verified"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guessable_passwords_are_refused_with_advice() {
        for weak in ["password123", "annlee2024", "qwertyuiop", "tallytally"] {
            let refused = check_password_strength(weak, &["annlee", "Ann", "Lee", "tally"]);
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.0.starts_with("This password is too easy to guess.")),
                "{weak}: {refused:?}"
            );
        }
        assert_eq!(
            check_password_strength("plum vessel orbit 97 quietly", &["annlee"]),
            Ok(())
        );
    }
}
