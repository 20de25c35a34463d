//! Second factors in a real browser (SPEC §11): headless Chromium through
//! WebDriver against `tally serve`, with WebDriver's virtual authenticator
//! (WebAuthn Level 2 §11) standing in for a phone's passkey. A screenshot of
//! each new page at phone size lands in `target/screenshots/factors/`.

use crate::helpers::{tally_with_env, Backend, ServeProcess, TestDb};
use crate::real_browser::{ChromeDriver, Person};
use fantoccini::wd::WebDriverCompatibleCommand;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// A command of WebDriver's WebAuthn extension, under the session's URL.
#[derive(Debug)]
struct WebAuthn {
    path: String,
    body: Option<Value>,
}

impl WebDriverCompatibleCommand for WebAuthn {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/webauthn/{}",
            session_id.unwrap_or_default(),
            self.path
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (reqwest::Method, Option<String>) {
        match &self.body {
            Some(body) => (reqwest::Method::POST, Some(body.to_string())),
            None => (reqwest::Method::GET, None),
        }
    }
}

fn totp_of(key: &str, username: &str) -> totp_rs::Totp {
    totp_rs::Builder::new()
        .with_secret(totp_rs::Secret::try_from_base32(key.replace(' ', "")).unwrap())
        .with_account_name(username)
        .build()
        .unwrap()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_adds_an_authenticator_app_and_a_passkey_and_signs_in_with_them_in_chromium() {
    let Some(driver) = ChromeDriver::start().await else {
        return;
    };
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let public_url = format!("http://localhost:{port}");
    let server = ServeProcess::start(
        &db.url_string(),
        &[
            ("TALLY_LISTEN", listen.as_str()),
            ("TALLY_PUBLIC_URL", public_url.as_str()),
            ("TALLY_STEP_UP_WINDOW", "4s"),
        ],
    );
    assert_eq!(server.origin, public_url);
    let username = format!("kim{}", &tally::domain::new_id()[26..]);
    let password = "lantern orchard 42 gravel";
    let added = tally_with_env(
        &[("TALLY_DATABASE_URL", &db.url_string())],
        &[
            "admin",
            "user",
            "add",
            "--username",
            &username,
            "--password",
            password,
            "--first-name",
            "Kim",
            "--last-name",
            "Park",
            "--verified",
        ],
    );
    assert!(added.status.success(), "{}", added.stderr);
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots/factors");
    std::fs::create_dir_all(&shots).unwrap();
    let mut person = Person {
        client: driver.browser().await,
        origin: server.origin.clone(),
        shots,
        taken: 0,
    };
    // A platform authenticator that keeps discoverable credentials and
    // verifies its user (as a phone's fingerprint reader does).
    let authenticator = person
        .client
        .issue_cmd(WebAuthn {
            path: "authenticator".to_owned(),
            body: Some(json!({
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": true,
                "hasUserVerification": true,
                "isUserVerified": true,
                "automaticPresenceSimulation": true,
            })),
        })
        .await
        .expect("a virtual authenticator");
    let authenticator = authenticator.as_str().unwrap().to_owned();

    // Sign in with the password.
    person.open("/signin").await;
    assert!(person.sees("Sign in with a passkey").await);
    person.look("signin-with-passkey").await;
    person.fill("username", &username).await;
    person.fill("password", password).await;
    person
        .click("form[action='/signin'] button[type=submit]")
        .await;
    assert!(person.sees("Sign-in security").await);

    // The authenticator app: its key as a QR code and as text.
    person.open("/account#security").await;
    person.look("account-security").await;
    person
        .click("form[action='/account/totp'] button[type=submit]")
        .await;
    assert!(person.sees("Set up an authenticator app").await);
    person.look("totp-setup").await;
    let key = person.text_of("totp-secret").await;
    let totp = totp_of(&key, &username);
    if 30 - now_secs() % 30 <= 3 {
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    person
        .fill("code", &totp.generate(now_secs()).to_string())
        .await;
    person
        .click("form[action='/account/totp/confirm'] button[type=submit]")
        .await;
    assert!(person.sees("Your recovery codes").await);
    person.look("recovery-codes").await;

    // A passkey, through the page's script and the virtual authenticator.
    person.open("/account#security").await;
    person.fill("passkey_name", "This phone").await;
    person.click(".js-passkey-add").await;
    assert!(person.sees("This phone").await);
    person.look("account-with-passkey").await;
    let credentials = person
        .client
        .issue_cmd(WebAuthn {
            path: format!("authenticator/{authenticator}/credentials"),
            body: None,
        })
        .await
        .unwrap();
    assert_eq!(
        credentials.as_array().map(Vec::len),
        Some(1),
        "{credentials}"
    );
    assert_eq!(
        credentials[0]["isResidentCredential"], true,
        "{credentials}"
    );

    // Signing in again: the password, then the passkey.
    person.click("form[action='/signout'] button").await;
    assert!(person.sees("Sign in to Tally").await);
    person.fill("username", &username).await;
    person.fill("password", password).await;
    person
        .click("form[action='/signin'] button[type=submit]")
        .await;
    assert!(person.sees("One more step").await);
    assert!(person.sees("Use a passkey").await);
    person.look("second-factor").await;
    person.click(".js-passkey-sign-in").await;
    assert!(person.sees("Sign-in security").await);
    assert_eq!(person.path().await, "/account");

    // Signing in with the passkey alone.
    person.click("form[action='/signout'] button").await;
    assert!(person.sees("Sign in to Tally").await);
    person.click(".js-passkey-sign-in").await;
    assert!(person.sees("Sign-in security").await);
    assert_eq!(person.path().await, "/account");

    // Step-up: past the window, changing the password asks first, then
    // carries the change out.
    tokio::time::sleep(Duration::from_secs(5)).await;
    person.open("/account#password").await;
    person.fill("current_password", password).await;
    person
        .fill("new_password", "another lantern 77 for gravel")
        .await;
    person
        .click("form[action='/account/password'] button[type=submit]")
        .await;
    assert!(person.sees("Confirm it is you").await);
    person.look("step-up").await;
    if 30 - now_secs() % 30 <= 3 {
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    person
        .fill("second_factor", &totp.generate(now_secs() + 30).to_string())
        .await;
    person
        .click("#second-factor-form button[type=submit]")
        .await;
    assert!(person.sees("Your password is changed").await);
    person.look("password-changed").await;

    person.client.close().await.unwrap();
    let log = server.stop();
    assert!(!log.contains(password), "the password reached the log");
    assert!(
        !log.contains(&key.replace(' ', "")),
        "the TOTP key reached the log"
    );
}
