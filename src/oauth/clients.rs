//! Registered apps (OAuth clients): registration and secret rotation.

use super::credentials::{self, CredentialKind, IssuedCredential};
use crate::domain::{now_micros, RedirectUrl, RedirectUrlError};
use crate::store::{App, NewApp, Store, StoreError};

/// What a developer gives to register an app, parsed.
#[derive(Debug, Clone)]
pub struct AppDetails {
    pub name: String,
    pub description: String,
    pub redirect_url: RedirectUrl,
    pub site_url: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AppDetailsError {
    #[error("app name must be 1 to 100 characters long")]
    Name,
    #[error("app description must be at most 500 characters long")]
    Description,
    #[error(transparent)]
    RedirectUrl(#[from] RedirectUrlError),
    #[error("site URL must be an http(s) URL or a host name of at most 200 characters")]
    SiteUrl,
}

impl AppDetails {
    pub fn parse(
        name: &str,
        description: Option<&str>,
        redirect_url: &str,
        site_url: Option<&str>,
    ) -> Result<Self, AppDetailsError> {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(AppDetailsError::Name);
        }
        let description = description.unwrap_or("").trim();
        if description.chars().count() > 500 {
            return Err(AppDetailsError::Description);
        }
        let redirect_url = RedirectUrl::parse(redirect_url)?;
        let site_url = match site_url.map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(site) => Some(parse_site_url(site).ok_or(AppDetailsError::SiteUrl)?),
        };
        Ok(Self {
            name: name.to_owned(),
            description: description.to_owned(),
            redirect_url,
            site_url,
        })
    }
}

/// A site is an absolute http(s) URL; a bare host (or `host:port`) is read as
/// `https://` and it, and kept so. Any other scheme (`javascript:`, `data:`,
/// `ftp:`) is refused: the pages show the Site URL as a link.
fn parse_site_url(site: &str) -> Option<String> {
    if site.chars().count() > 200 {
        return None;
    }
    let absolute = if site.contains("://") {
        site.to_owned()
    } else {
        format!("https://{site}")
    };
    let url = url::Url::parse(&absolute).ok()?;
    let ok = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && url.username().is_empty()
        && url.password().is_none();
    ok.then_some(absolute)
}

#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("no such user: {0}")]
    UnknownOwner(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Registers an app for `owner_id`; the returned secret is shown once and only
/// its digest is kept.
#[tracing::instrument(skip_all, fields(owner_id))]
pub async fn register(
    store: &dyn Store,
    owner_id: &str,
    details: &AppDetails,
) -> Result<(App, IssuedCredential), StoreError> {
    let secret = credentials::generate(CredentialKind::ClientSecret);
    let app = store
        .insert_app(&NewApp {
            client_id: credentials::random_hex(16),
            secret_digest: secret.digest.clone(),
            name: details.name.clone(),
            description: details.description.clone(),
            redirect_url: Some(details.redirect_url.to_string()),
            site_url: details.site_url.clone(),
            owner_id: owner_id.to_owned(),
            created_at: now_micros(),
        })
        .await?;
    Ok((app, secret))
}
