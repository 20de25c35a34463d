//! Many clients at once, on one instance and on two sharing PostgreSQL: no
//! balance goes negative, no cent is created or lost, every pay settles once.

use crate::fixtures::{audit_ok, balance_cents, call, person, Person};
use crate::helpers::{on_both_backends, Backend, ServeProcess, TestApp, TestDb};
use futures_util::FutureExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tally::domain::Money;
use tally::store::Store;

on_both_backends!(
    sixteen_clients_paying_and_charging_at_random_keep_the_ledger_whole,
    twenty_concurrent_pays_of_9_from_a_balance_of_10_succeed_exactly_once,
    many_clients_reading_me_at_once_each_see_their_own_user_and_their_last_pay,
);

const CLIENTS: u64 = 16;
const OPS_PER_CLIENT: usize = 20;
const USERS: usize = 8;
const DEPOSIT: &str = "100";

async fn people(store: &dyn Store) -> Arc<Vec<Person>> {
    let mut people = Vec::new();
    for i in 0..USERS {
        people.push(person(store, &format!("user{i}"), DEPOSIT).await);
    }
    Arc::new(people)
}

/// One client: random pays, charges the target approves, and pays cancelled at
/// once, spread over the given origins. Returns how many calls succeeded.
async fn random_client(
    http: reqwest::Client,
    origins: Arc<Vec<String>>,
    people: Arc<Vec<Person>>,
    seed: u64,
) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut succeeded = 0;
    for _ in 0..OPS_PER_CLIENT {
        let origin = &origins[rng.random_range(0..origins.len())];
        let from = &people[rng.random_range(0..USERS)];
        let to = loop {
            let candidate = &people[rng.random_range(0..USERS)];
            if candidate.id != from.id {
                break candidate;
            }
        };
        let cents: i64 = rng.random_range(1..=2500);
        let kind = rng.random_range(0..10);
        let amount = if (6..9).contains(&kind) {
            -cents
        } else {
            cents
        };
        let made = call(
            &http,
            origin,
            Method::POST,
            "/payments",
            Some(&from.token),
            Some(json!({"user_id": to.id, "amount": Money::from_cents(amount).to_string(), "note": "load"})),
        )
        .await;
        match (made.status, made.code()) {
            (200, _) => succeeded += 1,
            (400, "insufficient_funds") => continue,
            other => panic!("unexpected answer {other:?}: {}", made.body),
        }
        let id = made.body["data"]["payment"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let follow_up = match kind {
            6..=8 => Some((to, "approve")),
            9 => Some((from, "cancel")),
            _ => None,
        };
        if let Some((who, action)) = follow_up {
            let origin = &origins[rng.random_range(0..origins.len())];
            let answer = call(
                &http,
                origin,
                Method::PUT,
                &format!("/payments/{id}"),
                Some(&who.token),
                Some(json!({"action": action})),
            )
            .await;
            match (answer.status, answer.code()) {
                (200, _) => succeeded += 1,
                // The pay may have settled first, or the target may be short.
                (409, "invalid_state") | (400, "insufficient_funds") => {}
                other => panic!("unexpected answer {other:?}: {}", answer.body),
            }
        }
    }
    succeeded
}

async fn run_load(http: &reqwest::Client, origins: Vec<String>, people: Arc<Vec<Person>>) -> usize {
    let origins = Arc::new(origins);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|seed| {
            tokio::spawn(random_client(
                http.clone(),
                origins.clone(),
                people.clone(),
                seed,
            ))
        })
        .collect();
    let mut succeeded = 0;
    for client in clients {
        succeeded += client.await.unwrap();
    }
    succeeded
}

/// Waits (boundedly) until no pay is pending any more.
async fn until_every_pay_settles(store: &dyn Store) {
    for _ in 0..300 {
        if store
            .audit_snapshot(tally::ledger::audit::PAYMENTS_PER_CHUNK, &mut |_| {})
            .await
            .unwrap()
            .pending_pay_cents
            == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("pays are still pending");
}

async fn assert_ledger_whole(store: &dyn Store, people: &[Person]) {
    let report = audit_ok(store).await;
    let deposited = Money::from_cents(USERS as i64 * 10_000);
    assert_eq!(report.total_balance, deposited, "money was created or lost");
    for p in people {
        assert!(balance_cents(store, &p.id).await >= 0);
    }
}

async fn sixteen_clients_paying_and_charging_at_random_keep_the_ledger_whole(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let people = people(store).await;
    let succeeded = run_load(&app.http, vec![app.origin.clone()], people.clone()).await;
    assert!(succeeded > 100, "only {succeeded} calls succeeded");
    until_every_pay_settles(store).await;
    assert_ledger_whole(store, &people).await;
}

async fn twenty_concurrent_pays_of_9_from_a_balance_of_10_succeed_exactly_once(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let bob = person(store, "bob", "0").await;
    let answers =
        futures_util::future::join_all((0..20).map(|_| app.pay(&ann, &bob, "9.00"))).await;
    let ok = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(ok, 1, "exactly one pay succeeds");
    for answer in answers.iter().filter(|a| a.status != 200) {
        answer.error(400, "insufficient_funds");
    }
    assert_eq!(balance_cents(store, &ann.id).await, 100);
    until_every_pay_settles(store).await;
    assert_eq!(balance_cents(store, &bob.id).await, 900);
    audit_ok(store).await;
}

/// Eight users each pay ten times in a row and read `/me` after each pay,
/// while three more clients per user read that user's `/me` over and over
/// (on PostgreSQL the reads waiting together are made in one statement):
/// every answer is its own user's, and the read after a pay shows that pay.
async fn many_clients_reading_me_at_once_each_see_their_own_user_and_their_last_pay(
    backend: Backend,
) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let sink = person(store, "sink", "0").await;
    let people = people(store).await;
    let payers = people
        .iter()
        .map(|p| pay_and_read_me(&app, p, &sink).boxed_local());
    let readers = (0..3)
        .flat_map(|_| people.iter())
        .map(|p| read_me_over_and_over(&app, p).boxed_local());
    futures_util::future::join_all(payers.chain(readers)).await;
    until_every_pay_settles(store).await;
    assert_eq!(balance_cents(store, &sink.id).await, 8 * 1000);
    audit_ok(store).await;
}

/// `/me`'s balance, checked to be `person`'s answer.
async fn read_me(app: &TestApp, person: &Person) -> f64 {
    let answer = app.get("/me", &person.token).await;
    let data = answer.ok();
    assert_eq!(data["user"]["id"], json!(person.id), "another user's /me");
    data["balance"].as_f64().unwrap()
}

/// Ten pays of 1.00 from a balance of 100.00, each followed by `/me`.
async fn pay_and_read_me(app: &TestApp, person: &Person, to: &Person) {
    for paid in 1..=10 {
        app.pay(person, to, "1.00").await.ok();
        let balance = read_me(app, person).await;
        assert_eq!(
            balance,
            100.0 - f64::from(paid),
            "the read after pay {paid}"
        );
    }
}

async fn read_me_over_and_over(app: &TestApp, person: &Person) {
    for _ in 0..20 {
        let balance = read_me(app, person).await;
        assert!((90.0..=100.0).contains(&balance), "balance {balance}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_instances_on_one_postgresql_settle_every_pay_exactly_once() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store().await;
    let people = people(store.as_ref()).await;
    let first = ServeProcess::start(&db.url_string(), &[]);
    let second = ServeProcess::start(&db.url_string(), &[]);
    let http = reqwest::Client::new();
    let succeeded = run_load(
        &http,
        vec![first.origin.clone(), second.origin.clone()],
        people.clone(),
    )
    .await;
    assert!(succeeded > 100, "only {succeeded} calls succeeded");
    until_every_pay_settles(store.as_ref()).await;
    assert_ledger_whole(store.as_ref(), &people).await;

    // Each settled pay has exactly one settlement movement, and nothing else does.
    use sqlx::Connection;
    let mut db_conn = sqlx::PgConnection::connect(&db.url_string()).await.unwrap();
    let settled: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM payments WHERE kind = 'payment' AND action = 'pay' AND status = 'settled'",
    )
    .fetch_one(&mut db_conn)
    .await
    .unwrap();
    let settlements: Vec<(String, i64)> = sqlx::query_as(
        "SELECT payment_id, COUNT(DISTINCT movement_id) FROM ledger_entries \
         WHERE kind = 'settle' GROUP BY payment_id",
    )
    .fetch_all(&mut db_conn)
    .await
    .unwrap();
    assert!(settled > 20, "only {settled} pays settled");
    assert_eq!(settlements.len() as i64, settled);
    assert!(
        settlements.iter().all(|(_, n)| *n == 1),
        "a pay settled twice"
    );
    db_conn.close().await.unwrap();
    first.stop();
    second.stop();
}
