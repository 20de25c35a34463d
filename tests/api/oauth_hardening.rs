//! The authorization server's hardening rules (SPEC §2, §6): no open
//! redirector, the redirect override policy, consent per response type,
//! repeated parameters, narrower refreshes, revocation and introspection
//! answers, and control characters, through the real HTTP surface.

use crate::browser::{query_of, set, Browser, Page};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::oauth::{authorize_code, code_tokens, introspect, oauth_client, spawn, token_request};
use crate::oauth_fixture::{fixture, fixture_with_redirect, Fixture, PASSWORD};
use oauth2::basic::BasicErrorResponseType;
use oauth2::{AuthorizationCode, CsrfToken, RefreshToken, RequestTokenError, Scope, TokenResponse};
use serde_json::{json, Value};

on_both_backends!(
    an_anonymous_browser_signs_in_before_any_error_goes_to_the_app,
    redirect_uri_overrides_keep_the_origin_and_stay_below_the_registered_path,
    a_consent_to_the_code_flow_never_approves_a_client_side_request,
    repeated_authorize_parameters_are_refused_and_unknown_ones_ignored,
    repeated_token_endpoint_parameters_are_invalid_request_and_unknown_ones_ignored,
    a_narrower_refresh_gives_an_access_token_of_that_narrower_scope,
    a_foreign_or_dead_refresh_token_is_invalid_grant_and_reveals_no_scope,
    revocation_answers_an_empty_json_object_and_introspection_names_the_token_type,
    control_characters_in_oauth_parameters_are_refused_before_anything_else,
);

/// A browser signed in as `f`'s user.
async fn signed_in(app: &TestApp, f: &Fixture) -> Browser {
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    browser
}

/// Registers another app of `f`'s user; returns its client id.
async fn add_app(app: &TestApp, f: &Fixture, redirect_url: &str) -> String {
    tally::admin::app_add(
        app.store.as_ref(),
        tally::admin::AppAdd {
            owner: f.username.clone(),
            name: "Native".to_owned(),
            redirect_url: redirect_url.to_owned(),
            description: None,
            site_url: None,
        },
    )
    .await
    .unwrap()
    .client_id
}

/// An authorize URL (a path) with the parameters exactly as listed, repeats kept.
fn authorize_path(params: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in params {
        query.append_pair(name, value);
    }
    format!("/v1/oauth/authorize?{}", query.finish())
}

fn assert_error_page(page: &Page, case: &str) {
    assert_eq!(page.status, 400, "{case}: {}", page.body);
    assert!(page.location().is_none(), "{case} redirected");
    assert!(
        page.header("content-type").starts_with("text/html"),
        "{case}"
    );
}

/// Asserts a 303 to `redirect` carrying `error`; returns the redirect's query.
fn assert_error_redirect(
    page: &Page,
    redirect: &str,
    error: &str,
    case: &str,
) -> std::collections::HashMap<String, String> {
    assert_eq!(page.status, 303, "{case}: {}", page.body);
    let location = page.location().unwrap();
    assert!(location.starts_with(redirect), "{case}: {location}");
    let query = query_of(&location);
    assert_eq!(query["error"], error, "{case}: {location}");
    query
}

async fn an_anonymous_browser_signs_in_before_any_error_goes_to_the_app(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let f = fixture_with_redirect(&app, "https://evil.example/x").await;
    let challenge = "a".repeat(43);
    let cases = [
        (
            "unknown scope",
            f.authorize_url(&[("scope", "bogus")]),
            "invalid_scope",
        ),
        (
            "unsupported response type",
            f.authorize_url(&[("scope", "access_profile"), ("response_type", "magic")]),
            "unsupported_response_type",
        ),
        (
            "plain PKCE",
            f.authorize_url(&[
                ("scope", "access_profile"),
                ("response_type", "code"),
                ("code_challenge", &challenge),
                ("code_challenge_method", "plain"),
            ]),
            "invalid_request",
        ),
        (
            "repeated scope",
            f.authorize_url(&[("scope", "access_profile"), ("scope", "access_profile")]),
            "invalid_request",
        ),
    ];
    let browser = Browser::new(&app.origin);
    for (case, url, _) in &cases {
        let page = browser.get(url).await;
        assert_eq!(page.status, 200, "{case}");
        assert!(page.location().is_none(), "{case} redirected");
        assert!(!page.body.contains("evil.example"), "{case}");
        let text = page.text();
        assert!(
            text.contains("Splitter") && text.contains("wants to use your Tally account"),
            "{case}: the sign-in page names the app: {text}"
        );
        page.form("/signin");
    }
    // Signed in, the same requests send their errors to the app.
    let page = browser.get(&cases[0].1).await;
    let signed_in = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(signed_in.status, 303);
    let back = browser.get(&signed_in.location().unwrap()).await;
    assert_error_redirect(
        &back,
        "https://evil.example/x?",
        "invalid_scope",
        cases[0].0,
    );
    for (case, url, error) in &cases[1..] {
        let page = browser.get(url).await;
        assert_error_redirect(&page, "https://evil.example/x?", error, case);
    }
}

async fn redirect_uri_overrides_keep_the_origin_and_stay_below_the_registered_path(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    // `f`'s app is registered with https://app.example.com/callback?app=1.
    let web = f.client_id.clone();
    let loopback_v4 = add_app(&app, &f, "http://127.0.0.1:8000/cb").await;
    let loopback_v6 = add_app(&app, &f, "http://[::1]/cb").await;
    let localhost = add_app(&app, &f, "http://localhost:8000/cb").await;
    let table: Vec<(&str, &str, bool)> = vec![
        (&web, "https://app.example.com/callback", true),
        (&web, "https://app.example.com/callback?x=2", true),
        (&web, "https://app.example.com/callback/done", true),
        (&web, "https://app.example.com/callback/a/b?x=2", true),
        (&web, "https://app.example.com/callbackx", false),
        (&web, "https://app.example.com/other", false),
        (&web, "https://app.example.com/", false),
        (&web, "https://app.example.com/callback/../other", false),
        (&web, "https://app.example.com/callback/./done", false),
        (&web, "https://app.example.com/callback/%2e%2e/other", false),
        (&web, "https://app.example.com/callback/%2E%2E/other", false),
        (&web, "https://app.example.com/callback/.%2e/other", false),
        (&web, "https://app.example.com/callback/%2e", false),
        (&web, "https://app.example.com/callback\\..\\other", false),
        (&web, "https://app.example.com/callback#", false),
        (&web, "https://app.example.com/callback/done#x", false),
        (&web, "https://app.example.com/callback?state=x", false),
        (&web, "http://app.example.com/callback", false),
        (&web, "https://app.example.com:8443/callback", false),
        (&web, "https://evil.example.com/callback", false),
        (&loopback_v4, "http://127.0.0.1:8000/cb", true),
        (&loopback_v4, "http://127.0.0.1:49152/cb", true),
        (&loopback_v4, "http://127.0.0.1/cb/done", true),
        (&loopback_v4, "http://127.0.0.1:49152/other", false),
        (&loopback_v4, "http://127.0.0.1:49152/cb/../other", false),
        (&loopback_v4, "https://127.0.0.1:8000/cb", false),
        (&loopback_v4, "http://localhost:8000/cb", false),
        (&loopback_v6, "http://[::1]:61000/cb", true),
        (&loopback_v6, "http://[::1]/cb/x", true),
        (&loopback_v6, "http://127.0.0.1:61000/cb", false),
        (&localhost, "http://localhost:8000/cb/done", true),
        (&localhost, "http://localhost:9000/cb", false),
    ];
    let browser = signed_in(&app, &f).await;
    for (client_id, given, allowed) in table {
        let url = authorize_path(&[
            ("client_id", client_id),
            ("scope", "access_profile"),
            ("response_type", "code"),
            ("redirect_uri", given),
            ("prompt", "consent"),
        ]);
        let page = browser.get(&url).await;
        if !allowed {
            assert_error_page(&page, given);
            continue;
        }
        assert_eq!(page.status, 200, "{given}: {}", page.body);
        let answer = browser.decide(&page, "allow").await;
        let location = answer.location().unwrap();
        assert!(location.starts_with(given), "{given}: sent to {location}");
        assert!(query_of(&location)["code"].starts_with("tly_code_"));
    }
}

async fn a_consent_to_the_code_flow_never_approves_a_client_side_request(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let client = oauth_client(&app, &f);
    let browser = signed_in(&app, &f).await;
    let payments = || Scope::new("make_payments".to_owned());
    let (code_url, _) = client
        .authorize_url(CsrfToken::new_random)
        .add_scope(payments())
        .url();
    let consent = browser.get(code_url.as_str()).await;
    assert_eq!(consent.status, 200);
    let answer = browser.decide(&consent, "allow").await;
    assert!(query_of(&answer.location().unwrap())["code"].starts_with("tly_code_"));
    // Remembered for the code flow: straight back with a code.
    let again = browser.get(code_url.as_str()).await;
    assert_eq!(again.status, 303);
    assert!(query_of(&again.location().unwrap())["code"].starts_with("tly_code_"));

    // A crafted link asking for a token in the URL, same app and scopes, shows
    // the consent page instead of handing one out; so does one that leaves
    // response_type out (its default is the client-side flow).
    let (token_url, _) = client
        .authorize_url(CsrfToken::new_random)
        .add_scope(payments())
        .use_implicit_flow()
        .url();
    assert!(token_url.as_str().contains("response_type=token"));
    for url in [
        token_url.to_string(),
        f.authorize_url(&[("scope", "make_payments")]),
    ] {
        let page = browser.get(&url).await;
        assert_eq!(page.status, 200, "{url}");
        assert!(page.location().is_none());
        let fields = page.form("/v1/oauth/authorize");
        assert!(fields.contains(&("response_type".to_owned(), "token".to_owned())));
    }
    // Once allowed for the client-side flow, that is remembered too.
    let consent = browser.get(token_url.as_str()).await;
    let answer = browser.decide(&consent, "allow").await;
    assert!(query_of(&answer.location().unwrap())["access_token"].starts_with("tly_at_"));
    let again = browser.get(token_url.as_str()).await;
    assert_eq!(again.status, 303);
    assert!(query_of(&again.location().unwrap())["access_token"].starts_with("tly_at_"));
}

async fn repeated_authorize_parameters_are_refused_and_unknown_ones_ignored(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let id = f.client_id.as_str();
    let registered = "https://app.example.com/callback?app=1";
    let anonymous = Browser::new(&app.origin);
    let browser = signed_in(&app, &f).await;
    // client_id or redirect_uri twice, even with one value: the error page, for
    // everyone.
    for (case, url) in [
        (
            "client_id twice",
            authorize_path(&[
                ("client_id", id),
                ("client_id", id),
                ("scope", "access_profile"),
            ]),
        ),
        (
            "redirect_uri twice",
            authorize_path(&[
                ("client_id", id),
                ("scope", "access_profile"),
                ("redirect_uri", registered),
                ("redirect_uri", registered),
            ]),
        ),
    ] {
        assert_error_page(&anonymous.get(&url).await, case);
        assert_error_page(&browser.get(&url).await, case);
    }
    // Any other recognized parameter twice: invalid_request to the app, once
    // signed in; a state given twice is not echoed.
    let challenge = "b".repeat(43);
    for name in [
        "scope",
        "response_type",
        "state",
        "prompt",
        "code_challenge",
        "code_challenge_method",
    ] {
        let mut params = vec![
            ("client_id", id),
            ("scope", "access_profile"),
            ("response_type", "code"),
            ("state", "st"),
            ("prompt", "consent"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ];
        let value = params.iter().find(|(n, _)| *n == name).unwrap().1;
        params.push((name, value));
        let url = authorize_path(&params);
        let page = anonymous.get(&url).await;
        assert_eq!(page.status, 200, "{name}");
        assert!(page.location().is_none(), "{name}");
        let page = browser.get(&url).await;
        let query = assert_error_redirect(&page, registered, "invalid_request", name);
        assert!(query["error_description"].contains(name), "{query:?}");
        assert_eq!(
            query.get("state").map(String::as_str),
            (name != "state").then_some("st"),
            "{name}"
        );
    }
    // The consent form is held to the same rule.
    let consent = browser
        .get(&f.authorize_url(&[("scope", "access_profile"), ("prompt", "consent")]))
        .await;
    let mut fields = consent.form("/v1/oauth/authorize");
    fields.push(("client_id".to_owned(), f.client_id.clone()));
    fields.push(("decision".to_owned(), "allow".to_owned()));
    assert_error_page(
        &browser.post("/v1/oauth/authorize", &fields).await,
        "consent form with client_id twice",
    );
    // Unknown parameters are ignored, even repeated with different values.
    let url = authorize_path(&[
        ("client_id", id),
        ("scope", "access_profile"),
        ("resource", "https://a.example/"),
        ("resource", "https://b.example/"),
        ("audience", "1"),
        ("audience", "2"),
    ]);
    let consent = browser.get(&url).await;
    assert_eq!(consent.status, 200, "{}", consent.body);
    let answer = browser.decide(&consent, "allow").await;
    assert!(query_of(&answer.location().unwrap())["access_token"].starts_with("tly_at_"));
}

async fn repeated_token_endpoint_parameters_are_invalid_request_and_unknown_ones_ignored(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let client = oauth_client(&app, &f);
    // RFC 8707 clients send `resource` more than once: served.
    let query = authorize_code(&app, &f, "access_profile", None).await;
    let token = client
        .exchange_code(AuthorizationCode::new(query["code"].clone()))
        .add_extra_param("resource", "https://a.example/")
        .add_extra_param("resource", "https://b.example/")
        .request_async(&http)
        .await
        .unwrap();
    let refreshed = client
        .exchange_refresh_token(token.refresh_token().unwrap())
        .add_extra_param("resource", "https://a.example/")
        .add_extra_param("resource", "https://b.example/")
        .request_async(&http)
        .await
        .unwrap();
    let refresh = refreshed.refresh_token().unwrap().secret().clone();

    // A recognized parameter twice, even with one value: invalid_request, and
    // nothing is spent.
    let query = authorize_code(&app, &f, "access_profile", None).await;
    let code = query["code"].as_str();
    let (id, secret) = (f.client_id.as_str(), f.client_secret.as_str());
    let credentials = [("client_id", id), ("client_secret", secret)];
    let with = |extra: &[(&'static str, &'static str)], base: &[(&'static str, &str)]| {
        let mut form: Vec<(String, String)> = credentials
            .iter()
            .chain(base)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        form.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        form
    };
    let code_form = [("grant_type", "authorization_code"), ("code", code)];
    let refresh_form = [("grant_type", "refresh_token"), ("refresh_token", &refresh)];
    let mut cases: Vec<(&str, Vec<(String, String)>)> = vec![
        ("code twice", with(&[], &code_form)),
        (
            "grant_type twice",
            with(&[("grant_type", "authorization_code")], &code_form),
        ),
        (
            "redirect_uri twice",
            with(&[("redirect_uri", "x"), ("redirect_uri", "x")], &code_form),
        ),
        (
            "code_verifier twice",
            with(
                &[("code_verifier", "x"), ("code_verifier", "x")],
                &code_form,
            ),
        ),
        ("refresh_token twice", with(&[], &refresh_form)),
        (
            "scope twice",
            with(
                &[("scope", "access_profile"), ("scope", "access_profile")],
                &refresh_form,
            ),
        ),
    ];
    cases[0].1.push(("code".to_owned(), code.to_owned()));
    cases[4]
        .1
        .push(("refresh_token".to_owned(), refresh.clone()));
    let mut client_id_twice = with(&[], &code_form);
    client_id_twice.push(("client_id".to_owned(), f.client_id.clone()));
    cases.push(("client_id twice", client_id_twice));
    let mut secret_twice = with(&[], &code_form);
    secret_twice.push(("client_secret".to_owned(), f.client_secret.clone()));
    cases.push(("client_secret twice", secret_twice));
    for (case, form) in &cases {
        let response = http
            .post(app.url("/v1/oauth/token"))
            .form(form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{case}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_request", "{case}: {body}");
    }
    // Once in the query string and once in the body counts as twice.
    let response = http
        .post(app.url("/v1/oauth/access_token?grant_type=authorization_code"))
        .form(&with(&[], &code_form))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // A JSON object naming a recognized key twice, too.
    let json_twice = format!(
        r#"{{"client_id":"{id}","client_secret":"{secret}","code":"{code}","code":"{code}"}}"#
    );
    let response = http
        .post(app.url("/v1/oauth/token"))
        .header("content-type", "application/json")
        .body(json_twice)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request", "{body}");
    // None of that spent the code or the refresh token; an unknown key
    // repeated in JSON is ignored.
    let json_resource = format!(
        r#"{{"client_id":"{id}","client_secret":"{secret}","code":"{code}","resource":"a","resource":"b"}}"#
    );
    let response = http
        .post(app.url("/v1/oauth/token"))
        .header("content-type", "application/json")
        .body(json_resource)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let (status, body) = token_request(
        &app,
        &with(&[], &refresh_form)
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let access = body["access_token"].as_str().unwrap().to_owned();

    // Revocation and introspection: the same rule.
    for endpoint in ["/v1/oauth/revoke", "/v1/oauth/introspect"] {
        for (name, value) in [
            ("token", access.as_str()),
            ("token_type_hint", "access_token"),
            ("client_id", id),
            ("client_secret", secret),
        ] {
            let mut form = vec![
                ("client_id", id),
                ("client_secret", secret),
                ("token", access.as_str()),
                ("token_type_hint", "access_token"),
            ];
            form.push((name, value));
            let response = http
                .post(app.url(endpoint))
                .form(&form)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{endpoint} {name}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(
                body["error"], "invalid_request",
                "{endpoint} {name}: {body}"
            );
        }
    }
    assert_eq!(introspect(&app, &f, &access).await["active"], true);
    let ignored = [
        ("client_id", id),
        ("client_secret", secret),
        ("token", access.as_str()),
        ("resource", "a"),
        ("resource", "b"),
    ];
    let response = http
        .post(app.url("/v1/oauth/introspect"))
        .form(&ignored)
        .send()
        .await
        .unwrap();
    assert_eq!(response.json::<Value>().await.unwrap()["active"], true);
    let response = http
        .post(app.url("/v1/oauth/revoke"))
        .form(&ignored)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        introspect(&app, &f, &access).await,
        json!({"active": false})
    );
}

async fn a_narrower_refresh_gives_an_access_token_of_that_narrower_scope(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let http = reqwest::Client::new();
    let client = oauth_client(&app, &f);
    let query = authorize_code(&app, &f, "access_profile access_balance", None).await;
    let granted = client
        .exchange_code(AuthorizationCode::new(query["code"].clone()))
        .request_async(&http)
        .await
        .unwrap();
    let narrowed = client
        .exchange_refresh_token(granted.refresh_token().unwrap())
        .add_scope(Scope::new("access_balance".to_owned()))
        .request_async(&http)
        .await
        .unwrap();
    let scopes = |token: &oauth2::basic::BasicTokenResponse| -> Vec<String> {
        token
            .scopes()
            .unwrap()
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    assert_eq!(scopes(&narrowed), ["access_balance"]);
    let narrow = narrowed.access_token().secret();
    let info = introspect(&app, &f, narrow).await;
    assert_eq!(info["active"], true);
    assert_eq!(info["scope"], "access_balance");
    let me = |token: String| app.http.get(app.url("/v1/me")).bearer_auth(token).send();
    let response = me(narrow.clone()).await.unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_scope");
    assert_eq!(
        me(granted.access_token().secret().clone())
            .await
            .unwrap()
            .status(),
        200
    );
    // The new refresh token keeps the grant's scopes (RFC 6749 §6): a refresh
    // that asks for nothing less gets them all back.
    let refresh = narrowed.refresh_token().unwrap();
    let info = introspect(&app, &f, refresh.secret()).await;
    assert_eq!(info["scope"], "access_profile access_balance");
    let full = client
        .exchange_refresh_token(refresh)
        .request_async(&http)
        .await
        .unwrap();
    assert_eq!(scopes(&full), ["access_profile", "access_balance"]);
    assert_eq!(
        me(full.access_token().secret().clone())
            .await
            .unwrap()
            .status(),
        200
    );
}

async fn a_foreign_or_dead_refresh_token_is_invalid_grant_and_reveals_no_scope(backend: Backend) {
    let Some((app, a)) = spawn(backend).await else {
        return;
    };
    let b = fixture(&app).await;
    let http = reqwest::Client::new();
    let tokens = code_tokens(&app, &a).await;
    let refresh = RefreshToken::new(tokens["refresh_token"].as_str().unwrap().to_owned());
    let wider = [
        "access_profile",
        "access_balance",
        "make_payments",
        "access_email",
    ]
    .map(|s| Scope::new(s.to_owned()));
    let refused_without_a_hint =
        |error: RequestTokenError<_, oauth2::basic::BasicErrorResponse>, case: &str| match error {
            RequestTokenError::ServerResponse(response) => {
                assert_eq!(
                    *response.error(),
                    BasicErrorResponseType::InvalidGrant,
                    "{case}"
                );
                let text = response.error_description().cloned().unwrap_or_default();
                for hint in ["access_", "make_payments", a.username.as_str(), "scope"] {
                    assert!(!text.contains(hint), "{case}: {text:?} names {hint}");
                }
            }
            other => panic!("{case}: {other:?}"),
        };
    // App B presents app A's live refresh token asking for more.
    let error = oauth_client(&app, &b)
        .exchange_refresh_token(&refresh)
        .add_scopes(wider.clone())
        .request_async(&http)
        .await
        .unwrap_err();
    refused_without_a_hint(error, "another app's token");
    // An unknown one.
    let error = oauth_client(&app, &a)
        .exchange_refresh_token(&RefreshToken::new("tly_rt_unknown".to_owned()))
        .add_scopes(wider.clone())
        .request_async(&http)
        .await
        .unwrap_err();
    refused_without_a_hint(error, "an unknown token");
    // A wider scope on A's own live token is invalid_scope, and spends nothing.
    let error = oauth_client(&app, &a)
        .exchange_refresh_token(&refresh)
        .add_scopes(wider.clone())
        .request_async(&http)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RequestTokenError::ServerResponse(r) if *r.error() == BasicErrorResponseType::InvalidScope),
        "{error:?}"
    );
    // B's attempt did not spend it either: A refreshes.
    let rotated = oauth_client(&app, &a)
        .exchange_refresh_token(&refresh)
        .request_async(&http)
        .await
        .unwrap();
    // A revoked one (a dead token of A's own).
    let next = rotated.refresh_token().unwrap().clone();
    let response = app
        .http
        .post(app.url("/v1/oauth/revoke"))
        .basic_auth(&a.client_id, Some(&a.client_secret))
        .form(&[("token", next.secret())])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let error = oauth_client(&app, &a)
        .exchange_refresh_token(&next)
        .add_scopes(wider)
        .request_async(&http)
        .await
        .unwrap_err();
    refused_without_a_hint(error, "a revoked token");
}

async fn revocation_answers_an_empty_json_object_and_introspection_names_the_token_type(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let tokens = code_tokens(&app, &f).await;
    let access = tokens["access_token"].as_str().unwrap();
    let refresh = tokens["refresh_token"].as_str().unwrap();
    assert_eq!(introspect(&app, &f, access).await["token_type"], "bearer");
    assert_eq!(
        introspect(&app, &f, refresh).await["token_type"],
        "refresh_token"
    );
    for token in [access, "tly_at_unknown"] {
        let response = app
            .http
            .post(app.url("/v1/oauth/revoke"))
            .basic_auth(&f.client_id, Some(&f.client_secret))
            .form(&[("token", token)])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(response.text().await.unwrap(), "{}");
    }
    assert_eq!(introspect(&app, &f, access).await, json!({"active": false}));
    // Clients that parse every answer as JSON (simple-oauth2's revokeAll) read
    // it, and the refresh token's family is gone.
    let tokens = code_tokens(&app, &f).await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let response = app
        .http
        .post(app.url("/v1/oauth/revoke"))
        .form(&[
            ("token", refresh),
            ("token_type_hint", "refresh_token"),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.json::<Value>().await.unwrap(), json!({}));
    for token in [refresh, tokens["access_token"].as_str().unwrap()] {
        assert_eq!(introspect(&app, &f, token).await, json!({"active": false}));
    }
}

async fn control_characters_in_oauth_parameters_are_refused_before_anything_else(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let registered = "https://app.example.com/callback?app=1";
    let anonymous = Browser::new(&app.origin);
    let browser = signed_in(&app, &f).await;
    let http = reqwest::Client::new();
    let (id, secret) = (f.client_id.as_str(), f.client_secret.as_str());
    for control in ['\0', '\u{1}', '\u{7f}', '\u{85}'] {
        let bad = format!("a{control}b");
        let case = |what: &str| format!("{what} with {control:?}");
        // Authorize: client_id and redirect_uri get the error page.
        let bad_client = authorize_path(&[("client_id", &bad), ("scope", "access_profile")]);
        let bad_client_tail = authorize_path(&[
            ("client_id", &format!("{id}{control}")),
            ("scope", "access_profile"),
        ]);
        let bad_redirect = authorize_path(&[
            ("client_id", id),
            ("scope", "access_profile"),
            (
                "redirect_uri",
                &format!("https://app.example.com/callback/{bad}"),
            ),
        ]);
        for (what, url) in [
            ("client_id", &bad_client),
            ("client_id tail", &bad_client_tail),
            ("redirect_uri", &bad_redirect),
        ] {
            assert_error_page(&anonymous.get(url).await, &case(what));
            assert_error_page(&browser.get(url).await, &case(what));
        }
        // Any other parameter: invalid_request to the app, once signed in.
        for (name, value) in [
            ("scope", format!("access_profile{control}")),
            ("state", bad.clone()),
            ("response_type", format!("code{control}")),
            ("prompt", bad.clone()),
            ("resource", bad.clone()),
        ] {
            let url = authorize_path(&[
                ("client_id", id),
                ("scope", "access_profile"),
                (name, &value),
            ]);
            let url = if name == "scope" {
                authorize_path(&[("client_id", id), ("scope", &value)])
            } else {
                url
            };
            let page = anonymous.get(&url).await;
            assert_eq!(page.status, 200, "{}", case(name));
            assert!(page.location().is_none());
            let page = browser.get(&url).await;
            let query = assert_error_redirect(&page, registered, "invalid_request", &case(name));
            assert!(!query.contains_key("state"), "{}", case(name));
        }

        // The JSON endpoints: 400 invalid_request before the client is
        // authenticated (so a bad client_id is not a 401).
        let endpoints: [(&str, &[&str]); 4] = [
            (
                "/v1/oauth/access_token",
                &[
                    "code",
                    "client_id",
                    "client_secret",
                    "grant_type",
                    "redirect_uri",
                    "code_verifier",
                    "resource",
                ],
            ),
            ("/v1/oauth/token", &["refresh_token", "scope", "client_id"]),
            (
                "/v1/oauth/revoke",
                &["token", "token_type_hint", "client_id", "resource"],
            ),
            (
                "/v1/oauth/introspect",
                &["token", "client_secret", "client_id"],
            ),
        ];
        for (endpoint, names) in endpoints {
            for name in names {
                let mut form = vec![
                    ("client_id".to_owned(), id.to_owned()),
                    ("client_secret".to_owned(), secret.to_owned()),
                ];
                if endpoint.ends_with("/revoke") || endpoint.ends_with("/introspect") {
                    form.push(("token".to_owned(), "tly_at_x".to_owned()));
                } else if *name == "refresh_token" || *name == "scope" {
                    form.push(("refresh_token".to_owned(), "tly_rt_x".to_owned()));
                } else {
                    form.push(("code".to_owned(), "tly_code_x".to_owned()));
                }
                set(&mut form, name, &bad);
                let response = http
                    .post(app.url(endpoint))
                    .form(&form)
                    .send()
                    .await
                    .unwrap();
                let what = case(&format!("{endpoint} {name}"));
                assert_eq!(response.status(), 400, "{what}");
                let body: Value = response.json().await.unwrap();
                assert_eq!(body["error"], "invalid_request", "{what}: {body}");
                assert!(body["error_description"].is_string(), "{what}");
            }
        }
        // In a JSON body, in a parameter's name, and in HTTP Basic credentials.
        let response = http
            .post(app.url("/v1/oauth/token"))
            .json(&json!({"client_id": bad, "client_secret": secret, "code": "tly_code_x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{}", case("JSON client_id"));
        let response = http
            .post(app.url("/v1/oauth/token"))
            .form(&[
                ("client_id", id),
                ("client_secret", secret),
                ("code", "tly_code_x"),
                (bad.as_str(), "1"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{}", case("a name"));
        for endpoint in ["/v1/oauth/token", "/v1/oauth/introspect"] {
            let response = http
                .post(app.url(endpoint))
                .basic_auth(&bad, Some(secret))
                .form(&[("code", "tly_code_x"), ("token", "tly_at_x")])
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{}", case(endpoint));
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"], "invalid_request");
        }
    }
}
