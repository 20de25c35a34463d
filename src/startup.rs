//! Builds the application: opens the store, binds the listener (port 0 works),
//! and registers every route.

use crate::api;
use crate::auth::password::PasswordHasher;
use crate::auth::usage::GrantUsage;
use crate::config::{Settings, TlsFiles};
use crate::demo;
use crate::edge;
use crate::limits::RateLimits;
use crate::mailer::Mailer;
use crate::oauth::introspection_cache::{ClientCache, IntrospectionCache, TokenCache};
use crate::state::{AppState, MAX_BODY_BYTES};
use crate::store::{self, Store};
use crate::telemetry;
use crate::web as pages;
use crate::workers;
use actix_session::config::{CookieContentSecurity, PersistentSession};
use actix_session::storage::CookieSessionStore;
use actix_session::SessionMiddleware;
use actix_web::cookie::{Key, SameSite};
use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{web, App, HttpServer};
use actix_web_prom::PrometheusMetricsBuilder;
use anyhow::Context;
use secrecy::ExposeSecret;
use secrecy::SecretString;
use sha2::{Digest, Sha512};
use std::net::TcpListener;
use std::sync::Arc;

/// Connects to the configured database and applies pending migrations.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    let store = store::connect(&settings.database_url)
        .await
        .context("cannot open the database named by TALLY_DATABASE_URL")?;
    store.migrate().await.context("cannot apply migrations")?;
    Ok(store)
}

/// `tally migrate`: applies pending migrations and says so.
pub async fn migrate(settings: &Settings) -> anyhow::Result<()> {
    let store = open_store(settings).await?;
    println!("migrations applied ({})", store.backend());
    Ok(())
}

/// `tally serve` (and `tally demo`, which first seeds the demo data and prints
/// how to use it): serves until stopped.
pub async fn serve(settings: Settings, with_demo: bool) -> anyhow::Result<()> {
    let store = open_store(&settings).await?;
    store
        .open_all_connections()
        .await
        .context("cannot open the database's connections")?;
    let app = Application::build_to_serve(settings, store.clone()).await?;
    if with_demo {
        let origin = app.public_origin();
        let demo = demo::seed(store.as_ref(), &PasswordHasher::new(2), origin).await?;
        demo.print(origin);
    }
    app.run_until_stopped().await?;
    Ok(())
}

/// The key that signs cookies and CSRF tokens: `TALLY_SECRET_KEY`, or on
/// SQLite the key file beside the database; never one kept in the database
/// (see `secret_key.rs`, which also moves out a key an older version kept there).
pub async fn resolve_secret_key(
    settings: &Settings,
    store: &dyn Store,
) -> anyhow::Result<SecretString> {
    crate::secret_key::resolve(settings, store).await
}

pub struct Application {
    port: u16,
    public_origin: String,
    server: Server,
    workers: tokio::task::JoinHandle<()>,
}

impl Application {
    /// Binds the listener and prepares the server; `run_until_stopped` runs it.
    pub async fn build(settings: Settings, store: Arc<dyn Store>) -> anyhow::Result<Self> {
        Self::build_with_extra_pages(settings, store, |_| {}).await
    }

    /// As `build`, for `tally serve`: first makes the ID token signing keys
    /// if the database has none (SPEC §10: on the first start), sealed under
    /// the secret key this application resolved, before a request is served.
    /// (Elsewhere the first sign-in that needs them makes them.)
    pub async fn build_to_serve(settings: Settings, store: Arc<dyn Store>) -> anyhow::Result<Self> {
        Self::build_inner(settings, store, |_| {}, true).await
    }

    /// As `build`, with `extra` page routes registered inside the pages' scope
    /// (tests use it to show that any page route is guarded).
    pub async fn build_with_extra_pages(
        settings: Settings,
        store: Arc<dyn Store>,
        extra: pages::ExtraPages,
    ) -> anyhow::Result<Self> {
        Self::build_inner(settings, store, extra, false).await
    }

    async fn build_inner(
        settings: Settings,
        store: Arc<dyn Store>,
        extra: pages::ExtraPages,
        first_signing_keys: bool,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(settings.listen)
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let bound = listener.local_addr()?;
        let public_origin = settings.public_origin(bound);
        let secret_key = resolve_secret_key(&settings, store.as_ref()).await?;
        let tls = settings.tls.as_ref().map(load_tls).transpose()?;

        let metrics = PrometheusMetricsBuilder::new("tally")
            .endpoint("/metrics")
            .mask_unmatched_patterns("UNMATCHED")
            .build()
            .map_err(|e| anyhow::anyhow!("cannot set up metrics: {e}"))?;
        // The session cookie is encrypted and signed with a key derived from the
        // deployment's secret key, so every instance reads every cookie.
        let cookie_key = Key::from(&Sha512::digest(secret_key.expose_secret().as_bytes()));
        let secure_cookies = public_origin.starts_with("https://");
        let signing_keys = crate::oauth::keys::KeyRing::new(&secret_key)?;
        let passkeys = crate::auth::passkeys::Passkeys::new(&public_origin)?;
        let mailer = Mailer::from_settings(&settings)?;
        let hasher = {
            let threads = PasswordHasher::threads_for_this_machine();
            let queue = settings
                .password_queue
                .unwrap_or(threads * crate::auth::password::QUEUE_PER_THREAD);
            PasswordHasher::with_queue(threads, queue)
        };
        let deliverer = crate::webhooks::delivery::Deliverer::new(
            store.clone(),
            secret_key.clone(),
            settings.webhook_allow_private,
            hasher.api_load(),
        )?;
        let workers = workers::spawn(store.clone(), (&settings).into(), deliverer);
        hasher
            .register_metrics(&metrics.registry)
            .map_err(|e| anyhow::anyhow!("cannot set up metrics: {e}"))?;
        let state = web::Data::new(AppState {
            rate_limits: RateLimits::new(
                settings.api_rate_limit,
                settings.oauth_rate_limit,
                settings.signup_rate_limit,
                settings.bad_token_rate_limit,
            ),
            store,
            settings: Arc::new(settings),
            public_origin: public_origin.clone(),
            secret_key,
            hasher,
            mailer,
            grant_usage: GrantUsage::default(),
            introspection_cache: IntrospectionCache::default(),
            token_cache: TokenCache::default(),
            client_cache: ClientCache::default(),
            signing_keys,
            passkeys,
        });

        if first_signing_keys {
            if let Err(e) = state
                .signing_keys
                .ensure_first_keys(state.store.as_ref())
                .await
            {
                workers.abort();
                return Err(anyhow::Error::from(e).context("cannot make the ID token signing keys"));
            }
        }
        let server = HttpServer::new(move || {
            let sessions =
                SessionMiddleware::builder(CookieSessionStore::default(), cookie_key.clone())
                    .cookie_name("tally_session".to_owned())
                    .cookie_secure(secure_cookies)
                    .cookie_http_only(true)
                    .cookie_same_site(SameSite::Lax)
                    .cookie_content_security(CookieContentSecurity::Private)
                    .session_lifecycle(PersistentSession::default().session_ttl(
                        actix_web::cookie::time::Duration::seconds(
                            pages::session::SESSION_TTL.as_secs() as i64,
                        ),
                    ))
                    .build();
            // Middleware registered last runs first: the access log sees the
            // request as sent (a HEAD stays HEAD in the log), and `/metrics`,
            // which the metrics middleware answers itself, is behind the HEAD rule.
            // The edge's refusals (unknown methods, bodies too large or too
            // slow) are counted in `/metrics`; nothing inside them, sessions
            // included, sees a request before its body has arrived whole.
            App::new()
                .wrap(sessions)
                .wrap(from_fn(edge::bounded_body))
                .wrap(from_fn(edge::known_methods))
                .wrap(metrics.clone())
                .wrap(from_fn(head_as_get))
                .wrap(from_fn(telemetry::access_log))
                .app_data(state.clone())
                .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
                .app_data(pages::form_config())
                .configure(|cfg| routes(cfg, extra))
                .default_service(web::to(pages::not_found))
        })
        .on_connect(pages::signin::remember_connection);
        let server = match tls {
            Some(config) => server.listen_rustls_0_23(listener, config)?,
            None => server.listen(listener)?,
        }
        .run();
        tracing::info!(%public_origin, "listening");
        Ok(Self {
            port: bound.port(),
            public_origin,
            server,
            workers,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn public_origin(&self) -> &str {
        &self.public_origin
    }

    /// Serves until the server stops, then stops the background workers.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let result = self.server.await;
        self.workers.abort();
        result
    }
}

/// Every route of the service. Everything under `/v1` lives in one scope (actix
/// gives a request to the first scope whose prefix matches); each area adds its
/// routes in its own `configure`. The pages' scope, whose prefix is empty, comes
/// last.
fn routes(cfg: &mut web::ServiceConfig, extra_pages: pages::ExtraPages) {
    cfg.route("/healthz", web::get().to(api::health::healthz))
        .route("/readyz", web::get().to(api::health::readyz))
        .route(
            "/.well-known/oauth-authorization-server",
            web::get().to(api::oauth::metadata),
        )
        .route(
            "/.well-known/openid-configuration",
            web::get().to(api::oidc::discovery),
        )
        .service(
            web::scope("/v1")
                .wrap(from_fn(api::no_store))
                .service(
                    web::scope("/oauth")
                        .wrap(from_fn(oauth_rate_limit))
                        .configure(pages::configure_oauth)
                        .configure(api::configure_oauth)
                        .default_service(web::to(api::not_found)),
                )
                .configure(api::configure)
                .default_service(web::to(api::not_found)),
        )
        .configure(|cfg| pages::configure(cfg, extra_pages));
}

/// Every GET route also answers HEAD (RFC 9110 §9.1, SPEC §2): the request is
/// routed as a GET, so status and headers are the GET's, and the HTTP layer,
/// which noted the method when it read the request, sends no body. One rule for
/// every route, pages and `/metrics` included, instead of a HEAD route each.
/// The request is marked (`HeadRequest`), so a page does not spend on it what
/// it shows only once.
async fn head_as_get(
    mut req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    if req.method() == actix_web::http::Method::HEAD {
        req.head_mut().method = actix_web::http::Method::GET;
        actix_web::HttpMessage::extensions_mut(&req).insert(pages::HeadRequest);
    }
    next.call(req).await
}

/// Per-client-IP limit on the OAuth endpoints (SPEC §9).
async fn oauth_rate_limit(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    let limited = req.app_data::<web::Data<AppState>>().and_then(|state| {
        let ip = pages::signin::client_ip(req.request());
        state.rate_limits.check_oauth(ip).err()
    });
    let Some(wait) = limited else {
        return next.call(req).await;
    };
    let retry_after_secs = wait.as_secs() + 1;
    // People open the authorize and logout URLs in a browser: they get a page. The JSON
    // endpoints answer in their own (RFC 6749) error shape.
    if req.path().ends_with("/authorize") || req.path().contains("/oauth/logout") {
        Err(pages::PageError::TooManyRequests { retry_after_secs }.into())
    } else {
        Err(api::oauth::OAuthError::rate_limited(retry_after_secs).into())
    }
}

fn load_tls(files: &TlsFiles) -> anyhow::Result<rustls::ServerConfig> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    };
    let certs = rustls_pemfile::certs(&mut read(&files.cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .context("TALLY_TLS_CERT holds no valid PEM certificate")?;
    let key = rustls_pemfile::private_key(&mut read(&files.key)?.as_slice())
        .context("TALLY_TLS_KEY holds no valid PEM key")?
        .context("TALLY_TLS_KEY holds no private key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("TLS certificate and key do not match")
}
