//! The operator commands, through the real `tally` binary.

use crate::browser::{query_of, Browser};
use crate::helpers::{on_both_backends, tally, Backend, ServeProcess, TestDb};
use serde_json::json;

on_both_backends!(
    every_admin_command_prints_its_documented_json,
    every_admin_command_prints_its_documented_text,
    bad_operator_input_is_refused_and_writes_nothing,
    sixteen_parallel_deposit_processes_all_count,
    the_audit_exits_1_when_the_ledger_disagrees,
    migrate_applies_migrations_and_is_repeatable,
    demo_seeds_once_and_prints_a_working_authorize_url,
);

fn keys(value: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

async fn every_admin_command_prints_its_documented_json(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();

    let ann = tally(
        &url,
        &[
            "admin",
            "user",
            "add",
            "--username",
            "ann",
            "--password",
            "correct horse",
            "--first-name",
            "Ann",
            "--last-name",
            "Lee",
            "--email",
            "Ann@Example.com",
            "--phone",
            "(212) 555-0187",
            "--about",
            "hi",
            "--json",
        ],
    );
    assert!(ann.status.success(), "{}", ann.stderr);
    let ann = ann.json();
    assert_eq!(keys(&ann), ["id", "username"]);
    assert_eq!(ann["username"], "ann");
    assert!(ann["id"].is_string());

    // --json may also come before the subcommand.
    let ben = tally(
        &url,
        &[
            "admin",
            "--json",
            "user",
            "add",
            "--username",
            "ben",
            "--password",
            "password1",
            "--verified",
        ],
    );
    assert!(ben.status.success(), "{}", ben.stderr);

    let verified = tally(&url, &["admin", "user", "verify", "ann", "--json"]).json();
    assert_eq!(
        verified,
        json!({"id": ann["id"], "username": "ann", "verified": true, "suspended": false})
    );
    let suspended = tally(&url, &["admin", "user", "suspend", "ANN", "--json"]).json();
    assert_eq!(suspended["suspended"], true);
    assert_eq!(
        keys(&suspended),
        ["id", "suspended", "username", "verified"]
    );
    let unsuspended = tally(&url, &["admin", "user", "unsuspend", "ann", "--json"]).json();
    assert_eq!(unsuspended["suspended"], false);

    let app = tally(
        &url,
        &[
            "admin",
            "app",
            "add",
            "--owner",
            "ann",
            "--name",
            "My App",
            "--redirect-url",
            "https://app.example.com/callback",
            "--description",
            "Splits bills",
            "--site-url",
            "app.example.com",
            "--json",
        ],
    );
    assert!(app.status.success(), "{}", app.stderr);
    let app = app.json();
    assert_eq!(keys(&app), ["client_id", "client_secret"]);
    let client_id = app["client_id"].as_str().unwrap().to_owned();
    assert!(app["client_secret"]
        .as_str()
        .unwrap()
        .starts_with("tly_secret_"));

    let suspended_app = tally(&url, &["admin", "app", "suspend", &client_id, "--json"]).json();
    assert_eq!(
        suspended_app,
        json!({"client_id": client_id, "suspended": true})
    );

    // Balances are JSON numbers with exact cents.
    let deposit = tally(&url, &["admin", "deposit", "ann", "12.5", "--json"]);
    assert_eq!(
        deposit.stdout.trim(),
        r#"{"username":"ann","balance":12.50}"#
    );
    let deposit = tally(&url, &["admin", "deposit", "ann", "0.05", "--json"]).json();
    assert_eq!(deposit["balance"].as_f64(), Some(12.55));

    let friends = tally(&url, &["admin", "friend", "add", "ann", "ben", "--json"]).json();
    assert_eq!(friends, json!({"ok": true}));

    let audit = tally(&url, &["admin", "audit", "--json"]);
    assert!(audit.status.success(), "{}", audit.stdout);
    let audit = audit.json();
    assert_eq!(
        keys(&audit),
        ["accounts", "discrepancies", "ok", "total_balance"]
    );
    assert_eq!(audit["ok"], true);
    assert_eq!(audit["accounts"], 2);
    assert_eq!(audit["total_balance"].as_f64(), Some(12.55));
    assert_eq!(audit["discrepancies"], json!([]));

    // Without --json the same commands speak plain text.
    let text = tally(&url, &["admin", "deposit", "ben", "1"]);
    assert!(text.status.success());
    assert!(text.stdout.contains("1.00"), "{}", text.stdout);
}

/// The plain-text answers, byte for byte: operators and their scripts read them.
async fn every_admin_command_prints_its_documented_text(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();
    let run = |args: &[&str]| {
        let run = tally(&url, args);
        assert!(run.status.success(), "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr, "", "{args:?}");
        run.stdout
    };

    let created = run(&[
        "admin",
        "user",
        "add",
        "--username",
        "Ann",
        "--password",
        "password1",
    ]);
    let id = created
        .strip_prefix("created user Ann (")
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("{created:?}"));
    assert_eq!(id.len(), 32, "{created:?}");
    run(&[
        "admin",
        "user",
        "add",
        "--username",
        "ben",
        "--password",
        "password1",
    ]);
    assert_eq!(
        run(&["admin", "user", "verify", "ann"]),
        "Ann: verified=true suspended=false\n"
    );
    assert_eq!(
        run(&["admin", "user", "suspend", "ann"]),
        "Ann: verified=true suspended=true\n"
    );
    assert_eq!(
        run(&["admin", "user", "unsuspend", "ann"]),
        "Ann: verified=true suspended=false\n"
    );

    let app = run(&[
        "admin",
        "app",
        "add",
        "--owner",
        "ann",
        "--name",
        "My App",
        "--redirect-url",
        "https://app.example.com/callback",
    ]);
    let lines: Vec<&str> = app.lines().collect();
    assert_eq!(lines.len(), 2, "{app:?}");
    let client_id = lines[0]
        .strip_prefix("client_id:     ")
        .unwrap_or_else(|| panic!("{app:?}"));
    let secret = lines[1]
        .strip_prefix("client_secret: tly_secret_")
        .and_then(|rest| rest.strip_suffix("  (shown once; only its digest is kept)"))
        .unwrap_or_else(|| panic!("{app:?}"));
    assert!(!secret.is_empty() && !secret.contains(' '), "{app:?}");
    assert_eq!(
        run(&["admin", "app", "suspend", client_id]),
        format!("{client_id}: suspended=true\n")
    );
    assert_eq!(
        run(&["admin", "app", "unsuspend", client_id]),
        format!("{client_id}: suspended=false\n")
    );

    assert_eq!(
        run(&["admin", "deposit", "ann", "12.5"]),
        "Ann now has a balance of 12.50\n"
    );
    assert_eq!(
        run(&["admin", "friend", "add", "ann", "BEN"]),
        "ann and BEN are friends\n"
    );
    assert_eq!(
        run(&["admin", "audit"]),
        "2 accounts, total balance 12.50: ledger consistent\n"
    );
    assert_eq!(
        run(&["migrate"]),
        match backend {
            Backend::Sqlite => "migrations applied (sqlite)\n",
            Backend::Postgres => "migrations applied (postgres)\n",
        }
    );

    // A refusal: one line on stderr, nothing on stdout; with --json, one
    // object on stdout as well.
    let refused = tally(&url, &["admin", "deposit", "nobody", "5"]);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(refused.stdout, "");
    assert_eq!(refused.stderr, "tally: no such user: nobody\n");
    let refused = tally(&url, &["admin", "deposit", "nobody", "5", "--json"]);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        refused.stdout,
        "{\"error\":{\"message\":\"no such user: nobody\",\"code\":\"not_found\"}}\n"
    );
    assert_eq!(refused.stderr, "tally: no such user: nobody\n");
    let unreadable = tally(&url, &["admin", "--json", "audit", "extra"]);
    assert_eq!(unreadable.status.code(), Some(2));
    assert_eq!(
        unreadable.stdout,
        "{\"error\":{\"message\":\"unexpected argument 'extra' found\",\"code\":\"invalid_arguments\"}}\n"
    );
    assert!(
        unreadable
            .stderr
            .starts_with("error: unexpected argument 'extra' found\n"),
        "{}",
        unreadable.stderr
    );

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.db");
    let backup = tally(&url, &["admin", "backup", copy.to_str().unwrap()]);
    match backend {
        Backend::Sqlite => {
            assert!(backup.status.success(), "{}", backup.stderr);
            let absolute = std::fs::canonicalize(&copy).unwrap();
            let bytes = std::fs::metadata(&copy).unwrap().len();
            assert_eq!(
                backup.stdout,
                format!("backed up to {} ({bytes} bytes)\n", absolute.display())
            );
            let again = tally(&url, &["admin", "backup", copy.to_str().unwrap()]);
            assert_eq!(again.status.code(), Some(1));
            assert_eq!(again.stdout, "");
            assert_eq!(
                again.stderr,
                format!(
                    "tally: {} already exists; a backup never overwrites a file\n",
                    copy.display()
                )
            );
        }
        Backend::Postgres => {
            assert_eq!(backup.status.code(), Some(1));
            assert_eq!(backup.stdout, "");
            assert_eq!(
                backup.stderr,
                "tally: tally admin backup copies an SQLite database; back up PostgreSQL \
                 with pg_dump (or your provider's backups)\n"
            );
        }
    }
}

async fn bad_operator_input_is_refused_and_writes_nothing(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();
    let setup = tally(
        &url,
        &[
            "admin",
            "user",
            "add",
            "--username",
            "ann",
            "--password",
            "password1",
            "--email",
            "ann@example.com",
            // Verified, so the address is ann's: nobody else may take it.
            "--verified",
            "--json",
        ],
    );
    assert!(setup.status.success(), "{}", setup.stderr);

    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "admin",
                "user",
                "add",
                "--username",
                "ANN",
                "--password",
                "password1",
            ],
            "username is already taken",
        ),
        (
            &[
                "admin",
                "user",
                "add",
                "--username",
                "ben",
                "--password",
                "password1",
                "--email",
                "ANN@example.com",
            ],
            "email is already taken",
        ),
        (
            &[
                "admin",
                "user",
                "add",
                "--username",
                "ben",
                "--password",
                "password1",
                "--email",
                "not-an-email",
            ],
            "not a valid e-mail",
        ),
        (
            &[
                "admin",
                "user",
                "add",
                "--username",
                "ben",
                "--password",
                "password1",
                "--phone",
                "555-0187",
            ],
            "not a valid US phone",
        ),
        (
            &[
                "admin",
                "user",
                "add",
                "--username",
                "ben",
                "--password",
                "short",
            ],
            "at least 8",
        ),
        (
            &[
                "admin",
                "user",
                "add",
                "--username",
                "b",
                "--password",
                "password1",
            ],
            "3 to 30",
        ),
        (&["admin", "deposit", "ann", "0.001"], "at most 2 decimal"),
        (&["admin", "deposit", "ann", "-1"], "must be positive"),
        (&["admin", "deposit", "ann", "abc"], "decimal number"),
        (&["admin", "deposit", "ann", "0"], "not be zero"),
        (&["admin", "deposit", "nobody", "5"], "no such user: nobody"),
        (&["admin", "user", "verify", "nobody"], "no such user"),
        (&["admin", "friend", "add", "ann", "nobody"], "no such user"),
        (&["admin", "friend", "add", "ann", "ann"], "own friend"),
        (
            &[
                "admin",
                "app",
                "add",
                "--owner",
                "nobody",
                "--name",
                "X",
                "--redirect-url",
                "https://x.org/cb",
            ],
            "no such user",
        ),
        (
            &[
                "admin",
                "app",
                "add",
                "--owner",
                "ann",
                "--name",
                "X",
                "--redirect-url",
                "ftp://x.org/cb",
            ],
            "http or https",
        ),
        (
            &[
                "admin",
                "app",
                "add",
                "--owner",
                "ann",
                "--name",
                "X",
                "--redirect-url",
                "https://x.org/cb#f",
            ],
            "fragment",
        ),
        (
            &[
                "admin",
                "app",
                "add",
                "--owner",
                "ann",
                "--name",
                " ",
                "--redirect-url",
                "https://x.org/cb",
            ],
            "app name",
        ),
        (
            &["admin", "app", "suspend", "no-such-client"],
            "no such app",
        ),
    ];
    for (args, message) in cases {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let run = tally(&url, &with_json);
        assert!(!run.status.success(), "{args:?} succeeded");
        assert!(
            run.stderr.contains(message),
            "{args:?}: stderr {:?} lacks {message:?}",
            run.stderr
        );
        let error = run.json();
        assert!(error["error"]["message"]
            .as_str()
            .unwrap()
            .contains(message));
        assert!(error["error"]["code"].is_string());
    }

    // Arguments clap refuses, and bad settings, still give one JSON object
    // under --json (exit code 2, like any refused start).
    for (args, env, code) in [
        (
            &["admin", "--json", "user", "add", "--password", "x"][..],
            None,
            "invalid_arguments",
        ),
        (
            &["admin", "--json", "audit", "extra"][..],
            None,
            "invalid_arguments",
        ),
        (
            &["admin", "--json", "audit"][..],
            Some(("TALLY_DEVELOPER_SIGNUP", "maybe")),
            "invalid_setting",
        ),
    ] {
        let mut vars = vec![("TALLY_DATABASE_URL", url.as_str())];
        vars.extend(env);
        let run = crate::helpers::tally_with_env(&vars, args);
        assert_eq!(run.status.code(), Some(2), "{args:?}");
        assert_eq!(run.json()["error"]["code"], code, "{args:?}");
    }

    // Nothing was written: still one account, no money, a clean ledger.
    let audit = tally(&url, &["admin", "audit", "--json"]).json();
    assert_eq!(audit["accounts"], 1);
    assert_eq!(audit["total_balance"].as_f64(), Some(0.0));
    assert_eq!(audit["ok"], true);
}

async fn sixteen_parallel_deposit_processes_all_count(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();
    assert!(tally(
        &url,
        &[
            "admin",
            "user",
            "add",
            "--username",
            "ann",
            "--password",
            "password1"
        ]
    )
    .status
    .success());
    let runs: Vec<_> = (0..16)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || tally(&url, &["admin", "deposit", "ann", "2.50", "--json"]))
        })
        .collect();
    for run in runs {
        let run = run.join().unwrap();
        assert!(run.status.success(), "{}", run.stderr);
    }
    let audit = tally(&url, &["admin", "audit", "--json"]);
    assert!(audit.status.success(), "{}", audit.stdout);
    assert_eq!(audit.json()["total_balance"].as_f64(), Some(40.0));
}

async fn the_audit_exits_1_when_the_ledger_disagrees(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();
    assert!(tally(
        &url,
        &[
            "admin",
            "user",
            "add",
            "--username",
            "ann",
            "--password",
            "password1"
        ]
    )
    .status
    .success());
    assert!(tally(&url, &["admin", "deposit", "ann", "10"])
        .status
        .success());
    crate::store_conformance::tamper(&db, "UPDATE users SET balance_cents = 1").await;
    let audit = tally(&url, &["admin", "audit", "--json"]);
    assert_eq!(audit.status.code(), Some(1));
    let report = audit.json();
    assert_eq!(report["ok"], false);
    assert_eq!(report["discrepancies"][0]["kind"], "balance_mismatch");
    assert_eq!(report["discrepancies"][0]["username"], "ann");
    let text = tally(&url, &["admin", "audit"]);
    assert_eq!(text.status.code(), Some(1));
    let account = report["discrepancies"][0]["account"].as_str().unwrap();
    assert_eq!(
        text.stdout,
        format!(
            "1 accounts, total balance 0.01: DISCREPANCIES FOUND\n  BalanceMismatch {{ \
             account: \"{account}\", username: \"ann\", balance: Money(1), ledger: Money(1000) }}\n"
        )
    );
}

async fn migrate_applies_migrations_and_is_repeatable(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();
    for _ in 0..2 {
        let run = tally(&url, &["migrate"]);
        assert!(run.status.success(), "{}", run.stderr);
        assert!(run.stdout.contains("migrations applied"));
    }
}

async fn demo_seeds_once_and_prints_a_working_authorize_url(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();
    let mut secrets = Vec::new();
    for run in 0..2 {
        let demo = ServeProcess::start_command("demo", &url, &[]);
        let printed = demo.wait_for_stdout("/v1/oauth/authorize?");
        // A fresh demo secret each start: none can be rebuilt from the database.
        let secret = printed
            .lines()
            .find_map(|l| l.trim().strip_prefix("client_secret:"))
            .map(|s| s.trim().to_owned())
            .unwrap();
        assert!(secret.starts_with("tly_secret_"), "{secret}");
        assert!(
            !secrets.contains(&secret),
            "run {run}: the same secret again"
        );
        secrets.push(secret);
        assert!(
            printed.contains(&format!("running at {}", demo.origin)),
            "{printed}"
        );
        assert!(printed.contains("alice, bob, carol"));
        let authorize = printed
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("http") && l.contains("/v1/oauth/authorize?"))
            .unwrap()
            .to_owned();
        let http = reqwest::Client::new();
        for path in ["/healthz", "/readyz"] {
            let status = http
                .get(format!("{}{path}", demo.origin))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200, "{path}");
        }
        let browser = Browser::new(&demo.origin);
        let consent = browser
            .to_consent(&authorize, "alice", tally::demo::DEMO_PASSWORD)
            .await;
        let answer = if consent.status == 303 {
            consent
        } else {
            browser.decide(&consent, "allow").await
        };
        let location = answer.location().unwrap();
        assert!(
            location.starts_with(&format!("{}/demo/callback?", demo.origin)),
            "{location}"
        );
        assert!(query_of(&location)["access_token"].starts_with("tly_at_"));
        let callback = browser.get(&location).await;
        assert_eq!(callback.status, 200);
        assert!(callback.text().contains("access_token"));
        drop(demo);
        // Running it again creates nothing new.
        let audit = tally(&url, &["admin", "audit", "--json"]).json();
        assert_eq!(audit["accounts"], 3, "run {run}");
        assert_eq!(audit["total_balance"].as_f64(), Some(850.0), "run {run}");
        assert_eq!(audit["ok"], true);
    }
}

/// The definitions of the database's own functions (not its aggregates), as
/// PostgreSQL shows them.
async fn function_definitions(db: &TestDb) -> String {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&db.url_string()).await.unwrap();
    sqlx::query_scalar(
        "SELECT string_agg(pg_get_functiondef(oid), E'\\n' ORDER BY proname) FROM pg_proc \
         WHERE pronamespace = 'public'::regnamespace AND prokind = 'f'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
}

/// The settlement rule replaced by hand with one that refuses to settle.
const BROKEN_SETTLE_PAYS: &str = "CREATE OR REPLACE FUNCTION settle_pays(\
     ids TEXT[], targets TEXT[], amounts BIGINT[], movement_ids TEXT[], settled_ats BIGINT[], \
     written_settled BOOLEAN) RETURNS SETOF TEXT LANGUAGE plpgsql AS \
     $$ BEGIN RAISE EXCEPTION 'a stale settle_pays'; END $$";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_starting_together_on_a_fresh_postgresql_database_install_its_functions_once() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let starting: Vec<_> = (0..2)
        .map(|_| {
            let url = db.url_string();
            std::thread::spawn(move || ServeProcess::start(&url, &[]))
        })
        .collect();
    let servers: Vec<ServeProcess> = starting.into_iter().map(|s| s.join().unwrap()).collect();
    let http = reqwest::Client::new();
    for server in &servers {
        let ready = http
            .get(format!("{}/readyz", server.origin))
            .send()
            .await
            .unwrap();
        assert_eq!(ready.status(), 200);
    }
    let logs: Vec<String> = servers.into_iter().map(ServeProcess::stop).collect();
    let installs = logs
        .iter()
        .map(|log| log.matches("database functions installed").count())
        .sum::<usize>();
    assert_eq!(installs, 1, "{logs:?}");
    for log in &logs {
        assert!(!log.contains("\"ERROR\""), "{log}");
    }
    assert!(function_definitions(&db)
        .await
        .contains("FUNCTION public.settle_pays("));
    // A start on a database whose functions are current installs nothing.
    let again = ServeProcess::start(&db.url_string(), &[]).stop();
    assert!(!again.contains("database functions installed"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_and_every_start_restore_a_database_function_changed_by_hand() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let url = db.url_string();
    let migrate = tally(&url, &["migrate"]);
    assert!(migrate.status.success(), "{}", migrate.stderr);
    let current = function_definitions(&db).await;
    crate::store_conformance::tamper(&db, BROKEN_SETTLE_PAYS).await;
    assert_ne!(function_definitions(&db).await, current);
    let migrate = tally(&url, &["migrate"]);
    assert!(migrate.status.success(), "{}", migrate.stderr);
    assert_eq!(function_definitions(&db).await, current);

    let store = db.store().await;
    let ann = crate::fixtures::person(store.as_ref(), "ann", "10").await;
    let bob = crate::fixtures::person(store.as_ref(), "bob", "0").await;
    crate::store_conformance::tamper(&db, BROKEN_SETTLE_PAYS).await;
    let server = ServeProcess::start(&url, &[]);
    assert_eq!(function_definitions(&db).await, current);
    // A pay due at once (the default settlement delay of 0) settles with its
    // own write, through the restored settlement.
    let paid = reqwest::Client::new()
        .post(format!("{}/v1/payments", server.origin))
        .bearer_auth(&ann.token)
        .form(&[("user_id", bob.id.as_str()), ("amount", "4"), ("note", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    let bob_now = store
        .find_user(tally::store::UserKey::Id(&bob.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bob_now.balance_cents, 400);
    let log = server.stop();
    assert!(log.contains("database functions installed"), "{log}");
    assert!(!log.contains("a stale settle_pays"), "{log}");
    let audit = tally(&url, &["admin", "audit", "--json"]);
    assert!(audit.status.success(), "{}", audit.stdout);
}
