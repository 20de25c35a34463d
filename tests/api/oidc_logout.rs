//! RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0, SPEC §10)
//! over HTTP: which requests end the session at once, which are asked about
//! on the confirmation page, and where the browser goes afterwards.

use crate::browser::{query_of, set, Browser, Page};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::oauth_fixture::{fixture, Fixture};
use crate::oidc::{spawn_oidc, SECRET_KEY};
use crate::oidc_flow::{exchange, oidc_url, sign_in_and_allow, verify};
use base64::Engine;
use serde_json::Value;

on_both_backends!(
    an_id_token_hint_of_the_session_signs_out_at_once_and_returns_to_the_app_with_state,
    an_apps_page_may_post_the_logout_request_as_a_form,
    an_expired_id_token_hint_still_signs_its_session_out,
    without_a_hint_the_person_is_asked_and_only_the_checked_confirmation_form_signs_out,
    a_hint_we_did_not_sign_or_from_another_session_is_asked_about,
    a_return_address_the_apps_redirect_policy_refuses_gets_the_signed_out_page,
    a_client_id_other_than_the_hints_audience_is_refused_and_ends_nothing,
    a_browser_without_a_session_is_sent_back_only_to_an_address_its_app_admits,
);

/// Below the fixture's Web Redirect URL (`https://app.example.com/callback`),
/// so the redirect policy of SPEC §6 admits it.
const RETURN: &str = "https://app.example.com/callback/signed-out";

async fn spawn(backend: Backend) -> Option<(TestApp, Fixture)> {
    let app = spawn_oidc(backend).await?;
    let f = fixture(&app).await;
    Some((app, f))
}

/// A browser signed in to Tally through the app's OpenID Connect request,
/// and the ID token the app got.
async fn signed_in(app: &TestApp, f: &Fixture) -> (Browser, String) {
    let (browser, query) = sign_in_and_allow(app, f, &oidc_url(f, "openid", &[])).await;
    let body = exchange(app, f, &query["code"]).await;
    (browser, body["id_token"].as_str().unwrap().to_owned())
}

fn logout_url(params: &[(&str, &str)]) -> String {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    format!("/v1/oauth/logout?{query}")
}

/// Whether the browser's session still signs it in.
async fn is_signed_in(browser: &Browser) -> bool {
    let account = browser.get("/account").await;
    match account.status.as_u16() {
        200 => true,
        303 => {
            assert!(account.location().unwrap().starts_with("/signin"));
            false
        }
        other => panic!("/account answered {other}"),
    }
}

/// The app's next sign-in request shows the sign-in page, not consent.
async fn asks_to_sign_in(browser: &Browser, f: &Fixture) {
    let page = browser.get(&oidc_url(f, "openid", &[])).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.form("/signin").is_empty());
}

/// A 303 to `RETURN` carrying exactly `state`.
fn assert_returned_with_state(answer: &Page, state: &str) {
    assert_eq!(answer.status, 303, "{}", answer.body);
    let location = answer.location().unwrap();
    let (base, _) = location.split_once('?').unwrap();
    assert_eq!(base, RETURN);
    let query = query_of(&location);
    assert_eq!(query.len(), 1, "{location}");
    assert_eq!(query["state"], state);
}

fn assert_signed_out_page(answer: &Page) {
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.location().is_none());
    assert!(
        answer.text().contains("You are signed out of Tally"),
        "{}",
        answer.body
    );
}

fn assert_confirmation_page(answer: &Page) {
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.text().contains("Sign out of Tally?"),
        "{}",
        answer.body
    );
    assert!(!answer.form("/v1/oauth/logout/confirm").is_empty());
}

async fn an_id_token_hint_of_the_session_signs_out_at_once_and_returns_to_the_app_with_state(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (browser, id_token) = signed_in(&app, &f).await;
    let copied_cookie = browser.cookie_header();
    let answer = browser
        .get(&logout_url(&[
            ("id_token_hint", &id_token),
            ("post_logout_redirect_uri", RETURN),
            ("state", "bye 1/2"),
        ]))
        .await;
    assert_returned_with_state(&answer, "bye 1/2");
    assert!(!is_signed_in(&browser).await);
    asks_to_sign_in(&browser, &f).await;
    // Ended on the server: a copy of the cookie signs no one in either.
    let copy = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let account = copy
        .get(app.url("/account"))
        .header("cookie", copied_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(account.status(), 303);
}

async fn an_apps_page_may_post_the_logout_request_as_a_form(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (browser, id_token) = signed_in(&app, &f).await;
    // Posted by the app's page: another origin, no CSRF token of ours.
    let response = browser
        .client
        .post(app.url("/v1/oauth/logout"))
        .header("origin", "https://app.example.com")
        .header("sec-fetch-site", "cross-site")
        .form(&[
            ("id_token_hint", id_token.as_str()),
            ("post_logout_redirect_uri", RETURN),
            ("state", "s2"),
        ])
        .send()
        .await
        .unwrap();
    let answer = Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    };
    assert_returned_with_state(&answer, "s2");
    assert!(!is_signed_in(&browser).await);
}

async fn an_expired_id_token_hint_still_signs_its_session_out(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (browser, id_token) = signed_in(&app, &f).await;
    // The same ID token, as it would be two hours later: signed by the
    // deployment's own key, expired an hour ago.
    let (_, mut claims) = verify(&app, &f, &id_token).await;
    let now = claims["iat"].as_i64().unwrap();
    claims["iat"] = (now - 7200).into();
    claims["exp"] = (now - 3600).into();
    let ring = tally::oauth::keys::KeyRing::new(&secrecy::SecretString::from(SECRET_KEY)).unwrap();
    let expired = ring
        .sign(
            app.store.as_ref(),
            tally::oauth::keys::IdTokenAlg::Rs256,
            claims,
        )
        .await
        .unwrap();
    let key = jsonwebtoken::DecodingKey::from_jwk(
        &serde_json::from_value::<jsonwebtoken::jwk::JwkSet>(crate::oidc::jwks(&app).await)
            .unwrap()
            .find(&jsonwebtoken::decode_header(&expired).unwrap().kid.unwrap())
            .unwrap()
            .clone(),
    )
    .unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_audience(&[&f.client_id]);
    let refused = jsonwebtoken::decode::<Value>(&expired, &key, &validation).unwrap_err();
    assert_eq!(
        refused.kind(),
        &jsonwebtoken::errors::ErrorKind::ExpiredSignature
    );

    let answer = browser
        .get(&logout_url(&[
            ("id_token_hint", &expired),
            ("post_logout_redirect_uri", RETURN),
            ("state", "late"),
        ]))
        .await;
    assert_returned_with_state(&answer, "late");
    assert!(!is_signed_in(&browser).await);
}

async fn without_a_hint_the_person_is_asked_and_only_the_checked_confirmation_form_signs_out(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (browser, _) = signed_in(&app, &f).await;
    let url = logout_url(&[
        ("client_id", &f.client_id),
        ("post_logout_redirect_uri", RETURN),
        ("state", "s3"),
    ]);
    let confirm = browser.get(&url).await;
    assert_confirmation_page(&confirm);
    let text = confirm.text();
    assert!(text.contains("Splitter"), "{text}");
    assert!(text.contains("https://app.example.com"), "{text}");
    // The answer to the form may lead to the app.
    assert!(confirm
        .header("content-security-policy")
        .contains("form-action 'self' https://app.example.com"));
    assert!(is_signed_in(&browser).await, "asking ends nothing");
    // A HEAD ends nothing either.
    let head = browser.client.head(app.url(&url)).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert!(is_signed_in(&browser).await);

    let fields = confirm.form("/v1/oauth/logout/confirm");
    // Without the page's CSRF token, or from another site: refused.
    let mut forged = fields.clone();
    forged.retain(|(name, _)| name != "csrf_token");
    set(&mut forged, "decision", "sign_out");
    let refused = browser.post("/v1/oauth/logout/confirm", &forged).await;
    assert_eq!(refused.status, 403);
    let mut cross_site = fields.clone();
    set(&mut cross_site, "decision", "sign_out");
    let response = browser
        .client
        .post(app.url("/v1/oauth/logout/confirm"))
        .header("origin", "https://app.example.com")
        .form(&cross_site)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(is_signed_in(&browser).await);

    // Staying keeps the session and goes nowhere near the app.
    let mut stay = fields.clone();
    set(&mut stay, "decision", "stay");
    let stayed = browser.post("/v1/oauth/logout/confirm", &stay).await;
    assert_eq!(stayed.status, 303);
    assert_eq!(stayed.location().unwrap(), "/account");
    assert!(is_signed_in(&browser).await);

    let mut sign_out = fields;
    set(&mut sign_out, "decision", "sign_out");
    let answer = browser.post("/v1/oauth/logout/confirm", &sign_out).await;
    assert_returned_with_state(&answer, "s3");
    assert!(!is_signed_in(&browser).await);
    asks_to_sign_in(&browser, &f).await;

    // With no app named at all: asked, then the signed-out page.
    let (browser, _) = signed_in(&app, &f).await;
    let confirm = browser.get("/v1/oauth/logout").await;
    assert_confirmation_page(&confirm);
    assert!(confirm.text().contains("A site asks you"));
    let mut sign_out = confirm.form("/v1/oauth/logout/confirm");
    set(&mut sign_out, "decision", "sign_out");
    let answer = browser.post("/v1/oauth/logout/confirm", &sign_out).await;
    assert_signed_out_page(&answer);
    assert!(!is_signed_in(&browser).await);
}

async fn a_hint_we_did_not_sign_or_from_another_session_is_asked_about(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (browser, id_token) = signed_in(&app, &f).await;
    // The same header and signature over other claims: not ours.
    let parts: Vec<&str> = id_token.split('.').collect();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut claims: Value = serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
    claims["exp"] = (claims["exp"].as_i64().unwrap() + 60).into();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64.encode(serde_json::to_vec(&claims).unwrap()),
        parts[2]
    );
    // The same user's ID token from another browser's session.
    let (other_browser, other_session_token) = signed_in(&app, &f).await;
    for hint in [forged.as_str(), "not-a-jwt", other_session_token.as_str()] {
        let answer = browser
            .get(&logout_url(&[
                ("id_token_hint", hint),
                ("post_logout_redirect_uri", RETURN),
                ("state", "s4"),
            ]))
            .await;
        assert_confirmation_page(&answer);
        assert!(is_signed_in(&browser).await, "{hint}");
    }
    assert!(is_signed_in(&other_browser).await);
    // Its own session's hint signs each out at once.
    let answer = other_browser
        .get(&logout_url(&[
            ("id_token_hint", &other_session_token),
            ("post_logout_redirect_uri", RETURN),
            ("state", "s5"),
        ]))
        .await;
    assert_returned_with_state(&answer, "s5");
    assert!(!is_signed_in(&other_browser).await);
    assert!(is_signed_in(&browser).await);
}

async fn a_return_address_the_apps_redirect_policy_refuses_gets_the_signed_out_page(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (browser, id_token) = signed_in(&app, &f).await;
    let answer = browser
        .get(&logout_url(&[
            ("id_token_hint", &id_token),
            ("post_logout_redirect_uri", "https://evil.example/after"),
            ("state", "s6"),
        ]))
        .await;
    assert_signed_out_page(&answer);
    assert!(answer.text().contains("not one it registered"));
    assert!(!answer.body.contains("evil.example"));
    assert!(
        !is_signed_in(&browser).await,
        "the session ends all the same"
    );
    // Every way out of the policy of SPEC §6, from a browser without a
    // session (which would be sent back to an admitted address).
    for refused in [
        "https://app.example.com/",
        "https://app.example.com/callbackx",
        "http://app.example.com/callback/signed-out",
        "https://app.example.com:8443/callback/signed-out",
        "https://app.example.com/callback/../other",
        "https://app.example.com/callback/signed-out#frag",
        "https://app.example.com/callback/signed-out?State=x",
        "//evil.example/callback",
    ] {
        let answer = Browser::new(&app.origin)
            .get(&logout_url(&[
                ("client_id", &f.client_id),
                ("post_logout_redirect_uri", refused),
                ("state", "s7"),
            ]))
            .await;
        assert_signed_out_page(&answer);
    }
}

async fn a_client_id_other_than_the_hints_audience_is_refused_and_ends_nothing(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let other_app = fixture(&app).await;
    let (browser, id_token) = signed_in(&app, &f).await;
    let answer = browser
        .get(&logout_url(&[
            ("id_token_hint", &id_token),
            ("client_id", &other_app.client_id),
            ("post_logout_redirect_uri", RETURN),
            ("state", "s8"),
        ]))
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(answer.location().is_none());
    assert!(answer.text().contains("client_id"));
    assert!(is_signed_in(&browser).await);
    // A parameter given twice is no request either.
    let answer = browser
        .get(&logout_url(&[
            ("id_token_hint", &id_token),
            ("state", "a"),
            ("state", "b"),
        ]))
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(is_signed_in(&browser).await);
    // The same client_id as the hint's audience is the hint's request.
    let answer = browser
        .get(&logout_url(&[
            ("id_token_hint", &id_token),
            ("client_id", &f.client_id),
            ("post_logout_redirect_uri", RETURN),
            ("state", "s9"),
        ]))
        .await;
    assert_returned_with_state(&answer, "s9");
    assert!(!is_signed_in(&browser).await);
}

async fn a_browser_without_a_session_is_sent_back_only_to_an_address_its_app_admits(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let answer = browser
        .get(&logout_url(&[
            ("client_id", &f.client_id),
            ("post_logout_redirect_uri", RETURN),
            ("state", "s10"),
        ]))
        .await;
    assert_returned_with_state(&answer, "s10");
    // No app named: no address can be checked, so none is followed.
    let answer = browser
        .get(&logout_url(&[
            ("post_logout_redirect_uri", RETURN),
            ("state", "s11"),
        ]))
        .await;
    assert_signed_out_page(&answer);
    // A suspended app is sent nowhere.
    tally::admin::app_suspend(app.store.as_ref(), &f.client_id, true)
        .await
        .unwrap();
    let answer = browser
        .get(&logout_url(&[
            ("client_id", &f.client_id),
            ("post_logout_redirect_uri", RETURN),
        ]))
        .await;
    assert_signed_out_page(&answer);
}
