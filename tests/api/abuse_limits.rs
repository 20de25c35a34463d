//! What keeps one client from costing everyone (SPEC §6, §8, §9), over HTTP
//! and through the `tally` binary: requests with unusable tokens limited per
//! client IP before the store is asked, caches cleared only when a revocation
//! changed something, introspection only of the caller's own tokens unless
//! an operator allows more, and verification sends counted per mailbox and
//! per client IP.

use crate::browser::Browser;
use crate::helpers::{on_both_backends, tally, Backend, TestApp, TestDb};
use crate::oauth::{code_tokens, introspect, spawn};
use crate::oauth_fixture::{fixture, Fixture, PASSWORD};
use crate::pages::{sign_up, submit, unique, STRONG};
use crate::store_conformance::tamper;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::{Duration, Instant};

on_both_backends!(
    sixty_unusable_tokens_a_minute_from_one_address_are_answered_then_429,
    past_the_allowance_an_unusable_token_is_refused_before_the_store_is_asked,
    a_revocation_that_revokes_nothing_leaves_the_revocation_epoch_alone,
    a_revocation_stops_its_token_at_once_and_one_of_nothing_changes_nothing,
    introspection_answers_only_about_the_callers_own_tokens_unless_it_may_introspect_any,
    admin_app_set_refuses_unknown_apps_and_a_missing_setting,
    verification_sends_are_counted_per_mailbox_whatever_its_tag_or_letter_case,
    one_client_ip_causes_at_most_twenty_verification_sends_an_hour,
);

/// Another loopback address: a second client IP on this machine.
const ELSEWHERE: &str = "127.0.0.2";

async fn me(client: &reqwest::Client, app: &TestApp, token: &str) -> reqwest::Response {
    client
        .get(app.url("/v1/me"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

fn random_token() -> String {
    format!("tly_at_{}", tally::oauth::credentials::random_hex(32))
}

/// A live access token of `f`'s user for `f`'s app, and one revoked.
async fn live_and_revoked(app: &TestApp, f: &Fixture) -> (String, String) {
    let live = code_tokens(app, f).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let dead = code_tokens(app, f).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoked = app
        .http
        .delete(app.url("/v1/oauth/access_token"))
        .bearer_auth(&dead)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    (live, dead)
}

async fn assert_rate_limited(answer: reqwest::Response, case: &str) {
    assert_eq!(answer.status(), 429, "{case}");
    let retry_after: u64 = answer.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1, "{case}: {retry_after}");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited", "{case}: {body}");
}

async fn sixty_unusable_tokens_a_minute_from_one_address_are_answered_then_429(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (live, dead) = live_and_revoked(&app, &f).await;
    // A live token never uses up the allowance.
    for _ in 0..100 {
        assert_eq!(me(&app.http, &app, &live).await.status(), 200);
    }
    // Sixty unusable tokens (a revoked one, a malformed one, random ones)
    // are each told so.
    let start = Instant::now();
    for n in 0..60 {
        let token = match n {
            0 => dead.clone(),
            1 => "garbage".to_owned(),
            _ => random_token(),
        };
        assert_eq!(me(&app.http, &app, &token).await.status(), 401, "token {n}");
    }
    // Then 429, at once unless this machine took seconds for the sixty: the
    // allowance comes back at one a second.
    let mut extra = 0;
    let refused = loop {
        let answer = me(&app.http, &app, &random_token()).await;
        if answer.status() != 401 {
            break answer;
        }
        extra += 1;
        assert!(
            extra <= start.elapsed().as_secs() + 1,
            "{extra} more unusable tokens answered after the sixty"
        );
    };
    assert_rate_limited(refused, "the 61st").await;
    // The live token still works from the same address, and another
    // address's unusable token is still looked up.
    assert_eq!(me(&app.http, &app, &live).await.status(), 200);
    let elsewhere = reqwest::Client::builder()
        .local_address(ELSEWHERE.parse::<IpAddr>().unwrap())
        .build()
        .unwrap();
    assert_eq!(me(&elsewhere, &app, &random_token()).await.status(), 401);
}

async fn past_the_allowance_an_unusable_token_is_refused_before_the_store_is_asked(
    backend: Backend,
) {
    // Three a minute: one comes back every 20 seconds, longer than this test.
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        settings.bad_token_rate_limit = std::num::NonZeroU32::new(3).unwrap();
    })
    .await
    else {
        return;
    };
    let f = fixture(&app).await;
    let (live, dead) = live_and_revoked(&app, &f).await;
    assert_eq!(me(&app.http, &app, &live).await.status(), 200);
    for token in [dead.clone(), random_token(), "garbage".to_owned()] {
        assert_eq!(me(&app.http, &app, &token).await.status(), 401, "{token}");
    }
    // With the tokens' table gone, a look-up could not answer 429.
    let elsewhere = reqwest::Client::builder()
        .local_address(ELSEWHERE.parse::<IpAddr>().unwrap())
        .build()
        .unwrap();
    let away = "ALTER TABLE oauth_tokens RENAME TO oauth_tokens_away";
    tamper(&app.db, away).await;
    let mut refused = Vec::new();
    for token in [random_token(), dead.clone(), "garbage".to_owned()] {
        refused.push((token.clone(), me(&app.http, &app, &token).await));
    }
    let looked_up = me(&elsewhere, &app, &random_token()).await.status();
    let back = "ALTER TABLE oauth_tokens_away RENAME TO oauth_tokens";
    tamper(&app.db, back).await;
    assert!(
        looked_up.is_server_error(),
        "a look-up now fails: {looked_up}"
    );
    for (token, answer) in refused {
        assert_rate_limited(answer, &token).await;
    }
    // The live token still works from the same address; another address
    // is not held back.
    assert_eq!(me(&app.http, &app, &live).await.status(), 200);
    assert_eq!(me(&elsewhere, &app, &random_token()).await.status(), 401);
    // A token that stopped working is held back like any other.
    let answer = app
        .http
        .delete(app.url("/v1/oauth/access_token"))
        .bearer_auth(&live)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 204);
    assert_rate_limited(me(&app.http, &app, &live).await, "revoked since").await;
}

/// A user and an app of theirs in a bare store.
async fn user_and_app(store: &dyn tally::store::Store, name: &str) -> (String, String) {
    let hasher = tally::auth::password::PasswordHasher::new(1);
    let user = tally::admin::user_add(
        store,
        &hasher,
        tally::admin::UserAdd {
            username: name.to_owned(),
            password: PASSWORD.to_owned(),
            verified: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let app = tally::admin::app_add(
        store,
        tally::admin::AppAdd {
            owner: name.to_owned(),
            name: format!("{name}'s app"),
            redirect_url: "https://app.example.com/cb".to_owned(),
            description: None,
            site_url: None,
        },
    )
    .await
    .unwrap();
    (user.id, app.client_id)
}

async fn a_revocation_that_revokes_nothing_leaves_the_revocation_epoch_alone(backend: Backend) {
    use tally::oauth::tokens::{issue_access_token, issue_personal_access_token, CLIENT_SIDE_TTL};
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store().await;
    let store = store.as_ref();
    let (ann, ann_app) = user_and_app(store, "ann").await;
    let (_bob, bob_app) = user_and_app(store, "bob").await;
    let scopes = tally::domain::ScopeSet::parse("access_profile").unwrap();
    let token = issue_access_token(
        store,
        &ann,
        Some(&ann_app),
        &scopes,
        "token",
        CLIENT_SIDE_TTL,
    )
    .await
    .unwrap();
    let now = tally::domain::now_micros;
    let unknown = tally::oauth::credentials::digest(&random_token());

    let before = store.revocation_epoch();
    let nothing = [
        (
            "an unknown token",
            store.revoke_token(&unknown, Some(&ann_app), now()).await,
        ),
        (
            "another app's token",
            store
                .revoke_token(&token.digest, Some(&bob_app), now())
                .await,
        ),
        (
            "an unknown personal token",
            store
                .revoke_personal_token(&ann, "no-such-grant", now())
                .await,
        ),
        (
            "an app the user never authorized",
            store.revoke_app_for_user(&ann, &bob_app, now()).await,
        ),
    ];
    for (case, revoked) in nothing {
        assert!(!revoked.unwrap(), "{case}");
        assert_eq!(store.revocation_epoch(), before, "{case}");
    }
    store.revoke_grant("no-such-grant", now()).await.unwrap();
    assert_eq!(store.revocation_epoch(), before, "an unknown grant");
    assert!(store
        .set_app_suspended("no-such-app", true)
        .await
        .unwrap()
        .is_none());
    assert_eq!(store.revocation_epoch(), before, "an unknown app");

    // A revocation that revokes something clears what was read before it.
    assert!(store
        .revoke_token(&token.digest, Some(&ann_app), now())
        .await
        .unwrap());
    let after = store.revocation_epoch();
    assert_ne!(after, before);
    // Revoking it again revokes nothing.
    assert!(!store
        .revoke_token(&token.digest, None, now())
        .await
        .unwrap());
    assert_eq!(store.revocation_epoch(), after, "an already revoked token");

    // A personal token: its revocation counts once.
    let personal = issue_personal_access_token(store, &ann, &scopes)
        .await
        .unwrap();
    let grant = store.personal_tokens(&ann, now()).await.unwrap()[0]
        .grant_id
        .clone();
    assert!(store
        .revoke_personal_token(&ann, &grant, now())
        .await
        .unwrap());
    let after = store.revocation_epoch();
    assert_ne!(after, before);
    store.revoke_grant(&grant, now()).await.unwrap();
    assert!(!store
        .revoke_token(&personal.digest, None, now())
        .await
        .unwrap());
    assert_eq!(store.revocation_epoch(), after, "an already revoked grant");
}

async fn a_revocation_stops_its_token_at_once_and_one_of_nothing_changes_nothing(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let tokens = code_tokens(&app, &f).await;
    let access = tokens["access_token"].as_str().unwrap();
    assert_eq!(me(&app.http, &app, access).await.status(), 200);
    for token in [random_token(), "tly_rt_unknown".to_owned()] {
        let answer = app
            .http
            .post(app.url("/v1/oauth/revoke"))
            .basic_auth(&f.client_id, Some(&f.client_secret))
            .form(&[("token", token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.json::<Value>().await.unwrap(), json!({}));
        assert_eq!(me(&app.http, &app, access).await.status(), 200);
    }
    let answer = app
        .http
        .post(app.url("/v1/oauth/revoke"))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("token", access)])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(me(&app.http, &app, access).await.status(), 401);
    assert_eq!(introspect(&app, &f, access).await, json!({"active": false}));
}

/// `admin app set` through the real binary; its one JSON object.
fn app_set(app: &TestApp, client_id: &str, flag: &str) -> Value {
    let run = tally(
        &app.db.url_string(),
        &["admin", "app", "set", client_id, flag, "--json"],
    );
    assert!(run.status.success(), "{}", run.stderr);
    run.json()
}

/// Introspects until the answer's `active` is `active` (a change made by
/// another process is seen within a second, SPEC §6); the last answer.
async fn introspect_until(app: &TestApp, caller: &Fixture, token: &str, active: bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let answer = introspect(app, caller, token).await;
        if answer["active"] == active || Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn introspection_answers_only_about_the_callers_own_tokens_unless_it_may_introspect_any(
    backend: Backend,
) {
    let Some((app, a)) = spawn(backend).await else {
        return;
    };
    let b = fixture(&app).await;
    let tokens = code_tokens(&app, &a).await;
    let access = tokens["access_token"].as_str().unwrap();
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let scopes = tally::domain::ScopeSet::parse("access_profile").unwrap();
    let personal =
        tally::oauth::tokens::issue_personal_access_token(app.store.as_ref(), &a.user_id, &scopes)
            .await
            .unwrap();
    let personal = secrecy::ExposeSecret::expose_secret(&personal.secret).to_owned();
    let personal = personal.as_str();

    assert_eq!(introspect(&app, &a, access).await["active"], true);
    assert_eq!(introspect(&app, &a, refresh).await["active"], true);
    for token in [access, refresh, personal] {
        assert_eq!(introspect(&app, &b, token).await, json!({"active": false}));
    }
    assert_eq!(
        introspect(&app, &a, personal).await,
        json!({"active": false}),
        "a personal token is no app's"
    );

    assert_eq!(
        app_set(&app, &b.client_id, "--introspect-any"),
        json!({"client_id": b.client_id, "introspect_any": true, "id_token_alg": "RS256"})
    );
    let info = introspect_until(&app, &b, access, true).await;
    assert_eq!(info["active"], true, "{info}");
    assert_eq!(info["client_id"], a.client_id);
    assert_eq!(info["username"], a.username);
    assert_eq!(info["sub"], a.user_id);
    assert_eq!(info["scope"], "access_profile access_balance");
    assert_eq!(info["token_type"], "bearer");
    // Each answer B had before may be remembered for a moment: wait for each.
    assert_eq!(
        introspect_until(&app, &b, refresh, true).await["token_type"],
        "refresh_token"
    );
    let info = introspect_until(&app, &b, personal, true).await;
    assert_eq!(info["active"], true, "{info}");
    assert_eq!(info["client_id"], Value::Null);
    assert_eq!(
        introspect(&app, &a, personal).await,
        json!({"active": false}),
        "A was not made a resource server"
    );
    assert_eq!(introspect(&app, &a, access).await["active"], true);

    assert_eq!(
        app_set(&app, &b.client_id, "--no-introspect-any"),
        json!({"client_id": b.client_id, "introspect_any": false, "id_token_alg": "RS256"})
    );
    assert_eq!(
        introspect_until(&app, &b, access, false).await,
        json!({"active": false})
    );
    assert_eq!(introspect(&app, &a, access).await["active"], true);
}

async fn admin_app_set_refuses_unknown_apps_and_a_missing_setting(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let url = app.db.url_string();
    let text = tally(
        &url,
        &["admin", "app", "set", &f.client_id, "--introspect-any"],
    );
    assert!(text.status.success(), "{}", text.stderr);
    assert_eq!(
        text.stdout.trim(),
        format!("{}: introspect_any=true id_token_alg=RS256", f.client_id)
    );
    let unknown = tally(
        &url,
        &[
            "admin",
            "app",
            "set",
            "no-such-app",
            "--introspect-any",
            "--json",
        ],
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(unknown.json()["error"]["code"], "not_found");
    for args in [
        vec!["admin", "app", "set", f.client_id.as_str(), "--json"],
        vec![
            "admin",
            "app",
            "set",
            f.client_id.as_str(),
            "--introspect-any",
            "--no-introspect-any",
            "--json",
        ],
    ] {
        let refused = tally(&url, &args);
        assert_eq!(refused.status.code(), Some(2), "{args:?}");
        assert_eq!(refused.json()["error"]["code"], "invalid_arguments");
    }
}

/// Changes the signed-in account's e-mail address on the account page; the
/// page's message afterwards.
async fn change_email(browser: &Browser, email: &str) -> String {
    let page = browser.get("/account").await;
    let answer = submit(
        browser,
        &page,
        "/account/contact",
        &[("email", email), ("phone", ""), ("password", STRONG)],
    )
    .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    browser.get("/account").await.text()
}

fn mails_to(sink: &crate::mail_sink::MailSink, address: &str) -> usize {
    sink.mails()
        .iter()
        .filter(|m| m.rcpt_to.iter().any(|r| r.contains(address)))
        .count()
}

async fn verification_sends_are_counted_per_mailbox_whatever_its_tag_or_letter_case(
    backend: Backend,
) {
    let Some((app, sink)) = crate::pages::spawn(backend).await else {
        return;
    };
    let victim = unique("victim");
    let first = format!("{victim}+1@example.com");
    let browser = Browser::new(&app.origin);
    let answer = sign_up(&browser, &unique("ann"), &[("email", &first)]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(mails_to(&sink, &first), 1);

    // The same mailbox by another tag, in other letters, and bare: held.
    let others = [
        format!("{victim}+2@example.com"),
        format!("{}+3@EXAMPLE.com", victim.to_uppercase()),
        format!("{victim}@example.com"),
    ];
    for other in &others {
        let text = change_email(&browser, other).await;
        assert!(
            text.contains("none was sent now: you can ask for another at") && text.contains(" UTC"),
            "{other}: {text}"
        );
    }
    for mailbox in std::iter::once(&first).chain(&others) {
        let sent = mails_to(&sink, &mailbox.to_lowercase());
        let expected = usize::from(mailbox == &first);
        assert_eq!(sent, expected, "{mailbox}");
    }
    // Another mailbox is not held back.
    let text = change_email(&browser, &format!("{victim}.b+1@example.com")).await;
    assert!(text.contains("Follow the link"), "{text}");
}

async fn one_client_ip_causes_at_most_twenty_verification_sends_an_hour(backend: Backend) {
    let Some((app, sink)) = crate::pages::spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let username = unique("ann");
    let answer = sign_up(&browser, &username, &[]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let address = |n: usize| format!("{username}.{n}@example.com");
    // The sign-up's link was the first send; nineteen more go out.
    for n in 2..=20 {
        let text = change_email(&browser, &address(n)).await;
        assert!(text.contains("Follow the link"), "send {n}: {text}");
        assert_eq!(mails_to(&sink, &address(n)), 1, "send {n}");
    }
    // The twenty-first, to yet another address, waits, and the page says
    // until when.
    let text = change_email(&browser, &address(21)).await;
    assert!(
        text.contains("none was sent now: you can ask for another at") && text.contains(" UTC"),
        "{text}"
    );
    assert_eq!(mails_to(&sink, &address(21)), 0);
    assert_eq!(sink.mails().len(), 20);

    // The same account from another address asks for the link again: sent.
    let elsewhere = Browser::from(&app.origin, Some(ELSEWHERE.parse().unwrap()));
    let page = elsewhere.get("/signin").await;
    let signed = elsewhere.sign_in(&page, &username, STRONG).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    let page = elsewhere.get("/account").await;
    let answer = submit(&elsewhere, &page, "/account/verification", &[]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(mails_to(&sink, &address(21)), 1);
}
