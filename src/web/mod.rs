//! The people's pages: sign-in, consent, the account page, errors. Server-rendered
//! with askama, usable without JavaScript, every page with the security headers
//! of SPEC §9.

pub mod account;
pub mod authorize;
pub mod demo;
pub mod developer;
pub mod forms;
pub mod payments;
pub mod reveal;
pub mod session;
pub mod signin;
pub mod signup;
pub mod view;

pub use view::{page, secure, see_other, ErrorPage, PageError};

use actix_web::error::UrlencodedError;
use actix_web::http::header;
use actix_web::{web, HttpResponse};

/// The origin-level pages (outside `/v1`).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/static/tally.css", web::get().to(stylesheet))
        .route("/signin", web::get().to(signin::show))
        .route("/signin", web::post().to(signin::submit))
        .route("/signout", web::post().to(signin::sign_out))
        .route("/signup", web::get().to(signup::show))
        .route("/signup", web::post().to(signup::submit))
        .route("/verify", web::get().to(signup::verify_page))
        .route("/verify", web::post().to(signup::verify))
        .route("/account", web::get().to(account::show))
        .route("/account/profile", web::post().to(account::update_profile))
        .route("/account/contact", web::post().to(account::update_contacts))
        .route("/account/payments", web::post().to(payments::send))
        .route(
            "/account/payments/{payment_id}",
            web::post().to(payments::answer),
        )
        .route("/account/verification", web::post().to(signup::resend))
        .route(
            "/account/apps/{client_id}/revoke",
            web::post().to(account::revoke_app),
        )
        .route(
            "/account/tokens/{grant_id}/revoke",
            web::post().to(account::revoke_token),
        )
        .route("/developer", web::get().to(developer::show))
        .route("/developer/apps", web::post().to(developer::create_app))
        .route(
            "/developer/apps/{client_id}",
            web::get().to(developer::show_app),
        )
        .route(
            "/developer/apps/{client_id}",
            web::post().to(developer::update_app),
        )
        .route(
            "/developer/apps/{client_id}/secret",
            web::post().to(developer::rotate_secret),
        )
        .route(
            "/developer/token",
            web::post().to(developer::personal_token),
        )
        .route("/demo/callback", web::get().to(demo::callback));
}

crate::api::routes::route_table! {
    /// The authorization server's page under `/v1/oauth` (startup registers it
    /// in the OAuth scope, behind the OAuth rate limit, beside `api::OAUTH_ROUTES`).
    OAUTH_PAGE_ROUTES, configure_oauth,
    "/authorize" => { get => authorize::show, post => authorize::decide },
}

/// Form bodies the pages cannot read get an error page (with the page headers),
/// not the framework's plain text; the size limit is the service's 64 KiB.
pub fn form_config() -> web::FormConfig {
    web::FormConfig::default()
        .limit(crate::state::MAX_BODY_BYTES)
        .error_handler(|error, _req| {
            match error {
                UrlencodedError::Overflow { .. } => PageError::PayloadTooLarge,
                UrlencodedError::ContentType => PageError::UnsupportedMediaType,
                other => PageError::BadRequest(format!("the form cannot be read: {other}")),
            }
            .into()
        })
}

/// Any path no route serves, outside `/v1`: the home page leads to the
/// account, anything else is a "not found" page.
pub async fn not_found(req: actix_web::HttpRequest) -> Result<HttpResponse, PageError> {
    if req.path() == "/" && req.method() == actix_web::http::Method::GET {
        return Ok(see_other("/account", None));
    }
    Err(PageError::NotFound(
        "There is no page at this address.".to_owned(),
    ))
}

const STYLESHEET: &str = include_str!("../../static/tally.css");

async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(STYLESHEET)
}
