//! Faults an operator meets, through the real `tally` binary: the database
//! going away and coming back, locks held past the busy timeout, online backups
//! under load. Every wait here is bounded to seconds.

use crate::browser::{set, Browser};
use crate::fixtures::{person, Person};
use crate::helpers::{on_both_backends, tally, Backend, ServeProcess, TestDb};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

on_both_backends!(
    killed_under_load_it_loses_nothing_answered_and_invents_nothing,
    sigterm_under_load_answers_what_is_in_flight_and_exits_0,
);

/// A TCP proxy between Tally and PostgreSQL that a test can cut (every live
/// connection closed, new ones refused) and restore.
pub struct TcpProxy {
    pub port: u16,
    open: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl TcpProxy {
    pub async fn start(target: std::net::SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let accepting = open.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    let _ = client.shutdown().await;
                    continue;
                }
                let mut cuts = cuts.clone();
                // Only a cut after this connection opened closes it.
                cuts.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Self { port, open, cut }
    }

    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// The PostgreSQL URL of `db`, rewritten to go through `proxy`.
fn through(db: &TestDb, proxy: &TcpProxy) -> String {
    let mut url = url::Url::parse(&db.url_string()).unwrap();
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(proxy.port)).unwrap();
    url.to_string()
}

fn postgres_address(db: &TestDb) -> std::net::SocketAddr {
    use std::net::ToSocketAddrs;
    let url = url::Url::parse(&db.url_string()).unwrap();
    (url.host_str().unwrap(), url.port().unwrap_or(5432))
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap()
}

fn retry_after(response: &reqwest::Response) -> u64 {
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After on {response:?}"))
}

async fn expect_unavailable_api(response: reqwest::Response) {
    assert_eq!(response.status(), 503, "{response:?}");
    assert!(retry_after(&response) > 0);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
}

/// PostgreSQL unreachable: the API, the OAuth token endpoint and the pages
/// answer 503 with `Retry-After` in their own shapes, readiness fails, and all
/// recover by themselves once the database is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_answers_503_everywhere_and_recovers_by_itself() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store().await;
    let ann = person(store.as_ref(), "ann", "10").await;
    let proxy = TcpProxy::start(postgres_address(&db)).await;
    let server = ServeProcess::start(&through(&db, &proxy), &[]);
    let http = reqwest::Client::new();
    let me = || {
        http.get(format!("{}/v1/me", server.origin))
            .bearer_auth(&ann.token)
            .send()
    };
    assert_eq!(me().await.unwrap().status(), 200);
    let browser = Browser::new(&server.origin);
    let signin = browser.get("/signin").await;
    let mut fields = signin.form("/signin");
    set(&mut fields, "username", "ann");
    set(&mut fields, "password", "whatever-it-is");

    proxy.cut();
    let started = Instant::now();
    let token = http
        .post(format!("{}/v1/oauth/token", server.origin))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "tly_nobody"),
            ("client_secret", "x"),
        ])
        .send();
    let (api, token, page, ready) = tokio::join!(
        me(),
        token,
        browser.post("/signin", &fields),
        http.get(format!("{}/readyz", server.origin)).send()
    );
    expect_unavailable_api(api.unwrap()).await;
    let token = token.unwrap();
    assert_eq!(token.status(), 503);
    assert!(retry_after(&token) > 0);
    let body: Value = token.json().await.unwrap();
    assert_eq!(body["error"], "temporarily_unavailable", "{body}");
    assert!(body["error_description"].is_string());
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(page.header("retry-after").parse::<u64>().unwrap() > 0);
    assert!(page.body.contains("<html"), "{}", page.body);
    expect_unavailable_api(ready.unwrap()).await;
    assert!(started.elapsed() < Duration::from_secs(15));

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = me().await.unwrap().status();
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(Instant::now() < deadline, "no recovery after the outage");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready = http
        .get(format!("{}/readyz", server.origin))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let log = server.stop();
    assert!(log.contains("database unavailable"), "{log}");
    assert!(!log.contains("request failed"), "a 500 was logged: {log}");
}

/// SQLite locked by another process past the busy timeout: the write answers
/// 503 `unavailable` (not 500), and the next one succeeds once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_locked_past_the_busy_timeout_answers_503() {
    use sqlx::{Connection, Executor};
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let store = db.store().await;
    let ann = person(store.as_ref(), "ann", "10").await;
    let bob = person(store.as_ref(), "bob", "0").await;
    let server = ServeProcess::start(&db.url_string(), &[]);
    let http = reqwest::Client::new();
    let pay = || {
        http.post(format!("{}/v1/payments", server.origin))
            .bearer_auth(&ann.token)
            .form(&[("user_id", bob.id.as_str()), ("amount", "1"), ("note", "x")])
            .send()
    };
    let mut holder = sqlx::SqliteConnection::connect(&db.url_string())
        .await
        .unwrap();
    holder.execute("BEGIN IMMEDIATE").await.unwrap();
    let started = Instant::now();
    expect_unavailable_api(pay().await.unwrap()).await;
    eprintln!("locked write answered after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(40));
    holder.execute("ROLLBACK").await.unwrap();
    assert_eq!(pay().await.unwrap().status(), 200);
    let log = server.stop();
    assert!(!log.contains("request failed"), "a 500 was logged: {log}");
}

/// `tally admin backup` copies a live SQLite database while payments are being
/// made over HTTP; the copy audits clean; it never overwrites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_load_audits_clean_and_never_overwrites() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let store = db.store().await;
    let ann = person(store.as_ref(), "ann", "1000").await;
    let bob = person(store.as_ref(), "bob", "0").await;
    // Up to 800 pays by one token: more than the API's per-token rate limit
    // allows in a minute, which is not what this test is about.
    let server = ServeProcess::start(&db.url_string(), &[("TALLY_API_RATE_LIMIT", "100000")]);
    let http = reqwest::Client::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (http, origin, stop) = (http.clone(), server.origin.clone(), stop.clone());
        let (token, target) = (ann.token.clone(), bob.id.clone());
        clients.push(tokio::spawn(async move {
            let mut made = 0;
            while !stop.load(Ordering::SeqCst) && made < 2000 {
                let response = http
                    .post(format!("{origin}/v1/payments"))
                    .bearer_auth(&token)
                    .form(&[
                        ("user_id", target.as_str()),
                        ("amount", "0.01"),
                        ("note", "x"),
                    ])
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                made += 1;
            }
            made
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.db");
    let copy_text = copy.to_str().unwrap().to_owned();
    let url = db.url_string();
    let run = {
        let (url, copy_text) = (url.clone(), copy_text.clone());
        move || tally(&url, &["admin", "backup", &copy_text, "--json"])
    };
    let backed_up = tokio::task::spawn_blocking(run.clone()).await.unwrap();
    stop.store(true, Ordering::SeqCst);
    let mut made = 0;
    for client in clients {
        made += client.await.unwrap();
    }
    assert!(backed_up.status.success(), "{}", backed_up.stderr);
    let answer = backed_up.json();
    assert_eq!(answer["path"], copy_text);
    assert!(answer["bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        answer["bytes"].as_u64().unwrap(),
        std::fs::metadata(&copy).unwrap().len()
    );
    assert!(made > 0);

    let copy_url = format!("sqlite://{copy_text}");
    let audit = tally(&copy_url, &["admin", "audit", "--json"]);
    assert!(audit.status.success(), "{} {}", audit.stdout, audit.stderr);
    assert_eq!(audit.json()["ok"], true);

    let again = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(!again.status.success());
    assert_eq!(again.json()["error"]["code"], "conflict");
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    server.stop();
}

/// On PostgreSQL the command says to use pg_dump and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_on_postgres_points_to_pg_dump() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.db");
    let run = tally(
        &db.url_string(),
        &["admin", "backup", copy.to_str().unwrap(), "--json"],
    );
    assert!(!run.status.success());
    assert!(run.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("pg_dump"));
    assert!(!copy.exists());
}

/// SQLite "disk full" (the writer's page count capped through the test hook):
/// writes answer 503, readiness fails, the worker logs with back-off, and once
/// room returns the very next writes succeed and every held pay settles,
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sqlite_disk_answers_503_and_recovers_by_itself() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let store = db.store().await;
    let ann = person(store.as_ref(), "ann", "1000").await;
    let bob = person(store.as_ref(), "bob", "0").await;
    let dir = tempfile::tempdir().unwrap();
    let limit = dir.path().join("page-limit");
    let server = ServeProcess::start(
        &db.url_string(),
        &[(
            tally::store::SQLITE_PAGE_LIMIT_FILE_VARIABLE,
            limit.to_str().unwrap(),
        )],
    );
    let http = reqwest::Client::new();
    let pay = || {
        http.post(format!("{}/v1/payments", server.origin))
            .bearer_auth(&ann.token)
            .form(&[
                ("user_id", bob.id.as_str()),
                ("amount", "0.01"),
                // Long notes fill pages quickly.
                ("note", "n".repeat(400).as_str()),
            ])
            .send()
    };
    let ready = || http.get(format!("{}/readyz", server.origin)).send();
    assert_eq!(pay().await.unwrap().status(), 200);
    assert_eq!(ready().await.unwrap().status(), 200);

    // "The disk is full": no page beyond the database's present size.
    std::fs::write(&limit, "1").unwrap();
    let mut made = 1;
    let full = loop {
        let response = pay().await.unwrap();
        match response.status().as_u16() {
            200 => made += 1,
            _ => break response,
        }
        assert!(made < 500, "the page limit never bit");
    };
    expect_unavailable_api(full).await;
    for _ in 0..3 {
        expect_unavailable_api(pay().await.unwrap()).await;
    }
    expect_unavailable_api(ready().await.unwrap()).await;
    // Let the worker fail a few rounds.
    tokio::time::sleep(Duration::from_secs(1)).await;

    std::fs::remove_file(&limit).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = pay().await.unwrap();
        if response.status() == 200 {
            made += 1;
            break;
        }
        expect_unavailable_api(response).await;
        assert!(Instant::now() < deadline, "writes did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready().await.unwrap().status() != 200 {
        assert!(Instant::now() < deadline, "readiness did not recover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pending: Value = http
            .get(format!("{}/v1/payments?status=pending", server.origin))
            .bearer_auth(&ann.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if pending["data"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "held pays did not settle: {pending}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = server.stop();
    assert!(!log.contains("request failed"), "a 500 was logged: {log}");
    let worker_lines = log
        .lines()
        .filter(|l| l.contains("cannot move a due payment") || l.contains("worker round failed"))
        .count();
    assert!(
        worker_lines <= 4,
        "{worker_lines} worker error lines: {log}"
    );
    let audit = tally(&db.url_string(), &["admin", "audit", "--json"]);
    assert_eq!(audit.json()["ok"], true, "{}", audit.stdout);
    assert_eq!(
        crate::fixtures::balance_cents(store.as_ref(), &bob.id).await,
        made
    );
}

/// One pay a client asks for, with the key that makes it safe to retry.
#[derive(Clone, Debug)]
struct Ask {
    payer: usize,
    key: String,
    cents: i64,
}

/// What the clients learnt: payments answered 200 (by key: id, payer, cents),
/// and asks whose answer was lost (a connection cut by a kill).
#[derive(Default)]
struct Seen {
    answered: HashMap<String, (String, usize, i64)>,
    lost: Vec<Ask>,
    /// Lost asks whose connection had been made (not refused).
    cut: usize,
}

async fn keyed_pay(
    http: &reqwest::Client,
    origin: &str,
    payer: &Person,
    target: &Person,
    ask: &Ask,
) -> Result<(u16, bool, Value), reqwest::Error> {
    let amount = format!("{}.{:02}", ask.cents / 100, ask.cents % 100);
    let response = http
        .post(format!("{origin}/v1/payments"))
        .bearer_auth(&payer.token)
        .header("Idempotency-Key", &ask.key)
        .form(&[
            ("user_id", target.id.as_str()),
            ("amount", amount.as_str()),
            ("note", ask.key.as_str()),
        ])
        .send()
        .await?;
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    Ok((status, replayed, response.json().await?))
}

fn record(seen: &mut Seen, ask: &Ask, body: &Value) {
    let payment = &body["data"]["payment"];
    let id = payment["id"].as_str().unwrap().to_owned();
    if let Some((first, _, _)) = seen.answered.get(&ask.key) {
        assert_eq!(first, &id, "one key, two payments");
    }
    seen.answered
        .insert(ask.key.clone(), (id, ask.payer, ask.cents));
}

/// Each payer's client pays the target with a fresh key per pay, one at a time,
/// against `origins` in turn, until `stop` or a connection fails; a failed
/// ask is kept, to be retried with its key.
async fn load(
    http: &reqwest::Client,
    origins: &[String],
    payers: &[Person],
    target: &Person,
    stop: Arc<AtomicBool>,
    round: usize,
) -> Seen {
    let clients = payers.iter().enumerate().map(|(payer, person)| {
        let stop = stop.clone();
        async move {
            let mut seen = Seen::default();
            for seq in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let ask = Ask {
                    payer,
                    key: format!("r{round}-p{payer}-{seq}"),
                    cents: 1 + (seq % 50) as i64,
                };
                let origin = &origins[seq % origins.len()];
                match keyed_pay(http, origin, person, target, &ask).await {
                    Ok((200, _, body)) => record(&mut seen, &ask, &body),
                    Ok((status, _, body)) => panic!("{status} {body}"),
                    Err(e) => {
                        if !e.is_connect() {
                            seen.cut += 1;
                        }
                        seen.lost.push(ask);
                        if origins.len() == 1 {
                            break;
                        }
                    }
                }
            }
            seen
        }
    });
    let mut all = Seen::default();
    for seen in futures_util::future::join_all(clients).await {
        all.answered.extend(seen.answered);
        all.lost.extend(seen.lost);
        all.cut += seen.cut;
    }
    all
}

/// Retries every lost ask with its key on `origin`: each gets 200, either the
/// payment its first try made or a new one. Returns how many first tries had
/// been made (their answers replayed).
async fn recover(
    http: &reqwest::Client,
    origin: &str,
    payers: &[Person],
    target: &Person,
    seen: &mut Seen,
) -> usize {
    let mut made_before = 0;
    for ask in std::mem::take(&mut seen.lost) {
        let (status, replayed, body) = keyed_pay(http, origin, &payers[ask.payer], target, &ask)
            .await
            .unwrap();
        assert_eq!(status, 200, "{body}");
        made_before += usize::from(replayed);
        record(seen, &ask, &body);
    }
    made_before
}

/// Exactly the payments the clients were answered exist, each with its amount,
/// every payer's balance lost exactly their sum, and the audit is clean.
async fn assert_exactly_what_was_answered(
    db: &TestDb,
    payers: &[Person],
    seen: &Seen,
    start_cents: i64,
) {
    let store = db.store().await;
    for (index, payer) in payers.iter().enumerate() {
        let mine: HashMap<&str, i64> = seen
            .answered
            .values()
            .filter(|(_, p, _)| *p == index)
            .map(|(id, _, cents)| (id.as_str(), *cents))
            .collect();
        let stored = store
            .list_payments(&tally::store::PaymentFilter {
                owner_id: payer.id.clone(),
                action: Some(tally::domain::PaymentAction::Pay),
                limit: 100_000,
                ..Default::default()
            })
            .await
            .unwrap();
        let stored: HashMap<&str, i64> = stored
            .iter()
            .map(|p| (p.id.as_str(), p.amount_cents))
            .collect();
        assert_eq!(
            stored, mine,
            "payer {index}: stored payments differ from answered ones"
        );
        let spent: i64 = mine.values().sum();
        assert_eq!(
            crate::fixtures::balance_cents(store.as_ref(), &payer.id).await,
            start_cents - spent
        );
    }
    let audit = tally(&db.url_string(), &["admin", "audit", "--json"]);
    assert_eq!(audit.json()["ok"], true, "{}", audit.stdout);
}

async fn payers_and_target(db: &TestDb, count: usize) -> (Vec<Person>, Person) {
    let store = db.store().await;
    let mut payers = Vec::new();
    for i in 0..count {
        payers.push(person(store.as_ref(), &format!("payer{i}"), "1000").await);
    }
    let target = person(store.as_ref(), "target", "0").await;
    (payers, target)
}

/// kill -9 three times under concurrent load, restarting each time: every
/// payment answered 200 exists with its amount, nothing exists that no client
/// asked for, and an answer lost to the kill is recovered by its key.
async fn killed_under_load_it_loses_nothing_answered_and_invents_nothing(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let (payers, target) = payers_and_target(&db, 6).await;
    let http = reqwest::Client::new();
    let mut seen = Seen::default();
    let mut lost_to_kills = 0;
    for round in 0..3 {
        let server = ServeProcess::start(&db.url_string(), &[]);
        recover(&http, &server.origin, &payers, &target, &mut seen).await;
        let origins = [server.origin.clone()];
        let stop = Arc::new(AtomicBool::new(false));
        let killer = {
            let stop = stop.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(800)).await;
                server.stop();
                stop.store(true, Ordering::SeqCst);
            }
        };
        let (round_seen, ()) =
            tokio::join!(load(&http, &origins, &payers, &target, stop, round), killer);
        lost_to_kills += round_seen.lost.len();
        seen.answered.extend(round_seen.answered);
        seen.lost.extend(round_seen.lost);
    }
    assert!(lost_to_kills > 0, "the kills cut no request");
    let server = ServeProcess::start(&db.url_string(), &[]);
    recover(&http, &server.origin, &payers, &target, &mut seen).await;
    server.stop();
    assert!(
        seen.answered.len() > 30,
        "only {} pays made",
        seen.answered.len()
    );
    assert_exactly_what_was_answered(&db, &payers, &seen, 100_000).await;
}

/// Two instances on one PostgreSQL, one killed mid-load: the clients carry on
/// against the other, retrying lost answers by key; every pay settles exactly
/// once and exactly the answered payments exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_one_killed_settle_every_pay_exactly_once() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let (payers, target) = payers_and_target(&db, 6).await;
    let env = [("TALLY_SETTLEMENT_DELAY", "1s")];
    let doomed = ServeProcess::start(&db.url_string(), &env);
    let survivor = ServeProcess::start(&db.url_string(), &env);
    let origins = [doomed.origin.clone(), survivor.origin.clone()];
    let survivor_origin = survivor.origin.clone();
    let http = reqwest::Client::new();
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let stop = stop.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            doomed.stop();
            tokio::time::sleep(Duration::from_millis(700)).await;
            stop.store(true, Ordering::SeqCst);
        }
    };
    let (mut seen, ()) = tokio::join!(load(&http, &origins, &payers, &target, stop, 0), killer);
    assert!(!seen.lost.is_empty(), "the kill cut nothing");
    recover(&http, &survivor_origin, &payers, &target, &mut seen).await;

    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&db.url_string()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let pending: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM payments WHERE status = 'pending'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        if pending == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{pending} pays never settled");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let settled: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM payments WHERE kind = 'payment' AND status = 'settled'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(settled as usize, seen.answered.len());
    let twice: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT payment_id FROM ledger_entries WHERE kind = 'settle' \
         GROUP BY payment_id HAVING COUNT(DISTINCT movement_id) <> 1) AS t",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(twice, 0, "a pay settled more than once");
    conn.close().await.unwrap();
    let log = survivor.stop();
    assert!(!log.contains("request failed"), "a 500 was logged: {log}");
    assert_exactly_what_was_answered(&db, &payers, &seen, 100_000).await;
    let store = db.store().await;
    let spent: i64 = seen.answered.values().map(|(_, _, cents)| cents).sum();
    assert_eq!(
        crate::fixtures::balance_cents(store.as_ref(), &target.id).await,
        spent
    );
}

/// SIGTERM under load: requests in flight are answered (200), new connections
/// are refused, the process exits 0, and every answered pay is stored.
async fn sigterm_under_load_answers_what_is_in_flight_and_exits_0(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let (payers, target) = payers_and_target(&db, 6).await;
    let server = ServeProcess::start(&db.url_string(), &[]);
    let origins = [server.origin.clone()];
    // A connection per request, so no request rides an idle connection the
    // server is closing.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let terminator = {
        let stop = stop.clone();
        let server = &server;
        async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            server.signal_term();
            tokio::time::sleep(Duration::from_millis(500)).await;
            stop.store(true, Ordering::SeqCst);
        }
    };
    let (seen, ()) = tokio::join!(load(&http, &origins, &payers, &target, stop, 0), terminator);
    let (status, log) =
        tokio::task::spawn_blocking(move || server.wait_exit(Duration::from_secs(15)))
            .await
            .unwrap();
    assert!(status.success(), "exit status {status:?}: {log}");
    // A connection the kernel took after the server stopped accepting is reset
    // (no server can answer what it never accepted), but no request the server
    // acted on may go unanswered.
    let cut = seen.cut;
    assert!(
        seen.answered.len() > 10,
        "only {} pays answered",
        seen.answered.len()
    );
    // Lost asks were never answered; their keys tell whether they were made.
    let server = ServeProcess::start(&db.url_string(), &[]);
    let mut seen = seen;
    let made_unanswered = recover(&http, &server.origin, &payers, &target, &mut seen).await;
    server.stop();
    assert_eq!(
        made_unanswered, 0,
        "a request in flight was made but not answered ({cut} connections cut)"
    );
    assert_exactly_what_was_answered(&db, &payers, &seen, 100_000).await;
}
