//! The secret key is never in the database (SPEC §1, §9): SQLite keeps it in a
//! key file beside the database, PostgreSQL needs `TALLY_SECRET_KEY`, and a key
//! an older version kept in the database is moved out (SQLite) or refused with
//! the fix (PostgreSQL), sessions signed under it going on.

use crate::browser::Browser;
use crate::helpers::{
    on_both_backends, tally, test_settings, Backend, ServeProcess, TallyRun, TestDb,
};
use crate::oauth_fixture::PASSWORD;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tally::config::DatabaseUrl;
use tally::startup::{self, Application};

on_both_backends!(
    an_old_key_in_the_database_is_moved_out_and_its_sessions_go_on,
    with_tally_secret_key_set_an_old_key_in_the_database_is_deleted,
);

mod sqlite_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_first_start_makes_a_key_file_only_its_owner_reads_and_a_restart_keeps_the_sessions()
    {
        super::a_first_start_makes_a_key_file_only_its_owner_reads_and_a_restart_keeps_the_sessions(
        )
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_servers_starting_at_once_on_a_new_database_make_one_key() {
        super::two_servers_starting_at_once_on_a_new_database_make_one_key().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_move_cut_short_is_finished_and_one_into_another_key_refused() {
        super::a_move_cut_short_is_finished_and_one_into_another_key_refused().await
    }

    #[test]
    fn a_key_file_others_may_read_or_without_a_key_stops_the_start_with_one_line() {
        super::a_key_file_others_may_read_or_without_a_key_stops_the_start_with_one_line()
    }
}

mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_and_demo_without_tally_secret_key_stop_with_one_line_naming_it() {
        super::serve_and_demo_without_tally_secret_key_stop_with_one_line_naming_it().await
    }
}

/// The key of the tests that play an older version's database.
const OLD_KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const OTHER_KEY: &str = "another-key-of-at-least-thirty-two-characters";
const OLD_KEY_QUERY: &str = "SELECT value FROM server_settings WHERE key = 'secret_key'";

/// The database file of an SQLite test database.
fn database_file(url: &str) -> PathBuf {
    PathBuf::from(url.strip_prefix("sqlite://").unwrap())
}

/// `tally.db` → `tally.db.key`.
fn key_file(url: &str) -> PathBuf {
    let mut path = database_file(url).into_os_string();
    path.push(".key");
    PathBuf::from(path)
}

/// The values of `secret_key` rows, read from the database directly.
async fn old_key_rows(url: &DatabaseUrl) -> Vec<String> {
    use sqlx::Connection;
    match url {
        DatabaseUrl::Sqlite(url) => {
            let mut db = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query_scalar(OLD_KEY_QUERY)
                .fetch_all(&mut db)
                .await
                .unwrap()
        }
        DatabaseUrl::Postgres(url) => {
            let mut db = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query_scalar(OLD_KEY_QUERY)
                .fetch_all(&mut db)
                .await
                .unwrap()
        }
    }
}

/// Stores `key` where older versions kept the secret key.
async fn plant_old_key(url: &DatabaseUrl, key: &str) {
    use sqlx::Connection;
    let sql = "INSERT INTO server_settings (key, value) VALUES ('secret_key', $1)";
    match url {
        DatabaseUrl::Sqlite(url) => {
            let mut db = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::query(sql).bind(key).execute(&mut db).await.unwrap();
        }
        DatabaseUrl::Postgres(url) => {
            let mut db = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query(sql).bind(key).execute(&mut db).await.unwrap();
        }
    }
}

/// Asserts that no file of the SQLite database (the database, its WAL and
/// shared memory) holds `key`'s text anywhere, deleted rows' pages included.
fn assert_no_database_file_holds(url: &str, key: &str) {
    let database = database_file(url);
    for suffix in ["", "-wal", "-shm"] {
        let mut path = database.clone().into_os_string();
        path.push(suffix);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        assert!(
            !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
            "{} holds the secret key",
            Path::new(&path).display()
        );
    }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Another instance of the application on `db`, with `key` as its
/// `TALLY_SECRET_KEY`: its origin, or why it did not start.
async fn start_on(db: &TestDb, key: Option<&str>) -> anyhow::Result<String> {
    let mut settings = test_settings(db);
    settings.secret_key = key.map(|k| k.to_owned().into());
    let store = startup::open_store(&settings).await?;
    let app = Application::build(settings, store).await?;
    let origin = app.public_origin().to_owned();
    tokio::spawn(app.run_until_stopped());
    Ok(origin)
}

/// Adds a verified user with [`PASSWORD`] through `tally admin`.
fn add_user(url: &str, username: &str) {
    let run = tally(
        url,
        &[
            "admin",
            "user",
            "add",
            "--username",
            username,
            "--password",
            PASSWORD,
            "--verified",
        ],
    );
    assert!(run.status.success(), "{}", run.stderr);
}

/// Signs `username` in on the server at `origin`; the session cookie.
async fn session_cookie(origin: &str, username: &str) -> String {
    let browser = Browser::new(origin);
    let page = browser.get("/signin").await;
    let answer = browser.sign_in(&page, username, PASSWORD).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let cookie = browser.cookie_header();
    assert_eq!(account_status(origin, &cookie).await, 200);
    cookie
}

/// The account page's status for a request carrying `cookie`: 200 signed
/// in, 303 to the sign-in page otherwise.
async fn account_status(origin: &str, cookie: &str) -> u16 {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{origin}/account"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Runs `tally` (a server, on a free port) that must stop by itself: its
/// output, or a failure if it is still running after a minute.
fn run_until_exit(env: &[(&str, &str)], args: &[&str]) -> TallyRun {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .env("TALLY_LOG", "warn")
        .env("TALLY_LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("tally {args:?} still runs after a minute: it started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    TallyRun {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Asserts a refused start: a non-zero exit and one line on stderr holding
/// every one of `needles`.
fn assert_refused(run: &TallyRun, needles: &[&str]) {
    assert!(!run.status.success(), "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{:?}", run.stderr);
    for needle in needles {
        assert!(lines[0].contains(needle), "{needle:?} not in {}", lines[0]);
    }
}

async fn a_first_start_makes_a_key_file_only_its_owner_reads_and_a_restart_keeps_the_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tally.db", dir.path().display());
    let unset = [("TALLY_SECRET_KEY", "")];
    add_user(&url, "ann");
    // Neither migrations nor operator commands make a key.
    assert!(!key_file(&url).exists());

    let server = ServeProcess::start(&url, &unset);
    let key_path = key_file(&url);
    assert_eq!(mode_of(&key_path), 0o600);
    let key = std::fs::read_to_string(&key_path).unwrap();
    let key = key.trim_end();
    assert_eq!(key.len(), 64, "{key:?}");
    assert!(key.chars().all(|c| c.is_ascii_hexdigit()), "{key:?}");
    let cookie = session_cookie(&server.origin, "ann").await;
    // A copy of the database holds no key: no row, and no byte of it.
    assert!(old_key_rows(&DatabaseUrl::Sqlite(url.clone()))
        .await
        .is_empty());
    assert_no_database_file_holds(&url, key);
    let _ = server.stop();

    // The next start reads the key: the session goes on, nothing else is made.
    let server = ServeProcess::start(&url, &unset);
    assert_eq!(account_status(&server.origin, &cookie).await, 200);
    assert_eq!(std::fs::read_to_string(&key_path).unwrap().trim_end(), key);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("tally.db-"))
        .collect();
    names.sort();
    assert_eq!(names, ["tally.db", "tally.db.key"]);
    let _ = server.stop();

    // Without the key file the database alone forges nothing: a new key is
    // made, which the old cookie does not pass.
    std::fs::remove_file(&key_path).unwrap();
    let server = ServeProcess::start(&url, &unset);
    assert_ne!(std::fs::read_to_string(&key_path).unwrap().trim_end(), key);
    assert_eq!(account_status(&server.origin, &cookie).await, 303);
}

async fn two_servers_starting_at_once_on_a_new_database_make_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tally.db", dir.path().display());
    add_user(&url, "ann");
    let starts: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || ServeProcess::start(&url, &[("TALLY_SECRET_KEY", "")]))
        })
        .collect();
    let servers: Vec<ServeProcess> = starts.into_iter().map(|s| s.join().unwrap()).collect();
    let cookie = session_cookie(&servers[0].origin, "ann").await;
    assert_eq!(account_status(&servers[1].origin, &cookie).await, 200);
    assert_eq!(mode_of(&key_file(&url)), 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

async fn a_move_cut_short_is_finished_and_one_into_another_key_refused() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let url = db.url_string();
    let key_path = key_file(&url);
    start_on(&db, Some(OTHER_KEY)).await.unwrap();
    // Stopped after the key file was written, before the row was deleted.
    plant_old_key(&db.url, OLD_KEY).await;
    std::fs::write(&key_path, format!("{OLD_KEY}\n")).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    start_on(&db, None).await.unwrap();
    assert!(old_key_rows(&db.url).await.is_empty());
    assert_eq!(
        std::fs::read_to_string(&key_path).unwrap(),
        format!("{OLD_KEY}\n")
    );
    // A key file holding another key than the database's: which one is in
    // use is the operator's call, so the start stops and says how to decide.
    plant_old_key(&db.url, OTHER_KEY).await;
    let line = format!("{:#}", start_on(&db, None).await.unwrap_err());
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains("different keys"), "{line}");
    assert!(
        line.contains("DELETE FROM server_settings WHERE key = 'secret_key'"),
        "{line}"
    );
    assert_eq!(old_key_rows(&db.url).await, [OTHER_KEY]);
    assert_eq!(
        std::fs::read_to_string(&key_path).unwrap(),
        format!("{OLD_KEY}\n")
    );
}

fn a_key_file_others_may_read_or_without_a_key_stops_the_start_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tally.db", dir.path().display());
    let key_path = key_file(&url);
    let shown = key_path.display().to_string();
    let env = [
        ("TALLY_DATABASE_URL", url.as_str()),
        ("TALLY_SECRET_KEY", ""),
    ];
    std::fs::write(&key_path, format!("{OLD_KEY}\n")).unwrap();
    for mode in [0o644, 0o640, 0o604, 0o620] {
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(mode)).unwrap();
        let run = run_until_exit(&env, &["serve"]);
        assert_refused(&run, &[&shown, "chmod 600"]);
    }
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (content, problem) in [("", "is empty"), ("\n", "is empty"), ("short\n", "shorter")] {
        std::fs::write(&key_path, content).unwrap();
        let run = run_until_exit(&env, &["serve"]);
        assert_refused(&run, &[&shown, problem]);
    }
    // Left as refused: the key file was never replaced.
    assert_eq!(std::fs::read_to_string(&key_path).unwrap(), "short\n");
}

async fn serve_and_demo_without_tally_secret_key_stop_with_one_line_naming_it() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let url = db.url_string();
    let unset = [
        ("TALLY_DATABASE_URL", url.as_str()),
        ("TALLY_SECRET_KEY", ""),
    ];
    // Migrations and operator commands need no key.
    let run = tally_run(&unset, &["migrate"]);
    assert!(run.status.success(), "{}", run.stderr);
    let run = tally_run(&unset, &["admin", "audit", "--json"]);
    assert!(run.status.success(), "{}", run.stderr);

    for command in ["serve", "demo"] {
        let run = run_until_exit(&unset, &[command]);
        assert_refused(
            &run,
            &["TALLY_SECRET_KEY", "required", "openssl rand -hex 32"],
        );
    }
    // The demo seeded nothing before refusing.
    let audit = tally_run(&unset, &["admin", "audit", "--json"]).json();
    assert_eq!(audit["accounts"], 0);

    // A database an older version kept its key in: the line names the fix.
    plant_old_key(&db.url, OLD_KEY).await;
    let run = run_until_exit(&unset, &["serve"]);
    assert_refused(&run, &["TALLY_SECRET_KEY", OLD_KEY_QUERY]);
    assert_eq!(old_key_rows(&db.url).await, [OLD_KEY]);
}

fn tally_run(env: &[(&str, &str)], args: &[&str]) -> TallyRun {
    crate::helpers::tally_with_env(env, args)
}

async fn an_old_key_in_the_database_is_moved_out_and_its_sessions_go_on(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = db.url_string();
    // An older version's deployment: its key, and a session signed under it.
    let old = start_on(&db, Some(OLD_KEY)).await.unwrap();
    add_user(&url, "ann");
    let cookie = session_cookie(&old, "ann").await;
    plant_old_key(&db.url, OLD_KEY).await;

    let upgraded = match backend {
        Backend::Sqlite => {
            // Moved to the key file, then deleted from the database.
            let origin = start_on(&db, None).await.unwrap();
            let key_path = key_file(&url);
            assert_eq!(
                std::fs::read_to_string(&key_path).unwrap(),
                format!("{OLD_KEY}\n")
            );
            assert_eq!(mode_of(&key_path), 0o600);
            assert_no_database_file_holds(&url, OLD_KEY);
            origin
        }
        Backend::Postgres => {
            // Refused, naming the fix; the row stays until it is followed.
            let error = start_on(&db, None).await.unwrap_err();
            let line = format!("{error:#}");
            assert!(!line.contains('\n'), "{line}");
            assert!(line.contains("TALLY_SECRET_KEY"), "{line}");
            assert!(line.contains(OLD_KEY_QUERY), "{line}");
            assert!(!line.contains(OLD_KEY), "the line shows the key: {line}");
            assert_eq!(old_key_rows(&db.url).await, [OLD_KEY]);
            start_on(&db, Some(OLD_KEY)).await.unwrap()
        }
    };
    assert!(old_key_rows(&db.url).await.is_empty());
    assert_eq!(account_status(&upgraded, &cookie).await, 200);
    // The next start finds nothing more to move, and the sessions go on.
    let again = start_on(&db, (backend == Backend::Postgres).then_some(OLD_KEY))
        .await
        .unwrap();
    assert_eq!(account_status(&again, &cookie).await, 200);
    // The check could fail: under another key the cookie is refused.
    let other = start_on(&db, Some(OTHER_KEY)).await.unwrap();
    assert_eq!(account_status(&other, &cookie).await, 303);
}

async fn with_tally_secret_key_set_an_old_key_in_the_database_is_deleted(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    start_on(&db, Some(OTHER_KEY)).await.unwrap();
    plant_old_key(&db.url, OLD_KEY).await;
    let origin = start_on(&db, Some(OTHER_KEY)).await.unwrap();
    assert!(old_key_rows(&db.url).await.is_empty());
    add_user(&db.url_string(), "ann");
    session_cookie(&origin, "ann").await;
    if backend == Backend::Sqlite {
        // The key in use is TALLY_SECRET_KEY's: no key file is made.
        assert!(!key_file(&db.url_string()).exists());
        assert_no_database_file_holds(&db.url_string(), OLD_KEY);
    }
}
