//! The webhook commands: `admin app webhook add|list|rotate|remove`
//! (SPEC §12), over `webhooks::endpoints`.

use super::operations::AdminError;
use crate::domain::now_micros;
use crate::store::Store;
use crate::webhooks::endpoints::{self, Added, EndpointView, Rotated, WebhookError};
use secrecy::SecretString;
use serde::Serialize;

// A webhook command, as the command line gives it (`admin app webhook …`).
// (A `//` comment: clap would show a doc comment as the command's help.)
#[derive(Debug, Clone, clap::Subcommand)]
pub enum WebhookCommand {
    /// Add an endpoint; prints its signing secret (shown once).
    Add {
        client_id: String,
        url: String,
        /// The events it wants, comma-separated (by default every one).
        #[arg(long)]
        events: Option<String>,
    },
    /// List the app's endpoints and their recent deliveries (never a secret).
    List { client_id: String },
    /// Give an endpoint a new secret; the old one signs beside it for 24 hours.
    Rotate {
        client_id: String,
        endpoint_id: String,
    },
    /// Delete an endpoint.
    Remove {
        client_id: String,
        endpoint_id: String,
    },
}

impl From<WebhookError> for AdminError {
    fn from(error: WebhookError) -> Self {
        match error {
            WebhookError::UnknownApp(id) => Self::UnknownApp(id),
            WebhookError::Store(e) => e.into(),
            WebhookError::Unexpected(e) => Self::Unexpected(e),
            other @ (WebhookError::UnknownEndpoint(_)
            | WebhookError::UnknownEvent(_)
            | WebhookError::BadEvents(_)
            | WebhookError::BadUrl(_)
            | WebhookError::TooMany) => Self::Invalid(other.to_string()),
        }
    }
}

#[derive(Serialize)]
pub struct Listed {
    pub endpoints: Vec<EndpointView>,
}

#[derive(Serialize)]
pub struct Removed {
    pub id: String,
    pub removed: bool,
}

pub async fn webhook_add(
    store: &dyn Store,
    secret_key: &SecretString,
    allow_private: bool,
    client_id: &str,
    url: &str,
    events: Option<&str>,
) -> Result<Added, AdminError> {
    Ok(endpoints::add(
        store,
        secret_key,
        client_id,
        url,
        events,
        allow_private,
        now_micros(),
    )
    .await?)
}

pub async fn webhook_list(store: &dyn Store, client_id: &str) -> Result<Listed, AdminError> {
    Ok(Listed {
        endpoints: endpoints::list(store, client_id).await?,
    })
}

pub async fn webhook_rotate(
    store: &dyn Store,
    secret_key: &SecretString,
    client_id: &str,
    endpoint_id: &str,
) -> Result<Rotated, AdminError> {
    Ok(endpoints::rotate(store, secret_key, client_id, endpoint_id, now_micros()).await?)
}

pub async fn webhook_remove(
    store: &dyn Store,
    client_id: &str,
    endpoint_id: &str,
) -> Result<Removed, AdminError> {
    endpoints::remove(store, client_id, endpoint_id).await?;
    Ok(Removed {
        id: endpoint_id.to_owned(),
        removed: true,
    })
}
