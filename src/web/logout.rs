//! `GET|POST /v1/oauth/logout` (OpenID Connect RP-Initiated Logout 1.0, SPEC
//! §10) and its confirmation form, `POST /v1/oauth/logout/confirm`. The
//! decisions are `oauth::logout`'s; this asks and shows.
//!
//! An app sends the browser to the logout endpoint from its own site, by a
//! link or by a form it posts (§2 allows both), so that POST carries no CSRF
//! token of ours and is not a form of our pages: `web::configure_oauth` gives
//! that resource the page headers but not the form check. It ends a session
//! only when the ID token hint matches it; anything else is asked on the
//! confirmation page, whose form is checked like every form of the pages.

use super::forms::FormFields;
use super::session::{self, Page};
use super::view::{page, see_other, with_form_target, HeadRequest, PageError};
use crate::oauth::id_token::session_sid;
use crate::oauth::keys::KeyError;
use crate::oauth::logout::{self, LogoutCheck, LogoutParams, LogoutRequest};
use crate::state::AppState;
use crate::store::User;
use actix_session::Session;
use actix_web::http::StatusCode;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use askama::Template;

#[derive(Template)]
#[template(path = "logout.html")]
struct ConfirmPage {
    csrf_token: String,
    username: String,
    app_name: Option<String>,
    return_origin: Option<String>,
    hidden: Vec<(&'static str, String)>,
}

#[derive(Template)]
#[template(path = "signed_out.html")]
struct SignedOutPage {
    app_name: Option<String>,
    /// The app gave a return address its redirect policy does not admit.
    return_refused: bool,
}

/// `GET /v1/oauth/logout`: the app's request, in the query.
pub async fn request(req: HttpRequest, page: Page) -> Result<HttpResponse, PageError> {
    let params =
        LogoutParams::from_pairs(url::form_urlencoded::parse(req.query_string().as_bytes()));
    answer(&req, page, &params).await
}

/// `POST /v1/oauth/logout`: the app's request, as a form its page posted.
pub async fn request_form(
    req: HttpRequest,
    page: Page,
    form: web::Form<Vec<(String, String)>>,
) -> Result<HttpResponse, PageError> {
    let params = LogoutParams::from_pairs(form.into_inner());
    answer(&req, page, &params).await
}

async fn answer(
    req: &HttpRequest,
    Page { state, session }: Page,
    params: &LogoutParams,
) -> Result<HttpResponse, PageError> {
    let request = checked(&state, params).await?;
    let Some(user) = session::current_user(&state, &session).await? else {
        // No session to end: nothing to ask.
        return done(&request);
    };
    // A HEAD is shown what a GET would ask, and ends nothing.
    let head = req.extensions().contains::<HeadRequest>();
    if !head && matches_session(&request, &user, &session) {
        session::sign_out(&state, &session).await?;
        return done(&request);
    }
    confirm_page(&session, &user, &request)
}

/// `POST /v1/oauth/logout/confirm`: the person's answer on the confirmation
/// page (its CSRF token checked by `guard::check_forms`).
pub async fn confirm(
    Page { state, session }: Page,
    form: FormFields,
) -> Result<HttpResponse, PageError> {
    let params = LogoutParams::from_pairs(form.0.iter().map(|(n, v)| (n, v.clone())));
    let request = checked(&state, &params).await?;
    match form.get("decision") {
        Some("sign_out") => {
            session::sign_out(&state, &session).await?;
            done(&request)
        }
        Some("stay") => Ok(see_other("/account")),
        _ => Err(PageError::BadRequest(
            "decision must be sign_out or stay".to_owned(),
        )),
    }
}

async fn checked(state: &AppState, params: &LogoutParams) -> Result<LogoutRequest, PageError> {
    match logout::check(
        state.store.as_ref(),
        &state.signing_keys,
        &state.public_origin,
        params,
    )
    .await
    {
        Ok(LogoutCheck::Valid(request)) => Ok(*request),
        Ok(LogoutCheck::ErrorPage(message)) => Err(PageError::BadRequest(message)),
        Err(KeyError::Store(e)) => Err(e.into()),
        Err(KeyError::Unexpected(e)) => Err(PageError::Unexpected(e)),
    }
}

/// The hint is an ID token of this very session: its user and its `sid`.
fn matches_session(request: &LogoutRequest, user: &User, session: &Session) -> bool {
    session::authentication(session).is_some_and(|signed_in| {
        request.matches_session(&user.id, &session_sid(&signed_in.session_id))
    })
}

/// Signed out: back to the app when its return address passes its redirect
/// policy, else the signed-out page.
fn done(request: &LogoutRequest) -> Result<HttpResponse, PageError> {
    if let Some(url) = &request.return_to {
        return Ok(see_other(url.as_str()));
    }
    page(
        StatusCode::OK,
        &SignedOutPage {
            app_name: request.app.as_ref().map(|a| a.name.clone()),
            return_refused: request.return_refused,
        },
    )
}

fn confirm_page(
    session: &Session,
    user: &User,
    request: &LogoutRequest,
) -> Result<HttpResponse, PageError> {
    let return_origin = request
        .return_to
        .as_ref()
        .map(|url| url.origin().ascii_serialization());
    let template = ConfirmPage {
        csrf_token: session::csrf_token(session)?,
        username: user.username.clone(),
        app_name: request.app.as_ref().map(|a| a.name.clone()),
        return_origin: return_origin.clone(),
        hidden: request.form_fields.clone(),
    };
    let response = page(StatusCode::OK, &template)?;
    // The answer to the form may lead to the app (`form-action`).
    Ok(match return_origin {
        Some(origin) => with_form_target(response, origin),
        None => response,
    })
}
