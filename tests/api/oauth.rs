//! The authorization server through its real HTTP surface: the `oauth2` crate as
//! a client, a scripted browser for the pages, and raw requests for the rules.

use crate::browser::{query_of, set, Browser};
use crate::helpers::{on_both_backends, Backend, ServeProcess, TestApp, TestDb};
use crate::oauth_fixture::{fixture, fixture_with_redirect, Fixture, PASSWORD};
use oauth2::basic::BasicClient;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge, RedirectUrl,
    RefreshToken, Scope, TokenResponse, TokenUrl,
};
use serde_json::{json, Value};

on_both_backends!(
    the_oauth2_crate_completes_the_code_flow_with_pkce_and_refreshes,
    the_client_side_flow_appends_the_token_to_the_redirect_query,
    bad_authorize_requests_show_an_error_page_and_never_redirect,
    unknown_scopes_and_denied_consent_redirect_with_an_error_and_state,
    scopes_may_be_separated_by_spaces_plus_signs_or_commas,
    consent_is_remembered_per_exact_scope_set,
    token_endpoint_errors_follow_rfc_6749,
    a_reused_code_is_refused_and_revokes_its_tokens,
    an_expired_code_is_refused,
    a_reused_refresh_token_revokes_the_whole_family,
    parallel_exchanges_of_one_code_give_exactly_one_success,
    parallel_refreshes_of_one_token_give_exactly_one_success,
    the_token_endpoint_accepts_json_basic_and_a_missing_grant_type,
    revocation_and_introspection_follow_rfc_7009_and_7662,
    introspection_refuses_a_caller_that_does_not_authenticate,
    tokens_of_suspended_users_and_apps_stop_working,
    the_access_token_is_read_from_the_header_or_the_parameters,
    forms_without_csrf_token_or_from_another_origin_are_refused,
    pages_send_the_security_headers,
    unknown_user_and_wrong_password_get_the_same_answer,
    sign_in_is_throttled_per_account_and_address_without_locking_others_out,
    the_metadata_document_lists_every_endpoint,
    too_many_oauth_requests_from_one_address_get_429,
    people_sign_in_with_their_username_email_or_phone,
    each_token_has_its_own_api_rate_limit,
    a_code_exchanged_after_the_user_revoked_the_app_is_refused,
    a_refresh_may_not_ask_for_more_scopes_than_were_granted,
    the_token_endpoint_sees_an_apps_suspension_and_new_secret_at_once,
);

pub(crate) async fn spawn(backend: Backend) -> Option<(TestApp, Fixture)> {
    let app = TestApp::spawn(backend).await?;
    let fixture = fixture(&app).await;
    Some((app, fixture))
}

pub(crate) fn oauth_client(
    app: &TestApp,
    f: &Fixture,
) -> oauth2::Client<
    oauth2::basic::BasicErrorResponse,
    oauth2::basic::BasicTokenResponse,
    oauth2::basic::BasicTokenIntrospectionResponse,
    oauth2::StandardRevocableToken,
    oauth2::basic::BasicRevocationErrorResponse,
    oauth2::EndpointSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointSet,
> {
    BasicClient::new(ClientId::new(f.client_id.clone()))
        .set_client_secret(ClientSecret::new(f.client_secret.clone()))
        .set_auth_uri(AuthUrl::new(app.url("/v1/oauth/authorize")).unwrap())
        .set_token_uri(TokenUrl::new(app.url("/v1/oauth/access_token")).unwrap())
        .set_redirect_uri(RedirectUrl::new(f.redirect_url.clone()).unwrap())
}

/// Runs the code flow in the browser up to the redirect; returns its query.
pub(crate) async fn authorize_code(
    app: &TestApp,
    f: &Fixture,
    scope: &str,
    challenge: Option<&str>,
) -> std::collections::HashMap<String, String> {
    let mut params = vec![("response_type", "code"), ("scope", scope), ("state", "s1")];
    if let Some(challenge) = challenge {
        params.push(("code_challenge", challenge));
        params.push(("code_challenge_method", "S256"));
    }
    let browser = Browser::new(&app.origin);
    let consent = browser
        .to_consent(&f.authorize_url(&params), &f.username, PASSWORD)
        .await;
    // Consent given before for these scopes: straight back to the app.
    let answer = if consent.status == 303 {
        consent
    } else {
        browser.decide(&consent, "allow").await
    };
    assert_eq!(answer.status, 303);
    query_of(&answer.location().unwrap())
}

pub(crate) async fn token_request(app: &TestApp, form: &[(&str, &str)]) -> (u16, Value) {
    let response = app
        .http
        .post(app.url("/v1/oauth/access_token"))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn introspect(app: &TestApp, f: &Fixture, token: &str) -> Value {
    app.http
        .post(app.url("/v1/oauth/introspect"))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub(crate) async fn code_tokens(app: &TestApp, f: &Fixture) -> Value {
    let query = authorize_code(app, f, "access_profile access_balance", None).await;
    let (status, body) = token_request(
        app,
        &[
            ("grant_type", "authorization_code"),
            ("code", &query["code"]),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn the_oauth2_crate_completes_the_code_flow_with_pkce_and_refreshes(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let client = oauth_client(&app, &f);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (authorize_url, csrf) = client
        .authorize_url(CsrfToken::new_random)
        .add_scope(Scope::new("access_profile".to_owned()))
        .add_scope(Scope::new("access_balance".to_owned()))
        .set_pkce_challenge(challenge)
        .url();
    let authorize_url = authorize_url.to_string();
    assert!(authorize_url.contains("response_type=code"));

    let browser = Browser::new(&app.origin);
    let consent = browser
        .to_consent(&authorize_url, &f.username, PASSWORD)
        .await;
    assert!(consent.text().contains("Splitter"), "{}", consent.body);
    let answer = browser.decide(&consent, "allow").await;
    let location = answer.location().unwrap();
    assert!(
        location.starts_with("https://app.example.com/callback?app=1&"),
        "{location}"
    );
    let query = query_of(&location);
    assert_eq!(query["state"], *csrf.secret());
    assert_eq!(query["iss"], app.origin);
    assert!(query["code"].starts_with("tly_code_"));

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let token = client
        .exchange_code(AuthorizationCode::new(query["code"].clone()))
        .set_pkce_verifier(verifier)
        .request_async(&http)
        .await
        .unwrap();
    let access = token.access_token().secret().clone();
    assert!(access.starts_with("tly_at_"));
    assert_eq!(token.expires_in().map(|d| d.as_secs()), Some(5_184_000));
    let scopes: Vec<String> = token
        .scopes()
        .unwrap()
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(scopes, ["access_profile", "access_balance"]);
    let refresh = token.refresh_token().unwrap().clone();
    assert!(refresh.secret().starts_with("tly_rt_"));
    assert_eq!(introspect(&app, &f, &access).await["active"], true);

    let refreshed = client
        .exchange_refresh_token(&refresh)
        .request_async(&http)
        .await
        .unwrap();
    let new_access = refreshed.access_token().secret().clone();
    assert_ne!(new_access, access);
    assert_ne!(
        refreshed.refresh_token().unwrap().secret(),
        refresh.secret()
    );
    assert_eq!(introspect(&app, &f, &new_access).await["active"], true);

    // The old refresh token is spent.
    assert!(client
        .exchange_refresh_token(&RefreshToken::new(refresh.secret().clone()))
        .request_async(&http)
        .await
        .is_err());
}

async fn the_client_side_flow_appends_the_token_to_the_redirect_query(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let url = f.authorize_url(&[("scope", "access_profile access_balance"), ("state", "xyz")]);
    let consent = browser.to_consent(&url, &f.username, PASSWORD).await;
    let answer = browser.decide(&consent, "allow").await;
    let location = answer.location().unwrap();
    let query = query_of(&location);
    assert_eq!(query["app"], "1", "the redirect URL keeps its own query");
    assert!(query["access_token"].starts_with("tly_at_"));
    assert_eq!(query["token_type"], "bearer");
    assert_eq!(query["expires_in"], "1800");
    assert_eq!(query["scope"], "access_profile access_balance");
    assert_eq!(query["state"], "xyz");
    assert_eq!(query["iss"], app.origin);
    let info = introspect(&app, &f, &query["access_token"]).await;
    assert_eq!(info["active"], true);
    let lifetime = info["exp"].as_i64().unwrap() - info["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 1800);
}

async fn bad_authorize_requests_show_an_error_page_and_never_redirect(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let suspended = fixture(&app).await;
    tally::admin::app_suspend(app.store.as_ref(), &suspended.client_id, true)
        .await
        .unwrap();
    // An app whose Web Redirect URL is missing.
    app.store
        .insert_app(&tally::store::NewApp {
            client_id: "no-redirect".to_owned(),
            secret_digest: "x".to_owned(),
            name: "Broken".to_owned(),
            description: String::new(),
            redirect_url: None,
            site_url: None,
            owner_id: f.user_id.clone(),
            created_at: 0,
        })
        .await
        .unwrap();
    let cases: Vec<(&str, String)> = vec![
        (
            "no client_id",
            "/v1/oauth/authorize?scope=access_profile".to_owned(),
        ),
        (
            "unknown client",
            "/v1/oauth/authorize?client_id=nope&scope=access_profile".to_owned(),
        ),
        (
            "suspended client",
            suspended.authorize_url(&[("scope", "access_profile")]),
        ),
        (
            "no redirect URL",
            "/v1/oauth/authorize?client_id=no-redirect&scope=access_profile".to_owned(),
        ),
        (
            "other host",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("redirect_uri", "https://evil.example.com/callback"),
            ]),
        ),
        (
            "another path",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("redirect_uri", "https://app.example.com/other"),
            ]),
        ),
        (
            "other port",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("redirect_uri", "https://app.example.com:8443/callback"),
            ]),
        ),
        (
            "other scheme",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("redirect_uri", "http://app.example.com/callback"),
            ]),
        ),
        (
            "fragment",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("redirect_uri", "https://app.example.com/callback#x"),
            ]),
        ),
        (
            "not a URL",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("redirect_uri", "app.example.com/callback"),
            ]),
        ),
        (
            "a query with a response parameter",
            f.authorize_url(&[
                ("scope", "access_profile"),
                (
                    "redirect_uri",
                    "https://app.example.com/callback?access_token=x",
                ),
            ]),
        ),
        (
            "a query with a code",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("redirect_uri", "https://app.example.com/callback?code=x"),
            ]),
        ),
        (
            "a query with a response parameter in mixed case",
            f.authorize_url(&[
                ("scope", "access_profile"),
                (
                    "redirect_uri",
                    "https://app.example.com/callback?Access_Token=x",
                ),
            ]),
        ),
        (
            "a query with a response parameter in upper case",
            f.authorize_url(&[
                ("scope", "access_profile"),
                (
                    "redirect_uri",
                    "https://app.example.com/callback?x=1&STATE=x",
                ),
            ]),
        ),
    ];
    let browser = Browser::new(&app.origin);
    for (case, url) in cases {
        let page = browser.get(&url).await;
        assert_eq!(page.status, 400, "{case}");
        assert!(page.location().is_none(), "{case} redirected");
        assert!(
            page.header("content-type").starts_with("text/html"),
            "{case}"
        );
        assert_eq!(page.header("x-frame-options"), "DENY");
    }
    // A path below the registered one, with another query, is allowed.
    let page = browser
        .get(&f.authorize_url(&[
            ("scope", "access_profile"),
            ("redirect_uri", "https://app.example.com/callback/done?x=2"),
        ]))
        .await;
    assert_eq!(page.status, 200);
}

async fn unknown_scopes_and_denied_consent_redirect_with_an_error_and_state(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    // Errors go to the app only for a signed-in user (see oauth_hardening).
    let browser = Browser::new(&app.origin);
    let sign_in = browser.get("/signin").await;
    let signed_in = browser.sign_in(&sign_in, &f.username, PASSWORD).await;
    assert_eq!(signed_in.status, 303);
    let page = browser
        .get(&f.authorize_url(&[("scope", "access_profile root"), ("state", "st")]))
        .await;
    assert_eq!(page.status, 303);
    let query = query_of(&page.location().unwrap());
    assert_eq!(query["error"], "invalid_scope");
    assert_eq!(query["state"], "st");
    assert_eq!(query["iss"], app.origin);

    let page = browser
        .get(&f.authorize_url(&[("scope", "access_profile"), ("response_type", "magic")]))
        .await;
    assert_eq!(
        query_of(&page.location().unwrap())["error"],
        "unsupported_response_type"
    );

    let consent = browser
        .get(&f.authorize_url(&[("scope", "access_profile"), ("state", "st2")]))
        .await;
    assert_eq!(consent.status, 200);
    let answer = browser.decide(&consent, "deny").await;
    assert_eq!(answer.status, 303);
    let query = query_of(&answer.location().unwrap());
    assert_eq!(query["error"], "access_denied");
    assert_eq!(query["state"], "st2");
    assert!(!query.contains_key("access_token"));
}

async fn scopes_may_be_separated_by_spaces_plus_signs_or_commas(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let mut first = true;
    for scope in [
        "access_profile make_payments",
        "access_profile+make_payments",
        "access_profile,make_payments",
    ] {
        let url = f.authorize_url(&[("scope", scope), ("prompt", "consent")]);
        let page = if first {
            first = false;
            browser.to_consent(&url, &f.username, PASSWORD).await
        } else {
            browser.get(&url).await
        };
        assert_eq!(page.status, 200, "{scope}");
        let text = page.text();
        assert!(
            text.contains("make_payments") && text.contains("access_profile"),
            "{scope}"
        );
        let scope_field = page
            .form("/v1/oauth/authorize")
            .into_iter()
            .find(|(n, _)| n == "scope")
            .unwrap();
        assert_eq!(scope_field.1, "make_payments access_profile");
    }
}

async fn consent_is_remembered_per_exact_scope_set(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let url = f.authorize_url(&[("scope", "access_profile")]);
    let consent = browser.to_consent(&url, &f.username, PASSWORD).await;
    assert_eq!(browser.decide(&consent, "allow").await.status, 303);

    // Same scopes: straight back to the app with a new token.
    let again = browser.get(&url).await;
    assert_eq!(again.status, 303);
    assert!(query_of(&again.location().unwrap())["access_token"].starts_with("tly_at_"));
    // More scopes, or prompt=consent: asked again.
    let more = browser
        .get(&f.authorize_url(&[("scope", "access_profile access_balance")]))
        .await;
    assert_eq!(more.status, 200);
    assert!(more.text().contains("access_balance"));
    let prompted = browser
        .get(&f.authorize_url(&[("scope", "access_profile"), ("prompt", "consent")]))
        .await;
    assert_eq!(prompted.status, 200);
}

async fn token_endpoint_errors_follow_rfc_6749(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let query = authorize_code(&app, &f, "access_profile", Some(challenge.as_str())).await;
    let code = query["code"].as_str();
    let good = |extra: &[(&'static str, String)]| {
        let mut form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("client_id", f.client_id.clone()),
            ("client_secret", f.client_secret.clone()),
        ];
        for (k, v) in extra {
            form.retain(|(n, _)| n != k);
            form.push((*k, v.clone()));
        }
        form
    };
    type Case<'a> = (Vec<(&'a str, String)>, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            good(&[
                ("client_secret", "tly_secret_wrong".into()),
                ("code", code.into()),
            ]),
            401,
            "invalid_client",
        ),
        (
            good(&[("client_id", "nope".into()), ("code", code.into())]),
            401,
            "invalid_client",
        ),
        (
            good(&[("grant_type", "password".into()), ("code", code.into())]),
            400,
            "unsupported_grant_type",
        ),
        (good(&[]), 400, "invalid_request"),
        (
            good(&[("code", "tly_code_unknown".into())]),
            400,
            "invalid_grant",
        ),
    ];
    for (form, status, error) in cases {
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (got, body) = token_request(&app, &form).await;
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(error)),
            "{form:?}: {body}"
        );
        assert!(body["error_description"].is_string());
    }
    // A wrong verifier burns the code.
    let (status, body) = token_request(
        &app,
        &[
            ("code", code),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
            (
                "code_verifier",
                "a-wrong-verifier-that-is-long-enough-to-be-well-formed-xyz",
            ),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let (status, body) = token_request(
        &app,
        &[
            ("code", code),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
            ("code_verifier", verifier.secret()),
        ],
    )
    .await;
    assert_eq!(status, 400, "a code is spent by a failed exchange");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("even when the first exchange failed"),
        "{body}"
    );

    // Bodies over 64 KiB: 413, in the endpoint's own error shape.
    let response = app
        .http
        .post(app.url("/v1/oauth/token"))
        .form(&[("code", "x".repeat(70_000))])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request");

    // A missing verifier, and a redirect_uri that differs from the one given.
    let (challenge, _verifier) = PkceCodeChallenge::new_random_sha256();
    let query = authorize_code(&app, &f, "access_profile", Some(challenge.as_str())).await;
    let (_, body) = token_request(
        &app,
        &[
            ("code", &query["code"]),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(body["error"], "invalid_grant");
}

async fn a_reused_code_is_refused_and_revokes_its_tokens(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let query = authorize_code(&app, &f, "access_profile", None).await;
    let form = [
        ("code", query["code"].as_str()),
        ("client_id", &f.client_id),
        ("client_secret", &f.client_secret),
    ];
    let (status, first) = token_request(&app, &form).await;
    assert_eq!(status, 200, "{first}");
    let access = first["access_token"].as_str().unwrap();
    let refresh = first["refresh_token"].as_str().unwrap();
    assert_eq!(introspect(&app, &f, access).await["active"], true);
    let (status, second) = token_request(&app, &form).await;
    assert_eq!(
        (status, second["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    assert_eq!(introspect(&app, &f, access).await, json!({"active": false}));
    assert_eq!(
        introspect(&app, &f, refresh).await,
        json!({"active": false})
    );
}

async fn an_expired_code_is_refused(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let query = authorize_code(&app, &f, "access_profile", None).await;
    crate::store_conformance::tamper(&app.db, "UPDATE oauth_codes SET expires_at = 1").await;
    let (status, body) = token_request(
        &app,
        &[
            ("code", &query["code"]),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    assert!(body["error_description"]
        .as_str()
        .unwrap()
        .contains("expired"));
}

async fn a_reused_refresh_token_revokes_the_whole_family(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let tokens = code_tokens(&app, &f).await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let form = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh),
        ("client_id", &f.client_id),
        ("client_secret", &f.client_secret),
    ];
    let (status, rotated) = token_request(&app, &form).await;
    assert_eq!(status, 200, "{rotated}");
    assert_eq!(rotated["scope"], "access_profile access_balance");
    assert_eq!(rotated["balance"].as_f64(), Some(25.0));
    let new_access = rotated["access_token"].as_str().unwrap();
    let new_refresh = rotated["refresh_token"].as_str().unwrap();
    assert_eq!(introspect(&app, &f, new_access).await["active"], true);
    let (status, replay) = token_request(&app, &form).await;
    assert_eq!(
        (status, replay["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    for token in [
        new_access,
        new_refresh,
        tokens["access_token"].as_str().unwrap(),
    ] {
        assert_eq!(introspect(&app, &f, token).await, json!({"active": false}));
    }
}

async fn race<F, Fut>(attempts: usize, make: F) -> Vec<u16>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (u16, Value)> + Send + 'static,
{
    let handles: Vec<_> = (0..attempts).map(|_| tokio::spawn(make())).collect();
    let mut statuses = Vec::new();
    for handle in handles {
        statuses.push(handle.await.unwrap().0);
    }
    statuses
}

async fn parallel_exchanges_of_one_code_give_exactly_one_success(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let query = authorize_code(&app, &f, "access_profile", None).await;
    let url = app.url("/v1/oauth/access_token");
    let form = vec![
        ("code".to_owned(), query["code"].clone()),
        ("client_id".to_owned(), f.client_id.clone()),
        ("client_secret".to_owned(), f.client_secret.clone()),
    ];
    let statuses = race(8, || post_form(url.clone(), form.clone())).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
}

async fn parallel_refreshes_of_one_token_give_exactly_one_success(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let tokens = code_tokens(&app, &f).await;
    let url = app.url("/v1/oauth/token");
    let form = vec![
        ("grant_type".to_owned(), "refresh_token".to_owned()),
        (
            "refresh_token".to_owned(),
            tokens["refresh_token"].as_str().unwrap().to_owned(),
        ),
        ("client_id".to_owned(), f.client_id.clone()),
        ("client_secret".to_owned(), f.client_secret.clone()),
    ];
    let statuses = race(8, || post_form(url.clone(), form.clone())).await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
}

async fn post_form(url: String, form: Vec<(String, String)>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .form(&form)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn the_token_endpoint_accepts_json_basic_and_a_missing_grant_type(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    // JSON body, client credentials inside it, no grant_type.
    let query = authorize_code(&app, &f, "access_profile access_balance", None).await;
    let response = app.http.post(app.url("/v1/oauth/access_token"))
        .json(&json!({"code": query["code"], "client_id": f.client_id, "client_secret": f.client_secret}))
        .send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().await.unwrap();
    let keys: std::collections::BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "access_token",
            "balance",
            "expires_in",
            "refresh_token",
            "scope",
            "token_type",
            "user"
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["expires_in"], 5_184_000);
    assert_eq!(body["balance"].as_f64(), Some(25.0));
    assert_eq!(body["user"]["id"], f.user_id);
    assert_eq!(body["user"]["username"], f.username);
    assert_eq!(body["user"]["display_name"], "Ann Lee");
    for field in [
        "first_name",
        "last_name",
        "about",
        "profile_picture_url",
        "date_joined",
    ] {
        assert!(body["user"].get(field).is_some(), "user.{field} is missing");
    }
    // HTTP Basic, form body, without access_balance: balance is null.
    let query = authorize_code(&app, &f, "access_profile", None).await;
    let response = app
        .http
        .post(app.url("/v1/oauth/token"))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("code", query["code"].as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["balance"], Value::Null);
    // Wrong Basic credentials: 401 with a Basic challenge.
    let response = app
        .http
        .post(app.url("/v1/oauth/token"))
        .basic_auth(&f.client_id, Some("tly_secret_wrong"))
        .form(&[("code", "tly_code_x")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert!(response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic"));
}

async fn revocation_and_introspection_follow_rfc_7009_and_7662(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let tokens = code_tokens(&app, &f).await;
    let access = tokens["access_token"].as_str().unwrap();
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let info = introspect(&app, &f, access).await;
    assert_eq!(info["active"], true);
    assert_eq!(info["client_id"], f.client_id);
    assert_eq!(info["username"], f.username);
    assert_eq!(info["sub"], f.user_id);
    assert_eq!(info["scope"], "access_profile access_balance");
    assert_eq!(info["token_type"], "bearer");
    assert_eq!(
        introspect(&app, &f, "tly_at_unknown").await,
        json!({"active": false})
    );
    assert_eq!(
        introspect(&app, &f, "garbage").await,
        json!({"active": false})
    );
    // The caller must be a registered app.
    let response = app
        .http
        .post(app.url("/v1/oauth/introspect"))
        .form(&[("token", access)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // Another app cannot revoke this app's token; the answer is still 200.
    let other = fixture(&app).await;
    let response = app
        .http
        .post(app.url("/v1/oauth/revoke"))
        .basic_auth(&other.client_id, Some(&other.client_secret))
        .form(&[("token", access)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(introspect(&app, &f, access).await["active"], true);
    // Revoking the refresh token revokes its family's access tokens.
    let response = app
        .http
        .post(app.url("/v1/oauth/revoke"))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("token", refresh), ("token_type_hint", "refresh_token")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(introspect(&app, &f, access).await, json!({"active": false}));

    // DELETE /oauth/access_token revokes the presented token.
    let tokens = code_tokens(&app, &f).await;
    let access = tokens["access_token"].as_str().unwrap();
    let response = app
        .http
        .delete(app.url("/v1/oauth/access_token"))
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(introspect(&app, &f, access).await, json!({"active": false}));
    let response = app
        .http
        .delete(app.url("/v1/oauth/access_token"))
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

async fn tokens_of_suspended_users_and_apps_stop_working(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let tokens = code_tokens(&app, &f).await;
    let access = tokens["access_token"].as_str().unwrap();
    // A resource server, which learns about other apps' tokens (SPEC §6),
    // so it can ask after this app is suspended.
    let other = fixture(&app).await;
    tally::admin::app_set(store, introspect_any(&other.client_id))
        .await
        .unwrap();
    let ask = |token: String| {
        let app_http = app.http.clone();
        let url = app.url("/v1/oauth/introspect");
        let (id, secret) = (other.client_id.clone(), other.client_secret.clone());
        async move {
            app_http
                .post(url)
                .basic_auth(id, Some(secret))
                .form(&[("token", token)])
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    assert_eq!(ask(access.to_owned()).await["active"], true);
    tally::admin::user_flags(
        store,
        &f.username,
        tally::store::UserFlags {
            suspended: Some(true),
            verified: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(ask(access.to_owned()).await, json!({"active": false}));
    let response = app
        .http
        .delete(app.url("/v1/oauth/access_token"))
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "account_suspended");
    tally::admin::user_flags(
        store,
        &f.username,
        tally::store::UserFlags {
            suspended: Some(false),
            verified: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(ask(access.to_owned()).await["active"], true);
    tally::admin::app_suspend(store, &f.client_id, true)
        .await
        .unwrap();
    assert_eq!(ask(access.to_owned()).await, json!({"active": false}));
}

async fn the_access_token_is_read_from_the_header_or_the_parameters(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let a = code_tokens(&app, &f).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let b = code_tokens(&app, &f).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = app.url("/v1/oauth/access_token");
    // Both given and different: 400 invalid_request, and nothing is revoked.
    let response = app
        .http
        .delete(format!("{url}?access_token={b}"))
        .bearer_auth(&a)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request");
    // No token: 401 with an RFC 6750 challenge.
    let response = app.http.delete(&url).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert!(response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_token");
    // An expired token: 401 token_expired.
    crate::store_conformance::tamper(
        &app.db,
        &format!(
            "UPDATE oauth_tokens SET expires_at = 1 WHERE digest = '{}'",
            tally::oauth::credentials::digest(&b)
        ),
    )
    .await;
    let response = app.http.delete(&url).bearer_auth(&b).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "token_expired");
    // The token as a query parameter, a form field or in JSON.
    let response = app
        .http
        .delete(format!("{url}?access_token={a}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let c = code_tokens(&app, &f).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let response = app
        .http
        .delete(&url)
        .form(&[("access_token", &c)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let d = code_tokens(&app, &f).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let response = app
        .http
        .delete(&url)
        .json(&json!({"access_token": d}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
}

async fn forms_without_csrf_token_or_from_another_origin_are_refused(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let page = browser
        .get(&f.authorize_url(&[("scope", "access_profile")]))
        .await;
    let mut fields = page.form("/signin");
    set(&mut fields, "username", &f.username);
    set(&mut fields, "password", PASSWORD);
    let mut forged = fields.clone();
    set(&mut forged, "csrf_token", "forged");
    assert_eq!(browser.post("/signin", &forged).await.status, 403);
    let foreign = browser
        .client
        .post(app.url("/signin"))
        .header("Origin", "https://evil.example.com")
        .form(&fields)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    // Another browser's token is not this browser's.
    let other = Browser::new(&app.origin);
    assert_eq!(other.post("/signin", &fields).await.status, 403);
    // The genuine form works, and then the consent form is checked the same way.
    let signed_in = browser.post("/signin", &fields).await;
    assert_eq!(signed_in.status, 303);
    let consent = browser.get(&signed_in.location().unwrap()).await;
    let mut decision = consent.form("/v1/oauth/authorize");
    decision.push(("decision".to_owned(), "allow".to_owned()));
    let mut forged = decision.clone();
    set(&mut forged, "csrf_token", "forged");
    let answer = browser.post("/v1/oauth/authorize", &forged).await;
    assert_eq!(answer.status, 403);
    assert!(answer.location().is_none());
    let foreign = browser
        .client
        .post(app.url("/v1/oauth/authorize"))
        .header("Origin", "null")
        .form(&decision)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert_eq!(
        browser.post("/v1/oauth/authorize", &decision).await.status,
        303
    );
}

async fn pages_send_the_security_headers(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let sign_in = browser
        .get(&f.authorize_url(&[("scope", "access_profile")]))
        .await;
    let consent = browser
        .to_consent(
            &f.authorize_url(&[("scope", "access_profile")]),
            &f.username,
            PASSWORD,
        )
        .await;
    let error = browser
        .get("/v1/oauth/authorize?client_id=nope&scope=access_profile")
        .await;
    for (name, page) in [
        ("sign-in", &sign_in),
        ("consent", &consent),
        ("error", &error),
    ] {
        assert_eq!(page.header("x-frame-options"), "DENY", "{name}");
        assert_eq!(page.header("referrer-policy"), "no-referrer", "{name}");
        assert_eq!(page.header("cache-control"), "no-store", "{name}");
        let csp = page.header("content-security-policy");
        assert!(
            csp.starts_with("default-src 'self'; frame-ancestors 'none'; form-action 'self'"),
            "{name}: {csp}"
        );
        assert!(csp.ends_with("; base-uri 'none'"), "{name}: {csp}");
        assert!(
            !page.body.contains("http://") || name == "error" || !page.body.contains("<script"),
            "{name}"
        );
    }
    assert!(consent
        .header("content-security-policy")
        .contains("form-action 'self' https://app.example.com;"));
    assert!(!sign_in
        .header("content-security-policy")
        .contains("app.example.com"));
    let cookie = sign_in.header("set-cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    assert!(
        !cookie.contains("Secure"),
        "no Secure flag over plain HTTP: {cookie}"
    );
    // Pages load nothing from elsewhere.
    for page in [&sign_in, &consent] {
        assert!(
            !page.body.contains("src=\"http") && !page.body.contains("href=\"http"),
            "{}",
            page.body
        );
    }
}

async fn unknown_user_and_wrong_password_get_the_same_answer(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let mut answers = Vec::new();
    for username in ["nobody-here", f.username.as_str()] {
        let browser = Browser::new(&app.origin);
        let page = browser.get("/signin?return_to=/account").await;
        let answer = browser.sign_in(&page, username, "wrong password").await;
        let next = browser.get(&answer.location().unwrap()).await;
        answers.push((answer.status, answer.location(), next.status, next.text()));
    }
    assert_eq!(answers[0], answers[1]);
    assert!(answers[0].3.contains("Incorrect username or password."));
}

async fn sign_in_is_throttled_per_account_and_address_without_locking_others_out(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let attacker = Browser::new(&app.origin);
    let page = attacker.get("/signin").await;
    for _ in 0..5 {
        let answer = attacker.sign_in(&page, &f.username, "wrong password").await;
        assert_eq!(answer.status, 303);
    }
    // The sixth attempt from that address waits, even with the right password.
    let answer = attacker.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 429);
    let retry: u64 = answer.header("retry-after").parse().unwrap();
    assert!((1..=31).contains(&retry), "{retry}");
    // The account's owner, from another address, signs in.
    let owner = Browser::from(&app.origin, Some("127.0.0.2".parse().unwrap()));
    let page = owner.get("/signin").await;
    let answer = owner.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.location().as_deref(), Some("/account"));
    // Past 20 failures an address waits whatever account it tries.
    let sprayer = Browser::from(&app.origin, Some("127.0.0.3".parse().unwrap()));
    let page = sprayer.get("/signin").await;
    for i in 0..20 {
        let answer = sprayer.sign_in(&page, &format!("victim{i}"), "guess").await;
        assert_eq!(answer.status, 303, "attempt {i}");
    }
    assert_eq!(
        sprayer.sign_in(&page, "victim99", "guess").await.status,
        429
    );

    // Guesses sent all at once are counted as they are let in: still only 5
    // get a password check, on every database. Those past the hashing queue
    // are refused at once (503) without being counted.
    let parallel = std::sync::Arc::new(Browser::from(
        &app.origin,
        Some("127.0.0.4".parse().unwrap()),
    ));
    let page = std::sync::Arc::new(parallel.get("/signin").await);
    let guesses: Vec<_> = (0..24)
        .map(|i| {
            let (browser, page, username) = (parallel.clone(), page.clone(), f.username.clone());
            tokio::spawn(async move {
                browser
                    .sign_in(&page, &username, &format!("guess {i}"))
                    .await
                    .status
            })
        })
        .collect();
    let mut checked = 0;
    for guess in guesses {
        let status = guess.await.unwrap();
        assert!(status == 303 || status == 429 || status == 503, "{status}");
        checked += usize::from(status == 303);
    }
    assert_eq!(checked, 5);
}

async fn the_metadata_document_lists_every_endpoint(backend: Backend) {
    let Some((app, _f)) = spawn(backend).await else {
        return;
    };
    let body: Value = app
        .http
        .get(app.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["issuer"], app.origin);
    assert_eq!(
        body["authorization_endpoint"],
        format!("{}/v1/oauth/authorize", app.origin)
    );
    assert_eq!(
        body["token_endpoint"],
        format!("{}/v1/oauth/access_token", app.origin)
    );
    assert_eq!(
        body["revocation_endpoint"],
        format!("{}/v1/oauth/revoke", app.origin)
    );
    assert_eq!(
        body["introspection_endpoint"],
        format!("{}/v1/oauth/introspect", app.origin)
    );
    assert_eq!(
        body["device_authorization_endpoint"],
        format!("{}/v1/oauth/device_authorization", app.origin)
    );
    assert_eq!(
        body["grant_types_supported"],
        json!([
            "authorization_code",
            "refresh_token",
            "implicit",
            "urn:ietf:params:oauth:grant-type:device_code"
        ])
    );
    assert_eq!(body["code_challenge_methods_supported"], json!(["S256"]));
    // The Venmo scopes and OpenID Connect's openid, profile, email, phone.
    assert_eq!(body["scopes_supported"].as_array().unwrap().len(), 12);
    // A known OAuth path with another method: JSON 405; an unknown one: JSON 404.
    for (method, path, status, code) in [
        (
            reqwest::Method::GET,
            "/v1/oauth/token",
            405,
            "method_not_allowed",
        ),
        (
            reqwest::Method::PUT,
            "/v1/oauth/authorize",
            405,
            "method_not_allowed",
        ),
        (reqwest::Method::GET, "/v1/oauth/nowhere", 404, "not_found"),
    ] {
        let response = app
            .http
            .request(method, app.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{path}");
    }
}

/// A whole flow against the real binary: its log holds no token, code, secret
/// or password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_never_contains_a_credential() {
    let Some(db) = TestDb::new(Backend::Sqlite).await else {
        return;
    };
    let server = ServeProcess::start(&db.url_string(), &[]);
    let app = TestApp {
        origin: server.origin.clone(),
        store: db.store().await,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        db,
    };
    let f = fixture_with_redirect(&app, "https://app.example.com/callback").await;
    let query = authorize_code(&app, &f, "access_profile", None).await;
    let (_, tokens) = token_request(
        &app,
        &[
            ("code", &query["code"]),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    let refresh = tokens["refresh_token"].as_str().unwrap().to_owned();
    // Credentials in query strings too.
    app.http
        .get(app.url(&format!(
            "/healthz?access_token={access}&code={}&client_secret={}",
            query["code"], f.client_secret
        )))
        .send()
        .await
        .unwrap();
    token_request(
        &app,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    let log = server.stop();
    assert!(
        log.contains("/v1/oauth/access_token"),
        "the log has the requests: {log}"
    );
    for secret in [
        access.as_str(),
        refresh.as_str(),
        query["code"].as_str(),
        f.client_secret.as_str(),
        PASSWORD,
    ] {
        assert!(!log.contains(secret), "{secret} leaked into the log");
    }
}

async fn too_many_oauth_requests_from_one_address_get_429(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.oauth_rate_limit = std::num::NonZeroU32::new(3).unwrap();
    })
    .await
    else {
        return;
    };
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..5 {
        let response = app
            .http
            .post(app.url("/v1/oauth/token"))
            .form(&[("code", "tly_code_x")])
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            retry_after = response.headers().get("retry-after").cloned();
            // The token endpoint's own error shape (RFC 6749 §5.2), which
            // OAuth clients parse.
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"], "rate_limited");
            assert!(body["error_description"].is_string());
        }
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429]);
    assert!(retry_after.is_some());
    // A person opening the authorize or logout URL (or answering the logout
    // confirmation) gets a page, not JSON.
    for page in [
        app.http
            .get(app.url("/v1/oauth/authorize?client_id=x&scope=access_profile"))
            .send(),
        app.http.get(app.url("/v1/oauth/logout?state=x")).send(),
        app.http
            .post(app.url("/v1/oauth/logout/confirm"))
            .form(&[("decision", "sign_out")])
            .send(),
    ] {
        let page = page.await.unwrap();
        assert_eq!(page.status(), 429, "{}", page.url());
        assert!(page.headers().contains_key("retry-after"));
        assert!(page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
    }
    // Other addresses have their own allowance.
    let other = reqwest::Client::builder()
        .local_address(Some("127.0.0.4".parse().unwrap()))
        .build()
        .unwrap();
    let response = other
        .post(app.url("/v1/oauth/token"))
        .form(&[("code", "tly_code_x")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

async fn people_sign_in_with_their_username_email_or_phone(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    tally::admin::user_add(
        store,
        &tally::auth::password::PasswordHasher::new(1),
        tally::admin::UserAdd {
            username: "Ann_Lee".to_owned(),
            password: PASSWORD.to_owned(),
            email: Some("ann@example.com".to_owned()),
            phone: Some("(212) 555-0187".to_owned()),
            // Addresses sign in only once verified.
            verified: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for identifier in [
        "Ann_Lee",
        "ann_lee",
        "ANN@example.com",
        "212-555-0187",
        "+1 (212) 555 0187",
    ] {
        let browser = Browser::new(&app.origin);
        let page = browser.get("/signin").await;
        let answer = browser.sign_in(&page, identifier, PASSWORD).await;
        assert_eq!(
            answer.location().as_deref(),
            Some("/account"),
            "{identifier}"
        );
        let account = browser.get("/account").await;
        assert_eq!(account.status, 200, "{identifier}");
        assert!(account.text().contains("Ann_Lee"));
    }
}

/// Two instances on one PostgreSQL, each remembering introspections for a
/// moment: a token revoked through one, or whose user or app is suspended (by
/// `tally admin`, another process), is refused by both within 1 second (SPEC
/// §6), and so is a suspended calling app.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_one_instance_is_seen_by_another_within_a_second() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    // Not the servers' store: like `tally admin`, it cannot tell them.
    let store = db.store().await;
    let first = ServeProcess::start(&db.url_string(), &[]);
    let second = ServeProcess::start(&db.url_string(), &[]);
    let app = TestApp {
        origin: first.origin.clone(),
        store: store.clone(),
        http: reqwest::Client::new(),
        db,
    };
    let f = fixture(&app).await;
    let caller = fixture(&app).await;
    // A resource server: it learns about other apps' tokens (SPEC §6).
    tally::admin::app_set(store.as_ref(), introspect_any(&caller.client_id))
        .await
        .unwrap();
    let scopes = tally::domain::ScopeSet::parse("access_profile").unwrap();
    let personal =
        tally::oauth::tokens::issue_personal_access_token(store.as_ref(), &f.user_id, &scopes)
            .await
            .unwrap();
    let of_app = tally::oauth::tokens::issue_access_token(
        store.as_ref(),
        &f.user_id,
        Some(&f.client_id),
        &scopes,
        "token",
        tally::oauth::tokens::CLIENT_SIDE_TTL,
    )
    .await
    .unwrap();
    let origins = [first.origin.clone(), second.origin.clone()];
    // What an instance answers the calling app about a token: the status and
    // the body.
    let introspect_at = |origin: &str, token: &str| {
        let url = format!("{origin}/v1/oauth/introspect");
        let (id, secret) = (caller.client_id.clone(), caller.client_secret.clone());
        let token = token.to_owned();
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .basic_auth(id, Some(secret))
                .form(&[("token", token)])
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    // Whether an instance's API takes the token (the `Principal` of every API
    // request, which remembers token checks as introspection does).
    let user_path = format!("/v1/users/{}", f.user_id);
    let api_takes = |origin: &str, token: &str| {
        let url = format!("{origin}{user_path}");
        let token = token.to_owned();
        async move {
            let response = reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            response.status().as_u16() == 200
        }
    };
    // Every instance answers `expected` within a second of `since`, at the
    // introspection endpoint and in its API.
    let within_a_second = |token: &str, since: std::time::Instant, expected: bool| {
        let token = token.to_owned();
        let origins = origins.clone();
        async move {
            for origin in &origins {
                loop {
                    let (status, body) = introspect_at(origin, &token).await;
                    let active = status == 200 && body["active"] == true;
                    if active == expected
                        && (expected || body == json!({"active": false}))
                        && api_takes(origin, &token).await == expected
                    {
                        break;
                    }
                    assert!(
                        since.elapsed() < std::time::Duration::from_secs(1),
                        "{origin} still answers {status} {body} after 1 s"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    };
    let remembered = |token: &str| {
        let token = token.to_owned();
        let origins = origins.clone();
        async move {
            for origin in &origins {
                assert_eq!(introspect_at(origin, &token).await.1["active"], true);
                assert!(api_takes(origin, &token).await);
            }
        }
    };

    // A revocation through the first instance.
    remembered(personal.expose()).await;
    let revoked = reqwest::Client::new()
        .delete(format!("{}/v1/oauth/access_token", first.origin))
        .bearer_auth(personal.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    within_a_second(personal.expose(), std::time::Instant::now(), false).await;

    // The user suspended, then not; the app suspended.
    remembered(of_app.expose()).await;
    let flags = |suspended| tally::store::UserFlags {
        suspended: Some(suspended),
        verified: None,
    };
    tally::admin::user_flags(store.as_ref(), &f.username, flags(true))
        .await
        .unwrap();
    within_a_second(of_app.expose(), std::time::Instant::now(), false).await;
    tally::admin::user_flags(store.as_ref(), &f.username, flags(false))
        .await
        .unwrap();
    within_a_second(of_app.expose(), std::time::Instant::now(), true).await;
    tally::admin::app_suspend(store.as_ref(), &f.client_id, true)
        .await
        .unwrap();
    within_a_second(of_app.expose(), std::time::Instant::now(), false).await;

    // A suspended calling app is refused (401) everywhere within a second.
    let other_app_token = code_tokens(&app, &caller).await;
    let other = other_app_token["access_token"].as_str().unwrap().to_owned();
    remembered(&other).await;
    tally::admin::app_suspend(store.as_ref(), &caller.client_id, true)
        .await
        .unwrap();
    let since = std::time::Instant::now();
    for origin in &origins {
        loop {
            let (status, body) = introspect_at(origin, &other).await;
            if status == 401 {
                assert_eq!(body["error"], "invalid_client");
                break;
            }
            assert!(
                since.elapsed() < std::time::Duration::from_secs(1),
                "{origin} still answers {status} {body} after 1 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// The introspection endpoint reads the calling app and the token together;
/// the app is still authenticated first, whatever the token.
async fn introspection_refuses_a_caller_that_does_not_authenticate(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let tokens = code_tokens(&app, &f).await;
    let access = tokens["access_token"].as_str().unwrap();
    assert_eq!(introspect(&app, &f, access).await["active"], true);
    let ask = |id: String, secret: String, form: Vec<(&'static str, String)>| {
        let request = app
            .http
            .post(app.url("/v1/oauth/introspect"))
            .basic_auth(id, Some(secret))
            .form(&form);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let token = || vec![("token", access.to_owned())];
    for (id, secret) in [
        (f.client_id.clone(), "wrong".to_owned()),
        ("tly_unknown".to_owned(), f.client_secret.clone()),
    ] {
        for form in [token(), vec![]] {
            let (status, body) = ask(id.clone(), secret.clone(), form).await;
            assert_eq!(status, 401, "{body}");
            assert_eq!(body["error"], "invalid_client");
            assert!(body.get("active").is_none(), "{body}");
        }
    }
    // Authenticated, without a token: 400.
    let (status, body) = ask(f.client_id.clone(), f.client_secret.clone(), vec![]).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_request");
    // A suspended caller is refused at once by the instance that suspended it.
    tally::admin::app_suspend(app.store.as_ref(), &f.client_id, true)
        .await
        .unwrap();
    let (status, body) = ask(f.client_id.clone(), f.client_secret.clone(), token()).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "invalid_client");
}

async fn each_token_has_its_own_api_rate_limit(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.api_rate_limit = std::num::NonZeroU32::new(3).unwrap();
    })
    .await
    else {
        return;
    };
    let f = fixture(&app).await;
    let scopes = tally::domain::ScopeSet::parse("access_profile").unwrap();
    let issue = || {
        tally::oauth::tokens::issue_personal_access_token(app.store.as_ref(), &f.user_id, &scopes)
    };
    let first = issue().await.unwrap();
    let second = issue().await.unwrap();
    let me = |token: String| app.http.get(app.url("/v1/me")).bearer_auth(token).send();
    for _ in 0..3 {
        assert_eq!(me(first.expose().to_owned()).await.unwrap().status(), 200);
    }
    let limited = me(first.expose().to_owned()).await.unwrap();
    assert_eq!(limited.status(), 429);
    let wait: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=61).contains(&wait), "{wait}");
    let body: Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(me(second.expose().to_owned()).await.unwrap().status(), 200);
}

/// Instances of one deployment share the generated secret key: a session made
/// by one is honoured by another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_by_one_instance_works_on_another() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let first = ServeProcess::start(&db.url_string(), &[]);
    let second = ServeProcess::start(&db.url_string(), &[]);
    let app = TestApp {
        origin: first.origin.clone(),
        store: db.store().await,
        http: reqwest::Client::new(),
        db,
    };
    let f = fixture(&app).await;
    let browser = Browser::new(&first.origin);
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 303);
    // Cookies belong to the host, not the port, as in a browser.
    let account = browser.get(&format!("{}/account", second.origin)).await;
    assert_eq!(account.status, 200, "{}", account.body);
    assert!(account.text().contains(&f.username));
}

async fn a_code_exchanged_after_the_user_revoked_the_app_is_refused(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let query = authorize_code(&app, &f, "access_profile", None).await;
    // What the account page's Revoke button does, between authorize and exchange.
    assert!(app
        .store
        .revoke_app_for_user(&f.user_id, &f.client_id, tally::domain::now_micros())
        .await
        .unwrap());
    let (status, body) = token_request(
        &app,
        &[
            ("code", &query["code"]),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    assert!(body["error_description"]
        .as_str()
        .unwrap()
        .contains("revoked"));
}

async fn a_refresh_may_not_ask_for_more_scopes_than_were_granted(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let tokens = code_tokens(&app, &f).await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let with_scope = |scope: &'static str| {
        [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("scope", scope),
            ("client_id", f.client_id.as_str()),
            ("client_secret", f.client_secret.as_str()),
        ]
    };
    for scope in ["access_profile make_payments", "no_such_scope"] {
        let (status, body) = token_request(&app, &with_scope(scope)).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_scope")),
            "{scope}: {body}"
        );
    }
    // The refused requests did not spend the token. A narrower scope is
    // fine, and the new access token carries just that.
    let (status, body) = token_request(&app, &with_scope("access_profile")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["scope"], "access_profile");
}

/// The token endpoint remembers the apps it authenticated a moment; a
/// suspension or a new secret committed through this instance still takes
/// effect on the very next request.
async fn the_token_endpoint_sees_an_apps_suspension_and_new_secret_at_once(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let mut refresh = code_tokens(&app, &f).await["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let rotate = |refresh: String, secret: String| {
        let (app, client_id) = (&app, f.client_id.clone());
        async move {
            token_request(
                app,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", &refresh),
                    ("client_id", &client_id),
                    ("client_secret", &secret),
                ],
            )
            .await
        }
    };
    let (status, rotated) = rotate(refresh.clone(), f.client_secret.clone()).await;
    assert_eq!(status, 200, "{rotated}");
    refresh = rotated["refresh_token"].as_str().unwrap().to_owned();

    tally::admin::app_suspend(store, &f.client_id, true)
        .await
        .unwrap();
    let (status, refused) = rotate(refresh.clone(), f.client_secret.clone()).await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (401, Some("invalid_client"))
    );
    tally::admin::app_suspend(store, &f.client_id, false)
        .await
        .unwrap();
    let (status, rotated) = rotate(refresh.clone(), f.client_secret.clone()).await;
    assert_eq!(status, 200, "{rotated}");
    refresh = rotated["refresh_token"].as_str().unwrap().to_owned();

    let new_secret = "a-new-secret-for-the-app-0123456789";
    assert!(store
        .replace_app_secret(
            &f.user_id,
            &f.client_id,
            &tally::oauth::credentials::digest(new_secret)
        )
        .await
        .unwrap());
    let (status, refused) = rotate(refresh.clone(), f.client_secret.clone()).await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (401, Some("invalid_client"))
    );
    let (status, rotated) = rotate(refresh, new_secret.to_owned()).await;
    assert_eq!(status, 200, "{rotated}");
}

/// `admin app set CLIENT_ID --introspect-any`: the app becomes a resource
/// server (SPEC §6).
fn introspect_any(client_id: &str) -> tally::admin::AppSet {
    tally::admin::AppSet {
        client_id: client_id.to_owned(),
        introspect_any: Some(true),
        ..Default::default()
    }
}
