//! `GET` and `POST /v1/oauth/authorize`: sign-in, consent and the redirect back
//! to the app. The decisions are `oauth::authorize`'s; this shows them.

use super::forms::FormFields;
use super::session::{self, CurrentUser, Page};
use super::signin::sign_in_page;
use super::view::{page, see_other, with_form_target, PageError};
use crate::oauth::authorize::{self, AuthorizeParams, ValidRequest, Validation};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use askama::Template;

#[derive(Template)]
#[template(path = "consent.html")]
struct ConsentPage {
    csrf_token: String,
    username: String,
    app_name: String,
    app_description: String,
    site_url: Option<String>,
    scopes: Vec<(&'static str, &'static str)>,
    redirect_origin: String,
    hidden: Vec<(&'static str, String)>,
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
    let Some(user) = user else {
        let app_name = match &checked {
            Checked::RedirectError { app_name, .. } => app_name.clone(),
            Checked::Valid(request) => request.app.name.clone(),
        };
        let here = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        return sign_in_page(&session, here, Some(app_name));
    };
    let request = match checked {
        Checked::RedirectError { url, .. } => return Ok(see_other(&url)),
        Checked::Valid(request) => request,
    };
    let store = state.store.as_ref();
    if !authorize::needs_consent(store, &user.id, &request).await? {
        let url = authorize::approve(store, &user.id, &request, &state.public_origin).await?;
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
    };
    Ok(with_form_target(
        page(StatusCode::OK, &template)?,
        redirect_origin(&request),
    ))
}

pub async fn decide(
    state: web::Data<AppState>,
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
    let url = match form.get("decision") {
        Some("allow") => {
            authorize::approve(
                state.store.as_ref(),
                &user.id,
                &request,
                &state.public_origin,
            )
            .await?
        }
        Some("deny") => authorize::deny(&request, &state.public_origin),
        _ => {
            return Err(PageError::BadRequest(
                "decision must be allow or deny".to_owned(),
            ))
        }
    };
    Ok(with_form_target(see_other(url.as_str()), target))
}
