use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

/// How long a client should wait before retrying when the database is
/// unavailable (503): long enough for a fail-over or a lock to pass.
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 5;

/// Every error the REST API answers with; the status and wire code of each live
/// here and nowhere else (SPEC §7).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("missing parameter: {0}")]
    MissingParameter(&'static str),
    #[error("{0}")]
    InvalidAmount(String),
    #[error("{0}")]
    InvalidNote(String),
    #[error("{0}")]
    InvalidTarget(String),
    #[error("{0}")]
    InvalidAudience(String),
    #[error("the balance does not cover this payment")]
    InsufficientFunds,
    #[error("{0}")]
    InvalidToken(String),
    /// No token at all: a 401 whose challenge names no error (RFC 6750 §3.1).
    #[error("an access token is required")]
    MissingToken,
    #[error("the access token has expired")]
    TokenExpired,
    /// The scopes any one of which would do.
    #[error("this requires the scope {}", .0.join(" or "))]
    InsufficientScope(Vec<&'static str>),
    #[error("{0}")]
    ActionNotAllowed(String),
    #[error("the account or app is suspended")]
    AccountSuspended,
    #[error("not found")]
    NotFound,
    /// `allow` lists the path's methods, for the `Allow` header.
    #[error("method not allowed; this path takes {allow}")]
    MethodNotAllowed { allow: String },
    #[error("the payment is not pending")]
    InvalidState,
    #[error("this Idempotency-Key was used with other parameters")]
    IdempotencyConflict,
    #[error("the request body is larger than 64 KiB")]
    PayloadTooLarge,
    /// The body had not arrived whole `Settings::body_deadline` after the
    /// headers (SPEC §9).
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    #[error("send parameters as a query string, form fields or a JSON object")]
    UnsupportedMediaType,
    #[error("too many requests; retry later")]
    RateLimited { retry_after_secs: u64 },
    #[error("the database cannot be reached; retry later")]
    Unavailable,
    #[error("something went wrong on our side")]
    Unexpected(#[source] anyhow::Error),
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    message: String,
    code: &'a str,
}

impl ApiError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::MissingParameter(_) => "missing_parameter",
            Self::InvalidAmount(_) => "invalid_amount",
            Self::InvalidNote(_) => "invalid_note",
            Self::InvalidTarget(_) => "invalid_target",
            Self::InvalidAudience(_) => "invalid_audience",
            Self::InsufficientFunds => "insufficient_funds",
            Self::InvalidToken(_) | Self::MissingToken => "invalid_token",
            Self::TokenExpired => "token_expired",
            Self::InsufficientScope(_) => "insufficient_scope",
            Self::ActionNotAllowed(_) => "action_not_allowed",
            Self::AccountSuspended => "account_suspended",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::InvalidState => "invalid_state",
            Self::IdempotencyConflict => "idempotency_conflict",
            Self::PayloadTooLarge => "payload_too_large",
            Self::RequestTimeout => "request_timeout",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::RateLimited { .. } => "rate_limited",
            Self::Unavailable => "unavailable",
            Self::Unexpected(_) => "internal_error",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_)
            | Self::MissingParameter(_)
            | Self::InvalidAmount(_)
            | Self::InvalidNote(_)
            | Self::InvalidTarget(_)
            | Self::InvalidAudience(_)
            | Self::InsufficientFunds => StatusCode::BAD_REQUEST,
            Self::InvalidToken(_) | Self::MissingToken | Self::TokenExpired => {
                StatusCode::UNAUTHORIZED
            }
            Self::InsufficientScope(_) | Self::ActionNotAllowed(_) | Self::AccountSuspended => {
                StatusCode::FORBIDDEN
            }
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::InvalidState | Self::IdempotencyConflict => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::Unexpected(cause) = self {
            // The whole chain goes to the log; the client gets only the code.
            tracing::error!(error = ?cause, "request failed");
        }
        let mut response = HttpResponse::build(self.status_code());
        match self {
            // RFC 6750 §3: a 401 names the scheme and, when a token was sent,
            // the error; a 403 for scope names the scopes that would do.
            Self::MissingToken => {
                response.insert_header((header::WWW_AUTHENTICATE, r#"Bearer realm="tally""#));
            }
            Self::InsufficientScope(scopes) => {
                response.insert_header((
                    header::WWW_AUTHENTICATE,
                    format!(
                        r#"Bearer realm="tally", error="insufficient_scope", scope="{}""#,
                        scopes.join(" ")
                    ),
                ));
            }
            Self::InvalidToken(_) => {
                response.insert_header((
                    header::WWW_AUTHENTICATE,
                    r#"Bearer realm="tally", error="invalid_token""#,
                ));
            }
            Self::TokenExpired => {
                response.insert_header((
                    header::WWW_AUTHENTICATE,
                    r#"Bearer realm="tally", error="invalid_token", error_description="The access token expired""#,
                ));
            }
            Self::MethodNotAllowed { allow } => {
                response.insert_header((header::ALLOW, allow.as_str()));
            }
            Self::RateLimited { retry_after_secs } => {
                response.insert_header((header::RETRY_AFTER, retry_after_secs.to_string()));
            }
            Self::Unavailable => {
                response.insert_header((
                    header::RETRY_AFTER,
                    UNAVAILABLE_RETRY_AFTER_SECS.to_string(),
                ));
            }
            _ => {}
        }
        response.json(Envelope {
            error: Body {
                message: self.to_string(),
                code: self.code(),
            },
        })
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(error: crate::store::StoreError) -> Self {
        match error {
            crate::store::StoreError::NotFound(_) => Self::NotFound,
            other if other.warn_if_unavailable() => Self::Unavailable,
            other => Self::Unexpected(anyhow::Error::new(other)),
        }
    }
}
