//! The browser session: an encrypted, signed cookie (`HttpOnly`, `SameSite=Lax`,
//! `Secure` under HTTPS) holding the signed-in user and the CSRF token; and the
//! extractors through which page handlers get the user ([`SignedIn`],
//! [`Developer`], [`CurrentUser`]), so none checks a sign-in by hand, and the
//! state with the session ([`Page`]).

use super::view::PageError;
use crate::domain::now_micros;
use crate::oauth::credentials;
use crate::state::AppState;
use crate::store::{User, UserKey};
use actix_session::{Session, SessionExt};
use actix_web::dev::Payload;
use actix_web::http::Method;
use actix_web::{web, FromRequest, HttpRequest};
use futures_util::future::LocalBoxFuture;
use subtle::ConstantTimeEq;

const USER_ID: &str = "uid";
/// A random id for this signed-in session, so signing out can end it.
const SESSION_ID: &str = "sid";
/// When the user signed in (microseconds).
const SIGNED_IN_AT: &str = "since";
const CSRF: &str = "csrf";
/// When a page last asked the signed-in user to sign in again (OpenID
/// Connect `prompt=login` and `max_age`; microseconds).
const SIGN_IN_AGAIN: &str = "again";
const FLASH: &str = "flash";
/// The RFC 8176 methods of this session's sign-in, space-separated (SPEC
/// §11); a session from before they were kept signed in with a password.
const AMR: &str = "amr";
/// When a second factor was last used in this session (microseconds), for
/// step-up (SPEC §11).
const FACTOR_AT: &str = "factor_at";
/// A sign-in whose password was right, waiting for its second factor: the
/// user, when the password was checked, and where to go afterwards.
const PENDING_USER: &str = "pending_uid";
const PENDING_AT: &str = "pending_at";
const PENDING_RETURN: &str = "pending_return";

/// How long a right password waits for its second factor.
pub const SECOND_STEP_TTL: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// How long a sign-in lasts. The cookie's own expiry is the browser's business;
/// this is checked on the server, so a copied cookie does not outlive it.
pub const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

fn session_error(e: impl std::fmt::Display) -> PageError {
    PageError::Unexpected(anyhow::anyhow!("session: {e}"))
}

/// The CSRF token of this session, made on first use.
pub fn csrf_token(session: &Session) -> Result<String, PageError> {
    if let Ok(Some(token)) = session.get::<String>(CSRF) {
        return Ok(token);
    }
    let token = credentials::random_hex(32);
    session.insert(CSRF, &token).map_err(session_error)?;
    Ok(token)
}

/// Every POST from a page must carry the session's CSRF token and, when the
/// browser says where it comes from, come from our own origin. Called by
/// `guard::check_forms` for every POST of the pages.
pub(super) fn check_form(
    req: &HttpRequest,
    state: &AppState,
    session: &Session,
    presented: Option<&str>,
) -> Result<(), PageError> {
    if !from_own_origin(req, &state.public_origin) {
        return Err(PageError::Forbidden(
            "The form was sent from another site.".to_owned(),
        ));
    }
    let expected = session.get::<String>(CSRF).ok().flatten();
    let valid = match (expected, presented) {
        (Some(expected), Some(presented)) => {
            bool::from(expected.as_bytes().ct_eq(presented.as_bytes()))
        }
        _ => false,
    };
    if valid {
        Ok(())
    } else {
        Err(PageError::Forbidden(
            "The form has expired or was not sent by this site. Go back, reload the page and try again."
                .to_owned(),
        ))
    }
}

/// Whether a form was sent by one of our own pages, as far as the browser says.
/// Our pages send `Referrer-Policy: no-referrer`, under which browsers send
/// `Origin: null` even for a page's own forms (Fetch, "serializing a request
/// origin"); `Sec-Fetch-Site`, which no page can set, then tells.
fn from_own_origin(req: &HttpRequest, public_origin: &str) -> bool {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let fetch_site = header("sec-fetch-site");
    match header("origin") {
        Some(origin) if origin == public_origin => fetch_site != Some("cross-site"),
        Some("null") => fetch_site == Some("same-origin"),
        Some(_) => false,
        None => fetch_site.is_none_or(|site| matches!(site, "same-origin" | "none")),
    }
}

/// The signed-in user, if the session has one that is neither too old nor
/// signed out, and whose account still exists and is not suspended.
pub async fn current_user(state: &AppState, session: &Session) -> Result<Option<User>, PageError> {
    let (Ok(Some(user_id)), Ok(Some(session_id)), Ok(Some(since))) = (
        session.get::<String>(USER_ID),
        session.get::<String>(SESSION_ID),
        session.get::<i64>(SIGNED_IN_AT),
    ) else {
        return Ok(None);
    };
    if since.saturating_add(ttl_micros()) <= now_micros()
        || state
            .store
            .session_ended(&session_id, &user_id, since)
            .await?
    {
        session.purge();
        return Ok(None);
    }
    let user = state.store.find_user(UserKey::Id(&user_id)).await?;
    Ok(user.filter(|u| !u.suspended))
}

fn ttl_micros() -> i64 {
    i64::try_from(SESSION_TTL.as_micros()).unwrap_or(i64::MAX)
}

/// The id of the sign-in behind the session, if signed in.
pub fn session_id(session: &Session) -> Option<String> {
    session.get::<String>(SESSION_ID).ok().flatten()
}

/// Starts a fresh session for a user who just signed in (a new cookie, a new
/// id and a new CSRF token, against session fixation).
pub fn sign_in(session: &Session, user_id: &str) -> Result<(), PageError> {
    sign_in_with(session, user_id, "pwd", None)
}

/// Starts a fresh session as [`sign_in`] does, recording the methods used
/// (`amr`) and, when a second factor was among them, when.
pub fn sign_in_with(
    session: &Session,
    user_id: &str,
    amr: &str,
    factor_at: Option<i64>,
) -> Result<(), PageError> {
    session.renew();
    session.remove(CSRF);
    for key in [PENDING_USER, PENDING_AT, PENDING_RETURN, FACTOR_AT] {
        session.remove(key);
    }
    session.insert(AMR, amr).map_err(session_error)?;
    if let Some(at) = factor_at {
        session.insert(FACTOR_AT, at).map_err(session_error)?;
    }
    session.insert(USER_ID, user_id).map_err(session_error)?;
    session
        .insert(SESSION_ID, credentials::random_hex(16))
        .map_err(session_error)?;
    session
        .insert(SIGNED_IN_AT, now_micros())
        .map_err(session_error)
}

/// The sign-in behind the session: when it happened, the session's id and
/// the methods used (OpenID Connect's `auth_time`, `sid` and `amr`).
pub fn authentication(session: &Session) -> Option<crate::oauth::authorize::Authentication> {
    match (
        session.get::<i64>(SIGNED_IN_AT),
        session.get::<String>(SESSION_ID),
    ) {
        (Ok(Some(auth_time)), Ok(Some(session_id))) => {
            Some(crate::oauth::authorize::Authentication {
                auth_time,
                session_id,
                amr: amr(session),
            })
        }
        _ => None,
    }
}

/// The RFC 8176 methods of this session's sign-in (and of its step-ups).
pub fn amr(session: &Session) -> String {
    session
        .get::<String>(AMR)
        .ok()
        .flatten()
        .unwrap_or_else(|| "pwd".to_owned())
}

/// When a second factor was last used in this session, if ever.
pub fn factor_used_at(session: &Session) -> Option<i64> {
    session.get::<i64>(FACTOR_AT).ok().flatten()
}

/// Notes that a second factor was used now in this session (a step-up):
/// its methods (`methods`, e.g. `otp`) join the session's, with `mfa`.
pub fn factor_used(session: &Session, methods: &str) -> Result<(), PageError> {
    let mut amr: Vec<String> = amr(session).split(' ').map(str::to_owned).collect();
    for method in methods.split(' ').chain(["mfa"]) {
        if !method.is_empty() && !amr.iter().any(|m| m == method) {
            amr.push(method.to_owned());
        }
    }
    amr.retain(|m| m != "mfa");
    amr.push("mfa".to_owned());
    session.insert(AMR, amr.join(" ")).map_err(session_error)?;
    session
        .insert(FACTOR_AT, now_micros())
        .map_err(session_error)
}

/// A right password for `user_id`, now waiting for the second factor.
pub fn begin_second_step(
    session: &Session,
    user_id: &str,
    return_to: &str,
) -> Result<(), PageError> {
    session
        .insert(PENDING_USER, user_id)
        .map_err(session_error)?;
    session
        .insert(PENDING_AT, now_micros())
        .map_err(session_error)?;
    session
        .insert(PENDING_RETURN, return_to)
        .map_err(session_error)
}

/// The user whose password was right and who owes a second factor, and
/// where to go afterwards, unless that was too long ago.
pub fn pending_second_step(session: &Session) -> Option<(String, String)> {
    let user = session.get::<String>(PENDING_USER).ok().flatten()?;
    let at = session.get::<i64>(PENDING_AT).ok().flatten()?;
    let ttl = i64::try_from(SECOND_STEP_TTL.as_micros()).unwrap_or(i64::MAX);
    if at.saturating_add(ttl) <= now_micros() {
        return None;
    }
    let return_to = session.get::<String>(PENDING_RETURN).ok().flatten();
    Some((user, safe_return_to(return_to.as_deref())))
}

/// Notes that a page asks the signed-in user to sign in again now.
pub fn ask_to_sign_in_again(session: &Session) -> Result<(), PageError> {
    session
        .insert(SIGN_IN_AGAIN, now_micros())
        .map_err(session_error)
}

/// Whether the user signed in again since a page asked (the request is
/// answered: a later one asks again).
pub fn signed_in_again(session: &Session) -> bool {
    let asked = session.remove_as::<i64>(SIGN_IN_AGAIN).and_then(Result::ok);
    let since = session.get::<i64>(SIGNED_IN_AT).ok().flatten();
    matches!((asked, since), (Some(asked), Some(since)) if since >= asked)
}

/// Ends the session here and everywhere a copy of its cookie is kept.
pub async fn sign_out(state: &AppState, session: &Session) -> Result<(), PageError> {
    if let (Ok(Some(session_id)), Ok(Some(since))) = (
        session.get::<String>(SESSION_ID),
        session.get::<i64>(SIGNED_IN_AT),
    ) {
        let now = now_micros();
        state
            .store
            .end_session(&session_id, since.saturating_add(ttl_micros()), now)
            .await?;
    }
    session.purge();
    Ok(())
}

/// A message for the next page shown.
pub fn flash(session: &Session, message: &str) {
    let _ = session.insert(FLASH, message);
}

pub fn take_flash(session: &Session) -> Option<String> {
    session.remove_as::<String>(FLASH).and_then(Result::ok)
}

/// Where to go after signing in: only a path of this site, never another origin.
/// Browsers drop tabs and newlines from URLs and read `\` as `/`, so `/\t/evil`
/// would lead away: any control character, whitespace or backslash is refused,
/// and the path must resolve on our own origin.
pub fn safe_return_to(value: Option<&str>) -> String {
    const HOME: &str = "/account";
    let Some(path) = value else {
        return HOME.to_owned();
    };
    let plain = path.starts_with('/')
        && !path.starts_with("//")
        && !path
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == '\\');
    let base = url::Url::parse("http://tally.invalid/").ok();
    let stays_here = base
        .as_ref()
        .and_then(|base| base.join(path).ok())
        .is_some_and(|url| url.host_str() == Some("tally.invalid"));
    if plain && stays_here {
        path.to_owned()
    } else {
        HOME.to_owned()
    }
}

/// The application state, for an extractor.
pub(super) fn state_of(req: &HttpRequest) -> Result<web::Data<AppState>, PageError> {
    req.app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| PageError::Unexpected(anyhow::anyhow!("no application state")))
}

/// The signed-in user of a request, if any.
async fn user_of(req: HttpRequest) -> Result<Option<User>, PageError> {
    let state = state_of(&req)?;
    current_user(&state, &req.get_session()).await
}

/// Where signing in leads back to: a page itself, or, for a form, the page the
/// form is on (an app's own page, else the first segment: `/account`,
/// `/developer`).
fn return_path(req: &HttpRequest) -> String {
    let path = req.path();
    if req.method() == Method::GET {
        return path.to_owned();
    }
    match path.split('/').collect::<Vec<_>>().as_slice() {
        ["", "developer", "apps", client_id, ..] => format!("/developer/apps/{client_id}"),
        ["", first, ..] => format!("/{first}"),
        _ => path.to_owned(),
    }
}

/// What most page handlers work with: the application state and the browser
/// session, taken together (`Page { state, session }: Page`).
pub struct Page {
    pub state: web::Data<AppState>,
    pub session: Session,
}

impl FromRequest for Page {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let state = web::Data::<AppState>::from_request(req, payload);
        let session = Session::from_request(req, payload);
        Box::pin(async move {
            Ok(Self {
                state: state.await?,
                session: session.await?,
            })
        })
    }
}

/// The user a page is for, whether signed in or not (sign-in, sign-up, consent).
pub struct CurrentUser(pub Option<User>);

impl FromRequest for CurrentUser {
    type Error = PageError;
    type Future = LocalBoxFuture<'static, Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { user_of(req).await.map(Self) })
    }
}

/// The signed-in user. A handler that takes it is never reached without one:
/// the browser is sent to sign in, and back here (see [`return_path`]).
pub struct SignedIn(pub User);

impl FromRequest for SignedIn {
    type Error = PageError;
    type Future = LocalBoxFuture<'static, Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            user_of(req.clone())
                .await?
                .map(Self)
                .ok_or_else(|| PageError::SignInRequired {
                    return_to: return_path(&req),
                })
        })
    }
}

/// The signed-in user of a verified account: the Developer tab's forms and
/// app pages are theirs only.
pub struct Developer(pub User);

impl FromRequest for Developer {
    type Error = PageError;
    type Future = LocalBoxFuture<'static, Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let signed_in = SignedIn::from_request(req, payload);
        Box::pin(async move {
            let SignedIn(user) = signed_in.await?;
            if user.verified {
                Ok(Self(user))
            } else {
                Err(PageError::Forbidden(
                    "Only verified accounts can use the Developer tab. Open the link we sent you first."
                        .to_owned(),
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::safe_return_to;

    #[test]
    fn only_paths_of_this_site_are_returned_to() {
        for good in [
            "/account",
            "/v1/oauth/authorize?client_id=a&scope=b",
            "/developer#apps",
        ] {
            assert_eq!(safe_return_to(Some(good)), good);
        }
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\\evil.example",
            "/ /evil.example",
            "https://evil.example/",
            "evil.example",
            "",
        ] {
            assert_eq!(safe_return_to(Some(bad)), "/account", "{bad:?}");
        }
        assert_eq!(safe_return_to(None), "/account");
    }
}
