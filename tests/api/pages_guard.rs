//! Every page is guarded without its handler doing anything (SPEC §9): a form
//! POST without the session's CSRF token, or from another origin, never
//! reaches a handler, and every answer carries the security headers. Shown on
//! a throwaway route registered in the real pages' scope. And a HEAD request
//! does not spend a secret shown once.

use crate::browser::{set, Browser, Page};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::oauth_fixture::fixture;
use crate::pages::{secret_on, signed_in, spawn, submit};
use actix_web::{web, HttpResponse};
use reqwest::header::ORIGIN;

on_both_backends!(
    a_new_page_form_is_refused_without_the_csrf_token_or_from_another_origin,
    a_head_request_does_not_spend_a_secret_shown_once,
);

const REACHED: &str = "the throwaway handler ran";

/// A page route that checks nothing itself.
fn throwaway(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/throwaway",
        web::post().to(|| async { HttpResponse::Ok().body(REACHED) }),
    );
}

fn assert_page_headers(page: &Page) {
    let policy = page.header("content-security-policy");
    assert!(
        policy.contains("frame-ancestors 'none'") && policy.contains("form-action 'self'"),
        "{policy:?}"
    );
    assert_eq!(page.header("x-frame-options"), "DENY");
    assert_eq!(page.header("referrer-policy"), "no-referrer");
    assert_eq!(page.header("cache-control"), "no-store");
    assert_eq!(page.header("x-content-type-options"), "nosniff");
}

async fn post(browser: &Browser, fields: &[(String, String)], origin: &str) -> Page {
    let response = browser
        .client
        .post(format!("{}/throwaway", browser.origin))
        .header(ORIGIN, origin)
        .form(fields)
        .send()
        .await
        .unwrap();
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

async fn a_new_page_form_is_refused_without_the_csrf_token_or_from_another_origin(
    backend: Backend,
) {
    let Some(app) = TestApp::spawn_with_pages(backend, |_| {}, throwaway).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    // A session with a CSRF token, as any page gives it.
    let signin = browser.get("/signin").await;
    assert_page_headers(&signin);
    let token = signin
        .form("/signin")
        .into_iter()
        .find(|(name, _)| name == "csrf_token")
        .map(|(_, value)| value)
        .expect("the sign-in form carries a CSRF token");
    let mut fields = vec![("note".to_owned(), "hello".to_owned())];

    let no_token = post(&browser, &fields, &app.origin).await;
    assert_eq!(no_token.status, 403, "{}", no_token.body);
    assert!(
        no_token.body.contains("The form has expired"),
        "{}",
        no_token.body
    );
    assert!(!no_token.body.contains(REACHED));
    assert_page_headers(&no_token);

    set(&mut fields, "csrf_token", "not-the-token");
    let wrong_token = post(&browser, &fields, &app.origin).await;
    assert_eq!(wrong_token.status, 403, "{}", wrong_token.body);
    assert_page_headers(&wrong_token);

    set(&mut fields, "csrf_token", &token);
    let foreign = post(&browser, &fields, "https://evil.example").await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    assert!(
        foreign.body.contains("sent from another site"),
        "{}",
        foreign.body
    );
    assert_page_headers(&foreign);

    let accepted = post(&browser, &fields, &app.origin).await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    assert_eq!(accepted.body, REACHED);
    assert_page_headers(&accepted);

    // A path no route serves stays a "not found" page, form or not.
    let nowhere = browser
        .client
        .post(format!("{}/no-such-page", browser.origin))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(nowhere.status(), 404);
}

/// A HEAD of the page that shows a secret once answers as the GET would, but
/// leaves the secret for the GET.
async fn head(browser: &Browser, path: &str) -> reqwest::StatusCode {
    browser
        .client
        .head(format!("{}{path}", browser.origin))
        .send()
        .await
        .unwrap()
        .status()
}

async fn a_head_request_does_not_spend_a_secret_shown_once(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;

    let page = browser.get("/developer").await;
    let mut fields = page.form("/developer/apps");
    set(&mut fields, "name", "Headless");
    set(
        &mut fields,
        "redirect_url",
        "https://headless.example.com/cb",
    );
    let answer = browser.post("/developer/apps", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let app_page = answer.location().unwrap();
    assert_eq!(head(&browser, &app_page).await, 200);
    let shown = browser.get(&app_page).await;
    let secret = secret_on(&shown, "client-secret").expect("the secret waited for the GET");
    assert!(secret.starts_with("tly_secret_"), "{secret}");

    let page = browser.get("/developer").await;
    let answer = submit(&browser, &page, "/developer/token", &[]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(head(&browser, "/developer").await, 200);
    let shown = browser.get("/developer").await;
    let token = secret_on(&shown, "personal-token").expect("the token waited for the GET");
    assert!(token.starts_with("tly_at_"), "{token}");
    // Shown once: gone now.
    assert!(secret_on(&browser.get("/developer").await, "personal-token").is_none());
}
