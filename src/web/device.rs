//! The device grant's pages (RFC 8628 §3.3, SPEC §10): `/device`, where a
//! signed-in person enters the code a device shows, then the consent page,
//! which says a device is asking. The decisions are `oauth::device`'s.

use super::authorize::ConsentPage;
use super::forms::{FormFields, PageForm, PageQuery};
use super::session::{self, CurrentUser, Page, SignedIn};
use super::signin::client_ip;
use super::view::{page, see_other, PageError};
use crate::oauth::device::{self, UserCode};
use crate::store::User;
use actix_session::Session;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;
use serde::Deserialize;

/// The user code entered and found pending, kept in the session until the
/// person answers: the consent form carries no code, so it cannot be used to
/// try codes past the throttle.
const ENTERED: &str = "device_code";
/// What the last answer did, shown once on `/device`.
const DONE: &str = "device_done";

const WRONG_CODE: &str = "That code is not right, or it has expired. Check the code your device \
                          shows and enter it again.";
const NO_LONGER_PENDING: &str =
    "That code has expired or was answered already. Start again on your device.";

#[derive(Template)]
#[template(path = "device.html")]
struct DevicePage {
    csrf_token: String,
    username: String,
    user_code: String,
    error: Option<String>,
    notice: Option<String>,
}

fn device_page(
    session: &Session,
    user: &User,
    user_code: String,
    status: StatusCode,
    error: Option<String>,
) -> Result<HttpResponse, PageError> {
    let template = DevicePage {
        csrf_token: session::csrf_token(session)?,
        username: user.username.clone(),
        user_code,
        error: error.or_else(|| session::take_flash(session)),
        notice: session.remove_as::<String>(DONE).and_then(Result::ok),
    };
    page(status, &template)
}

#[derive(Deserialize)]
pub struct DeviceQuery {
    user_code: Option<String>,
}

/// `GET /device`: the code entry form, filled in from `user_code` (the
/// device's `verification_uri_complete`). The person still confirms it.
pub async fn show(
    req: HttpRequest,
    Page { session, .. }: Page,
    CurrentUser(user): CurrentUser,
    PageQuery(query): PageQuery<DeviceQuery>,
) -> Result<HttpResponse, PageError> {
    let Some(user) = user else {
        // Back here after signing in, the code still filled in.
        let return_to = req
            .uri()
            .path_and_query()
            .map_or("/device", |p| p.as_str())
            .to_owned();
        return Err(PageError::SignInRequired { return_to });
    };
    let user_code = query
        .user_code
        .map(|typed| UserCode::parse(&typed).map_or(typed, |code| code.to_string()))
        .unwrap_or_default();
    device_page(&session, &user, user_code, StatusCode::OK, None)
}

#[derive(Deserialize)]
pub struct CodeForm {
    user_code: String,
}

/// `POST /device`: a code entered. Wrong codes are throttled per session and
/// per client IP (RFC 8628 §5.1): past either allowance, no code is looked up
/// until some allowance comes back, the right one included.
pub async fn enter(
    req: HttpRequest,
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
    form: PageForm<CodeForm>,
) -> Result<HttpResponse, PageError> {
    let Ok(form) = form.or_flashed(&session) else {
        return Ok(see_other("/device"));
    };
    let session_id = session::authentication(&session)
        .map(|signed_in| signed_in.session_id)
        .ok_or_else(|| {
            PageError::Unexpected(anyhow::anyhow!("a signed-in session without its id"))
        })?;
    let ip = client_ip(&req);
    let wrong_codes = state.rate_limits.wrong_user_codes();
    if let Err(wait) = wrong_codes.admit(&session_id, ip) {
        let secs = wait.as_secs() + 1;
        let message = format!(
            "Too many wrong codes were entered from this browser or this network. Wait {secs} \
             seconds, then enter the code again."
        );
        let mut answer = device_page(
            &session,
            &user,
            form.user_code,
            StatusCode::TOO_MANY_REQUESTS,
            Some(message),
        )?;
        if let Ok(value) = header::HeaderValue::from_str(&secs.to_string()) {
            answer.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return Ok(answer);
    }
    let found = match UserCode::parse(&form.user_code) {
        Some(code) => device::pending(state.store.as_ref(), &code)
            .await?
            .map(|pending| (code, pending)),
        None => None,
    };
    let Some((code, pending)) = found else {
        // Counted whatever the reason: a malformed code is a wrong one too.
        wrong_codes.failed(&session_id, ip);
        session::flash(&session, WRONG_CODE);
        return Ok(see_other("/device"));
    };
    if pending.app_suspended {
        return Err(PageError::Forbidden(
            "The app that asks is suspended, so it cannot be allowed.".to_owned(),
        ));
    }
    session
        .insert(ENTERED, code.to_string())
        .map_err(|e| PageError::Unexpected(anyhow::anyhow!("session: {e}")))?;
    Ok(see_other("/device/consent"))
}

/// The code entered at `/device` in this session, if any.
fn entered(session: &Session) -> Option<UserCode> {
    session
        .get::<String>(ENTERED)
        .ok()
        .flatten()
        .and_then(|code| UserCode::parse(&code))
}

/// `GET /device/consent`: the consent page for the code entered, naming the
/// app and saying a device asks.
pub async fn consent(
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let Some(code) = entered(&session) else {
        return Ok(see_other("/device"));
    };
    let Some(pending) = device::pending(state.store.as_ref(), &code).await? else {
        session.remove(ENTERED);
        session::flash(&session, NO_LONGER_PENDING);
        return Ok(see_other("/device"));
    };
    let template = ConsentPage {
        csrf_token: session::csrf_token(&session)?,
        username: user.username.clone(),
        app_name: pending.app_name.clone(),
        app_description: pending.app_description.clone(),
        site_url: pending.site_url.clone(),
        scopes: device::scopes(&pending)?
            .iter()
            .map(|s| (s.as_str(), s.description()))
            .collect(),
        redirect_origin: String::new(),
        hidden: Vec::new(),
        device_code: Some(code.to_string()),
    };
    page(StatusCode::OK, &template)
}

/// `POST /device/consent`: Allow or Deny, for the code entered.
pub async fn decide(
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
    form: FormFields,
) -> Result<HttpResponse, PageError> {
    let Some(code) = entered(&session) else {
        session::flash(&session, NO_LONGER_PENDING);
        return Ok(see_other("/device"));
    };
    let allow = match form.get("decision") {
        Some("allow") => true,
        Some("deny") => false,
        _ => {
            return Err(PageError::BadRequest(
                "decision must be allow or deny".to_owned(),
            ))
        }
    };
    let store = state.store.as_ref();
    session.remove(ENTERED);
    let answered = match device::pending(store, &code).await? {
        None => None,
        Some(pending) if allow => {
            let signed_in = session::authentication(&session).ok_or_else(|| {
                PageError::Unexpected(anyhow::anyhow!("a signed-in session without its sign-in"))
            })?;
            device::allow(store, &user.id, &code, &pending, &signed_in)
                .await?
                .then(|| {
                    format!(
                        "Done: {} can now use your account on your device. You can close this \
                         page and go back to the device.",
                        pending.app_name
                    )
                })
        }
        Some(pending) => device::deny(store, &code).await?.then(|| {
            format!(
                "Denied: {} was not given access to your account. You can close this page.",
                pending.app_name
            )
        }),
    };
    match answered {
        Some(message) => {
            let _ = session.insert(DONE, message);
        }
        None => session::flash(&session, NO_LONGER_PENDING),
    }
    Ok(see_other("/device"))
}
