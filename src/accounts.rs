//! Account use cases: creating accounts (the rules every way in, operator
//! command and sign-up, shares) and changing an account's addresses.

use crate::auth::password::{Busy, HashError, PasswordHasher, Requester};
use crate::auth::throttle::{confirm_password, Attempt, Confirmation};
use crate::domain::{new_id, now_micros, Email, Password, Phone, Username};
use crate::mailer::Mailer;
use crate::store::{NewUser, Store, StoreError, User, UserKey};
use crate::verification::{self, Links};
use std::net::IpAddr;
use std::time::Duration;

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

/// The name a user is shown by, wherever one is shown (the API's
/// `display_name`, the account page, a new passkey): the first and last
/// names, or the username when both are empty.
pub fn display_name(user: &User) -> String {
    let full = format!("{} {}", user.first_name, user.last_name);
    match full.trim() {
        "" => user.username.clone(),
        full => full.to_owned(),
    }
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
    Busy(#[from] Busy),
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

#[tracing::instrument(skip_all, fields(username = %account.username))]
pub async fn create(
    store: &dyn Store,
    hasher: &PasswordHasher,
    requester: &Requester,
    account: NewAccount,
) -> Result<User, CreateAccountError> {
    // Everything that could refuse the account is checked before the hash
    // (SPEC §9): a flood of sign-ups for a taken name costs no hashing. The
    // insert's unique keys still decide a race between two sign-ups.
    let username_holder = store
        .find_user(UserKey::Username(account.username.as_str()))
        .await
        .map_err(CreateAccountError::Store)?;
    if username_holder.is_some() {
        return Err(CreateAccountError::Taken("username"));
    }
    if let Some(field) =
        verified_elsewhere(store, account.email.as_ref(), account.phone.as_ref(), None)
            .await
            .map_err(CreateAccountError::Store)?
    {
        return Err(CreateAccountError::Taken(field));
    }
    let password_hash = hasher
        .hash(requester, &account.password)
        .await
        .map_err(|e| match e {
            HashError::Busy(busy) => CreateAccountError::Busy(busy),
            HashError::Unexpected(e) => CreateAccountError::Unexpected(e),
        })?;
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
    /// Too many wrong passwords lately: nothing was checked.
    #[error("too many attempts")]
    Wait(Duration),
    #[error(transparent)]
    Busy(#[from] Busy),
    #[error("that is not the account's password")]
    WrongPassword,
    /// Another account has verified this address (`"email"` or `"phone"`).
    #[error("another account uses this {0}")]
    Taken(&'static str),
    #[error("the account no longer exists")]
    Gone,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A request to change an account's e-mail address and phone number.
pub struct ContactChange<'a> {
    pub user: &'a User,
    /// Where the request comes from, for the password throttle and the
    /// limit on verification sends.
    pub from: IpAddr,
    pub requester: Requester,
    pub password: &'a str,
    /// The new addresses, or `None` when the form's were refused: the password
    /// is still checked (and counted), so the person learns every mistake at once.
    pub wanted: Option<(Email, Option<Phone>)>,
}

/// What a contact change did.
#[derive(Debug)]
pub enum ContactsChanged {
    /// The password was right; there were no addresses to save.
    PasswordOnly,
    Unchanged,
    /// Saved; new addresses were sent verification links.
    Saved(Links),
}

/// Changes an account's addresses, asking for its password first (a borrowed
/// session must not be able to move the account to another address), checked
/// like a sign-in: it is one. An address that changes is unverified until its
/// link is followed, and gets the link; one another account has verified is
/// refused (the unique index on verified addresses settles a race). Payments
/// waiting for a new address are claimed once it is verified.
pub async fn change_contacts(
    store: &dyn Store,
    hasher: &PasswordHasher,
    mailer: &Mailer,
    public_origin: &str,
    change: ContactChange<'_>,
) -> Result<ContactsChanged, ChangeContactsError> {
    let user = change.user;
    let attempt = Attempt::new(&user.id, change.from).waited_on_by(change.requester);
    match confirm_password(
        store,
        hasher,
        &attempt,
        Some(&user.password_hash),
        change.password,
    )
    .await?
    {
        Confirmation::Confirmed => {}
        Confirmation::Refused => return Err(ChangeContactsError::WrongPassword),
        Confirmation::Wait(wait) => return Err(ChangeContactsError::Wait(wait)),
        Confirmation::Busy => return Err(Busy.into()),
    }
    let Some((email, phone)) = change.wanted else {
        return Ok(ContactsChanged::PasswordOnly);
    };
    if user.email.as_deref() == Some(email.as_str())
        && user.phone.as_deref() == phone.as_ref().map(Phone::as_str)
    {
        return Ok(ContactsChanged::Unchanged);
    }
    if let Some(field) =
        verified_elsewhere(store, Some(&email), phone.as_ref(), Some(&user.id)).await?
    {
        return Err(ChangeContactsError::Taken(field));
    }
    let updated = match store
        .update_contacts(&user.id, email.as_str(), phone.as_ref().map(Phone::as_str))
        .await
    {
        Ok(Some(updated)) => updated,
        Ok(None) => return Err(ChangeContactsError::Gone),
        Err(StoreError::Conflict(field)) => return Err(ChangeContactsError::Taken(field)),
        Err(other) => return Err(other.into()),
    };
    let links = verification::send_links(store, mailer, public_origin, &updated, change.from).await;
    Ok(ContactsChanged::Saved(links))
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
