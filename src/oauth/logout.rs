//! RP-initiated logout's decisions (OpenID Connect RP-Initiated Logout 1.0,
//! SPEC §10): which app asks, whom its ID token hint names, and where the
//! browser may go afterwards. The web layer (`web::logout`) asks and shows.

use super::authorize::allowed_override;
use super::id_token::{self, Hint};
use super::keys::{KeyError, KeyRing};
use super::{request_params, Field};
use crate::domain::{has_forbidden_control, Lines, RedirectUrl};
use crate::store::{App, Store};
use url::Url;

request_params! {
    /// The parameters of a logout request (RP-Initiated Logout 1.0 §2), as
    /// received; any other (`logout_hint`, `ui_locales`) is ignored.
    pub struct LogoutParams reads [
        id_token_hint, client_id, post_logout_redirect_uri, state,
    ] {
        /// A recognized parameter given more than once, or holding a control
        /// character: the request cannot be read.
        problem: Option<String>,
    }
}

impl LogoutParams {
    /// Notes the first problem: a control character in a value read, or a
    /// parameter read given more than once. An empty value counts as not
    /// given.
    fn take(&mut self, _name: &str, value: String, field: Option<&Field<Self>>) {
        let Some(field) = field else {
            return;
        };
        let known = field.name;
        if has_forbidden_control(&value, Lines::Single) {
            self.problem
                .get_or_insert_with(|| format!("The request's {known} holds a control character."));
        }
        let slot = (field.slot)(self);
        if slot.is_none() {
            if !value.is_empty() {
                *slot = Some(value);
            }
        } else {
            self.problem
                .get_or_insert_with(|| format!("The request's {known} is given more than once."));
        }
    }
}

/// A logout request, checked.
#[derive(Debug, Clone)]
pub struct LogoutRequest {
    /// The app that asks: named by `client_id`, or by the audience of an ID
    /// token hint we signed.
    pub app: Option<App>,
    /// What an ID token hint we signed says of the session it came from.
    pub hint: Option<Hint>,
    /// Where the browser goes once signed out: `post_logout_redirect_uri`
    /// with `state` added, when the app's redirect policy (SPEC §6) admits it.
    pub return_to: Option<Url>,
    /// A `post_logout_redirect_uri` was given and is not followed.
    pub return_refused: bool,
    /// The parameters a confirmation form carries back, to check again.
    pub form_fields: Vec<(&'static str, String)>,
}

impl LogoutRequest {
    /// Whether the hint is an ID token of the browser's session: its user
    /// (`sub`) and its `sid`. Then the session ends without asking.
    pub fn matches_session(&self, user_id: &str, sid: &str) -> bool {
        self.hint
            .as_ref()
            .is_some_and(|h| h.subject == user_id && h.sid.as_deref() == Some(sid))
    }
}

/// What to do with a logout request.
#[derive(Debug)]
pub enum LogoutCheck {
    /// The request contradicts itself or cannot be read: an error page,
    /// nothing ended, no redirect.
    ErrorPage(String),
    Valid(Box<LogoutRequest>),
}

/// Checks a logout request: the hint against our keys (an expired one still
/// names its user, as §2 allows), the app, and the return address against
/// the app's registered Web Redirect URL.
#[tracing::instrument(skip_all)]
pub async fn check(
    store: &dyn Store,
    keys: &KeyRing,
    issuer: &str,
    params: &LogoutParams,
) -> Result<LogoutCheck, KeyError> {
    if let Some(problem) = &params.problem {
        return Ok(LogoutCheck::ErrorPage(problem.clone()));
    }
    // A hint that is not an ID token we signed is no hint at all.
    let hint: Option<Hint> = match params.id_token_hint.as_deref() {
        Some(token) => id_token::read_hint(store, keys, issuer, token).await?,
        None => None,
    };
    let client_id = match (params.client_id.as_deref(), &hint) {
        (Some(given), Some(hint)) if given != hint.audience => {
            return Ok(LogoutCheck::ErrorPage(
                "The request's client_id is not the app its ID token hint was issued to.".into(),
            ))
        }
        (Some(given), _) => Some(given),
        (None, Some(hint)) => Some(hint.audience.as_str()),
        (None, None) => None,
    };
    let app = match client_id {
        Some(client_id) => store.find_app(client_id).await?,
        None => None,
    };
    let return_to = match (&app, params.post_logout_redirect_uri.as_deref()) {
        (Some(app), Some(given)) if !app.suspended => app
            .redirect_url
            .as_deref()
            .and_then(|u| RedirectUrl::parse(u).ok())
            .and_then(|registered| allowed_override(&registered, given))
            .map(|mut url| {
                if let Some(state) = &params.state {
                    url.query_pairs_mut().append_pair("state", state);
                }
                url
            }),
        _ => None,
    };
    // The confirmation form carries the request back without the hint,
    // naming the app it named.
    let mut form_fields = Vec::new();
    if let Some(app) = &app {
        form_fields.push(("client_id", app.client_id.clone()));
    }
    for (name, value) in [
        ("post_logout_redirect_uri", &params.post_logout_redirect_uri),
        ("state", &params.state),
    ] {
        if let Some(value) = value {
            form_fields.push((name, value.clone()));
        }
    }
    Ok(LogoutCheck::Valid(Box::new(LogoutRequest {
        return_refused: params.post_logout_redirect_uri.is_some() && return_to.is_none(),
        hint,
        app,
        return_to,
        form_fields,
    })))
}
