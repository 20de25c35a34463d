//! Second factors over HTTP (SPEC §11): the authenticator app's set-up with
//! generated TOTP codes, the second step of a sign-in wherever a password is
//! asked, recovery codes, the second-factor throttle, step-up, the
//! change-password form (SPEC §8), the operator's reset, and `amr`/`acr`.

use crate::browser::{query_of, set, Browser, Page};
use crate::helpers::{on_both_backends, tally_with_env, Backend, TestApp, POSTGRES_SECRET_KEY};
use crate::oauth_fixture::{fixture, Fixture, PASSWORD};
use std::time::Duration;
use totp_rs::{Algorithm, Builder, Secret, Totp};

on_both_backends!(
    a_user_sets_up_an_authenticator_app_from_a_qr_code_and_sees_ten_recovery_codes_once,
    the_totp_seed_is_kept_sealed_and_recovery_codes_only_as_digests,
    signing_in_asks_for_a_code_after_the_password_and_starts_the_session_only_then,
    a_code_is_accepted_once_and_with_one_step_of_drift_either_way,
    each_recovery_code_works_once_and_new_ones_replace_the_old,
    wrong_codes_are_throttled_per_account_and_address_without_locking_the_owner_out,
    the_authorize_endpoint_and_the_device_page_ask_for_the_second_factor_too,
    sensitive_actions_ask_for_a_fresh_second_factor_and_then_carry_the_action_out,
    the_phone_a_secret_rotation_and_new_recovery_codes_ask_for_a_fresh_factor_too,
    a_payment_over_the_step_up_amount_needs_a_fresh_factor_and_a_smaller_one_does_not,
    a_session_signed_in_before_the_first_factor_was_added_must_step_up,
    the_confirmation_page_carries_typed_passwords_sealed_and_only_to_their_own_form,
    changing_the_password_needs_the_current_one_and_ends_the_other_sessions,
    removing_the_last_factor_needs_the_password_and_a_code,
    the_operator_removes_every_factor_of_a_user_who_lost_them,
    id_tokens_name_the_methods_used_and_acr_values_mfa_gives_acr_mfa,
    acr_values_mfa_makes_a_password_only_session_give_its_second_factor,
);

/// A server whose sensitive actions stay confirmed for `window`, and pays
/// over $10 need step-up.
async fn spawn(backend: Backend, window: Duration) -> Option<(TestApp, Fixture)> {
    let app = TestApp::spawn_with(backend, |s| {
        s.step_up_window = window;
        s.step_up_amount_cents = 1000;
    })
    .await?;
    let f = fixture(&app).await;
    Some((app, f))
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Now, in seconds, not within 3 seconds of the next 30-second step, so a
/// code made for a step relative to it is still that step when it arrives.
async fn steady_now() -> u64 {
    if 30 - now_secs() % 30 <= 3 {
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    now_secs()
}

/// Signs in with the password on a fresh sign-in page; the answer (a 303).
async fn password_step(browser: &Browser, username: &str, password: &str) -> Page {
    let page = browser.get("/signin").await;
    browser.sign_in(&page, username, password).await
}

/// A browser signed in with the password only (the user has no factor yet).
async fn signed_in(app: &TestApp, f: &Fixture) -> Browser {
    let browser = Browser::new(&app.origin);
    let answer = password_step(&browser, &f.username, PASSWORD).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/account"),
        "{}",
        answer.body
    );
    browser
}

/// The authenticator app of a user, as the test holds it.
struct App {
    totp: Totp,
    recovery_codes: Vec<String>,
    /// The time (seconds) whose step, plus the offset, turned the app on.
    set_up_at: u64,
}

impl App {
    fn code_at(&self, time: u64) -> String {
        self.totp.generate(time).to_string()
    }
}

/// Posts the form of `page` whose action contains `action`, with `changes`.
async fn submit(browser: &Browser, page: &Page, action: &str, changes: &[(&str, &str)]) -> Page {
    let mut fields = page.form(action);
    for (name, value) in changes {
        set(&mut fields, name, value);
    }
    let target = form_action(page, action);
    browser.post(&target, &fields).await
}

fn form_action(page: &Page, action: &str) -> String {
    let html = scraper::Html::parse_document(&page.body);
    let forms = scraper::Selector::parse("form").unwrap();
    html.select(&forms)
        .filter_map(|f| f.value().attr("action"))
        .find(|a| a.contains(action))
        .unwrap_or_else(|| panic!("no form posting to {action}"))
        .to_owned()
}

fn text_of(page: &Page, selector: &str) -> Vec<String> {
    let html = scraper::Html::parse_document(&page.body);
    let selector = scraper::Selector::parse(selector).unwrap();
    html.select(&selector)
        .map(|e| e.text().collect::<String>().trim().to_owned())
        .collect()
}

/// Sets up the authenticator app from the account page of a signed-in
/// browser, as a person would: the key from the page into the app, then the
/// app's code back.
async fn set_up_app(browser: &Browser, username: &str) -> App {
    set_up_app_at(browser, username, 0).await
}

/// As [`set_up_app`], confirming with the code of `offset` steps from now.
async fn set_up_app_at(browser: &Browser, username: &str, offset: i64) -> App {
    let account = browser.get("/account").await;
    assert_eq!(account.status, 200, "{}", account.body);
    let begun = submit(browser, &account, "/account/totp", &[]).await;
    assert_eq!(
        begun.location().as_deref(),
        Some("/account/totp"),
        "{}",
        begun.body
    );
    let setup = browser.get("/account/totp").await;
    assert_eq!(setup.status, 200, "{}", setup.body);
    let key = text_of(&setup, "#totp-secret")[0].replace(' ', "");
    let totp = Builder::new()
        .with_algorithm(Algorithm::SHA1)
        .with_digits(6)
        .with_skew(1)
        .with_step_duration(30)
        .with_secret(Secret::try_from_base32(&key).unwrap())
        .with_account_name(username)
        .build()
        .unwrap();
    let now = steady_now().await;
    let code = totp
        .generate(now.checked_add_signed(offset * 30).unwrap())
        .to_string();
    let confirmed = submit(browser, &setup, "/account/totp/confirm", &[("code", &code)]).await;
    assert_eq!(
        confirmed.location().as_deref(),
        Some("/account/recovery-codes"),
        "{}",
        confirmed.body
    );
    let shown = browser.get("/account/recovery-codes").await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    let recovery_codes = text_of(&shown, "ol.recovery-codes code");
    App {
        totp,
        recovery_codes,
        set_up_at: now,
    }
}

/// The second step of a sign-in: the code on the second-factor page.
async fn second_step(browser: &Browser, code: &str) -> Page {
    let page = browser.get("/signin/second-factor").await;
    assert_eq!(page.status, 200, "{}", page.body);
    submit(
        browser,
        &page,
        "/signin/second-factor",
        &[("second_factor", code)],
    )
    .await
}

/// A fresh browser signed in with the password and `code`.
async fn sign_in_with_code(app: &TestApp, f: &Fixture, code: &str) -> (Browser, Page) {
    let browser = Browser::new(&app.origin);
    let answer = password_step(&browser, &f.username, PASSWORD).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/signin/second-factor"),
        "{}",
        answer.body
    );
    let answer = second_step(&browser, code).await;
    (browser, answer)
}

async fn a_user_sets_up_an_authenticator_app_from_a_qr_code_and_sees_ten_recovery_codes_once(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let account = browser.get("/account").await;
    let begun = submit(&browser, &account, "/account/totp", &[]).await;
    let setup = browser.get(&begun.location().unwrap()).await;
    // The QR code is drawn on the server, inline (the CSP allows no data URL),
    // and the key is there as text too.
    assert!(setup.body.contains("<svg"), "{}", setup.body);
    assert!(!setup.body.contains("<script"), "{}", setup.body);
    let key = text_of(&setup, "#totp-secret")[0].replace(' ', "");
    assert_eq!(key.len(), 32, "a 160-bit key in base32: {key}");
    assert!(setup
        .header("content-security-policy")
        .contains("default-src 'self'"));
    // A wrong code does not turn it on.
    let wrong = submit(
        &browser,
        &setup,
        "/account/totp/confirm",
        &[("code", "000000")],
    )
    .await;
    assert_eq!(wrong.location().as_deref(), Some("/account/totp"));
    drop(setup);

    let browser = signed_in(&app, &f).await;
    let app_codes = set_up_app(&browser, &f.username).await;
    assert_eq!(
        app_codes.recovery_codes.len(),
        10,
        "{:?}",
        app_codes.recovery_codes
    );
    for code in &app_codes.recovery_codes {
        assert!(
            code.len() == 19 && code.split('-').count() == 4,
            "XXXX-XXXX-XXXX-XXXX: {code}"
        );
    }
    // Shown once: the page does not show them again, even to a copied cookie.
    let again = browser.get("/account/recovery-codes").await;
    assert_eq!(again.status, 303);
    let account = browser.get("/account").await;
    assert!(account.text().contains("10 of 10 left"), "{}", account.body);
    assert!(!account.body.contains(&app_codes.recovery_codes[0]));
}

async fn the_totp_seed_is_kept_sealed_and_recovery_codes_only_as_digests(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let app_codes = set_up_app(&browser, &f.username).await;
    let seed = app_codes.totp.secret().as_ref().to_vec();
    let factors = app.store.factors(&f.user_id).await.unwrap();
    let sealed = hex::decode(&factors.totp.unwrap().secret_sealed).unwrap();
    assert!(!contains(&sealed, &seed[..8]), "the seed is in the clear");
    assert_eq!(factors.recovery_codes_left, 10);
    // The whole SQLite file (and its log): neither the seed nor a code.
    if backend == Backend::Sqlite {
        let path = app
            .db
            .url_string()
            .trim_start_matches("sqlite://")
            .to_owned();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend(std::fs::read(format!("{path}-wal")).unwrap_or_default());
        assert!(!contains(&bytes, &seed[..8]));
        let base32 = app_codes.totp.secret().to_base32();
        assert!(!contains(&bytes, base32.as_bytes()));
        for code in &app_codes.recovery_codes {
            assert!(!contains(&bytes, code.as_bytes()));
            assert!(!contains(&bytes, code.replace('-', "").as_bytes()));
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn signing_in_asks_for_a_code_after_the_password_and_starts_the_session_only_then(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;

    let browser = Browser::new(&app.origin);
    let answer = password_step(&browser, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    // A right password alone is no session.
    let account = browser.get("/account").await;
    assert_eq!(account.status, 303, "{}", account.body);
    assert!(account.location().unwrap().starts_with("/signin"));
    let page = browser.get("/signin/second-factor").await;
    assert!(page.text().contains("authenticator app"), "{}", page.body);
    let wrong = second_step(&browser, "123456").await;
    assert_eq!(wrong.location().as_deref(), Some("/signin/second-factor"));
    assert!(browser
        .get("/signin/second-factor")
        .await
        .text()
        .contains("not right"));
    // The set-up spent now's step: the next one (drift allowed).
    let code = app_codes.code_at(steady_now().await + 30);
    let answer = second_step(&browser, &code).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/account"),
        "{}",
        answer.body
    );
    assert_eq!(browser.get("/account").await.status, 200);
    // A wrong password never reaches the second step.
    let other = Browser::new(&app.origin);
    let answer = password_step(&other, &f.username, "not the password").await;
    assert!(
        answer.location().unwrap().starts_with("/signin?"),
        "{:?}",
        answer.location()
    );
    assert_eq!(other.get("/signin/second-factor").await.status, 303);
}

async fn a_code_is_accepted_once_and_with_one_step_of_drift_either_way(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    // One step behind is accepted (here to turn the app on) …
    let app_codes = set_up_app_at(&signed_in(&app, &f).await, &f.username, -1).await;
    // Steps counted from the set-up's, whenever the next requests arrive
    // (within the drift of the steps they name).
    let now = app_codes.set_up_at;
    // … once: that step is spent.
    let (_, answer) = sign_in_with_code(&app, &f, &app_codes.code_at(now - 30)).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    // One step ahead is accepted, once.
    let ahead = app_codes.code_at(now + 30);
    let (_, answer) = sign_in_with_code(&app, &f, &ahead).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/account"),
        "{}",
        answer.body
    );
    let (_, answer) = sign_in_with_code(&app, &f, &ahead).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    // Now's code came before the step used: it works no more either.
    let (_, answer) = sign_in_with_code(&app, &f, &app_codes.code_at(now)).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    // Three steps ahead is outside the drift.
    let (_, answer) = sign_in_with_code(&app, &f, &app_codes.code_at(now + 90)).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    // Two steps behind is outside it too (a fresh user, nothing spent).
    let g = fixture(&app).await;
    let browser = signed_in(&app, &g).await;
    let account = browser.get("/account").await;
    submit(&browser, &account, "/account/totp", &[]).await;
    let setup = browser.get("/account/totp").await;
    let key = text_of(&setup, "#totp-secret")[0].replace(' ', "");
    let totp = Builder::new()
        .with_secret(Secret::try_from_base32(&key).unwrap())
        .with_account_name(g.username.as_str())
        .build()
        .unwrap();
    let now = steady_now().await;
    let late = totp.generate(now - 60).to_string();
    let refused = submit(
        &browser,
        &setup,
        "/account/totp/confirm",
        &[("code", &late)],
    )
    .await;
    assert_eq!(refused.location().as_deref(), Some("/account/totp"));
}

async fn each_recovery_code_works_once_and_new_ones_replace_the_old(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;
    // In any letter case, with or without its dashes.
    let typed = app_codes.recovery_codes[0].to_lowercase().replace('-', "");
    let (browser, answer) = sign_in_with_code(&app, &f, &typed).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/account"),
        "{}",
        answer.body
    );
    let account = browser.get("/account").await;
    assert!(account.text().contains("9 of 10 left"), "{}", account.body);
    let (_, again) = sign_in_with_code(&app, &f, &app_codes.recovery_codes[0]).await;
    assert_eq!(again.location().as_deref(), Some("/signin/second-factor"));
    // New codes (this session used a factor just now: no step-up asked).
    let renewed = submit(&browser, &account, "/account/recovery-codes", &[]).await;
    assert_eq!(
        renewed.location().as_deref(),
        Some("/account/recovery-codes")
    );
    let shown = browser.get("/account/recovery-codes").await;
    let new_codes = text_of(&shown, "ol.recovery-codes code");
    assert_eq!(new_codes.len(), 10);
    let (_, old) = sign_in_with_code(&app, &f, &app_codes.recovery_codes[1]).await;
    assert_eq!(old.location().as_deref(), Some("/signin/second-factor"));
    let (_, new) = sign_in_with_code(&app, &f, &new_codes[0]).await;
    assert_eq!(new.location().as_deref(), Some("/account"));
}

async fn wrong_codes_are_throttled_per_account_and_address_without_locking_the_owner_out(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;
    let attacker = Browser::new(&app.origin);
    let answer = password_step(&attacker, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    for _ in 0..5 {
        let answer = second_step(&attacker, "000000").await;
        assert_eq!(answer.status, 303, "{}", answer.body);
    }
    let blocked = second_step(&attacker, &app_codes.code_at(steady_now().await + 30)).await;
    assert_eq!(blocked.status, 429, "{}", blocked.body);
    let retry_after: u64 = blocked.header("retry-after").parse().unwrap();
    assert!((1..=900).contains(&retry_after), "{retry_after}");
    // The owner, from another address, signs in at once.
    let owner = Browser::from(&app.origin, Some("127.0.0.2".parse().unwrap()));
    let answer = password_step(&owner, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    let answer = second_step(&owner, &app_codes.code_at(steady_now().await + 30)).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/account"),
        "{}",
        answer.body
    );
}

async fn the_authorize_endpoint_and_the_device_page_ask_for_the_second_factor_too(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;
    let browser = Browser::new(&app.origin);
    let url = f.authorize_url(&[("response_type", "code"), ("scope", "access_profile")]);
    let page = browser.get(&url).await;
    assert_eq!(page.status, 200);
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    let now = steady_now().await;
    let answer = second_step(&browser, &app_codes.code_at(now + 30)).await;
    let back = answer.location().unwrap();
    assert!(back.starts_with("/v1/oauth/authorize?"), "{back}");
    let consent = browser.get(&back).await;
    assert_eq!(consent.status, 200);
    assert!(consent.body.contains("decision"), "{}", consent.body);

    // /device sends the browser to sign in, with both steps, and back.
    let browser = Browser::new(&app.origin);
    let device = browser.get("/device").await;
    assert_eq!(device.status, 303);
    let signin = browser.get(&device.location().unwrap()).await;
    let answer = browser.sign_in(&signin, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    let answer = second_step(&browser, &app_codes.recovery_codes[0]).await;
    assert_eq!(answer.location().as_deref(), Some("/device"));
    assert_eq!(browser.get("/device").await.status, 200);
}

/// Sends a confirmation page's form back with a fresh code of the app.
async fn confirm_with_app(browser: &Browser, page: &Page, action: &str, app: &App) -> Page {
    let now = steady_now().await;
    submit(
        browser,
        page,
        action,
        &[("second_factor", &app.code_at(now + 30))],
    )
    .await
}

/// The confirmation page of a step-up: the same form again, with a code.
fn is_confirmation(page: &Page) -> bool {
    page.status == 200 && page.text().contains("Confirm it is you")
}

async fn sensitive_actions_ask_for_a_fresh_second_factor_and_then_carry_the_action_out(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(2)).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let app_codes = set_up_app(&browser, &f.username).await;
    // Within the window after the set-up, no confirmation is asked.
    let developer = browser.get("/developer").await;
    let token = submit(&browser, &developer, "/developer/token", &[]).await;
    assert_eq!(token.status, 303, "{}", token.body);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Past it: getting a personal token asks first.
    let developer = browser.get("/developer").await;
    let asked = submit(&browser, &developer, "/developer/token", &[]).await;
    assert!(is_confirmation(&asked), "{}", asked.body);
    assert!(
        asked.text().contains("personal access token"),
        "{}",
        asked.body
    );
    let wrong = submit(
        &browser,
        &asked,
        "/developer/token",
        &[("second_factor", "000000")],
    )
    .await;
    assert!(is_confirmation(&wrong) && wrong.text().contains("not right"));
    let done = confirm_with_app(&browser, &asked, "/developer/token", &app_codes).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let shown = browser.get(&done.location().unwrap()).await;
    assert!(
        shown.body.contains("tly_at_"),
        "the token is shown: {}",
        shown.body
    );
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Creating an app: the confirmation page carries the form's fields.
    let developer = browser.get("/developer").await;
    let fields = [
        ("name", "Step Up App"),
        ("description", "Made after a confirmation"),
        ("redirect_url", "https://stepup.example.com/cb"),
        ("site_url", "https://stepup.example.com"),
    ];
    let asked = submit(&browser, &developer, "/developer/apps", &fields).await;
    assert!(is_confirmation(&asked), "{}", asked.body);
    let carried = asked.form("/developer/apps");
    assert!(carried.contains(&("name".to_owned(), "Step Up App".to_owned())));
    let done = submit(
        &browser,
        &asked,
        "/developer/apps",
        &[("second_factor", &app_codes.recovery_codes[3])],
    )
    .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let app_page = browser.get(&done.location().unwrap()).await;
    assert!(app_page.text().contains("Step Up App"), "{}", app_page.body);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Changing the e-mail address asks too.
    let account = browser.get("/account").await;
    let asked = submit(
        &browser,
        &account,
        "/account/contact",
        &[("email", "new-address@example.com"), ("password", PASSWORD)],
    )
    .await;
    assert!(is_confirmation(&asked), "{}", asked.body);
}

async fn a_payment_over_the_step_up_amount_needs_a_fresh_factor_and_a_smaller_one_does_not(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(2)).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let app_codes = set_up_app(&browser, &f.username).await;
    crate::fixtures::person(app.store.as_ref(), "payee", "0").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pay = |amount: &'static str| {
        [
            ("kind", "pay"),
            ("to", "payee"),
            ("amount", amount),
            ("note", "lunch"),
        ]
    };
    let account = browser.get("/account").await;
    let small = submit(&browser, &account, "/account/payments", &pay("5.00")).await;
    assert_eq!(
        small.location().as_deref(),
        Some("/account#payments"),
        "{}",
        small.body
    );
    let account = browser.get("/account").await;
    let large = submit(&browser, &account, "/account/payments", &pay("15.00")).await;
    assert!(
        is_confirmation(&large),
        "{} {:?} {}",
        large.status,
        large.location(),
        large.text()
    );
    assert!(large.text().contains("send this payment"));
    // Nothing moved yet.
    let balance = crate::fixtures::balance_cents(app.store.as_ref(), &f.user_id).await;
    assert_eq!(balance, 2000);
    let done = confirm_with_app(&browser, &large, "/account/payments", &app_codes).await;
    assert_eq!(
        done.location().as_deref(),
        Some("/account#payments"),
        "{}",
        done.body
    );
    let balance = crate::fixtures::balance_cents(app.store.as_ref(), &f.user_id).await;
    assert_eq!(balance, 500);

    // Paying a request over the amount ("Pay it") asks too.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let asker = crate::fixtures::person(app.store.as_ref(), "asker", "0").await;
    let me = crate::fixtures::Person {
        id: f.user_id.clone(),
        token: String::new(),
    };
    tally::admin::deposit(app.store.as_ref(), &f.username, "20.00")
        .await
        .unwrap();
    let request = app.pay(&asker, &me, "-12.00").await;
    let request_id = request.ok()["payment"]["id"].as_str().unwrap().to_owned();
    let account = browser.get("/account").await;
    let path = format!("/account/payments/{request_id}");
    let mut fields = account.form(&path);
    set(&mut fields, "action", "approve");
    let asked = browser.post(&path, &fields).await;
    assert!(is_confirmation(&asked), "{} {}", asked.status, asked.text());
    assert!(asked.text().contains("pay this request"));
    let done = submit(
        &browser,
        &asked,
        &path,
        &[("second_factor", &app_codes.recovery_codes[0])],
    )
    .await;
    assert_eq!(
        done.location().as_deref(),
        Some("/account#payments"),
        "{}",
        done.body
    );
    let balance = crate::fixtures::balance_cents(app.store.as_ref(), &f.user_id).await;
    assert_eq!(balance, 500 + 2000 - 1200);
}

async fn a_session_signed_in_before_the_first_factor_was_added_must_step_up(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let earlier = signed_in(&app, &f).await;
    let app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;
    // The earlier session goes on (adding a factor does not end it) …
    let account = earlier.get("/account").await;
    assert_eq!(account.status, 200);
    // … but its sensitive actions ask for the factor.
    let asked = submit(
        &earlier,
        &account,
        "/account/password",
        &[
            ("current_password", PASSWORD),
            ("new_password", "a much longer passphrase 4 tally"),
        ],
    )
    .await;
    assert!(is_confirmation(&asked), "{}", asked.body);
    let done = confirm_with_app(&earlier, &asked, "/account/password", &app_codes).await;
    assert_eq!(
        done.location().as_deref(),
        Some("/account"),
        "{} {}",
        done.status,
        done.text()
    );
}

async fn the_confirmation_page_carries_typed_passwords_sealed_and_only_to_their_own_form(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let earlier = signed_in(&app, &f).await;
    let app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;
    let new_password = "a sealed passphrase 9 for tally";
    let account = earlier.get("/account").await;
    let asked = submit(
        &earlier,
        &account,
        "/account/password",
        &[
            ("current_password", PASSWORD),
            ("new_password", new_password),
        ],
    )
    .await;
    assert!(is_confirmation(&asked), "{}", asked.body);
    // Neither password is in the page as typed.
    assert!(!asked.body.contains(PASSWORD), "{}", asked.body);
    assert!(!asked.body.contains(new_password), "{}", asked.body);
    assert!(asked
        .form("/account/password")
        .iter()
        .any(|(name, value)| name == "sealed_fields" && !value.is_empty()));

    // Sent to another form, the sealed field is refused: it cannot carry a
    // password typed for one action into another.
    let mut replayed = asked.form("/account/password");
    set(&mut replayed, "email", "elsewhere@example.com");
    let refused = earlier.post("/account/contact", &replayed).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.text().contains("expired"), "{}", refused.body);
    // Tampered with, too.
    let mut tampered = asked.form("/account/password");
    for (name, value) in tampered.iter_mut() {
        if name == "sealed_fields" {
            let flipped = if value.ends_with('0') { '1' } else { '0' };
            value.pop();
            value.push(flipped);
        }
    }
    let refused = earlier.post("/account/password", &tampered).await;
    assert_eq!(refused.status, 400, "{}", refused.body);

    // With the code, the confirmation carries the change out.
    let done = confirm_with_app(&earlier, &asked, "/account/password", &app_codes).await;
    assert_eq!(
        done.location().as_deref(),
        Some("/account"),
        "{}",
        done.body
    );
    let answer = password_step(&Browser::new(&app.origin), &f.username, new_password).await;
    assert_eq!(
        answer.location().as_deref(),
        Some("/signin/second-factor"),
        "{}",
        answer.body
    );
}

async fn changing_the_password_needs_the_current_one_and_ends_the_other_sessions(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let here = signed_in(&app, &f).await;
    let elsewhere = signed_in(&app, &f).await;
    let new_password = "a much longer passphrase 4 tally";
    let account = here.get("/account").await;
    let wrong = submit(
        &here,
        &account,
        "/account/password",
        &[
            ("current_password", "not my password"),
            ("new_password", new_password),
        ],
    )
    .await;
    assert_eq!(wrong.location().as_deref(), Some("/account#password"));
    let account = here.get("/account").await;
    assert!(
        account.text().contains("not your current password"),
        "{}",
        account.body
    );
    let weak = submit(
        &here,
        &account,
        "/account/password",
        &[
            ("current_password", PASSWORD),
            ("new_password", "password1"),
        ],
    )
    .await;
    assert_eq!(weak.location().as_deref(), Some("/account#password"));
    let account = here.get("/account").await;
    let changed = submit(
        &here,
        &account,
        "/account/password",
        &[
            ("current_password", PASSWORD),
            ("new_password", new_password),
        ],
    )
    .await;
    assert_eq!(
        changed.location().as_deref(),
        Some("/account"),
        "{}",
        changed.body
    );
    // This session goes on; the other one has ended.
    assert_eq!(here.get("/account").await.status, 200);
    assert_eq!(elsewhere.get("/account").await.status, 303);
    // The old password no longer signs in; the new one does.
    let answer = password_step(&Browser::new(&app.origin), &f.username, PASSWORD).await;
    assert!(answer.location().unwrap().starts_with("/signin?"));
    let answer = password_step(&Browser::new(&app.origin), &f.username, new_password).await;
    assert_eq!(answer.location().as_deref(), Some("/account"));
}

async fn removing_the_last_factor_needs_the_password_and_a_code(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    let app_codes = set_up_app(&browser, &f.username).await;
    let account = browser.get("/account").await;
    assert!(
        account.body.contains("totp_remove_password"),
        "{}",
        account.body
    );
    // The password alone is not enough.
    let refused = submit(
        &browser,
        &account,
        "/account/totp/remove",
        &[("password", PASSWORD), ("second_factor", "")],
    )
    .await;
    assert_eq!(refused.status, 303);
    let account = browser.get("/account").await;
    assert!(
        account.text().contains("needs your password and a code"),
        "{}",
        account.body
    );
    // A code without the right password neither.
    let refused = submit(
        &browser,
        &account,
        "/account/totp/remove",
        &[
            ("password", "wrong"),
            ("second_factor", &app_codes.recovery_codes[0]),
        ],
    )
    .await;
    assert_eq!(refused.status, 303);
    let account = browser.get("/account").await;
    assert!(
        account.text().contains("not your password"),
        "{}",
        account.body
    );
    let removed = submit(
        &browser,
        &account,
        "/account/totp/remove",
        &[
            ("password", PASSWORD),
            ("second_factor", &app_codes.recovery_codes[1]),
        ],
    )
    .await;
    assert_eq!(removed.status, 303);
    let account = browser.get("/account").await;
    assert!(
        account.text().contains("authenticator app is off"),
        "{}",
        account.body
    );
    // Signing in is one step again.
    let answer = password_step(&Browser::new(&app.origin), &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/account"));
}

async fn the_operator_removes_every_factor_of_a_user_who_lost_them(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    set_up_app(&signed_in(&app, &f).await, &f.username).await;
    let url = app.db.url_string();
    let mut env = vec![("TALLY_DATABASE_URL", url.as_str())];
    if backend == Backend::Postgres {
        env.push(("TALLY_SECRET_KEY", POSTGRES_SECRET_KEY));
    }
    let run = tally_with_env(
        &env,
        &["admin", "--json", "user", "reset-factors", &f.username],
    );
    assert!(run.status.success(), "{} {}", run.stdout, run.stderr);
    assert_eq!(
        run.json(),
        serde_json::json!({"username": f.username, "factors_removed": 1})
    );
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(lines[0].contains(&f.username), "{}", run.stderr);
    let answer = password_step(&Browser::new(&app.origin), &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/account"));
    // An unknown user is an error.
    let run = tally_with_env(
        &env,
        &["admin", "--json", "user", "reset-factors", "nobody"],
    );
    assert!(!run.status.success());
    assert_eq!(run.json()["error"]["code"], "not_found", "{}", run.stdout);
}

async fn authorize_with_factor(
    app: &TestApp,
    f: &Fixture,
    app_codes: &App,
    extra: &[(&str, &str)],
) -> serde_json::Value {
    let browser = Browser::new(&app.origin);
    let url = crate::oidc_flow::oidc_url(f, "openid", extra);
    let page = browser.get(&url).await;
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    let code = app_codes.recovery_codes.last().unwrap().clone();
    let answer = second_step(&browser, &code).await;
    let consent = browser.get(&answer.location().unwrap()).await;
    // A consent given before is remembered: straight back to the app.
    let answer = if consent.status == 303 {
        consent
    } else {
        browser.decide(&consent, "allow").await
    };
    let query = query_of(&answer.location().unwrap());
    let body = crate::oidc_flow::exchange(app, f, &query["code"]).await;
    let (_, claims) = crate::oidc_flow::verify(app, f, body["id_token"].as_str().unwrap()).await;
    claims
}

async fn id_tokens_name_the_methods_used_and_acr_values_mfa_gives_acr_mfa(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    let mut app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;
    let claims = authorize_with_factor(&app, &f, &app_codes, &[]).await;
    assert_eq!(claims["amr"], serde_json::json!(["pwd", "otp", "mfa"]));
    assert!(claims.get("acr").is_none(), "{claims}");
    app_codes.recovery_codes.pop();
    let claims = authorize_with_factor(&app, &f, &app_codes, &[("acr_values", "mfa")]).await;
    assert_eq!(claims["acr"], "mfa", "{claims}");
    assert_eq!(claims["amr"], serde_json::json!(["pwd", "otp", "mfa"]));
}

async fn acr_values_mfa_makes_a_password_only_session_give_its_second_factor(backend: Backend) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(300)).await else {
        return;
    };
    // Signed in with the password before the factor was added.
    let browser = signed_in(&app, &f).await;
    let quiet = signed_in(&app, &f).await;
    let app_codes = set_up_app(&signed_in(&app, &f).await, &f.username).await;
    let url = crate::oidc_flow::oidc_url(&f, "openid", &[("acr_values", "mfa")]);
    let page = browser.get(&url).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("name=\"password\""),
        "sign in again: {}",
        page.body
    );
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.location().as_deref(), Some("/signin/second-factor"));
    let answer = second_step(&browser, &app_codes.recovery_codes[0]).await;
    let consent = browser.get(&answer.location().unwrap()).await;
    let answer = browser.decide(&consent, "allow").await;
    let query = query_of(&answer.location().unwrap());
    let body = crate::oidc_flow::exchange(&app, &f, &query["code"]).await;
    let (_, claims) = crate::oidc_flow::verify(&app, &f, body["id_token"].as_str().unwrap()).await;
    assert_eq!(claims["acr"], "mfa", "{claims}");
    // With prompt=none the same request fails rather than asking.
    let url =
        crate::oidc_flow::oidc_url(&f, "openid", &[("acr_values", "mfa"), ("prompt", "none")]);
    let answer = quiet.get(&url).await;
    let query = query_of(&answer.location().unwrap());
    assert_eq!(query["error"], "login_required", "{query:?}");
}

async fn the_phone_a_secret_rotation_and_new_recovery_codes_ask_for_a_fresh_factor_too(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend, Duration::from_secs(2)).await else {
        return;
    };
    let browser = signed_in(&app, &f).await;
    set_up_app(&browser, &f.username).await;
    // Within the window after the set-up: an app is made without a question.
    let developer = browser.get("/developer").await;
    let made = submit(
        &browser,
        &developer,
        "/developer/apps",
        &[
            ("name", "Rotating App"),
            ("description", "Its secret is rotated later"),
            ("redirect_url", "https://rotate.example.com/cb"),
            ("site_url", "https://rotate.example.com"),
        ],
    )
    .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let app_path = made.location().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;

    let app_page = browser.get(&app_path).await;
    let asked = submit(&browser, &app_page, "/secret", &[]).await;
    assert!(is_confirmation(&asked), "rotating a secret: {}", asked.body);
    let account = browser.get("/account").await;
    let asked = submit(
        &browser,
        &account,
        "/account/contact",
        &[("phone", "2125550199"), ("password", PASSWORD)],
    )
    .await;
    assert!(
        is_confirmation(&asked),
        "changing the phone: {}",
        asked.body
    );
    let asked = submit(&browser, &account, "/account/recovery-codes", &[]).await;
    assert!(
        is_confirmation(&asked),
        "new recovery codes: {}",
        asked.body
    );
}
