//! An app's webhook endpoints: adding one (its secret shown once), listing
//! them with their recent deliveries, rotating a secret, removing one,
//! sending a test event and resending one. The operator commands and the
//! Developer tab both call these.

use super::guard::{check_url, Refusal};
use super::{signing, MAX_ENDPOINTS, ROTATION_OVERLAP};
use crate::domain::{format_datetime, micros, new_id, EventFilter, UnknownEvent, TEST_EVENT};
use crate::store::{AttemptRow, EndpointRow, NewEndpoint, Store, StoreError};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;

/// How many of an endpoint's latest attempts a list shows.
pub const RECENT_ATTEMPTS: i64 = 20;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("no such app: {0}")]
    UnknownApp(String),
    #[error("no such endpoint: {0}")]
    UnknownEndpoint(String),
    #[error("no such event for this endpoint: {0}")]
    UnknownEvent(String),
    #[error(transparent)]
    BadEvents(#[from] UnknownEvent),
    #[error(transparent)]
    BadUrl(#[from] Refusal),
    #[error("an app has at most {MAX_ENDPOINTS} webhook endpoints")]
    TooMany,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

/// A new endpoint, with its secret (shown this once).
#[derive(Serialize)]
pub struct Added {
    pub id: String,
    pub url: String,
    pub events: Vec<&'static str>,
    #[serde(serialize_with = "expose")]
    pub secret: SecretString,
}

/// A rotated endpoint's new secret (shown this once).
#[derive(Serialize)]
pub struct Rotated {
    pub id: String,
    #[serde(serialize_with = "expose")]
    pub secret: SecretString,
    /// Until when the previous secret signs beside it.
    pub previous_signs_until: String,
}

fn expose<S: serde::Serializer>(secret: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(secret.expose_secret())
}

/// An endpoint as listed (never a secret).
#[derive(Debug, Serialize)]
pub struct EndpointView {
    pub id: String,
    pub url: String,
    pub events: Vec<&'static str>,
    pub enabled: bool,
    pub deliveries: Vec<DeliveryView>,
}

/// One attempt as listed.
#[derive(Debug, Serialize)]
pub struct DeliveryView {
    pub event_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub attempt: i64,
    /// The answer's status code; null when none came.
    pub answer: Option<i64>,
    pub at: String,
    /// Not in `admin … list --json` (SPEC §12's shape); the Developer tab shows them.
    #[serde(skip)]
    pub state: String,
    #[serde(skip)]
    pub error: Option<String>,
}

impl From<AttemptRow> for DeliveryView {
    fn from(row: AttemptRow) -> Self {
        Self {
            event_id: row.event_id,
            kind: row.kind,
            attempt: row.attempt,
            answer: row.answer,
            at: format_datetime(row.at),
            state: row.state,
            error: row.error,
        }
    }
}

/// The parsed URL of a new endpoint, refused at once when its form (or its
/// host, when an address) is not allowed.
fn endpoint_url(url: &str, allow_private: bool) -> Result<url::Url, Refusal> {
    let parsed = url::Url::parse(url.trim()).map_err(|e| Refusal::Invalid(e.to_string()))?;
    if parsed.fragment().is_some() {
        return Err(Refusal::Invalid("it has a fragment".to_owned()));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Refusal::Invalid("it holds credentials".to_owned()));
    }
    check_url(&parsed, allow_private)?;
    Ok(parsed)
}

async fn known_app(store: &dyn Store, client_id: &str) -> Result<(), WebhookError> {
    match store.find_app(client_id).await? {
        Some(_) => Ok(()),
        None => Err(WebhookError::UnknownApp(client_id.to_owned())),
    }
}

/// Adds an endpoint to an app: `events` a comma-separated list (none: every
/// event).
#[tracing::instrument(skip_all, fields(client_id))]
pub async fn add(
    store: &dyn Store,
    secret_key: &SecretString,
    client_id: &str,
    url: &str,
    events: Option<&str>,
    allow_private: bool,
    now: i64,
) -> Result<Added, WebhookError> {
    known_app(store, client_id).await?;
    let url = endpoint_url(url, allow_private)?;
    let events = EventFilter::parse(events)?;
    let id = new_id();
    let secret = signing::new_secret();
    let endpoint = NewEndpoint {
        id: id.clone(),
        client_id: client_id.to_owned(),
        url: url.to_string(),
        events: events.stored(),
        secret_sealed: signing::seal(secret_key, &id, &secret)?,
        created_at: now,
    };
    if !store.insert_endpoint(&endpoint, MAX_ENDPOINTS).await? {
        return Err(WebhookError::TooMany);
    }
    Ok(Added {
        id,
        url: endpoint.url,
        events: events.names(),
        secret,
    })
}

/// An app's endpoints, each with its latest attempts.
pub async fn list(store: &dyn Store, client_id: &str) -> Result<Vec<EndpointView>, WebhookError> {
    known_app(store, client_id).await?;
    let mut views = Vec::new();
    for endpoint in store.endpoints_of(client_id).await? {
        let deliveries = store
            .recent_attempts(&endpoint.id, RECENT_ATTEMPTS)
            .await?
            .into_iter()
            .map(DeliveryView::from)
            .collect();
        views.push(view(endpoint, deliveries));
    }
    Ok(views)
}

fn view(endpoint: EndpointRow, deliveries: Vec<DeliveryView>) -> EndpointView {
    EndpointView {
        enabled: endpoint.disabled_at.is_none(),
        events: EventFilter::from_stored(&endpoint.events).names(),
        id: endpoint.id,
        url: endpoint.url,
        deliveries,
    }
}

/// Gives an endpoint a new secret; the old one signs beside it for
/// [`ROTATION_OVERLAP`].
#[tracing::instrument(skip_all, fields(client_id, endpoint_id))]
pub async fn rotate(
    store: &dyn Store,
    secret_key: &SecretString,
    client_id: &str,
    endpoint_id: &str,
    now: i64,
) -> Result<Rotated, WebhookError> {
    known_app(store, client_id).await?;
    let secret = signing::new_secret();
    let sealed = signing::seal(secret_key, endpoint_id, &secret)?;
    let until = now.saturating_add(micros(ROTATION_OVERLAP));
    if !store
        .rotate_endpoint_secret(client_id, endpoint_id, &sealed, until)
        .await?
    {
        return Err(WebhookError::UnknownEndpoint(endpoint_id.to_owned()));
    }
    Ok(Rotated {
        id: endpoint_id.to_owned(),
        secret,
        previous_signs_until: format_datetime(until),
    })
}

/// Deletes an endpoint, with its deliveries.
#[tracing::instrument(skip_all, fields(client_id, endpoint_id))]
pub async fn remove(
    store: &dyn Store,
    client_id: &str,
    endpoint_id: &str,
) -> Result<(), WebhookError> {
    known_app(store, client_id).await?;
    if store.remove_endpoint(client_id, endpoint_id).await? {
        Ok(())
    } else {
        Err(WebhookError::UnknownEndpoint(endpoint_id.to_owned()))
    }
}

/// Sends a test event to one endpoint (whatever events it wants); its id.
#[tracing::instrument(skip_all, fields(client_id, endpoint_id))]
pub async fn send_test(
    store: &dyn Store,
    client_id: &str,
    endpoint_id: &str,
    now: i64,
) -> Result<String, WebhookError> {
    let event_id = format!("evt_test_{}", new_id());
    let body = serde_json::json!({
        "type": TEST_EVENT,
        "timestamp": format_datetime(now),
        "data": {"client_id": client_id, "endpoint_id": endpoint_id},
    })
    .to_string();
    if store
        .queue_test_event(client_id, endpoint_id, &event_id, &body, now)
        .await?
    {
        Ok(event_id)
    } else {
        Err(WebhookError::UnknownEndpoint(endpoint_id.to_owned()))
    }
}

/// Sends an event to the endpoint again: the same id and body.
#[tracing::instrument(skip_all, fields(client_id, endpoint_id, event_id))]
pub async fn resend(
    store: &dyn Store,
    client_id: &str,
    endpoint_id: &str,
    event_id: &str,
    now: i64,
) -> Result<(), WebhookError> {
    if store
        .resend_event(client_id, endpoint_id, event_id, now)
        .await?
    {
        Ok(())
    } else {
        Err(WebhookError::UnknownEvent(event_id.to_owned()))
    }
}
