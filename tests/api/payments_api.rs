//! `/payments` over real HTTP: shapes, every row of the state table of SPEC §5,
//! bad inputs, paging and idempotency.

use crate::fixtures::{
    audit_ok, balance_cents, person, person_with, suspend, token, Person, PersonSpec,
};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::users_api::assert_user_object;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;
use tally::domain::{Audience, Medium, PaymentAction, PaymentKind, PaymentStatus, TargetType};
use tally::store::{Payment, PaymentInsert};

on_both_backends!(
    a_pay_is_held_at_once_then_settled_and_every_field_is_shown,
    a_pay_settles_only_after_the_settlement_delay,
    pays_due_at_once_in_a_ring_settle_and_every_balance_ends_where_it_began,
    a_pay_to_a_suspended_account_fails_and_is_refunded,
    a_pay_to_an_email_is_claimed_when_an_account_verifies_it,
    an_account_added_verified_by_the_operator_claims_what_waits_for_it,
    a_verified_address_whose_claim_was_missed_is_claimed_instead_of_expiring,
    a_pay_to_an_email_is_claimed_when_its_owner_signs_up_and_follows_the_link,
    unclaimed_payments_expire_and_pays_come_back,
    charges_are_approved_denied_or_cancelled_by_the_right_party,
    cancelling_a_held_pay_refunds_the_actor,
    a_pay_the_balance_cannot_cover_is_refused,
    a_pay_or_charge_to_an_unknown_account_writes_nothing,
    bad_inputs_are_refused_with_their_code_and_write_nothing,
    payments_are_listed_newest_first_and_filtered,
    paging_through_120_payments_with_one_timestamp_returns_each_once,
    a_retried_post_with_the_same_key_replays_and_debits_once,
    a_retried_put_with_the_same_key_replays_its_first_answer,
    a_venmo_era_client_reads_the_status_of_an_approved_charge_from_data,
);

const PAYMENT_KEYS: [&str; 13] = [
    "action",
    "actor",
    "amount",
    "audience",
    "date_completed",
    "date_created",
    "fee",
    "id",
    "medium",
    "note",
    "refund",
    "status",
    "target",
];

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

fn id(value: &Value) -> String {
    value["id"].as_str().unwrap().to_owned()
}

async fn two(app: &TestApp, ann_balance: &str) -> (Person, Person) {
    let store = app.store.as_ref();
    (
        person(store, "ann", ann_balance).await,
        person(store, "bob", "0").await,
    )
}

async fn a_pay_is_held_at_once_then_settled_and_every_field_is_shown(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "20").await;
    let answer = app
        .post(
            "/payments",
            &ann.token,
            json!({"user_id": bob.id, "amount": 12.5, "note": "  lunch  ", "audience": "FRIENDS"}),
        )
        .await;
    let data = answer.ok();
    assert_eq!(keys(data), ["balance", "payment"]);
    assert!(answer.text.contains(r#""balance":7.50"#), "{}", answer.text);
    assert!(answer.text.contains(r#""amount":12.50"#), "{}", answer.text);
    let payment = &data["payment"];
    assert_eq!(keys(payment), PAYMENT_KEYS);
    assert_eq!(payment["status"], "pending");
    assert_eq!(payment["action"], "pay");
    assert_eq!(payment["note"], "lunch");
    assert_eq!(payment["audience"], "friends");
    assert_eq!(payment["medium"], "api");
    assert!(payment["fee"].is_null());
    assert!(payment["refund"].is_null());
    assert!(payment["date_completed"].is_null());
    assert_eq!(payment["date_created"].as_str().unwrap().len(), 20);
    assert_user_object(&payment["actor"], &ann.id, "ann");
    let target = &payment["target"];
    assert_eq!(keys(target), ["email", "phone", "type", "user"]);
    assert_eq!(target["type"], "user");
    assert!(target["email"].is_null() && target["phone"].is_null());
    assert_user_object(&target["user"], &bob.id, "bob");

    let settled = app
        .wait_for_status(&ann.token, &id(payment), "settled")
        .await;
    assert!(settled["date_completed"].as_str().unwrap().ends_with('Z'));
    assert_eq!(balance_cents(store, &ann.id).await, 750);
    assert_eq!(balance_cents(store, &bob.id).await, 1250);
    // The target sees it too; a stranger does not.
    assert_eq!(
        app.get(&format!("/payments/{}", id(payment)), &bob.token)
            .await
            .ok()["status"],
        "settled"
    );
    let eve = person(store, "eve", "0").await;
    app.get(&format!("/payments/{}", id(payment)), &eve.token)
        .await
        .error(404, "not_found");
    // Without access_balance the balance is null.
    let narrow = crate::fixtures::token(store, &ann.id, "make_payments").await;
    let answer = app
        .post(
            "/payments",
            &narrow,
            json!({"user_id": bob.id, "amount": "1", "note": "x"}),
        )
        .await;
    assert!(answer.ok()["balance"].is_null());
    audit_ok(store).await;
}

async fn a_pay_settles_only_after_the_settlement_delay(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.settlement_delay = Duration::from_millis(1500)
    })
    .await
    else {
        return;
    };
    let (ann, bob) = two(&app, "10").await;
    let payment = app.pay(&ann, &bob, "4").await.ok()["payment"].clone();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let shown = app
        .get(&format!("/payments/{}", id(&payment)), &ann.token)
        .await;
    assert_eq!(shown.ok()["status"], "pending");
    assert_eq!(balance_cents(app.store.as_ref(), &bob.id).await, 0);
    audit_ok(app.store.as_ref()).await;
    app.wait_for_status(&ann.token, &id(&payment), "settled")
        .await;
    assert_eq!(balance_cents(app.store.as_ref(), &bob.id).await, 400);
}

/// Under a settlement delay of 0 a pay is due the moment it is made. On
/// PostgreSQL its batch settles it in the same transaction, so it reads as
/// settled as soon as its answer arrives; on SQLite the worker's next round
/// settles it. Made at once around a ring, each pay spends money its actor
/// holds before the pay to it lands, and on PostgreSQL one batch may debit and
/// credit the same account.
async fn pays_due_at_once_in_a_ring_settle_and_every_balance_ends_where_it_began(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let mut ring = Vec::new();
    for name in ["ann", "bob", "cat", "dan", "eve"] {
        ring.push(person(store, name, "10").await);
    }
    let pays = futures_util::future::join_all(
        ring.iter()
            .zip(ring.iter().cycle().skip(1))
            .map(|(from, to)| app.pay(from, to, "10")),
    )
    .await;
    for (answer, actor) in pays.iter().zip(&ring) {
        let made = &answer.ok()["payment"];
        // The answer shows the pay as made.
        assert_eq!(made["status"], "pending", "{}", answer.text);
        assert!(made["date_completed"].is_null());
        let path = format!("/payments/{}", id(made));
        let shown = match backend {
            Backend::Postgres => {
                let shown = app.get(&path, &actor.token).await.ok().clone();
                assert_eq!(shown["date_completed"], made["date_created"], "{shown}");
                shown
            }
            Backend::Sqlite => {
                app.wait_for_status(&actor.token, &id(made), "settled")
                    .await
            }
        };
        assert_eq!(shown["status"], "settled", "{shown}");
    }
    for person in &ring {
        assert_eq!(
            balance_cents(store, &person.id).await,
            1000,
            "{}",
            person.id
        );
    }
    audit_ok(store).await;
}

async fn a_pay_to_a_suspended_account_fails_and_is_refunded(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "10").await;
    suspend(store, &bob.id).await;
    let payment = app.pay(&ann, &bob, "3.25").await.ok()["payment"].clone();
    let failed = app
        .wait_for_status(&ann.token, &id(&payment), "failed")
        .await;
    assert!(failed["date_completed"].is_string());
    let refund = &failed["refund"];
    assert_eq!(keys(refund), PAYMENT_KEYS);
    assert_eq!(refund["action"], "pay");
    assert_eq!(refund["status"], "settled");
    assert_eq!(refund["amount"], 3.25);
    assert_eq!(refund["target"]["type"], "user");
    assert_user_object(&refund["target"]["user"], &ann.id, "ann");
    // The money comes back from the hold, not from bob, who never had it.
    assert!(refund["actor"].is_null(), "{refund}");
    assert!(refund["refund"].is_null());
    // A refund is settled; like any payment that is not pending, it cannot change.
    app.put(
        &format!("/payments/{}", id(refund)),
        &ann.token,
        json!({"action": "cancel"}),
    )
    .await
    .error(409, "invalid_state");
    assert_eq!(balance_cents(store, &ann.id).await, 1000);
    assert_eq!(balance_cents(store, &bob.id).await, 0);
    // Refunds are not items of the list.
    let list = app.get("/payments", &ann.token).await;
    assert_eq!(list.ok().as_array().unwrap().len(), 1);
    audit_ok(store).await;
}

async fn a_pay_to_an_email_is_claimed_when_an_account_verifies_it(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let answer = app
        .post(
            "/payments",
            &ann.token,
            json!({"email": "New@Example.com", "amount": "6", "note": "welcome"}),
        )
        .await;
    let payment = answer.ok()["payment"].clone();
    assert_eq!(
        payment["target"],
        json!({"type": "email", "email": "new@example.com", "phone": null, "user": null})
    );
    let by_phone = app
        .post(
            "/payments",
            &ann.token,
            json!({"phone": "(212) 555-0199", "amount": "-2", "note": "owed"}),
        )
        .await;
    let charge = by_phone.ok()["payment"].clone();
    assert_eq!(charge["target"]["phone"], "+12125550199");
    assert_eq!(charge["action"], "charge");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        app.get(&format!("/payments/{}", id(&payment)), &ann.token)
            .await
            .ok()["status"],
        "pending"
    );

    // An account with that address, not yet verified, does not get the money.
    let bob = person_with(
        store,
        "bob",
        PersonSpec {
            email: Some("new@example.com"),
            phone: Some("+12125550199"),
            ..Default::default()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(balance_cents(store, &bob.id).await, 0);
    // The operator verifies bob with the real binary.
    let db_url = app.db.url_string();
    let run = tokio::task::spawn_blocking(move || {
        crate::helpers::tally(&db_url, &["admin", "user", "verify", "bob", "--json"])
    })
    .await
    .unwrap();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.json()["verified"], true);
    let settled = app
        .wait_for_status(&ann.token, &id(&payment), "settled")
        .await;
    assert_eq!(settled["target"]["type"], "email");
    assert!(settled["target"]["email"].is_null());
    assert_user_object(&settled["target"]["user"], &bob.id, "bob");
    assert_eq!(balance_cents(store, &bob.id).await, 600);
    // The claimed charge now waits for bob, who can see and approve it.
    let listed = app.get("/payments?action=charge", &bob.token).await;
    assert_eq!(listed.ok().as_array().unwrap().len(), 1);
    let approved = app
        .put(
            &format!("/payments/{}", id(&charge)),
            &bob.token,
            json!({"action": "approve"}),
        )
        .await;
    assert_eq!(approved.ok()["status"], "settled");
    assert_eq!(balance_cents(store, &bob.id).await, 400);
    assert_eq!(balance_cents(store, &ann.id).await, 600);
    audit_ok(store).await;
}

async fn an_account_added_verified_by_the_operator_claims_what_waits_for_it(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let payment = app
        .post(
            "/payments",
            &ann.token,
            json!({"email": "cleo@example.com", "amount": "4", "note": "hi"}),
        )
        .await
        .ok()["payment"]
        .clone();
    let db_url = app.db.url_string();
    let run = tokio::task::spawn_blocking(move || {
        crate::helpers::tally(
            &db_url,
            &[
                "admin",
                "user",
                "add",
                "--username",
                "cleo",
                "--password",
                "correct horse battery",
                "--email",
                "Cleo@example.com",
                "--verified",
                "--json",
            ],
        )
    })
    .await
    .unwrap();
    assert!(run.status.success(), "{}", run.stderr);
    let cleo_id = run.json()["id"].as_str().unwrap().to_owned();
    let settled = app
        .wait_for_status(&ann.token, &id(&payment), "settled")
        .await;
    assert_eq!(settled["target"]["user"]["id"], cleo_id.as_str());
    assert_eq!(balance_cents(store, &cleo_id).await, 400);
    audit_ok(store).await;
}

async fn a_verified_address_whose_claim_was_missed_is_claimed_instead_of_expiring(
    backend: Backend,
) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.unclaimed_expiry = Duration::from_millis(300);
    })
    .await
    else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let payment = app
        .post(
            "/payments",
            &ann.token,
            json!({"email": "zed@example.com", "amount": "2", "note": "hi"}),
        )
        .await
        .ok()["payment"]
        .clone();
    // An account verified with that address without its claim running (as
    // after a crash between the two): the store alone, no ledger call.
    let zed = person_with(
        store,
        "zed",
        PersonSpec {
            email: Some("zed@example.com"),
            verified: true,
            ..Default::default()
        },
    )
    .await;
    let settled = app
        .wait_for_status(&ann.token, &id(&payment), "settled")
        .await;
    assert_eq!(settled["target"]["user"]["id"], zed.id.as_str());
    assert_eq!(balance_cents(store, &zed.id).await, 200);
    audit_ok(store).await;
}

async fn a_pay_to_an_email_is_claimed_when_its_owner_signs_up_and_follows_the_link(
    backend: Backend,
) {
    use crate::browser::{set, Browser};
    let sink = crate::mail_sink::MailSink::start().await;
    let smtp = sink.url.clone();
    let Some(app) = TestApp::spawn_with(backend, move |s| {
        s.smtp = Some(tally::config::SmtpSettings {
            url: smtp.into(),
            from: "Tally <no-reply@example.com>".parse().unwrap(),
        });
    })
    .await
    else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let pay = app
        .post(
            "/payments",
            &ann.token,
            json!({"email": "newcomer@example.com", "amount": "3", "note": "welcome"}),
        )
        .await
        .ok()["payment"]
        .clone();

    let browser = Browser::new(&app.origin);
    let page = browser.get("/signup").await;
    let mut fields = page.form("/signup");
    for (name, value) in [
        ("username", "newcomer"),
        ("first_name", "New"),
        ("last_name", "Comer"),
        ("email", "newcomer@example.com"),
        ("phone", ""),
        ("password", "plum vessel orbit 97 quietly"),
        ("password_confirm", "plum vessel orbit 97 quietly"),
    ] {
        set(&mut fields, name, value);
    }
    let answer = browser.post("/signup", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    // Signed up but not verified: the pay still waits for the address.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let shown = app
        .get(&format!("/payments/{}", id(&pay)), &ann.token)
        .await;
    assert!(shown.ok()["target"]["user"].is_null());

    let token = sink.token_for("newcomer@example.com").await;
    let page = browser.get(&format!("/verify?token={token}")).await;
    let answer = browser.post("/verify", &page.form("/verify")).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let settled = app.wait_for_status(&ann.token, &id(&pay), "settled").await;
    assert_eq!(settled["target"]["user"]["username"], "newcomer");
    let newcomer = store
        .find_user(tally::store::UserKey::Username("newcomer"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(newcomer.balance_cents, 300);
    audit_ok(store).await;
}

async fn unclaimed_payments_expire_and_pays_come_back(backend: Backend) {
    let Some(app) =
        TestApp::spawn_with(backend, |s| s.unclaimed_expiry = Duration::from_secs(1)).await
    else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let pay = app
        .post(
            "/payments",
            &ann.token,
            json!({"email": "nobody@example.com", "amount": "4", "note": "x"}),
        )
        .await
        .ok()["payment"]
        .clone();
    let charge = app
        .post(
            "/payments",
            &ann.token,
            json!({"phone": "2125550111", "amount": "-4", "note": "x"}),
        )
        .await
        .ok()["payment"]
        .clone();
    assert_eq!(balance_cents(store, &ann.id).await, 600);
    let expired = app.wait_for_status(&ann.token, &id(&pay), "expired").await;
    let refund = &expired["refund"];
    assert_eq!(refund["status"], "settled");
    assert!(refund["actor"].is_null(), "{refund}");
    assert_user_object(&refund["target"]["user"], &ann.id, "ann");
    let expired_charge = app
        .wait_for_status(&ann.token, &id(&charge), "expired")
        .await;
    assert!(expired_charge["refund"].is_null());
    assert_eq!(balance_cents(store, &ann.id).await, 1000);
    // Not pending any more: every PUT is 409.
    app.put(
        &format!("/payments/{}", id(&pay)),
        &ann.token,
        json!({"action": "cancel"}),
    )
    .await
    .error(409, "invalid_state");
    audit_ok(store).await;
}

async fn charges_are_approved_denied_or_cancelled_by_the_right_party(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "1").await;
    let eve = person(store, "eve", "0").await;
    let charge = app.pay(&ann, &bob, "-5").await;
    assert!(charge.text.contains(r#""amount":5.00"#));
    let charge = charge.ok()["payment"].clone();
    assert_eq!(
        (charge["action"].as_str(), charge["status"].as_str()),
        (Some("charge"), Some("pending"))
    );
    let path = format!("/payments/{}", id(&charge));
    // Nothing moves until the target approves.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(balance_cents(store, &ann.id).await, 100);

    app.put(&path, &ann.token, json!({"action": "approve"}))
        .await
        .error(403, "action_not_allowed");
    app.put(&path, &bob.token, json!({"action": "cancel"}))
        .await
        .error(403, "action_not_allowed");
    app.put(&path, &eve.token, json!({"action": "approve"}))
        .await
        .error(404, "not_found");
    app.put(&path, &bob.token, json!({"action": "approve"}))
        .await
        .error(400, "insufficient_funds");
    assert_eq!(app.get(&path, &bob.token).await.ok()["status"], "pending");

    tally::ledger::deposit(store, &bob.id, tally::domain::Amount::parse("8").unwrap())
        .await
        .unwrap();
    let approved = app
        .put(&path, &bob.token, json!({"action": "APPROVE"}))
        .await;
    // `data` is the payment itself (SPEC §4), with no balance beside it.
    let payment = approved.ok();
    assert_eq!(payment["id"], charge["id"]);
    assert!(payment.get("balance").is_none(), "{}", approved.text);
    assert_eq!(payment["status"], "settled");
    assert!(payment["date_completed"].is_string());
    assert_eq!(balance_cents(store, &ann.id).await, 600);
    app.put(&path, &bob.token, json!({"action": "approve"}))
        .await
        .error(409, "invalid_state");

    let denied = app.pay(&ann, &bob, "-1").await.ok()["payment"].clone();
    let answer = app
        .put(
            &format!("/payments/{}", id(&denied)),
            &bob.token,
            json!({"action": "deny"}),
        )
        .await;
    assert_eq!(answer.ok()["status"], "cancelled");
    let cancelled = app.pay(&ann, &bob, "-1").await.ok()["payment"].clone();
    let answer = app
        .put(
            &format!("/payments/{}", id(&cancelled)),
            &ann.token,
            json!({"action": "cancel"}),
        )
        .await;
    assert_eq!(answer.ok()["status"], "cancelled");
    assert!(answer.ok()["refund"].is_null());
    assert_eq!(balance_cents(store, &bob.id).await, 300);
    // A pay cannot be approved by its target.
    let pay = app.pay(&bob, &ann, "1").await.ok()["payment"].clone();
    let answer = app
        .put(
            &format!("/payments/{}", id(&pay)),
            &ann.token,
            json!({"action": "approve"}),
        )
        .await;
    assert!(
        answer.status == 403 || answer.status == 409,
        "{}",
        answer.body
    );
    // That pay settles before Ann is suspended below; otherwise the worker could
    // fail it and refund Bob while his balance is being compared.
    app.wait_for_status(&bob.token, &id(&pay), "settled").await;
    // A charge from an account suspended since fails when approved: no money
    // goes to an account that cannot use it.
    let from_suspended = app.pay(&ann, &bob, "-1").await.ok()["payment"].clone();
    suspend(store, &ann.id).await;
    let before = balance_cents(store, &bob.id).await;
    let answer = app
        .put(
            &format!("/payments/{}", id(&from_suspended)),
            &bob.token,
            json!({"action": "approve"}),
        )
        .await;
    assert_eq!(answer.ok()["status"], "failed", "{}", answer.body);
    assert!(answer.ok()["date_completed"].is_string());
    assert_eq!(balance_cents(store, &bob.id).await, before);
    // An amount may be any JSON number, exponents included.
    let response = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&bob.token)
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"user_id":"{}","note":"x","amount":-2.5e0}}"#,
            eve.id
        ))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    assert!(text.contains(r#""amount":2.50"#), "{text}");
    // The same value in the query and in the JSON body is no conflict.
    let response = app
        .http
        .post(app.url("/v1/payments?amount=-1"))
        .bearer_auth(&bob.token)
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"user_id":"{}","note":"x","amount":-1}}"#,
            eve.id
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    audit_ok(store).await;
}

async fn cancelling_a_held_pay_refunds_the_actor(backend: Backend) {
    let Some(app) =
        TestApp::spawn_with(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await
    else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "10").await;
    let pay = app.pay(&ann, &bob, "2.50").await.ok()["payment"].clone();
    let path = format!("/payments/{}", id(&pay));
    app.put(&path, &bob.token, json!({"action": "cancel"}))
        .await
        .error(403, "action_not_allowed");
    app.put(&path, &bob.token, json!({"action": "approve"}))
        .await
        .error(403, "action_not_allowed");
    let answer = app
        .put(&path, &ann.token, json!({"action": "cancel"}))
        .await;
    let payment = answer.ok();
    assert!(payment.get("balance").is_none(), "{}", answer.text);
    assert_eq!(payment["status"], "cancelled");
    assert_eq!(payment["refund"]["status"], "settled");
    assert_eq!(payment["refund"]["amount"], 2.5);
    assert_user_object(&payment["refund"]["target"]["user"], &ann.id, "ann");
    assert_eq!(
        app.get(&path, &bob.token).await.ok()["refund"]["action"],
        "pay"
    );
    app.put(&path, &ann.token, json!({"action": "cancel"}))
        .await
        .error(409, "invalid_state");
    assert_eq!(balance_cents(store, &ann.id).await, 1000);
    assert_eq!(balance_cents(store, &bob.id).await, 0);
    audit_ok(store).await;
}

async fn a_pay_the_balance_cannot_cover_is_refused(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let (ann, bob) = two(&app, "5").await;
    app.pay(&ann, &bob, "5.01")
        .await
        .error(400, "insufficient_funds");
    assert_eq!(
        app.get("/payments", &ann.token)
            .await
            .ok()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(balance_cents(app.store.as_ref(), &ann.id).await, 500);
    assert_eq!(app.pay(&ann, &bob, "5.00").await.ok()["balance"], 0.0);
    audit_ok(app.store.as_ref()).await;
}

/// The store checks the target account as it writes (on PostgreSQL in the
/// same statement): an id no account has is `invalid_target`, for a pay and a
/// charge, with or without an Idempotency-Key, and nothing is written, even
/// when the balance would not have covered the pay either.
async fn a_pay_or_charge_to_an_unknown_account_writes_nothing(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let (ann, _bob) = two(&app, "5").await;
    let nobody = tally::domain::new_id();
    for amount in ["1.00", "-1.00", "9.00"] {
        for key in [None, Some(format!("key-{amount}"))] {
            let mut request = app
                .http
                .post(app.url("/v1/payments"))
                .bearer_auth(&ann.token)
                .form(&[
                    ("user_id", nobody.as_str()),
                    ("amount", amount),
                    ("note", "x"),
                ]);
            if let Some(key) = &key {
                request = request.header("Idempotency-Key", key.as_str());
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 400, "{amount} {key:?}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "invalid_target", "{body}");
            assert!(
                body["error"]["message"].as_str().unwrap().contains(&nobody),
                "{body}"
            );
        }
    }
    let listed = app.get("/payments", &ann.token).await;
    assert_eq!(listed.ok().as_array().unwrap().len(), 0);
    assert_eq!(balance_cents(app.store.as_ref(), &ann.id).await, 500);
    audit_ok(app.store.as_ref()).await;
}

async fn bad_inputs_are_refused_with_their_code_and_write_nothing(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person_with(
        store,
        "ann",
        PersonSpec {
            email: Some("ann@example.com"),
            phone: Some("+12125550187"),
            verified: true,
            balance: Some("10"),
            ..Default::default()
        },
    )
    .await;
    let bob = person(store, "bob", "0").await;
    let base = json!({"user_id": bob.id, "amount": "1.00", "note": "x"});
    let with = |changes: Value| {
        let mut body = base.clone();
        for (k, v) in changes.as_object().unwrap() {
            if v.is_null() {
                body.as_object_mut().unwrap().remove(k);
            } else {
                body[k] = v.clone();
            }
        }
        body
    };
    let long_note = "x".repeat(501);
    let cases: Vec<(Value, u16, &str)> = vec![
        (with(json!({"amount": null})), 400, "missing_parameter"),
        (with(json!({"amount": ""})), 400, "invalid_amount"),
        (with(json!({"amount": "0"})), 400, "invalid_amount"),
        (with(json!({"amount": 0})), 400, "invalid_amount"),
        (with(json!({"amount": "0.00"})), 400, "invalid_amount"),
        (with(json!({"amount": "1.001"})), 400, "invalid_amount"),
        (with(json!({"amount": "abc"})), 400, "invalid_amount"),
        (with(json!({"amount": "1e2"})), 400, "invalid_amount"),
        (with(json!({"amount": "1,00"})), 400, "invalid_amount"),
        (with(json!({"amount": "5000.01"})), 400, "invalid_amount"),
        (with(json!({"amount": "-5000.01"})), 400, "invalid_amount"),
        (with(json!({"amount": true})), 400, "invalid_amount"),
        (with(json!({"amount": [1]})), 400, "invalid_amount"),
        (
            with(json!({"amount": "5000.00"})),
            400,
            "insufficient_funds",
        ),
        (with(json!({"note": null})), 400, "missing_parameter"),
        (with(json!({"note": ""})), 400, "invalid_note"),
        (with(json!({"note": "   "})), 400, "invalid_note"),
        (with(json!({"note": long_note})), 400, "invalid_note"),
        // The wrong JSON type is a malformed request, not a bad value.
        (with(json!({"note": {"a": 1}})), 400, "invalid_request"),
        (with(json!({"note": 5})), 400, "invalid_request"),
        (with(json!({"user_id": 5})), 400, "invalid_request"),
        (with(json!({"amount": ".5"})), 400, "invalid_amount"),
        (with(json!({"amount": "+5"})), 400, "invalid_amount"),
        (
            with(json!({"amount": "-100000000000000000000000"})),
            400,
            "invalid_amount",
        ),
        (with(json!({"user_id": null})), 400, "invalid_target"),
        (
            with(json!({"email": "x@example.com"})),
            400,
            "invalid_target",
        ),
        (with(json!({"phone": "2125550100"})), 400, "invalid_target"),
        (with(json!({"user_id": "nobody"})), 400, "invalid_target"),
        (with(json!({"user_id": ann.id})), 400, "invalid_target"),
        (
            with(json!({"user_id": null, "email": "not-an-email"})),
            400,
            "invalid_target",
        ),
        (
            with(json!({"user_id": null, "email": "ANN@example.com"})),
            400,
            "invalid_target",
        ),
        (
            with(json!({"user_id": null, "phone": "123"})),
            400,
            "invalid_target",
        ),
        (
            with(json!({"user_id": null, "phone": "+44 20 7946 0958"})),
            400,
            "invalid_target",
        ),
        (
            with(json!({"user_id": null, "phone": "212.555.0187"})),
            400,
            "invalid_target",
        ),
        (
            with(json!({"audience": "everyone"})),
            400,
            "invalid_audience",
        ),
        (with(json!({"audience": 5})), 400, "invalid_request"),
        (
            with(json!({"user_id": null, "phone": "212-911-0187"})),
            400,
            "invalid_target",
        ),
        (
            with(json!({"user_id": null, "phone": "2125550187 ext 5"})),
            400,
            "invalid_target",
        ),
    ];
    for (body, status, code) in &cases {
        let answer = app.post("/payments", &ann.token, body.clone()).await;
        assert_eq!(
            (answer.status, answer.code()),
            (*status, *code),
            "{body}: {}",
            answer.body
        );
    }
    // Malformed bodies and headers.
    let response = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&ann.token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let response = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&ann.token)
        .header("idempotency-key", "k".repeat(300))
        .json(&base)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // The token is judged before the key: no token 401, no make_payments 403.
    let reader = token(app.store.as_ref(), &ann.id, "access_profile").await;
    for (bearer, status) in [(None, 401), (Some(reader.as_str()), 403)] {
        let mut request = app
            .http
            .post(app.url("/v1/payments"))
            .header("idempotency-key", "k".repeat(300))
            .json(&base);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        assert_eq!(request.send().await.unwrap().status(), status);
    }
    // A key given twice is ambiguous in JSON too (serde would keep the last).
    let response = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&ann.token)
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"user_id":"{}","note":"x","amount":1,"amount":2}}"#,
            bob.id
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("invalid_request"));
    // Exponents are exact too: a digit past the cents is refused, not rounded.
    for amount in [
        "1.0000000000000000000000000000009e0",
        "-5.000000000000000000000000000000001e3",
    ] {
        let response = app
            .http
            .post(app.url("/v1/payments"))
            .bearer_auth(&ann.token)
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"user_id":"{}","note":"x","amount":{amount}}}"#,
                bob.id
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{amount}");
        assert!(response.text().await.unwrap().contains("invalid_amount"));
    }

    // Reads and updates.
    for (path, code) in [
        ("/payments?limit=0", "invalid_request"),
        ("/payments?limit=1&limit=5", "invalid_request"),
        ("/payments?limit=-1", "invalid_request"),
        ("/payments?limit=ten", "invalid_request"),
        ("/payments?action=refund", "invalid_request"),
        ("/payments?status=done", "invalid_request"),
        ("/payments?status=settled,done", "invalid_request"),
        ("/payments?before=yesterday", "invalid_request"),
        ("/payments?after=2026-13-01", "invalid_request"),
        ("/payments?before_id=abc", "invalid_request"),
        ("/users?query=a&limit=x", "invalid_request"),
        ("/users?query=a&offset=-1", "invalid_request"),
        ("/users?query=", "missing_parameter"),
    ] {
        let answer = app.get(path, &ann.token).await;
        assert_eq!(
            (answer.status, answer.code()),
            (400, code),
            "{path}: {}",
            answer.body
        );
    }
    let friends = app
        .get(&format!("/users/{}/friends?limit=0", ann.id), &ann.token)
        .await;
    friends.error(400, "invalid_request");
    app.put("/payments/nothing", &ann.token, json!({}))
        .await
        .error(400, "missing_parameter");
    app.put("/payments/nothing", &ann.token, json!({"action": "steal"}))
        .await
        .error(400, "invalid_request");
    app.put("/payments/nothing", &ann.token, json!({"action": "cancel"}))
        .await
        .error(404, "not_found");

    // Nothing was written.
    assert_eq!(balance_cents(store, &ann.id).await, 1000);
    assert_eq!(
        app.get("/payments", &ann.token)
            .await
            .ok()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        app.get("/payments", &bob.token)
            .await
            .ok()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    audit_ok(store).await;
}

async fn payments_are_listed_newest_first_and_filtered(backend: Backend) {
    let Some(app) =
        TestApp::spawn_with(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await
    else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "10").await;
    let carl = person(store, "carl", "10").await;
    let first = id(&app.pay(&ann, &bob, "1").await.ok()["payment"]);
    let second = id(&app.pay(&bob, &ann, "-2").await.ok()["payment"]);
    let third = id(&app.pay(&carl, &ann, "3").await.ok()["payment"]);
    let _unrelated = app.pay(&carl, &bob, "1").await;
    app.put(
        &format!("/payments/{first}"),
        &ann.token,
        json!({"action": "cancel"}),
    )
    .await
    .ok();

    let ids = |answer: &crate::fixtures::Answer| -> Vec<String> {
        answer.ok().as_array().unwrap().iter().map(id).collect()
    };
    let all = app.get("/payments", &ann.token).await;
    assert_eq!(ids(&all), [third.clone(), second.clone(), first.clone()]);
    assert!(all.body["pagination"]["next"].is_null());
    assert_eq!(
        ids(&app.get("/payments?action=charge", &ann.token).await),
        std::slice::from_ref(&second)
    );
    assert_eq!(
        ids(&app.get("/payments?status=cancelled", &ann.token).await),
        std::slice::from_ref(&first)
    );
    assert_eq!(
        ids(&app
            .get("/payments?status=pending,cancelled", &ann.token)
            .await)
        .len(),
        3
    );
    assert_eq!(
        ids(&app
            .get(
                &format!("/payments?actor={},{}", carl.id, bob.id),
                &ann.token
            )
            .await),
        [third.clone(), second.clone()]
    );
    assert_eq!(
        ids(&app.get("/payments?before=2000-01-01", &ann.token).await).len(),
        0
    );
    assert_eq!(
        ids(&app
            .get("/payments?after=2000-01-01T00:00:00%2B00:00", &ann.token)
            .await)
        .len(),
        3
    );
    assert_eq!(
        ids(&app
            .get("/payments?after=2999-01-01T00:00:00.5", &ann.token)
            .await)
        .len(),
        0
    );
    // Both bounds are strict on the date_created clients see, to the second:
    // polling with `after` = the newest date seen does not return it again.
    let newest = all.ok().as_array().unwrap()[0].clone();
    let shown = newest["date_created"].as_str().unwrap();
    for bound in ["after", "before"] {
        let listed = ids(&app
            .get(&format!("/payments?{bound}={shown}"), &ann.token)
            .await);
        assert!(
            !listed.contains(&id(&newest)),
            "{bound}={shown}: {listed:?}"
        );
    }
    // The cancelled pay shows its refund; the list never shows refunds as items.
    let listed = all.ok().as_array().unwrap();
    assert_eq!(listed[2]["refund"]["status"], "settled");
    let page = app.get("/payments?limit=1&action=pay", &ann.token).await;
    assert_eq!(ids(&page), [third]);
    let next = page.body["pagination"]["next"].as_str().unwrap();
    assert!(
        next.starts_with(&format!("{}/v1/payments?", app.origin)),
        "{next}"
    );
    assert!(
        next.contains("action=pay") && next.contains("limit=1") && next.contains("before="),
        "{next}"
    );
    assert!(
        !next.contains("access_token") && !next.contains("tly_"),
        "{next}"
    );
    let last = app.get(next, &ann.token).await;
    assert_eq!(ids(&last), [first]);
    assert!(last.body["pagination"]["next"].is_null());
}

async fn paging_through_120_payments_with_one_timestamp_returns_each_once(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "0").await;
    let at = tally::domain::now_micros() - 60_000_000;
    let mut made = HashSet::new();
    for i in 0..120 {
        let payment = Payment {
            id: tally::domain::new_id(),
            kind: PaymentKind::Payment,
            actor_id: Some(if i % 2 == 0 {
                ann.id.clone()
            } else {
                bob.id.clone()
            }),
            target_type: TargetType::User,
            target_user_id: Some(if i % 2 == 0 {
                bob.id.clone()
            } else {
                ann.id.clone()
            }),
            target_email: None,
            target_phone: None,
            action: PaymentAction::Charge,
            amount_cents: 100 + i,
            note: format!("charge {i}"),
            audience: Audience::Private,
            status: PaymentStatus::Pending,
            medium: Medium::Api,
            date_created: at,
            date_completed: None,
            reached_account_at: None,
            refund_payment_id: None,
        };
        made.insert(payment.id.clone());
        store
            .insert_payment(&PaymentInsert {
                payment,
                hold: None,
                idempotency: None,
                check_target: false,
                settle_at_once: None,
                origin: None,
            })
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut url = "/payments?limit=7".to_owned();
    for _ in 0..30 {
        let answer = app.get(&url, &ann.token).await;
        let page = answer.ok().as_array().unwrap();
        assert!(page.len() <= 7);
        seen.extend(page.iter().map(id));
        match answer.body["pagination"]["next"].as_str() {
            Some(next) => url = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen.len(), 120, "every payment once");
    assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), made);
    // Larger limits, however large, are clamped to 50.
    for limit in ["500", "99999999999999999999999"] {
        let answer = app
            .get(&format!("/payments?limit={limit}"), &ann.token)
            .await;
        assert_eq!(answer.ok().as_array().unwrap().len(), 50);
        assert!(answer.body["pagination"]["next"]
            .as_str()
            .unwrap()
            .contains("limit=50"));
    }
}

async fn a_retried_post_with_the_same_key_replays_and_debits_once(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "10").await;
    let send = |key: &'static str, amount: &'static str, token: String| {
        let http = app.http.clone();
        let url = app.url("/v1/payments");
        let bob_id = bob.id.clone();
        async move {
            let response = http
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .form(&[
                    ("user_id", bob_id.as_str()),
                    ("amount", amount),
                    ("note", "rent"),
                ])
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, first) = send("key-1", "4", ann.token.clone()).await;
    assert_eq!(status, 200, "{first}");
    // Retries, even concurrent ones, get the same payment and debit nothing more.
    let retries =
        futures_util::future::join_all((0..5).map(|_| send("key-1", "4", ann.token.clone()))).await;
    for (status, body) in retries {
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["data"]["payment"]["id"],
            first["data"]["payment"]["id"]
        );
        assert_eq!(body["data"]["payment"]["status"], "pending");
        assert_eq!(body["data"]["balance"], first["data"]["balance"]);
    }
    assert_eq!(balance_cents(store, &ann.id).await, 600);
    let (status, conflict) = send("key-1", "5", ann.token.clone()).await;
    assert_eq!(
        (status, conflict["error"]["code"].as_str()),
        (409, Some("idempotency_conflict"))
    );
    // Keys are per owner: bob may use the same key for his own payment.
    let bob_pays_ann = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&bob.token)
        .header("Idempotency-Key", "key-1")
        .form(&[
            ("user_id", ann.id.as_str()),
            ("amount", "-1"),
            ("note", "x"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(bob_pays_ann.status(), 200);
    // A failed request does not use up its key.
    let (status, _) = send("key-2", "100", ann.token.clone()).await;
    assert_eq!(status, 400);
    tally::ledger::deposit(store, &ann.id, tally::domain::Amount::parse("100").unwrap())
        .await
        .unwrap();
    let (status, _) = send("key-2", "100", ann.token.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(
        app.get("/payments?action=pay", &ann.token)
            .await
            .ok()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    audit_ok(store).await;
}

/// `PUT /payments/:id` with an `Idempotency-Key`: a retry of an update that
/// committed (its answer lost) gets the first answer, not `invalid_state`.
async fn a_retried_put_with_the_same_key_replays_its_first_answer(backend: Backend) {
    let Some(app) =
        TestApp::spawn_with(backend, |s| s.settlement_delay = Duration::from_secs(3600)).await
    else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "10").await;
    tally::ledger::deposit(store, &bob.id, tally::domain::Amount::parse("5").unwrap())
        .await
        .unwrap();
    let put = |path: String, token: String, key: &'static str, action: &'static str| {
        let http = app.http.clone();
        let url = app.url(&format!("/v1{path}"));
        async move {
            let response = http
                .put(url)
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .form(&[("action", action)])
                .send()
                .await
                .unwrap();
            let replayed = response.headers().contains_key("idempotent-replayed");
            let status = response.status().as_u16();
            (status, replayed, response.json::<Value>().await.unwrap())
        }
    };
    let charge = app.pay(&ann, &bob, "-3").await.ok()["payment"].clone();
    let charge_path = format!("/payments/{}", id(&charge));
    // A refused update does not use up its key.
    let (status, _, refused) = put(charge_path.clone(), ann.token.clone(), "k1", "approve").await;
    assert_eq!(status, 403, "{refused}");
    let (status, replayed, first) =
        put(charge_path.clone(), bob.token.clone(), "k1", "approve").await;
    assert_eq!((status, replayed), (200, false), "{first}");
    assert_eq!(first["data"]["status"], "settled");
    assert_eq!(first["data"]["id"], charge["id"]);
    let retries = futures_util::future::join_all(
        (0..4).map(|_| put(charge_path.clone(), bob.token.clone(), "k1", "approve")),
    )
    .await;
    for (status, replayed, body) in retries {
        assert_eq!((status, replayed), (200, true), "{body}");
        assert_eq!(body["data"], first["data"]);
    }
    assert_eq!(balance_cents(store, &bob.id).await, 200);
    // The same key with other parameters, or for a new payment, is a conflict;
    // without a key the retry is what it always was.
    let (status, _, body) = put(charge_path.clone(), bob.token.clone(), "k1", "deny").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("idempotency_conflict"))
    );
    let reused = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&bob.token)
        .header("Idempotency-Key", "k1")
        .form(&[("user_id", ann.id.as_str()), ("amount", "1"), ("note", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(reused.status(), 409);
    app.put(&charge_path, &bob.token, json!({"action": "approve"}))
        .await
        .error(409, "invalid_state");
    // A cancelled pay replays with its refund; keys are per owner.
    let pay = app.pay(&ann, &bob, "2.50").await.ok()["payment"].clone();
    let pay_path = format!("/payments/{}", id(&pay));
    let (status, _, cancelled) = put(pay_path.clone(), ann.token.clone(), "k1", "cancel").await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["data"]["refund"]["status"], "settled");
    let (status, replayed, again) = put(pay_path.clone(), ann.token.clone(), "k1", "cancel").await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["data"], cancelled["data"]);
    assert_eq!(balance_cents(store, &ann.id).await, 1300);
    audit_ok(store).await;
}

/// The Venmo documentation: `PUT /payments/:id` answers with `data` being the
/// updated payment, so an old client reads `data.status` (SPEC §4).
async fn a_venmo_era_client_reads_the_status_of_an_approved_charge_from_data(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let (ann, bob) = two(&app, "0").await;
    tally::ledger::deposit(store, &bob.id, tally::domain::Amount::parse("5").unwrap())
        .await
        .unwrap();
    let charge = app.pay(&ann, &bob, "-2").await.ok()["payment"].clone();
    // As the old SDKs sent it: form fields, the token among them.
    let response = app
        .http
        .put(app.url(&format!("/v1/payments/{}", id(&charge))))
        .form(&[("access_token", bob.token.as_str()), ("action", "approve")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["status"], "settled", "{body}");
    assert_eq!(body["data"]["id"], charge["id"]);
    assert_eq!(keys(&body["data"]), PAYMENT_KEYS, "{body}");
    assert!(body["data"]["date_completed"].is_string());
    assert_eq!(balance_cents(store, &bob.id).await, 300);
    audit_ok(store).await;
}
