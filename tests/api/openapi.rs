//! The OpenAPI document matches the routes the server really has, both ways.

use crate::helpers::{on_both_backends, Backend, TestApp};
use serde_json::Value;
use std::collections::BTreeSet;

on_both_backends!(
    every_documented_route_is_served_and_every_route_is_documented,
    values_the_schema_allows_are_accepted,
);

/// Documented routes served at the origin rather than under `/v1`.
const ORIGIN_ROUTES: &[(&str, &str)] = &[
    ("get", "/.well-known/oauth-authorization-server"),
    ("get", "/.well-known/openid-configuration"),
];

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                routes.insert((method.clone(), path.clone()));
            }
        }
    }
    routes
}

fn owned(
    routes: &'static [(&'static str, &'static str)],
) -> impl Iterator<Item = (String, String)> {
    routes
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
}

/// Every `$ref` in the document points at something that exists.
fn check_refs(doc: &Value, node: &Value) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                let pointer = target.trim_start_matches('#');
                assert!(doc.pointer(pointer).is_some(), "dangling $ref {target}");
            }
            map.values().for_each(|v| check_refs(doc, v));
        }
        Value::Array(items) => items.iter().for_each(|v| check_refs(doc, v)),
        _ => {}
    }
}

#[test]
fn the_document_lists_exactly_the_routes_of_the_code() {
    let doc: Value = serde_json::from_str(tally::api::OPENAPI).expect("openapi.json is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    check_refs(&doc, &doc);
    let expected: BTreeSet<(String, String)> = owned(tally::api::ROUTES)
        .chain(
            tally::web::OAUTH_PAGE_ROUTES
                .iter()
                .chain(tally::api::OAUTH_ROUTES)
                .map(|(method, path)| ((*method).to_owned(), format!("/oauth{path}"))),
        )
        .chain(owned(ORIGIN_ROUTES))
        .collect();
    let documented = documented(&doc);
    let undocumented: Vec<_> = expected.difference(&documented).collect();
    let phantom: Vec<_> = documented.difference(&expected).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from openapi.json: {undocumented:?}"
    );
    assert!(
        phantom.is_empty(),
        "openapi.json documents routes the code lacks: {phantom:?}"
    );
}

async fn every_documented_route_is_served_and_every_route_is_documented(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let served: Value = app
        .http
        .get(app.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let doc: Value = serde_json::from_str(tally::api::OPENAPI).unwrap();
    assert_eq!(served, doc);

    // A route-miss answers 404 (or 405 for a known path); every documented
    // method and path must answer something else, even without a token.
    for (method, path) in documented(&doc) {
        let at_origin = doc["paths"][&path]["servers"].is_array();
        let concrete = path.replace("{user_id}", "x").replace("{payment_id}", "x");
        let url = if at_origin {
            app.url(&concrete)
        } else {
            app.url(&format!("/v1{concrete}"))
        };
        let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let response = app.http.request(method.clone(), &url).send().await.unwrap();
        let status = response.status().as_u16();
        assert!(
            status != 404 && status != 405,
            "{method} {url} is not served: {status}"
        );
    }
    let missing = app
        .http
        .get(app.url("/v1/not-documented"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

/// The statuses an operation must document because the edge can answer them
/// whatever the handler does (SPEC §2, §7, §9).
fn statuses_every_operation_answers(method: &str, path: &str) -> BTreeSet<&'static str> {
    let mut statuses = BTreeSet::new();
    match path {
        "/openapi.json"
        | "/.well-known/oauth-authorization-server"
        | "/.well-known/openid-configuration" => {}
        "/oauth/authorize" if method == "get" => statuses.extend(["400", "429", "503"]),
        // The key set reads neither parameters nor a token.
        "/oauth/jwks" => statuses.extend(["429", "503"]),
        "/oauth/authorize" | "/oauth/logout/confirm" => {
            statuses.extend(["400", "403", "413", "415", "429", "503"])
        }
        // RP-initiated logout reads no token; its POST is the app's form.
        "/oauth/logout" if method == "get" => statuses.extend(["400", "429", "503"]),
        "/oauth/logout" => statuses.extend(["400", "413", "415", "429", "503"]),
        // Token endpoints: parameters are read (400, 413, 415), clients
        // authenticated (401), the per-IP limit applies (429).
        _ if path.starts_with("/oauth/") && method == "post" => {
            statuses.extend(["400", "401", "413", "415", "429", "503"])
        }
        // Every other operation reads parameters and a token.
        _ => statuses.extend(["400", "401", "403", "413", "415", "429", "503"]),
    }
    // A body may be refused for its pace wherever for its size (SPEC §9).
    if statuses.contains("413") {
        statuses.insert("408");
    }
    if path.contains('{') {
        statuses.insert("404");
    }
    if (method, path) == ("post", "/payments")
        || (method, path) == ("put", "/payments/{payment_id}")
    {
        statuses.insert("409");
    }
    statuses
}

#[test]
fn every_operation_documents_every_status_the_edge_can_answer() {
    let doc: Value = serde_json::from_str(tally::api::OPENAPI).unwrap();
    let mut missing = Vec::new();
    for (method, path) in documented(&doc) {
        let responses = doc["paths"][&path][&method]["responses"]
            .as_object()
            .unwrap();
        for status in statuses_every_operation_answers(&method, &path) {
            if !responses.contains_key(status) {
                missing.push(format!("{method} {path} {status}"));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented statuses: {missing:?}");
}

/// The schema of a parameter or property, through a `$ref`.
fn resolve<'a>(doc: &'a Value, node: &'a Value) -> &'a Value {
    match node["$ref"].as_str() {
        Some(target) => doc.pointer(target.trim_start_matches('#')).unwrap(),
        None => node,
    }
}

/// A string schema says what it accepts (`pattern`, `enum` or `format`), a
/// number its bounds: what a schema-driven fuzzer needs to generate only valid
/// requests.
fn assert_constrained(doc: &Value, schema: &Value, what: &str, problems: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    for alternative in ["oneOf", "anyOf"] {
        if let Some(options) = schema[alternative].as_array() {
            for option in options {
                assert_constrained(doc, option, what, problems);
            }
            return;
        }
    }
    let kinds: Vec<&str> = match &schema["type"] {
        Value::String(kind) => vec![kind.as_str()],
        Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if kinds.contains(&"string")
        && schema["pattern"].is_null()
        && schema["enum"].is_null()
        && schema["format"].is_null()
    {
        problems.push(format!("{what}: a string without pattern, enum or format"));
    }
    if (kinds.contains(&"integer") || kinds.contains(&"number")) && schema["minimum"].is_null() {
        problems.push(format!("{what}: a number without minimum"));
    }
}

#[test]
fn every_rest_parameter_states_its_constraints_in_the_schema() {
    let doc: Value = serde_json::from_str(tally::api::OPENAPI).unwrap();
    let mut problems = Vec::new();
    for (method, path) in owned(tally::api::ROUTES) {
        let operation = &doc["paths"][&path][&method];
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            let parameter = resolve(&doc, parameter);
            let what = format!("{method} {path} {}", parameter["name"]);
            assert_constrained(&doc, &parameter["schema"], &what, &mut problems);
        }
        for media in operation["requestBody"]["content"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
        {
            for (name, property) in media["schema"]["properties"].as_object().unwrap() {
                let what = format!("{method} {path} body {name}");
                assert_constrained(&doc, property, &what, &mut problems);
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The pattern the document gives a `POST /payments` body property.
fn body_pattern(doc: &Value, name: &str) -> String {
    let property = &doc["paths"]["/payments"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["properties"][name];
    let property = property["oneOf"]
        .as_array()
        .and_then(|options| options.iter().find(|o| o["type"] == "string"))
        .unwrap_or(property);
    unanchored(property["pattern"].as_str().unwrap())
}

/// proptest generates from a regex without `^…$`; every pattern of the
/// document is anchored at both ends around one branch.
fn unanchored(pattern: &str) -> String {
    let inner = pattern.strip_prefix('^').and_then(|p| p.strip_suffix('$'));
    inner
        .unwrap_or_else(|| panic!("{pattern} is not anchored"))
        .to_owned()
}

fn query_pattern(doc: &Value, path: &str, name: &str) -> String {
    doc["paths"][path]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()["schema"]["pattern"]
        .as_str()
        .map(unanchored)
        .unwrap()
}

/// What a schema-driven fuzzer would generate as valid, from the served
/// document's own patterns, is accepted: no request the schema calls valid
/// is refused as malformed.
async fn values_the_schema_allows_are_accepted(backend: Backend) {
    use proptest::prelude::*;
    use proptest::string::string_regex;
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        settings.api_rate_limit = std::num::NonZeroU32::new(1_000_000).unwrap();
    })
    .await
    else {
        return;
    };
    let doc: Value = serde_json::from_str(tally::api::OPENAPI).unwrap();
    let store = app.store.as_ref();
    let ann = crate::fixtures::person(store, "ann", "100000").await;
    let strategy = (
        string_regex(&body_pattern(&doc, "note")).unwrap(),
        string_regex(&body_pattern(&doc, "amount")).unwrap(),
        string_regex(&body_pattern(&doc, "phone")).unwrap(),
        string_regex(&query_pattern(&doc, "/payments", "status")).unwrap(),
        string_regex(&query_pattern(&doc, "/payments", "after")).unwrap(),
        string_regex(&query_pattern(&doc, "/users", "query")).unwrap(),
    );
    let note_limit = 500;
    let runtime = tokio::runtime::Handle::current();
    let app = std::sync::Arc::new(app);
    let result = tokio::task::spawn_blocking(move || {
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 60,
            max_shrink_iters: 100,
            failure_persistence: None,
            ..Default::default()
        });
        runner
            .run(&strategy, |(note, amount, phone, status, after, query)| {
                // The schema's maxLength, which a pattern cannot say.
                let note: String = note.chars().take(note_limit).collect();
                let query: String = query.chars().take(100).collect();
                runtime.block_on(async {
                    // A charge, so the balance never runs out.
                    let charge = if amount.starts_with('-') {
                        amount.clone()
                    } else {
                        format!("-{amount}")
                    };
                    let made = app
                        .post(
                            "/payments",
                            &ann.token,
                            serde_json::json!({"phone": phone, "amount": charge, "note": note}),
                        )
                        .await;
                    prop_assert_eq!(
                        made.status,
                        200,
                        "{:?} {:?} {:?}: {}",
                        phone,
                        charge,
                        note,
                        made.body
                    );
                    let listed = app
                        .get(
                            &format!(
                                "/payments?{}",
                                url::form_urlencoded::Serializer::new(String::new())
                                    .append_pair("status", &status)
                                    .append_pair("after", &after)
                                    .append_pair("before", &after)
                                    .finish()
                            ),
                            &ann.token,
                        )
                        .await;
                    prop_assert_eq!(
                        listed.status,
                        200,
                        "{:?} {:?}: {}",
                        status,
                        after,
                        listed.body
                    );
                    let found = app
                        .get(
                            &format!(
                                "/users?{}",
                                url::form_urlencoded::Serializer::new(String::new())
                                    .append_pair("query", &query)
                                    .finish()
                            ),
                            &ann.token,
                        )
                        .await;
                    prop_assert_eq!(found.status, 200, "{:?}: {}", query, found.body);
                    Ok(())
                })
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
