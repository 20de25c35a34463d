//! Logging through `tracing`, and the access log, which never shows a credential.

use crate::config::LogFormat;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use std::time::Instant;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Logs go to stderr, so commands that print
/// JSON keep stdout to themselves. Calling it twice is harmless.
pub fn init(filter: &str, format: LogFormat) {
    use std::io::IsTerminal;
    // sqlx reports every query and notice at info; keep them out unless asked for.
    let directives = format!("sqlx=warn,{filter}");
    let filter = EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Query parameters whose values are credentials.
const SECRET_PARAMETERS: &[&str] = &[
    "access_token",
    "refresh_token",
    "code",
    "code_verifier",
    "client_secret",
    "password",
    "token",
    "state",
    // The device grant's (RFC 8628): a user code in `/device?user_code=…`.
    "user_code",
    "device_code",
];

/// The request target with the value of every credential parameter replaced, so
/// it can be logged.
pub fn redact_target(path: &str, query: &str) -> String {
    if query.is_empty() {
        return path.to_owned();
    }
    let redacted: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(url::form_urlencoded::parse(query.as_bytes()).map(|(k, v)| {
            // Tally's own credentials are recognised by their prefix wherever
            // they appear, even under a misspelt or mangled name.
            if k.contains("tly_") {
                return ("REDACTED".into(), "REDACTED".into());
            }
            let hidden =
                SECRET_PARAMETERS.contains(&k.to_ascii_lowercase().as_str()) || v.contains("tly_");
            (k, if hidden { "REDACTED".into() } else { v })
        }))
        .finish();
    format!("{path}?{redacted}")
}

/// One line per request: method, redacted target, status and duration.
pub async fn access_log(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let method = req.method().clone();
    let target = redact_target(req.path(), req.query_string());
    // The connection's own address, as throttling uses: a client can write any
    // `Forwarded` or `X-Forwarded-For` header it likes (SPEC §9).
    let peer = req
        .peer_addr()
        .map_or_else(|| "-".to_owned(), |addr| addr.ip().to_string());
    let response = next.call(req).await;
    let status = match &response {
        Ok(res) => res.status().as_u16(),
        Err(e) => e.as_response_error().status_code().as_u16(),
    };
    tracing::info!(
        target: "tally::access",
        %method,
        target = %target,
        status,
        peer = %peer,
        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
}

#[cfg(test)]
mod tests {
    use super::redact_target;

    #[test]
    fn credentials_in_query_strings_are_redacted() {
        let line = redact_target(
            "/v1/me",
            "access_token=tly_at_abc&limit=5&CODE=tly_code_x&password=hunter2",
        );
        assert!(!line.contains("tly_at_abc"));
        assert!(!line.contains("tly_code_x"));
        assert!(!line.contains("hunter2"));
        assert!(line.contains("limit=5"));
        assert_eq!(redact_target("/healthz", ""), "/healthz");
        // A credential under a mangled name is still found by its prefix.
        for query in [
            "access_token%3Dtly_at_secret1",
            "access_token[]=tly_at_secret1",
            "x=tly_rt_secret1",
        ] {
            let line = redact_target("/v1/me", query);
            assert!(!line.contains("secret1"), "{query}: {line}");
        }
    }
}
