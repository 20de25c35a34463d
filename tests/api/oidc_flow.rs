//! OpenID Connect on the code flow (SPEC §10) over HTTP: the authentication
//! request's parameters, ID tokens (verified with the published keys), refresh,
//! userinfo and key rotation.

use crate::browser::{query_of, set, Browser};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::oauth::token_request;
use crate::oauth_fixture::{fixture, Fixture, PASSWORD};
use crate::oidc::{admin, spawn_oidc};
use base64::Engine;
use serde_json::Value;
use sha2::Digest;
use std::collections::HashMap;

on_both_backends!(
    an_openid_code_exchange_answers_an_id_token_with_the_claims_of_section_10,
    a_refresh_answers_an_id_token_with_the_first_auth_time_and_no_nonce,
    requests_without_openid_get_no_id_token_and_userinfo_refuses_them,
    openid_with_the_client_side_flow_is_invalid_scope,
    the_consent_page_names_the_openid_scopes_in_plain_words,
    prompt_none_answers_login_required_or_consent_required_without_a_page,
    prompt_login_and_max_age_ask_for_the_password_again,
    acr_values_mfa_is_refused_for_an_account_without_a_second_factor,
    userinfo_releases_the_granted_claims_and_only_verified_addresses,
    userinfo_updated_at_is_when_the_name_last_changed_or_the_account_was_made,
    an_app_that_chose_es256_or_eddsa_gets_id_tokens_signed_so,
    a_rotated_key_signs_only_after_publish_ahead_and_old_id_tokens_still_verify,
);

async fn spawn(backend: Backend) -> Option<(TestApp, Fixture)> {
    let app = spawn_oidc(backend).await?;
    let f = fixture(&app).await;
    Some((app, f))
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The authorize URL of an OpenID Connect request with `extra` parameters.
pub(crate) fn oidc_url(f: &Fixture, scope: &str, extra: &[(&str, &str)]) -> String {
    let mut params = vec![("response_type", "code"), ("scope", scope), ("state", "s1")];
    params.extend_from_slice(extra);
    f.authorize_url(&params)
}

/// Signs in (a fresh browser) and allows; returns the browser and the
/// redirect's query.
pub(crate) async fn sign_in_and_allow(
    app: &TestApp,
    f: &Fixture,
    url: &str,
) -> (Browser, HashMap<String, String>) {
    let browser = Browser::new(&app.origin);
    let consent = browser.to_consent(url, &f.username, PASSWORD).await;
    let answer = if consent.status == 303 {
        consent
    } else {
        assert_eq!(consent.status, 200, "{}", consent.body);
        browser.decide(&consent, "allow").await
    };
    assert_eq!(answer.status, 303, "{}", answer.body);
    let query = query_of(&answer.location().unwrap());
    (browser, query)
}

pub(crate) async fn exchange(app: &TestApp, f: &Fixture, code: &str) -> Value {
    let (status, body) = token_request(
        app,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn refresh(app: &TestApp, f: &Fixture, refresh_token: &str) -> Value {
    let (status, body) = token_request(
        app,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The header and claims of an ID token, after checking its signature with
/// the published key named by its `kid`, its issuer and its audience.
pub(crate) async fn verify(app: &TestApp, f: &Fixture, id_token: &str) -> (Value, Value) {
    let header = jsonwebtoken::decode_header(id_token).unwrap();
    let kid = header.kid.clone().expect("a kid");
    let set: jsonwebtoken::jwk::JwkSet =
        serde_json::from_value(crate::oidc::jwks(app).await).unwrap();
    let jwk = set
        .find(&kid)
        .unwrap_or_else(|| panic!("{kid} is not published"));
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
    let mut validation = jsonwebtoken::Validation::new(header.alg);
    validation.set_audience(&[&f.client_id]);
    validation.set_issuer(&[&app.origin]);
    validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
    let data = jsonwebtoken::decode::<Value>(id_token, &key, &validation).unwrap();
    (serde_json::to_value(&header).unwrap(), data.claims)
}

fn half_hash(alg: &str, token: &str) -> String {
    let digest = if alg == "EdDSA" {
        sha2::Sha512::digest(token.as_bytes()).to_vec()
    } else {
        sha2::Sha256::digest(token.as_bytes()).to_vec()
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..digest.len() / 2])
}

async fn an_openid_code_exchange_answers_an_id_token_with_the_claims_of_section_10(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let before = now_secs();
    let url = oidc_url(&f, "openid profile", &[("nonce", "n-0S6_WzA2Mj")]);
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    assert_eq!(query["iss"], app.origin);
    let body = exchange(&app, &f, &query["code"]).await;
    // The Venmo answer is all there, with the ID token beside it.
    for field in ["access_token", "refresh_token", "scope", "balance", "user"] {
        assert!(body.get(field).is_some(), "{field} in {body}");
    }
    assert_eq!(body["scope"], "openid profile");
    let id_token = body["id_token"].as_str().unwrap();
    let (header, claims) = verify(&app, &f, id_token).await;
    assert_eq!(header["alg"], "RS256");
    assert_eq!(claims["iss"], app.origin);
    assert_eq!(claims["sub"], f.user_id);
    assert_eq!(claims["aud"], f.client_id);
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, 3600);
    let auth_time = claims["auth_time"].as_i64().unwrap();
    assert!(before - 1 <= auth_time && auth_time <= iat, "{claims}");
    assert_eq!(claims["nonce"], "n-0S6_WzA2Mj");
    assert_eq!(
        claims["at_hash"],
        half_hash("RS256", body["access_token"].as_str().unwrap())
    );
    assert_eq!(claims["amr"], serde_json::json!(["pwd"]));
    assert!(claims["sid"].as_str().is_some_and(|s| !s.is_empty()));
    // acr only when one was asked for.
    assert!(claims.get("acr").is_none(), "{claims}");

    // Without a nonce, none in the token.
    let url = oidc_url(&f, "openid", &[]);
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let body = exchange(&app, &f, &query["code"]).await;
    let (_, claims) = verify(&app, &f, body["id_token"].as_str().unwrap()).await;
    assert!(claims.get("nonce").is_none(), "{claims}");
}

async fn a_refresh_answers_an_id_token_with_the_first_auth_time_and_no_nonce(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let url = oidc_url(&f, "openid email", &[("nonce", "abc")]);
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let first = exchange(&app, &f, &query["code"]).await;
    let (_, first_claims) = verify(&app, &f, first["id_token"].as_str().unwrap()).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let refreshed = refresh(&app, &f, first["refresh_token"].as_str().unwrap()).await;
    let (_, claims) = verify(&app, &f, refreshed["id_token"].as_str().unwrap()).await;
    assert_eq!(claims["auth_time"], first_claims["auth_time"]);
    assert!(claims["iat"].as_i64() > first_claims["iat"].as_i64());
    assert!(claims.get("nonce").is_none(), "{claims}");
    assert_eq!(claims["sid"], first_claims["sid"]);
    assert_eq!(
        claims["at_hash"],
        half_hash("RS256", refreshed["access_token"].as_str().unwrap())
    );
    // A refresh narrowed to leave openid out carries no ID token.
    let (status, narrowed) = token_request(
        &app,
        &[
            ("grant_type", "refresh_token"),
            (
                "refresh_token",
                refreshed["refresh_token"].as_str().unwrap(),
            ),
            ("scope", "email"),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(status, 200, "{narrowed}");
    assert!(narrowed.get("id_token").is_none(), "{narrowed}");
}

async fn userinfo(app: &TestApp, token: &str) -> reqwest::Response {
    app.http
        .get(app.url("/v1/oauth/userinfo"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

async fn requests_without_openid_get_no_id_token_and_userinfo_refuses_them(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let body = crate::oauth::code_tokens(&app, &f).await;
    assert!(body.get("id_token").is_none(), "{body}");
    let token = body["access_token"].as_str().unwrap();
    let response = userinfo(&app, token).await;
    assert_eq!(response.status(), 403);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(
        challenge.contains(r#"error="insufficient_scope""#),
        "{challenge}"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_scope");
    // And without a token at all, 401 as everywhere.
    let anonymous = app
        .http
        .get(app.url("/v1/oauth/userinfo"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

async fn openid_with_the_client_side_flow_is_invalid_scope(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let url = f.authorize_url(&[
        ("response_type", "token"),
        ("scope", "openid"),
        ("state", "s2"),
    ]);
    let browser = Browser::new(&app.origin);
    let answer = browser.to_consent(&url, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let query = query_of(&answer.location().unwrap());
    assert_eq!(query["error"], "invalid_scope");
    assert_eq!(query["state"], "s2");
    assert!(!query.contains_key("access_token"));
}

async fn the_consent_page_names_the_openid_scopes_in_plain_words(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let url = oidc_url(&f, "openid profile email phone", &[]);
    let browser = Browser::new(&app.origin);
    let consent = browser.to_consent(&url, &f.username, PASSWORD).await;
    assert_eq!(consent.status, 200);
    let text = consent.text();
    for words in [
        "Sign you in with your Tally account",
        "See your name, username and profile picture",
        "See your e-mail address, once you have verified it",
        "See your phone number, once you have verified it",
    ] {
        assert!(text.contains(words), "{words:?} in {text}");
    }
}

async fn prompt_none_answers_login_required_or_consent_required_without_a_page(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    // No session: straight back to the app.
    let url = oidc_url(&f, "openid", &[("prompt", "none")]);
    let browser = Browser::new(&app.origin);
    let answer = browser.get(&url).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let query = query_of(&answer.location().unwrap());
    assert_eq!(query["error"], "login_required");
    assert_eq!(query["state"], "s1");
    assert_eq!(query["iss"], app.origin);

    // A session, but no consent yet.
    let consent = browser
        .to_consent(&oidc_url(&f, "openid", &[]), &f.username, PASSWORD)
        .await;
    assert_eq!(consent.status, 200);
    let answer = browser
        .get(&oidc_url(&f, "openid profile", &[("prompt", "none")]))
        .await;
    assert_eq!(answer.status, 303);
    assert_eq!(
        query_of(&answer.location().unwrap())["error"],
        "consent_required"
    );

    // Consent remembered: a code, still without a page.
    browser.decide(&consent, "allow").await;
    let answer = browser.get(&url).await;
    assert_eq!(answer.status, 303);
    let query = query_of(&answer.location().unwrap());
    assert!(query.contains_key("code"), "{query:?}");

    // none with another value is refused.
    let answer = browser
        .get(&oidc_url(&f, "openid", &[("prompt", "none consent")]))
        .await;
    assert_eq!(
        query_of(&answer.location().unwrap())["error"],
        "invalid_request"
    );
}

async fn prompt_login_and_max_age_ask_for_the_password_again(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (browser, query) = sign_in_and_allow(&app, &f, &oidc_url(&f, "openid", &[])).await;
    let first = exchange(&app, &f, &query["code"]).await;
    let (_, first_claims) = verify(&app, &f, first["id_token"].as_str().unwrap()).await;

    // A session and a remembered consent, yet prompt=login shows the
    // sign-in form, the username filled in from login_hint.
    let url = oidc_url(
        &f,
        "openid",
        &[("prompt", "login"), ("login_hint", &f.username)],
    );
    let page = browser.get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let form = page.form("/signin");
    assert!(
        form.contains(&("username".to_owned(), f.username.clone())),
        "{form:?}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let signed_in = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(signed_in.status, 303);
    let answer = browser.get(&signed_in.location().unwrap()).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let query = query_of(&answer.location().unwrap());
    let again = exchange(&app, &f, &query["code"]).await;
    let (_, claims) = verify(&app, &f, again["id_token"].as_str().unwrap()).await;
    assert!(
        claims["auth_time"].as_i64() > first_claims["auth_time"].as_i64(),
        "{claims} after {first_claims}"
    );

    // max_age: a recent sign-in passes, an older one is asked again.
    let recent = browser
        .get(&oidc_url(&f, "openid", &[("max_age", "3600")]))
        .await;
    assert_eq!(recent.status, 303);
    assert!(query_of(&recent.location().unwrap()).contains_key("code"));
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let stale = browser
        .get(&oidc_url(&f, "openid", &[("max_age", "1")]))
        .await;
    assert_eq!(stale.status, 200, "{}", stale.body);
    assert!(!stale.form("/signin").is_empty());
    let none = browser
        .get(&oidc_url(
            &f,
            "openid",
            &[("max_age", "1"), ("prompt", "none")],
        ))
        .await;
    assert_eq!(
        query_of(&none.location().unwrap())["error"],
        "login_required"
    );
    let bad = browser
        .get(&oidc_url(&f, "openid", &[("max_age", "soon")]))
        .await;
    assert_eq!(
        query_of(&bad.location().unwrap())["error"],
        "invalid_request"
    );
}

async fn acr_values_mfa_is_refused_for_an_account_without_a_second_factor(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let url = oidc_url(&f, "openid", &[("acr_values", "mfa")]);
    let browser = Browser::new(&app.origin);
    let answer = browser.to_consent(&url, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let query = query_of(&answer.location().unwrap());
    assert_eq!(query["error"], "access_denied");
    assert!(
        query["error_description"].contains("no second factor"),
        "{query:?}"
    );
    assert!(!query.contains_key("code"));

    // Other values are accepted; the ID token says what was used.
    let url = oidc_url(
        &f,
        "openid",
        &[
            ("acr_values", "pwd"),
            ("ui_locales", "fr-CA en"),
            ("claims_locales", "fr"),
            ("display", "page"),
        ],
    );
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let body = exchange(&app, &f, &query["code"]).await;
    let (_, claims) = verify(&app, &f, body["id_token"].as_str().unwrap()).await;
    assert_eq!(claims["acr"], "pwd");
}

async fn userinfo_releases_the_granted_claims_and_only_verified_addresses(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let url = oidc_url(&f, "openid profile email phone", &[]);
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let body = exchange(&app, &f, &query["code"]).await;
    let token = body["access_token"].as_str().unwrap();
    let response = userinfo(&app, token).await;
    assert_eq!(response.status(), 200);
    let claims: Value = response.json().await.unwrap();
    assert_eq!(claims["sub"], f.user_id);
    assert_eq!(claims["name"], "Ann Lee");
    assert_eq!(claims["given_name"], "Ann");
    assert_eq!(claims["family_name"], "Lee");
    assert_eq!(claims["preferred_username"], f.username);
    assert_eq!(claims["email"], format!("{}@example.com", f.username));
    assert_eq!(claims["email_verified"], true);
    // The fixture's user has no phone: nothing about one.
    assert!(claims.get("phone_number").is_none(), "{claims}");
    // POST, with the token as a form field, answers the same.
    let posted: Value = app
        .http
        .post(app.url("/v1/oauth/userinfo"))
        .form(&[("access_token", token)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(posted, claims);

    // Only the granted scopes' claims.
    let url = oidc_url(&f, "openid", &[]);
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let body = exchange(&app, &f, &query["code"]).await;
    let bare: Value = userinfo(&app, body["access_token"].as_str().unwrap())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(bare, serde_json::json!({"sub": f.user_id}));

    // An address not verified is not released.
    let unverified = tally::admin::user_add(
        app.store.as_ref(),
        &tally::auth::password::PasswordHasher::new(1),
        tally::admin::UserAdd {
            username: "unverified".to_owned(),
            password: PASSWORD.to_owned(),
            email: Some("unverified@example.com".to_owned()),
            phone: Some("(212) 555-0187".to_owned()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let other = Fixture {
        user_id: unverified.id.clone(),
        username: "unverified".to_owned(),
        ..f.clone()
    };
    let (_, query) = sign_in_and_allow(
        &app,
        &other,
        &url.replace("scope=openid", "scope=openid+email+phone"),
    )
    .await;
    let body = exchange(&app, &other, &query["code"]).await;
    let claims: Value = userinfo(&app, body["access_token"].as_str().unwrap())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(claims, serde_json::json!({"sub": unverified.id}));
}

async fn an_app_that_chose_es256_or_eddsa_gets_id_tokens_signed_so(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    for alg in ["ES256", "EdDSA", "RS256"] {
        let set = admin(
            &app,
            &["app", "set", &f.client_id, "--id-token-alg", alg, "--json"],
        );
        assert!(set.status.success(), "{}", set.stderr);
        let url = oidc_url(&f, "openid", &[("nonce", alg)]);
        let (_, query) = sign_in_and_allow(&app, &f, &url).await;
        let body = exchange(&app, &f, &query["code"]).await;
        let (header, claims) = verify(&app, &f, body["id_token"].as_str().unwrap()).await;
        assert_eq!(header["alg"], alg);
        assert_eq!(claims["nonce"], alg);
        assert_eq!(
            claims["at_hash"],
            half_hash(alg, body["access_token"].as_str().unwrap())
        );
    }
}

async fn a_rotated_key_signs_only_after_publish_ahead_and_old_id_tokens_still_verify(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let id_token = |body: &Value| body["id_token"].as_str().unwrap().to_owned();
    let kid = |token: &str| jsonwebtoken::decode_header(token).unwrap().kid.unwrap();
    let url = oidc_url(&f, "openid", &[]);
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let old = id_token(&exchange(&app, &f, &query["code"]).await);
    let first_kid = kid(&old);

    // Published ahead: the new key is in the set, the old one still signs.
    let ahead = admin(
        &app,
        &[
            "keys",
            "rotate",
            "--alg",
            "RS256",
            "--publish-ahead",
            "1h",
            "--json",
        ],
    );
    assert!(ahead.status.success(), "{}", ahead.stderr);
    let ahead_kid = ahead.json()["keys"][0]["kid"].as_str().unwrap().to_owned();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let still = id_token(&exchange(&app, &f, &query["code"]).await);
    assert_eq!(kid(&still), first_kid);
    let published: Vec<String> = crate::oidc::jwks(&app).await["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect();
    assert!(published.contains(&ahead_kid), "{published:?}");

    // A key signing at once takes over; tokens signed before still verify.
    let now = admin(
        &app,
        &[
            "keys",
            "rotate",
            "--alg",
            "RS256",
            "--publish-ahead",
            "0s",
            "--json",
        ],
    );
    assert!(now.status.success(), "{}", now.stderr);
    let now_kid = now.json()["keys"][0]["kid"].as_str().unwrap().to_owned();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (_, query) = sign_in_and_allow(&app, &f, &url).await;
    let new = id_token(&exchange(&app, &f, &query["code"]).await);
    assert_eq!(kid(&new), now_kid);
    verify(&app, &f, &new).await;
    verify(&app, &f, &old).await;
    verify(&app, &f, &still).await;
    let list = admin(&app, &["keys", "list", "--json"]).json();
    let first = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == first_kid.as_str())
        .unwrap()
        .clone();
    assert_eq!(first["signing"], false);
    assert_eq!(first["published"], true);
    assert_eq!(
        first["published_until"].as_i64().unwrap() - first["retired_at"].as_i64().unwrap(),
        3600
    );
}

async fn userinfo_updated_at_is_when_the_name_last_changed_or_the_account_was_made(
    backend: Backend,
) {
    let made_after = now_secs();
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let url = oidc_url(&f, "openid profile", &[]);
    let (browser, query) = sign_in_and_allow(&app, &f, &url).await;
    let body = exchange(&app, &f, &query["code"]).await;
    let token = body["access_token"].as_str().unwrap();
    let claims = || async { userinfo(&app, token).await.json::<Value>().await.unwrap() };
    let updated_at = |claims: &Value| claims["updated_at"].as_i64().unwrap();
    // Never changed: when the account was made.
    let made = updated_at(&claims().await);
    assert!((made_after..=now_secs()).contains(&made), "{made}");

    let change = |first: &'static str, about: &'static str| {
        let browser = &browser;
        async move {
            let mut fields = browser.get("/account").await.form("/account/profile");
            set(&mut fields, "first_name", first);
            set(&mut fields, "about", about);
            let answer = browser.post("/account/profile", &fields).await;
            assert_eq!(answer.status, 303, "{}", answer.body);
        }
    };
    // The claim is in seconds: let one pass, so a change shows.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let changed_after = now_secs();
    change("Annie", "").await;
    let after_rename = claims().await;
    assert_eq!(after_rename["name"], "Annie Lee");
    let renamed = updated_at(&after_rename);
    assert!(renamed > made, "{renamed} > {made}");
    assert!((changed_after..=now_secs()).contains(&renamed), "{renamed}");
    // What no profile claim shows (`about`), or the same name again, is no
    // change of the profile.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    change("Annie", "Splits bills").await;
    assert_eq!(updated_at(&claims().await), renamed);
}
