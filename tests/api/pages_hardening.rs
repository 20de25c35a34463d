//! The pages' hardening rules (SPEC §2, §8, §9) over HTTP: secrets shown once
//! even to a replayed cookie, verification sends limited per address, Site
//! URLs that are http(s), the byte limit and the control-character rule on
//! every form field, sign-in through verified addresses only, and retention.

use crate::browser::{set, Browser, Page};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::mail_sink::MailSink;
use crate::oauth_fixture::{fixture, PASSWORD};
use crate::pages::{
    register_app, secret_on, sign_up, signed_in, spawn, submit, unique, verify, STRONG,
};
use std::collections::BTreeMap;
use tally::config::DatabaseUrl;
use tally::domain::now_micros;

on_both_backends!(
    secrets_are_shown_once_even_to_a_replayed_cookie,
    verification_links_are_sent_once_a_minute_per_address_whoever_asks,
    the_site_url_is_an_http_url_and_a_bare_host_reads_as_https,
    every_form_field_over_the_byte_limit_is_a_form_error,
    control_characters_in_any_form_field_or_query_are_refused_never_a_500,
    sign_in_by_email_or_phone_needs_a_verified_address,
    retention_purges_what_is_no_longer_needed,
    a_reveal_is_taken_once_by_racing_showings_and_only_by_its_user,
);

const DAY_MICROS: i64 = 86_400_000_000;

/// Rows in a table of the test's database.
async fn count(app: &TestApp, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    match &app.db.url {
        DatabaseUrl::Sqlite(url) => {
            let pool = sqlx::SqlitePool::connect(url).await.unwrap();
            let n = sqlx::query_scalar(&sql).fetch_one(&pool).await.unwrap();
            pool.close().await;
            n
        }
        DatabaseUrl::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            let n = sqlx::query_scalar(&sql).fetch_one(&pool).await.unwrap();
            pool.close().await;
            n
        }
    }
}

/// A GET with a copied `Cookie` header, as someone replaying it would send.
async fn replay(app: &TestApp, cookie: &str, path: &str) -> Page {
    let response = app
        .http
        .get(app.url(path))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

async fn secrets_are_shown_once_even_to_a_replayed_cookie(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;

    // A new app's client secret.
    let page = browser.get("/developer").await;
    let mut fields = page.form("/developer/apps");
    set(&mut fields, "name", "Once");
    set(&mut fields, "redirect_url", "https://once.example.com/cb");
    let answer = browser.post("/developer/apps", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let app_page = answer.location().unwrap();
    let copied = browser.cookie_header();
    let shown = browser.get(&app_page).await;
    let secret = secret_on(&shown, "client-secret").expect("the secret is shown once");
    assert!(secret.starts_with("tly_secret_"), "{secret}");
    let replayed = replay(&app, &copied, &app_page).await;
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    assert!(secret_on(&replayed, "client-secret").is_none());
    assert!(!replayed.body.contains(&secret));
    assert_eq!(count(&app, "secret_reveals").await, 0, "shown means gone");

    // A rotated secret.
    let page = browser.get(&app_page).await;
    let answer = submit(&browser, &page, "/secret", &[]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let copied = browser.cookie_header();
    let rotated = secret_on(&browser.get(&app_page).await, "client-secret")
        .expect("the new secret is shown once");
    assert_ne!(rotated, secret);
    let replayed = replay(&app, &copied, &app_page).await;
    assert!(secret_on(&replayed, "client-secret").is_none());
    assert!(!replayed.body.contains(&rotated));

    // A personal access token.
    let page = browser.get("/developer").await;
    let answer = submit(&browser, &page, "/developer/token", &[]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let copied = browser.cookie_header();
    let token = secret_on(&browser.get("/developer").await, "personal-token")
        .expect("the token is shown once");
    assert!(token.starts_with("tly_at_"), "{token}");
    let replayed = replay(&app, &copied, "/developer").await;
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    assert!(secret_on(&replayed, "personal-token").is_none());
    assert!(!replayed.body.contains(&token));

    // Unshown, a secret waits a few minutes at most, and only sealed.
    let page = browser.get("/developer").await;
    submit(&browser, &page, "/developer/token", &[]).await;
    assert_eq!(count(&app, "secret_reveals").await, 1);
    tally::workers::purge(app.store.as_ref(), now_micros() + 11 * 60_000_000)
        .await
        .unwrap();
    assert_eq!(count(&app, "secret_reveals").await, 0);
    let page = browser.get("/developer").await;
    assert!(secret_on(&page, "personal-token").is_none());
}

fn reveal(id: &str, user_id: &str, sealed: &str, now: i64) -> tally::store::NewReveal {
    tally::store::NewReveal {
        id: id.to_owned(),
        user_id: user_id.to_owned(),
        sealed: sealed.to_owned(),
        created_at: now,
    }
}

fn mails_to(sink: &MailSink, address: &str) -> usize {
    sink.mails()
        .iter()
        .filter(|m| m.rcpt_to.iter().any(|r| r.contains(address)))
        .count()
}

async fn verification_links_are_sent_once_a_minute_per_address_whoever_asks(backend: Backend) {
    let Some((app, sink)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let username = unique("ann");
    let address = format!("{username}@example.com");
    let answer = sign_up(&browser, &username, &[]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(mails_to(&sink, &address), 1);

    let account = browser.get("/account").await;
    let fields = account.form("/account/verification");
    for _ in 0..50 {
        let answer = browser.post("/account/verification", &fields).await;
        assert_eq!(answer.status, 303, "{}", answer.body);
    }
    assert_eq!(mails_to(&sink, &address), 1, "50 quick posts send no more");

    // A day later (the send records purged), fifty at once send exactly one:
    // the store's count holds under the race.
    tally::workers::purge(app.store.as_ref(), now_micros() + 2 * DAY_MICROS)
        .await
        .unwrap();
    let mut posts = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let client = browser.client.clone();
        let url = app.url("/account/verification");
        let origin = app.origin.clone();
        let fields = fields.clone();
        posts.spawn(async move {
            let answer = client
                .post(url)
                .header(reqwest::header::ORIGIN, origin)
                .form(&fields)
                .send()
                .await
                .unwrap();
            answer.status().as_u16()
        });
    }
    while let Some(status) = posts.join_next().await {
        assert_eq!(status.unwrap(), 303);
    }
    assert_eq!(mails_to(&sink, &address), 2, "50 racing posts send one");
    // And one more, alone, to see what the page says.
    let answer = browser.post("/account/verification", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let text = browser.get("/account").await.text();
    assert!(
        text.contains("none was sent now: you can ask for another at") && text.contains(" UTC"),
        "{text}"
    );

    // Someone else asking for the same address is held back too.
    let other = Browser::new(&app.origin);
    let answer = sign_up(&other, &unique("bob"), &[("email", &address)]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(mails_to(&sink, &address), 2);
    let text = other.get("/account").await.text();
    assert!(text.contains("you can ask for another at"), "{text}");

    // Ten a day: the store's count, with time moved on a minute at a time.
    let limits = tally::store::SendLimits {
        min_gap: tally::verification::SEND_GAP.as_micros() as i64,
        window: tally::verification::SEND_WINDOW.as_micros() as i64,
        per_window: tally::verification::SENDS_PER_DAY,
    };
    let x = [tally::store::SendCount {
        key: "email:x@example.com",
        limits,
    }];
    let start = now_micros();
    let minute = 61_000_000;
    for n in 0..10 {
        let at = start + n * minute;
        let sent = app.store.reserve_verification_send(&x, at);
        assert_eq!(sent.await.unwrap(), Ok(()), "send {n}");
        let again = app.store.reserve_verification_send(&x, at + 1);
        assert_eq!(again.await.unwrap(), Err(at + limits.min_gap));
    }
    let eleventh = app
        .store
        .reserve_verification_send(&x, start + 10 * minute)
        .await
        .unwrap();
    assert_eq!(
        eleventh,
        Err(start + DAY_MICROS),
        "the eleventh waits a day"
    );
    let next_day = app
        .store
        .reserve_verification_send(&x, start + DAY_MICROS + 1)
        .await
        .unwrap();
    assert_eq!(next_day, Ok(()));
}

async fn the_site_url_is_an_http_url_and_a_bare_host_reads_as_https(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    for (given, kept) in [
        ("app.example.com", "https://app.example.com"),
        (
            "app.example.com:8443/home",
            "https://app.example.com:8443/home",
        ),
        ("http://app.example.com/", "http://app.example.com/"),
        ("https://app.example.com", "https://app.example.com"),
    ] {
        let page = browser.get("/developer").await;
        let answer = submit(
            &browser,
            &page,
            "/developer/apps",
            &[
                ("name", "Site"),
                ("redirect_url", "https://app.example.com/cb"),
                ("site_url", given),
            ],
        )
        .await;
        assert_eq!(answer.status, 303, "{given}");
        let client_id = answer
            .location()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        let stored = app.store.find_app(&client_id).await.unwrap().unwrap();
        assert_eq!(stored.site_url.as_deref(), Some(kept), "{given}");
    }
    let apps = app.store.apps_of_owner(&f.user_id).await.unwrap().len();
    for bad in [
        "javascript:alert(1)",
        "javascript://app.example.com/%0aalert(1)",
        "JavaScript:alert(1)",
        "ftp://files.example.com",
        "data:text/html,<script>alert(1)</script>",
        "mailto:ann@example.com",
        "https://",
    ] {
        let page = browser.get("/developer").await;
        let answer = submit(
            &browser,
            &page,
            "/developer/apps",
            &[
                ("name", "Site"),
                ("redirect_url", "https://app.example.com/cb"),
                ("site_url", bad),
            ],
        )
        .await;
        assert_eq!(answer.status, 303, "{bad}");
        assert_eq!(answer.location().as_deref(), Some("/developer#new-app"));
        let page = browser.get("/developer").await;
        assert!(page.text().contains("Site URL must be"), "{bad}");
    }
    assert_eq!(
        app.store.apps_of_owner(&f.user_id).await.unwrap().len(),
        apps
    );
}

/// Every page form: (page that shows it, action it posts to, its fields),
/// and whether it is for signed-out visitors.
async fn every_form(browser: &Browser) -> Vec<(String, String, Vec<&'static str>, bool)> {
    let (client_id, _) = register_app(browser, "Fields", "https://fields.example.com/cb").await;
    let app_page = format!("/developer/apps/{client_id}");
    vec![
        (
            "/signup".to_owned(),
            "/signup".to_owned(),
            vec![
                "username",
                "first_name",
                "last_name",
                "email",
                "phone",
                "password",
                "password_confirm",
            ],
            true,
        ),
        (
            "/signin".to_owned(),
            "/signin".to_owned(),
            vec!["username", "password"],
            true,
        ),
        (
            "/account".to_owned(),
            "/account/profile".to_owned(),
            vec!["first_name", "last_name", "about"],
            false,
        ),
        (
            "/account".to_owned(),
            "/account/contact".to_owned(),
            vec!["email", "phone", "password"],
            false,
        ),
        (
            "/account".to_owned(),
            "/account/payments".to_owned(),
            vec!["to", "amount", "note", "audience", "kind"],
            false,
        ),
        (
            "/developer".to_owned(),
            "/developer/apps".to_owned(),
            vec!["name", "description", "redirect_url", "site_url"],
            false,
        ),
        (
            app_page.clone(),
            app_page,
            vec!["name", "description", "redirect_url", "site_url"],
            false,
        ),
    ]
}

/// Posts `value` in `field` of each form and checks the answer is the form
/// again with `message` on it, never an error.
async fn each_field_refuses(app: &TestApp, values: &[&str], message: &str) {
    let f = fixture(app).await;
    let browser = signed_in(app, &f).await;
    let anonymous = Browser::new(&app.origin);
    for (page_path, action, fields, signed_out) in every_form(&browser).await {
        let who = if signed_out { &anonymous } else { &browser };
        for field in fields {
            for value in values {
                let page = who.get(&page_path).await;
                assert_eq!(page.status, 200, "{page_path}: {}", page.body);
                let answer = submit(who, &page, &action, &[(field, value)]).await;
                assert_eq!(
                    answer.status, 303,
                    "{action} {field} {value:?}: {}",
                    answer.body
                );
                let shown = who.get(&answer.location().unwrap()).await;
                assert_eq!(shown.status, 200, "{action} {field}: {}", shown.body);
                assert!(
                    shown.text().contains(message),
                    "{action} {field} {value:?}: no {message:?} in {}",
                    shown.text()
                );
            }
        }
    }
}

async fn every_form_field_over_the_byte_limit_is_a_form_error(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    // 520 characters, but 2,080 bytes: the limit counts bytes.
    let long = "😀".repeat(520);
    each_field_refuses(&app, &[&long], "at most 2048 bytes").await;
    // Every field too long at once still fits the session cookie.
    let anonymous = Browser::new(&app.origin);
    let page = anonymous.get("/signup").await;
    let all: Vec<(&str, &str)> = [
        "username",
        "first_name",
        "last_name",
        "email",
        "phone",
        "password",
        "password_confirm",
    ]
    .iter()
    .map(|field| (*field, long.as_str()))
    .collect();
    let answer = submit(&anonymous, &page, "/signup", &all).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/signup"),
        "{}",
        answer.body
    );
    let page = anonymous.get("/signup").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.text().matches("at most 2048 bytes").count(), 7);
    // The verification form's token: the link simply does not work.
    for token in [long.as_str(), "tly_verify_\0"] {
        let page = anonymous.get("/verify").await;
        let answer = submit(&anonymous, &page, "/verify", &[("token", token)]).await;
        assert_eq!(answer.status, 303, "{}", answer.body);
        let shown = anonymous.get(&answer.location().unwrap()).await;
        assert!(
            shown.text().contains("This link does not work"),
            "{}",
            shown.text()
        );
    }
    // One byte under the limit is not refused for its size.
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let page = browser.get("/account").await;
    let about = "é".repeat(250);
    let answer = submit(&browser, &page, "/account/profile", &[("about", &about)]).await;
    assert_eq!(answer.location().as_deref(), Some("/account"));
}

async fn control_characters_in_any_form_field_or_query_are_refused_never_a_500(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    each_field_refuses(
        &app,
        &["a\0b", "a\u{1}b", "a\u{7f}b", "a\u{85}b"],
        "control character",
    )
    .await;

    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    // Tab and line breaks: in about (and note) only.
    let page = browser.get("/account").await;
    let answer = submit(
        &browser,
        &page,
        "/account/profile",
        &[("about", "line one\r\n\tline two")],
    )
    .await;
    assert_eq!(answer.location().as_deref(), Some("/account"));
    let about = app
        .store
        .find_user(tally::store::UserKey::Id(&f.user_id))
        .await
        .unwrap()
        .unwrap()
        .about;
    assert_eq!(about, "line one\r\n\tline two");
    let page = browser.get("/account").await;
    let answer = submit(
        &browser,
        &page,
        "/account/profile",
        &[("first_name", "a\tb")],
    )
    .await;
    assert_eq!(answer.location().as_deref(), Some("/account#profile"));

    // Query parameters and path ids: an error page, never a 500.
    let anonymous = Browser::new(&app.origin);
    for path in [
        "/signin?return_to=%2Faccount%00",
        "/signin?return_to=%C2%85",
        "/verify?token=tly_verify_%01",
        "/verify?token=%7F",
        "/demo/callback?code=tly_code_1&state=%00",
    ] {
        let page = anonymous.get(path).await;
        assert_eq!(page.status, 400, "{path}: {}", page.body);
        assert!(page.text().contains("control character"), "{path}");
    }
    for path in ["/developer/apps/%00", "/developer/apps/a%01b"] {
        let page = browser.get(path).await;
        assert_eq!(page.status, 404, "{path}: {}", page.body);
    }
    let account = browser.get("/account").await;
    let csrf = account.form("/account/profile");
    for path in [
        "/account/apps/%00/revoke",
        "/account/tokens/%01/revoke",
        "/account/payments/%7F",
        "/developer/apps/%00/secret",
    ] {
        let answer = browser.post(path, &csrf).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
    }
}

/// Signs in with `identifier` from a fresh browser; where it leads and the
/// text of that page.
async fn try_sign_in(app: &TestApp, identifier: &str, password: &str) -> (String, String) {
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, identifier, password).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let location = answer.location().unwrap();
    let text = browser.get(&location).await.text();
    (location, text)
}

async fn sign_in_by_email_or_phone_needs_a_verified_address(backend: Backend) {
    let Some((app, sink)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let username = unique("ann");
    let email = format!("{username}@example.com");
    let answer = sign_up(&browser, &username, &[("phone", "(212) 555-0187")]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);

    let unknown = try_sign_in(&app, "nobody@example.com", STRONG).await;
    assert!(unknown.1.contains("Incorrect username or password"));
    for identifier in [email.as_str(), "212-555-0187"] {
        let refused = try_sign_in(&app, identifier, STRONG).await;
        assert_eq!(refused, unknown, "{identifier}: like an unknown user");
    }
    assert_eq!(try_sign_in(&app, &username, STRONG).await.0, "/account");

    let token = sink.token_for(&email).await;
    verify(&browser, &token).await;
    assert_eq!(try_sign_in(&app, &email, STRONG).await.0, "/account");
    // The phone is still unverified.
    assert_eq!(try_sign_in(&app, "212-555-0187", STRONG).await, unknown);
}

const RETAINED: [&str; 8] = [
    "oauth_codes",
    "oauth_tokens",
    "signin_failures",
    "idempotency_keys",
    "ended_sessions",
    "secret_reveals",
    "verification_sends",
    "verification_tokens",
];

async fn counts(app: &TestApp) -> BTreeMap<&'static str, i64> {
    let mut counts = BTreeMap::new();
    for table in RETAINED {
        counts.insert(table, count(app, table).await);
    }
    counts
}

async fn retention_purges_what_is_no_longer_needed(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let bob = tally::admin::user_add(
        store,
        &tally::auth::password::PasswordHasher::new(1),
        tally::admin::UserAdd {
            username: "bob".to_owned(),
            password: PASSWORD.to_owned(),
            verified: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let baseline = counts(&app).await;

    // Codes: two issued, one exchanged (used), one left to expire.
    let browser = Browser::new(&app.origin);
    let authorize = f.authorize_url(&[("response_type", "code"), ("scope", "access_profile")]);
    let consent = browser.to_consent(&authorize, &f.username, PASSWORD).await;
    let answer = browser.decide(&consent, "allow").await;
    let code = crate::browser::query_of(&answer.location().unwrap())["code"].clone();
    let exchanged = app
        .http
        .post(app.url("/v1/oauth/access_token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("client_id", f.client_id.as_str()),
            ("client_secret", f.client_secret.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(exchanged.status(), 200);
    let again = browser.get(&authorize).await;
    assert_eq!(again.status, 303, "consent is remembered: {}", again.body);

    // Idempotency keys, with a personal access token.
    let token = crate::fixtures::token(store, &f.user_id, "make_payments").await;
    for key in ["k1", "k2", "k3"] {
        let paid = app
            .http
            .post(app.url("/v1/payments"))
            .bearer_auth(&token)
            .header("Idempotency-Key", key)
            .form(&[
                ("user_id", bob.id.as_str()),
                ("amount", "1"),
                ("note", "rent"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(paid.status(), 200, "{}", paid.text().await.unwrap());
    }

    // Failed sign-ins.
    for _ in 0..3 {
        let stranger = Browser::new(&app.origin);
        let page = stranger.get("/signin").await;
        stranger
            .sign_in(&page, &f.username, "not the password")
            .await;
    }

    // Revoked tokens: the app's and the personal ones.
    let account = browser.get("/account").await;
    let revoke_app = format!("/account/apps/{}/revoke", f.client_id);
    assert_eq!(
        submit(&browser, &account, &revoke_app, &[]).await.status,
        303
    );
    for personal in store
        .personal_tokens(&f.user_id, now_micros())
        .await
        .unwrap()
    {
        store
            .revoke_personal_token(&f.user_id, &personal.grant_id, now_micros())
            .await
            .unwrap();
    }

    // A secret never shown: the fixture app's secret rotated on the Developer tab.
    let app_page = format!("/developer/apps/{}", f.client_id);
    let page = browser.get(&app_page).await;
    assert_eq!(submit(&browser, &page, "/secret", &[]).await.status, 303);

    // Ended sessions.
    let account = browser.get("/account").await;
    assert_eq!(
        submit(&browser, &account, "/signout", &[]).await.status,
        303
    );

    // A verification link and its send.
    let newcomer = Browser::new(&app.origin);
    assert_eq!(sign_up(&newcomer, &unique("cy"), &[]).await.status, 303);

    let churned = counts(&app).await;
    for table in RETAINED {
        assert!(
            churned[table] > baseline[table],
            "{table}: no churn in {churned:?}"
        );
    }

    // Purged now, what is still needed stays.
    tally::workers::purge(store, now_micros()).await.unwrap();
    assert_eq!(counts(&app).await, churned);

    // 31 days on, everything the rules name is gone.
    tally::workers::purge(store, now_micros() + 31 * DAY_MICROS)
        .await
        .unwrap();
    let after = counts(&app).await;
    for table in RETAINED {
        assert!(
            after[table] <= baseline[table],
            "{table}: {after:?} after, {baseline:?} before"
        );
    }
    // The ledger is untouched.
    crate::fixtures::audit_ok(store).await;
}

async fn a_reveal_is_taken_once_by_racing_showings_and_only_by_its_user(backend: Backend) {
    let Some(db) = crate::helpers::TestDb::new(backend).await else {
        return;
    };
    let store = db.store().await;
    let user = tally::admin::user_add(
        store.as_ref(),
        &tally::auth::password::PasswordHasher::new(1),
        tally::admin::UserAdd {
            username: "ann".to_owned(),
            password: PASSWORD.to_owned(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let now = now_micros();
    store
        .insert_reveal(&reveal("r1", &user.id, "sealed", now))
        .await
        .unwrap();
    assert_eq!(
        store.take_reveal("r1", "someone-else", 0).await.unwrap(),
        None
    );
    let mut takers = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let store = store.clone();
        let user_id = user.id.clone();
        takers.spawn(async move { store.take_reveal("r1", &user_id, 0).await.unwrap() });
    }
    let mut shown = 0;
    while let Some(taken) = takers.join_next().await {
        if let Some(sealed) = taken.unwrap() {
            assert_eq!(sealed, "sealed");
            shown += 1;
        }
    }
    assert_eq!(shown, 1, "one showing");
    // Kept too long, it is not shown (and is gone).
    store
        .insert_reveal(&reveal("r2", &user.id, "old", now))
        .await
        .unwrap();
    assert_eq!(
        store.take_reveal("r2", &user.id, now + 1).await.unwrap(),
        None
    );
    assert_eq!(store.take_reveal("r2", &user.id, 0).await.unwrap(), None);
}
