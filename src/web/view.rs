//! How a page answers: the security headers, rendering, the 303 that answers a
//! form, the error page, and small formatting shared by several pages.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, HttpResponseBuilder, ResponseError};
use askama::Template;

/// A moment as people read it: `2026-11-21 14:03 UTC`.
pub fn when(micros: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default()
}

/// The headers every page and every answer to a form carries. `form_target` is
/// an extra origin the page's forms may lead to: browsers apply `form-action`
/// to the redirect that answers a form, so the consent page names the app's.
pub fn secure(builder: &mut HttpResponseBuilder, form_target: Option<&str>) {
    let form_action = match form_target {
        Some(origin) => format!("'self' {origin}"),
        None => "'self'".to_owned(),
    };
    builder
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            format!(
                "default-src 'self'; frame-ancestors 'none'; form-action {form_action}; base-uri 'none'"
            ),
        ))
        .insert_header((header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")))
        .insert_header((header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")))
        .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")));
}

/// Renders a page with the security headers.
pub fn page(
    status: StatusCode,
    template: &impl Template,
    form_target: Option<&str>,
) -> Result<HttpResponse, PageError> {
    let html = template
        .render()
        .map_err(|e| PageError::Unexpected(anyhow::anyhow!("template failed: {e}")))?;
    let mut builder = HttpResponse::build(status);
    secure(&mut builder, form_target);
    Ok(builder.content_type("text/html; charset=utf-8").body(html))
}

/// A 303 See Other, the answer to every form POST (and to GETs that move on).
pub fn see_other(location: &str, form_target: Option<&str>) -> HttpResponse {
    let mut builder = HttpResponse::SeeOther();
    secure(&mut builder, form_target);
    builder.insert_header((header::LOCATION, location)).finish()
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
    #[error("too many attempts; try again in {retry_after_secs} seconds")]
    TooManyRequests { retry_after_secs: u64 },
    #[error("the form is larger than 64 KiB")]
    PayloadTooLarge,
    #[error("send the form as the page does (application/x-www-form-urlencoded)")]
    UnsupportedMediaType,
    #[error("the service is unavailable; try again later")]
    Unavailable,
    #[error("something went wrong on our side")]
    Unexpected(#[source] anyhow::Error),
}

impl From<crate::store::StoreError> for PageError {
    fn from(error: crate::store::StoreError) -> Self {
        match error {
            crate::store::StoreError::Unavailable(e) => {
                tracing::warn!(error = %e, "database unavailable");
                Self::Unavailable
            }
            other => Self::Unexpected(other.into()),
        }
    }
}

impl ResponseError for PageError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::SignInRequired { .. } => StatusCode::SEE_OTHER,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Unexpected(cause) = self {
            tracing::error!(error = ?cause, "page failed");
        }
        if let Self::SignInRequired { return_to } = self {
            let query = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("return_to", return_to)
                .finish();
            return see_other(&format!("/signin?{query}"), None);
        }
        let title = match self {
            Self::BadRequest(_) => "This request cannot be served",
            Self::Forbidden(_) => "This form cannot be accepted",
            Self::NotFound(_) => "Not found",
            Self::SignInRequired { .. } => "Sign in first",
            Self::TooManyRequests { .. } => "Too many attempts",
            Self::PayloadTooLarge | Self::UnsupportedMediaType => "This form cannot be accepted",
            Self::Unavailable => "Tally is unavailable",
            Self::Unexpected(_) => "Something went wrong",
        };
        let message = self.to_string();
        let mut response = page(
            self.status_code(),
            &ErrorPage {
                title,
                message: &message,
            },
            None,
        )
        .unwrap_or_else(|_| HttpResponse::build(self.status_code()).body(message.clone()));
        let retry_after = match self {
            Self::TooManyRequests { retry_after_secs } => Some(*retry_after_secs),
            Self::Unavailable => Some(crate::api::UNAVAILABLE_RETRY_AFTER_SECS),
            _ => None,
        };
        if let Some(secs) = retry_after {
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}
