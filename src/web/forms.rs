//! Post/Redirect/Get for forms: a refused form's values (never its passwords)
//! and its error messages ride in the session to the page the 303 leads to, so
//! every POST is answered with 303 and the person does not retype everything.
//!
//! Every page form is read through [`PageForm`], which applies the rules every
//! field shares before any handler sees it: at most [`MAX_FIELD_BYTES`] bytes,
//! and no control characters (SPEC §2; tab and line breaks only in `note` and
//! `about`). A field that breaks them makes the form come back with a message.
//! Query strings of pages go through [`PageQuery`], path ids through
//! [`PathId`]: there a bad value is an error page.

use super::view::PageError;
use crate::domain::{has_forbidden_control, Lines};
use actix_session::Session;
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most a page form field may hold, in bytes of UTF-8: room for the
/// longest field (500 characters of about or App Description) in any script.
pub const MAX_FIELD_BYTES: usize = 2048;

/// The session cookie holds at most 4 KiB, so a refused form's values are
/// cut when kept: each to this many bytes, and all of them to a budget.
const MAX_KEPT_BYTES: usize = 520;
const KEPT_BUDGET_BYTES: usize = 1000;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FormState {
    values: BTreeMap<String, String>,
    errors: BTreeMap<String, String>,
}

impl FormState {
    pub fn keep(&mut self, field: &str, value: &str) {
        self.values
            .insert(field.to_owned(), cut(value, MAX_KEPT_BYTES).to_owned());
    }

    /// Empties the longest kept values until all of them fit the budget.
    fn fit_budget(&mut self) {
        let total = |values: &BTreeMap<String, String>| -> usize {
            values.iter().map(|(k, v)| k.len() + v.len()).sum()
        };
        while total(&self.values) > KEPT_BUDGET_BYTES {
            let Some(longest) = self
                .values
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .max_by_key(|(_, v)| v.len())
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.values.insert(longest, String::new());
        }
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
    let mut kept = FormState {
        values: state.values.clone(),
        errors: state.errors.clone(),
    };
    kept.fit_budget();
    let _ = session.insert(form_key(form), &kept);
}

/// Keeps a refused form for its page; the answer is the 303 to `location`,
/// the form's place on that page.
pub fn refuse(session: &Session, form: &str, state: &FormState, location: &str) -> PageError {
    stash(session, form, state);
    PageError::FormRefused {
        location: location.to_owned(),
    }
}

/// The longest start of `value` within `max` bytes, cut between characters.
fn cut(value: &str, max: usize) -> &str {
    if value.len() <= max {
        return value;
    }
    let mut end = max;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// The refused form kept for this page, if any; taken out of the session.
pub fn take(session: &Session, form: &str) -> Option<FormState> {
    session
        .remove_as::<FormState>(&form_key(form))
        .and_then(Result::ok)
}

/// Which fields may hold tabs and line breaks (SPEC §2).
fn lines_of(field: &str) -> Lines {
    match field {
        "note" | "about" => Lines::Multi,
        _ => Lines::Single,
    }
}

/// Fields whose values are never kept or shown again.
pub(super) fn is_secret(field: &str) -> bool {
    field == "csrf_token" || field.contains("password")
}

/// A field's name as the page labels it, for messages.
fn label(field: &str) -> &str {
    match field {
        "username" => "Username",
        "first_name" => "First name",
        "last_name" => "Last name",
        "email" => "E-mail address",
        "phone" => "Phone number",
        "password" | "password_confirm" => "Password",
        "current_password" => "Current password",
        "new_password" => "New password",
        "second_factor" | "code" => "The code",
        "about" => "About",
        "name" => "App Name",
        "description" => "App Description",
        "redirect_url" => "Web Redirect URL",
        "site_url" => "Site URL",
        "to" => "To",
        "amount" => "Amount",
        "note" => "Note",
        "audience" => "Who can see it",
        "kind" => "Pay or request",
        "token" => "The verification link",
        "return_to" => "The page to return to",
        _ => "A field",
    }
}

/// The message for a value that breaks the rules every field shares.
fn refusal(field: &str, value: &str) -> Option<String> {
    if value.len() > MAX_FIELD_BYTES {
        return Some(format!(
            "{} is too long: at most {MAX_FIELD_BYTES} bytes.",
            label(field)
        ));
    }
    if has_forbidden_control(value, lines_of(field)) {
        return Some(format!(
            "{} holds a control character (such as NUL{}), which is not accepted.",
            label(field),
            if lines_of(field) == Lines::Single {
                ", a tab or a line break"
            } else {
                ""
            }
        ));
    }
    None
}

/// A form's fields as sent, read and admitted by `guard::check_forms` (CSRF
/// token and Origin checked). Only a POST of the pages' scope has them: taking
/// them anywhere else is an error, never an unchecked form.
pub struct FormFields(pub Vec<(String, String)>);

impl FormFields {
    fn take(req: &HttpRequest) -> Result<Self, PageError> {
        req.extensions_mut().remove::<Self>().ok_or_else(|| {
            PageError::Unexpected(anyhow::anyhow!(
                "a form was read outside the pages' form check"
            ))
        })
    }

    /// The first value of a field.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl FromRequest for FormFields {
    type Error = PageError;
    type Future = std::future::Ready<Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        std::future::ready(Self::take(req))
    }
}

/// A page form, read as its fields: either the form `T`, or (when a field
/// breaks the shared rules) the form to show again with a message on it.
pub struct PageForm<T> {
    checked: Result<T, FormState>,
}

impl<T> PageForm<T> {
    pub fn into_checked(self) -> Result<T, FormState> {
        self.checked
    }

    /// The form, or (refused) what was sent, its messages flashed in one line
    /// for a page that shows no form errors.
    pub fn or_flashed(self, session: &Session) -> Result<T, FormState> {
        self.checked.inspect_err(|refused| {
            super::session::flash(session, &refused.messages().join(" "));
        })
    }

    /// The form, or (refused) the way back to it at `location` (see [`refuse`]).
    pub fn or_back(self, session: &Session, form: &str, location: &str) -> Result<T, PageError> {
        self.checked
            .map_err(|refused| refuse(session, form, &refused, location))
    }

    /// The form parsed by `parse`, or the form to show again.
    pub fn parse_with<U>(
        self,
        parse: impl FnOnce(&T) -> Result<U, FormState>,
    ) -> Result<U, FormState> {
        self.checked.and_then(|form| parse(&form))
    }
}

impl<T: DeserializeOwned> PageForm<T> {
    fn check(pairs: Vec<(String, String)>) -> Result<Self, PageError> {
        let mut refused = FormState::default();
        let mut fields = serde_json::Map::new();
        for (name, value) in pairs {
            // Names no form has are ignored, as serde ignores them.
            if name.len() > 64 || has_forbidden_control(&name, Lines::Single) {
                continue;
            }
            let problem = refusal(&name, &value);
            if !is_secret(&name) {
                let shown: String = value.chars().filter(|c| !c.is_control()).collect();
                refused.keep(&name, &shown);
            }
            if let Some(message) = problem {
                refused.error(&name, message);
            }
            fields
                .entry(name)
                .or_insert(serde_json::Value::String(value));
        }
        if refused.has_errors() {
            return Ok(Self {
                checked: Err(refused),
            });
        }
        let form = serde_json::from_value(serde_json::Value::Object(fields))
            .map_err(|e| PageError::BadRequest(format!("the form cannot be read: {e}")))?;
        Ok(Self { checked: Ok(form) })
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for PageForm<T> {
    type Error = PageError;
    type Future = std::future::Ready<Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        std::future::ready(FormFields::take(req).and_then(|FormFields(pairs)| Self::check(pairs)))
    }
}

/// A page's query string, every parameter checked like a form field; a bad
/// one is an error page (there is no form to show it on).
pub struct PageQuery<T>(pub T);

impl<T: DeserializeOwned + 'static> FromRequest for PageQuery<T> {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        std::future::ready(Self::parse(req.query_string()).map_err(Into::into))
    }
}

impl<T: DeserializeOwned> PageQuery<T> {
    fn parse(query: &str) -> Result<Self, PageError> {
        let mut fields = serde_json::Map::new();
        for (name, value) in query_pairs(query)? {
            fields
                .entry(name)
                .or_insert(serde_json::Value::String(value));
        }
        serde_json::from_value(serde_json::Value::Object(fields))
            .map(Self)
            .map_err(|e| PageError::BadRequest(format!("the address cannot be read: {e}")))
    }
}

/// A query string's parameters as pairs, each checked like a form field.
pub fn query_pairs(query: &str) -> Result<Vec<(String, String)>, PageError> {
    url::form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| match refusal(&name, &value) {
            Some(message) => Err(PageError::BadRequest(message)),
            None => Ok((name.into_owned(), value.into_owned())),
        })
        .collect()
}

/// The id in a page's path (`/developer/apps/{client_id}`), checked like a
/// form field; a bad one is a "not found" page.
pub struct PathId(pub String);

impl FromRequest for PathId {
    type Error = PageError;
    type Future = std::future::Ready<Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let not_found = || PageError::NotFound("There is no page at this address.".to_owned());
        // Decoded as `web::Path` decodes it.
        let id = web::Path::<String>::extract(req)
            .into_inner()
            .ok()
            .map(web::Path::into_inner);
        std::future::ready(match id {
            Some(id) if refusal("id", &id).is_none() => Ok(Self(id)),
            _ => Err(not_found()),
        })
    }
}
