//! The people's pages over HTTP with a scripted browser: sign-up and
//! verification (through a real SMTP exchange), the account page, the Developer
//! tab, and the rules every form follows.

use crate::browser::{query_of, set, Browser, Page};
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::mail_sink::MailSink;
use crate::oauth_fixture::{fixture, fixture_with_redirect, Fixture, PASSWORD};
use serde_json::Value;
use tally::config::{DeveloperSignup, SmtpSettings};
use tally::store::UserKey;

on_both_backends!(
    signing_up_sends_a_link_that_verifies_the_account_once,
    sign_up_refuses_each_bad_field_with_a_message_and_keeps_the_rest,
    sign_up_refuses_a_taken_username_or_email,
    the_developer_tab_is_for_verified_users_only,
    a_verified_user_registers_edits_and_rotates_an_app,
    the_app_form_refuses_bad_details_with_a_message_on_each_field,
    another_persons_app_cannot_be_seen_or_changed,
    with_closed_developer_signup_no_app_is_created_and_old_ones_keep_working,
    revoking_an_app_on_the_account_page_ends_its_tokens,
    personal_access_tokens_are_shown_once_and_revocable_from_the_account_page,
    the_account_page_shows_when_an_app_last_used_its_access,
    the_profile_form_saves_names_and_refuses_long_ones,
    every_page_and_form_answer_sends_the_security_headers,
    forms_without_a_csrf_token_or_from_another_origin_are_refused,
    signed_out_visitors_are_sent_to_sign_in,
    an_origin_hidden_by_the_referrer_policy_is_judged_by_sec_fetch_site,
    signing_out_ends_the_session_even_for_a_copy_of_its_cookie,
    form_bodies_the_pages_cannot_read_get_an_error_page,
    unknown_pages_get_a_not_found_page_and_the_home_page_leads_to_the_account,
    people_change_their_email_and_phone_with_their_password_and_verify_the_new_address,
    people_pay_request_and_answer_money_on_the_account_page,
);

/// A password zxcvbn rates safely unguessable.
pub const STRONG: &str = "plum vessel orbit 97 quietly";

pub async fn spawn(backend: Backend) -> Option<(TestApp, MailSink)> {
    spawn_with(backend, DeveloperSignup::Open).await
}

pub async fn spawn_with(backend: Backend, signup: DeveloperSignup) -> Option<(TestApp, MailSink)> {
    let sink = MailSink::start().await;
    let url = sink.url.clone();
    let app = TestApp::spawn_with(backend, move |settings| {
        settings.developer_signup = signup;
        // The page tests sign many people up from one address; the limit
        // itself is tested on its own (`fair_hashing`).
        settings.signup_rate_limit = std::num::NonZeroU32::new(100_000).unwrap();
        settings.smtp = Some(SmtpSettings {
            url: url.into(),
            from: "Tally <no-reply@example.com>".parse().unwrap(),
        });
    })
    .await?;
    Some((app, sink))
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", &tally::domain::new_id()[26..])
}

/// Fills and sends the sign-up form; `changes` override the valid defaults.
pub async fn sign_up(browser: &Browser, username: &str, changes: &[(&str, &str)]) -> Page {
    let page = browser.get("/signup").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut fields = page.form("/signup");
    for (name, value) in [
        ("username", username.to_owned()),
        ("first_name", "Ann".to_owned()),
        ("last_name", "Lee".to_owned()),
        ("email", format!("{username}@example.com")),
        ("phone", String::new()),
        ("password", STRONG.to_owned()),
        ("password_confirm", STRONG.to_owned()),
    ] {
        set(&mut fields, name, &value);
    }
    for (name, value) in changes {
        set(&mut fields, name, value);
    }
    browser.post("/signup", &fields).await
}

/// Posts the verification form for `token`; returns the page it leads to.
pub async fn verify(browser: &Browser, token: &str) -> Page {
    let page = browser.get(&format!("/verify?token={token}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let fields = page.form("/verify");
    assert!(fields.iter().any(|(n, v)| n == "token" && v == token));
    let answer = browser.post("/verify", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    browser.get(&answer.location().unwrap()).await
}

/// A browser signed in as the fixture's (verified) user.
pub async fn signed_in(app: &TestApp, f: &Fixture) -> Browser {
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    browser
}

/// Sends the form of `page` whose action contains `action`, with `changes`.
pub async fn submit(
    browser: &Browser,
    page: &Page,
    action: &str,
    changes: &[(&str, &str)],
) -> Page {
    let html = scraper::Html::parse_document(&page.body);
    let forms = scraper::Selector::parse("form").unwrap();
    let actions: Vec<&str> = html
        .select(&forms)
        .filter_map(|f| f.value().attr("action"))
        .collect();
    // An exact action first: "/developer/apps/x" is also part of ".../x/secret".
    let target = actions
        .iter()
        .find(|a| **a == action)
        .or_else(|| actions.iter().find(|a| a.contains(action)))
        .unwrap_or_else(|| panic!("no form posting to {action}"))
        .to_string();
    let inputs = scraper::Selector::parse("input").unwrap();
    let form = html
        .select(&forms)
        .find(|f| f.value().attr("action") == Some(target.as_str()))
        .unwrap();
    let mut fields: Vec<(String, String)> = form
        .select(&inputs)
        .filter_map(|i| {
            // A browser sends only the checked radio buttons and boxes.
            let kind = i.value().attr("type").unwrap_or("text");
            if matches!(kind, "radio" | "checkbox") && i.value().attr("checked").is_none() {
                return None;
            }
            let name = i.value().attr("name")?;
            Some((
                name.to_owned(),
                i.value().attr("value").unwrap_or("").to_owned(),
            ))
        })
        .collect();
    for (name, value) in changes {
        set(&mut fields, name, value);
    }
    browser.post(&target, &fields).await
}

async fn introspect(app: &TestApp, f: &Fixture, token: &str) -> Value {
    app.http
        .post(app.url("/v1/oauth/introspect"))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Registers an app through the Developer tab; returns (client id, secret).
pub async fn register_app(browser: &Browser, name: &str, redirect_url: &str) -> (String, String) {
    let page = browser.get("/developer").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut fields = page.form("/developer/apps");
    set(&mut fields, "name", name);
    set(&mut fields, "description", "Splits bills among friends");
    set(&mut fields, "redirect_url", redirect_url);
    set(&mut fields, "site_url", "app.example.com");
    let answer = browser.post("/developer/apps", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let location = answer.location().unwrap();
    let client_id = location.rsplit('/').next().unwrap().to_owned();
    let page = browser.get(&location).await;
    let secret = secret_on(&page, "client-secret").expect("the secret is shown once");
    (client_id, secret)
}

pub fn secret_on(page: &Page, id: &str) -> Option<String> {
    let html = scraper::Html::parse_document(&page.body);
    let selector = scraper::Selector::parse(&format!("#{id}")).unwrap();
    html.select(&selector)
        .next()
        .map(|e| e.text().collect::<String>().trim().to_owned())
}

async fn signing_up_sends_a_link_that_verifies_the_account_once(backend: Backend) {
    let Some((app, sink)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let username = unique("ann");
    let answer = sign_up(&browser, &username, &[("phone", "(212) 555-0187")]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.location().as_deref(), Some("/account"));
    let account = browser.get("/account").await;
    assert!(
        account.text().contains("We sent a verification link"),
        "{}",
        account.body
    );
    assert!(account.text().contains("Not verified yet"));
    let user = app
        .store
        .find_user(UserKey::Username(&username))
        .await
        .unwrap()
        .unwrap();
    assert!(!user.verified && !user.email_verified);

    let token = sink.token_for(&format!("{username}@example.com")).await;
    let mail = sink.mails().pop().unwrap();
    assert!(
        mail.data.contains("Subject: Verify your e-mail address"),
        "{}",
        mail.data
    );
    // Only a digest of the link is stored.
    let page = verify(&browser, &token).await;
    assert!(
        page.text().contains("your address is verified"),
        "{}",
        page.body
    );
    let user = app
        .store
        .find_user(UserKey::Username(&username))
        .await
        .unwrap()
        .unwrap();
    assert!(user.verified && user.email_verified && !user.phone_verified);
    assert!(browser
        .get("/account")
        .await
        .text()
        .contains("Verified account"));

    let again = verify(&Browser::new(&app.origin), &token).await;
    assert!(
        again.text().contains("This link does not work"),
        "{}",
        again.body
    );
    let forged = verify(&browser, "tly_verify_0000").await;
    assert!(forged.text().contains("This link does not work"));
}

async fn sign_up_refuses_each_bad_field_with_a_message_and_keeps_the_rest(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let cases: &[(&str, &str, &str, &str)] = &[
        ("username", "ab", "username", "3 to 30 characters"),
        ("username", "ann lee", "username", "only letters, digits"),
        ("first_name", &"A".repeat(51), "first_name", "at most 50"),
        ("last_name", &"L".repeat(51), "last_name", "at most 50"),
        ("email", "", "email", "Enter your e-mail address"),
        ("email", "ann@", "email", "not a valid e-mail address"),
        ("phone", "555-0187", "phone", "not a valid US phone number"),
        ("password", "short", "password", "at least 8 characters"),
        ("password", "password123", "password", "too easy to guess"),
        (
            "password_confirm",
            "something else 42 x",
            "password_confirm",
            "passwords differ",
        ),
    ];
    for (field, value, error_field, message) in cases {
        let browser = Browser::new(&app.origin);
        let username = unique("bob");
        let mut changes = vec![(*field, *value)];
        if *field == "password" {
            changes.push(("password_confirm", value));
        }
        let answer = sign_up(&browser, &username, &changes).await;
        assert_eq!(answer.status, 303, "{field}: {}", answer.body);
        assert_eq!(answer.location().as_deref(), Some("/signup"), "{field}");
        let page = browser.get("/signup").await;
        let html = scraper::Html::parse_document(&page.body);
        let selector = scraper::Selector::parse(&format!("#{error_field}-error")).unwrap();
        let shown: String = html
            .select(&selector)
            .next()
            .unwrap_or_else(|| panic!("{field}={value}: no message in {}", page.body))
            .text()
            .collect();
        assert!(shown.contains(message), "{field}={value}: {shown}");
        // What was typed is kept, except passwords.
        let fields = page.form("/signup");
        if *field != "username" {
            assert!(fields.contains(&("username".to_owned(), username.clone())));
        }
        assert!(fields
            .iter()
            .all(|(n, v)| !n.starts_with("password") || v.is_empty()));
        assert!(app
            .store
            .find_user(UserKey::Username(&username))
            .await
            .unwrap()
            .is_none());
    }
}

async fn sign_up_refuses_a_taken_username_or_email(backend: Backend) {
    let Some((app, sink)) = spawn(backend).await else {
        return;
    };
    let username = unique("cat");
    assert_eq!(
        sign_up(&Browser::new(&app.origin), &username, &[])
            .await
            .status,
        303
    );
    // While cat has not verified the address, someone else may sign up with
    // it too (it is nobody's yet, and squatting it blocks no one). A day later,
    // so that the address may have a link again (one a minute, ten a day).
    tally::workers::purge(
        app.store.as_ref(),
        tally::domain::now_micros() + 2 * 86_400_000_000,
    )
    .await
    .unwrap();
    let copy = sign_up(
        &Browser::new(&app.origin),
        &unique("dup"),
        &[("email", &format!("{username}@example.com"))],
    )
    .await;
    assert_eq!(
        copy.location().as_deref(),
        Some("/account"),
        "{}",
        copy.body
    );
    // Once cat verifies it, it is cat's.
    let cat = app
        .store
        .find_user(UserKey::Username(&username))
        .await
        .unwrap()
        .unwrap();
    app.store
        .update_user_flags(
            &cat.id,
            tally::store::UserFlags {
                verified: Some(true),
                suspended: None,
            },
        )
        .await
        .unwrap();
    // The copy's own link, sent before, cannot take the address from cat.
    let duplicate_link = sink.token_for(&format!("{username}@example.com")).await;
    let answer = verify(&Browser::new(&app.origin), &duplicate_link).await;
    assert!(
        answer.text().contains("This link does not work"),
        "{}",
        answer.text()
    );
    for (changes, field) in [
        (vec![("username", username.to_uppercase())], "username"),
        (
            vec![
                ("username", unique("dan")),
                ("email", format!("{username}@example.com")),
            ],
            "email",
        ),
    ] {
        let browser = Browser::new(&app.origin);
        let changes: Vec<(&str, &str)> = changes.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let answer = sign_up(&browser, &unique("eve"), &changes).await;
        assert_eq!(answer.location().as_deref(), Some("/signup"));
        let page = browser.get("/signup").await;
        assert!(
            page.body.contains(&format!("id=\"{field}-error\"")),
            "{}",
            page.body
        );
        assert!(page.text().contains("already belongs to an account"));
    }
}

async fn the_developer_tab_is_for_verified_users_only(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    assert_eq!(sign_up(&browser, &unique("fay"), &[]).await.status, 303);
    let page = browser.get("/developer").await;
    assert_eq!(page.status, 200);
    assert!(page
        .text()
        .contains("Only verified accounts can register apps"));
    assert!(!page.body.contains("action=\"/developer/apps\""));
    // The forms are refused even when sent by hand.
    let csrf = browser.get("/account").await.form("/account/profile");
    for action in ["/developer/apps", "/developer/token"] {
        let mut fields = csrf.clone();
        set(&mut fields, "name", "Sneaky");
        set(&mut fields, "redirect_url", "https://x.example.com/cb");
        let answer = browser.post(action, &fields).await;
        assert_eq!(answer.status, 403, "{action}: {}", answer.body);
        assert!(answer.text().contains("Only verified accounts"));
    }
}

async fn a_verified_user_registers_edits_and_rotates_an_app(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let (client_id, secret) = register_app(
        &browser,
        "Bill Splitter",
        "https://app.example.com/callback",
    )
    .await;
    assert!(secret.starts_with("tly_secret_"));
    // The secret is shown once, and only its digest is stored.
    let page = browser.get(&format!("/developer/apps/{client_id}")).await;
    assert!(secret_on(&page, "client-secret").is_none());
    assert!(!page.body.contains(&secret));
    let stored = app.store.find_app(&client_id).await.unwrap().unwrap();
    assert_eq!(stored.owner_id, f.user_id);
    assert_ne!(stored.secret_digest, secret);
    assert_eq!(
        secret_on(&page, "client-id").as_deref(),
        Some(client_id.as_str())
    );
    let listing = browser.get("/developer").await;
    assert!(listing.text().contains("Bill Splitter") && listing.text().contains(&client_id));

    // The secret authenticates the app.
    let as_app = |secret: String| {
        let app = &app;
        let client_id = client_id.clone();
        async move {
            app.http
                .post(app.url("/v1/oauth/introspect"))
                .basic_auth(client_id, Some(secret))
                .form(&[("token", "tly_at_unknown")])
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(as_app(secret.clone()).await, 200);

    // Edit.
    let edited = submit(
        &browser,
        &page,
        &format!("/developer/apps/{client_id}"),
        &[
            ("name", "Splitter Pro"),
            ("description", "Now with receipts"),
            ("redirect_url", "https://pro.example.com/cb"),
            ("site_url", "https://pro.example.com"),
        ],
    )
    .await;
    assert_eq!(edited.status, 303, "{}", edited.body);
    let stored = app.store.find_app(&client_id).await.unwrap().unwrap();
    assert_eq!(stored.name, "Splitter Pro");
    assert_eq!(stored.description, "Now with receipts");
    assert_eq!(
        stored.redirect_url.as_deref(),
        Some("https://pro.example.com/cb")
    );
    assert_eq!(stored.site_url.as_deref(), Some("https://pro.example.com"));

    // Rotate: the new secret is shown once, the old one stops working.
    let page = browser.get(&format!("/developer/apps/{client_id}")).await;
    let rotated = submit(&browser, &page, "/secret", &[]).await;
    assert_eq!(rotated.status, 303);
    let page = browser.get(&rotated.location().unwrap()).await;
    let new_secret = secret_on(&page, "client-secret").expect("the new secret is shown");
    assert_ne!(new_secret, secret);
    assert_eq!(as_app(secret).await, 401);
    assert_eq!(as_app(new_secret).await, 200);
}

async fn the_app_form_refuses_bad_details_with_a_message_on_each_field(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let long_description = "d".repeat(501);
    let cases: &[(&str, &str, &str)] = &[
        ("name", "", "App Name must be 1 to 100"),
        ("description", &long_description, "at most 500"),
        ("redirect_url", "", "not a valid absolute URL"),
        (
            "redirect_url",
            "ftp://x.example.com/cb",
            "must use http or https",
        ),
        (
            "redirect_url",
            "https://x.example.com/cb#frag",
            "must not contain a fragment",
        ),
        (
            "redirect_url",
            "https://u:p@x.example.com/cb",
            "user name or password",
        ),
        ("site_url", "not a site", "Site URL must be"),
    ];
    for (field, value, message) in cases {
        let page = browser.get("/developer").await;
        let mut fields = page.form("/developer/apps");
        set(&mut fields, "name", "Good name");
        set(&mut fields, "description", "ok");
        set(&mut fields, "redirect_url", "https://x.example.com/cb");
        set(&mut fields, "site_url", "");
        set(&mut fields, field, value);
        let answer = browser.post("/developer/apps", &fields).await;
        assert_eq!(answer.status, 303, "{field}");
        assert_eq!(answer.location().as_deref(), Some("/developer#new-app"));
        let page = browser.get("/developer").await;
        let shown = secret_on(&page, &format!("{field}-error"))
            .unwrap_or_else(|| panic!("{field}={value}: no message in {}", page.body));
        assert!(shown.contains(message), "{field}={value}: {shown}");
    }
    // Every refused field gets its message at once.
    let page = browser.get("/developer").await;
    let mut fields = page.form("/developer/apps");
    set(&mut fields, "name", "");
    set(&mut fields, "redirect_url", "nope");
    set(&mut fields, "site_url", "a b");
    browser.post("/developer/apps", &fields).await;
    let page = browser.get("/developer").await;
    for field in ["name", "redirect_url", "site_url"] {
        assert!(
            secret_on(&page, &format!("{field}-error")).is_some(),
            "{field}"
        );
    }
    assert_eq!(app.store.apps_of_owner(&f.user_id).await.unwrap().len(), 1);
}

async fn another_persons_app_cannot_be_seen_or_changed(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let owner = fixture(&app).await;
    let other = fixture(&app).await;
    let browser = signed_in(&app, &other).await;
    let path = format!("/developer/apps/{}", owner.client_id);
    assert_eq!(browser.get(&path).await.status, 404);
    let csrf = browser.get("/developer").await.form("/developer/token");
    let mut fields = csrf.clone();
    set(&mut fields, "name", "Mine now");
    set(&mut fields, "redirect_url", "https://evil.example.com/cb");
    assert_eq!(browser.post(&path, &fields).await.status, 404);
    assert_eq!(
        browser.post(&format!("{path}/secret"), &csrf).await.status,
        404
    );
    // Its ID-token algorithm and webhooks are as out of reach.
    let mut alg = csrf.clone();
    set(&mut alg, "id_token_alg", "ES256");
    let alg_path = format!("{path}/id-token-alg");
    assert_eq!(browser.post(&alg_path, &alg).await.status, 404);
    assert_eq!(browser.get(&format!("{path}/webhooks")).await.status, 404);
    let mut endpoint = csrf.clone();
    set(&mut endpoint, "endpoint_id", "whk_none");
    let remove_path = format!("{path}/webhooks/remove");
    assert_eq!(browser.post(&remove_path, &endpoint).await.status, 404);
    let stored = app.store.find_app(&owner.client_id).await.unwrap().unwrap();
    assert_eq!(stored.name, "Splitter");
    let stored_alg = app.store.id_token_alg(&owner.client_id).await.unwrap();
    assert_ne!(stored_alg.as_deref(), Some("ES256"));
}

async fn with_closed_developer_signup_no_app_is_created_and_old_ones_keep_working(
    backend: Backend,
) {
    let Some((app, _sink)) = spawn_with(backend, DeveloperSignup::Closed).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let page = browser.get("/developer").await;
    assert!(
        page.text().contains("Tally accepts no new apps"),
        "{}",
        page.body
    );
    assert!(page.text().contains("Apps that exist keep working"));
    assert!(!page.body.contains("action=\"/developer/apps\""));
    let mut fields = page.form("/developer/token");
    set(&mut fields, "name", "Late");
    set(&mut fields, "redirect_url", "https://late.example.com/cb");
    let refused = browser.post("/developer/apps", &fields).await;
    assert_eq!(refused.status, 403);
    assert_eq!(app.store.apps_of_owner(&f.user_id).await.unwrap().len(), 1);
    // The existing app is listed, can be rotated, and still authorizes people.
    assert!(page.text().contains("Splitter"));
    let app_page = browser
        .get(&format!("/developer/apps/{}", f.client_id))
        .await;
    assert_eq!(
        submit(&browser, &app_page, "/secret", &[]).await.status,
        303
    );
    let consent = Browser::new(&app.origin)
        .to_consent(
            &f.authorize_url(&[("scope", "access_profile")]),
            &f.username,
            PASSWORD,
        )
        .await;
    assert!(consent.text().contains("Splitter"));
}

/// Runs the client-side flow for `f`'s app; returns the access token.
async fn client_side_token(app: &TestApp, f: &Fixture, browser: &Browser, scope: &str) -> String {
    let authorize = f.authorize_url(&[("scope", scope), ("response_type", "token")]);
    let page = browser.get(&authorize).await;
    let page = if page.body.contains("action=\"/signin\"") {
        let signed = browser.sign_in(&page, &f.username, PASSWORD).await;
        browser.get(&signed.location().unwrap()).await
    } else {
        page
    };
    let redirect = if page.status == 303 {
        page
    } else {
        browser.decide(&page, "allow").await
    };
    let location = redirect.location().unwrap();
    let _ = app;
    query_of(&location)["access_token"].clone()
}

async fn revoking_an_app_on_the_account_page_ends_its_tokens(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let first = client_side_token(&app, &f, &browser, "access_profile").await;
    let second = client_side_token(&app, &f, &browser, "access_profile access_balance").await;
    for token in [&first, &second] {
        assert_eq!(introspect(&app, &f, token).await["active"], true);
    }
    let page = browser.get("/account").await;
    let text = page.text();
    assert!(text.contains("Splitter"), "{}", page.body);
    assert!(text.contains("access_profile") && text.contains("access_balance"));
    assert!(text.contains("last used never"));

    let answer = submit(
        &browser,
        &page,
        &format!("/account/apps/{}/revoke", f.client_id),
        &[],
    )
    .await;
    assert_eq!(answer.status, 303);
    for token in [&first, &second] {
        assert_eq!(
            introspect(&app, &f, token).await,
            serde_json::json!({"active": false})
        );
    }
    let page = browser.get("/account").await;
    assert!(page
        .text()
        .contains("Splitter can no longer use your account"));
    assert!(page.text().contains("No app can use your account"));
    // The consent is forgotten: authorizing again asks again.
    let again = browser
        .get(&f.authorize_url(&[("scope", "access_profile"), ("response_type", "token")]))
        .await;
    assert_eq!(again.status, 200);
    assert!(again.body.contains("decision"));
}

async fn personal_access_tokens_are_shown_once_and_revocable_from_the_account_page(
    backend: Backend,
) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let page = browser.get("/developer").await;
    let answer = submit(&browser, &page, "/developer/token", &[]).await;
    assert_eq!(answer.status, 303);
    let page = browser.get("/developer").await;
    let token = secret_on(&page, "personal-token").expect("the token is shown");
    assert!(token.starts_with("tly_at_"));
    assert!(secret_on(&browser.get("/developer").await, "personal-token").is_none());
    // A personal token is no app's: only a resource server learns about it.
    assert_eq!(
        introspect(&app, &f, &token).await,
        serde_json::json!({"active": false})
    );
    tally::admin::app_set(
        app.store.as_ref(),
        tally::admin::AppSet {
            client_id: f.client_id.clone(),
            introspect_any: Some(true),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let active = introspect(&app, &f, &token).await;
    assert_eq!(active["active"], true);
    assert_eq!(active["client_id"], Value::Null);
    assert_eq!(
        active["scope"],
        "make_payments access_profile access_balance access_email access_phone access_friends"
    );
    let lifetime = active["exp"].as_i64().unwrap() - active["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 60 * 86_400);

    let account = browser.get("/account").await;
    let html = scraper::Html::parse_document(&account.body);
    let selector = scraper::Selector::parse("#tokens form").unwrap();
    let action = html
        .select(&selector)
        .next()
        .and_then(|f| f.value().attr("action"))
        .expect("a revoke form for the token")
        .to_owned();
    let answer = submit(&browser, &account, &action, &[]).await;
    assert_eq!(answer.status, 303);
    assert_eq!(introspect(&app, &f, &token).await["active"], false);
    let account = browser.get("/account").await;
    assert!(account
        .text()
        .contains("The personal access token is revoked"));
    assert!(account.text().contains("You have no personal access token"));
}

async fn the_account_page_shows_when_an_app_last_used_its_access(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture_with_redirect(&app, "https://app.example.com/cb").await;
    let browser = signed_in(&app, &f).await;
    let token = client_side_token(&app, &f, &browser, "access_profile").await;
    // Any authenticated API call records the use; this one also ends the token.
    let status = app
        .http
        .delete(app.url("/v1/oauth/access_token"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 204);
    for _ in 0..50 {
        let text = browser.get("/account").await.text();
        if !text.contains("last used never") {
            assert!(text.contains("last used 20"), "{text}");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the use of the grant was never recorded");
}

async fn the_profile_form_saves_names_and_refuses_long_ones(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let page = browser.get("/account").await;
    let saved = submit(
        &browser,
        &page,
        "/account/profile",
        &[
            ("first_name", "Annabel"),
            ("last_name", "Leigh"),
            ("about", "Splits the bill"),
        ],
    )
    .await;
    assert_eq!(saved.status, 303);
    let user = app
        .store
        .find_user(UserKey::Id(&f.user_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            user.first_name.as_str(),
            user.last_name.as_str(),
            user.about.as_str()
        ),
        ("Annabel", "Leigh", "Splits the bill")
    );
    let page = browser.get("/account").await;
    assert!(page.text().contains("Annabel Leigh") && page.text().contains("Your profile is saved"));

    let long_about = "a".repeat(501);
    for (field, value, message) in [
        ("first_name", "F".repeat(51), "at most 50"),
        ("last_name", "L".repeat(51), "at most 50"),
        ("about", long_about, "at most 500"),
    ] {
        let page = browser.get("/account").await;
        let answer = submit(&browser, &page, "/account/profile", &[(field, &value)]).await;
        assert_eq!(answer.status, 303);
        let page = browser.get("/account").await;
        let shown = secret_on(&page, &format!("{field}-error")).unwrap_or_default();
        assert!(shown.contains(message), "{field}: {}", page.body);
    }
    let user = app
        .store
        .find_user(UserKey::Id(&f.user_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(user.first_name, "Annabel");
}

fn assert_secure(page: &Page, what: &str) {
    assert_eq!(
        page.header("content-security-policy"),
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        "{what}"
    );
    assert_eq!(page.header("x-frame-options"), "DENY", "{what}");
    assert_eq!(page.header("referrer-policy"), "no-referrer", "{what}");
    assert_eq!(page.header("cache-control"), "no-store", "{what}");
}

async fn every_page_and_form_answer_sends_the_security_headers(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let visitor = Browser::new(&app.origin);
    for path in ["/signup", "/verify?token=x", "/signin"] {
        let page = visitor.get(path).await;
        assert_eq!(page.status, 200, "{path}");
        assert_secure(&page, path);
        assert!(!page.body.contains("<script"), "{path}");
    }
    let browser = signed_in(&app, &f).await;
    let app_path = format!("/developer/apps/{}", f.client_id);
    for path in ["/account", "/developer", app_path.as_str()] {
        let page = browser.get(path).await;
        assert_eq!(page.status, 200, "{path}");
        assert_secure(&page, path);
        // Every input a person fills in has a label.
        let html = scraper::Html::parse_document(&page.body);
        let inputs = scraper::Selector::parse("input:not([type=hidden]), textarea").unwrap();
        for input in html.select(&inputs) {
            let id = input
                .value()
                .attr("id")
                .unwrap_or_else(|| panic!("{path}: input without id"));
            assert!(
                page.body.contains(&format!("for=\"{id}\"")),
                "{path}: {id} has no label"
            );
        }
        // No third-party assets.
        assert!(
            !page.body.contains("src=\"http") && !page.body.contains("href=\"http"),
            "{path}"
        );
    }
    let page = browser.get("/account").await;
    let answer = submit(&browser, &page, "/account/profile", &[]).await;
    assert_eq!(answer.status, 303);
    assert_secure(&answer, "profile answer");
    let missing = browser.get("/developer/apps/nope").await;
    assert_eq!(missing.status, 404);
    assert_secure(&missing, "404");
}

async fn forms_without_a_csrf_token_or_from_another_origin_are_refused(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let page = browser.get("/account").await;
    let good = page.form("/account/profile");
    let posts = [
        "/signup".to_owned(),
        "/verify".to_owned(),
        "/account/profile".to_owned(),
        "/account/contact".to_owned(),
        "/account/payments".to_owned(),
        "/account/payments/x".to_owned(),
        "/account/verification".to_owned(),
        format!("/account/apps/{}/revoke", f.client_id),
        "/account/tokens/x/revoke".to_owned(),
        "/developer/apps".to_owned(),
        format!("/developer/apps/{}", f.client_id),
        format!("/developer/apps/{}/secret", f.client_id),
        "/developer/token".to_owned(),
    ];
    for path in &posts {
        let mut without = good.clone();
        without.retain(|(n, _)| n != "csrf_token");
        let answer = browser.post(path, &without).await;
        assert_eq!(answer.status, 403, "{path} without a token");
        let mut wrong = good.clone();
        set(&mut wrong, "csrf_token", "0123");
        assert_eq!(
            browser.post(path, &wrong).await.status,
            403,
            "{path} wrong token"
        );
        let answer = browser
            .client
            .post(app.url(path))
            .header("Origin", "https://evil.example.com")
            .form(&good)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403, "{path} from another origin");
    }
    let stored = app.store.find_app(&f.client_id).await.unwrap().unwrap();
    assert_eq!(stored.name, "Splitter");
    assert_eq!(app.store.apps_of_owner(&f.user_id).await.unwrap().len(), 1);
}

async fn signed_out_visitors_are_sent_to_sign_in(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let visitor = Browser::new(&app.origin);
    for (path, back) in [
        ("/account", "%2Faccount"),
        ("/developer", "%2Fdeveloper"),
        ("/developer/apps/abc", "%2Fdeveloper%2Fapps%2Fabc"),
    ] {
        let page = visitor.get(path).await;
        assert_eq!(page.status, 303, "{path}");
        assert_eq!(
            page.location().as_deref(),
            Some(format!("/signin?return_to={back}").as_str())
        );
    }
}

async fn an_origin_hidden_by_the_referrer_policy_is_judged_by_sec_fetch_site(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let fields = browser.get("/account").await.form("/account/profile");
    // What Chromium sends for a page's own form under `Referrer-Policy: no-referrer`.
    for (origin, fetch_site, status) in [
        (Some("null"), Some("same-origin"), 303),
        (Some("null"), Some("cross-site"), 403),
        (Some("null"), None, 403),
        (None, Some("same-origin"), 303),
        (None, Some("cross-site"), 403),
        (None, Some("same-site"), 403),
        (Some(app.origin.as_str()), Some("cross-site"), 403),
    ] {
        let mut request = browser
            .client
            .post(app.url("/account/profile"))
            .form(&fields);
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        if let Some(site) = fetch_site {
            request = request.header("Sec-Fetch-Site", site);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(
            answer.status(),
            status,
            "Origin {origin:?}, Sec-Fetch-Site {fetch_site:?}"
        );
    }
}

/// Without SMTP, the real server writes each link to its log on a marked line,
/// e-mail and phone alike; the phone's link verifies the phone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_smtp_the_links_are_written_to_the_log_on_a_marked_line() {
    let db = crate::helpers::TestDb::new(Backend::Sqlite).await.unwrap();
    let server = crate::helpers::ServeProcess::start(&db.url_string(), &[]);
    let browser = Browser::new(&server.origin);
    let username = unique("gus");
    let answer = sign_up(&browser, &username, &[("phone", "212.555.0187")]).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let mut links = Vec::new();
    for _ in 0..100 {
        links = server
            .log()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|entry| {
                entry["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("VERIFY-LINK "))
            })
            .map(|entry| entry["fields"].clone())
            .collect();
        if links.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(links.len(), 2, "{}", server.log());
    let phone = links.iter().find(|l| l["channel"] == "phone").unwrap();
    assert_eq!(phone["to"], "+12125550187");
    let email = links.iter().find(|l| l["channel"] == "email").unwrap();
    assert_eq!(email["to"], format!("{username}@example.com").as_str());
    let token = query_of(phone["link"].as_str().unwrap())["token"].clone();
    let page = verify(&browser, &token).await;
    assert!(
        page.text().contains("your address is verified"),
        "{}",
        page.body
    );
    let store = db.store().await;
    let user = store
        .find_user(UserKey::Username(&username))
        .await
        .unwrap()
        .unwrap();
    assert!(user.verified && user.phone_verified && !user.email_verified);
    drop(server);
}

async fn signing_out_ends_the_session_even_for_a_copy_of_its_cookie(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    let copy = browser.cookie_header();
    assert!(!copy.is_empty());
    let with_copy = || async {
        app.http
            .get(app.url("/account"))
            .header("cookie", &copy)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(with_copy().await, 200);
    let account = browser.get("/account").await;
    let answer = submit(&browser, &account, "/signout", &[]).await;
    assert_eq!(answer.status, 303);
    assert_eq!(browser.get("/account").await.status, 303);
    // The copied cookie is refused too: the server remembers the session ended.
    assert_eq!(with_copy().await, 303);
}

async fn form_bodies_the_pages_cannot_read_get_an_error_page(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let page = browser.get("/signin").await;
    let mut fields = page.form("/signin");
    // Larger than a form needs, within the service's 64 KiB: read normally.
    set(&mut fields, "username", &"x".repeat(30_000));
    set(&mut fields, "password", "wrong");
    let answer = browser.post("/signin", &fields).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    // Over 64 KiB, or not a form: an error page with the page headers.
    set(&mut fields, "username", &"x".repeat(70_000));
    let answer = browser.post("/signin", &fields).await;
    assert_eq!(answer.status, 413);
    assert!(answer.header("content-type").starts_with("text/html"));
    assert_eq!(answer.header("x-frame-options"), "DENY");
    let answer = browser
        .client
        .post(app.url("/signin"))
        .header("origin", &app.origin)
        .json(&serde_json::json!({"username": "a", "password": "b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 415);
    assert!(answer.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("frame-ancestors 'none'"));
}

async fn unknown_pages_get_a_not_found_page_and_the_home_page_leads_to_the_account(
    backend: Backend,
) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let browser = Browser::new(&app.origin);
    let home = browser.get("/").await;
    assert_eq!(home.status, 303);
    assert_eq!(home.location().as_deref(), Some("/account"));
    let missing = browser.get("/no-such-page").await;
    assert_eq!(missing.status, 404);
    assert!(missing.text().contains("There is no page at this address"));
    assert_eq!(missing.header("x-frame-options"), "DENY");
}

async fn people_change_their_email_and_phone_with_their_password_and_verify_the_new_address(
    backend: Backend,
) {
    let Some((app, sink)) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let other = fixture(&app).await;
    let browser = signed_in(&app, &f).await;
    // Someone pays the address before it is anyone's.
    let payer = crate::fixtures::person(store, "payer", "10").await;
    let paid = app
        .post(
            "/payments",
            &payer.token,
            serde_json::json!({"email": "ann.new@example.com", "amount": "3", "note": "hi"}),
        )
        .await
        .ok()["payment"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let user = || async {
        store
            .find_user(UserKey::Id(&f.user_id))
            .await
            .unwrap()
            .unwrap()
    };
    let before = user().await;

    // Refused: a wrong password, another account's address, a bad phone. Each
    // message shows by its field, and nothing changes.
    let other_email = format!("{}@example.com", other.username);
    for (email, phone, password, message) in [
        (
            "ann.new@example.com",
            "",
            "wrong",
            "That is not your password.",
        ),
        (
            other_email.as_str(),
            "",
            PASSWORD,
            "Another account uses this address.",
        ),
        (
            "ann.new@example.com",
            "123",
            PASSWORD,
            "is not a valid US phone number",
        ),
        ("not-an-email", "", PASSWORD, "valid e-mail"),
    ] {
        let page = browser.get("/account").await;
        let answer = submit(
            &browser,
            &page,
            "/account/contact",
            &[("email", email), ("phone", phone), ("password", password)],
        )
        .await;
        assert_eq!(answer.status, 303);
        let shown = browser.get("/account").await;
        assert!(
            shown.text().contains(message),
            "{message}: {}",
            shown.text()
        );
        assert!(
            !shown.body.contains(PASSWORD),
            "a password is never shown again"
        );
        assert_eq!(user().await.email, before.email);
    }

    let page = browser.get("/account").await;
    let answer = submit(
        &browser,
        &page,
        "/account/contact",
        &[
            ("email", "Ann.New@example.com"),
            ("phone", "(212) 555-0143"),
            ("password", PASSWORD),
        ],
    )
    .await;
    assert_eq!(answer.status, 303);
    let changed = user().await;
    assert_eq!(changed.email.as_deref(), Some("ann.new@example.com"));
    assert_eq!(changed.phone.as_deref(), Some("+12125550143"));
    assert!(!changed.email_verified && !changed.phone_verified);
    assert!(changed.verified, "the account stays verified");
    assert!(browser
        .get("/account")
        .await
        .text()
        .contains("Follow the link"));

    // The link sent to the new address verifies it and claims the payment.
    let token = sink.token_for("ann.new@example.com").await;
    let page = browser.get(&format!("/verify?token={token}")).await;
    let answer = browser.post("/verify", &page.form("/verify")).await;
    assert_eq!(answer.status, 303);
    assert!(user().await.email_verified);
    let settled = app.wait_for_status(&payer.token, &paid, "settled").await;
    assert_eq!(settled["target"]["user"]["id"], f.user_id.as_str());
    assert_eq!(
        crate::fixtures::balance_cents(store, &f.user_id).await,
        2800
    );
}

async fn people_pay_request_and_answer_money_on_the_account_page(backend: Backend) {
    let Some((app, _sink)) = spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let f = fixture(&app).await;
    let other = fixture(&app).await;
    let balance = |id: String| async move { crate::fixtures::balance_cents(store, &id).await };
    let browser = signed_in(&app, &f).await;
    let send = |to: String, amount: &'static str, note: &'static str, kind: &'static str| {
        let browser = &browser;
        async move {
            let page = browser.get("/account").await;
            let answer = submit(
                browser,
                &page,
                "/account/payments",
                &[
                    ("to", &to),
                    ("amount", amount),
                    ("note", note),
                    ("kind", kind),
                ],
            )
            .await;
            assert_eq!(answer.status, 303);
            browser.get("/account").await
        }
    };

    // Refused: each message by its field, nothing written.
    for (to, amount, note, message) in [
        (
            "nobody-like-this".to_owned(),
            "5",
            "x",
            "No one has that username",
        ),
        (other.username.clone(), "abc", "x", "decimal number"),
        (other.username.clone(), "0.001", "x", "2 decimal places"),
        (
            other.username.clone(),
            "100",
            "x",
            "Your balance does not cover",
        ),
        (other.username.clone(), "5", " ", "Note must not be empty"),
        (f.username.clone(), "5", "x", "You cannot pay yourself"),
    ] {
        let page = send(to.clone(), amount, note, "pay").await;
        assert!(
            page.text().contains(message),
            "{to} {amount}: {}",
            page.text()
        );
    }
    assert_eq!(balance(f.user_id.clone()).await, 2500);
    crate::fixtures::audit_ok(store).await;

    // A pay to a username (with or without @) settles like any other.
    let page = send(format!("@{}", other.username), "5", "lunch", "pay").await;
    assert!(page.text().contains("Your payment is on its way."));
    assert!(page
        .text()
        .contains(&format!("You paid @{}", other.username)));
    for _ in 0..50 {
        if balance(other.user_id.clone()).await == 3000 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(balance(other.user_id.clone()).await, 3000);
    // The API shows it made on the web.
    let token = crate::fixtures::token(store, &f.user_id, "access_profile").await;
    let listed = app.get("/payments", &token).await;
    assert_eq!(listed.ok()[0]["medium"], "web");
    assert_eq!(listed.ok()[0]["note"], "lunch");

    // A request by e-mail, which the other person pays from their own page.
    let page = send(
        format!("{}@example.com", other.username),
        "3",
        "tickets",
        "request",
    )
    .await;
    assert!(page.text().contains("Your request is sent."));
    let payer = signed_in(&app, &other).await;
    let page = payer.get("/account").await;
    assert!(page
        .text()
        .contains(&format!("@{} requests money from you", f.username)));
    let answer = submit(
        &payer,
        &page,
        "/account/payments/",
        &[("action", "approve")],
    )
    .await;
    assert_eq!(answer.status, 303);
    assert!(payer
        .get("/account")
        .await
        .text()
        .contains("The request is paid."));
    assert_eq!(balance(f.user_id.clone()).await, 2300);
    assert_eq!(balance(other.user_id.clone()).await, 2700);

    // A request its sender cancels.
    send(other.username.clone(), "1", "oops", "request").await;
    let page = browser.get("/account").await;
    let answer = submit(
        &browser,
        &page,
        "/account/payments/",
        &[("action", "cancel")],
    )
    .await;
    assert_eq!(answer.status, 303);
    assert!(browser.get("/account").await.text().contains("Cancelled."));
    let listed = app.get("/payments?status=cancelled", &token).await;
    assert_eq!(listed.ok().as_array().unwrap().len(), 1);
    crate::fixtures::audit_ok(store).await;
}
