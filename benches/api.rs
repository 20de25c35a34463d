//! `cargo bench --bench api`: throughput and latency of the main API paths,
//! each reported as a ratio to a bare baseline (`GET /healthz`) measured in the
//! same run, so the numbers mean something on a shared, noisy machine.
//!
//! The real application runs in-process on a fresh SQLite file, or on
//! PostgreSQL when `TALLY_BENCH_DATABASE_URL` names a database to use (it must
//! be empty or a Tally database; the bench adds users to it). Each scenario runs
//! `TALLY_BENCH_SECONDS` (default 3) with `TALLY_BENCH_CLIENTS` (default 8)
//! concurrent clients, and stops by itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};
use tally::auth::password::PasswordHasher;
use tally::config::{DatabaseUrl, Settings};
use tally::domain::ScopeSet;
use tally::startup::{self, Application};
use tally::{admin, oauth};

struct Scenario {
    name: &'static str,
    method: reqwest::Method,
    path: &'static str,
    body: Option<&'static str>,
}

struct Outcome {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let seconds = env_number("TALLY_BENCH_SECONDS", 3);
    let clients = env_number("TALLY_BENCH_CLIENTS", 8);
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::from_lookup(|_| None).unwrap();
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.api_rate_limit = std::num::NonZeroU32::MAX;
    settings.database_url = match std::env::var("TALLY_BENCH_DATABASE_URL") {
        Ok(url) => DatabaseUrl::parse(&url).unwrap(),
        Err(_) => DatabaseUrl::Sqlite(format!("sqlite://{}/bench.db", dir.path().display())),
    };
    let backend = match settings.database_url {
        DatabaseUrl::Sqlite(_) => "sqlite",
        DatabaseUrl::Postgres(_) => "postgres",
    };
    let store = startup::open_store(&settings).await.unwrap();

    // Two friends with money, and a token for the first.
    let suffix = &tally::domain::new_id()[20..];
    let hasher = PasswordHasher::new(2);
    let mut ids = Vec::new();
    for name in ["payer", "payee"] {
        let username = format!("{name}{suffix}");
        let created = admin::user_add(
            store.as_ref(),
            &hasher,
            admin::UserAdd {
                username: username.clone(),
                password: "bench password".to_owned(),
                verified: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        admin::deposit(store.as_ref(), &username, "1000000")
            .await
            .unwrap();
        ids.push((username, created.id));
    }
    admin::friend_add(store.as_ref(), &ids[0].0, &ids[1].0)
        .await
        .unwrap();
    let scopes = ScopeSet::parse("access_profile access_balance make_payments").unwrap();
    let token = oauth::tokens::issue_personal_access_token(store.as_ref(), &ids[0].1, &scopes)
        .await
        .unwrap();
    let token = token.expose().to_owned();
    let pay_body: &'static str = Box::leak(
        format!(
            r#"{{"user_id":"{}","amount":"0.01","note":"bench"}}"#,
            ids[1].1
        )
        .into_boxed_str(),
    );

    let app = Application::build(settings, store).await.unwrap();
    let origin = app.public_origin().to_owned();
    tokio::spawn(app.run_until_stopped());

    let scenarios = [
        Scenario {
            name: "GET /healthz (baseline)",
            method: reqwest::Method::GET,
            path: "/healthz",
            body: None,
        },
        Scenario {
            name: "GET /v1/me",
            method: reqwest::Method::GET,
            path: "/v1/me",
            body: None,
        },
        Scenario {
            name: "GET /v1/payments",
            method: reqwest::Method::GET,
            path: "/v1/payments?limit=20",
            body: None,
        },
        Scenario {
            name: "POST /v1/payments",
            method: reqwest::Method::POST,
            path: "/v1/payments",
            body: Some(pay_body),
        },
    ];

    println!("Tally API bench on {backend}: {clients} clients, {seconds} s per scenario");
    println!(
        "{:<26} {:>10} {:>9} {:>9} {:>9} {:>8}",
        "scenario", "req/s", "p50 ms", "p99 ms", "errors", "ratio"
    );
    let mut baseline = None;
    for scenario in &scenarios {
        let outcome = run(
            &origin,
            &token,
            scenario,
            clients,
            Duration::from_secs(seconds),
        )
        .await;
        let rate = outcome.requests as f64 / outcome.elapsed.as_secs_f64();
        let base = *baseline.get_or_insert(rate);
        let mut latencies = outcome.latencies;
        latencies.sort();
        let pick = |q: f64| {
            latencies
                .get(((latencies.len() as f64 - 1.0) * q) as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        println!(
            "{:<26} {:>10.0} {:>9.2} {:>9.2} {:>9} {:>8.2}",
            scenario.name,
            rate,
            pick(0.5),
            pick(0.99),
            outcome.errors,
            rate / base
        );
    }
}

async fn run(
    origin: &str,
    token: &str,
    scenario: &Scenario,
    clients: u64,
    duration: Duration,
) -> Outcome {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let http = http.clone();
            let url = format!("{origin}{}", scenario.path);
            let method = scenario.method.clone();
            let body = scenario.body;
            let token = token.to_owned();
            tokio::spawn(async move {
                let (mut ok, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
                while Instant::now() < deadline {
                    let mut request = http.request(method.clone(), &url).bearer_auth(&token);
                    if let Some(body) = body {
                        request = request
                            .header("content-type", "application/json")
                            .body(body);
                    }
                    let sent = Instant::now();
                    match request.send().await {
                        Ok(response) if response.status().is_success() => {
                            let _ = response.bytes().await;
                            ok += 1;
                        }
                        _ => errors += 1,
                    }
                    latencies.push(sent.elapsed());
                }
                (ok, errors, latencies)
            })
        })
        .collect();
    let mut outcome = Outcome {
        requests: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for task in tasks {
        let (ok, errors, latencies) = task.await.unwrap();
        outcome.requests += ok;
        outcome.errors += errors;
        outcome.latencies.extend(latencies);
    }
    outcome.elapsed = started.elapsed();
    outcome
}
