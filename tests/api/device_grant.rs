//! The device authorization grant (RFC 8628, SPEC §10) over HTTP: a device
//! asks for codes, a person enters the user code at `/device` (real Chromium
//! and a scripted browser) and answers on the consent page, and the device
//! polls the token endpoint (raw requests and the `oauth2` crate's device
//! flow) until it gets its tokens, once.

use crate::browser::{set, Browser, Page};
use crate::helpers::{on_both_backends, Backend, ServeProcess, TestApp, TestDb};
use crate::oauth::{introspect, token_request};
use crate::oauth_fixture::{fixture, Fixture, PASSWORD};
use crate::real_browser::{ChromeDriver, Person};
use oauth2::basic::BasicClient;
use oauth2::{
    ClientId, ClientSecret, DeviceAuthorizationUrl, Scope, StandardDeviceAuthorizationResponse,
    TokenResponse, TokenUrl,
};
use serde_json::{json, Value};
use std::time::Duration;
use tally::oauth::device::GRANT_TYPE;

on_both_backends!(
    a_device_gets_its_tokens_once_its_user_allows_it_at_the_device_page_in_chromium,
    the_device_authorization_answers_the_codes_and_where_to_enter_them,
    the_codes_are_stored_only_as_digests,
    a_poll_before_anyone_answered_is_authorization_pending,
    polling_faster_than_the_interval_is_slow_down_and_the_interval_grows_by_five_seconds,
    the_user_code_is_read_in_lower_case_without_the_dash_and_the_tokens_work,
    the_verification_uri_complete_fills_in_the_code_after_signing_in,
    a_denied_request_answers_access_denied,
    an_expired_device_code_answers_expired_token_and_its_user_code_is_refused,
    a_device_code_gives_tokens_once_even_to_simultaneous_polls,
    a_device_whose_authorization_was_revoked_before_its_poll_gets_access_denied,
    the_app_a_device_was_allowed_is_listed_on_the_account_page_and_revocable,
    wrong_user_codes_are_throttled_per_session_and_per_client_ip,
    bad_client_authentication_is_refused_at_both_endpoints,
    bad_device_requests_answer_rfc_6749_errors,
    an_openid_device_grant_answers_an_id_token_and_userinfo,
    expired_device_codes_are_purged_a_day_after_they_expire,
    device_codes_and_user_codes_never_become_metrics_labels,
);

const DEVICE_AUTHORIZATION: &str = "/v1/oauth/device_authorization";

/// `POST /oauth/device_authorization` with HTTP Basic client authentication.
async fn device_authorization(app: &TestApp, f: &Fixture, scope: &str) -> (u16, Value) {
    let response = app
        .http
        .post(app.url(DEVICE_AUTHORIZATION))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("scope", scope)])
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A device's request that succeeded: its answer.
async fn start(app: &TestApp, f: &Fixture, scope: &str) -> Value {
    let (status, body) = device_authorization(app, f, scope).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The device's poll of the token endpoint, authenticated with form fields.
async fn poll(app: &TestApp, f: &Fixture, device_code: &str) -> (u16, Value) {
    token_request(
        app,
        &[
            ("grant_type", GRANT_TYPE),
            ("device_code", device_code),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await
}

/// A poll that must be refused with `error`.
async fn poll_refused(app: &TestApp, f: &Fixture, device_code: &str, error: &str) -> Value {
    let (status, body) = poll(app, f, device_code).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some(error)),
        "{body}"
    );
    body
}

fn code_of(answer: &Value) -> (String, String) {
    (
        answer["device_code"].as_str().unwrap().to_owned(),
        answer["user_code"].as_str().unwrap().to_owned(),
    )
}

/// A browser signed in as the fixture's user, from `local_address`.
async fn signed_in(app: &TestApp, f: &Fixture, local_address: Option<&str>) -> Browser {
    let browser = Browser::from(&app.origin, local_address.map(|a| a.parse().unwrap()));
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    browser
}

/// Enters a code at `/device`; the answer (a 303, or the 429 page).
async fn enter(browser: &Browser, typed: &str) -> Page {
    let page = browser.get("/device").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut fields = page.form("/device");
    set(&mut fields, "user_code", typed);
    browser.post("/device", &fields).await
}

/// Enters a code and answers the consent page with `decision`; returns the
/// `/device` page shown afterwards.
async fn answer(browser: &Browser, typed: &str, decision: &str) -> Page {
    let entered = enter(browser, typed).await;
    assert_eq!(entered.status, 303, "{}", entered.body);
    assert_eq!(entered.location().unwrap(), "/device/consent");
    let consent = browser.get("/device/consent").await;
    assert_eq!(consent.status, 200, "{}", consent.body);
    let mut fields = consent.form("/device/consent");
    fields.push(("decision".to_owned(), decision.to_owned()));
    let decided = browser.post("/device/consent", &fields).await;
    assert_eq!(decided.status, 303, "{}", decided.body);
    assert_eq!(decided.location().unwrap(), "/device");
    browser.get("/device").await
}

/// Allows a device's request in a fresh signed-in browser.
async fn allow(app: &TestApp, f: &Fixture, user_code: &str) {
    let browser = signed_in(app, f, None).await;
    let done = answer(&browser, user_code, "allow").await;
    assert!(done.text().contains("Done: Splitter"), "{}", done.body);
}

async fn spawn(backend: Backend) -> Option<(TestApp, Fixture)> {
    let app = TestApp::spawn(backend).await?;
    let f = fixture(&app).await;
    Some((app, f))
}

async fn me(app: &TestApp, token: &str) -> (u16, Value) {
    let response = app
        .http
        .get(app.url("/v1/me"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Moves every device code's last poll `seconds` into the past, as if the
/// device had waited that long.
async fn wait_as_if(app: &TestApp, seconds: i64) {
    crate::store_conformance::tamper(
        &app.db,
        &format!(
            "UPDATE device_codes SET last_polled_at = last_polled_at - {}",
            seconds * 1_000_000
        ),
    )
    .await;
}

/// The rows of a query whose columns are all text.
async fn text_rows(db: &TestDb, sql: &str) -> Vec<Vec<String>> {
    use sqlx::{Connection, Row};
    match &db.url {
        tally::config::DatabaseUrl::Sqlite(url) => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query(sql)
                .fetch_all(&mut conn)
                .await
                .unwrap()
                .iter()
                .map(|row| (0..row.len()).map(|i| row.get::<String, _>(i)).collect())
                .collect()
        }
        tally::config::DatabaseUrl::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query(sql)
                .fetch_all(&mut conn)
                .await
                .unwrap()
                .iter()
                .map(|row| (0..row.len()).map(|i| row.get::<String, _>(i)).collect())
                .collect()
        }
    }
}

/// A user and an app in the database of a `tally serve` process.
async fn seed(db: &TestDb) -> Fixture {
    let store = db.store().await;
    let username = format!("dev{}", &tally::domain::new_id()[24..]);
    let user = tally::admin::user_add(
        store.as_ref(),
        &tally::auth::password::PasswordHasher::new(2),
        tally::admin::UserAdd {
            username: username.clone(),
            password: PASSWORD.to_owned(),
            verified: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let created = tally::admin::app_add(
        store.as_ref(),
        tally::admin::AppAdd {
            owner: username.clone(),
            name: "Terminal Splitter".to_owned(),
            redirect_url: "https://app.example.com/callback".to_owned(),
            description: Some("Splits bills from a terminal".to_owned()),
            site_url: None,
        },
    )
    .await
    .unwrap();
    Fixture {
        user_id: user.id,
        username,
        client_id: created.client_id,
        client_secret: created.client_secret,
        redirect_url: "https://app.example.com/callback".to_owned(),
    }
}

async fn a_device_gets_its_tokens_once_its_user_allows_it_at_the_device_page_in_chromium(
    backend: Backend,
) {
    let Some(driver) = ChromeDriver::start().await else {
        return;
    };
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let server = ServeProcess::start(&db.url_string(), &[]);
    let origin = server.origin.clone();
    let f = seed(&db).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // The device asks, through the oauth2 crate's device flow.
    let client = BasicClient::new(ClientId::new(f.client_id.clone()))
        .set_client_secret(ClientSecret::new(f.client_secret.clone()))
        .set_device_authorization_url(
            DeviceAuthorizationUrl::new(format!("{origin}{DEVICE_AUTHORIZATION}")).unwrap(),
        )
        .set_token_uri(TokenUrl::new(format!("{origin}/v1/oauth/access_token")).unwrap());
    let details: StandardDeviceAuthorizationResponse = client
        .exchange_device_code()
        .add_scope(Scope::new("access_profile".to_owned()))
        .add_scope(Scope::new("access_balance".to_owned()))
        .request_async(&http)
        .await
        .unwrap();
    let user_code = details.user_code().secret().clone();
    let device_code = details.device_code().secret().clone();
    assert_eq!(
        details.verification_uri().as_str(),
        format!("{origin}/device")
    );
    assert_eq!(details.expires_in(), Duration::from_secs(600));
    assert_eq!(details.interval(), Duration::from_secs(5));

    // Nobody has answered yet.
    let raw_poll = |http: reqwest::Client| {
        let (url, f, device_code) = (
            format!("{origin}/v1/oauth/access_token"),
            f.clone(),
            device_code.clone(),
        );
        async move {
            let response = http
                .post(url)
                .form(&[
                    ("grant_type", GRANT_TYPE),
                    ("device_code", device_code.as_str()),
                    ("client_id", f.client_id.as_str()),
                    ("client_secret", f.client_secret.as_str()),
                ])
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, pending) = raw_poll(http.clone()).await;
    assert_eq!(
        (status, pending["error"].as_str()),
        (400, Some("authorization_pending")),
        "{pending}"
    );

    // The device polls on as the crate does (the interval first, then at its
    // pace, slowing down when told), while the person answers in Chromium.
    let device = {
        let http = http.clone();
        let details = details.clone();
        tokio::spawn(async move {
            tokio::time::sleep(details.interval()).await;
            client
                .exchange_device_access_token(&details)
                .request_async(&http, tokio::time::sleep, Some(Duration::from_secs(120)))
                .await
        })
    };
    let shots = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut person = Person {
        client: driver.browser().await,
        origin: origin.clone(),
        shots,
        taken: 0,
    };
    // The address the device shows: signing in first, then back to it.
    person.open("/device").await;
    assert!(person.sees("Sign in to Tally").await);
    person.fill("username", &f.username).await;
    person.fill("password", PASSWORD).await;
    person
        .click("form[action='/signin'] button[type=submit]")
        .await;
    assert!(person.sees("Connect a device").await);
    assert_eq!(person.path().await, "/device");
    person.look(&format!("device-{backend:?}")).await;
    person.fill("user_code", &user_code).await;
    person
        .click("form[action='/device'] button[type=submit]")
        .await;
    assert!(person.sees("A device is asking").await);
    assert!(person.sees("Terminal Splitter").await);
    assert!(person.sees(&user_code).await);
    assert!(person.sees("access_balance").await);
    person.look(&format!("device-consent-{backend:?}")).await;
    person.click("button[name=decision][value=allow]").await;
    assert!(person.sees("Done: Terminal Splitter").await);
    person.look(&format!("device-done-{backend:?}")).await;

    // The crate's poll ends with the server-side flow's 60-day tokens.
    let token = device.await.unwrap().unwrap();
    let access = token.access_token().secret().clone();
    assert!(access.starts_with("tly_at_"));
    assert!(token
        .refresh_token()
        .unwrap()
        .secret()
        .starts_with("tly_rt_"));
    assert_eq!(token.expires_in(), Some(Duration::from_secs(5_184_000)));
    let me = http
        .get(format!("{origin}/v1/me"))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 200);
    let me: Value = me.json().await.unwrap();
    assert_eq!(me["data"]["user"]["username"], f.username.as_str());

    // The device code worked once.
    let (status, again) = raw_poll(http.clone()).await;
    assert_eq!(
        (status, again["error"].as_str()),
        (400, Some("invalid_grant")),
        "{again}"
    );
    person.client.close().await.unwrap();
    let log = server.stop();
    assert!(
        !log.contains(&device_code),
        "the device code reached the log"
    );
    assert!(!log.contains(&access), "the access token reached the log");
}

async fn the_device_authorization_answers_the_codes_and_where_to_enter_them(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let response = app
        .http
        .post(app.url(DEVICE_AUTHORIZATION))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("scope", "access_profile+access_balance")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().await.unwrap();
    let keys: std::collections::BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "device_code",
            "expires_in",
            "interval",
            "user_code",
            "verification_uri",
            "verification_uri_complete"
        ]
        .into()
    );
    let (device_code, user_code) = code_of(&body);
    // 256 random bits behind the type prefix and the issue time.
    let random = device_code.strip_prefix("tly_device_").unwrap();
    assert_eq!(random.len(), 14 + 64);
    assert!(random.bytes().all(|b| b.is_ascii_hexdigit()));
    // Eight letters of BCDFGHJKLMNPQRSTVWXZ, shown XXXX-XXXX.
    assert_eq!(user_code.len(), 9, "{user_code}");
    assert_eq!(&user_code[4..5], "-");
    assert!(user_code
        .bytes()
        .filter(|b| *b != b'-')
        .all(|b| b"BCDFGHJKLMNPQRSTVWXZ".contains(&b)));
    assert_eq!(body["verification_uri"], app.url("/device"));
    assert_eq!(
        body["verification_uri_complete"],
        app.url(&format!("/device?user_code={user_code}"))
    );
    assert_eq!(body["expires_in"], 600);
    assert_eq!(body["interval"], 5);

    // Client credentials in the body work too; each request has its codes.
    let response = app
        .http
        .post(app.url(DEVICE_AUTHORIZATION))
        .form(&[
            ("scope", "access_profile"),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let other: Value = response.json().await.unwrap();
    assert_ne!(code_of(&other).0, device_code);
    assert_ne!(code_of(&other).1, user_code);
    // So does a JSON body, as at the token endpoint.
    let response = app
        .http
        .post(app.url(DEVICE_AUTHORIZATION))
        .json(&json!({"scope": "access_profile", "client_id": f.client_id, "client_secret": f.client_secret}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

async fn the_codes_are_stored_only_as_digests(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile").await);
    let rows = text_rows(
        &app.db,
        "SELECT digest, user_code_digest, client_id, scopes FROM device_codes",
    )
    .await;
    assert_eq!(rows.len(), 1);
    let letters = user_code.replace('-', "");
    use sha2::Digest;
    assert_eq!(
        rows[0],
        [
            tally::oauth::credentials::digest(&device_code),
            hex::encode(sha2::Sha256::digest(letters.as_bytes())),
            f.client_id.clone(),
            "access_profile".to_owned(),
        ]
    );
    for column in &rows[0] {
        assert!(!column.contains(&device_code[11..]), "{column}");
        assert!(!column.contains(&letters), "{column}");
    }
}

async fn a_poll_before_anyone_answered_is_authorization_pending(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, _) = code_of(&start(&app, &f, "access_profile").await);
    let pending = poll_refused(&app, &f, &device_code, "authorization_pending").await;
    assert!(pending["error_description"].is_string());
    // Waiting the interval, the device is told the same again.
    wait_as_if(&app, 5).await;
    poll_refused(&app, &f, &device_code, "authorization_pending").await;
}

async fn polling_faster_than_the_interval_is_slow_down_and_the_interval_grows_by_five_seconds(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, _) = code_of(&start(&app, &f, "access_profile").await);
    poll_refused(&app, &f, &device_code, "authorization_pending").await;
    let slow = poll_refused(&app, &f, &device_code, "slow_down").await;
    assert!(
        slow["error_description"]
            .as_str()
            .unwrap()
            .contains("10 seconds"),
        "{slow}"
    );
    // Six seconds would have done before; now the interval is ten, and
    // polling early again makes it fifteen.
    wait_as_if(&app, 6).await;
    let slower = poll_refused(&app, &f, &device_code, "slow_down").await;
    assert!(
        slower["error_description"]
            .as_str()
            .unwrap()
            .contains("15 seconds"),
        "{slower}"
    );
    wait_as_if(&app, 14).await;
    poll_refused(&app, &f, &device_code, "slow_down").await;
    // Keeping to the interval: pending again, and the interval stays.
    wait_as_if(&app, 20).await;
    poll_refused(&app, &f, &device_code, "authorization_pending").await;
    wait_as_if(&app, 19).await;
    poll_refused(&app, &f, &device_code, "slow_down").await;
    // Another device code keeps its own interval of five seconds.
    let (other, _) = code_of(&start(&app, &f, "access_profile").await);
    poll_refused(&app, &f, &other, "authorization_pending").await;
    wait_as_if(&app, 5).await;
    poll_refused(&app, &f, &other, "authorization_pending").await;
}

async fn the_user_code_is_read_in_lower_case_without_the_dash_and_the_tokens_work(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile access_balance").await);
    let browser = signed_in(&app, &f, None).await;
    let typed = user_code.replace('-', "").to_lowercase();
    let entered = enter(&browser, &typed).await;
    assert_eq!(entered.status, 303, "{}", entered.body);
    assert_eq!(entered.location().unwrap(), "/device/consent");
    // The consent page names the app and its scopes, says a device asks and
    // shows the code to compare with the device's.
    let consent = browser.get("/device/consent").await;
    assert_eq!(consent.status, 200, "{}", consent.body);
    let text = consent.text();
    for needle in [
        "Allow Splitter",
        "A device is asking",
        user_code.as_str(),
        "access_profile",
        "access_balance",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    assert!(!text.contains("You will be sent back"), "{text}");
    assert!(consent
        .header("content-security-policy")
        .contains("form-action 'self';"));
    let mut fields = consent.form("/device/consent");
    fields.push(("decision".to_owned(), "allow".to_owned()));
    let decided = browser.post("/device/consent", &fields).await;
    assert_eq!(decided.status, 303);
    let done = browser.get("/device").await;
    assert!(done.text().contains("Done: Splitter"), "{}", done.body);

    let (status, tokens) = poll(&app, &f, &device_code).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["token_type"], "bearer");
    assert_eq!(tokens["expires_in"], 5_184_000);
    assert_eq!(tokens["scope"], "access_profile access_balance");
    assert_eq!(tokens["balance"], 25.0);
    assert_eq!(tokens["user"]["username"], f.username.as_str());
    assert!(tokens.get("id_token").is_none(), "{tokens}");
    let access = tokens["access_token"].as_str().unwrap();
    let (status, body) = me(&app, access).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["balance"], 25.0);
    // The refresh token refreshes like the code flow's.
    let (status, refreshed) = token_request(
        &app,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", tokens["refresh_token"].as_str().unwrap()),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(status, 200, "{refreshed}");
    // A consent to a device approves nothing else: the code flow still asks.
    let authorize = f.authorize_url(&[
        ("response_type", "code"),
        ("scope", "access_profile access_balance"),
    ]);
    let page = browser.get(&authorize).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.text().contains("Allow"), "{}", page.body);
}

async fn the_verification_uri_complete_fills_in_the_code_after_signing_in(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let answer = start(&app, &f, "access_profile").await;
    let (_, user_code) = code_of(&answer);
    let complete = answer["verification_uri_complete"].as_str().unwrap();
    let browser = Browser::new(&app.origin);
    let first = browser.get(complete).await;
    assert_eq!(first.status, 303);
    let to_sign_in = first.location().unwrap();
    assert!(to_sign_in.starts_with("/signin?return_to="), "{to_sign_in}");
    let page = browser.get(&to_sign_in).await;
    let signed_in = browser.sign_in(&page, &f.username, PASSWORD).await;
    assert_eq!(signed_in.status, 303);
    let back = signed_in.location().unwrap();
    assert_eq!(back, format!("/device?user_code={user_code}"));
    let device = browser.get(&back).await;
    assert_eq!(device.status, 200);
    let fields = device.form("/device");
    assert!(
        fields.contains(&("user_code".to_owned(), user_code.clone())),
        "{fields:?}"
    );
    // Still the person's to confirm: nothing is allowed by the link alone.
    let confirmed = browser.post("/device", &fields).await;
    assert_eq!(confirmed.location().unwrap(), "/device/consent");
    // A code typed in lower case in the link is shown as the device shows it.
    let lower = browser
        .get(&format!(
            "/device?user_code={}",
            user_code.to_lowercase().replace('-', "")
        ))
        .await;
    assert!(lower
        .form("/device")
        .contains(&("user_code".to_owned(), user_code.clone())));
}

async fn a_denied_request_answers_access_denied(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile").await);
    let browser = signed_in(&app, &f, None).await;
    let done = answer(&browser, &user_code, "deny").await;
    assert!(done.text().contains("Denied: Splitter"), "{}", done.body);
    poll_refused(&app, &f, &device_code, "access_denied").await;
    poll_refused(&app, &f, &device_code, "access_denied").await;
    // An answered code cannot be entered again.
    let again = enter(&browser, &user_code).await;
    assert_eq!(again.location().unwrap(), "/device");
    assert!(browser
        .get("/device")
        .await
        .text()
        .contains("That code is not right"));
    // Nothing was granted: the account page lists no app.
    let account = browser.get("/account").await;
    assert!(!account.text().contains("Splitter"), "{}", account.body);
}

async fn an_expired_device_code_answers_expired_token_and_its_user_code_is_refused(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile").await);
    poll_refused(&app, &f, &device_code, "authorization_pending").await;
    crate::store_conformance::tamper(&app.db, "UPDATE device_codes SET expires_at = 1").await;
    let expired = poll_refused(&app, &f, &device_code, "expired_token").await;
    assert!(expired["error_description"]
        .as_str()
        .unwrap()
        .contains("expired"));
    let browser = signed_in(&app, &f, None).await;
    let entered = enter(&browser, &user_code).await;
    assert_eq!(entered.location().unwrap(), "/device");
    assert!(browser
        .get("/device")
        .await
        .text()
        .contains("That code is not right, or it has expired"));

    // Allowed, then expired before the device polled: expired_token too.
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile").await);
    let entered = enter(&browser, &user_code).await;
    assert_eq!(entered.location().unwrap(), "/device/consent");
    let consent = browser.get("/device/consent").await;
    // It expires while the consent page is open: Allow says so.
    crate::store_conformance::tamper(&app.db, "UPDATE device_codes SET expires_at = 1").await;
    let mut fields = consent.form("/device/consent");
    fields.push(("decision".to_owned(), "allow".to_owned()));
    browser.post("/device/consent", &fields).await;
    let page = browser.get("/device").await;
    assert!(
        page.text().contains("That code has expired"),
        "{}",
        page.body
    );
    poll_refused(&app, &f, &device_code, "expired_token").await;
}

async fn a_device_code_gives_tokens_once_even_to_simultaneous_polls(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile").await);
    allow(&app, &f, &user_code).await;
    let url = app.url("/v1/oauth/access_token");
    let polls: Vec<_> = (0..8)
        .map(|_| {
            let form = [
                ("grant_type".to_owned(), GRANT_TYPE.to_owned()),
                ("device_code".to_owned(), device_code.clone()),
                ("client_id".to_owned(), f.client_id.clone()),
                ("client_secret".to_owned(), f.client_secret.clone()),
            ];
            let url = url.clone();
            tokio::spawn(async move {
                let response = reqwest::Client::new()
                    .post(url)
                    .form(&form)
                    .send()
                    .await
                    .unwrap();
                (
                    response.status().as_u16(),
                    response.json::<Value>().await.unwrap(),
                )
            })
        })
        .collect();
    let mut answers = Vec::new();
    for handle in polls {
        answers.push(handle.await.unwrap());
    }
    let issued: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| *status == 200)
        .map(|(_, body)| body)
        .collect();
    assert_eq!(issued.len(), 1, "{answers:?}");
    for (status, body) in answers.iter().filter(|(status, _)| *status != 200) {
        assert_eq!(
            (*status, body["error"].as_str()),
            (400, Some("invalid_grant"))
        );
    }
    // A late poll is refused too; as with a reused code, whatever the code
    // gave is revoked.
    poll_refused(&app, &f, &device_code, "invalid_grant").await;
    let access = issued[0]["access_token"].as_str().unwrap();
    assert_eq!(introspect(&app, &f, access).await, json!({"active": false}));
}

async fn a_device_whose_authorization_was_revoked_before_its_poll_gets_access_denied(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile").await);
    let browser = signed_in(&app, &f, None).await;
    answer(&browser, &user_code, "allow").await;
    let account = browser.get("/account").await;
    let revoke = format!("/account/apps/{}/revoke", f.client_id);
    let revoked = browser.post(&revoke, &account.form(&revoke)).await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    let refused = poll_refused(&app, &f, &device_code, "access_denied").await;
    assert!(refused["error_description"]
        .as_str()
        .unwrap()
        .contains("revoked"));
    poll_refused(&app, &f, &device_code, "invalid_grant").await;
}

async fn the_app_a_device_was_allowed_is_listed_on_the_account_page_and_revocable(
    backend: Backend,
) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (device_code, user_code) = code_of(&start(&app, &f, "access_profile").await);
    let browser = signed_in(&app, &f, None).await;
    answer(&browser, &user_code, "allow").await;
    let (status, tokens) = poll(&app, &f, &device_code).await;
    assert_eq!(status, 200, "{tokens}");
    let access = tokens["access_token"].as_str().unwrap();
    assert_eq!(me(&app, access).await.0, 200);
    let account = browser.get("/account").await;
    assert!(account.text().contains("Splitter"), "{}", account.body);
    let revoke = format!("/account/apps/{}/revoke", f.client_id);
    let revoked = browser.post(&revoke, &account.form(&revoke)).await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    assert_eq!(me(&app, access).await.0, 401);
    assert_eq!(
        introspect(&app, &f, tokens["refresh_token"].as_str().unwrap()).await,
        json!({"active": false})
    );
}

async fn wrong_user_codes_are_throttled_per_session_and_per_client_ip(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (_, user_code) = code_of(&start(&app, &f, "access_profile").await);
    // Wrong codes: a well-formed one nobody was given, and a malformed one.
    let wrong = if user_code == "BBBB-BBBB" {
        "CCCC-CCCC"
    } else {
        "BBBB-BBBB"
    };
    // Signed in first, so that the wrong codes below come within seconds.
    let first = signed_in(&app, &f, None).await;
    let second = signed_in(&app, &f, None).await;
    let third = signed_in(&app, &f, None).await;
    let elsewhere = signed_in(&app, &f, Some("127.0.0.2")).await;
    for typed in [wrong, wrong, "no such code", wrong, wrong] {
        let answer = enter(&first, typed).await;
        assert_eq!(answer.location().unwrap(), "/device", "{}", answer.body);
        assert!(first
            .get("/device")
            .await
            .text()
            .contains("That code is not right"));
    }
    // Five wrong codes in this session: the sixth attempt, even the right
    // code, is not looked up.
    let held = enter(&first, &user_code).await;
    assert_eq!(held.status, 429, "{}", held.body);
    let retry_after: u64 = held.header("retry-after").parse().unwrap();
    assert!((1..=13).contains(&retry_after), "{retry_after}");
    assert!(
        held.text().contains("Too many wrong codes"),
        "{}",
        held.body
    );
    assert!(held.text().contains(&format!("Wait {retry_after} seconds")));

    // Another session on the same address still has its own five, until the
    // address has had ten.
    for _ in 0..5 {
        let answer = enter(&second, wrong).await;
        assert_eq!(answer.status, 303, "{}", answer.body);
    }
    let held = enter(&third, &user_code).await;
    assert_eq!(held.status, 429, "{}", held.body);
    assert!(held.text().contains("Too many wrong codes"));

    // From another address, the right code goes through.
    let entered = enter(&elsewhere, &user_code.to_lowercase()).await;
    assert_eq!(entered.location().unwrap(), "/device/consent");
}

async fn bad_client_authentication_is_refused_at_both_endpoints(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let request = |form: Vec<(&'static str, String)>| {
        app.http
            .post(app.url(DEVICE_AUTHORIZATION))
            .form(&form)
            .send()
    };
    let scope = || ("scope", "access_profile".to_owned());
    for (case, form) in [
        ("no client", vec![scope()]),
        (
            "no secret",
            vec![scope(), ("client_id", f.client_id.clone())],
        ),
        (
            "wrong secret",
            vec![
                scope(),
                ("client_id", f.client_id.clone()),
                ("client_secret", "tly_secret_wrong".to_owned()),
            ],
        ),
        (
            "unknown client",
            vec![
                scope(),
                ("client_id", "no-such-app".to_owned()),
                ("client_secret", f.client_secret.clone()),
            ],
        ),
    ] {
        let response = request(form).await.unwrap();
        assert_eq!(response.status(), 401, "{case}");
        assert!(
            response.headers().contains_key("www-authenticate"),
            "{case}"
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_client", "{case}");
    }
    let response = app
        .http
        .post(app.url(DEVICE_AUTHORIZATION))
        .basic_auth(&f.client_id, Some("tly_secret_wrong"))
        .form(&[("scope", "access_profile")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.headers()["www-authenticate"],
        r#"Basic realm="tally""#
    );

    // At the token endpoint: the code's own app, authenticated.
    let (device_code, _) = code_of(&start(&app, &f, "access_profile").await);
    let (status, body) = token_request(
        &app,
        &[
            ("grant_type", GRANT_TYPE),
            ("device_code", &device_code),
            ("client_id", &f.client_id),
            ("client_secret", "tly_secret_wrong"),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );
    let (status, body) = token_request(
        &app,
        &[("grant_type", GRANT_TYPE), ("device_code", &device_code)],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );
    // Another app's credentials: the code is unknown to it, and left as it was.
    let other = crate::oauth_fixture::fixture(&app).await;
    poll_refused(&app, &other, &device_code, "invalid_grant").await;
    poll_refused(&app, &f, &device_code, "authorization_pending").await;
    // A suspended app is refused at both endpoints.
    tally::admin::app_suspend(app.store.as_ref(), &f.client_id, true)
        .await
        .unwrap();
    let (status, body) = device_authorization(&app, &f, "access_profile").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );
    let (status, body) = poll(&app, &f, &device_code).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );
}

async fn bad_device_requests_answer_rfc_6749_errors(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    // Scopes are read as at authorize: required, known; openid is one.
    for (scope, error) in [
        ("", "invalid_scope"),
        ("access_profile no_such_scope", "invalid_scope"),
    ] {
        let (status, body) = device_authorization(&app, &f, scope).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some(error)),
            "{scope}: {body}"
        );
        assert!(body["error_description"].is_string());
    }
    assert_eq!(device_authorization(&app, &f, "openid").await.0, 200);
    assert_eq!(
        device_authorization(&app, &f, "openid,profile,access_feed")
            .await
            .0,
        200
    );
    let response = app
        .http
        .post(app.url(&format!("{DEVICE_AUTHORIZATION}?scope=access_profile")))
        .basic_auth(&f.client_id, Some(&f.client_secret))
        .form(&[("scope", "access_profile")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request");
    // GET is not how a device asks.
    let response = app
        .http
        .get(app.url(DEVICE_AUTHORIZATION))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);

    // The token endpoint: the device code is required, unknown ones are
    // invalid_grant.
    let (status, body) = token_request(
        &app,
        &[
            ("grant_type", GRANT_TYPE),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_request")),
        "{body}"
    );
    for unknown in ["tly_device_nothing", "", "not a code"] {
        let (status, body) = poll(&app, &f, unknown).await;
        let expected = if unknown.is_empty() {
            "invalid_request"
        } else {
            "invalid_grant"
        };
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some(expected)),
            "{unknown}"
        );
    }
    let (status, body) = token_request(
        &app,
        &[
            ("grant_type", "device_code"),
            ("device_code", "tly_device_x"),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("unsupported_grant_type")),
        "{body}"
    );
}

async fn an_openid_device_grant_answers_an_id_token_and_userinfo(backend: Backend) {
    let Some(app) = crate::oidc::spawn_oidc(backend).await else {
        return;
    };
    let f = fixture(&app).await;
    let before = tally::domain::now_micros() / 1_000_000;
    let (device_code, user_code) = code_of(&start(&app, &f, "openid profile").await);
    allow(&app, &f, &user_code).await;
    let (status, tokens) = poll(&app, &f, &device_code).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["scope"], "openid profile");
    let id_token = tokens["id_token"].as_str().expect("an id_token");
    let access = tokens["access_token"].as_str().unwrap();
    let (header, claims) = crate::oidc_flow::verify(&app, &f, id_token).await;
    assert_eq!(header["alg"], "RS256");
    assert_eq!(claims["sub"], f.user_id.as_str());
    assert_eq!(claims["aud"], f.client_id.as_str());
    assert_eq!(claims["amr"], json!(["pwd"]));
    assert!(claims.get("nonce").is_none(), "{claims}");
    assert!(claims["sid"].is_string());
    let auth_time = claims["auth_time"].as_i64().unwrap();
    assert!(auth_time >= before - 1 && auth_time <= claims["iat"].as_i64().unwrap());
    use sha2::Digest;
    let digest = sha2::Sha256::digest(access.as_bytes());
    use base64::Engine;
    assert_eq!(
        claims["at_hash"],
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16])
    );
    let userinfo: Value = app
        .http
        .get(app.url("/v1/oauth/userinfo"))
        .bearer_auth(access)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(userinfo["sub"], f.user_id.as_str());
    assert_eq!(userinfo["preferred_username"], f.username.as_str());
    // Its refresh answers an ID token with the first auth_time.
    let (status, refreshed) = token_request(
        &app,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", tokens["refresh_token"].as_str().unwrap()),
            ("client_id", &f.client_id),
            ("client_secret", &f.client_secret),
        ],
    )
    .await;
    assert_eq!(status, 200, "{refreshed}");
    let (_, again) =
        crate::oidc_flow::verify(&app, &f, refreshed["id_token"].as_str().unwrap()).await;
    assert_eq!(again["auth_time"], auth_time);
}

async fn expired_device_codes_are_purged_a_day_after_they_expire(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let (_, user_code) = code_of(&start(&app, &f, "access_profile").await);
    start(&app, &f, "access_profile").await;
    allow(&app, &f, &user_code).await;
    let count = || text_rows(&app.db, "SELECT CAST(COUNT(*) AS TEXT) FROM device_codes");
    let now = tally::domain::now_micros();
    tally::workers::purge(app.store.as_ref(), now)
        .await
        .unwrap();
    assert_eq!(count().await, [["2"]]);
    // Ten minutes and a day later.
    tally::workers::purge(app.store.as_ref(), now + 601_000_000 + 86_400_000_000)
        .await
        .unwrap();
    assert_eq!(count().await, [["0"]]);
}

async fn device_codes_and_user_codes_never_become_metrics_labels(backend: Backend) {
    let Some((app, f)) = spawn(backend).await else {
        return;
    };
    let browser = signed_in(&app, &f, None).await;
    let send = |n: usize| {
        let (app, f, browser) = (&app, &f, &browser);
        async move {
            device_authorization(app, f, "access_profile").await;
            poll(app, f, &format!("tly_device_{n}")).await;
            browser.get(&format!("/device?user_code=BCDF-{n}")).await;
            browser.get("/device/consent").await;
        }
    };
    send(0).await;
    // Once, so that `/metrics`' own series exists too.
    crate::edge_bounds::series(&app).await;
    let before = crate::edge_bounds::series(&app).await;
    for n in 1..=20 {
        send(n).await;
    }
    let after = crate::edge_bounds::series(&app).await;
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(new.is_empty(), "new series: {new:#?}");
    assert!(
        after.iter().any(|s| s.contains(r#"endpoint="/device""#)),
        "{after:#?}"
    );
}
