//! The rules every request meets at the edge, over real HTTP on both databases:
//! HEAD on every GET route, `Cache-Control: no-store` on every API answer,
//! control characters refused in any parameter (and arbitrary text never a
//! 5xx), the access log's peer, the payment bound on every medium, and `null`
//! for fields without a value.

use crate::browser::{set, Browser};
use crate::fixtures::{call, person, person_with, Person, PersonSpec};
use crate::helpers::{on_both_backends, tally, Backend, ServeProcess, TestApp, TestDb};
use crate::oauth_fixture::{fixture, PASSWORD};
use proptest::prelude::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::num::NonZeroU32;
use tally::domain::{has_forbidden_control, Lines};

on_both_backends!(
    every_get_route_answers_head_with_the_get_status_and_headers_and_no_body,
    every_api_answer_carries_cache_control_no_store,
    a_control_character_in_any_parameter_is_invalid_request,
    arbitrary_text_in_every_parameter_of_every_endpoint_is_never_a_5xx,
    the_access_log_names_the_connection_not_a_forwarding_header,
    no_payment_moves_more_than_5000_whatever_makes_it,
    fields_without_a_value_are_null_on_every_creation_path,
);

/// An app whose API rate limit no test here reaches.
async fn spawn(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, |settings| {
        settings.api_rate_limit = NonZeroU32::new(1_000_000).unwrap();
    })
    .await
}

/// Headers that legitimately differ between two answers to the same request.
const VOLATILE_HEADERS: [&str; 2] = ["date", "set-cookie"];

async fn every_get_route_answers_head_with_the_get_status_and_headers_and_no_body(
    backend: Backend,
) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let ann = person(store, "ann", "10").await;
    let bob = person(store, "bob", "0").await;
    let paid = app.pay(&ann, &bob, "1.00").await;
    let payment_id = paid.ok()["payment"]["id"].as_str().unwrap().to_owned();
    // Settled before the comparisons: a settlement between a GET and its HEAD
    // would change the answer's length.
    app.wait_for_status(&ann.token, &payment_id, "settled")
        .await;
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    assert_eq!(
        browser.sign_in(&page, &f.username, PASSWORD).await.status,
        303
    );

    // Every GET route of the API's route tables, with real ids.
    let authorize = f.authorize_url(&[("response_type", "code"), ("scope", "access_profile")]);
    let mut targets: Vec<(String, bool)> = Vec::new();
    for (method, path) in tally::api::ROUTES {
        if *method == "get" {
            let path = path
                .replace("{user_id}", &bob.id)
                .replace("{payment_id}", &payment_id);
            let query = if path == "/users" { "?query=bo" } else { "" };
            targets.push((format!("/v1{path}{query}"), false));
        }
    }
    for (method, path) in tally::web::OAUTH_PAGE_ROUTES
        .iter()
        .chain(tally::api::OAUTH_ROUTES)
    {
        if *method == "get" {
            match *path {
                "/authorize" => targets.push((authorize.clone(), false)),
                // OpenID Connect: the key set, and userinfo (401 here).
                "/jwks" | "/userinfo" => targets.push((format!("/v1/oauth{path}"), false)),
                // The confirmation page: a HEAD ends no session.
                "/logout" => targets.push((format!("/v1/oauth{path}"), false)),
                _ => panic!("a GET route this test does not know: {path}"),
            }
        }
    }
    // The origin's routes and the pages; `true` where the body may change
    // between two requests (counters).
    for (path, varies) in [
        ("/healthz", false),
        ("/readyz", false),
        ("/metrics", true),
        ("/.well-known/oauth-authorization-server", false),
        ("/.well-known/openid-configuration", false),
        ("/static/tally.css", false),
        ("/signin", false),
        ("/signup", false),
        ("/verify?token=unknown", false),
        ("/account", false),
        ("/developer", false),
        ("/device", false),
        ("/device?user_code=BCDF-GHJK", false),
        ("/device/consent", false),
        ("/", false),
        ("/no-such-page", false),
        ("/v1/no-such-path", false),
    ] {
        targets.push((path.to_owned(), varies));
    }
    targets.push((format!("/developer/apps/{}", f.client_id), false));

    for (path, varies) in &targets {
        for token in [Some(ann.token.as_str()), None] {
            let send = |method: Method| {
                let mut request = browser.client.request(method, app.url(path));
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                request.send()
            };
            let get = send(Method::GET).await.unwrap();
            let head = send(Method::HEAD).await.unwrap();
            assert_eq!(head.status(), get.status(), "HEAD {path}");
            let strip = |response: &reqwest::Response| {
                let mut headers: Vec<(String, String)> = response
                    .headers()
                    .iter()
                    .filter(|(name, _)| !VOLATILE_HEADERS.contains(&name.as_str()))
                    .filter(|(name, _)| !*varies || name.as_str() != "content-length")
                    .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
                    .collect();
                headers.sort();
                headers
            };
            assert_eq!(strip(&head), strip(&get), "HEAD {path}");
            let redirect = get.status().is_redirection();
            let get_body = get.bytes().await.unwrap();
            assert!(!get_body.is_empty() || redirect, "GET {path}");
            assert!(head.bytes().await.unwrap().is_empty(), "HEAD {path}");
        }
    }

    // A 405 names HEAD wherever GET is allowed.
    let answer = call(
        &app.http,
        &app.origin,
        Method::DELETE,
        "/payments",
        Some(&ann.token),
        None,
    )
    .await;
    answer.error(405, "method_not_allowed");
    assert_eq!(answer.headers["allow"], "GET, POST, HEAD");
}

async fn every_api_answer_carries_cache_control_no_store(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        settings.api_rate_limit = NonZeroU32::new(3).unwrap();
        settings.oauth_rate_limit = NonZeroU32::new(3).unwrap();
    })
    .await
    else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let bob = person(store, "bob", "0").await;
    let url = |path: &str| app.url(&format!("/v1{path}"));
    let http = &app.http;
    let big = "x".repeat(70 * 1024);
    // (what, the status it must get, the request); 0 where an earlier request
    // decides whether the limit is reached yet.
    let mut answers = vec![
        ("me", 200, http.get(url("/me")).bearer_auth(&ann.token)),
        ("openapi", 200, http.get(url("/openapi.json"))),
        ("no token", 401, http.get(url("/me"))),
        (
            "NUL",
            400,
            http.get(url("/users?query=%00")).bearer_auth(&bob.token),
        ),
        (
            "unknown user",
            404,
            http.get(url("/users/nobody")).bearer_auth(&bob.token),
        ),
        ("unknown path", 404, http.get(url("/no-such-path"))),
        ("wrong method", 405, http.delete(url("/me"))),
        (
            "big body",
            413,
            http.post(url("/payments"))
                .header("content-type", "application/json")
                .body(big),
        ),
        (
            "text body",
            415,
            http.post(url("/payments"))
                .header("content-type", "text/plain")
                .body("amount=1"),
        ),
        (
            "oauth",
            401,
            http.post(url("/oauth/token"))
                .form(&[("grant_type", "refresh_token"), ("refresh_token", "x")]),
        ),
    ];
    // Past the token's limit of 3 a minute (`/me` above used one).
    for _ in 0..3 {
        answers.push(("api limit", 0, http.get(url("/me")).bearer_auth(&ann.token)));
    }
    // Past the OAuth limit per client IP: refused by middleware, not a handler.
    for _ in 0..3 {
        answers.push(("oauth limit", 0, http.post(url("/oauth/revoke"))));
    }
    let mut statuses = Vec::new();
    for (what, expected, request) in answers {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        statuses.push(status);
        assert_eq!(
            response
                .headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{what}: {status}"
        );
        assert!(expected == 0 || status == expected, "{what}: {status}");
    }
    for status in [200, 400, 401, 404, 405, 413, 415, 429] {
        assert!(statuses.contains(&status), "no {status} in {statuses:?}");
    }
    // The origin's own routes are not API answers.
    let health = http.get(app.url("/healthz")).send().await.unwrap();
    assert!(health.headers().get("cache-control").is_none());
}

/// One refused value: where it goes and what it holds.
struct Refused {
    method: Method,
    path: String,
    body: Option<Value>,
}

async fn a_control_character_in_any_parameter_is_invalid_request(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "100").await;
    let bob = person(store, "bob", "0").await;
    let paid = app.pay(&ann, &bob, "1.00").await;
    let payment_id = paid.ok()["payment"]["id"].as_str().unwrap().to_owned();
    let pay = |field: &str, value: &str| {
        let mut body = json!({"user_id": bob.id, "amount": "1.00", "note": "lunch"});
        if matches!(field, "email" | "phone") {
            body.as_object_mut().unwrap().remove("user_id");
        }
        body[field] = json!(value);
        Refused {
            method: Method::POST,
            path: "/payments".to_owned(),
            body: Some(body),
        }
    };
    let get = |path: String| Refused {
        method: Method::GET,
        path,
        body: None,
    };
    for control in [
        "\0", "\u{1}", "\u{1b}", "\u{7f}", "\u{85}", "\u{9f}", "\t", "\n",
    ] {
        let q: String =
            url::form_urlencoded::byte_serialize(format!("a{control}b").as_bytes()).collect();
        let mut cases = vec![
            get(format!("/users?query={q}")),
            get(format!("/users?query=bob&limit={q}")),
            get(format!("/users?query=bob&offset={q}")),
            get(format!("/users/{q}")),
            get(format!("/users/{q}/friends")),
            get(format!("/users/{}/friends?after={q}", bob.id)),
            get(format!("/payments/{q}")),
            get(format!("/payments?after={q}")),
            get(format!("/payments?before={q}")),
            get(format!("/payments?actor={q}")),
            get(format!("/payments?status={q}")),
            get(format!("/payments?action={q}")),
            get(format!("/payments?before=2026-01-01&before_id={q}")),
            get(format!("/me?{q}=1")),
            Refused {
                method: Method::PUT,
                path: format!("/payments/{q}"),
                body: Some(json!({"action": "cancel"})),
            },
            Refused {
                method: Method::PUT,
                path: format!("/payments/{payment_id}"),
                body: Some(json!({"action": format!("cancel{control}")})),
            },
        ];
        for field in ["user_id", "email", "phone", "amount", "audience"] {
            cases.push(pay(field, &format!("1{control}")));
        }
        if !matches!(control, "\t" | "\n") {
            cases.push(pay("note", &format!("lunch{control}")));
        }
        for case in cases {
            let answer = call(
                &app.http,
                &app.origin,
                case.method.clone(),
                &case.path,
                Some(&ann.token),
                case.body.clone(),
            )
            .await;
            assert_eq!(
                (answer.status, answer.code()),
                (400, "invalid_request"),
                "{} {} {:?}: {}",
                case.method,
                case.path,
                case.body,
                answer.body
            );
        }
        // In the query string and form fields too, and before the token is
        // looked at.
        let form = app
            .http
            .post(app.url("/v1/payments"))
            .form(&[("note", format!("x{control}")), ("user_id", bob.id.clone())])
            .query(&[("access_token", format!("tly_at_{control}"))])
            .send()
            .await
            .unwrap();
        assert_eq!(form.status(), 400, "{control:?}");
        // The OAuth endpoints answer in their own shape.
        let oauth = app
            .http
            .post(app.url("/v1/oauth/token"))
            .form(&[
                ("grant_type", "authorization_code"),
                ("client_id", &format!("x{control}")),
                ("client_secret", "y"),
                ("code", "z"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(oauth.status(), 400, "{control:?}");
        let body: Value = oauth.json().await.unwrap();
        assert_eq!(body["error"], "invalid_request");
    }
    // Tab, CR and LF are allowed in a note, and kept.
    let answer = app
        .post(
            "/payments",
            &ann.token,
            json!({"user_id": bob.id, "amount": "1.00", "note": "line one\r\n\tline two"}),
        )
        .await;
    assert_eq!(answer.ok()["payment"]["note"], "line one\r\n\tline two");
    // Nothing else was written.
    let listed = app.get("/payments", &ann.token).await;
    assert_eq!(listed.ok().as_array().unwrap().len(), 2);
}

/// Where a fuzzed value goes.
#[derive(Debug, Clone, Copy)]
enum Place {
    Path,
    Query,
    Form,
    Json,
}

/// One text parameter of one endpoint, with the other parameters a valid
/// request would carry.
#[derive(Debug, Clone)]
struct Parameter {
    method: Method,
    /// `{}` marks the path id.
    path: &'static str,
    name: &'static str,
    place: Place,
    fixed: Vec<(&'static str, String)>,
}

/// Every text parameter of every REST endpoint, in every place it may come.
fn parameters(bob: &Person, payment_id: &str) -> Vec<Parameter> {
    let mut all = Vec::new();
    let bob_id = || ("user_id", bob.id.clone());
    let mut add = |method: Method,
                   path: &'static str,
                   name: &'static str,
                   fixed: Vec<(&'static str, String)>| {
        let places: &[Place] = if name == "{}" {
            &[Place::Path]
        } else if method == Method::GET {
            &[Place::Query]
        } else {
            &[Place::Query, Place::Form, Place::Json]
        };
        for place in places {
            all.push(Parameter {
                method: method.clone(),
                path,
                name,
                place: *place,
                fixed: fixed.clone(),
            });
        }
    };
    add(Method::GET, "/me", "access_token", vec![]);
    add(Method::GET, "/me", "anything", vec![]);
    for name in ["query", "limit", "offset"] {
        add(Method::GET, "/users", name, vec![("query", "bob".into())]);
    }
    add(Method::GET, "/users/{}", "{}", vec![]);
    add(Method::GET, "/users/{}/friends", "{}", vec![]);
    for name in ["limit", "after"] {
        add(
            Method::GET,
            "/users/{}/friends",
            name,
            vec![("{}", bob.id.clone())],
        );
    }
    for name in ["user_id", "amount", "note", "audience"] {
        add(
            Method::POST,
            "/payments",
            name,
            vec![bob_id(), ("amount", "0.01".into()), ("note", "x".into())],
        );
    }
    for name in ["email", "phone"] {
        add(
            Method::POST,
            "/payments",
            name,
            vec![("amount", "-0.01".into()), ("note", "x".into())],
        );
    }
    for name in ["action", "actor", "status", "limit", "after", "before"] {
        add(Method::GET, "/payments", name, vec![]);
    }
    add(
        Method::GET,
        "/payments",
        "before_id",
        vec![("before", "2030-01-01".into())],
    );
    add(Method::GET, "/payments/{}", "{}", vec![]);
    add(
        Method::PUT,
        "/payments/{}",
        "{}",
        vec![("action", "cancel".into())],
    );
    add(
        Method::PUT,
        "/payments/{}",
        "action",
        vec![("{}", payment_id.to_owned())],
    );
    all
}

/// Arbitrary Unicode, weighted towards what breaks things: control
/// characters, NUL, and long values.
fn arbitrary_text() -> impl Strategy<Value = String> {
    let short = prop::collection::vec(any::<char>(), 0..40);
    let long = prop::collection::vec(any::<char>(), 300..1_500);
    let control = (
        prop::collection::vec(any::<char>(), 0..10),
        prop_oneof![
            Just('\0'),
            (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
            (0x7fu32..0xa0).prop_map(|c| char::from_u32(c).unwrap()),
        ],
        prop::collection::vec(any::<char>(), 0..10),
    )
        .prop_map(|(mut before, c, after)| {
            before.push(c);
            before.extend(after);
            before
        });
    prop_oneof![5 => short, 1 => long, 3 => control].prop_map(|chars| chars.into_iter().collect())
}

fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Sends `value` as `parameter`; returns the status and the JSON body.
async fn send(
    app: &TestApp,
    token: &str,
    parameter: &Parameter,
    value: &str,
) -> Result<(u16, Value), String> {
    let mut pairs: Vec<(&str, String)> = parameter
        .fixed
        .iter()
        .filter(|(name, _)| *name != parameter.name)
        .cloned()
        .collect();
    let path_id = match parameter.place {
        Place::Path => value.to_owned(),
        _ => pairs
            .iter()
            .find(|(name, _)| *name == "{}")
            .map(|(_, id)| id.clone())
            .unwrap_or_default(),
    };
    pairs.retain(|(name, _)| *name != "{}");
    if !matches!(parameter.place, Place::Path) {
        pairs.push((parameter.name, value.to_owned()));
    }
    let path = parameter.path.replace("{}", &encode(&path_id));
    let mut request = app
        .http
        .request(parameter.method.clone(), app.url(&format!("/v1{path}")));
    if parameter.name != "access_token" {
        request = request.bearer_auth(token);
    }
    request = match parameter.place {
        Place::Path | Place::Query => request.query(&pairs),
        Place::Form => request.form(&pairs),
        Place::Json => request.json(
            &pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), json!(value)))
                .collect::<serde_json::Map<_, _>>(),
        ),
    };
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let text = response.text().await.map_err(|e| e.to_string())?;
    let body =
        serde_json::from_str(&text).map_err(|e| format!("{status}, not JSON ({e}): {text}"))?;
    Ok((status, body))
}

async fn arbitrary_text_in_every_parameter_of_every_endpoint_is_never_a_5xx(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let store = app.store.clone();
    let ann = person(store.as_ref(), "ann", "1000").await;
    let bob = person(store.as_ref(), "bob", "0").await;
    let paid = app.pay(&ann, &bob, "1.00").await;
    let payment_id = paid.ok()["payment"]["id"].as_str().unwrap().to_owned();
    let parameters = parameters(&bob, &payment_id);
    let count = parameters.len();
    let doc: Value = serde_json::from_str(tally::api::OPENAPI).unwrap();
    let runtime = tokio::runtime::Handle::current();
    let app = std::sync::Arc::new(app);
    let result = tokio::task::spawn_blocking(move || {
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 300,
            max_shrink_iters: 200,
            failure_persistence: None,
            ..Default::default()
        });
        runner
            .run(&(0..count, arbitrary_text()), |(index, value)| {
                let parameter = &parameters[index];
                let answer = runtime.block_on(send(&app, &ann.token, parameter, &value));
                let (status, body) = answer.map_err(TestCaseError::fail)?;
                prop_assert!(
                    status < 500,
                    "{} {} {} ({:?}) = {:?}: {} {}",
                    parameter.method,
                    parameter.path,
                    parameter.name,
                    parameter.place,
                    value,
                    status,
                    body
                );
                // Whatever it is, the document lists it for the operation.
                let documented = if parameter.path.starts_with("/users") {
                    parameter.path.replace("{}", "{user_id}")
                } else {
                    parameter.path.replace("{}", "{payment_id}")
                };
                let method = parameter.method.as_str().to_ascii_lowercase();
                prop_assert!(
                    doc["paths"][&documented][&method]["responses"][status.to_string()].is_object(),
                    "{} {} answered {}, which openapi.json does not list",
                    method,
                    documented,
                    status
                );
                let lines = if parameter.name == "note" {
                    Lines::Multi
                } else {
                    Lines::Single
                };
                if has_forbidden_control(&value, lines) {
                    prop_assert_eq!(
                        (
                            status,
                            body["error"]["code"].as_str().or(body["error"].as_str())
                        ),
                        (400, Some("invalid_request")),
                        "{} {} {} = {:?}",
                        parameter.method,
                        parameter.path,
                        parameter.name,
                        value
                    );
                }
                Ok(())
            })
            // The failing case, as text: the error type itself is large.
            .map_err(|failure| failure.to_string())
    })
    .await
    .unwrap();
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

async fn the_access_log_names_the_connection_not_a_forwarding_header(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let server = ServeProcess::start(&db.url_string(), &[]);
    let response = reqwest::Client::new()
        .get(format!("{}/healthz?probe=peer", server.origin))
        .header("Forwarded", "for=7.7.7.7;proto=https")
        .header("X-Forwarded-For", "8.8.8.8")
        .header("X-Real-IP", "9.9.9.9")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let log = server.stop();
    let line: Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|entry| {
            entry["target"] == "tally::access"
                && entry["fields"]["target"]
                    .as_str()
                    .is_some_and(|t| t.contains("probe=peer"))
        })
        .unwrap_or_else(|| panic!("no access log line in {log}"));
    assert_eq!(line["fields"]["peer"], "127.0.0.1", "{line}");
    for forged in ["7.7.7.7", "8.8.8.8", "9.9.9.9"] {
        assert!(!log.contains(forged), "{forged} in {log}");
    }
}

async fn no_payment_moves_more_than_5000_whatever_makes_it(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let other = fixture(&app).await;
    tally::admin::deposit(store, &f.username, "20000.00")
        .await
        .unwrap();
    let before = crate::fixtures::balance_cents(store, &f.user_id).await;
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    assert_eq!(
        browser.sign_in(&page, &f.username, PASSWORD).await.status,
        303
    );
    let send = |amount: &'static str, kind: &'static str| {
        let browser = &browser;
        let to = other.username.clone();
        async move {
            let page = browser.get("/account").await;
            let mut fields = page.form("/account/payments");
            for (name, value) in [
                ("to", to.as_str()),
                ("amount", amount),
                ("note", "big"),
                ("kind", kind),
            ] {
                set(&mut fields, name, value);
            }
            let answer = browser.post("/account/payments", &fields).await;
            assert_eq!(answer.status, 303, "{}", answer.body);
            browser.get("/account").await.text()
        }
    };
    for (amount, kind) in [
        ("5000.01", "pay"),
        ("100000000", "pay"),
        ("5000.01", "request"),
        ("99999999.99", "request"),
    ] {
        let text = send(amount, kind).await;
        assert!(
            text.contains("between 0.01 and 5000.00"),
            "{kind} {amount}: {text}"
        );
    }
    assert_eq!(
        crate::fixtures::balance_cents(store, &f.user_id).await,
        before
    );
    let token = crate::fixtures::token(store, &f.user_id, "access_profile").await;
    assert_eq!(
        app.get("/payments", &token)
            .await
            .ok()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    // The bound itself is allowed, on the page and through the API.
    let text = send("5000.00", "pay").await;
    assert!(text.contains("Your payment is on its way."), "{text}");
    let payer = person(store, "payer", "6000").await;
    let payee = person(store, "payee", "0").await;
    for amount in ["5000.01", "-5000.01", "100000000"] {
        app.pay(&payer, &payee, amount)
            .await
            .error(400, "invalid_amount");
    }
    app.pay(&payer, &payee, "5000.00").await.ok();
    app.pay(&payer, &payee, "-5000.00").await.ok();
    crate::fixtures::audit_ok(store).await;
}

async fn fields_without_a_value_are_null_on_every_creation_path(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let viewer = person(store, "viewer", "0").await;
    let show = |id: String| {
        let app = &app;
        let token = viewer.token.clone();
        async move { app.get(&format!("/users/{id}"), &token).await }
    };

    // The operator command, with no optional field.
    let added = tally(
        &app.db.url_string(),
        &[
            "admin",
            "user",
            "add",
            "--json",
            "--username",
            "bare",
            "--password",
            "plum vessel orbit 97 quietly",
        ],
    );
    assert!(added.status.success(), "{}", added.stderr);
    let id = added.json()["id"].as_str().unwrap().to_owned();
    let user = show(id.clone()).await;
    let user = user.ok();
    for field in ["first_name", "last_name", "about", "profile_picture_url"] {
        assert!(user[field].is_null(), "{field}: {user}");
    }
    assert_eq!(user["display_name"], "bare");

    // The sign-up page, which asks for no `about` and allows blank names.
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signup").await;
    let mut fields = page.form("/signup");
    for (name, value) in [
        ("username", "signedup"),
        ("first_name", ""),
        ("last_name", " "),
        ("email", "signedup@example.com"),
        ("phone", ""),
        ("password", "plum vessel orbit 97 quietly"),
        ("password_confirm", "plum vessel orbit 97 quietly"),
    ] {
        set(&mut fields, name, value);
    }
    let answer = browser.post("/signup", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let signed_up = store
        .find_user(tally::store::UserKey::Username("signedup"))
        .await
        .unwrap()
        .unwrap();
    let user = show(signed_up.id.clone()).await;
    let user = user.ok();
    for field in ["first_name", "last_name", "about", "profile_picture_url"] {
        assert!(user[field].is_null(), "{field}: {user}");
    }

    // A row stored with empty strings (as older versions wrote them) reads
    // as null too, in `/me` with its addresses as well.
    let stored = person_with(
        store,
        "stored",
        PersonSpec {
            first_name: Some(""),
            ..Default::default()
        },
    )
    .await;
    let me = app.get("/me", &stored.token).await;
    let me = &me.ok()["user"];
    assert!(me["first_name"].is_null(), "{me}");
    assert_eq!(me["last_name"], "Last");
    assert!(me["email"].is_null() && me["phone"].is_null(), "{me}");

    // A user inside a payment, and the payment's optional fields.
    let ann = person(store, "ann", "10").await;
    let paid = app
        .post(
            "/payments",
            &ann.token,
            json!({"user_id": id, "amount": "1.00", "note": "hi"}),
        )
        .await;
    let payment = &paid.ok()["payment"];
    assert!(payment["target"]["user"]["about"].is_null(), "{payment}");
    for field in ["fee", "refund", "date_completed"] {
        assert!(payment[field].is_null(), "{field}: {payment}");
    }
    assert_no_empty_strings(&paid.body);
}

/// SPEC §2: `""` is never a value.
#[track_caller]
fn assert_no_empty_strings(value: &Value) {
    match value {
        Value::String(s) => assert!(!s.is_empty(), "an empty string"),
        Value::Array(items) => items.iter().for_each(assert_no_empty_strings),
        Value::Object(map) => {
            for (key, v) in map {
                assert!(v.as_str() != Some(""), "{key} is \"\"");
                assert_no_empty_strings(v);
            }
        }
        _ => {}
    }
}
