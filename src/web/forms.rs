//! Post/Redirect/Get for forms: a refused form's values (never its passwords)
//! and its error messages ride in the session to the page the 303 leads to, so
//! every POST is answered with 303 and the person does not retype everything.
//! Secrets shown once (a new client secret, a personal access token) travel the
//! same way and are gone once shown.

use actix_session::Session;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The session cookie holds at most 4 KiB, so long inputs are cut when kept.
const MAX_KEPT_CHARS: usize = 520;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FormState {
    values: BTreeMap<String, String>,
    errors: BTreeMap<String, String>,
}

impl FormState {
    pub fn keep(&mut self, field: &str, value: &str) {
        self.values.insert(
            field.to_owned(),
            value.chars().take(MAX_KEPT_CHARS).collect(),
        );
    }

    pub fn error(&mut self, field: &str, message: impl ToString) {
        self.errors
            .entry(field.to_owned())
            .or_insert_with(|| message.to_string());
    }

    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The value to show in a field.
    pub fn value(&self, field: &str) -> &str {
        self.values.get(field).map_or("", String::as_str)
    }

    /// The error message of a field, if it was refused.
    pub fn message(&self, field: &str) -> Option<&str> {
        self.errors.get(field).map(String::as_str)
    }

    /// Every error message, in field order, for a summary at the top of a form.
    pub fn messages(&self) -> Vec<&str> {
        self.errors.values().map(String::as_str).collect()
    }

    /// A form showing `values` with no errors (an edit form's starting point).
    pub fn with_values<V: AsRef<str>>(values: &[(&str, V)]) -> Self {
        let mut state = Self::default();
        for (field, value) in values {
            state.keep(field, value.as_ref());
        }
        state
    }
}

/// An error's message as a sentence: capital first letter, full stop.
pub fn sentence(message: &str) -> String {
    let mut chars = message.trim_end_matches('.').chars();
    match chars.next() {
        Some(first) => format!("{}{}.", first.to_uppercase(), chars.as_str()),
        None => String::new(),
    }
}

fn form_key(form: &str) -> String {
    format!("form:{form}")
}

/// Keeps a refused form for the next page.
pub fn stash(session: &Session, form: &str, state: &FormState) {
    let _ = session.insert(form_key(form), state);
}

/// The refused form kept for this page, if any; taken out of the session.
pub fn take(session: &Session, form: &str) -> Option<FormState> {
    session
        .remove_as::<FormState>(&form_key(form))
        .and_then(Result::ok)
}

/// A secret to show on the next page only.
#[derive(Debug, Serialize, Deserialize)]
pub struct OnceSecret {
    /// What it is, e.g. "client secret of Splitter".
    pub label: String,
    pub value: String,
    /// Whose it is: an app's client id, or "token" for a personal access token.
    pub owner: String,
}

const SECRET: &str = "once_secret";

pub fn show_once(session: &Session, secret: &OnceSecret) {
    let _ = session.insert(SECRET, secret);
}

/// The secret kept for the page of `owner`, taken out of the session.
pub fn take_secret(session: &Session, owner: &str) -> Option<OnceSecret> {
    let secret = session.get::<OnceSecret>(SECRET).ok().flatten()?;
    if secret.owner != owner {
        return None;
    }
    session.remove(SECRET);
    Some(secret)
}
