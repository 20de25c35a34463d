//! `/me`, `/users`, friends, tokens and the conventions of SPEC §2 over real HTTP.

use crate::fixtures::{person, person_with, token, PersonSpec};
use crate::helpers::{on_both_backends, Backend, TestApp};
use serde_json::{json, Value};

on_both_backends!(
    me_shows_the_profile_with_what_the_scopes_allow,
    users_are_shown_searched_and_their_friends_paged,
    search_through_its_index_answers_as_reading_every_user_would,
    me_and_friends_answer_from_the_rows_as_they_are_now,
    each_endpoint_refuses_a_token_without_its_scope,
    the_token_may_come_as_header_query_or_form_but_not_two_different_ones,
    unknown_paths_and_wrong_methods_answer_json_errors,
    bad_tokens_get_401_with_www_authenticate,
    tokens_from_before_the_issue_time_still_work,
);

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

pub const USER_KEYS: [&str; 8] = [
    "about",
    "date_joined",
    "display_name",
    "first_name",
    "id",
    "last_name",
    "profile_picture_url",
    "username",
];

#[track_caller]
pub fn assert_user_object(value: &Value, id: &str, username: &str) {
    assert_eq!(keys(value), USER_KEYS, "{value}");
    assert_eq!(value["id"], id);
    assert_eq!(value["username"], username);
    assert_eq!(value["display_name"], "First Last");
    assert!(value["profile_picture_url"].is_null());
    let joined = value["date_joined"].as_str().unwrap();
    assert_eq!(joined.len(), 20, "{joined}");
    assert!(joined.ends_with('Z'));
}

async fn me_shows_the_profile_with_what_the_scopes_allow(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person_with(
        store,
        "ann",
        PersonSpec {
            email: Some("ann@example.com"),
            phone: Some("+12125550187"),
            verified: true,
            balance: Some("12.50"),
            ..Default::default()
        },
    )
    .await;
    let bob = person(store, "bob", "0").await;
    store.add_friendship(&ann.id, &bob.id, 1).await.unwrap();

    let answer = app.get("/me", &ann.token).await;
    let data = answer.ok();
    assert_eq!(keys(data), ["balance", "user"]);
    assert!(
        answer.text.contains(r#""balance":12.50"#),
        "{}",
        answer.text
    );
    let user = &data["user"];
    let mut expected: Vec<&str> = USER_KEYS.to_vec();
    expected.extend(["email", "friends_count", "is_friend", "phone"]);
    expected.sort();
    assert_eq!(keys(user), expected);
    assert_eq!(user["is_friend"], false);
    assert_eq!(user["friends_count"], 1);
    assert_eq!(user["email"], "ann@example.com");
    assert_eq!(user["phone"], "+12125550187");
    assert_eq!(user["about"], "about ann");

    // Without access_balance, access_email and access_phone those are null.
    let narrow = token(store, &ann.id, "access_profile").await;
    let data = app.get("/me", &narrow).await.ok().clone();
    assert!(data["balance"].is_null());
    assert!(data["user"]["email"].is_null());
    assert!(data["user"]["phone"].is_null());
    assert_eq!(data["user"]["username"], "ann");
}

async fn users_are_shown_searched_and_their_friends_paged(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person_with(
        store,
        "ann",
        PersonSpec {
            email: Some("ann@example.com"),
            phone: Some("+12125550187"),
            first_name: Some("Annabel"),
            verified: true,
            ..Default::default()
        },
    )
    .await;
    // An address nobody has verified finds nobody.
    person_with(
        store,
        "ghost",
        PersonSpec {
            email: Some("ghost@example.com"),
            ..Default::default()
        },
    )
    .await;
    let answer = app.get(&format!("/users/{}", ann.id), &ann.token).await;
    let user = answer.ok();
    assert_eq!(keys(user), USER_KEYS);
    assert_eq!(user["display_name"], "Annabel Last");
    app.get("/users/nobody", &ann.token)
        .await
        .error(404, "not_found");

    let mut friends = Vec::new();
    for i in 0..5 {
        let friend = person(store, &format!("friend{i}"), "0").await;
        store.add_friendship(&ann.id, &friend.id, 1).await.unwrap();
        friends.push(friend.id);
    }
    friends.sort();

    // Search by part of a username, display name, exact e-mail and phone.
    for (query, expected) in [
        ("friend", 5),
        ("FRIEND3", 1),
        ("annabel", 1),
        ("ann@example.com", 1),
        ("(212) 555-0187", 1),
        ("ghost@example.com", 0),
        ("nobody-like-this", 0),
        ("%", 0),
    ] {
        let answer = app
            .get(&format!("/users?query={}", urlencode(query)), &ann.token)
            .await;
        assert_eq!(answer.ok().as_array().unwrap().len(), expected, "{query}");
        assert!(answer.body["pagination"]["next"].is_null());
    }
    let answer = app.get("/users?query=friend&limit=2", &ann.token).await;
    let page: Vec<&str> = answer
        .ok()
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap())
        .collect();
    assert_eq!(page, ["friend0", "friend1"]);
    let next = answer.body["pagination"]["next"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        next.starts_with(&format!("{}/v1/users?", app.origin)),
        "{next}"
    );
    assert!(!next.contains("access_token"));
    let answer = app.get(&next, &ann.token).await;
    assert_eq!(answer.ok()[0]["username"], "friend2");
    app.get("/users", &ann.token)
        .await
        .error(400, "missing_parameter");

    // Friends are paged by id with `after`.
    let mut seen = Vec::new();
    let mut url = format!("/users/{}/friends?limit=2", ann.id);
    for _ in 0..5 {
        let answer = app.get(&url, &ann.token).await;
        for user in answer.ok().as_array().unwrap() {
            assert_eq!(keys(user), USER_KEYS);
            seen.push(user["id"].as_str().unwrap().to_owned());
        }
        match answer.body["pagination"]["next"].as_str() {
            Some(next) => {
                assert!(
                    next.starts_with(&format!("{}/v1/users/", app.origin)),
                    "{next}"
                );
                assert!(
                    next.contains("after=") && next.contains("limit=2"),
                    "{next}"
                );
                assert!(!next.contains("tly_"), "{next}");
                url = next.to_owned();
            }
            None => break,
        }
    }
    assert_eq!(seen, friends);
    app.get("/users/nobody/friends", &ann.token)
        .await
        .error(404, "not_found");
    let answer = app
        .get(&format!("/users/{}/friends?limit=500", ann.id), &ann.token)
        .await;
    assert_eq!(answer.ok().as_array().unwrap().len(), 5);
}

/// The search as it was before it had an index: every user read, the same
/// condition, order and paging. Returns ids.
async fn search_by_reading_every_user(
    db: &crate::helpers::TestDb,
    query: &str,
    limit: i64,
    offset: i64,
) -> Vec<String> {
    use sqlx::Connection;
    let needle = query.trim().to_lowercase();
    let mut pattern = String::from("%");
    for c in needle.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    let email = tally::domain::Email::parse(query.trim())
        .ok()
        .map(|e| e.as_str().to_owned());
    let phone = tally::domain::Phone::parse(query.trim())
        .ok()
        .map(|p| p.as_str().to_owned());
    let sql = "SELECT id FROM users WHERE suspended = FALSE AND ( \
               lower(username) LIKE $1 ESCAPE '\\' \
               OR lower(first_name || ' ' || last_name) LIKE $1 ESCAPE '\\' \
               OR (email = $2 AND email_verified) OR (phone = $3 AND phone_verified)) \
               ORDER BY lower(username), id LIMIT $4 OFFSET $5";
    macro_rules! run {
        ($conn:expr) => {
            sqlx::query_scalar::<_, String>(sql)
                .bind(&pattern)
                .bind(&email)
                .bind(&phone)
                .bind(limit)
                .bind(offset)
                .fetch_all(&mut $conn)
                .await
                .unwrap()
        };
    }
    match &db.url {
        tally::config::DatabaseUrl::Sqlite(url) => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            run!(conn)
        }
        tally::config::DatabaseUrl::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            run!(conn)
        }
    }
}

async fn search_through_its_index_answers_as_reading_every_user_would(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person_with(
        store,
        "Ann_Smith1",
        PersonSpec {
            first_name: Some("Ann"),
            verified: true,
            ..Default::default()
        },
    )
    .await;
    for username in ["bob_smith2", "smithy", "carol", "zed"] {
        person(store, username, "0").await;
    }
    // Rows written by plain SQL (as a bulk load would) are indexed by the
    // database itself; renames move them.
    let users = [
        ("u-bob", "bob_smith2x", "Bob", "SMITH", false, None),
        ("u-smithy", "smithy_z", "Zoë", "Brown", false, None),
        ("u-carol", "carol_g", "Carol", "Goldsmith", false, None),
        ("u-pct", "pct_100", "100%", "Sure", false, None),
        ("u-under", "under_score", "A_b", "C\\d", false, None),
        ("u-eclair", "eclair", "Jean", "ÉCLAIR", false, None),
        ("u-dave", "dave_smith", "Dave", "Smith", true, None),
        ("u-erin", "erin_smith3", "Erin", "Smyth", false, None),
        (
            "u-frank",
            "frank",
            "Frank",
            "Jones",
            false,
            Some("smith@example.com"),
        ),
    ];
    for (id, username, first, last, suspended, email) in users {
        crate::store_conformance::tamper(
            &app.db,
            &format!(
                "INSERT INTO users (id, username, first_name, last_name, email, email_verified, \
                 password_hash, verified, suspended, date_joined) VALUES ('{id}', '{username}', \
                 '{first}', '{last}', {}, {}, 'x', TRUE, {suspended}, 1)",
                email.map_or("NULL".to_owned(), |e| format!("'{e}'")),
                email.is_some(),
            ),
        )
        .await;
    }
    crate::store_conformance::tamper(
        &app.db,
        "UPDATE users SET username = 'grace_smith5', last_name = 'Hopper' WHERE id = 'u-carol'",
    )
    .await;

    let mut checked = 0;
    for query in [
        "smith",
        "SMITH",
        " Smi ",
        "mit",
        "ith",
        "h1",
        "s",
        "sm",
        "_",
        "%",
        "0%",
        "100%",
        "n_s",
        "_sm",
        "a_b",
        "c\\d",
        "\\",
        "ë b",
        "zoë",
        "ZOË",
        "éclair",
        "ÉCLAIR",
        "goldsmith",
        "grace",
        "carol",
        "smyth",
        "erin_s",
        "frank",
        "smith@example.com",
        "ann_smith1",
        "nobody-like-this",
    ] {
        for (limit, offset) in [(100, 0), (2, 0), (2, 1), (1, 3)] {
            let expected = search_by_reading_every_user(&app.db, query, limit, offset).await;
            let answer = app
                .get(
                    &format!(
                        "/users?query={}&limit={limit}&offset={offset}",
                        urlencode(query)
                    ),
                    &ann.token,
                )
                .await;
            let found: Vec<&str> = answer
                .ok()
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["id"].as_str().unwrap())
                .collect();
            assert_eq!(
                found, expected,
                "query {query:?} limit {limit} offset {offset}"
            );
            checked += found.len();
        }
    }
    assert!(checked > 50, "{checked}");
    // The cases the index must not lose.
    let ids = |query: &'static str| search_by_reading_every_user(&app.db, query, 100, 0);
    assert!(ids("erin_s").await.contains(&"u-erin".to_owned()));
    assert!(ids("grace_smith").await.contains(&"u-carol".to_owned()));
    assert!(ids("carol_g").await.is_empty());
    assert!(!ids("smith").await.contains(&"u-dave".to_owned()));
    assert!(ids("smith@example.com")
        .await
        .contains(&"u-frank".to_owned()));
}

/// `/me` reads its user and friend count (kept on the user's row) in one
/// statement: still the current balance and count, never an earlier read's. Friends pages
/// and one's own profile need no second look-up of the user.
async fn me_and_friends_answer_from_the_rows_as_they_are_now(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "1.00").await;
    let bob = person(store, "bob", "0").await;
    let carol = person(store, "carol", "0").await;
    let me = app.get("/me", &ann.token).await.ok().clone();
    assert_eq!(me["balance"], json!(1.0));
    assert_eq!(me["user"]["friends_count"], 0);

    tally::admin::deposit(store, "ann", "2.00").await.unwrap();
    store.add_friendship(&ann.id, &bob.id, 1).await.unwrap();
    let answer = app.get("/me", &ann.token).await;
    assert!(answer.text.contains(r#""balance":3.00"#), "{}", answer.text);
    assert_eq!(answer.ok()["user"]["friends_count"], 1);
    assert_eq!(answer.ok()["user"]["id"], ann.id.as_str());

    // One's own profile is the token's user.
    let own = app.get(&format!("/users/{}", ann.id), &ann.token).await;
    assert_eq!(keys(own.ok()), USER_KEYS);
    assert_eq!(own.ok()["username"], "ann");
    assert_eq!(own.ok()["id"], ann.id.as_str());

    // Someone else's friends; someone without friends (an empty page, not
    // 404); one's own; and an unknown user, even past a cursor, is 404.
    let bobs = app
        .get(&format!("/users/{}/friends", bob.id), &ann.token)
        .await;
    assert_eq!(bobs.ok()[0]["id"], ann.id.as_str());
    let carols = app
        .get(&format!("/users/{}/friends", carol.id), &ann.token)
        .await;
    assert_eq!(carols.ok(), &json!([]));
    assert!(carols.body["pagination"]["next"].is_null());
    let own = app
        .get(&format!("/users/{}/friends", ann.id), &ann.token)
        .await;
    assert_eq!(own.ok()[0]["id"], bob.id.as_str());
    app.get("/users/nobody/friends?after=zzz", &ann.token)
        .await
        .error(404, "not_found");

    // The count is kept by the database itself: friendships written or
    // removed by plain SQL (a bulk load, an operator) count as well.
    let dan = person(store, "dan", "0").await;
    crate::store_conformance::tamper(
        &app.db,
        &format!(
            "INSERT INTO friendships (user_id, friend_id, created_at) \
             VALUES ('{ann}', '{dan}', 1), ('{dan}', '{ann}', 1)",
            ann = ann.id,
            dan = dan.id
        ),
    )
    .await;
    let friends_count = |token: String| {
        let app = &app;
        async move { app.get("/me", &token).await.ok()["user"]["friends_count"].clone() }
    };
    assert_eq!(friends_count(ann.token.clone()).await, 2);
    assert_eq!(friends_count(dan.token.clone()).await, 1);
    crate::store_conformance::tamper(
        &app.db,
        &format!(
            "DELETE FROM friendships WHERE user_id = '{ann}' AND friend_id = '{bob}'",
            ann = ann.id,
            bob = bob.id
        ),
    )
    .await;
    assert_eq!(friends_count(ann.token.clone()).await, 1);
    assert_eq!(friends_count(bob.token.clone()).await, 1);
}

pub fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

async fn each_endpoint_refuses_a_token_without_its_scope(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let feed_only = token(store, &ann.id, "access_feed").await;
    let profile_only = token(store, &ann.id, "access_profile").await;
    let history_only = token(store, &ann.id, "access_payment_history").await;
    use reqwest::Method;
    for (method, path, token, scope) in [
        (Method::GET, "/me".to_owned(), &feed_only, "access_profile"),
        (
            Method::GET,
            format!("/users/{}", ann.id),
            &feed_only,
            "access_profile",
        ),
        (
            Method::GET,
            "/users?query=ann".to_owned(),
            &feed_only,
            "access_profile",
        ),
        (
            Method::GET,
            format!("/users/{}/friends", ann.id),
            &profile_only,
            "access_friends",
        ),
        (
            Method::POST,
            "/payments".to_owned(),
            &profile_only,
            "make_payments",
        ),
        (
            Method::GET,
            "/payments".to_owned(),
            &feed_only,
            "access_profile",
        ),
        (
            Method::GET,
            "/payments/x".to_owned(),
            &feed_only,
            "access_profile",
        ),
        (
            Method::PUT,
            "/payments/x".to_owned(),
            &profile_only,
            "make_payments",
        ),
    ] {
        let answer = crate::fixtures::call(
            &app.http,
            &app.origin,
            method.clone(),
            &path,
            Some(token),
            Some(json!({"action": "cancel"})),
        )
        .await;
        answer.error(403, "insufficient_scope");
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(scope), "{method} {path}: {message}");
        let challenge = answer.headers["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.contains(r#"error="insufficient_scope""#) && challenge.contains(scope),
            "{method} {path}: {challenge}"
        );
        if path.starts_with("/payments") && method == Method::GET {
            // Either scope reads payments, and the refusal says so.
            assert!(
                message.contains("access_payment_history"),
                "{method} {path}: {message}"
            );
        }
    }
    // access_payment_history reads payments as access_profile does.
    assert_eq!(app.get("/payments", &history_only).await.status, 200);
    app.get("/payments/x", &history_only)
        .await
        .error(404, "not_found");
}

async fn the_token_may_come_as_header_query_or_form_but_not_two_different_ones(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let store = app.store.as_ref();
    let ann = person(store, "ann", "10").await;
    let other = token(store, &ann.id, "access_profile").await;
    let me = app.url("/v1/me");

    let by_query = app
        .http
        .get(format!("{me}?access_token={}", ann.token))
        .send()
        .await
        .unwrap();
    assert_eq!(by_query.status(), 200);
    let by_form = app
        .http
        .post(app.url("/v1/payments"))
        .form(&[
            ("access_token", ann.token.as_str()),
            ("user_id", "nobody"),
            ("amount", "1"),
            ("note", "x"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(by_form.status(), 400);
    let body: Value = by_form.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_target");
    let same_twice = app
        .http
        .get(format!("{me}?access_token={}", ann.token))
        .bearer_auth(&ann.token)
        .send()
        .await
        .unwrap();
    assert_eq!(same_twice.status(), 200);
    let different = app
        .http
        .get(format!("{me}?access_token={other}"))
        .bearer_auth(&ann.token)
        .send()
        .await
        .unwrap();
    assert_eq!(different.status(), 400);
    let body: Value = different.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request");
}

async fn unknown_paths_and_wrong_methods_answer_json_errors(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let ann = person(app.store.as_ref(), "ann", "0").await;
    for path in ["/nothing-here", "/oauth/nothing-here", "/payments/x/y"] {
        app.get(path, &ann.token).await.error(404, "not_found");
    }
    app.put("/me", &ann.token, json!({}))
        .await
        .error(405, "method_not_allowed");
    let answer = crate::fixtures::call(
        &app.http,
        &app.origin,
        reqwest::Method::DELETE,
        "/payments",
        Some(&ann.token),
        None,
    )
    .await;
    answer.error(405, "method_not_allowed");
    assert_eq!(answer.headers["allow"], "GET, POST, HEAD");
    // Bodies other than form fields or JSON are refused, and so are huge ones.
    let response = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&ann.token)
        .header("content-type", "text/plain")
        .body("amount=1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let big = format!("note={}", "x".repeat(70 * 1024));
    let response = app
        .http
        .post(app.url("/v1/payments"))
        .bearer_auth(&ann.token)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large");
}

async fn bad_tokens_get_401_with_www_authenticate(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let ann = person(app.store.as_ref(), "ann", "0").await;
    for token in [None, Some("tly_at_unknown"), Some("garbage")] {
        let answer = crate::fixtures::call(
            &app.http,
            &app.origin,
            reqwest::Method::GET,
            "/me",
            token,
            None,
        )
        .await;
        answer.error(401, "invalid_token");
        let challenge = answer.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        // RFC 6750 §3.1: without any token the challenge names no error.
        assert_eq!(
            challenge.contains(r#"error="invalid_token""#),
            token.is_some(),
            "{challenge}"
        );
    }
    crate::fixtures::suspend(app.store.as_ref(), &ann.id).await;
    app.get("/me", &ann.token)
        .await
        .error(403, "account_suspended");
}

/// Tokens issued before they led with their issue time (`tly_at_` and 64 hex
/// digits, stored under their plain SHA-256) are still honoured; a new
/// token whose issue-time digits are changed is not.
async fn tokens_from_before_the_issue_time_still_work(backend: Backend) {
    use tally::oauth::credentials;
    use tally::store::{NewGrant, NewToken, TokenKind};
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let ann = person(app.store.as_ref(), "ann", "0").await;
    let legacy = format!("tly_at_{}", "5e".repeat(32));
    let now = tally::domain::now_micros();
    let grant = NewGrant {
        id: tally::domain::new_id(),
        user_id: ann.id.clone(),
        client_id: None,
        scopes: "access_profile".to_owned(),
        flow: "personal",
        created_at: now,
    };
    let row = NewToken {
        digest: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(legacy.as_bytes())),
        kind: TokenKind::Access,
        scopes: None,
        created_at: now,
        expires_at: now + 60_000_000,
    };
    app.store
        .insert_grant_with_tokens(&grant, &[row])
        .await
        .unwrap();
    let me = app.get("/me", &legacy).await.ok().clone();
    assert_eq!(me["user"]["username"], "ann");

    // The new shape: the issue time leads the random part.
    let body = ann.token.strip_prefix("tly_at_").unwrap();
    assert_eq!(body.len(), 14 + 64, "{}", ann.token);
    app.get("/me", &ann.token).await.ok();
    let earlier = format!("tly_at_{:014x}{}", 1u64, &body[14..]);
    app.get("/me", &earlier).await.error(401, "invalid_token");
    assert!(credentials::digest(&ann.token).starts_with(&body[..14]));
}
