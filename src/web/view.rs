//! How a page answers: the security headers, rendering, the 303 that answers a
//! form, the error page, and small formatting shared by several pages.

use crate::verification::Links;
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use askama::Template;

/// A moment as people read it: `2026-11-21 14:03 UTC`.
pub fn when(micros: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default()
}

/// How a page words what became of the verification links it asked for.
pub struct LinksWording<'a> {
    /// No address waited for a link.
    pub nothing_to_send: &'a str,
    /// Links went out.
    pub sent: &'a str,
    /// Put before the addresses that had to wait, when no link went out.
    pub only_held: &'a str,
    pub failed: &'a str,
}

/// What became of the verification links, in the words of the page that asked.
pub fn links_message(links: &Links, wording: &LinksWording<'_>) -> String {
    let sent = match links {
        Links::Failed => return wording.failed.to_owned(),
        Links::Sent(sent) => sent,
    };
    match (sent.sent, sent.held.is_empty()) {
        (0, true) => wording.nothing_to_send.to_owned(),
        (_, true) => wording.sent.to_owned(),
        (0, false) => format!("{}{}", wording.only_held, held_message(&sent.held)),
        (_, false) => format!("{} {}", wording.sent, held_message(&sent.held)),
    }
}

/// What to tell about addresses that had too many links lately: when each
/// can have another.
fn held_message(held: &[(String, i64)]) -> String {
    let now = crate::domain::now_micros();
    held.iter()
        .map(|(address, next)| {
            let at = chrono::DateTime::<chrono::Utc>::from_timestamp_micros(*next)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                .unwrap_or_default();
            let seconds = (next.saturating_sub(now) + 999_999) / 1_000_000;
            format!(
                "A link to {address} was sent a moment ago or too often today (at most one a \
                 minute and ten a day), so none was sent now: you can ask for another at {at} \
                 (in {}).",
                humantime::format_duration(std::time::Duration::from_secs(
                    u64::try_from(seconds).unwrap_or(0)
                ))
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The headers every page and every answer to a form carries (`guard::page_headers`
/// adds them to every answer of the pages' scope). `form_target` is an extra
/// origin the page's forms may lead to: browsers apply `form-action` to the
/// redirect that answers a form, so the consent page names the app's.
pub fn secure(headers: &mut HeaderMap, form_target: Option<&str>) {
    let form_action = match form_target {
        Some(origin) => format!("'self' {origin}"),
        None => "'self'".to_owned(),
    };
    let policy = format!(
        "default-src 'self'; frame-ancestors 'none'; form-action {form_action}; base-uri 'none'"
    );
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    for (name, value) in [
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

/// An origin besides our own that the forms of a page (or the redirect that
/// answers a form) may lead to, for `form-action`: kept in the response's
/// extensions, read by `guard::page_headers`.
#[derive(Clone)]
pub struct FormTarget(pub String);

/// `response`, whose forms may also lead to `origin`.
pub fn with_form_target(mut response: HttpResponse, origin: String) -> HttpResponse {
    response.extensions_mut().insert(FormTarget(origin));
    response
}

/// Marks a request that came as HEAD (`startup` routes it as a GET): what a
/// page shows only once is not spent on it.
#[derive(Clone, Copy)]
pub struct HeadRequest;

/// Renders a page.
pub fn page(status: StatusCode, template: &impl Template) -> Result<HttpResponse, PageError> {
    let html = template
        .render()
        .map_err(|e| PageError::Unexpected(anyhow::anyhow!("template failed: {e}")))?;
    Ok(HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(html))
}

/// A 303 See Other, the answer to every form POST (and to GETs that move on).
pub fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage<'a> {
    pub title: &'a str,
    pub message: &'a str,
}

/// Errors of the pages, shown as an error page.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("{0}")]
    BadRequest(String),
    /// CSRF token or Origin refused.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The page needs a signed-in user: answered with a 303 to the sign-in
    /// page, which comes back to `return_to`.
    #[error("sign in first")]
    SignInRequired { return_to: String },
    /// A form with refused fields, kept in the session for its page: answered
    /// with a 303 back to the form at `location`.
    #[error("the form needs changes")]
    FormRefused { location: String },
    #[error("too many attempts; try again in {retry_after_secs} seconds")]
    TooManyRequests { retry_after_secs: u64 },
    #[error("the form is larger than 64 KiB")]
    PayloadTooLarge,
    /// The body had not arrived whole in time (SPEC §9).
    #[error("the form did not arrive in time; send it again")]
    RequestTimeout,
    /// A method the server knows for no resource (answered 405 with
    /// `Allow`, RFC 9110 §15.5.6).
    #[error("this server implements no such method")]
    UnknownMethod,
    #[error("send the form as the page does (application/x-www-form-urlencoded)")]
    UnsupportedMediaType,
    #[error("the service is unavailable; try again later")]
    Unavailable,
    /// The password hashing queue is full (SPEC §9).
    #[error("Too many people are signing in right now, so your password was not checked. Please try again in a few seconds.")]
    Busy,
    #[error("something went wrong on our side")]
    Unexpected(#[source] anyhow::Error),
    /// A sensitive action that needs a fresh second factor first (SPEC §11):
    /// answered with the confirmation page drawn here, which asks for one
    /// and then carries the action out.
    #[error("confirm with a second factor")]
    Confirm(String),
}

impl PageError {
    /// Too many attempts: try again after `wait`.
    pub fn wait(wait: std::time::Duration) -> Self {
        Self::TooManyRequests {
            retry_after_secs: wait.as_secs() + 1,
        }
    }
}

impl From<crate::store::StoreError> for PageError {
    fn from(error: crate::store::StoreError) -> Self {
        if error.warn_if_unavailable() {
            return Self::Unavailable;
        }
        Self::Unexpected(error.into())
    }
}

impl ResponseError for PageError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::SignInRequired { .. } | Self::FormRefused { .. } => StatusCode::SEE_OTHER,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UnknownMethod => StatusCode::METHOD_NOT_ALLOWED,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unavailable | Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Confirm(_) => StatusCode::OK,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Unexpected(cause) = self {
            tracing::error!(error = ?cause, "page failed");
        }
        let location = match self {
            Self::SignInRequired { return_to } => {
                let query = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("return_to", return_to)
                    .finish();
                Some(format!("/signin?{query}"))
            }
            Self::FormRefused { location } => Some(location.clone()),
            _ => None,
        };
        if let Some(location) = location {
            let mut response = see_other(&location);
            secure(response.headers_mut(), None);
            return response;
        }
        if let Self::Confirm(html) = self {
            let mut response = HttpResponse::Ok()
                .content_type("text/html; charset=utf-8")
                .body(html.clone());
            secure(response.headers_mut(), None);
            return response;
        }
        let title = match self {
            Self::BadRequest(_) => "This request cannot be served",
            Self::Forbidden(_) => "This form cannot be accepted",
            Self::NotFound(_) => "Not found",
            Self::SignInRequired { .. } => "Sign in first",
            Self::FormRefused { .. } => "This form needs changes",
            Self::TooManyRequests { .. } => "Too many attempts",
            Self::PayloadTooLarge | Self::UnsupportedMediaType | Self::RequestTimeout => {
                "This form cannot be accepted"
            }
            Self::UnknownMethod => "This request cannot be served",
            Self::Unavailable => "Tally is unavailable",
            Self::Busy => "Tally is busy",
            Self::Unexpected(_) => "Something went wrong",
            Self::Confirm(_) => "Confirm",
        };
        let message = self.to_string();
        let mut response = page(
            self.status_code(),
            &ErrorPage {
                title,
                message: &message,
            },
        )
        .unwrap_or_else(|_| HttpResponse::build(self.status_code()).body(message.clone()));
        // An error page may be drawn outside the pages' scope (the OAuth rate
        // limit answers before it): it carries the headers itself.
        secure(response.headers_mut(), None);
        let retry_after = match self {
            Self::TooManyRequests { retry_after_secs } => Some(*retry_after_secs),
            Self::Unavailable => Some(crate::api::UNAVAILABLE_RETRY_AFTER_SECS),
            Self::Busy => Some(crate::auth::password::Busy::RETRY_AFTER_SECS),
            _ => None,
        };
        if let Self::UnknownMethod = self {
            response.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static(crate::state::SERVED_METHODS),
            );
        }
        if let Some(secs) = retry_after {
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}
