//! The pages as people use them: headless Chromium, driven through WebDriver
//! (chromedriver), against the real `tally serve` binary. A phone-sized window
//! (375x812) checks that no page needs sideways scrolling; a screenshot of each
//! page lands in `target/screenshots/` for a person to look at.
//!
//! Under `CI=true` a missing Chromium or chromedriver fails the test; elsewhere
//! the test prints `SKIPPED` and passes.

use crate::helpers::{Backend, ServeProcess, TestDb};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const CHROMIUM: &[&str] = &["/usr/bin/chromium", "/usr/bin/chromium-browser"];
const CHROMEDRIVER: &[&str] = &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"];
const WIDTH: u32 = 375;
const HEIGHT: u32 = 812;

fn first_existing(candidates: &[&str]) -> Option<PathBuf> {
    candidates.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// chromedriver on a free port of 127.0.0.1, killed when dropped.
pub(crate) struct ChromeDriver {
    child: Child,
    url: String,
    chromium: PathBuf,
    _profile: tempfile::TempDir,
}

impl ChromeDriver {
    /// `None` (after printing `SKIPPED`) when the browser is missing outside CI.
    pub(crate) async fn start() -> Option<Self> {
        let (Some(chromium), Some(driver)) =
            (first_existing(CHROMIUM), first_existing(CHROMEDRIVER))
        else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("chromium and chromium-driver must be installed under CI=true (.ci/run installs them)");
            }
            eprintln!("SKIPPED: chromium or chromedriver is not installed, so the real-browser test did not run");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        for _ in 0..100 {
            if let Ok(response) = http.get(format!("{url}/status")).send().await {
                if response.status().is_success() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(Self {
            child,
            url,
            chromium,
            _profile: tempfile::tempdir().unwrap(),
        })
    }

    pub(crate) async fn browser(&self) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": self.chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-background-networking",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-component-update",
                    "--disable-sync",
                    format!("--user-data-dir={}", self._profile.path().display()),
                    format!("--window-size={WIDTH},{HEIGHT}"),
                ],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a Chromium session through chromedriver");
        client
            .set_window_size(WIDTH, HEIGHT)
            .await
            .expect("a phone-sized window");
        client
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Drives one browser through the pages, saving screenshots as it goes.
pub(crate) struct Person {
    pub(crate) client: Client,
    pub(crate) origin: String,
    pub(crate) shots: PathBuf,
    pub(crate) taken: usize,
}

impl Person {
    pub(crate) async fn open(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.origin))
            .await
            .unwrap();
    }

    pub(crate) async fn fill(&self, id: &str, value: &str) {
        let field = self.client.find(Locator::Id(id)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    pub(crate) async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"))
            .click()
            .await
            .unwrap();
    }

    pub(crate) async fn text(&self) -> String {
        let body = self
            .client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("body"))
            .await
            .unwrap();
        body.text().await.unwrap_or_default()
    }

    /// Waits for the page (which may still be loading after a click) to say `needle`.
    pub(crate) async fn sees(&self, needle: &str) -> bool {
        for _ in 0..100 {
            if self.text().await.contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("the page never said {needle:?}: {}", self.text().await);
        false
    }

    pub(crate) async fn text_of(&self, id: &str) -> String {
        self.client
            .find(Locator::Id(id))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .trim()
            .to_owned()
    }

    pub(crate) async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_owned()
    }

    /// Saves a screenshot and checks the page fits a phone's width.
    pub(crate) async fn look(&mut self, name: &str) {
        self.taken += 1;
        let png = self.client.screenshot().await.unwrap();
        let file = self.shots.join(format!("{:02}-{name}.png", self.taken));
        std::fs::write(&file, png).unwrap();
        let width = self
            .client
            .execute("return document.documentElement.scrollWidth;", vec![])
            .await
            .unwrap();
        let width = width.as_u64().unwrap_or(u64::MAX);
        assert!(
            width <= u64::from(WIDTH),
            "{name} is {width}px wide on a {WIDTH}px screen"
        );
    }
}

/// The link the log mailer wrote for `address`, waiting a little for it.
async fn logged_link(server: &ServeProcess, address: &str) -> String {
    for _ in 0..100 {
        let found = server.log().lines().find_map(|line| {
            let entry: Value = serde_json::from_str(line).ok()?;
            let fields = &entry["fields"];
            let message = fields["message"].as_str()?;
            (message.starts_with(tally::mailer::LOG_MARKER) && fields["to"] == address)
                .then(|| fields["link"].as_str().map(str::to_owned))
                .flatten()
        });
        if let Some(link) = found {
            return link;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {} line for {address}", tally::mailer::LOG_MARKER);
}

async fn introspect(origin: &str, client_id: &str, secret: &str, token: &str) -> Value {
    reqwest::Client::new()
        .post(format!("{origin}/v1/oauth/introspect"))
        .basic_auth(client_id, Some(secret))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_up_registers_an_app_allows_it_and_revokes_it_in_chromium() {
    let Some(driver) = ChromeDriver::start().await else {
        return;
    };
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let server = ServeProcess::start(&db.url_string(), &[]);
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut person = Person {
        client: driver.browser().await,
        origin: server.origin.clone(),
        shots,
        taken: 0,
    };
    let username = format!("ann{}", &tally::domain::new_id()[26..]);
    let email = format!("{username}@example.com");
    let password = "plum vessel orbit 97 quietly";

    // Sign up.
    person.open("/signup").await;
    person.look("signup").await;
    person.fill("username", &username).await;
    person.fill("first_name", "Ann").await;
    person.fill("last_name", "Lee").await;
    person.fill("email", &email).await;
    person.fill("phone", "(212) 555-0187").await;
    person.fill("password", password).await;
    person.fill("password_confirm", password).await;
    person
        .click("form[action='/signup'] button[type=submit]")
        .await;
    assert!(person.sees("Not verified yet").await);
    assert_eq!(person.path().await, "/account");
    person.look("account-unverified").await;
    person.open("/developer").await;
    assert!(person.sees("Only verified accounts").await);
    person.look("developer-unverified").await;

    // Verify with the link the server logged, then the phone's link too.
    let link = logged_link(&server, &email).await;
    assert!(link.starts_with(&format!("{}/verify?token=tly_verify_", server.origin)));
    person.client.goto(&link).await.unwrap();
    person.look("verify").await;
    person
        .click("form[action='/verify'] button[type=submit]")
        .await;
    assert!(person.sees("your address is verified").await);
    person.look("verified").await;
    let phone_link = logged_link(&server, "+12125550187").await;
    person.client.goto(&phone_link).await.unwrap();
    person
        .click("form[action='/verify'] button[type=submit]")
        .await;
    assert!(person.sees("your address is verified").await);

    // Register an app whose redirect URL is Tally's own demo callback.
    person.open("/developer").await;
    person.look("developer").await;
    person.fill("name", "Browser Splitter").await;
    person
        .fill("description", "Splits bills in a real browser")
        .await;
    let redirect_url = format!("{}/demo/callback", server.origin);
    person.fill("redirect_url", &redirect_url).await;
    person.fill("site_url", "splitter.example.com").await;
    person
        .click("form[action='/developer/apps'] button[type=submit]")
        .await;
    assert!(person.sees("shown only this once").await);
    assert!(person.path().await.starts_with("/developer/apps/"));
    let client_id = person.text_of("client-id").await;
    let client_secret = person.text_of("client-secret").await;
    assert!(client_secret.starts_with("tly_secret_"));
    person.look("app-created").await;
    person.client.refresh().await.unwrap();
    assert!(person.sees("Rotate it to get a new one").await);
    assert!(!person.text().await.contains(&client_secret));

    // Sign out, then start the app's authorize URL: sign in, allow.
    person.click("form[action='/signout'] button").await;
    assert!(person.sees("Sign in to Tally").await);
    assert_eq!(person.path().await, "/signin");
    person
        .open(&format!(
            "/v1/oauth/authorize?client_id={client_id}&scope=access_profile+access_balance&response_type=token&state=xyz"
        ))
        .await;
    assert!(person.sees("Browser Splitter").await);
    person.look("signin").await;
    person.fill("username", &username).await;
    person.fill("password", password).await;
    person
        .click("form[action='/signin'] button[type=submit]")
        .await;
    assert!(person.sees("access_balance").await);
    person.look("consent").await;
    person.click("button[name=decision][value=allow]").await;
    assert!(person.sees("The demo app received").await);
    let landed = person.client.current_url().await.unwrap();
    assert_eq!(landed.path(), "/demo/callback");
    let query: std::collections::HashMap<String, String> = landed
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    assert_eq!(query["state"], "xyz");
    let token = query["access_token"].clone();
    person.look("callback").await;
    let active = introspect(&server.origin, &client_id, &client_secret, &token).await;
    assert_eq!(active["active"], true, "{active}");
    assert_eq!(active["username"], username.as_str());

    // Revoke the app on the account page: the token is refused.
    // The fragment scrolls the screenshot to the list of apps.
    person.open("/account#apps").await;
    assert!(person.sees("Browser Splitter").await);
    person.look("account-apps").await;
    person
        .click(&format!(
            "form[action='/account/apps/{client_id}/revoke'] button"
        ))
        .await;
    assert!(
        person
            .sees("Browser Splitter can no longer use your account")
            .await
    );
    person.look("account-revoked").await;
    assert_eq!(
        introspect(&server.origin, &client_id, &client_secret, &token).await,
        json!({"active": false})
    );

    person.client.close().await.unwrap();
    let log = server.stop();
    assert!(
        !log.contains(&client_secret),
        "the client secret reached the log"
    );
    assert!(!log.contains(password), "the password reached the log");
}
