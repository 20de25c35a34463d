//! What a client can make the edge hold, over real sockets on both databases
//! (SPEC §9): a body is bounded in size (refused on its `Content-Length`
//! before a byte of it is read, or as it grows past 64 KiB) and in time (408
//! and the connection closed when it has not arrived whole in time), and no
//! method or path a client makes up becomes a new series of `/metrics`.

use crate::fixtures::person;
use crate::helpers::{on_both_backends, Backend, TestApp};
use reqwest::Method;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

on_both_backends!(
    a_content_length_over_64_kib_is_refused_at_once_without_reading_the_body,
    a_body_that_grows_past_64_kib_as_it_arrives_is_refused,
    a_body_not_arrived_within_the_deadline_gets_408_and_its_connection_closed,
    a_body_that_arrives_in_pieces_within_the_deadline_is_served,
    unknown_methods_are_405_and_never_a_new_series_in_metrics,
);

/// The body deadline the slow-body tests run with (the product's is 10 s).
const SHORT_DEADLINE: Duration = Duration::from_secs(1);

/// What a raw client read back.
struct RawAnswer {
    status: u16,
    /// Lower-case names.
    headers: HashMap<String, String>,
    body: String,
    /// The time from the last byte sent to the answer's headers.
    waited: Duration,
    /// The server closed the connection after the answer.
    closed: bool,
}

impl RawAnswer {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// Connects, sends `head` (request line and headers, without the blank line
/// that ends them) and then each of `parts` (pausing `pause` between them),
/// then says nothing more, and reads until the server closes the connection
/// or `patience` passes.
async fn raw(
    app: &TestApp,
    head: &str,
    parts: &[&[u8]],
    pause: Duration,
    patience: Duration,
) -> RawAnswer {
    let address = app.origin.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(format!("{head}\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(pause).await;
        }
        stream.write_all(part).await.unwrap();
    }
    let sent = Instant::now();
    let mut received = Vec::new();
    let mut waited = None;
    let mut closed = false;
    let mut buffer = [0u8; 16 * 1024];
    let until = tokio::time::Instant::now() + patience;
    loop {
        match tokio::time::timeout_at(until, stream.read(&mut buffer)).await {
            Ok(Ok(0)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => {
                received.extend_from_slice(&buffer[..n]);
                if waited.is_none() && received.windows(4).any(|w| w == b"\r\n\r\n") {
                    waited = Some(sent.elapsed());
                }
            }
            // A reset after the answer is a close.
            Ok(Err(e)) if waited.is_some() => {
                eprintln!("the connection ended with {e}");
                closed = true;
                break;
            }
            Ok(Err(e)) => panic!("reading the answer failed: {e}"),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&received).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        panic!("no answer within {patience:?}: {text:?}");
    };
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    RawAnswer {
        status,
        headers,
        body: body.to_owned(),
        waited: waited.unwrap_or(patience),
        closed,
    }
}

/// Where a body can be sent, one of each shape of answer: the REST API, the
/// OAuth token endpoint, the consent page and a page.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Api,
    OAuth,
    Page,
}

const TARGETS: [(&str, &str, Shape); 5] = [
    ("POST", "/v1/payments", Shape::Api),
    ("GET", "/v1/me", Shape::Api),
    ("POST", "/v1/oauth/token", Shape::OAuth),
    ("POST", "/v1/oauth/authorize", Shape::Page),
    ("POST", "/signin", Shape::Page),
];

/// The answer has the shape of where it was sent, with `code` (the REST API's
/// code; the OAuth error is `invalid_request`).
fn assert_shape(answer: &RawAnswer, shape: Shape, code: &str, what: &str) {
    match shape {
        Shape::Api => {
            assert_eq!(answer.json()["error"]["code"], code, "{what}");
            assert_eq!(answer.header("cache-control"), "no-store", "{what}");
        }
        Shape::OAuth => {
            assert_eq!(answer.json()["error"], "invalid_request", "{what}");
            assert!(answer.json()["error_description"].is_string(), "{what}");
            assert_eq!(answer.header("cache-control"), "no-store", "{what}");
        }
        Shape::Page => {
            assert!(
                answer.header("content-type").starts_with("text/html"),
                "{what}: {}",
                answer.header("content-type")
            );
            assert_eq!(answer.header("x-frame-options"), "DENY", "{what}");
        }
    }
}

async fn a_content_length_over_64_kib_is_refused_at_once_without_reading_the_body(
    backend: Backend,
) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    for (method, path, shape) in TARGETS {
        let what = format!("{method} {path}");
        // Not a byte of the body is sent: the answer comes from the header.
        let answer = raw(
            &app,
            &format!(
                "{method} {path} HTTP/1.1\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\n\
                 Content-Length: 100000000"
            ),
            &[],
            Duration::ZERO,
            Duration::from_secs(8),
        )
        .await;
        assert_eq!(answer.status, 413, "{what}: {}", answer.body);
        assert!(
            answer.waited < Duration::from_secs(2),
            "{what}: answered after {:?}",
            answer.waited
        );
        assert_shape(&answer, shape, "payload_too_large", &what);
        assert_eq!(answer.header("connection"), "close", "{what}");
        assert!(answer.closed, "{what}: the connection stayed open");
    }
    // One byte over is refused the same way; exactly 64 KiB is read.
    let over = raw(
        &app,
        "POST /v1/payments HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 65537",
        &[],
        Duration::ZERO,
        Duration::from_secs(8),
    )
    .await;
    assert_eq!(over.status, 413);
    let note = format!("note={}", "x".repeat(64 * 1024 - 5));
    let exact = raw(
        &app,
        &format!(
            "POST /v1/payments HTTP/1.1\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}",
            note.len()
        ),
        &[note.as_bytes()],
        Duration::ZERO,
        Duration::from_secs(8),
    )
    .await;
    // Read, and refused for what it says (no token), not for its size.
    assert_eq!(exact.status, 401, "{}", exact.body);
}

async fn a_body_that_grows_past_64_kib_as_it_arrives_is_refused(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let chunk = format!("2000\r\n{}\r\n", "a".repeat(0x2000));
    for (method, path, shape) in TARGETS {
        let what = format!("{method} {path}");
        // Chunked, so no length is declared: eight chunks of 8 KiB make
        // exactly 64 KiB, which is allowed; one more byte is too many. The
        // body is never finished.
        let mut parts: Vec<&[u8]> = std::iter::repeat_n(chunk.as_bytes(), 8).collect();
        parts.push(b"1\r\na\r\n");
        let answer = raw(
            &app,
            &format!(
                "{method} {path} HTTP/1.1\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\n\
                 Transfer-Encoding: chunked"
            ),
            &parts,
            Duration::from_millis(20),
            Duration::from_secs(8),
        )
        .await;
        assert_eq!(answer.status, 413, "{what}: {}", answer.body);
        assert!(answer.waited < Duration::from_secs(2), "{what}");
        assert_shape(&answer, shape, "payload_too_large", &what);
        assert!(answer.closed, "{what}: the connection stayed open");
    }
}

async fn a_body_not_arrived_within_the_deadline_gets_408_and_its_connection_closed(
    backend: Backend,
) {
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        settings.body_deadline = SHORT_DEADLINE;
    })
    .await
    else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    for (method, path, shape) in TARGETS {
        let what = format!("{method} {path}");
        // Headers, a tenth of the body, then silence.
        let started = Instant::now();
        let answer = raw(
            &app,
            &format!(
                "{method} {path} HTTP/1.1\r\nAuthorization: Bearer {}\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100",
                ann.token
            ),
            &[b"note=slow&"],
            Duration::ZERO,
            Duration::from_secs(8),
        )
        .await;
        assert_eq!(answer.status, 408, "{what}: {}", answer.body);
        assert!(
            answer.waited >= SHORT_DEADLINE - Duration::from_millis(100)
                && started.elapsed() < SHORT_DEADLINE + Duration::from_secs(3),
            "{what}: answered after {:?}",
            answer.waited
        );
        assert_shape(&answer, shape, "request_timeout", &what);
        assert_eq!(answer.header("connection"), "close", "{what}");
        assert!(answer.closed, "{what}: the connection stayed open");
    }
    // The slow request moved nothing, and the server serves the next one.
    let me = app
        .http
        .get(app.url("/v1/me"))
        .bearer_auth(&ann.token)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 200);
    let me: Value = me.json().await.unwrap();
    assert_eq!(me["data"]["balance"], 10.0);
}

async fn a_body_that_arrives_in_pieces_within_the_deadline_is_served(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        settings.body_deadline = SHORT_DEADLINE;
    })
    .await
    else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let bob = person(store, "bob", "0").await;
    let body = format!(
        r#"{{"user_id":"{}","amount":"2.50","note":"in pieces"}}"#,
        bob.id
    );
    let (first, rest) = body.as_bytes().split_at(10);
    let (second, third) = rest.split_at(10);
    // Three pieces, 300 ms apart: 600 ms in all, within the deadline.
    let answer = raw(
        &app,
        &format!(
            "POST /v1/payments HTTP/1.1\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}",
            ann.token,
            body.len()
        ),
        &[first, second, third],
        Duration::from_millis(300),
        Duration::from_secs(8),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let made = answer.json();
    assert_eq!(made["data"]["payment"]["amount"], 2.5);
    assert_eq!(made["data"]["payment"]["note"], "in pieces");
}

/// The series of `/metrics`: each sample's name and labels, without its value.
pub(crate) async fn series(app: &TestApp) -> BTreeSet<String> {
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| match line.rsplit_once(' ') {
            Some((series, _value)) => series.to_owned(),
            None => line.to_owned(),
        })
        .collect()
}

async fn unknown_methods_are_405_and_never_a_new_series_in_metrics(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    // Each kind of target, with a method made up from `n` and a path made up
    // from `n` where the kind has one.
    let targets = |n: usize| -> Vec<(String, String, bool)> {
        vec![
            (format!("M{n:05}"), "/v1/me".to_owned(), true),
            (format!("M{n:05}"), format!("/v1/users/u{n}"), true),
            (format!("M{n:05}"), format!("/v1/made-up-{n}"), true),
            (format!("M{n:05}"), "/v1/oauth/token".to_owned(), true),
            (format!("M{n:05}"), "/signin".to_owned(), false),
            (format!("M{n:05}"), format!("/made-up-{n}"), false),
            (format!("X-{n}"), "/metrics".to_owned(), false),
            ("GET".to_owned(), format!("/made-up-{n}"), false),
            ("GET".to_owned(), format!("/v1/made-up-{n}"), true),
            ("POST".to_owned(), format!("/v1/oauth/made-up-{n}"), true),
        ]
    };
    let send = |method: String, path: String| {
        let request = app
            .http
            .request(
                Method::from_bytes(method.as_bytes()).unwrap(),
                app.url(&path),
            )
            .bearer_auth(&ann.token);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            (status, content_type, response.text().await.unwrap())
        }
    };
    // Once each, so every bounded series exists, `/metrics`' own included.
    for (method, path, _) in targets(0) {
        send(method, path).await;
    }
    series(&app).await;
    let before = series(&app).await;
    let mut statuses = BTreeSet::new();
    for n in 1..=50 {
        for (method, path, in_api) in targets(n) {
            let what = format!("{method} {path}");
            let known = matches!(method.as_str(), "GET" | "POST");
            let (status, content_type, body) = send(method, path).await;
            statuses.insert(status);
            if known {
                assert_eq!(status, 404, "{what}");
                continue;
            }
            assert_eq!(status, 405, "{what}: {body}");
            if in_api {
                let body: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(body["error"]["code"], "method_not_allowed", "{what}");
            } else {
                assert!(content_type.starts_with("text/html"), "{what}");
            }
        }
    }
    assert_eq!(statuses, BTreeSet::from([404, 405]));
    let after = series(&app).await;
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(new.is_empty(), "new series: {new:#?}");
    assert!(
        !after
            .iter()
            .any(|s| s.contains("M000") || s.contains("made-up")),
        "a made-up method or path became a label"
    );
    // Unknown methods are counted, under one name.
    assert!(
        after
            .iter()
            .any(|s| s.contains(r#"method="OTHER""#) && s.contains(r#"status="405""#)),
        "{after:#?}"
    );
}
