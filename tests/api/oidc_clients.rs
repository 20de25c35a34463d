//! "Sign in with Tally" with relying-party libraries nobody here wrote, used
//! as their documentation says with only URLs and credentials changed:
//! Authlib's Flask client (PyPI) and openid-client 6 (npm). Each runs as a
//! child process (tests/oidc-clients/): it prints its authorization URL, this
//! test plays the person in the browser (sign-in, consent), hands it the URL
//! the browser was sent back to, and reads what it validated.
//!
//! `.ci/run` installs them: Authlib into `target/oidc-clients-venv`, and
//! openid-client with `npm ci` in `tests/oidc-clients`. Under `CI=true` a
//! missing one fails the test; elsewhere it is skipped with a message.

use crate::browser::Browser;
use crate::helpers::{on_both_backends, Backend, TestApp};
use crate::oauth_fixture::{fixture_with_redirect, Fixture, PASSWORD};
use crate::oidc::{admin, spawn_oidc};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

on_both_backends!(
    authlib_signs_in_with_tally_and_reads_userinfo,
    openid_client_signs_in_with_tally_reads_userinfo_and_signs_out,
    openid_client_validates_an_eddsa_id_token,
);

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc-clients")
}

/// A tool the test needs is missing: a failure under CI, a skip elsewhere.
fn missing(what: &str) -> Option<Command> {
    let message =
        format!("{what} is not installed (see .ci/run: the OpenID Connect clients' install step)");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message}: under CI=true this test never skips");
    }
    eprintln!("SKIPPED: {message}");
    None
}

fn works(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `python authlib_client.py`, from the venv `.ci/run` makes (or
/// `TALLY_OIDC_PYTHON`).
fn authlib() -> Option<Command> {
    let python = std::env::var("TALLY_OIDC_PYTHON").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/oidc-clients-venv/bin/python"),
        PathBuf::from,
    );
    if !works(Command::new(&python).args(["-c", "import authlib, flask, requests"])) {
        return missing(&format!("Authlib (with Flask) for {}", python.display()));
    }
    let mut command = Command::new(python);
    command.arg(clients_dir().join("authlib_client.py"));
    Some(command)
}

/// `node openid_client.mjs`, with openid-client from `npm ci`.
fn openid_client() -> Option<Command> {
    if !works(Command::new("node").arg("--version")) {
        return missing("node");
    }
    if !clients_dir()
        .join("node_modules/openid-client/package.json")
        .exists()
    {
        return missing("openid-client (npm ci in tests/oidc-clients)");
    }
    let mut command = Command::new("node");
    command.current_dir(clients_dir()).arg("openid_client.mjs");
    Some(command)
}

/// Runs a client through one sign-in: returns the person's browser (signed
/// in) and what the client printed last (its validated claims and userinfo).
async fn sign_in_with(
    mut client: Command,
    app: &TestApp,
    f: &Fixture,
    extra: &[&str],
) -> (Browser, Value) {
    let mut child = client
        .args([
            app.origin.as_str(),
            &f.client_id,
            &f.client_secret,
            &f.redirect_url,
        ])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
        text
    });
    let authorize_url = match lines_rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            panic!(
                "the client printed no authorization URL: {}",
                errors.join().unwrap()
            );
        }
    };
    assert!(
        authorize_url.starts_with(&format!("{}/v1/oauth/authorize?", app.origin)),
        "{authorize_url}"
    );

    // The person: signs in and allows.
    let browser = Browser::new(&app.origin);
    let consent = browser
        .to_consent(&authorize_url, &f.username, PASSWORD)
        .await;
    assert_eq!(consent.status, 200, "{}", consent.body);
    let back = browser.decide(&consent, "allow").await;
    assert_eq!(back.status, 303, "{}", back.body);
    let back = back.location().unwrap();
    assert!(back.starts_with(&f.redirect_url), "{back}");

    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{back}").unwrap();
    drop(stdin);
    let result = tokio::task::spawn_blocking(move || {
        lines_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_default()
    })
    .await
    .unwrap();
    let status = child.wait().unwrap();
    let errors = errors.join().unwrap();
    assert!(status.success(), "the client failed: {errors}");
    let result = serde_json::from_str(&result).unwrap_or_else(|e| panic!("{e}: {result} {errors}"));
    (browser, result)
}

/// What both clients must have seen of the fixture's user.
fn assert_signed_in(app: &TestApp, f: &Fixture, result: &Value) {
    let claims = &result["claims"];
    assert_eq!(claims["iss"], app.origin);
    assert_eq!(claims["sub"], f.user_id);
    assert_eq!(claims["aud"], f.client_id);
    assert!(claims["nonce"].as_str().is_some_and(|n| !n.is_empty()));
    assert!(claims["at_hash"].is_string());
    assert_eq!(claims["amr"], serde_json::json!(["pwd"]));
    let userinfo = &result["userinfo"];
    assert_eq!(userinfo["sub"], f.user_id);
    assert_eq!(userinfo["preferred_username"], f.username);
    assert_eq!(userinfo["name"], "Ann Lee");
    assert_eq!(userinfo["email"], format!("{}@example.com", f.username));
    assert_eq!(userinfo["email_verified"], true);
}

async fn spawn_with_client(
    backend: Backend,
    client: fn() -> Option<Command>,
) -> Option<(TestApp, Fixture, Command)> {
    let client = client()?;
    let app = spawn_oidc(backend).await?;
    // openid-client sends as redirect_uri the callback URL without its query
    // (its `stripParams`), so the app registers one without a query.
    let f = fixture_with_redirect(&app, "https://app.example.com/callback").await;
    Some((app, f, client))
}

async fn authlib_signs_in_with_tally_and_reads_userinfo(backend: Backend) {
    let Some((app, f, client)) = spawn_with_client(backend, authlib).await else {
        return;
    };
    let (_, result) = sign_in_with(client, &app, &f, &[]).await;
    assert_signed_in(&app, &f, &result);
    let header = jsonwebtoken::decode_header(result["id_token"].as_str().unwrap()).unwrap();
    assert_eq!(header.alg, jsonwebtoken::Algorithm::RS256);
}

async fn openid_client_signs_in_with_tally_reads_userinfo_and_signs_out(backend: Backend) {
    let Some((app, f, client)) = spawn_with_client(backend, openid_client).await else {
        return;
    };
    let (browser, result) = sign_in_with(client, &app, &f, &[]).await;
    assert_signed_in(&app, &f, &result);
    // RP-initiated logout: the URL openid-client built from the discovery
    // document (end_session_endpoint), followed by the person's browser.
    let logout = result["end_session_url"].as_str().unwrap();
    assert!(
        logout.starts_with(&format!("{}/v1/oauth/logout?", app.origin)),
        "{logout}"
    );
    let answer = browser.get(logout).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(
        answer.location().unwrap(),
        format!("{}/signed-out?state=bye", f.redirect_url)
    );
    let account = browser.get("/account").await;
    assert_eq!(account.status, 303, "signed out");
}

async fn openid_client_validates_an_eddsa_id_token(backend: Backend) {
    let Some((app, f, client)) = spawn_with_client(backend, openid_client).await else {
        return;
    };
    let set = admin(
        &app,
        &[
            "app",
            "set",
            &f.client_id,
            "--id-token-alg",
            "EdDSA",
            "--json",
        ],
    );
    assert!(set.status.success(), "{}", set.stderr);
    let (_, result) = sign_in_with(client, &app, &f, &["EdDSA"]).await;
    assert_signed_in(&app, &f, &result);
    let header = jsonwebtoken::decode_header(result["id_token"].as_str().unwrap()).unwrap();
    assert_eq!(header.alg, jsonwebtoken::Algorithm::EdDSA);
}
