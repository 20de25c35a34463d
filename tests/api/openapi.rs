//! The OpenAPI document matches the routes the server really has, both ways.

use crate::helpers::{on_both_backends, Backend, TestApp};
use serde_json::Value;
use std::collections::BTreeSet;

on_both_backends!(every_documented_route_is_served_and_every_route_is_documented);

/// Documented routes served at the origin rather than under `/v1`.
const ORIGIN_ROUTES: &[(&str, &str)] = &[("get", "/.well-known/oauth-authorization-server")];

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
            tally::api::OAUTH_ROUTES
                .iter()
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
