//! The demo app's redirect URL: shows what an app receives, so that
//! `tally demo` can be tried with nothing but a browser.

use super::view::{page, PageError};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;

#[derive(Template)]
#[template(path = "demo_callback.html")]
struct DemoCallback {
    params: Vec<(String, String)>,
}

pub async fn callback(req: HttpRequest) -> Result<HttpResponse, PageError> {
    let params = super::forms::query_pairs(req.query_string())?;
    page(StatusCode::OK, &DemoCallback { params })
}
