//! `GET` and `POST /v1/oauth/authorize`: sign-in, consent and the redirect back
//! to the app. The decisions are `oauth::authorize`'s; this shows them.

use super::forms::FormFields;
use super::session::{self, CurrentUser, Page};
use super::signin::sign_in_page_for;
use super::view::{page, see_other, with_form_target, PageError};
use crate::domain::now_micros;
use crate::oauth::authorize::{self, AuthorizeParams, ValidRequest, Validation};
use crate::state::AppState;
use actix_session::Session;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use askama::Template;

/// The consent page, of an authorization request or (with `device_code`) of
/// a device's request entered at `/device`.
#[derive(Template)]
#[template(path = "consent.html")]
pub(super) struct ConsentPage {
    pub(super) csrf_token: String,
    pub(super) username: String,
    pub(super) app_name: String,
    pub(super) app_description: String,
    pub(super) site_url: Option<String>,
    pub(super) scopes: Vec<(&'static str, &'static str)>,
    pub(super) redirect_origin: String,
    pub(super) hidden: Vec<(&'static str, String)>,
    /// A device asks (RFC 8628): its user code, for the person to compare
    /// with the one the device shows. The form then answers `/device/consent`.
    pub(super) device_code: Option<String>,
}

/// The origin a redirect goes to, for the consent page's `form-action`.
fn redirect_origin(request: &ValidRequest) -> String {
    request.redirect.origin().ascii_serialization()
}

/// The request's fate before anyone is asked: an error page, or an error for
/// the app (sent only to a signed-in user), or a request to decide.
enum Checked {
    RedirectError { app_name: String, url: String },
    Valid(Box<ValidRequest>),
}

async fn validated(state: &AppState, params: &AuthorizeParams) -> Result<Checked, PageError> {
    match authorize::validate(state.store.as_ref(), params, &state.public_origin).await? {
        Validation::ErrorPage(message) => Err(PageError::BadRequest(message)),
        Validation::RedirectError { app_name, url } => Ok(Checked::RedirectError {
            app_name,
            url: url.into(),
        }),
        Validation::Valid(request) => Ok(Checked::Valid(request)),
    }
}

pub async fn show(
    req: HttpRequest,
    Page { state, session }: Page,
    CurrentUser(user): CurrentUser,
) -> Result<HttpResponse, PageError> {
    // Read as sent, so a repeated parameter is seen rather than overwritten.
    let params =
        AuthorizeParams::from_pairs(url::form_urlencoded::parse(req.query_string().as_bytes()));
    let checked = validated(&state, &params).await?;
    let issuer = &state.public_origin;
    let here = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let Some(user) = user else {
        let (app_name, hint) = match &checked {
            Checked::RedirectError { app_name, .. } => (app_name.clone(), None),
            Checked::Valid(request) => {
                // OpenID Connect `prompt=none`: no page may be shown.
                if request.oidc.prompt_none {
                    let url = request.refuse("login_required", "the user is not signed in", issuer);
                    return Ok(see_other(url.as_str()));
                }
                (request.app.name.clone(), request.oidc.login_hint.clone())
            }
        };
        return sign_in_page_for(&state, &session, here, Some(app_name), hint.as_deref());
    };
    let request = match checked {
        Checked::RedirectError { url, .. } => return Ok(see_other(&url)),
        Checked::Valid(request) => request,
    };
    let signed_in = authentication(&session)?;
    // `prompt=login` or `max_age`: the password again, even with a session.
    if request.wants_fresh_sign_in(signed_in.auth_time, now_micros())
        && !session::signed_in_again(&session)
    {
        let hint = request
            .oidc
            .login_hint
            .clone()
            .unwrap_or_else(|| user.username.clone());
        let why = "the sign-in is older than max_age";
        return sign_in_again(&state, &session, here, &request, why, &hint);
    }
    // `acr_values=mfa` (SPEC §11): only an account with a second factor,
    // signed in with it; a session signed in without it signs in again.
    if request.wants_mfa() {
        let has_factor = state.store.factors(&user.id).await?.any();
        if let Some(url) = request.refusal_for_user(issuer, has_factor) {
            return Ok(see_other(url.as_str()));
        }
        if !signed_in.is_multi_factor() {
            let why = "the sign-in used no second factor, and acr_values asks for one";
            return sign_in_again(&state, &session, here, &request, why, &user.username);
        }
    }
    let store = state.store.as_ref();
    if !authorize::needs_consent(store, &user.id, &request).await? {
        let url = authorize::approve(store, &user.id, &request, issuer, &signed_in).await?;
        return Ok(see_other(url.as_str()));
    }
    if request.oidc.prompt_none {
        let url = request.refuse(
            "consent_required",
            "the user has not allowed this request yet",
            issuer,
        );
        return Ok(see_other(url.as_str()));
    }
    let template = ConsentPage {
        csrf_token: session::csrf_token(&session)?,
        username: user.username.clone(),
        app_name: request.app.name.clone(),
        app_description: request.app.description.clone(),
        site_url: request.app.site_url.clone(),
        scopes: request
            .scopes
            .iter()
            .map(|s| (s.as_str(), s.description()))
            .collect(),
        redirect_origin: redirect_origin(&request),
        hidden: request.form_fields(),
        device_code: None,
    };
    Ok(with_form_target(
        page(StatusCode::OK, &template)?,
        redirect_origin(&request),
    ))
}

/// A signed-in user whose sign-in does not do for `request`: with
/// `prompt=none` the app is told `login_required` (`why`); otherwise the user
/// signs in again, the username `hint` filled in.
fn sign_in_again(
    state: &AppState,
    session: &Session,
    here: String,
    request: &ValidRequest,
    why: &str,
    hint: &str,
) -> Result<HttpResponse, PageError> {
    if request.oidc.prompt_none {
        let url = request.refuse("login_required", why, &state.public_origin);
        return Ok(see_other(url.as_str()));
    }
    session::ask_to_sign_in_again(session)?;
    sign_in_page_for(
        state,
        session,
        here,
        Some(request.app.name.clone()),
        Some(hint),
    )
}

pub async fn decide(
    state: web::Data<AppState>,
    session: Session,
    form: FormFields,
    CurrentUser(user): CurrentUser,
) -> Result<HttpResponse, PageError> {
    let params = AuthorizeParams::from_pairs(form.0.iter().map(|(n, v)| (n, v.clone())));
    let checked = validated(&state, &params).await?;
    let Some(user) = user else {
        return Err(PageError::Forbidden(
            "You are no longer signed in. Go back to the app and start again.".to_owned(),
        ));
    };
    let request = match checked {
        Checked::RedirectError { url, .. } => return Ok(see_other(&url)),
        Checked::Valid(request) => request,
    };
    let target = redirect_origin(&request);
    let signed_in = authentication(&session)?;
    let has_factor = if request.wants_mfa() {
        state.store.factors(&user.id).await?.any()
    } else {
        false
    };
    let url = match form.get("decision") {
        Some("allow") => match request.refusal_for_user(&state.public_origin, has_factor) {
            Some(refused) => refused,
            None if request.wants_mfa() && !signed_in.is_multi_factor() => request.refuse(
                "access_denied",
                "acr_values asks for a second factor, and this sign-in used none",
                &state.public_origin,
            ),
            None => {
                authorize::approve(
                    state.store.as_ref(),
                    &user.id,
                    &request,
                    &state.public_origin,
                    &signed_in,
                )
                .await?
            }
        },
        Some("deny") => authorize::deny(&request, &state.public_origin),
        _ => {
            return Err(PageError::BadRequest(
                "decision must be allow or deny".to_owned(),
            ))
        }
    };
    Ok(with_form_target(see_other(url.as_str()), target))
}

/// The sign-in behind a signed-in session.
fn authentication(session: &Session) -> Result<authorize::Authentication, PageError> {
    session::authentication(session).ok_or_else(|| {
        PageError::Unexpected(anyhow::anyhow!("a signed-in session without its sign-in"))
    })
}
