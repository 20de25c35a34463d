//! The rules every request meets before it is routed (SPEC §9): a method the
//! server does not know is answered 405 at once, and a body is bounded in size
//! (64 KiB: a larger `Content-Length` is refused before a byte of the body is
//! read) and in time (it must have arrived `Settings::body_deadline` after the
//! headers, or the answer is 408 and the connection is closed). A handler, the
//! sessions and the rate limits see only requests whose body has arrived whole.
//!
//! Each refusal is drawn in the shape of where it was sent: the REST API's
//! error object under `/v1`, the OAuth error object on the JSON endpoints under
//! `/v1/oauth`, an error page anywhere else (the consent page included).

use crate::api::oauth::OAuthError;
use crate::api::ApiError;
use crate::state::{AppState, BODY_DEADLINE, MAX_BODY_BYTES, SERVED_METHODS};
use crate::web::PageError;
use actix_web::body::{BodySize, BoxBody, EitherBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::{header, ConnectionType, Method};
use actix_web::middleware::Next;
use actix_web::web::{Bytes, BytesMut};
use actix_web::{HttpMessage, ResponseError};
use futures_util::StreamExt;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// The methods the server knows (RFC 9110 §9 and PATCH, RFC 5789). Any other is
/// answered 405 before routing and counted in `/metrics` under
/// [`OTHER_METHOD`], so no client can add a label value.
const KNOWN_METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::OPTIONS,
    Method::TRACE,
    Method::CONNECT,
];

/// The method label of every request whose method the server does not know.
pub const OTHER_METHOD: &str = "OTHER";

/// Why a request is answered at the edge.
#[derive(Debug)]
enum Refusal {
    UnknownMethod,
    TooLarge,
    TooSlow,
    Unreadable(PayloadError),
}

/// A method the server does not know is 405 with `Allow` (SPEC §9 allows 405
/// or 501; schema fuzzers and clients expect 405 for a method a resource does
/// not take), and is
/// renamed [`OTHER_METHOD`] first, so the metrics middleware, which reads the
/// method when the answer is made, labels it with that one name.
pub async fn known_methods<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    if KNOWN_METHODS.contains(req.method()) {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    }
    if let Ok(other) = Method::from_bytes(OTHER_METHOD.as_bytes()) {
        req.head_mut().method = other;
    }
    Ok(refuse(req, Refusal::UnknownMethod, None))
}

/// Reads the body whole before anything else sees the request: at most
/// `MAX_BODY_BYTES` (a larger `Content-Length` is refused on the header), and
/// within the deadline counted from the headers' arrival.
pub async fn bounded_body<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    let started = Instant::now();
    let mut payload = req.take_payload();
    if declared_length(&req).is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Ok(refuse(req, Refusal::TooLarge, Some(payload)));
    }
    if !matches!(payload, Payload::None) {
        let deadline = req
            .app_data::<actix_web::web::Data<AppState>>()
            .map_or(BODY_DEADLINE, |state| state.settings.body_deadline);
        match tokio::time::timeout_at(started + deadline, read_whole(&mut payload)).await {
            Ok(Ok(body)) if body.is_empty() => {}
            Ok(Ok(body)) => req.set_payload(payload_of(body)),
            Ok(Err(refusal)) => return Ok(refuse(req, refusal, Some(payload))),
            Err(_elapsed) => return Ok(refuse(req, Refusal::TooSlow, Some(payload))),
        }
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

/// The `Content-Length` the client declared, if any. (The HTTP layer has
/// already refused a malformed one.)
fn declared_length(req: &ServiceRequest) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn read_whole(payload: &mut Payload) -> Result<Bytes, Refusal> {
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|error| match error {
            PayloadError::Overflow => Refusal::TooLarge,
            other => Refusal::Unreadable(other),
        })?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(Refusal::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The body read, as the payload the handlers' extractors read.
fn payload_of(body: Bytes) -> Payload {
    let stream: Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, PayloadError>>>> =
        Box::pin(futures_util::stream::once(async move { Ok(body) }));
    Payload::from(stream)
}

/// An answer's body that keeps what is left of a refused request body until
/// the answer is sent: the HTTP layer, finding the request body unfinished and
/// still wanted, closes the connection after the answer. (A chunked body it
/// found dropped it would drain instead, at whatever pace the client likes.)
struct KeepingUnread {
    body: BoxBody,
    _unread: Option<Payload>,
}

impl MessageBody for KeepingUnread {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

/// The answer to a refused request, in the shape of the area it was sent to.
/// A body refused for its size or its pace also closes the connection: what
/// is left of the body is never read.
fn refuse<B>(
    req: ServiceRequest,
    refusal: Refusal,
    unread: Option<Payload>,
) -> ServiceResponse<EitherBody<B>> {
    let closes = matches!(refusal, Refusal::TooLarge | Refusal::TooSlow);
    let path = req.path();
    let in_api = path == "/v1" || path.starts_with("/v1/");
    // The token endpoints answer their POSTs in the OAuth shape; the consent
    // page (as the OAuth rate limit tells it) is a page; anything else under
    // `/v1/oauth` (`DELETE /access_token`, a 404, a 405) answers as the API.
    let oauth_page = path.starts_with("/v1/oauth/") && path.ends_with("/authorize");
    let oauth_json = req.method() == Method::POST && path.starts_with("/v1/oauth/") && !oauth_page;
    let api_error = || match &refusal {
        Refusal::UnknownMethod => ApiError::MethodNotAllowed {
            allow: SERVED_METHODS.to_owned(),
        },
        Refusal::TooLarge => ApiError::PayloadTooLarge,
        Refusal::TooSlow => ApiError::RequestTimeout,
        Refusal::Unreadable(error) => {
            ApiError::InvalidRequest(format!("cannot read the body: {error}"))
        }
    };
    let mut response = if oauth_json {
        OAuthError::refused_request(api_error()).error_response()
    } else if in_api && !oauth_page {
        api_error().error_response()
    } else {
        match &refusal {
            Refusal::UnknownMethod => PageError::UnknownMethod,
            Refusal::TooLarge => PageError::PayloadTooLarge,
            Refusal::TooSlow => PageError::RequestTimeout,
            Refusal::Unreadable(error) => {
                PageError::BadRequest(format!("The request cannot be read: {error}."))
            }
        }
        .error_response()
    };
    // Every answer under `/v1` carries it (SPEC §2); pages carry it already.
    if in_api {
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
    }
    if closes {
        response
            .head_mut()
            .set_connection_type(ConnectionType::Close);
    }
    let response = response.map_body(|_, body| KeepingUnread {
        body,
        _unread: unread.filter(|_| closes),
    });
    req.into_response(response)
        .map_into_boxed_body()
        .map_into_right_body()
}
