//! The Developer tab: a verified user's apps (create, edit, rotate the secret)
//! and personal access tokens for the user's own account.

use super::forms::{self, PageForm, PathId};
use super::reveal::{self, OnceSecret};
use super::session::{self, Developer, Page, SignedIn};
use super::view::{page, see_other, when, PageError};
use crate::config::DeveloperSignup;
use crate::domain::{Scope, ScopeSet};
use crate::oauth::clients::{self, AppDetails, AppDetailsError};
use crate::oauth::credentials::{self, CredentialKind};
use crate::oauth::keys::IdTokenAlg;
use crate::oauth::tokens;
use crate::store::{App, AppUpdate, User};
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, HttpResponse};
use askama::Template;
use futures_util::future::LocalBoxFuture;
use secrecy::ExposeSecret;
use serde::Deserialize;

const NEW_APP_FORM: &str = "new_app";
const EDIT_APP_FORM: &str = "edit_app";
/// Whose secret a personal access token is, for `reveal::take`.
const PERSONAL_TOKEN: &str = "personal-token";

/// SPEC §6: what a personal access token may do.
fn personal_scopes() -> impl Iterator<Item = Scope> {
    Scope::ALL.into_iter().filter(|s| s.personal())
}

pub struct AppRow {
    pub client_id: String,
    pub name: String,
    pub redirect_url: String,
    pub created: String,
    pub suspended: bool,
}

#[derive(Template)]
#[template(path = "developer.html")]
struct DeveloperPage {
    csrf_token: String,
    username: String,
    verified: bool,
    accepts_new_apps: bool,
    notice: Option<String>,
    apps: Vec<AppRow>,
    form: forms::FormState,
    personal_token: Option<OnceSecret>,
    personal_scopes: Vec<(&'static str, &'static str)>,
    public_origin: String,
}

pub async fn show(
    req: HttpRequest,
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let apps = if user.verified {
        state.store.apps_of_owner(&user.id).await?
    } else {
        Vec::new()
    };
    let template = DeveloperPage {
        csrf_token: session::csrf_token(&session)?,
        verified: user.verified,
        accepts_new_apps: state.settings.developer_signup == DeveloperSignup::Open,
        notice: session::take_flash(&session),
        apps: apps
            .into_iter()
            .map(|a| AppRow {
                created: when(a.created_at),
                redirect_url: a.redirect_url.unwrap_or_default(),
                client_id: a.client_id,
                name: a.name,
                suspended: a.suspended,
            })
            .collect(),
        form: forms::take(&session, NEW_APP_FORM).unwrap_or_default(),
        personal_token: reveal::take(&req, &state, &session, &user.id, PERSONAL_TOKEN).await?,
        personal_scopes: personal_scopes()
            .map(|s| (s.as_str(), s.description()))
            .collect(),
        public_origin: state.public_origin.clone(),
        username: user.username,
    };
    page(StatusCode::OK, &template)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AppForm {
    name: String,
    description: String,
    redirect_url: String,
    site_url: String,
}

/// The form's details, or the form with a clear message on every refused field
/// (each refused field is set aside and the rest checked again).
fn parse_app(form: &AppForm) -> Result<AppDetails, forms::FormState> {
    let mut state = forms::FormState::with_values(&[
        ("name", &form.name),
        ("description", &form.description),
        ("redirect_url", &form.redirect_url),
        ("site_url", &form.site_url),
    ]);
    let mut fields = [
        form.name.clone(),
        form.description.clone(),
        form.redirect_url.clone(),
        form.site_url.clone(),
    ];
    for _ in 0..fields.len() {
        let parsed = AppDetails::parse(&fields[0], Some(&fields[1]), &fields[2], Some(&fields[3]));
        let error = match parsed {
            Ok(details) if !state.has_errors() => return Ok(details),
            Ok(_) => return Err(state),
            Err(error) => error,
        };
        let (index, field, placeholder, message) = match &error {
            AppDetailsError::Name => (
                0,
                "name",
                "app",
                "App Name must be 1 to 100 characters long.".to_owned(),
            ),
            AppDetailsError::Description => (
                1,
                "description",
                "",
                "App Description must be at most 500 characters long.".to_owned(),
            ),
            AppDetailsError::RedirectUrl(e) => (
                2,
                "redirect_url",
                "https://app.example.com/",
                format!(
                    "Web Redirect URL: {e}. Give the full address your app receives people at, such as https://app.example.com/callback."
                ),
            ),
            AppDetailsError::SiteUrl => (
                3,
                "site_url",
                "",
                "Site URL must be an http(s) address such as https://app.example.com (a bare host name such as app.example.com is read as https://app.example.com), at most 200 characters.".to_owned(),
            ),
        };
        state.error(field, message);
        fields[index] = placeholder.to_owned();
    }
    Err(state)
}

pub async fn create_app(
    Page { state, session }: Page,
    _: super::factors::SteppedUp,
    form: PageForm<AppForm>,
    Developer(user): Developer,
) -> Result<HttpResponse, PageError> {
    if state.settings.developer_signup == DeveloperSignup::Closed {
        return Err(PageError::Forbidden(
            "Tally accepts no new apps at the moment. Apps that exist keep working.".to_owned(),
        ));
    }
    let details = form
        .parse_with(parse_app)
        .map_err(|refused| forms::refuse(&session, NEW_APP_FORM, &refused, "/developer#new-app"))?;
    let (app, secret) = clients::register(state.store.as_ref(), &user.id, &details).await?;
    reveal::show_once(
        &state,
        &session,
        &user.id,
        &app.client_id,
        "client secret",
        secret.expose(),
    )
    .await?;
    session::flash(&session, &format!("{} is registered.", app.name));
    Ok(see_other(&app_path(&app.client_id)))
}

fn app_path(client_id: &str) -> String {
    format!("/developer/apps/{client_id}")
}

/// The page for an app that is not the user's: another person's app looks
/// like none.
fn not_yours() -> PageError {
    PageError::NotFound("There is no such app among yours.".to_owned())
}

/// The developer's own app named in the path (`/developer/apps/{client_id}…`),
/// or a 404 page.
pub struct OwnApp {
    pub user: User,
    pub app: App,
}

impl FromRequest for OwnApp {
    type Error = PageError;
    type Future = LocalBoxFuture<'static, Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let client_id = PathId::from_request(req, payload);
        let developer = Developer::from_request(req, payload);
        let state = session::state_of(req);
        Box::pin(async move {
            let PathId(client_id) = client_id.await?;
            let Developer(user) = developer.await?;
            match state?.store.find_app(&client_id).await? {
                Some(app) if app.owner_id == user.id => Ok(Self { user, app }),
                _ => Err(not_yours()),
            }
        })
    }
}

#[derive(Template)]
#[template(path = "developer_app.html")]
struct AppPage {
    csrf_token: String,
    username: String,
    notice: Option<String>,
    app: App,
    created: String,
    secret: Option<OnceSecret>,
    form: forms::FormState,
    authorize_example: String,
    /// The algorithms of ID tokens (OpenID Connect), the app's one checked.
    id_token_algs: Vec<(&'static str, bool)>,
}

pub async fn show_app(
    req: HttpRequest,
    Page { state, session }: Page,
    OwnApp { user, app }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let form = forms::take(&session, EDIT_APP_FORM).unwrap_or_else(|| {
        forms::FormState::with_values(&[
            ("name", app.name.as_str()),
            ("description", app.description.as_str()),
            ("redirect_url", app.redirect_url.as_deref().unwrap_or("")),
            ("site_url", app.site_url.as_deref().unwrap_or("")),
        ])
    });
    let authorize_example = format!(
        "{}/v1/oauth/authorize?{}",
        state.public_origin,
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("client_id", &app.client_id)
            .append_pair("scope", "access_profile")
            .append_pair("response_type", "code")
            .finish()
    );
    let chosen = state
        .store
        .id_token_alg(&app.client_id)
        .await?
        .as_deref()
        .and_then(IdTokenAlg::parse)
        .unwrap_or(IdTokenAlg::DEFAULT);
    let template = AppPage {
        id_token_algs: IdTokenAlg::ALL
            .iter()
            .map(|a| (a.as_str(), *a == chosen))
            .collect(),
        csrf_token: session::csrf_token(&session)?,
        username: user.username,
        notice: session::take_flash(&session),
        created: when(app.created_at),
        secret: reveal::take(&req, &state, &session, &user.id, &app.client_id).await?,
        form,
        authorize_example,
        app,
    };
    page(StatusCode::OK, &template)
}

pub async fn update_app(
    Page { state, session }: Page,
    form: PageForm<AppForm>,
    PathId(client_id): PathId,
    Developer(user): Developer,
) -> Result<HttpResponse, PageError> {
    let details = form.parse_with(parse_app).map_err(|refused| {
        let location = format!("{}#edit", app_path(&client_id));
        forms::refuse(&session, EDIT_APP_FORM, &refused, &location)
    })?;
    let updated = state
        .store
        .update_own_app(
            &user.id,
            &client_id,
            &AppUpdate {
                name: details.name,
                description: details.description,
                redirect_url: Some(details.redirect_url.to_string()),
                site_url: details.site_url,
            },
        )
        .await?
        .ok_or_else(not_yours)?;
    session::flash(&session, &format!("{} is saved.", updated.name));
    Ok(see_other(&app_path(&client_id)))
}

#[derive(serde::Deserialize)]
pub struct IdTokenAlgForm {
    id_token_alg: String,
}

/// The algorithm of the app's ID tokens (SPEC §10): RS256, ES256 or EdDSA.
pub async fn set_id_token_alg(
    Page { state, session }: Page,
    form: PageForm<IdTokenAlgForm>,
    OwnApp { app, .. }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let Some(alg) = form
        .into_checked()
        .ok()
        .and_then(|f| IdTokenAlg::parse(&f.id_token_alg))
    else {
        return Err(PageError::BadRequest(
            "Choose RS256, ES256 or EdDSA.".to_owned(),
        ));
    };
    state
        .store
        .set_id_token_alg(&app.client_id, alg.as_str())
        .await?;
    session::flash(
        &session,
        &format!("{}'s ID tokens are now signed {}.", app.name, alg.as_str()),
    );
    Ok(see_other(&format!(
        "{}#id-tokens",
        app_path(&app.client_id)
    )))
}

/// A new client secret, shown once; the old one stops working at once.
pub async fn rotate_secret(
    Page { state, session }: Page,
    _: super::factors::SteppedUp,
    PathId(client_id): PathId,
    Developer(user): Developer,
) -> Result<HttpResponse, PageError> {
    let secret = credentials::generate(CredentialKind::ClientSecret);
    let replaced = state
        .store
        .replace_app_secret(&user.id, &client_id, &secret.digest)
        .await?;
    if !replaced {
        return Err(not_yours());
    }
    reveal::show_once(
        &state,
        &session,
        &user.id,
        &client_id,
        "new client secret",
        secret.expose(),
    )
    .await?;
    session::flash(
        &session,
        "The client secret is replaced; the old one no longer works.",
    );
    Ok(see_other(&app_path(&client_id)))
}

/// A personal access token for one's own account (SPEC §8), shown once.
pub async fn personal_token(
    Page { state, session }: Page,
    _: super::factors::SteppedUp,
    Developer(user): Developer,
) -> Result<HttpResponse, PageError> {
    let scopes = ScopeSet::from_scopes(personal_scopes());
    let token =
        tokens::issue_personal_access_token(state.store.as_ref(), &user.id, &scopes).await?;
    reveal::show_once(
        &state,
        &session,
        &user.id,
        PERSONAL_TOKEN,
        "personal access token",
        token.secret.expose_secret(),
    )
    .await?;
    Ok(see_other("/developer#token"))
}
