//! `cargo bench --bench api`: each hot path of issue 9 with its ratio to a
//! baseline measured in the same process, so the figures mean something on a
//! shared, noisy machine.
//!
//! Baselines: a minimal actix + sqlx handler reading one user by primary key
//! from the same database; a raw sqlx transfer transaction (debit, credit, one
//! insert) on the same kind of database; `pgbench` TPC-B (-c8 -j2) when the
//! database is PostgreSQL and `pgbench` is installed. Then the scale figures:
//! a big and a small database filled by SQL (the measured user's answers have
//! the same shape on both), the same requests on each, and the wall time and
//! peak memory of `tally admin audit` on the big one.
//!
//! Environment: `TALLY_BENCH_DATABASE_URL` (default: SQLite files in a temporary
//! directory; a PostgreSQL URL names a database to use, empty or Tally's, and
//! its server must let the role create the two scale databases),
//! `TALLY_BENCH_SECONDS` (3) per row, `TALLY_BENCH_CLIENTS` (32),
//! `TALLY_BENCH_SCALE_USERS` (10000) and `TALLY_BENCH_SCALE_PAYMENTS` (100000);
//! 0 users skips the scale rows. Issue 9's full scale is 100000 and 1000000.
//!
//! `cargo bench --bench api -- WORDS` measures only the rows whose name holds
//! WORDS (`-- "POST /v1/payments"`: the two pay rows), with the baselines they
//! are measured against, and no scale rows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tally::auth::password::PasswordHasher;
use tally::config::{DatabaseUrl, Settings};
use tally::domain::{new_id, now_micros, ScopeSet};
use tally::oauth::credentials::{self, CredentialKind};
use tally::startup::{self, Application};
use tally::store::{NewCode, NewGrant, NewOidcGrant, NewToken, Store, TokenKind};
use tally::{admin, oauth};

const PASSWORD: &str = "bench password 0123456789";

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one measured row achieved.
struct Measured {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
}

struct Table {
    rows: Vec<(String, Measured, String, Option<f64>)>,
}

impl Table {
    fn add(&mut self, name: &str, m: Measured, baseline: &str, baseline_rate: Option<f64>) {
        println!(
            "  {name}: {:.0}/s p50 {:.2} ms p99 {:.2} ms errors {}",
            m.rate, m.p50_ms, m.p99_ms, m.errors
        );
        self.rows
            .push((name.to_owned(), m, baseline.to_owned(), baseline_rate));
    }

    fn print(&self, title: &str) {
        println!("\n{title}");
        println!(
            "| {:<44} | {:>8} | {:>7} | {:>7} | {:>6} | {:<34} | {:>6} |",
            "path", "per s", "p50 ms", "p99 ms", "errors", "baseline (per s)", "ratio"
        );
        println!(
            "|{}|{}|{}|{}|{}|{}|{}|",
            "-".repeat(46),
            "-".repeat(10),
            "-".repeat(9),
            "-".repeat(9),
            "-".repeat(8),
            "-".repeat(36),
            "-".repeat(8)
        );
        for (name, m, baseline, base) in &self.rows {
            let (base_text, ratio) = match base {
                Some(b) if *b > 0.0 => {
                    (format!("{baseline} ({b:.0})"), format!("{:.2}", m.rate / b))
                }
                _ => (baseline.clone(), "-".to_owned()),
            };
            println!(
                "| {:<44} | {:>8.0} | {:>7.2} | {:>7.2} | {:>6} | {:<34} | {:>6} |",
                name, m.rate, m.p50_ms, m.p99_ms, m.errors, base_text, ratio
            );
        }
    }
}

/// Runs `one(client)` in a loop on `clients` tasks for `duration`; `one` says
/// whether the request succeeded.
async fn load<F, Fut>(clients: u64, duration: Duration, one: F) -> Measured
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..clients as usize)
        .map(|client| {
            let one = one.clone();
            tokio::spawn(async move {
                let (mut ok, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    if one(client).await {
                        ok += 1;
                    } else {
                        errors += 1;
                    }
                    latencies.push(sent.elapsed());
                }
                (ok, errors, latencies)
            })
        })
        .collect();
    let (mut ok, mut errors, mut latencies) = (0, 0, Vec::new());
    for task in tasks {
        let (o, e, l) = task.await.unwrap();
        ok += o;
        errors += e;
        latencies.extend(l);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let pick = |q: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * q) as usize)
            .map_or(0.0, |d: &Duration| d.as_secs_f64() * 1000.0)
    };
    Measured {
        rate: ok as f64 / elapsed,
        p50_ms: pick(0.5),
        p99_ms: pick(0.99),
        errors,
    }
}

async fn get_ok(http: &reqwest::Client, url: &str, token: &str) -> bool {
    match http.get(url).bearer_auth(token).send().await {
        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
        _ => false,
    }
}

/// GETs `url` with a bearer token from `clients` clients.
async fn load_get(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    clients: u64,
    secs: Duration,
) -> Measured {
    let (http, url, token) = (
        http.clone(),
        Arc::new(url.to_owned()),
        Arc::new(token.to_owned()),
    );
    load(clients, secs, move |_| {
        let (http, url, token) = (http.clone(), url.clone(), token.clone());
        async move { get_ok(&http, &url, &token).await }
    })
    .await
}

// ------------------------------------------------------------------ baselines

#[derive(Clone)]
enum Pool {
    Sqlite(sqlx::SqlitePool),
    Pg(sqlx::PgPool),
}

async fn connect(url: &DatabaseUrl, max: u32) -> Pool {
    use std::str::FromStr;
    match url {
        DatabaseUrl::Sqlite(url) => {
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
                .unwrap()
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .create_if_missing(true);
            Pool::Sqlite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(max)
                    .connect_with(options)
                    .await
                    .unwrap(),
            )
        }
        DatabaseUrl::Postgres(url) => Pool::Pg(
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(max)
                .connect(url)
                .await
                .unwrap(),
        ),
    }
}

/// The baseline web handler: one user by primary key, as JSON.
async fn pk_read(
    pool: actix_web::web::Data<Pool>,
    id: actix_web::web::Data<String>,
) -> actix_web::HttpResponse {
    const SQL: &str = "SELECT id, username, balance_cents FROM users WHERE id = $1";
    let row: Result<(String, String, i64), sqlx::Error> = match pool.get_ref() {
        Pool::Sqlite(p) => sqlx::query_as(SQL).bind(id.as_str()).fetch_one(p).await,
        Pool::Pg(p) => sqlx::query_as(SQL).bind(id.as_str()).fetch_one(p).await,
    };
    match row {
        Ok((id, username, cents)) => actix_web::HttpResponse::Ok()
            .json(serde_json::json!({"id": id, "username": username, "balance_cents": cents})),
        Err(_) => actix_web::HttpResponse::InternalServerError().finish(),
    }
}

/// Starts the actix + sqlx baseline; returns its URL.
async fn start_pk_baseline(url: &DatabaseUrl, user_id: &str) -> String {
    let pool = actix_web::web::Data::new(connect(url, 8).await);
    let id = actix_web::web::Data::new(user_id.to_owned());
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(pool.clone())
            .app_data(id.clone())
            .route("/pk", actix_web::web::get().to(pk_read))
    })
    .bind("127.0.0.1:0")
    .unwrap();
    let addr = server.addrs()[0];
    tokio::spawn(server.run());
    format!("http://{addr}/pk")
}

/// A raw sqlx transfer: debit, credit and one insert in a transaction, between
/// 1000 accounts of its own tables, from `clients` tasks.
async fn transfer_baseline(url: &DatabaseUrl, clients: u64, secs: Duration) -> Measured {
    let pool = connect(
        url,
        if matches!(url, DatabaseUrl::Sqlite(_)) {
            1
        } else {
            16
        },
    )
    .await;
    let setup = [
        "DROP TABLE IF EXISTS bench_transfers",
        "DROP TABLE IF EXISTS bench_accounts",
        "CREATE TABLE bench_accounts (id BIGINT PRIMARY KEY, balance_cents BIGINT NOT NULL)",
        "CREATE TABLE bench_transfers (id BIGINT NOT NULL, from_id BIGINT NOT NULL, \
         to_id BIGINT NOT NULL, amount_cents BIGINT NOT NULL)",
        "INSERT INTO bench_accounts (id, balance_cents) \
         SELECT a.i * 100 + b.i, 1000000000 FROM \
         (SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a, \
         (SELECT x.i * 10 + y.i AS i FROM \
          (SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
           UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) x, \
          (SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
           UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) y) b",
    ];
    for sql in setup {
        match &pool {
            Pool::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
            Pool::Pg(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        }
        .unwrap();
    }
    let counter = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let pool2 = pool.clone();
    let measured = load(clients, secs, move |_| {
        let (pool, counter) = (pool2.clone(), counter.clone());
        async move {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let a = (n * 7919) % 1000;
            let b = (a + 1 + (n * 104_729) % 999) % 1000;
            macro_rules! transfer {
                ($tx:expr) => {{
                    let mut tx = $tx;
                    sqlx::query("UPDATE bench_accounts SET balance_cents = balance_cents - 1 WHERE id = $1")
                        .bind(a)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("UPDATE bench_accounts SET balance_cents = balance_cents + 1 WHERE id = $1")
                        .bind(b)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "INSERT INTO bench_transfers (id, from_id, to_id, amount_cents) VALUES ($1, $2, $3, 1)",
                    )
                    .bind(n)
                    .bind(a)
                    .bind(b)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await
                }};
            }
            let done: Result<(), sqlx::Error> = async {
                match &pool {
                    Pool::Sqlite(p) => transfer!(p.begin_with("BEGIN IMMEDIATE").await?),
                    Pool::Pg(p) => transfer!(p.begin().await?),
                }
            }
            .await;
            done.is_ok()
        }
    })
    .await;
    for sql in ["DROP TABLE bench_transfers", "DROP TABLE bench_accounts"] {
        match &pool {
            Pool::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
            Pool::Pg(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        }
        .unwrap();
    }
    measured
}

/// pgbench TPC-B (-c8 -j2) on the database, if installed; its tps.
fn pgbench(url: &str, secs: Duration) -> Option<f64> {
    use std::process::Command;
    let init = Command::new("pgbench")
        .args(["-i", "-q", "-s", "1", url])
        .output()
        .ok()?;
    if !init.status.success() {
        eprintln!(
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        return None;
    }
    let run = Command::new("pgbench")
        .args([
            "-c",
            "8",
            "-j",
            "2",
            "-T",
            &secs.as_secs().max(1).to_string(),
            url,
        ])
        .output()
        .ok()?;
    let _ = Command::new("pgbench")
        .args(["-i", "-I", "d", url])
        .output();
    let out = String::from_utf8_lossy(&run.stdout);
    out.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
}

// ------------------------------------------------------------------ Tally

struct Seeded {
    origin: String,
    payer: String,
    payee: String,
    token: String,
    client_id: String,
    client_secret: String,
}

async fn user(store: &dyn Store, hasher: &PasswordHasher, username: &str) -> String {
    let created = admin::user_add(
        store,
        hasher,
        admin::UserAdd {
            username: username.to_owned(),
            password: PASSWORD.to_owned(),
            verified: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    created.id
}

/// The settings of every Tally the bench starts on `url`.
fn bench_settings(url: &DatabaseUrl) -> Settings {
    let mut settings = Settings::from_lookup(|_| None).unwrap();
    settings.listen = "127.0.0.1:0".parse().unwrap();
    settings.api_rate_limit = std::num::NonZeroU32::MAX;
    settings.oauth_rate_limit = std::num::NonZeroU32::MAX;
    settings.database_url = url.clone();
    // Required on PostgreSQL (SQLite makes a key file beside its database).
    settings.secret_key = Some("tally-bench-secret-key-0123456789abcdef0123456789".into());
    // The webhook row's receiver is on loopback.
    settings.webhook_allow_private = true;
    settings
}

/// `POST /v1/payments` of 0.01 from the seeded payer to the payee, through
/// the seeded app's token, on `clients` tasks for `secs`.
/// The pay rows: pays, then the same pays once the app has a webhook
/// endpoint, against the first.
#[allow(clippy::too_many_arguments)]
async fn pay_rows(
    http: &reqwest::Client,
    url: &DatabaseUrl,
    seeded: &Seeded,
    store: &dyn Store,
    table: &mut Table,
    money: (&str, f64),
    clients: u64,
    secs: Duration,
) {
    let pay = pay_load(http, seeded, clients, secs).await;
    let pay_rate = pay.rate;
    table.add("POST /v1/payments (one payer)", pay, money.0, Some(money.1));

    // Issue 40: the same pays once the app has one webhook endpoint (a
    // loopback receiver answering 204), against the row above: each pay then
    // also writes its events and their deliveries. Goal: a ratio of 0.9.
    let receiver = actix_web::HttpServer::new(|| {
        actix_web::App::new().default_service(actix_web::web::to(|| async {
            actix_web::HttpResponse::NoContent().finish()
        }))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let hook = format!("http://{}/hook", receiver.addrs()[0]);
    tokio::spawn(receiver.run());
    let secret = tally::startup::resolve_secret_key(&bench_settings(url), store)
        .await
        .unwrap();
    admin::webhook_add(store, &secret, true, &seeded.client_id, &hook, None)
        .await
        .unwrap();
    let hooked = pay_load(http, seeded, clients, secs).await;
    table.add(
        "POST /v1/payments (one payer, one webhook)",
        hooked,
        "POST /v1/payments (one payer)",
        Some(pay_rate),
    );
}

async fn pay_load(
    http: &reqwest::Client,
    seeded: &Seeded,
    clients: u64,
    secs: Duration,
) -> Measured {
    let (h, token) = (http.clone(), Arc::new(seeded.token.clone()));
    let pay_url = Arc::new(format!("{}/v1/payments", seeded.origin));
    let body = Arc::new(format!(
        r#"{{"user_id":"{}","amount":"0.01","note":"bench"}}"#,
        seeded.payee
    ));
    load(clients, secs, move |_| {
        let (h, token, url, body) = (h.clone(), token.clone(), pay_url.clone(), body.clone());
        async move {
            h.post(url.as_str())
                .bearer_auth(token.as_str())
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    })
    .await
}

async fn start_tally(url: &DatabaseUrl) -> (String, Arc<dyn Store>) {
    let settings = bench_settings(url);
    let store = startup::open_store(&settings).await.unwrap();
    let app = Application::build(settings, store.clone()).await.unwrap();
    let origin = app.public_origin().to_owned();
    tokio::spawn(app.run_until_stopped());
    (origin, store)
}

async fn seed(url: &DatabaseUrl) -> Seeded {
    let (origin, store) = start_tally(url).await;
    let store = store.as_ref();
    let suffix = &new_id()[20..];
    let hasher = PasswordHasher::new(2);
    let payer_name = format!("payer{suffix}");
    let payer = user(store, &hasher, &payer_name).await;
    let payee = user(store, &hasher, &format!("payee{suffix}")).await;
    admin::deposit(store, &payer_name, "1000000").await.unwrap();
    let scopes = ScopeSet::parse("access_profile access_balance make_payments").unwrap();
    let app = admin::app_add(
        store,
        admin::AppAdd {
            owner: payer_name,
            name: format!("Bench {suffix}"),
            redirect_url: "http://127.0.0.1:9/callback".to_owned(),
            description: None,
            site_url: None,
        },
    )
    .await
    .unwrap();
    // The app's own token: introspection answers an app about its own tokens
    // only (SPEC §6).
    let token = oauth::tokens::issue_access_token(
        store,
        &payer,
        Some(&app.client_id),
        &scopes,
        "code",
        oauth::tokens::SERVER_SIDE_TTL,
    )
    .await
    .unwrap();
    Seeded {
        origin,
        payer,
        payee,
        token: token.expose().to_owned(),
        client_id: app.client_id,
        client_secret: app.client_secret,
    }
}

/// A live refresh token of a new grant for the app.
async fn refresh_token(store: &dyn Store, seeded: &Seeded) -> String {
    let now = now_micros();
    let refresh = credentials::generate(CredentialKind::RefreshToken);
    let grant = NewGrant {
        id: new_id(),
        user_id: seeded.payer.clone(),
        client_id: Some(seeded.client_id.clone()),
        scopes: "access_profile".to_owned(),
        flow: "server",
        created_at: now,
    };
    let row = NewToken {
        digest: refresh.digest.clone(),
        kind: TokenKind::Refresh,
        scopes: None,
        created_at: now,
        expires_at: now + 86_400_000_000,
    };
    store
        .insert_grant_with_tokens(&grant, &[row])
        .await
        .unwrap();
    refresh.expose().to_owned()
}

/// A fresh code of a new grant for the app; with `openid`, an OpenID Connect
/// grant, whose exchange also signs an ID token (RS256).
async fn fresh_code(store: &dyn Store, payer: &str, client_id: &str, openid: bool) -> String {
    let now = now_micros();
    let code = credentials::generate(CredentialKind::AuthorizationCode);
    let grant = NewGrant {
        id: new_id(),
        user_id: payer.to_owned(),
        client_id: Some(client_id.to_owned()),
        scopes: if openid {
            "openid access_profile"
        } else {
            "access_profile"
        }
        .to_owned(),
        flow: "code",
        created_at: now,
    };
    let new_code = NewCode {
        digest: code.digest.clone(),
        redirect_uri: None,
        code_challenge: None,
        created_at: now,
        expires_at: now + 60_000_000,
    };
    if openid {
        let sign_in = NewOidcGrant {
            auth_time: now,
            sid: "bench".to_owned(),
            nonce: Some("bench".to_owned()),
            acr: None,
            amr: "pwd".to_owned(),
        };
        store
            .insert_grant_with_code_and_oidc(&grant, &new_code, &sign_in)
            .await
            .unwrap();
    } else {
        store
            .insert_grant_with_code(&grant, &new_code)
            .await
            .unwrap();
    }
    code.expose().to_owned()
}

/// Signs in over and over through the form, as a browser would.
async fn sign_in_loop(origin: String, username: String, until: Instant) {
    let http = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    while Instant::now() < until {
        let Ok(page) = http.get(format!("{origin}/signin")).send().await else {
            continue;
        };
        let page = page.text().await.unwrap_or_default();
        let csrf = page
            .split("name=\"csrf_token\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default()
            .to_owned();
        let _ = http
            .post(format!("{origin}/signin"))
            .form(&[
                ("username", username.as_str()),
                ("password", PASSWORD),
                ("csrf_token", &csrf),
            ])
            .send()
            .await;
    }
}

// ------------------------------------------------------------------ scale

/// Fills a migrated database by SQL with `n` users (the measured one, `hot`,
/// included), `m` settled pays (`h` of them the measured user's) with their
/// parties and hold + settle entries, deposits, ~10 friends per user and `h`
/// for the measured one; consistent for `tally admin audit`.
async fn fill(url: &DatabaseUrl, hot: &str, n: i64, m: i64, h: i64) {
    let pg = matches!(url, DatabaseUrl::Postgres(_));
    let now = now_micros();
    let t0 = now - 365 * 86_400_000_000;
    let step = ((now - 60_000_000 - t0) / m.max(1)).max(1);
    let h = h.min(m);
    let q = if h > 0 { m / h } else { 0 };
    let series = |var: &str, hi: i64| -> (String, String) {
        if pg {
            (
                format!("generate_series(1::bigint, {hi}::bigint) AS s({var})"),
                String::new(),
            )
        } else {
            (
                "s".to_owned(),
                format!("WITH RECURSIVE s({var}) AS (SELECT 1 UNION ALL SELECT {var} + 1 FROM s WHERE {var} < {hi}) "),
            )
        }
    };
    let hexid = |ms: &str, ch: char, i: &str| {
        if pg {
            format!("(lpad(to_hex({ms}), 12, '0') || '{ch}' || lpad(to_hex({i}), 19, '0'))")
        } else {
            format!("printf('%012x{ch}%019x', {ms}, {i})")
        }
    };
    let joined = |i: &str| format!("({t0} - ({n} - ({i})) * CAST(60000000 AS BIGINT))");
    let uid = |i: &str| {
        format!(
            "(CASE WHEN ({i}) = 0 THEN '{hot}' ELSE {} END)",
            hexid(&format!("{} / 1000", joined(i)), '7', i)
        )
    };
    let mid = |id: &str, ch: char| format!("(substr({id}, 1, 12) || '{ch}' || substr({id}, 14))");
    let deposit = 100_000_000i64;
    let first = [
        "Ann", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Henry", "Iris", "Jack", "Kate",
        "Liam", "Mia", "Noah", "Olga", "Paul", "Quinn", "Rosa", "Sam", "Tina",
    ];
    let last = [
        "Smith", "Jones", "Brown", "Garcia", "Miller", "Davis", "Wilson", "Moore", "Taylor",
        "Anderson", "Thomas", "Jackson", "White", "Harris", "Martin", "Thompson", "Lopez", "Clark",
        "Lewis", "Walker",
    ];
    let names = |list: &[&str]| {
        list.iter()
            .enumerate()
            .map(|(i, x)| format!("({i}, '{x}')"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut sql = vec![
        "CREATE TEMP TABLE fill_first (i INTEGER PRIMARY KEY, name TEXT NOT NULL)".to_owned(),
        "CREATE TEMP TABLE fill_last (i INTEGER PRIMARY KEY, name TEXT NOT NULL)".to_owned(),
        format!("INSERT INTO fill_first (i, name) VALUES {}", names(&first)),
        format!("INSERT INTO fill_last (i, name) VALUES {}", names(&last)),
    ];
    let (src, with) = series("i", n - 1);
    sql.push(format!(
        "{with}INSERT INTO users (id, username, first_name, last_name, about, email, email_verified, \
         phone, phone_verified, password_hash, verified, suspended, balance_cents, date_joined) \
         SELECT {}, lower(f.name) || '_' || lower(l.name) || s.i, f.name, l.name, '', \
         'u' || s.i || '@scale.example', TRUE, NULL, FALSE, h.hash, TRUE, FALSE, {deposit}, {} \
         FROM {src} JOIN fill_first f ON f.i = s.i % 20 JOIN fill_last l ON l.i = (s.i / 20) % 20 \
         CROSS JOIN (SELECT password_hash AS hash FROM users WHERE id = '{hot}') h",
        uid("s.i"),
        joined("s.i")
    ));
    sql.push(format!(
        "UPDATE users SET balance_cents = balance_cents + {deposit}, date_joined = {} WHERE id = '{hot}'",
        joined("0")
    ));
    sql.push(format!(
        "INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, created_at) \
         SELECT {}, 'deposit', CASE WHEN e.j = 1 THEN '@external' ELSE u.id END, \
         CASE WHEN e.j = 1 THEN -{deposit} ELSE {deposit} END, NULL, u.date_joined \
         FROM users u CROSS JOIN (SELECT 1 AS j UNION ALL SELECT 2) e ORDER BY u.date_joined, u.id, e.j",
        mid("u.id", 'd')
    ));
    sql.push("CREATE TEMP TABLE fill_pairs (a BIGINT NOT NULL, b BIGINT NOT NULL)".to_owned());
    let (src, with) = series("i", n - 1);
    sql.push(format!(
        "{with}INSERT INTO fill_pairs (a, b) SELECT s.i, 1 + ((s.i - 1) + st.j * 7) % ({n} - 1) \
         FROM {src} CROSS JOIN (SELECT 1 AS j UNION ALL SELECT 2 UNION ALL SELECT 3 \
         UNION ALL SELECT 4 UNION ALL SELECT 5) st"
    ));
    let (src, with) = series("i", h.min(n - 1));
    sql.push(format!(
        "{with}INSERT INTO fill_pairs (a, b) SELECT 0, s.i FROM {src}"
    ));
    sql.push(format!(
        "INSERT INTO friendships (user_id, friend_id, created_at) SELECT {}, {}, {t0} FROM \
         (SELECT a, b FROM fill_pairs WHERE a <> b UNION SELECT b, a FROM fill_pairs WHERE a <> b) x \
         WHERE TRUE ON CONFLICT DO NOTHING",
        uid("x.a"),
        uid("x.b")
    ));
    let hot_actor = format!("(s.k % {q} = 0 AND (s.k / {q}) % 2 = 0)");
    let hot_target = format!("(s.k % {q} = 0 AND (s.k / {q}) % 2 = 1)");
    let a = format!("(CASE WHEN {hot_actor} THEN 0 ELSE 1 + (s.k * 7919) % ({n} - 1) END)");
    let b = format!(
        "(CASE WHEN {hot_target} THEN 0 WHEN {hot_actor} THEN 1 + (s.k * 104729) % ({n} - 1) \
         ELSE 1 + ((s.k * 7919) % ({n} - 1) + 1 + (s.k * 104729) % ({n} - 2)) % ({n} - 1) END)"
    );
    let at = format!("({t0} + s.k * {step})");
    sql.push(
        "CREATE TEMP TABLE fill_pay (k BIGINT PRIMARY KEY, id TEXT NOT NULL, actor TEXT NOT NULL, \
         target TEXT NOT NULL, cents BIGINT NOT NULL, at BIGINT NOT NULL)"
            .to_owned(),
    );
    let (src, with) = series("k", m);
    sql.push(format!(
        "{with}INSERT INTO fill_pay (k, id, actor, target, cents, at) \
         SELECT s.k, {}, {}, {}, 1 + (s.k * 37) % 4999, {at} FROM {src}",
        hexid(&format!("{at} / 1000"), '7', "s.k"),
        uid(&a),
        uid(&b)
    ));
    sql.push(
        "INSERT INTO payments (id, kind, actor_id, target_type, target_user_id, target_email, \
         target_phone, action, amount_cents, note, audience, status, medium, date_created, \
         date_completed, reached_account_at, refund_payment_id) \
         SELECT id, 'payment', actor, 'user', target, NULL, NULL, 'pay', cents, 'dinner', \
         'private', 'settled', 'api', at, at + 200000, at, NULL FROM fill_pay ORDER BY k"
            .to_owned(),
    );
    sql.push(
        "INSERT INTO payment_parties (user_id, date_created, payment_id) \
         SELECT actor, at, id FROM fill_pay UNION ALL SELECT target, at, id FROM fill_pay ORDER BY 1, 2, 3"
            .to_owned(),
    );
    sql.push(format!(
        "INSERT INTO ledger_entries (movement_id, kind, account, amount_cents, payment_id, created_at) \
         SELECT CASE WHEN e.j <= 2 THEN {} ELSE {} END, CASE WHEN e.j <= 2 THEN 'hold' ELSE 'settle' END, \
         CASE e.j WHEN 1 THEN p.actor WHEN 4 THEN p.target ELSE '@held' END, \
         CASE WHEN e.j IN (1, 3) THEN -p.cents ELSE p.cents END, p.id, \
         CASE WHEN e.j <= 2 THEN p.at ELSE p.at + 200000 END \
         FROM fill_pay p CROSS JOIN (SELECT 1 AS j UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4) e \
         ORDER BY p.k, e.j",
        mid("p.id", 'b'),
        mid("p.id", 'c')
    ));
    sql.push(
        "CREATE TEMP TABLE fill_net (account TEXT PRIMARY KEY, cents BIGINT NOT NULL)".to_owned(),
    );
    sql.push(
        "INSERT INTO fill_net (account, cents) SELECT account, SUM(c) FROM \
         (SELECT actor AS account, -cents AS c FROM fill_pay UNION ALL SELECT target, cents FROM fill_pay) x \
         GROUP BY account"
            .to_owned(),
    );
    sql.push(
        "UPDATE users SET balance_cents = balance_cents + fill_net.cents FROM fill_net \
         WHERE fill_net.account = users.id"
            .to_owned(),
    );
    for t in [
        "fill_first",
        "fill_last",
        "fill_pairs",
        "fill_pay",
        "fill_net",
    ] {
        sql.push(format!("DROP TABLE {t}"));
    }
    use sqlx::{Connection, Executor};
    match url {
        DatabaseUrl::Sqlite(url) => {
            let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
            conn.execute("PRAGMA foreign_keys = OFF").await.unwrap();
            conn.execute("PRAGMA cache_size = -500000").await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            for s in &sql {
                tx.execute(s.as_str()).await.unwrap();
            }
            tx.commit().await.unwrap();
        }
        DatabaseUrl::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            tx.execute("SET LOCAL work_mem = '256MB'").await.unwrap();
            for s in &sql {
                tx.execute(s.as_str()).await.unwrap();
            }
            tx.commit().await.unwrap();
            conn.execute("VACUUM ANALYZE").await.unwrap();
        }
    }
}

/// A fresh database next to the bench's: a SQLite file in `dir`, or a new
/// PostgreSQL database on the same server (dropped by `drop_database`).
async fn fresh_database(base: &DatabaseUrl, dir: &std::path::Path, name: &str) -> DatabaseUrl {
    use sqlx::{Connection, Executor};
    match base {
        DatabaseUrl::Sqlite(_) => {
            DatabaseUrl::Sqlite(format!("sqlite://{}/{name}.db", dir.display()))
        }
        DatabaseUrl::Postgres(url) => {
            let db = format!("tally_bench_{name}_{}", std::process::id());
            let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
            conn.execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str())
                .await
                .unwrap();
            conn.execute(format!("CREATE DATABASE {db}").as_str())
                .await
                .unwrap();
            let mut parsed = url::Url::parse(url).unwrap();
            parsed.set_path(&db);
            DatabaseUrl::Postgres(parsed.to_string())
        }
    }
}

async fn drop_database(base: &DatabaseUrl, url: &DatabaseUrl) {
    use sqlx::{Connection, Executor};
    if let (DatabaseUrl::Postgres(base), DatabaseUrl::Postgres(url)) = (base, url) {
        let db = url::Url::parse(url)
            .unwrap()
            .path()
            .trim_start_matches('/')
            .to_owned();
        let mut conn = sqlx::PgConnection::connect(base).await.unwrap();
        let _ = conn
            .execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str())
            .await;
    }
}

/// Wall time and peak resident memory of `tally admin audit --json`, and
/// whether it said ok.
fn audit(url: &DatabaseUrl) -> (f64, u64, bool) {
    let text = match url {
        DatabaseUrl::Sqlite(u) | DatabaseUrl::Postgres(u) => u.clone(),
    };
    let started = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["admin", "audit", "--json"])
        .env("TALLY_DATABASE_URL", text)
        .env("TALLY_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // VmHWM is the process's peak resident set so far; read it until it exits.
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            if let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
            {
                peak_kib = kib;
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let ok = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .map(|v| v["ok"] == true)
        .unwrap_or(false);
    (started.elapsed().as_secs_f64(), peak_kib / 1024, ok)
}

struct ScaleFigures {
    rows: Vec<(&'static str, Measured)>,
    audit: (f64, u64, bool),
}

async fn scale_one(
    url: &DatabaseUrl,
    n: i64,
    m: i64,
    h: i64,
    clients: u64,
    secs: Duration,
) -> ScaleFigures {
    let (origin, store) = start_tally(url).await;
    let hasher = PasswordHasher::new(2);
    let hot = user(store.as_ref(), &hasher, "scalehot").await;
    let started = Instant::now();
    fill(url, &hot, n, m, h).await;
    println!(
        "  filled {n} users, {m} payments in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let scopes = ScopeSet::parse("access_profile access_balance access_friends").unwrap();
    let token = oauth::tokens::issue_personal_access_token(store.as_ref(), &hot, &scopes)
        .await
        .unwrap();
    let token = token.expose().to_owned();
    let http = reqwest::Client::new();
    // The 20th page after the first, reached by following `next`.
    let mut deep = format!("{origin}/v1/payments");
    for _ in 0..20 {
        let page: serde_json::Value = http
            .get(&deep)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        deep = page["pagination"]["next"].as_str().unwrap().to_owned();
    }
    let mut rows = Vec::new();
    for (name, url) in [
        ("GET /v1/me", format!("{origin}/v1/me")),
        (
            "GET /v1/payments (first page)",
            format!("{origin}/v1/payments"),
        ),
        ("GET /v1/payments (page 21)", deep),
        (
            "GET /v1/users/:id/friends",
            format!("{origin}/v1/users/{hot}/friends"),
        ),
        (
            "GET /v1/users?query=smith",
            format!("{origin}/v1/users?query=smith"),
        ),
    ] {
        let m = load_get(&http, &url, &token, clients, secs).await;
        println!("  {name}: {:.0}/s p50 {:.2} ms", m.rate, m.p50_ms);
        rows.push((name, m));
    }
    let audit = audit(url);
    println!(
        "  tally admin audit: {:.2} s, {} MiB, ok {}",
        audit.0, audit.1, audit.2
    );
    ScaleFigures { rows, audit }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let secs = Duration::from_secs(env_number("TALLY_BENCH_SECONDS", 3));
    let clients = env_number("TALLY_BENCH_CLIENTS", 32);
    let scale_users = env_number("TALLY_BENCH_SCALE_USERS", 10_000) as i64;
    let scale_payments = env_number("TALLY_BENCH_SCALE_PAYMENTS", 100_000) as i64;
    let dir = tempfile::tempdir().unwrap();
    let url = match std::env::var("TALLY_BENCH_DATABASE_URL") {
        Ok(url) => DatabaseUrl::parse(&url).unwrap(),
        Err(_) => DatabaseUrl::Sqlite(format!("sqlite://{}/bench.db", dir.path().display())),
    };
    let backend = if matches!(url, DatabaseUrl::Postgres(_)) {
        "postgres"
    } else {
        "sqlite"
    };
    println!(
        "Tally bench on {backend}: {clients} clients, {} s a row, {} ({} cores)",
        secs.as_secs(),
        std::env::consts::ARCH,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let seeded = seed(&url).await;
    let (_, store) = start_tally(&url).await;
    let http = reqwest::Client::new();
    let mut table = Table { rows: Vec::new() };
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wants = |name: &str| only.as_deref().is_none_or(|words| name.contains(words));

    println!("baselines");
    let pk_rate = if ["GET /healthz", "GET /v1/me", "POST /v1/oauth/introspect"]
        .into_iter()
        .any(wants)
    {
        let pk_url = start_pk_baseline(&url, &seeded.payer).await;
        let pk = load_get(&http, &pk_url, "-", clients, secs).await;
        let pk_rate = pk.rate;
        table.add("actix + sqlx, one read by primary key", pk, "-", None);
        pk_rate
    } else {
        0.0
    };
    let transfer_url = match &url {
        DatabaseUrl::Sqlite(_) => {
            DatabaseUrl::Sqlite(format!("sqlite://{}/transfer.db", dir.path().display()))
        }
        pg => pg.clone(),
    };
    let transfer = transfer_baseline(&transfer_url, clients, secs).await;
    let transfer_rate = transfer.rate;
    table.add("raw sqlx transfer transaction", transfer, "-", None);
    let pgbench_rate = match &url {
        DatabaseUrl::Postgres(u) => pgbench(u, secs),
        DatabaseUrl::Sqlite(_) => None,
    };
    if let Some(tps) = pgbench_rate {
        println!("  pgbench -c8 -j2: {tps:.0} tps");
    }
    let (money_base, money_rate) = match pgbench_rate {
        Some(tps) => ("pgbench TPC-B -c8".to_owned(), tps),
        None => ("raw sqlx transfer".to_owned(), transfer_rate),
    };

    println!("Tally");
    let o = &seeded.origin;
    if only.is_some() {
        if wants("POST /v1/payments (one payer)") {
            pay_rows(
                &http,
                &url,
                &seeded,
                store.as_ref(),
                &mut table,
                (&money_base, money_rate),
                clients,
                secs,
            )
            .await;
        }
        table.print(&format!(
            "Hot paths on {backend} (ratio = Tally / baseline, same process)"
        ));
        return;
    }
    let health = load_get(&http, &format!("{o}/healthz"), "-", clients, secs).await;
    table.add(
        "GET /healthz",
        health,
        "actix + sqlx PK read",
        Some(pk_rate),
    );
    let me = load_get(&http, &format!("{o}/v1/me"), &seeded.token, clients, secs).await;
    let me_rate = me.rate;
    table.add("GET /v1/me", me, "actix + sqlx PK read", Some(pk_rate));

    let (h, cid, secret, token) = (
        http.clone(),
        Arc::new(seeded.client_id.clone()),
        Arc::new(seeded.client_secret.clone()),
        Arc::new(seeded.token.clone()),
    );
    let introspect_url = Arc::new(format!("{o}/v1/oauth/introspect"));
    let introspect = load(clients, secs, move |_| {
        let (h, cid, secret, token, url) = (
            h.clone(),
            cid.clone(),
            secret.clone(),
            token.clone(),
            introspect_url.clone(),
        );
        async move {
            h.post(url.as_str())
                .basic_auth(cid.as_str(), Some(secret.as_str()))
                .form(&[
                    ("token", token.as_str()),
                    ("token_type_hint", "access_token"),
                ])
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    })
    .await;
    table.add(
        "POST /v1/oauth/introspect",
        introspect,
        "actix + sqlx PK read",
        Some(pk_rate),
    );

    pay_rows(
        &http,
        &url,
        &seeded,
        store.as_ref(),
        &mut table,
        (&money_base, money_rate),
        clients,
        secs,
    )
    .await;

    let mut chains = Vec::new();
    for _ in 0..clients {
        chains.push(refresh_token(store.as_ref(), &seeded).await);
    }
    let chains = Arc::new(Mutex::new(chains));
    let (h, cid, secret) = (
        http.clone(),
        Arc::new(seeded.client_id.clone()),
        Arc::new(seeded.client_secret.clone()),
    );
    let token_url = Arc::new(format!("{o}/v1/oauth/access_token"));
    let refresh = load(clients, secs, move |client| {
        let (h, cid, secret, url, chains) = (
            h.clone(),
            cid.clone(),
            secret.clone(),
            token_url.clone(),
            chains.clone(),
        );
        async move {
            let current = chains.lock().unwrap()[client].clone();
            let Ok(r) = h
                .post(url.as_str())
                .basic_auth(cid.as_str(), Some(secret.as_str()))
                .form(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", current.as_str()),
                ])
                .send()
                .await
            else {
                return false;
            };
            let Ok(body) = r.json::<serde_json::Value>().await else {
                return false;
            };
            match body["refresh_token"].as_str() {
                Some(next) => {
                    chains.lock().unwrap()[client] = next.to_owned();
                    true
                }
                None => false,
            }
        }
    })
    .await;
    table.add("refresh grant", refresh, &money_base, Some(money_rate));

    // The code exchange with and without openid (SPEC §10): the difference
    // is the ID token's signature, made on the blocking pool. Each exchange
    // spends a code written just before it (in the timed loop, alike in both).
    for (name, openid) in [
        ("code exchange (code made in the loop)", false),
        ("code exchange with openid (code made in the loop)", true),
    ] {
        let (h, cid, secret, url, store, payer) = (
            http.clone(),
            Arc::new(seeded.client_id.clone()),
            Arc::new(seeded.client_secret.clone()),
            Arc::new(format!("{o}/v1/oauth/access_token")),
            store.clone(),
            Arc::new(seeded.payer.clone()),
        );
        let exchange = load(clients, secs, move |_| {
            let (h, cid, secret, url, store, payer) = (
                h.clone(),
                cid.clone(),
                secret.clone(),
                url.clone(),
                store.clone(),
                payer.clone(),
            );
            async move {
                let code = fresh_code(store.as_ref(), &payer, &cid, openid).await;
                let Ok(r) = h
                    .post(url.as_str())
                    .basic_auth(cid.as_str(), Some(secret.as_str()))
                    .form(&[
                        ("grant_type", "authorization_code"),
                        ("code", code.as_str()),
                    ])
                    .send()
                    .await
                else {
                    return false;
                };
                let Ok(body) = r.json::<serde_json::Value>().await else {
                    return false;
                };
                body["access_token"].is_string() && (!openid || body["id_token"].is_string())
            }
        })
        .await;
        table.add(name, exchange, &money_base, Some(money_rate));
    }

    let payer_name = store
        .find_user(tally::store::UserKey::Id(&seeded.payer))
        .await
        .unwrap()
        .unwrap()
        .username;
    let until = Instant::now() + secs + Duration::from_millis(500);
    let signins: Vec<_> = (0..2)
        .map(|_| tokio::spawn(sign_in_loop(o.clone(), payer_name.clone(), until)))
        .collect();
    let me_busy = load_get(&http, &format!("{o}/v1/me"), &seeded.token, clients, secs).await;
    for s in signins {
        let _ = s.await;
    }
    table.add(
        "GET /v1/me while 2 clients sign in",
        me_busy,
        "GET /v1/me unloaded",
        Some(me_rate),
    );
    table.print(&format!(
        "Hot paths on {backend} (ratio = Tally / baseline, same process)"
    ));

    if scale_users > 1000 {
        let hot = 1000;
        println!(
            "\nscale: small database ({} users, {hot} payments)",
            hot + 1
        );
        let small_url = fresh_database(&url, dir.path(), "scale_small").await;
        let small = scale_one(&small_url, hot + 1, hot, hot, clients, secs).await;
        drop_database(&url, &small_url).await;
        println!("scale: big database ({scale_users} users, {scale_payments} payments)");
        let big_url = fresh_database(&url, dir.path(), "scale_big").await;
        let big = scale_one(&big_url, scale_users, scale_payments, hot, clients, secs).await;
        drop_database(&url, &big_url).await;
        println!(
            "\nScale on {backend}: {scale_users} users and {scale_payments} payments vs {} users and {hot} payments (goal: ratio >= 0.77)",
            hot + 1
        );
        println!(
            "| {:<32} | {:>9} | {:>9} | {:>6} | {:>12} | {:>12} |",
            "path", "big /s", "small /s", "ratio", "big p50 ms", "small p50 ms"
        );
        println!(
            "|{}|{}|{}|{}|{}|{}|",
            "-".repeat(34),
            "-".repeat(11),
            "-".repeat(11),
            "-".repeat(8),
            "-".repeat(14),
            "-".repeat(14)
        );
        for ((name, b), (_, s)) in big.rows.iter().zip(&small.rows) {
            println!(
                "| {:<32} | {:>9.0} | {:>9.0} | {:>6.2} | {:>12.2} | {:>12.2} |",
                name,
                b.rate,
                s.rate,
                b.rate / s.rate,
                b.p50_ms,
                s.p50_ms
            );
        }
        println!(
            "| tally admin audit (big)          | {:.2} s, peak {} MiB resident, ok: {} (goal: < 10 s, <= 256 MiB at 1,000,000 payments) |",
            big.audit.0, big.audit.1, big.audit.2
        );
    }
}
