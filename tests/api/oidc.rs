//! The OpenID Connect provider (SPEC §10) through its real surface: the key
//! set, the operator's key commands, and the database behind them.

use crate::helpers::{on_both_backends, tally_with_env, Backend, TestApp};
use serde_json::Value;

on_both_backends!(
    the_key_set_publishes_a_key_of_each_algorithm_with_kid_use_and_alg,
    the_database_holds_no_private_key_in_the_clear,
    a_rotated_key_is_published_at_once_and_listed_with_when_it_signs,
    an_apps_id_token_algorithm_is_set_by_the_operator,
    the_discovery_document_names_one_issuer_and_only_endpoints_that_exist,
    the_developer_tab_chooses_an_apps_id_token_algorithm,
    instances_making_the_first_keys_together_all_publish_the_same_keys,
);

/// The deployment's secret key in these tests, given to the server and to
/// the `tally` binary alike.
pub(crate) const SECRET_KEY: &str = "oidc-test-secret-key-0123456789abcdef";

pub(crate) async fn spawn_oidc(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, |s| {
        s.secret_key = Some(secrecy::SecretString::from(SECRET_KEY));
    })
    .await
}

/// Runs `tally admin …` against the app's database with its secret key.
pub(crate) fn admin(app: &TestApp, args: &[&str]) -> crate::helpers::TallyRun {
    let url = app.db.url_string();
    let mut all = vec!["admin"];
    all.extend_from_slice(args);
    tally_with_env(
        &[
            ("TALLY_DATABASE_URL", &url),
            ("TALLY_SECRET_KEY", SECRET_KEY),
        ],
        &all,
    )
}

pub(crate) async fn jwks(app: &TestApp) -> Value {
    let response = app
        .http
        .get(app.url("/v1/oauth/jwks"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    response.json().await.unwrap()
}

fn kids(set: &Value) -> Vec<String> {
    set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect()
}

async fn the_key_set_publishes_a_key_of_each_algorithm_with_kid_use_and_alg(backend: Backend) {
    let Some(app) = spawn_oidc(backend).await else {
        return;
    };
    let set = jwks(&app).await;
    let keys = set["keys"].as_array().unwrap();
    let mut algs: Vec<&str> = keys.iter().map(|k| k["alg"].as_str().unwrap()).collect();
    algs.sort_unstable();
    assert_eq!(algs, ["ES256", "EdDSA", "RS256"]);
    for key in keys {
        assert_eq!(key["use"], "sig", "{key}");
        assert!(!key["kid"].as_str().unwrap().is_empty(), "{key}");
        // Public keys only: none of RFC 7518's private members.
        for private in ["d", "p", "q", "dp", "dq", "qi"] {
            assert!(key.get(private).is_none(), "{private} in {key}");
        }
        match key["alg"].as_str().unwrap() {
            "RS256" => {
                assert_eq!(key["kty"], "RSA");
                assert_eq!(key["e"], "AQAB");
                // 2048 bits, base64url without padding.
                assert_eq!(key["n"].as_str().unwrap().len(), 342);
            }
            "ES256" => {
                assert_eq!(key["kty"], "EC");
                assert_eq!(key["crv"], "P-256");
            }
            _ => {
                assert_eq!(key["kty"], "OKP");
                assert_eq!(key["crv"], "Ed25519");
            }
        }
        // The jsonwebtoken crate reads each as a verification key.
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.clone()).unwrap();
        jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
    }
    // The same keys on every read: made once, not on each request.
    assert_eq!(kids(&jwks(&app).await), kids(&set));
}

/// DER's object identifiers of the three key types, as a private key in the
/// clear would hold them (PKCS#1 keys are found by their modulus below).
const KEY_OIDS: [&[u8]; 3] = [
    // rsaEncryption 1.2.840.113549.1.1.1
    &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01],
    // id-ecPublicKey 1.2.840.10045.2.1
    &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01],
    // id-Ed25519 1.3.101.112
    &[0x06, 0x03, 0x2b, 0x65, 0x70],
];

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn the_database_holds_no_private_key_in_the_clear(backend: Backend) {
    use base64::Engine;
    let Some(app) = spawn_oidc(backend).await else {
        return;
    };
    let set = jwks(&app).await;
    let rows = app.store.signing_keys().await.unwrap();
    assert_eq!(rows.len(), 3);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let rsa = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["alg"] == "RS256")
        .unwrap();
    let modulus = b64.decode(rsa["n"].as_str().unwrap()).unwrap();
    for row in &rows {
        let jwk: Value = serde_json::from_str(&row.public_jwk).unwrap();
        assert!(jwk.get("d").is_none(), "{jwk}");
        let sealed = hex::decode(&row.private_sealed).unwrap();
        for oid in KEY_OIDS {
            assert!(!contains(&sealed, oid), "a key type's OID in {}", row.kid);
        }
        // An RSA private key holds its modulus; a sealed one does not.
        assert!(!contains(&sealed, &modulus[..32]));
        // Nothing in the clear parses as a key either.
        assert!(
            <rsa::RsaPrivateKey as rsa::pkcs1::DecodeRsaPrivateKey>::from_pkcs1_der(&sealed)
                .is_err()
        );
    }
    // The whole SQLite file (and its log), not only the table as read.
    if backend == Backend::Sqlite {
        let path = app
            .db
            .url_string()
            .trim_start_matches("sqlite://")
            .to_owned();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend(std::fs::read(format!("{path}-wal")).unwrap_or_default());
        for oid in KEY_OIDS {
            assert!(
                !contains(&bytes, oid),
                "a key type's OID in the database file"
            );
        }
        assert!(!contains(&bytes, &modulus[..32]));
    }
}

async fn a_rotated_key_is_published_at_once_and_listed_with_when_it_signs(backend: Backend) {
    let Some(app) = spawn_oidc(backend).await else {
        return;
    };
    let before = kids(&jwks(&app).await);
    let rotated = admin(
        &app,
        &[
            "keys",
            "rotate",
            "--alg",
            "RS256",
            "--publish-ahead",
            "2h",
            "--json",
        ],
    );
    assert!(rotated.status.success(), "{}", rotated.stderr);
    let rotated = rotated.json();
    let new = &rotated["keys"][0];
    assert_eq!(new["alg"], "RS256");
    let new_kid = new["kid"].as_str().unwrap().to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let signs_from = new["signs_from"].as_i64().unwrap();
    assert!((now + 7200 - 5..=now + 7200 + 5).contains(&signs_from));

    // Published at once (the server reads the keys at most a second late).
    let mut published = Vec::new();
    for _ in 0..30 {
        published = kids(&jwks(&app).await);
        if published.contains(&new_kid) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(published.contains(&new_kid), "{published:?}");
    assert!(before.iter().all(|k| published.contains(k)));

    let list = admin(&app, &["keys", "list", "--json"]);
    assert!(list.status.success(), "{}", list.stderr);
    let list = list.json();
    let entries = list["keys"].as_array().unwrap();
    assert_eq!(entries.len(), 4);
    let entry = |kid: &str| entries.iter().find(|e| e["kid"] == kid).unwrap().clone();
    let new = entry(&new_kid);
    assert_eq!(new["published"], true);
    assert_eq!(new["signing"], false);
    assert_eq!(new["signs_from"], signs_from);
    // The RS256 key made on the first start still signs.
    let old_rsa = entries
        .iter()
        .find(|e| e["alg"] == "RS256" && e["kid"] != new_kid.as_str())
        .unwrap();
    assert_eq!(old_rsa["signing"], true);
    assert_eq!(old_rsa["retired_at"], Value::Null);
    for field in [
        "kid",
        "alg",
        "created_at",
        "signs_from",
        "retired_at",
        "published_until",
        "published",
        "signing",
    ] {
        assert!(new.get(field).is_some(), "{field} in {new}");
    }

    // Refused input changes nothing.
    for bad in [
        vec!["keys", "rotate", "--alg", "HS256", "--json"],
        vec!["keys", "rotate", "--publish-ahead", "soon", "--json"],
    ] {
        let run = admin(&app, &bad);
        assert_eq!(run.status.code(), Some(1), "{bad:?}");
        assert_eq!(run.json()["error"]["code"], "invalid_request");
    }
    assert_eq!(app.store.signing_keys().await.unwrap().len(), 4);
}

async fn an_apps_id_token_algorithm_is_set_by_the_operator(backend: Backend) {
    let Some(app) = spawn_oidc(backend).await else {
        return;
    };
    let f = crate::oauth_fixture::fixture(&app).await;
    let set = admin(
        &app,
        &[
            "app",
            "set",
            &f.client_id,
            "--id-token-alg",
            "es256",
            "--json",
        ],
    );
    assert!(set.status.success(), "{}", set.stderr);
    assert_eq!(
        set.json(),
        serde_json::json!({"client_id": f.client_id, "introspect_any": false, "id_token_alg": "ES256"})
    );
    assert_eq!(
        app.store
            .id_token_alg(&f.client_id)
            .await
            .unwrap()
            .as_deref(),
        Some("ES256")
    );
    let unknown = admin(
        &app,
        &["app", "set", "nope", "--id-token-alg", "EdDSA", "--json"],
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(unknown.json()["error"]["code"], "not_found");
    let bad = admin(
        &app,
        &[
            "app",
            "set",
            &f.client_id,
            "--id-token-alg",
            "none",
            "--json",
        ],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(bad.json()["error"]["code"], "invalid_request");
    let nothing = admin(&app, &["app", "set", &f.client_id, "--json"]);
    assert_eq!(nothing.status.code(), Some(2));
    assert_eq!(nothing.json()["error"]["code"], "invalid_arguments");
    assert_eq!(
        app.store
            .id_token_alg(&f.client_id)
            .await
            .unwrap()
            .as_deref(),
        Some("ES256")
    );
    // One command may change both settings; a refused one changes neither.
    let refused = admin(
        &app,
        &[
            "app",
            "set",
            &f.client_id,
            "--introspect-any",
            "--id-token-alg",
            "HS256",
            "--json",
        ],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(refused.json()["error"]["code"], "invalid_request");
    let app_row = app.store.find_app(&f.client_id).await.unwrap().unwrap();
    assert!(!app_row.introspect_any, "nothing changed");
    let both = admin(
        &app,
        &[
            "app",
            "set",
            &f.client_id,
            "--introspect-any",
            "--id-token-alg",
            "EdDSA",
            "--json",
        ],
    );
    assert!(both.status.success(), "{}", both.stderr);
    assert_eq!(
        both.json(),
        serde_json::json!({"client_id": f.client_id, "introspect_any": true, "id_token_alg": "EdDSA"})
    );
    let text = admin(&app, &["app", "set", &f.client_id, "--no-introspect-any"]);
    assert!(text.status.success(), "{}", text.stderr);
    assert_eq!(
        text.stdout.trim(),
        format!("{}: introspect_any=false id_token_alg=EdDSA", f.client_id)
    );
}

async fn the_discovery_document_names_one_issuer_and_only_endpoints_that_exist(backend: Backend) {
    let Some(app) = spawn_oidc(backend).await else {
        return;
    };
    let get = |path: &str| app.http.get(app.url(path)).send();
    let discovery: Value = get("/.well-known/openid-configuration")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rfc8414: Value = get("/.well-known/oauth-authorization-server")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // One issuer everywhere: the public origin (every ID token's iss too,
    // checked where ID tokens are).
    assert_eq!(discovery["issuer"], app.origin);
    assert_eq!(rfc8414["issuer"], app.origin);
    assert_eq!(discovery, rfc8414);
    let oauth = format!("{}/v1/oauth", app.origin);
    assert_eq!(discovery["userinfo_endpoint"], format!("{oauth}/userinfo"));
    assert_eq!(discovery["jwks_uri"], format!("{oauth}/jwks"));
    assert_eq!(
        discovery["subject_types_supported"],
        serde_json::json!(["public"])
    );
    assert_eq!(
        discovery["id_token_signing_alg_values_supported"],
        serde_json::json!(["RS256", "ES256", "EdDSA"])
    );
    assert_eq!(
        discovery["prompt_values_supported"],
        serde_json::json!(["none", "login", "consent"])
    );
    assert!(discovery["acr_values_supported"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("mfa")));
    for scope in ["openid", "profile", "email", "phone"] {
        assert!(
            discovery["scopes_supported"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(scope)),
            "{scope}"
        );
    }
    for claim in [
        "sub",
        "auth_time",
        "nonce",
        "at_hash",
        "amr",
        "acr",
        "sid",
        "email",
    ] {
        assert!(
            discovery["claims_supported"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(claim)),
            "{claim}"
        );
    }
    assert_eq!(
        discovery["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    // Only endpoints that exist are named, and each one answers.
    let mut named = 0;
    for (field, value) in discovery.as_object().unwrap() {
        let Some(url) = value
            .as_str()
            .filter(|_| field.ends_with("_endpoint") || field == "jwks_uri")
        else {
            continue;
        };
        named += 1;
        let status = if field == "token_endpoint"
            || field == "device_authorization_endpoint"
            || field.starts_with("revocation")
            || field.starts_with("introspection")
        {
            app.http.post(url).send().await.unwrap().status()
        } else {
            app.http.get(url).send().await.unwrap().status()
        };
        assert_ne!(status, 404, "{field} {url}");
        assert_ne!(status, 405, "{field} {url}");
    }
    assert_eq!(named, 8);
    assert_eq!(discovery["end_session_endpoint"], format!("{oauth}/logout"));
    assert_eq!(
        discovery["device_authorization_endpoint"],
        format!("{oauth}/device_authorization")
    );
    assert!(discovery["grant_types_supported"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!(
            "urn:ietf:params:oauth:grant-type:device_code"
        )));
}

async fn the_developer_tab_chooses_an_apps_id_token_algorithm(backend: Backend) {
    use crate::browser::{set, Browser};
    let Some(app) = spawn_oidc(backend).await else {
        return;
    };
    let f = crate::oauth_fixture::fixture(&app).await;
    let browser = Browser::new(&app.origin);
    let signin = browser.get("/signin").await;
    let signed_in = browser
        .sign_in(&signin, &f.username, crate::oauth_fixture::PASSWORD)
        .await;
    assert_eq!(signed_in.status, 303);
    let page_path = format!("/developer/apps/{}", f.client_id);
    let page = browser.get(&page_path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let action = format!("/developer/apps/{}/id-token-alg", f.client_id);
    let mut fields = page.form(&action);
    // RS256 until the app chooses.
    assert!(
        fields.contains(&("id_token_alg".to_owned(), "RS256".to_owned())),
        "{fields:?}"
    );
    set(&mut fields, "id_token_alg", "EdDSA");
    let saved = browser.post(&action, &fields).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    assert_eq!(
        app.store
            .id_token_alg(&f.client_id)
            .await
            .unwrap()
            .as_deref(),
        Some("EdDSA")
    );
    let page = browser.get(&page_path).await;
    assert!(page
        .form(&action)
        .contains(&("id_token_alg".to_owned(), "EdDSA".to_owned())));
    // Anything else is refused and changes nothing.
    set(&mut fields, "id_token_alg", "HS256");
    let refused = browser.post(&action, &fields).await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        app.store
            .id_token_alg(&f.client_id)
            .await
            .unwrap()
            .as_deref(),
        Some("EdDSA")
    );
}

/// Instances of one deployment on a database without keys, each asked for the
/// key set at once: each makes first keys, the store keeps one per algorithm,
/// and every instance publishes those (none answers from the empty rows it
/// read before another's keys were stored).
async fn instances_making_the_first_keys_together_all_publish_the_same_keys(backend: Backend) {
    let Some(first) = spawn_oidc(backend).await else {
        return;
    };
    let mut origins = vec![first.origin.clone()];
    for _ in 0..2 {
        let mut settings = crate::helpers::test_settings(&first.db);
        settings.secret_key = Some(secrecy::SecretString::from(SECRET_KEY));
        let store = tally::startup::open_store(&settings).await.unwrap();
        let instance = tally::startup::Application::build(settings, store)
            .await
            .unwrap();
        origins.push(instance.public_origin().to_owned());
        tokio::spawn(instance.run_until_stopped());
    }
    let answers = futures_util::future::join_all(origins.iter().map(|origin| {
        let http = first.http.clone();
        let url = format!("{origin}/v1/oauth/jwks");
        async move {
            let answer = http.get(url).send().await.unwrap();
            assert_eq!(answer.status(), 200);
            answer.json::<Value>().await.unwrap()
        }
    }))
    .await;
    let stored: Vec<String> = {
        let mut kids: Vec<String> = first
            .store
            .signing_keys()
            .await
            .unwrap()
            .into_iter()
            .map(|k| k.kid)
            .collect();
        kids.sort();
        kids
    };
    assert_eq!(stored.len(), 3, "one first key per algorithm");
    for answer in answers {
        let mut published = kids(&answer);
        published.sort();
        assert_eq!(published, stored, "{answer}");
    }
}

/// `tally serve` on SQLite without `TALLY_SECRET_KEY` makes the signing keys
/// before it serves, sealed under the key file beside the database, and
/// `tally admin keys rotate` seals under the same key: the keys of both open
/// with it. On PostgreSQL the command needs `TALLY_SECRET_KEY`, as `serve`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signing_keys_are_sealed_under_the_key_the_deployment_resolves() {
    use tally::oauth::keys::{IdTokenAlg, KeyRing};
    let db = crate::helpers::TestDb::new(Backend::Sqlite).await.unwrap();
    let url = db.url_string();
    let unset = [
        ("TALLY_DATABASE_URL", url.as_str()),
        ("TALLY_SECRET_KEY", ""),
    ];
    let server = crate::helpers::ServeProcess::start(&url, &unset[1..]);
    let store = db.store().await;
    assert_eq!(
        store.signing_keys().await.unwrap().len(),
        3,
        "made on the first start, before serving"
    );
    let rotate = tally_with_env(
        &unset,
        &[
            "admin",
            "keys",
            "rotate",
            "--alg",
            "ES256",
            "--publish-ahead",
            "0s",
            "--json",
        ],
    );
    assert!(rotate.status.success(), "{}", rotate.stderr);
    let _ = server.stop();
    let key_file = format!("{}.key", url.strip_prefix("sqlite://").unwrap());
    let key = std::fs::read_to_string(key_file).unwrap();
    let ring = KeyRing::new(&secrecy::SecretString::from(key.trim_end().to_owned())).unwrap();
    for alg in [IdTokenAlg::Rs256, IdTokenAlg::Es256, IdTokenAlg::EdDsa] {
        let signed = ring
            .sign(store.as_ref(), alg, serde_json::json!({"sub": "x"}))
            .await;
        assert!(signed.is_ok(), "{alg}: {signed:?}");
    }
    let rotated = rotate.json()["keys"][0]["kid"].as_str().unwrap().to_owned();
    let signed = ring
        .sign(store.as_ref(), IdTokenAlg::Es256, serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        jsonwebtoken::decode_header(&signed).unwrap().kid.unwrap(),
        rotated
    );

    let Some(db) = crate::helpers::TestDb::new(Backend::Postgres).await else {
        return;
    };
    let url = db.url_string();
    let refused = tally_with_env(
        &[("TALLY_DATABASE_URL", &url), ("TALLY_SECRET_KEY", "")],
        &["admin", "keys", "rotate", "--json"],
    );
    assert_eq!(refused.status.code(), Some(1), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("TALLY_SECRET_KEY"),
        "{}",
        refused.stderr
    );
    assert!(db.store().await.signing_keys().await.unwrap().is_empty());
}
