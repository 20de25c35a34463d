//! Health, readiness and metrics over real HTTP.

use crate::helpers::{on_both_backends, Backend, ServeProcess, TestApp};

on_both_backends!(
    healthz_and_readyz_answer_200,
    metrics_count_requests_by_route,
    every_answer_is_logged_without_credentials,
);

async fn healthz_and_readyz_answer_200(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    for path in ["/healthz", "/readyz"] {
        let response = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert!(body["status"].is_string());
    }
}

async fn metrics_count_requests_by_route(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    for _ in 0..3 {
        app.http.get(app.url("/healthz")).send().await.unwrap();
    }
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("tally_http_requests_total") && l.contains(r#"endpoint="/healthz""#)
        })
        .unwrap_or_else(|| panic!("no request count for /healthz in {text}"));
    assert!(line.ends_with(" 3"), "{line}");
    assert!(text.contains("tally_http_requests_duration_seconds_bucket"));
}

async fn every_answer_is_logged_without_credentials(backend: Backend) {
    let Some(db) = crate::helpers::TestDb::new(backend).await else {
        return;
    };
    let server = ServeProcess::start(&db.url_string(), &[]);
    let http = reqwest::Client::new();
    let response = http
        .get(format!(
            "{}/healthz?access_token=tly_at_secret1&password=hunter2&limit=5",
            server.origin
        ))
        .bearer_auth("tly_at_secret2")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let log = server.stop();
    assert!(log.contains("/healthz?access_token=REDACTED"), "{log}");
    assert!(log.contains("limit=5"));
    for secret in ["tly_at_secret1", "tly_at_secret2", "hunter2"] {
        assert!(!log.contains(secret), "{secret} leaked into {log}");
    }
}

/// With the database gone, readiness fails with the error envelope while
/// liveness still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_503_when_the_database_is_gone() {
    let Some(app) = TestApp::spawn(Backend::Postgres).await else {
        return;
    };
    let tally::config::DatabaseUrl::Postgres(url) = &app.db.url else {
        unreachable!()
    };
    let name = url.rsplit('/').next().unwrap().to_owned();
    let server = std::env::var(crate::helpers::POSTGRES_URL_VARIABLE).unwrap();
    {
        use sqlx::{Connection, Executor};
        let mut admin = sqlx::PgConnection::connect(&server).await.unwrap();
        admin
            .execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
            .await
            .unwrap();
    }
    let response = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable");
    assert!(body["error"]["message"].is_string());
    let live = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(live.status(), 200);
}

/// With `TALLY_TLS_CERT` and `TALLY_TLS_KEY` the server speaks HTTPS itself,
/// and its session cookie is `Secure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_certificate_the_server_speaks_https() {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert_pem = certified.cert.pem();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &cert_pem).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let app = TestApp::spawn_with(Backend::Sqlite, |settings| {
        settings.tls = Some(tally::config::TlsFiles { cert, key });
    })
    .await
    .unwrap();
    assert!(
        app.origin.starts_with("https://127.0.0.1:"),
        "{}",
        app.origin
    );
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let health = client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let signin = client.get(app.url("/signin")).send().await.unwrap();
    let cookie = signin.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    // Plain HTTP on the same port gets no answer a client could use.
    let plain = reqwest::get(app.url("/healthz").replace("https://", "http://")).await;
    assert!(plain.map(|r| !r.status().is_success()).unwrap_or(true));
}

/// `tally serve` hashes passwords on threads of its own (`tally-argon2-N`) at
/// the normal policy, like every other thread: hashing gets its fair share of
/// the CPU whatever else runs (an idle-priority hash waited behind any busy
/// process on the machine). As the kernel reports them.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_hashes_passwords_at_normal_priority() {
    const SCHED_OTHER: &str = "0";
    let Some(db) = crate::helpers::TestDb::new(Backend::Sqlite).await else {
        return;
    };
    let server = ServeProcess::start(&db.url_string(), &[]);
    // Each thread's name, policy and nice value; a thread just started may
    // not have its name yet, so this looks again (boundedly) until it has.
    let threads = || {
        let mut threads = std::collections::BTreeMap::<String, (String, String)>::new();
        let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).unwrap();
        for task in tasks.flatten() {
            let path = task.path();
            let (Ok(name), Ok(stat)) = (
                std::fs::read_to_string(path.join("comm")),
                std::fs::read_to_string(path.join("stat")),
            ) else {
                continue; // a thread that ended meanwhile
            };
            // Fields 19 (nice) and 41 (policy); the fields after the name
            // start at 3.
            let fields: Vec<&str> = stat[stat.rfind(") ").unwrap() + 2..].split(' ').collect();
            threads.insert(
                format!("{} {}", name.trim(), path.display()),
                (fields[41 - 3].to_owned(), fields[19 - 3].to_owned()),
            );
        }
        threads
    };
    let hashing = |seen: &std::collections::BTreeMap<String, (String, String)>| {
        seen.keys().any(|key| key.starts_with("tally-argon2"))
    };
    let mut seen = threads();
    for _ in 0..100 {
        if hashing(&seen) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        seen = threads();
    }
    assert!(hashing(&seen), "{seen:?}");
    assert!(
        seen.values()
            .all(|(policy, nice)| policy == SCHED_OTHER && nice == "0"),
        "{seen:?}"
    );
    server.stop();
}
