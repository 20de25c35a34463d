//! Webhooks (SPEC §12), through the public surface: endpoints added with the
//! real `tally` binary or the Developer tab, payments made over HTTP, events
//! received by a real HTTP server on loopback and verified with the
//! Standard Webhooks reference library.

use crate::browser::{self, Browser};
use crate::fixtures::{person, suspend};
use crate::helpers::{
    on_both_backends, tally_with_env, Backend, ServeProcess, TallyRun, TestApp, TestDb,
    POSTGRES_SECRET_KEY,
};
use crate::oauth_fixture::{fixture, Fixture, PASSWORD};
use crate::webhook_receiver::{Received, Receiver, Reply};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tally::config::DatabaseUrl;
use tally::domain::ScopeSet;
use tally::store::Store;

on_both_backends!(
    every_event_kind_reaches_the_app_signed_with_the_payment_as_the_api_renders_it,
    an_event_reaches_only_the_apps_linked_to_the_payment_and_once_each,
    a_failed_attempt_is_retried_with_the_same_webhook_id_and_body,
    a_redirect_is_not_followed,
    an_answer_slower_than_10_seconds_fails_and_only_1_kib_of_an_answer_is_read,
    a_rotated_secret_signs_beside_the_new_one,
    an_event_whose_last_retry_fails_is_marked_failed,
    private_addresses_are_refused_when_added_and_when_delivered,
    the_operator_commands_refuse_what_section_12_refuses_and_list_no_secret,
    the_developer_tab_adds_an_endpoint_sends_a_test_event_and_resends_it,
    an_endpoint_failing_for_five_days_is_disabled_and_old_events_are_purged,
    killed_under_load_every_answered_payment_has_its_event_and_none_is_invented,
);

/// What the CLI needs to reach the test's database (and, on PostgreSQL,
/// its secret key), private addresses allowed or not.
fn cli_env(db: &TestDb, allow_private: bool) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("TALLY_DATABASE_URL", db.url_string()),
        (
            "TALLY_WEBHOOK_ALLOW_PRIVATE",
            if allow_private { "true" } else { "false" }.to_owned(),
        ),
    ];
    if matches!(db.url, DatabaseUrl::Postgres(_)) {
        env.push(("TALLY_SECRET_KEY", POSTGRES_SECRET_KEY.to_owned()));
    }
    env
}

fn cli(db: &TestDb, allow_private: bool, args: &[&str]) -> TallyRun {
    let env = cli_env(db, allow_private);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    tally_with_env(&env, args)
}

/// `admin app webhook add` (private addresses allowed): its JSON answer.
fn add_endpoint(db: &TestDb, client_id: &str, url: &str, events: Option<&str>) -> Value {
    let mut args = vec!["admin", "app", "webhook", "add", client_id, url, "--json"];
    if let Some(events) = events {
        args.extend(["--events", events]);
    }
    let run = cli(db, true, &args);
    assert!(run.status.success(), "{} {}", run.stdout, run.stderr);
    run.json()
}

fn list_endpoints(db: &TestDb, client_id: &str) -> Value {
    let run = cli(
        db,
        false,
        &["admin", "app", "webhook", "list", client_id, "--json"],
    );
    assert!(run.status.success(), "{} {}", run.stdout, run.stderr);
    run.json()
}

/// The attempts `list` shows for the app's first endpoint, once there are at
/// least `n` (an attempt is recorded just after its answer arrives).
async fn attempts(db: &TestDb, client_id: &str, n: usize) -> Vec<Value> {
    let started = std::time::Instant::now();
    loop {
        let listed = list_endpoints(db, client_id);
        let deliveries = listed["endpoints"][0]["deliveries"]
            .as_array()
            .unwrap()
            .clone();
        if deliveries.len() >= n {
            return deliveries;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "fewer than {n} attempts: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The application with private webhook addresses allowed (the receiver is
/// on loopback), settings adjusted further by `adjust`.
async fn spawn(
    backend: Backend,
    adjust: impl FnOnce(&mut tally::config::Settings),
) -> Option<TestApp> {
    TestApp::spawn_with(backend, |s| {
        s.webhook_allow_private = true;
        adjust(s);
    })
    .await
}

/// An access token of the app for the user (the client-side flow's kind).
async fn app_token(store: &dyn Store, user_id: &str, client_id: &str, scopes: &str) -> String {
    tally::oauth::tokens::issue_access_token(
        store,
        user_id,
        Some(client_id),
        &ScopeSet::parse(scopes).unwrap(),
        "token",
        Duration::from_secs(1800),
    )
    .await
    .unwrap()
    .expose()
    .to_owned()
}

/// Another app of the fixture's owner.
async fn another_app(app: &TestApp, f: &Fixture, name: &str) -> String {
    tally::admin::app_add(
        app.store.as_ref(),
        tally::admin::AppAdd {
            owner: f.username.clone(),
            name: name.to_owned(),
            redirect_url: "https://other.example.com/cb".to_owned(),
            description: None,
            site_url: None,
        },
    )
    .await
    .unwrap()
    .client_id
}

async fn pay(app: &TestApp, token: &str, target: Value, amount: &str) -> Value {
    let mut body = json!({"amount": amount, "note": "webhook test"});
    for (k, v) in target.as_object().unwrap() {
        body[k] = v.clone();
    }
    let answer = app.post("/payments", token, body).await;
    answer.ok()["payment"].clone()
}

/// The body is `{"type","timestamp","data"}` and nothing else, signed under
/// `secret` as the reference library checks it, sent as JSON.
fn assert_standard(event: &Received, secret: &str, kind: &str) {
    assert!(event.verifies_with(secret), "signature refused: {event:?}");
    assert_eq!(event.header("content-type"), "application/json");
    assert!(!event.id().is_empty());
    let body = event.json();
    let keys: HashSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, HashSet::from(["type", "timestamp", "data"]), "{body}");
    assert_eq!(body["type"], kind);
    let timestamp = body["timestamp"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(timestamp).is_ok() && timestamp.ends_with('Z'),
        "{timestamp}"
    );
}

/// `data` is the payment exactly as `GET /payments/:id` renders it now.
async fn assert_rendered_as_the_api(app: &TestApp, token: &str, event: &Received) {
    let data = event.json()["data"].clone();
    let id = data["id"].as_str().unwrap();
    let shown = app
        .get(&format!("/payments/{id}"), token)
        .await
        .ok()
        .clone();
    assert_eq!(
        data, shown,
        "the event's data differs from GET /payments/{id}"
    );
}

/// Every event kind: a pay settling, a charge approved, one denied, a pay
/// failing for a suspended target, a pay to an address expiring, one
/// cancelled (its refund nested), and a user revoking the app on the
/// account page.
async fn every_event_kind_reaches_the_app_signed_with_the_payment_as_the_api_renders_it(
    backend: Backend,
) {
    let Some(app) = spawn(backend, |s| {
        s.settlement_delay = Duration::from_secs(1);
        s.unclaimed_expiry = Duration::from_secs(3);
    })
    .await
    else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    let added = add_endpoint(&app.db, &f.client_id, &receiver.url("/hook"), None);
    let secret = added["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{added}");
    assert_eq!(added["events"].as_array().unwrap().len(), 6, "{added}");

    let ann = person(store, "ann", "100.00").await;
    let bob = person(store, "bob", "50.00").await;
    let carl = person(store, "carl", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments access_profile").await;

    let paid = pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    let charged = pay(&app, &token, json!({"user_id": bob.id}), "-2.00").await;
    let denied = pay(&app, &token, json!({"user_id": bob.id}), "-3.00").await;
    let failing = pay(&app, &token, json!({"user_id": carl.id}), "4.00").await;
    suspend(store, &carl.id).await;
    let expiring = pay(&app, &token, json!({"email": "nobody@example.com"}), "5.00").await;
    let cancelled = pay(&app, &token, json!({"email": "later@example.com"}), "6.00").await;
    let id = |p: &Value| p["id"].as_str().unwrap().to_owned();
    app.put(
        &format!("/payments/{}", id(&charged)),
        &bob.token,
        json!({"action": "approve"}),
    )
    .await
    .ok();
    app.put(
        &format!("/payments/{}", id(&denied)),
        &bob.token,
        json!({"action": "deny"}),
    )
    .await
    .ok();
    app.put(
        &format!("/payments/{}", id(&cancelled)),
        &ann.token,
        json!({"action": "cancel"}),
    )
    .await
    .ok();

    // payment.created for each, as the POST answered it (pending).
    for made in [&paid, &charged, &denied, &failing, &expiring, &cancelled] {
        let event = receiver.event("payment.created", &id(made)).await;
        assert_standard(&event, &secret, "payment.created");
        assert_eq!(event.json()["data"], *made, "created as answered");
    }
    for (kind, payment) in [
        ("payment.settled", &paid),
        ("payment.settled", &charged),
        ("payment.cancelled", &denied),
        ("payment.failed", &failing),
        ("payment.expired", &expiring),
        ("payment.cancelled", &cancelled),
    ] {
        let event = receiver.event(kind, &id(payment)).await;
        assert_standard(&event, &secret, kind);
        assert_rendered_as_the_api(&app, &ann.token, &event).await;
        assert_eq!(
            event.json()["data"]["status"],
            kind.trim_start_matches("payment.")
        );
    }
    let refund = receiver
        .event("payment.cancelled", &id(&cancelled))
        .await
        .json();
    assert_eq!(refund["data"]["refund"]["amount"].as_f64(), Some(6.0));
    assert_eq!(
        refund["data"]["refund"]["target"]["user"]["id"],
        json!(ann.id)
    );

    // The owner authorizes the app in a browser, then revokes it on the
    // account page: grant.revoked.
    let browser = Browser::new(&app.origin);
    let consent = browser
        .to_consent(
            &f.authorize_url(&[("scope", "access_profile")]),
            &f.username,
            PASSWORD,
        )
        .await;
    let allowed = browser.decide(&consent, "allow").await;
    assert_eq!(allowed.status, 303);
    let account = browser.get("/account").await;
    let action = format!("/account/apps/{}/revoke", f.client_id);
    let revoked = browser.post(&action, &account.form(&action)).await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    let got = receiver
        .wait_until(Duration::from_secs(10), |all| {
            all.iter().any(|r| r.json()["type"] == "grant.revoked")
        })
        .await;
    let event = got
        .iter()
        .find(|r| r.json()["type"] == "grant.revoked")
        .unwrap();
    assert_standard(event, &secret, "grant.revoked");
    let data = &event.json()["data"];
    assert_eq!(data["user_id"], json!(f.user_id));
    assert_eq!(data["client_id"], json!(f.client_id));
    assert_eq!(data["revoked_at"], event.json()["timestamp"]);

    // One delivery per event: no id twice (every answer was 200).
    let got = receiver.received();
    let ids: HashSet<String> = got.iter().map(Received::id).collect();
    assert_eq!(ids.len(), got.len(), "an event was delivered twice");
    assert_eq!(got.len(), 13, "6 created, 6 ended, 1 revoked");
}

/// A payment event reaches the app it was made through (even with
/// `make_payments` alone) and apps that a party has a live grant to with a
/// scope that reads payments, once each however linked; no other app.
async fn an_event_reaches_only_the_apps_linked_to_the_payment_and_once_each(backend: Backend) {
    let Some(app) = spawn(backend, |_| {}).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    let reader = f.client_id.clone();
    let maker = another_app(&app, &f, "Maker").await;
    let stranger = another_app(&app, &f, "Stranger").await;
    let payer_only = another_app(&app, &f, "Payer only").await;
    let revoked = another_app(&app, &f, "Revoked").await;
    for (client_id, path) in [
        (&reader, "/reader"),
        (&maker, "/maker"),
        (&stranger, "/stranger"),
        (&payer_only, "/payer-only"),
        (&revoked, "/revoked"),
    ] {
        add_endpoint(
            &app.db,
            client_id,
            &receiver.url(path),
            Some("payment.created,payment.settled"),
        );
    }
    let ann = person(store, "ann", "100.00").await;
    let bob = person(store, "bob", "0").await;
    // Linked two ways to `reader`: both parties read payments through it.
    app_token(store, &ann.id, &reader, "access_profile").await;
    app_token(store, &bob.id, &reader, "access_payment_history").await;
    app_token(store, &bob.id, &payer_only, "make_payments access_balance").await;
    app_token(store, &bob.id, &revoked, "access_payment_history").await;
    assert!(store
        .revoke_app_for_user(&bob.id, &revoked, tally::domain::now_micros())
        .await
        .unwrap());
    let token = app_token(store, &ann.id, &maker, "make_payments").await;
    let paid = pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    let id = paid["id"].as_str().unwrap();

    let got = receiver
        .wait_until(Duration::from_secs(15), |all| {
            ["/reader", "/maker"].iter().all(|path| {
                all.iter()
                    .filter(|r| r.path == *path && r.json()["data"]["id"] == id)
                    .count()
                    >= 2
            })
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got_later = receiver.received();
    assert_eq!(got.len(), got_later.len(), "more came: {got_later:?}");
    let mut by_path: HashMap<String, Vec<String>> = HashMap::new();
    for r in &got_later {
        by_path
            .entry(r.path.clone())
            .or_default()
            .push(r.json()["type"].as_str().unwrap().to_owned());
    }
    for path in ["/reader", "/maker"] {
        let mut kinds = by_path.remove(path).unwrap();
        kinds.sort();
        assert_eq!(kinds, ["payment.created", "payment.settled"], "{path}");
    }
    assert!(by_path.is_empty(), "unlinked apps got events: {by_path:?}");
}

/// A failed attempt (an answer of 500) is tried again, with the same
/// `webhook-id` and body; the list shows both attempts.
async fn a_failed_attempt_is_retried_with_the_same_webhook_id_and_body(backend: Backend) {
    let Some(app) = spawn(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    receiver.plan([Reply::status(500)]);
    let added = add_endpoint(&app.db, &f.client_id, &receiver.url("/hook"), None);
    let secret = added["secret"].as_str().unwrap();
    let ann = person(store, "ann", "10.00").await;
    let bob = person(store, "bob", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments").await;
    pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;

    let got = receiver
        .wait_until(Duration::from_secs(20), |all| all.len() >= 2)
        .await;
    assert_eq!(got[0].id(), got[1].id());
    assert_eq!(got[0].body, got[1].body);
    assert!(got[0].verifies_with(secret) && got[1].verifies_with(secret));

    let deliveries = attempts(&app.db, &f.client_id, 2).await;
    let answers: Vec<(i64, Value)> = deliveries
        .iter()
        .map(|d| (d["attempt"].as_i64().unwrap(), d["answer"].clone()))
        .collect();
    assert!(answers.contains(&(1, json!(500))), "{deliveries:?}");
    assert!(answers.contains(&(2, json!(200))), "{deliveries:?}");
    assert!(deliveries
        .iter()
        .all(|d| d["event_id"] == json!(got[0].id())));
}

/// A 307 to another address is an answer like any other that is not 2xx:
/// nothing is sent where it points, and the event is tried again later.
async fn a_redirect_is_not_followed(backend: Backend) {
    let Some(app) = spawn(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    receiver.plan([Reply {
        location: Some(elsewhere.url("/stolen")),
        ..Reply::status(307)
    }]);
    add_endpoint(&app.db, &f.client_id, &receiver.url("/hook"), None);
    let ann = person(store, "ann", "10.00").await;
    let bob = person(store, "bob", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments").await;
    pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    let got = receiver
        .wait_until(Duration::from_secs(20), |all| all.len() >= 2)
        .await;
    assert_eq!(got[0].id(), got[1].id());
    assert!(elsewhere.received().is_empty(), "the redirect was followed");
    let deliveries = attempts(&app.db, &f.client_id, 2).await;
    let first = deliveries.iter().find(|d| d["attempt"] == 1).unwrap();
    assert_eq!(first["answer"], 307, "{deliveries:?}");
}

/// An answer that has not come within 10 seconds is a failed attempt (no
/// answer); the retry's answer, a 200 announcing a body far larger than
/// 1 KiB of which only 2 KiB ever comes, is a delivery as soon as the
/// first KiB is read: the rest is not waited for.
async fn an_answer_slower_than_10_seconds_fails_and_only_1_kib_of_an_answer_is_read(
    backend: Backend,
) {
    let Some(app) = spawn(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    receiver.plan([
        Reply {
            delay: Duration::from_secs(13),
            ..Reply::status(200)
        },
        Reply {
            body_bytes: 2048,
            announced: Some((50 * 1024 * 1024, Duration::from_secs(40))),
            ..Reply::status(200)
        },
    ]);
    add_endpoint(&app.db, &f.client_id, &receiver.url("/hook"), None);
    let ann = person(store, "ann", "10.00").await;
    let bob = person(store, "bob", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments").await;
    pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    let first = attempts(&app.db, &f.client_id, 1).await;
    assert_eq!(first[0]["answer"], Value::Null, "{first:?}");
    let started = std::time::Instant::now();
    receiver
        .wait_until(Duration::from_secs(20), |all| all.len() >= 2)
        .await;
    let deliveries = attempts(&app.db, &f.client_id, 2).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the second attempt waited for the whole answer"
    );
    let second = deliveries.iter().find(|d| d["attempt"] == 2).unwrap();
    assert_eq!(second["answer"], 200, "{deliveries:?}");
}

/// After a rotation, deliveries carry two signatures: the new secret's and
/// the old one's, each accepted by the reference library.
async fn a_rotated_secret_signs_beside_the_new_one(backend: Backend) {
    let Some(app) = spawn(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    let added = add_endpoint(&app.db, &f.client_id, &receiver.url("/hook"), None);
    let old = added["secret"].as_str().unwrap().to_owned();
    let endpoint_id = added["id"].as_str().unwrap();
    let run = cli(
        &app.db,
        false,
        &[
            "admin",
            "app",
            "webhook",
            "rotate",
            &f.client_id,
            endpoint_id,
            "--json",
        ],
    );
    assert!(run.status.success(), "{}", run.stderr);
    let new = run.json()["secret"].as_str().unwrap().to_owned();
    assert!(new.starts_with("whsec_") && new != old);

    let ann = person(store, "ann", "10.00").await;
    let bob = person(store, "bob", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments").await;
    let paid = pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    let event = receiver
        .event("payment.created", paid["id"].as_str().unwrap())
        .await;
    let signatures = event.header("webhook-signature");
    assert_eq!(signatures.split(' ').count(), 2, "{signatures}");
    assert!(signatures.split(' ').all(|s| s.starts_with("v1,")));
    assert!(event.verifies_with(&new), "the new secret does not verify");
    assert!(event.verifies_with(&old), "the old secret does not verify");
    let stranger = tally::webhooks::signing::new_secret();
    use secrecy::ExposeSecret;
    assert!(!event.verifies_with(stranger.expose_secret()));

    // 24 hours on (the overlap's end moved to the past), the new secret
    // alone signs.
    execute(&app.db, "UPDATE webhook_endpoints SET previous_until = 1").await;
    let paid = pay(&app, &token, json!({"user_id": bob.id}), "2.00").await;
    let event = receiver
        .event("payment.created", paid["id"].as_str().unwrap())
        .await;
    assert_eq!(event.header("webhook-signature").split(' ').count(), 1);
    assert!(event.verifies_with(&new));
    assert!(!event.verifies_with(&old), "the old secret still signs");
}

/// Runs one statement on the test's database (to move a stored time into
/// the past, as time passing would).
async fn execute(db: &TestDb, sql: &str) {
    use sqlx::Connection;
    match &db.url {
        DatabaseUrl::Sqlite(url) => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
        DatabaseUrl::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
    }
}

/// After the last retry (the 8th attempt) fails, the event is marked
/// failed, and is not tried again until it is resent.
async fn an_event_whose_last_retry_fails_is_marked_failed(backend: Backend) {
    let Some(app) = spawn(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    receiver.plan((0..3).map(|_| Reply::status(500)));
    add_endpoint(&app.db, &f.client_id, &receiver.url("/hook"), None);
    let ann = person(store, "ann", "10.00").await;
    let bob = person(store, "bob", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments").await;
    pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    attempts(&app.db, &f.client_id, 1).await;
    // Seven attempts made (hours on), the eighth is due now.
    execute(
        &app.db,
        "UPDATE webhook_deliveries SET attempts = 7, next_attempt_at = 0",
    )
    .await;
    let deliveries = attempts(&app.db, &f.client_id, 2).await;
    let last = deliveries.iter().find(|d| d["attempt"] == 8).unwrap();
    assert_eq!(last["answer"], 500, "{deliveries:?}");
    let browser = Browser::new(&app.origin);
    let signin = browser.get("/signin").await;
    browser.sign_in(&signin, &f.username, PASSWORD).await;
    let path = format!("/developer/apps/{}/webhooks", f.client_id);
    let page = browser.get(&path).await;
    assert!(page.text().contains("failed"), "{}", page.text());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        receiver.received().len(),
        2,
        "a failed event was tried again"
    );
    // Resent from the Developer tab, it goes out again (the receiver now
    // answers 200).
    let resend_action = format!("{path}/resend");
    let resent = browser
        .post(&resend_action, &page.form(&resend_action))
        .await;
    assert_eq!(resent.status, 303);
    receiver
        .wait_until(Duration::from_secs(10), |all| all.len() >= 3)
        .await;
}

/// Without TALLY_WEBHOOK_ALLOW_PRIVATE, `add` refuses loopback addresses in
/// any spelling and plain http; and an endpoint that points at one (added
/// while allowed) gets nothing from a server that does not allow it: the
/// attempt is refused before any connection, as the Developer tab says.
async fn private_addresses_are_refused_when_added_and_when_delivered(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    let port = receiver.port;
    for url in [
        format!("https://127.0.0.1:{port}/hook"),
        format!("https://2130706433:{port}/hook"),
        format!("https://[::ffff:127.0.0.1]:{port}/hook"),
        format!("https://localhost:{port}/hook"),
        "https://169.254.169.254/latest".to_owned(),
        "https://10.0.0.1/hook".to_owned(),
    ] {
        let run = cli(
            &app.db,
            false,
            &[
                "admin",
                "app",
                "webhook",
                "add",
                &f.client_id,
                &url,
                "--json",
            ],
        );
        assert_eq!(
            run.status.code(),
            Some(1),
            "{url} was accepted: {}",
            run.stdout
        );
        assert!(
            run.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a public address"),
            "{url}: {}",
            run.stdout
        );
    }
    let run = cli(
        &app.db,
        false,
        &[
            "admin",
            "app",
            "webhook",
            "add",
            &f.client_id,
            "http://example.com/hook",
            "--json",
        ],
    );
    assert_eq!(run.status.code(), Some(1));
    assert!(run.stdout.contains("https"), "{}", run.stdout);

    // Added while allowed, delivered by a server that does not allow it: an
    // address, and (where this machine's name resolves to loopback, as on
    // the project's machines) a name, resolved at the attempt.
    let mut urls = vec![format!("https://127.0.0.1:{port}/hook")];
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let hostname = hostname.trim();
    if let Ok(mut found) = tokio::net::lookup_host((hostname, 0)).await {
        if found.any(|a| a.ip().is_loopback()) && hostname != "localhost" {
            urls.push(format!("https://{hostname}:{port}/hook"));
        }
    }
    for url in &urls {
        add_endpoint(&app.db, &f.client_id, url, None);
    }
    let ann = person(store, "ann", "10.00").await;
    let bob = person(store, "bob", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments").await;
    pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    let started = std::time::Instant::now();
    loop {
        let listed = list_endpoints(&app.db, &f.client_id);
        let endpoints = listed["endpoints"].as_array().unwrap();
        let tried: Vec<&Value> = endpoints
            .iter()
            .filter_map(|e| e["deliveries"].as_array().and_then(|d| d.first()))
            .collect();
        if tried.len() == urls.len() {
            assert!(tried.iter().all(|d| d["answer"].is_null()), "{listed}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{listed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        receiver.received().is_empty(),
        "a private address was reached"
    );
    let browser = Browser::new(&app.origin);
    let signin = browser.get("/signin").await;
    browser.sign_in(&signin, &f.username, PASSWORD).await;
    let page = browser
        .get(&format!("/developer/apps/{}/webhooks", f.client_id))
        .await;
    assert!(
        page.text().matches("not a public address").count() >= urls.len(),
        "{}",
        page.text()
    );
}

/// `add` refuses an unknown client, an unknown event, a sixth endpoint and
/// a URL that is not https; `list` has SPEC §12's shape and never a secret;
/// `remove` deletes.
async fn the_operator_commands_refuse_what_section_12_refuses_and_list_no_secret(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let db = &app.db;
    let add = |client_id: &str, url: &str, events: Option<&str>| {
        let mut args = vec!["admin", "app", "webhook", "add", client_id, url, "--json"];
        if let Some(events) = events {
            args.extend(["--events", events]);
        }
        cli(db, false, &args)
    };
    let unknown = add("no-such-client", "https://example.com/a", None);
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(unknown.json()["error"]["code"], "not_found");
    let bad_event = add(
        &f.client_id,
        "https://example.com/a",
        Some("payment.refunded"),
    );
    assert_eq!(bad_event.status.code(), Some(1));
    assert!(bad_event.stdout.contains("payment.refunded"));
    let http = add(&f.client_id, "http://example.com/a", None);
    assert_eq!(http.status.code(), Some(1));

    let mut secrets = Vec::new();
    for i in 0..5 {
        let run = add(
            &f.client_id,
            &format!("https://example.com/hook/{i}"),
            Some("payment.settled,grant.revoked"),
        );
        assert!(run.status.success(), "{}", run.stdout);
        let added = run.json();
        let keys: HashSet<&str> = added
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, HashSet::from(["id", "url", "events", "secret"]));
        assert_eq!(added["events"], json!(["payment.settled", "grant.revoked"]));
        secrets.push(added["secret"].as_str().unwrap().to_owned());
    }
    let sixth = add(&f.client_id, "https://example.com/hook/6", None);
    assert_eq!(sixth.status.code(), Some(1), "{}", sixth.stdout);
    assert!(sixth.stdout.contains("at most 5"), "{}", sixth.stdout);

    let run = cli(
        db,
        false,
        &["admin", "app", "webhook", "list", &f.client_id, "--json"],
    );
    assert!(run.status.success());
    for secret in &secrets {
        assert!(!run.stdout.contains(secret.as_str()), "a secret is listed");
    }
    let listed = run.json();
    let endpoints = listed["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 5);
    for endpoint in endpoints {
        let keys: HashSet<&str> = endpoint
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            HashSet::from(["id", "url", "events", "enabled", "deliveries"])
        );
        assert_eq!(endpoint["enabled"], true);
    }
    let first = endpoints[0]["id"].as_str().unwrap();
    let removed = cli(
        db,
        false,
        &[
            "admin",
            "app",
            "webhook",
            "remove",
            &f.client_id,
            first,
            "--json",
        ],
    );
    assert!(removed.status.success(), "{}", removed.stdout);
    let again = cli(
        db,
        false,
        &[
            "admin",
            "app",
            "webhook",
            "remove",
            &f.client_id,
            first,
            "--json",
        ],
    );
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        list_endpoints(db, &f.client_id)["endpoints"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

/// On the Developer tab the owner adds an endpoint (its secret shown once),
/// sends it a test event, sees the delivery, and resends it: the same id.
async fn the_developer_tab_adds_an_endpoint_sends_a_test_event_and_resends_it(backend: Backend) {
    let Some(app) = spawn(backend, |_| {}).await else {
        return;
    };
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    let browser = Browser::new(&app.origin);
    let signin = browser.get("/signin").await;
    browser.sign_in(&signin, &f.username, PASSWORD).await;
    let path = format!("/developer/apps/{}/webhooks", f.client_id);
    let page = browser.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut fields = page.form(&path);
    browser::set(&mut fields, "url", &receiver.url("/tab"));
    fields.push(("payment.settled".to_owned(), "on".to_owned()));
    let added = browser.post(&path, &fields).await;
    assert_eq!(added.status, 303, "{}", added.body);
    let page = browser.get(&path).await;
    let html = scraper::Html::parse_document(&page.body);
    let secret = html
        .select(&scraper::Selector::parse("#webhook-secret").unwrap())
        .next()
        .expect("the secret is shown once")
        .text()
        .collect::<String>();
    assert!(secret.starts_with("whsec_"));
    assert!(page.text().contains("payment.settled"));
    let again = browser.get(&path).await;
    assert!(!again.body.contains(&secret), "the secret was shown twice");

    let test_action = format!("{path}/test");
    let sent = browser.post(&test_action, &again.form(&test_action)).await;
    assert_eq!(sent.status, 303);
    let got = receiver
        .wait_until(Duration::from_secs(10), |all| !all.is_empty())
        .await;
    assert!(got[0].verifies_with(&secret));
    assert_eq!(got[0].json()["type"], "webhook.test");

    let started = std::time::Instant::now();
    let page = loop {
        let page = browser.get(&path).await;
        if page.text().contains("delivered") {
            break page;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            page.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(page.text().contains(&got[0].id()));
    let resend_action = format!("{path}/resend");
    let resent = browser
        .post(&resend_action, &page.form(&resend_action))
        .await;
    assert_eq!(resent.status, 303, "{}", resent.body);
    let got = receiver
        .wait_until(Duration::from_secs(10), |all| all.len() >= 2)
        .await;
    assert_eq!(got[0].id(), got[1].id());
    assert_eq!(got[0].body, got[1].body);
}

/// An endpoint whose attempts have failed for 5 days without a success is
/// disabled (and the Developer tab says so); events delivered 30 days ago
/// are purged. Time is moved on through the store and the retention round,
/// which take the time they act at.
async fn an_endpoint_failing_for_five_days_is_disabled_and_old_events_are_purged(backend: Backend) {
    let Some(app) = spawn(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let receiver = Receiver::start().await;
    receiver.plan((0..10).map(|_| Reply::status(503)));
    add_endpoint(&app.db, &f.client_id, &receiver.url("/hook"), None);
    let ann = person(store, "ann", "10.00").await;
    let bob = person(store, "bob", "0").await;
    let token = app_token(store, &ann.id, &f.client_id, "make_payments").await;
    pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    attempts(&app.db, &f.client_id, 1).await;
    // The first attempt failed; six days later the retry fails too.
    let day = 24 * 3600 * 1_000_000_i64;
    let later = tally::domain::now_micros() + 6 * day;
    let mut claimed = Vec::new();
    for _ in 0..50 {
        claimed = store
            .claim_deliveries(later, later + 30_000_000, "test-claim", 10)
            .await
            .unwrap();
        if !claimed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = claimed.pop().expect("the retry is due six days later");
    assert!(store
        .finish_attempts(&[tally::store::AttemptOutcome {
            delivery_id: d.id.clone(),
            endpoint_id: d.endpoint_id.clone(),
            claim: "test-claim".to_owned(),
            attempt: d.attempts,
            at: later,
            answer: Some(503),
            error: Some("answered 503".to_owned()),
            delivered: false,
            retry_at: Some(later + 3_600_000_000),
            disable_if_failing_since: later - 5 * day,
            rendered: None,
        }])
        .await
        .unwrap()
        .eq(&[true]));
    let listed = list_endpoints(&app.db, &f.client_id);
    assert_eq!(listed["endpoints"][0]["enabled"], false, "{listed}");
    let browser = Browser::new(&app.origin);
    let signin = browser.get("/signin").await;
    browser.sign_in(&signin, &f.username, PASSWORD).await;
    let page = browser
        .get(&format!("/developer/apps/{}/webhooks", f.client_id))
        .await;
    assert!(page.text().contains("disabled"), "{}", page.text());
    // A disabled endpoint gets nothing more.
    let before = receiver.received().len();
    pay(&app, &token, json!({"user_id": bob.id}), "1.00").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.received().len(), before);

    // Delivered events go 30 days on.
    let other = Receiver::start().await;
    let f2 = another_app(&app, &f, "Purged").await;
    add_endpoint(&app.db, &f2, &other.url("/hook"), None);
    let token2 = app_token(store, &ann.id, &f2, "make_payments").await;
    pay(&app, &token2, json!({"user_id": bob.id}), "1.00").await;
    attempts(&app.db, &f2, 1).await;
    tally::workers::purge(store, tally::domain::now_micros() + 29 * day)
        .await
        .unwrap();
    assert!(!list_endpoints(&app.db, &f2)["endpoints"][0]["deliveries"]
        .as_array()
        .unwrap()
        .is_empty());
    tally::workers::purge(store, tally::domain::now_micros() + 31 * day)
        .await
        .unwrap();
    assert!(list_endpoints(&app.db, &f2)["endpoints"][0]["deliveries"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// kill -9 of `tally serve` while pays arrive: after a restart, every pay
/// answered 200 has its `payment.created` event delivered, and every event
/// delivered names a payment that exists.
async fn killed_under_load_every_answered_payment_has_its_event_and_none_is_invented(
    backend: Backend,
) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store().await;
    let receiver = Receiver::start().await;
    let owner = person(store.as_ref(), "owner", "0").await;
    let _ = owner;
    let created = tally::admin::app_add(
        store.as_ref(),
        tally::admin::AppAdd {
            owner: "owner".to_owned(),
            name: "Loaded".to_owned(),
            redirect_url: "https://app.example.com/cb".to_owned(),
            description: None,
            site_url: None,
        },
    )
    .await
    .unwrap();
    add_endpoint(
        &db,
        &created.client_id,
        &receiver.url("/hook"),
        Some("payment.created"),
    );
    let target = person(store.as_ref(), "target", "0").await;
    let mut tokens = Vec::new();
    for i in 0..8 {
        let payer = person(store.as_ref(), &format!("payer{i}"), "1000.00").await;
        tokens.push(
            app_token(
                store.as_ref(),
                &payer.id,
                &created.client_id,
                "make_payments",
            )
            .await,
        );
    }
    let env = [("TALLY_WEBHOOK_ALLOW_PRIVATE", "true")];
    let server = ServeProcess::start(&db.url_string(), &env);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = std::time::Instant::now() + Duration::from_secs(4);
    let mut loads = Vec::new();
    for token in tokens.clone() {
        let (http, origin, answered, target) = (
            http.clone(),
            server.origin.clone(),
            answered.clone(),
            target.id.clone(),
        );
        loads.push(tokio::spawn(async move {
            while std::time::Instant::now() < stop {
                let sent = http
                    .post(format!("{origin}/v1/payments"))
                    .bearer_auth(&token)
                    .json(&json!({"user_id": target, "amount": "0.01", "note": "load"}))
                    .send()
                    .await;
                let Ok(response) = sent else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                if response.status() == 200 {
                    if let Ok(body) = response.json::<Value>().await {
                        answered
                            .lock()
                            .unwrap()
                            .push(body["data"]["payment"]["id"].as_str().unwrap().to_owned());
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.stop();
    for load in loads {
        load.await.unwrap();
    }
    let answered: Vec<String> = answered.lock().unwrap().clone();
    assert!(
        answered.len() > 10,
        "too few pays before the kill: {}",
        answered.len()
    );

    let _restarted = ServeProcess::start(&db.url_string(), &env);
    let ids: HashSet<String> = answered
        .iter()
        .map(|id| format!("evt_created_{id}"))
        .collect();
    let got = receiver
        .wait_until(Duration::from_secs(60), |all| {
            let seen: HashSet<String> = all.iter().map(Received::id).collect();
            ids.is_subset(&seen)
        })
        .await;
    let named: Vec<String> = got
        .iter()
        .map(|r| r.json()["data"]["id"].as_str().unwrap().to_owned())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let found = store.find_payments(&named).await.unwrap();
    assert_eq!(
        found.len(),
        named.len(),
        "an event names a payment that does not exist"
    );
}

/// Two instances on one PostgreSQL database deliver each attempt once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_postgres_deliver_each_event_once() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store().await;
    let receiver = Receiver::start().await;
    person(store.as_ref(), "owner", "0").await;
    let created = tally::admin::app_add(
        store.as_ref(),
        tally::admin::AppAdd {
            owner: "owner".to_owned(),
            name: "Twice".to_owned(),
            redirect_url: "https://app.example.com/cb".to_owned(),
            description: None,
            site_url: None,
        },
    )
    .await
    .unwrap();
    add_endpoint(&db, &created.client_id, &receiver.url("/hook"), None);
    // Answers take a moment, so that both instances poll while attempts run.
    receiver.plan((0..200).map(|_| Reply {
        delay: Duration::from_millis(30),
        ..Reply::status(200)
    }));
    let payer = person(store.as_ref(), "payer", "1000.00").await;
    let target = person(store.as_ref(), "target", "0").await;
    let token = app_token(
        store.as_ref(),
        &payer.id,
        &created.client_id,
        "make_payments",
    )
    .await;
    let env = [("TALLY_WEBHOOK_ALLOW_PRIVATE", "true")];
    let first = ServeProcess::start(&db.url_string(), &env);
    let second = ServeProcess::start(&db.url_string(), &env);
    let http = reqwest::Client::new();
    let mut made = 0;
    for i in 0..40 {
        let origin = if i % 2 == 0 {
            &first.origin
        } else {
            &second.origin
        };
        let answer = http
            .post(format!("{origin}/v1/payments"))
            .bearer_auth(&token)
            .json(&json!({"user_id": target.id, "amount": "0.01", "note": "twice"}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        made += 1;
    }
    // Each pay: created and settled.
    receiver
        .wait_until(Duration::from_secs(30), |all| all.len() >= 2 * made)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = receiver.received();
    let ids: HashSet<String> = got.iter().map(Received::id).collect();
    assert_eq!(got.len(), 2 * made, "an attempt was made twice");
    assert_eq!(ids.len(), got.len());
}
