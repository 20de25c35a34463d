//! `GET` and `POST /v1/oauth/authorize`: sign-in, consent and the redirect back
//! to the app. The decisions are `oauth::authorize`'s; this shows them.

use super::session;
use super::signin::sign_in_page;
use super::{page, see_other, PageError};
use crate::oauth::authorize::{self, AuthorizeParams, ValidRequest, Validation};
use crate::startup::AppState;
use actix_session::Session;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use askama::Template;
use std::collections::HashMap;

fn params_from(map: &HashMap<String, String>) -> AuthorizeParams {
    let get = |name: &str| map.get(name).cloned();
    AuthorizeParams {
        client_id: get("client_id"),
        scope: get("scope"),
        redirect_uri: get("redirect_uri"),
        response_type: get("response_type"),
        state: get("state"),
        code_challenge: get("code_challenge"),
        code_challenge_method: get("code_challenge_method"),
        prompt: get("prompt"),
    }
}

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

async fn validated(
    state: &AppState,
    map: &HashMap<String, String>,
) -> Result<Result<Box<ValidRequest>, HttpResponse>, PageError> {
    match authorize::validate(
        state.store.as_ref(),
        &params_from(map),
        &state.public_origin,
    )
    .await?
    {
        Validation::ErrorPage(message) => Err(PageError::BadRequest(message)),
        Validation::RedirectError(url) => Ok(Err(see_other(url.as_str(), None))),
        Validation::Valid(request) => Ok(Ok(request)),
    }
}

pub async fn show(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: Session,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, PageError> {
    let request = match validated(&state, &query).await? {
        Ok(request) => request,
        Err(redirect) => return Ok(redirect),
    };
    let Some(user) = session::current_user(&state, &session).await? else {
        let here = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        return sign_in_page(&session, here, Some(request.app.name.clone()));
    };
    let store = state.store.as_ref();
    if !authorize::needs_consent(store, &user.id, &request).await? {
        let url = authorize::approve(store, &user.id, &request, &state.public_origin).await?;
        return Ok(see_other(url.as_str(), None));
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
    page(StatusCode::OK, &template, Some(&redirect_origin(&request)))
}

pub async fn decide(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: Session,
    form: web::Form<HashMap<String, String>>,
) -> Result<HttpResponse, PageError> {
    session::check_form(
        &req,
        &state,
        &session,
        form.get("csrf_token").map(String::as_str),
    )?;
    let request = match validated(&state, &form).await? {
        Ok(request) => request,
        Err(redirect) => return Ok(redirect),
    };
    let Some(user) = session::current_user(&state, &session).await? else {
        return Err(PageError::Forbidden(
            "You are no longer signed in. Go back to the app and start again.".to_owned(),
        ));
    };
    let target = redirect_origin(&request);
    let url = match form.get("decision").map(String::as_str) {
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
    Ok(see_other(url.as_str(), Some(&target)))
}
