//! Liveness and readiness probes at the origin.

use super::ApiError;
use crate::state::AppState;
use actix_web::{web, HttpResponse};
use std::time::Duration;

/// The process is up.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// The database answers within two seconds.
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    match tokio::time::timeout(Duration::from_secs(2), state.store.ping()).await {
        Ok(Ok(())) => Ok(HttpResponse::Ok().json(serde_json::json!({"status": "ready"}))),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness check failed");
            Err(ApiError::Unavailable)
        }
        Err(_) => Err(ApiError::Unavailable),
    }
}
