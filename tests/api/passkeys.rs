//! Passkeys over HTTP (SPEC §11) with a software authenticator
//! (`webauthn-authenticator-rs`'s `SoftToken`, which answers as a browser's
//! authenticator would): registration, the second step after the password,
//! signing in alone, a wrong origin, a replayed sign count, the ceremony
//! endpoints' own checks, and no passkeys when the public URL is an IP
//! address.

use crate::browser::{set, Browser, Page};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::oauth_fixture::{fixture, Fixture, PASSWORD};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use webauthn_authenticator_rs::softtoken::SoftToken;
use webauthn_authenticator_rs::WebauthnAuthenticator;
use webauthn_rs::prelude::{CreationChallengeResponse, RequestChallengeResponse, Url};

on_both_backends!(
    a_user_adds_named_passkeys_and_the_first_comes_with_ten_recovery_codes,
    a_passkey_is_the_second_step_after_the_password,
    a_passkey_signs_in_alone_without_a_password,
    an_assertion_made_for_another_origin_is_refused,
    a_cloned_passkey_replaying_a_sign_count_is_refused,
    the_ceremony_endpoints_check_the_origin_the_csrf_token_and_the_session,
    passkeys_are_not_offered_when_the_public_url_is_an_ip_address,
    a_passkey_is_removed_and_the_last_factor_needs_the_password_and_a_code,
    past_the_rate_limit_the_ceremony_endpoints_answer_429_with_retry_after,
);

/// A server whose public URL names `localhost` (WebAuthn binds passkeys to a
/// host name; with an IP address none are offered).
pub(crate) async fn spawn_localhost(backend: Backend) -> Option<(TestApp, Fixture)> {
    spawn_localhost_with(backend, |_| {}).await
}

async fn spawn_localhost_with(
    backend: Backend,
    configure: impl FnOnce(&mut tally::config::Settings),
) -> Option<(TestApp, Fixture)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = TestApp::spawn_with(backend, |s| {
        s.listen = format!("127.0.0.1:{port}").parse().unwrap();
        s.public_url = Some(format!("http://localhost:{port}").parse().unwrap());
        configure(s);
    })
    .await?;
    let f = fixture(&app).await;
    Some((app, f))
}

fn origin_url(app: &TestApp) -> Url {
    Url::parse(&app.origin).unwrap()
}

fn csrf(page: &Page) -> String {
    let html = scraper::Html::parse_document(&page.body);
    let selector = scraper::Selector::parse("input[name=csrf_token]").unwrap();
    html.select(&selector)
        .next()
        .and_then(|e| e.value().attr("value"))
        .unwrap_or_else(|| panic!("no CSRF token in {}", page.body))
        .to_owned()
}

/// A ceremony call as the page's script makes it.
async fn call(browser: &Browser, path: &str, csrf: &str, body: &Value) -> (u16, Value) {
    let response = browser
        .client
        .post(format!("{}{path}", browser.origin))
        .header("Origin", &browser.origin)
        .header("X-CSRF-Token", csrf)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

async fn signed_in(app: &TestApp, f: &Fixture) -> Browser {
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/account"),
        "{}",
        answer.body
    );
    browser
}

/// A software authenticator that verifies its user.
fn authenticator() -> SoftToken {
    SoftToken::new(true).unwrap().0
}

/// Adds a passkey named `name` from the account page; the answer.
async fn add_passkey(app: &TestApp, browser: &Browser, token: &mut SoftToken, name: &str) -> Value {
    let account = browser.get("/account").await;
    let csrf = csrf(&account);
    let (status, options) = call(
        browser,
        "/account/passkeys/options",
        &csrf,
        &json!({ "name": name }),
    )
    .await;
    assert_eq!(status, 200, "{options}");
    assert_eq!(options["publicKey"]["attestation"], "none", "{options}");
    assert_eq!(options["publicKey"]["rp"]["id"], "localhost", "{options}");
    let options: CreationChallengeResponse = serde_json::from_value(options).unwrap();
    let credential = token.do_registration(origin_url(app), options).unwrap();
    let (status, answer) = call(
        browser,
        "/account/passkeys",
        &csrf,
        &serde_json::to_value(&credential).unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The assertion the authenticator makes for `options` at `origin`.
fn assertion(token: &mut SoftToken, origin: Url, options: Value) -> Value {
    let options: RequestChallengeResponse = serde_json::from_value(options).unwrap();
    serde_json::to_value(token.do_authentication(origin, options).unwrap()).unwrap()
}

/// A fresh browser that typed the right password: now at the second step.
async fn at_second_step(app: &TestApp, f: &Fixture) -> (Browser, String) {
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    let page = browser.get("/signin/second-factor").await;
    assert!(page.body.contains("/static/passkeys.js"), "{}", page.body);
    let token = csrf(&page);
    (browser, token)
}

/// The second step with the passkey: the status and answer of the assertion.
async fn second_step_with(
    app: &TestApp,
    f: &Fixture,
    token: &mut SoftToken,
    origin: Url,
) -> (Browser, u16, Value) {
    let (browser, csrf) = at_second_step(app, f).await;
    let (status, options) = call(&browser, "/signin/passkey/options", &csrf, &json!({})).await;
    assert_eq!(status, 200, "{options}");
    assert_eq!(
        options["publicKey"]["allowCredentials"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "after the password the options name the user's credentials: {options}"
    );
    let signed = assertion(token, origin, options);
    let (status, answer) = call(&browser, "/signin/passkey", &csrf, &signed).await;
    (browser, status, answer)
}

async fn a_user_adds_named_passkeys_and_the_first_comes_with_ten_recovery_codes(backend: Backend) {
    let Some((app, f)) = spawn_localhost(backend).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let account = browser.get("/account").await;
    assert!(
        account.body.contains("/static/passkeys.js"),
        "{}",
        account.body
    );
    let mut phone = authenticator();
    let first = add_passkey(&app, &browser, &mut phone, "My phone").await;
    assert_eq!(first["name"], "My phone");
    assert!(first["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(
        first["recovery_codes"].as_array().unwrap().len(),
        10,
        "{first}"
    );
    let mut key = authenticator();
    let second = add_passkey(&app, &browser, &mut key, "Desk key").await;
    assert!(second.get("recovery_codes").is_none(), "{second}");
    let account = browser.get("/account").await;
    let text = account.text();
    assert!(
        text.contains("My phone") && text.contains("Desk key"),
        "{}",
        account.body
    );
    // The same authenticator cannot register twice (its credential is excluded).
    let csrf = csrf(&account);
    let (_, options) = call(
        &browser,
        "/account/passkeys/options",
        &csrf,
        &json!({ "name": "again" }),
    )
    .await;
    let excluded = options["publicKey"]["excludeCredentials"]
        .as_array()
        .unwrap();
    assert_eq!(excluded.len(), 2, "{options}");
}

async fn a_passkey_is_the_second_step_after_the_password(backend: Backend) {
    let Some((app, f)) = spawn_localhost(backend).await else {
        return;
    };
    let mut token = authenticator();
    add_passkey(&app, &signed_in(&app, &f).await, &mut token, "Laptop").await;
    let (browser, status, answer) = second_step_with(&app, &f, &mut token, origin_url(&app)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["redirect"], "/account");
    assert_eq!(browser.get("/account").await.status, 200);
}

async fn a_passkey_signs_in_alone_without_a_password(backend: Backend) {
    let Some((app, f)) = spawn_localhost(backend).await else {
        return;
    };
    let mut token = authenticator();
    let added = add_passkey(&app, &signed_in(&app, &f).await, &mut token, "Laptop").await;
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    assert!(
        page.text().contains("Sign in with a passkey"),
        "{}",
        page.body
    );
    let csrf = csrf(&page);
    let (status, mut options) = call(&browser, "/signin/passkey/options", &csrf, &json!({})).await;
    assert_eq!(status, 200, "{options}");
    // Alone, the options name no credential: the authenticator finds its
    // own (a discoverable credential) and answers with its user handle. The
    // software token keeps no resident credentials, so it is handed its id
    // here and the user handle is added to its answer, as a discoverable
    // authenticator gives both (neither is signed).
    assert!(options["publicKey"]["allowCredentials"]
        .as_array()
        .is_none_or(Vec::is_empty));
    options["publicKey"]["allowCredentials"] = json!([{ "type": "public-key", "id": added["id"] }]);
    let mut signed = assertion(&mut token, origin_url(&app), options);
    let handle = uuid::Uuid::parse_str(&f.user_id).unwrap();
    signed["response"]["userHandle"] = json!(URL_SAFE_NO_PAD.encode(handle.as_bytes()));
    let (status, answer) = call(
        &browser,
        "/signin/passkey?return_to=/developer",
        &csrf,
        &signed,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["redirect"], "/developer");
    assert_eq!(browser.get("/account").await.status, 200);
    // Another user's handle on this credential is refused.
    let other = Browser::new(&app.origin);
    let page = other.get("/signin").await;
    let csrf = crate::passkeys::csrf(&page);
    let (_, mut options) = call(&other, "/signin/passkey/options", &csrf, &json!({})).await;
    options["publicKey"]["allowCredentials"] = json!([{ "type": "public-key", "id": added["id"] }]);
    let mut signed = assertion(&mut token, origin_url(&app), options);
    let stranger = uuid::Uuid::now_v7();
    signed["response"]["userHandle"] = json!(URL_SAFE_NO_PAD.encode(stranger.as_bytes()));
    let (status, answer) = call(&other, "/signin/passkey", &csrf, &signed).await;
    assert_eq!(status, 401, "{answer}");
    assert!(answer["error"].is_string());
    assert_eq!(other.get("/account").await.status, 303);
}

async fn an_assertion_made_for_another_origin_is_refused(backend: Backend) {
    let Some((app, f)) = spawn_localhost(backend).await else {
        return;
    };
    let mut token = authenticator();
    add_passkey(&app, &signed_in(&app, &f).await, &mut token, "Laptop").await;
    let mut elsewhere = origin_url(&app);
    elsewhere
        .set_port(Some(elsewhere.port().unwrap() + 1))
        .unwrap();
    let (browser, status, answer) = second_step_with(&app, &f, &mut token, elsewhere).await;
    assert_eq!(status, 401, "{answer}");
    assert!(answer["error"].is_string(), "{answer}");
    assert_eq!(browser.get("/account").await.status, 303);
    // The right origin still works afterwards.
    let (_, status, answer) = second_step_with(&app, &f, &mut token, origin_url(&app)).await;
    assert_eq!(status, 200, "{answer}");
}

async fn a_cloned_passkey_replaying_a_sign_count_is_refused(backend: Backend) {
    let Some((app, f)) = spawn_localhost(backend).await else {
        return;
    };
    let mut token = authenticator();
    add_passkey(&app, &signed_in(&app, &f).await, &mut token, "Laptop").await;
    // A copy of the authenticator as it is now: its counter too.
    let mut clone = SoftToken::from_cbor(&token.to_cbor().unwrap()).unwrap();
    let (_, status, answer) = second_step_with(&app, &f, &mut token, origin_url(&app)).await;
    assert_eq!(status, 200, "{answer}");
    // The clone signs with the count the original used: refused.
    let (browser, status, answer) = second_step_with(&app, &f, &mut clone, origin_url(&app)).await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(browser.get("/account").await.status, 303);
    // The original goes on.
    let (_, status, answer) = second_step_with(&app, &f, &mut token, origin_url(&app)).await;
    assert_eq!(status, 200, "{answer}");
}

async fn the_ceremony_endpoints_check_the_origin_the_csrf_token_and_the_session(backend: Backend) {
    let Some((app, f)) = spawn_localhost(backend).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let account = browser.get("/account").await;
    let csrf = csrf(&account);
    let url = format!("{}/account/passkeys/options", app.origin);
    let body = json!({ "name": "x" });
    // No CSRF token, a wrong one, another origin: 403.
    for (token, origin) in [
        (None, app.origin.as_str()),
        (Some("wrong"), app.origin.as_str()),
        (Some(csrf.as_str()), "http://evil.example"),
    ] {
        let mut request = browser
            .client
            .post(&url)
            .header("Origin", origin)
            .json(&body);
        if let Some(token) = token {
            request = request.header("X-CSRF-Token", token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 403, "{token:?} {origin}");
        let answer: Value = response.json().await.unwrap();
        assert!(answer["error"].is_string(), "{answer}");
    }
    // Without a session, registration needs one.
    let stranger = Browser::new(&app.origin);
    let page = stranger.get("/signin").await;
    let (status, answer) = call(
        &stranger,
        "/account/passkeys/options",
        &crate::passkeys::csrf(&page),
        &body,
    )
    .await;
    assert_eq!(status, 401, "{answer}");
    // An answer without its ceremony is refused with JSON.
    let (status, answer) = call(&stranger, "/signin/passkey", &crate::passkeys::csrf(&page), &json!({
        "id": "AAAA", "rawId": "AAAA", "type": "public-key",
        "response": {"clientDataJSON": "AAAA", "authenticatorData": "AAAA", "signature": "AAAA"},
        "extensions": {}
    }))
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].is_string());
    // The script is served from the origin as JavaScript; the pages allow
    // only scripts from the origin.
    let script = browser.get("/static/passkeys.js").await;
    assert_eq!(script.status, 200);
    assert!(script.header("content-type").starts_with("text/javascript"));
    assert!(account
        .header("content-security-policy")
        .contains("default-src 'self'"));
    assert!(!account.body.contains("<script>"), "no inline script");
}

async fn passkeys_are_not_offered_when_the_public_url_is_an_ip_address(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let account = browser.get("/account").await;
    assert_eq!(account.status, 200);
    assert!(!account.body.contains("passkeys.js"), "{}", account.body);
    assert!(!account.text().contains("Passkeys"), "{}", account.body);
    let signin = Browser::new(&app.origin).get("/signin").await;
    assert!(!signin.text().contains("Sign in with a passkey"));
    let csrf = csrf(&account);
    for path in [
        "/account/passkeys/options",
        "/account/passkeys",
        "/signin/passkey/options",
        "/signin/passkey",
    ] {
        let (status, _) = call(&browser, path, &csrf, &json!({})).await;
        assert_eq!(status, 404, "{path}");
    }
    // Everything else works: the authenticator app, for one.
    let begun = browser
        .post("/account/totp", &account.form("/account/totp"))
        .await;
    assert_eq!(begun.location().as_deref(), Some("/account/totp"));
}

async fn a_passkey_is_removed_and_the_last_factor_needs_the_password_and_a_code(backend: Backend) {
    let Some((app, f)) = spawn_localhost(backend).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let mut one = authenticator();
    let mut two = authenticator();
    let first = add_passkey(&app, &browser, &mut one, "One").await;
    let codes: Vec<String> = first["recovery_codes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    let second = add_passkey(&app, &browser, &mut two, "Two").await;
    let id = |v: &Value| v["id"].as_str().unwrap().to_owned();
    // Two factors: one goes without more ado (this session used one lately).
    let account = browser.get("/account").await;
    let path = format!("/account/passkeys/{}/remove", id(&second));
    let removed = browser.post(&path, &account.form(&path)).await;
    assert_eq!(removed.status, 303, "{}", removed.body);
    let account = browser.get("/account").await;
    assert!(!account.text().contains("Two"), "{}", account.body);
    // The last one needs the password and a recovery code.
    let path = format!("/account/passkeys/{}/remove", id(&first));
    let mut fields = account.form(&path);
    set(&mut fields, "password", PASSWORD);
    set(&mut fields, "second_factor", "");
    browser.post(&path, &fields).await;
    let account = browser.get("/account").await;
    assert!(account.text().contains("One"), "{}", account.body);
    let mut fields = account.form(&path);
    set(&mut fields, "password", PASSWORD);
    set(&mut fields, "second_factor", &codes[0]);
    let removed = browser.post(&path, &fields).await;
    assert_eq!(removed.status, 303);
    let account = browser.get("/account").await;
    assert!(
        account.text().contains("You have no passkey"),
        "{}",
        account.body
    );
}

async fn past_the_rate_limit_the_ceremony_endpoints_answer_429_with_retry_after(backend: Backend) {
    let Some((app, _)) = spawn_localhost_with(backend, |s| {
        s.oauth_rate_limit = std::num::NonZeroU32::new(5).unwrap();
    })
    .await
    else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    let csrf = csrf(&page);
    let mut refused = None;
    for _ in 0..20 {
        let response = browser
            .client
            .post(format!("{}/signin/passkey/options", app.origin))
            .header("Origin", &app.origin)
            .header("X-CSRF-Token", &csrf)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        if response.status() == 429 {
            refused = Some(response);
            break;
        }
        assert_eq!(response.status(), 200);
    }
    let refused = refused.expect("the sign-in rate limit refuses the ceremony endpoints too");
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    let answer: Value = refused.json().await.unwrap();
    assert!(answer["error"].is_string(), "{answer}");
}
