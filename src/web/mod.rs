//! The people's pages: sign-in, consent, the account page, errors. Server-rendered
//! with askama, usable without JavaScript, every page with the security headers
//! of SPEC §9.

pub mod account;
pub mod authorize;
pub mod demo;
pub mod developer;
pub mod device;
pub mod factors;
pub mod forms;
pub mod guard;
pub mod logout;
pub mod passkeys;
pub mod payments;
pub mod reveal;
pub mod session;
pub mod signin;
pub mod signup;
pub mod view;
pub mod webhooks;

pub use view::{page, secure, see_other, ErrorPage, HeadRequest, PageError};

use actix_web::error::UrlencodedError;
use actix_web::http::header;
use actix_web::middleware::from_fn;
use actix_web::{web, HttpResponse};

/// More page routes, registered inside the pages' scope beside the real ones
/// (a test registers a throwaway form there to show it is guarded).
pub type ExtraPages = fn(&mut web::ServiceConfig);

/// The origin-level pages (outside `/v1`): one scope that checks every form
/// POST and gives every answer the security headers (`guard`), plus the
/// stylesheet, which is cached. Its prefix is empty, so it must be registered
/// after the `/v1` scope: actix gives a request to the first scope that matches.
pub fn configure(cfg: &mut web::ServiceConfig, extra: ExtraPages) {
    cfg.route("/static/tally.css", web::get().to(stylesheet))
        .route("/static/passkeys.js", web::get().to(passkeys_script))
        .configure(passkeys::configure)
        .service(
            web::scope("")
                .wrap(from_fn(guard::check_forms))
                .wrap(from_fn(guard::page_headers))
                .configure(page_routes)
                .configure(extra)
                .default_service(web::to(not_found)),
        );
}

/// Registers page routes written one a line, `method "path" => handler`, each
/// as its own `cfg.route` (so another method on a page's path falls through to
/// `not_found`, like any unknown path).
macro_rules! page_routes {
    ($cfg:ident, $($method:ident $path:literal => $handler:path),+ $(,)?) => {
        $($cfg.route($path, web::$method().to($handler));)+
    };
}

fn page_routes(cfg: &mut web::ServiceConfig) {
    page_routes! {
        cfg,
        get "/signin" => signin::show,
        post "/signin" => signin::submit,
        get "/signin/second-factor" => factors::second_step,
        post "/signin/second-factor" => factors::second_step_submit,
        post "/signout" => signin::sign_out,
        get "/signup" => signup::show,
        post "/signup" => signup::submit,
        get "/verify" => signup::verify_page,
        post "/verify" => signup::verify,
        get "/account" => account::show,
        post "/account/profile" => account::update_profile,
        post "/account/contact" => account::update_contacts,
        post "/account/payments" => payments::send,
        post "/account/payments/{payment_id}" => payments::answer,
        post "/account/verification" => signup::resend,
        post "/account/apps/{client_id}/revoke" => account::revoke_app,
        post "/account/tokens/{grant_id}/revoke" => account::revoke_token,
        post "/account/password" => factors::change_password,
        post "/account/totp" => factors::begin_totp,
        get "/account/totp" => factors::show_totp,
        post "/account/totp/confirm" => factors::confirm_totp,
        post "/account/totp/remove" => factors::remove_totp,
        get "/account/recovery-codes" => factors::show_recovery_codes,
        post "/account/recovery-codes" => factors::new_recovery_codes,
        post "/account/passkeys/{credential_id}/remove" => passkeys::remove,
        get "/developer" => developer::show,
        post "/developer/apps" => developer::create_app,
        get "/developer/apps/{client_id}" => developer::show_app,
        post "/developer/apps/{client_id}" => developer::update_app,
        post "/developer/apps/{client_id}/secret" => developer::rotate_secret,
        post "/developer/apps/{client_id}/id-token-alg" => developer::set_id_token_alg,
        get "/developer/apps/{client_id}/webhooks" => webhooks::show,
        post "/developer/apps/{client_id}/webhooks" => webhooks::add,
        post "/developer/apps/{client_id}/webhooks/rotate" => webhooks::rotate,
        post "/developer/apps/{client_id}/webhooks/remove" => webhooks::remove,
        post "/developer/apps/{client_id}/webhooks/test" => webhooks::test,
        post "/developer/apps/{client_id}/webhooks/resend" => webhooks::resend,
        post "/developer/token" => developer::personal_token,
        get "/demo/callback" => demo::callback,
        get "/device" => device::show,
        post "/device" => device::enter,
        get "/device/consent" => device::consent,
        post "/device/consent" => device::decide,
    }
}

crate::api::routes::route_table! {
    /// The authorization server's pages under `/v1/oauth` (startup registers
    /// them in the OAuth scope, behind the OAuth rate limit, beside
    /// `api::OAUTH_ROUTES`): consent, and RP-initiated logout with its
    /// confirmation form, guarded like the other pages. One exception:
    /// `POST /logout` is an app's request, posted from the app's own page
    /// (RP-Initiated Logout 1.0 §2), so it has the page headers but not the
    /// form check; it ends a session only for an ID token hint of that very
    /// session, and asks on the confirmation page, whose form is checked.
    OAUTH_PAGE_ROUTES, configure_oauth,
    "/authorize" [guard::check_forms, guard::page_headers] => {
        get => authorize::show,
        post => authorize::decide,
    },
    "/logout" [guard::page_headers] => {
        get => logout::request,
        post => logout::request_form,
    },
    "/logout/confirm" [guard::check_forms, guard::page_headers] => {
        post => logout::confirm,
    },
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
        return Ok(see_other("/account"));
    }
    Err(PageError::NotFound(
        "There is no page at this address.".to_owned(),
    ))
}

const STYLESHEET: &str = include_str!("../../static/tally.css");

/// The one script of the pages (SPEC §11): the WebAuthn ceremonies. Served
/// from the origin, so `script-src 'self'` allows it; no page needs it but
/// for passkeys.
const PASSKEYS_SCRIPT: &str = include_str!("../../static/passkeys.js");

async fn passkeys_script() -> HttpResponse {
    static_file("text/javascript; charset=utf-8", PASSKEYS_SCRIPT)
}

async fn stylesheet() -> HttpResponse {
    static_file("text/css; charset=utf-8", STYLESHEET)
}

/// A file under `/static`: cached for an hour, never sniffed.
fn static_file(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(body)
}
