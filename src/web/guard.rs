//! What guards every page, so that no handler can forget it: the middleware
//! that checks each form POST (CSRF token and Origin) before any handler runs,
//! and the one that gives every answer the security headers. `web::configure`
//! wraps the pages' scope (and the consent page) in both; the sign-in check is
//! the `SignedIn`/`Developer` extractors of `session`.

use super::forms::FormFields;
use super::session;
use super::view::{secure, FormTarget, PageError};
use crate::state::AppState;
use actix_session::SessionExt;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage};

/// Every POST of the pages is a form: it is read here (the pages' size limit
/// and error pages), refused unless it carries the session's CSRF token and
/// comes from our own origin, and handed to the handler as [`FormFields`].
/// A path no route serves is left to the "not found" page.
pub async fn check_forms(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    if req.method() == Method::POST && req.match_pattern().is_some() {
        if let Err(refusal) = admit_form(&mut req).await {
            return Ok(req.error_response(refusal).map_into_right_body());
        }
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

async fn admit_form(req: &mut ServiceRequest) -> Result<(), actix_web::Error> {
    let fields = req
        .extract::<web::Form<Vec<(String, String)>>>()
        .await?
        .into_inner();
    let state = req
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| PageError::Unexpected(anyhow::anyhow!("no application state")))?;
    let presented = fields
        .iter()
        .find(|(name, _)| name == "csrf_token")
        .map(|(_, value)| value.as_str());
    session::check_form(req.request(), state, &req.get_session(), presented)?;
    req.extensions_mut().insert(FormFields(fields));
    Ok(())
}

/// The security headers (SPEC §9) on every answer, with the extra
/// `form-action` origin a handler named through [`FormTarget`].
pub async fn page_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let mut response = next.call(req).await?;
    let target = response
        .response()
        .extensions()
        .get::<FormTarget>()
        .map(|target| target.0.clone());
    secure(response.headers_mut(), target.as_deref());
    Ok(response)
}
