//! The Developer tab's webhooks (SPEC §12): an app's endpoints with their
//! recent deliveries, adding one (its secret shown once), rotating its
//! secret, removing it, sending a test event and resending an event.

use super::developer::OwnApp;
use super::forms::PageForm;
use super::reveal::{self, OnceSecret};
use super::session::{self, Page};
use super::view::{page, see_other, PageError};
use crate::domain::{now_micros, EventType};
use crate::state::AppState;
use crate::store::User;
use crate::webhooks::endpoints::{self, EndpointView, WebhookError};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;
use secrecy::ExposeSecret;
use serde::Deserialize;

#[derive(Template)]
#[template(path = "developer_webhooks.html")]
struct WebhooksPage {
    csrf_token: String,
    username: String,
    notice: Option<String>,
    client_id: String,
    app_name: String,
    endpoints: Vec<EndpointView>,
    secret: Option<OnceSecret>,
    event_types: Vec<&'static str>,
    allow_http: bool,
}

fn webhooks_path(client_id: &str) -> String {
    format!("/developer/apps/{client_id}/webhooks")
}

/// Whose secret the page shows once: the app's newest endpoint secret.
fn reveal_owner(client_id: &str) -> String {
    format!("webhook:{client_id}")
}

/// A refusal of the webhook rules, worded for the page.
fn refused(error: WebhookError) -> PageError {
    match error {
        WebhookError::Store(e) => e.into(),
        WebhookError::Unexpected(e) => PageError::Unexpected(e),
        WebhookError::UnknownApp(_) | WebhookError::UnknownEndpoint(_) => {
            PageError::NotFound("There is no such endpoint among this app's.".to_owned())
        }
        other => PageError::BadRequest(format!("{other}.")),
    }
}

/// A form of a change to an app's endpoints, or a 400 page saying `unreadable`.
fn checked<T>(form: PageForm<T>, unreadable: &str) -> Result<T, PageError> {
    form.into_checked()
        .map_err(|_| PageError::BadRequest(unreadable.to_owned()))
}

/// Shows an endpoint's new secret once, on the app's webhooks page.
async fn show_secret(
    state: &AppState,
    session: &actix_session::Session,
    user: &User,
    client_id: &str,
    label: &str,
    secret: &secrecy::SecretString,
) -> Result<(), PageError> {
    let owner = reveal_owner(client_id);
    reveal::show_once(
        state,
        session,
        &user.id,
        &owner,
        label,
        secret.expose_secret(),
    )
    .await
}

/// Back to the app's webhooks page, saying `done`.
fn done(session: &actix_session::Session, client_id: &str, done: &str) -> HttpResponse {
    session::flash(session, done);
    see_other(&webhooks_path(client_id))
}

pub async fn show(
    req: HttpRequest,
    Page { state, session }: Page,
    OwnApp { user, app }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let endpoints = endpoints::list(state.store.as_ref(), &app.client_id)
        .await
        .map_err(refused)?;
    let template = WebhooksPage {
        csrf_token: session::csrf_token(&session)?,
        notice: session::take_flash(&session),
        secret: reveal::take(
            &req,
            &state,
            &session,
            &user.id,
            &reveal_owner(&app.client_id),
        )
        .await?,
        username: user.username,
        app_name: app.name,
        endpoints,
        event_types: EventType::ALL.iter().map(|e| e.as_str()).collect(),
        allow_http: state.settings.webhook_allow_private,
        client_id: app.client_id,
    };
    page(StatusCode::OK, &template)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AddForm {
    url: String,
    #[serde(rename = "payment.created")]
    created: Option<String>,
    #[serde(rename = "payment.settled")]
    settled: Option<String>,
    #[serde(rename = "payment.cancelled")]
    cancelled: Option<String>,
    #[serde(rename = "payment.failed")]
    failed: Option<String>,
    #[serde(rename = "payment.expired")]
    expired: Option<String>,
    #[serde(rename = "grant.revoked")]
    revoked: Option<String>,
}

impl AddForm {
    /// The events checked, comma-separated; none checked: every event.
    fn events(&self) -> String {
        [
            (&self.created, EventType::PaymentCreated),
            (&self.settled, EventType::PaymentSettled),
            (&self.cancelled, EventType::PaymentCancelled),
            (&self.failed, EventType::PaymentFailed),
            (&self.expired, EventType::PaymentExpired),
            (&self.revoked, EventType::GrantRevoked),
        ]
        .into_iter()
        .filter(|(checked, _)| checked.is_some())
        .map(|(_, event)| event.as_str())
        .collect::<Vec<_>>()
        .join(",")
    }
}

pub async fn add(
    Page { state, session }: Page,
    _: super::factors::SteppedUp,
    form: PageForm<AddForm>,
    OwnApp { user, app }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let form = checked(form, "The form could not be read.")?;
    let client_id = &app.client_id;
    let added = endpoints::add(
        state.store.as_ref(),
        &state.secret_key,
        client_id,
        &form.url,
        Some(&form.events()),
        state.settings.webhook_allow_private,
        now_micros(),
    )
    .await
    .map_err(refused)?;
    let label = "endpoint signing secret";
    show_secret(&state, &session, &user, client_id, label, &added.secret).await?;
    let message = format!("Events now go to {}.", added.url);
    Ok(done(&session, client_id, &message))
}

#[derive(Deserialize)]
pub struct EndpointForm {
    endpoint_id: String,
}

pub async fn rotate(
    Page { state, session }: Page,
    _: super::factors::SteppedUp,
    form: PageForm<EndpointForm>,
    OwnApp { user, app }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let form = checked(form, "Choose an endpoint.")?;
    let client_id = &app.client_id;
    let rotated = endpoints::rotate(
        state.store.as_ref(),
        &state.secret_key,
        client_id,
        &form.endpoint_id,
        now_micros(),
    )
    .await
    .map_err(refused)?;
    let label = "new endpoint signing secret";
    show_secret(&state, &session, &user, client_id, label, &rotated.secret).await?;
    let message = format!(
        "The endpoint has a new secret; the previous one also signs until {}.",
        rotated.previous_signs_until
    );
    Ok(done(&session, client_id, &message))
}

pub async fn remove(
    Page { state, session }: Page,
    form: PageForm<EndpointForm>,
    OwnApp { app, .. }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let form = checked(form, "Choose an endpoint.")?;
    endpoints::remove(state.store.as_ref(), &app.client_id, &form.endpoint_id)
        .await
        .map_err(refused)?;
    Ok(done(&session, &app.client_id, "The endpoint is removed."))
}

pub async fn test(
    Page { state, session }: Page,
    form: PageForm<EndpointForm>,
    OwnApp { app, .. }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let form = checked(form, "Choose an endpoint.")?;
    let event_id = endpoints::send_test(
        state.store.as_ref(),
        &app.client_id,
        &form.endpoint_id,
        now_micros(),
    )
    .await
    .map_err(refused)?;
    let message = format!("A test event ({event_id}) is on its way.");
    Ok(done(&session, &app.client_id, &message))
}

#[derive(Deserialize)]
pub struct ResendForm {
    endpoint_id: String,
    event_id: String,
}

pub async fn resend(
    Page { state, session }: Page,
    form: PageForm<ResendForm>,
    OwnApp { app, .. }: OwnApp,
) -> Result<HttpResponse, PageError> {
    let form = checked(form, "Choose an event.")?;
    endpoints::resend(
        state.store.as_ref(),
        &app.client_id,
        &form.endpoint_id,
        &form.event_id,
        now_micros(),
    )
    .await
    .map_err(refused)?;
    let message = format!("{} is sent again.", form.event_id);
    Ok(done(&session, &app.client_id, &message))
}
