//! People with tokens and money, and a small HTTP client for the REST API.

use crate::helpers::TestApp;
use reqwest::Method;
use serde_json::Value;
use tally::domain::{new_id, now_micros, Amount, ScopeSet};
use tally::store::{NewUser, Store, UserFlags};

pub const ALL_SCOPES: &str = "make_payments access_profile access_balance access_email \
    access_phone access_friends access_payment_history access_feed";

/// A user with a personal access token.
#[derive(Debug, Clone)]
pub struct Person {
    pub id: String,
    pub token: String,
}

#[derive(Default)]
pub struct PersonSpec<'a> {
    pub email: Option<&'a str>,
    pub phone: Option<&'a str>,
    pub verified: bool,
    pub balance: Option<&'a str>,
    /// Space-separated; all scopes when `None`.
    pub scopes: Option<&'a str>,
    pub first_name: Option<&'a str>,
}

pub async fn person_with(store: &dyn Store, username: &str, spec: PersonSpec<'_>) -> Person {
    let user = store
        .insert_user(&NewUser {
            id: new_id(),
            username: username.to_owned(),
            first_name: spec.first_name.unwrap_or("First").to_owned(),
            last_name: "Last".to_owned(),
            about: format!("about {username}"),
            email: spec.email.map(str::to_owned),
            phone: spec.phone.map(str::to_owned),
            password_hash: "$argon2id$not-a-real-hash".to_owned(),
            verified: spec.verified,
            date_joined: now_micros(),
        })
        .await
        .unwrap();
    if let Some(balance) = spec.balance {
        tally::ledger::deposit(store, &user.id, Amount::parse_positive(balance).unwrap())
            .await
            .unwrap();
    }
    Person {
        token: token(store, &user.id, spec.scopes.unwrap_or(ALL_SCOPES)).await,
        id: user.id,
    }
}

/// A verified user with all scopes and the given balance.
pub async fn person(store: &dyn Store, username: &str, balance: &str) -> Person {
    person_with(
        store,
        username,
        PersonSpec {
            verified: true,
            balance: (balance != "0").then_some(balance),
            ..Default::default()
        },
    )
    .await
}

pub async fn token(store: &dyn Store, user_id: &str, scopes: &str) -> String {
    tally::oauth::tokens::issue_personal_access_token(
        store,
        user_id,
        &ScopeSet::parse(scopes).unwrap(),
    )
    .await
    .unwrap()
    .expose()
    .to_owned()
}

pub async fn suspend(store: &dyn Store, user_id: &str) {
    store
        .update_user_flags(
            user_id,
            UserFlags {
                suspended: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

pub async fn balance_cents(store: &dyn Store, user_id: &str) -> i64 {
    store
        .find_user(tally::store::UserKey::Id(user_id))
        .await
        .unwrap()
        .unwrap()
        .balance_cents
}

pub async fn audit_ok(store: &dyn Store) -> tally::ledger::audit::AuditReport {
    let report = tally::ledger::audit::run(store).await.unwrap();
    assert!(report.ok, "audit failed: {:?}", report.discrepancies);
    report
}

/// A JSON answer: status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    /// The body as sent, to check that money is written exactly (`12.50`).
    pub text: String,
    pub headers: reqwest::header::HeaderMap,
}

impl Answer {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    #[track_caller]
    pub fn ok(&self) -> &Value {
        assert_eq!(self.status, 200, "{}", self.body);
        &self.body["data"]
    }

    #[track_caller]
    pub fn error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "expected {status} {code}, got {}",
            self.body
        );
        assert!(self.body["error"]["message"].is_string(), "{}", self.body);
    }
}

/// Sends a request to `origin` + `/v1` + `path`: the token as a Bearer header,
/// the body as JSON.
pub async fn call(
    http: &reqwest::Client,
    origin: &str,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let url = if path.starts_with("http") {
        path.to_owned()
    } else {
        format!("{origin}/v1{path}")
    };
    let mut request = http.request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not JSON ({e}), status {status}: {text:?}"));
    Answer {
        status,
        body,
        text,
        headers,
    }
}

impl TestApp {
    pub async fn get(&self, path: &str, token: &str) -> Answer {
        call(
            &self.http,
            &self.origin,
            Method::GET,
            path,
            Some(token),
            None,
        )
        .await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Answer {
        call(
            &self.http,
            &self.origin,
            Method::POST,
            path,
            Some(token),
            Some(body),
        )
        .await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> Answer {
        call(
            &self.http,
            &self.origin,
            Method::PUT,
            path,
            Some(token),
            Some(body),
        )
        .await
    }

    /// Pays (positive amount) or charges (negative) a user by id.
    pub async fn pay(&self, from: &Person, to: &Person, amount: &str) -> Answer {
        self.post(
            "/payments",
            &from.token,
            serde_json::json!({"user_id": to.id, "amount": amount, "note": "test"}),
        )
        .await
    }

    /// Waits (boundedly) until the payment has the status.
    pub async fn wait_for_status(&self, token: &str, payment_id: &str, status: &str) -> Value {
        for _ in 0..100 {
            let answer = self.get(&format!("/payments/{payment_id}"), token).await;
            if answer.ok()["status"] == status {
                return answer.body["data"].clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("payment {payment_id} never became {status}");
    }
}
