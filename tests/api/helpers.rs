//! Fresh databases and a running application for each test.

use std::path::PathBuf;
use std::sync::Arc;
use tally::config::{DatabaseUrl, Settings};
use tally::startup::{self, Application};
use tally::store::Store;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The PostgreSQL server tests create their databases on, e.g.
/// `postgres://tally:tally@127.0.0.1:5432/postgres`. Under `CI=true` it must be set.
pub const POSTGRES_URL_VARIABLE: &str = "TALLY_TEST_DATABASE_URL";

/// A database of its own for one test: a temporary SQLite file, or a new
/// PostgreSQL database that is dropped when the test ends.
pub struct TestDb {
    pub url: DatabaseUrl,
    _dir: Option<tempfile::TempDir>,
    postgres: Option<(String, String)>,
}

impl TestDb {
    /// `None` only when PostgreSQL is not configured outside CI; under
    /// `CI=true` a missing PostgreSQL fails the test instead.
    pub async fn new(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let path: PathBuf = dir.path().join("tally.db");
                Some(Self {
                    url: DatabaseUrl::Sqlite(format!("sqlite://{}", path.display())),
                    _dir: Some(dir),
                    postgres: None,
                })
            }
            Backend::Postgres => {
                let Some(server) = postgres_server_url() else {
                    eprintln!("SKIPPED: {POSTGRES_URL_VARIABLE} is not set, so this PostgreSQL test did not run");
                    return None;
                };
                let name = format!("tally_test_{}", tally::domain::new_id());
                let mut admin = connect_admin(&server).await;
                use sqlx::Executor;
                admin
                    .execute(format!("CREATE DATABASE {name}").as_str())
                    .await
                    .expect("create a test database");
                let mut url = url::Url::parse(&server).expect("a PostgreSQL URL");
                url.set_path(&format!("/{name}"));
                Some(Self {
                    url: DatabaseUrl::Postgres(url.to_string()),
                    _dir: None,
                    postgres: Some((server, name)),
                })
            }
        }
    }

    /// The URL as `TALLY_DATABASE_URL` takes it.
    pub fn url_string(&self) -> String {
        match &self.url {
            DatabaseUrl::Sqlite(u) | DatabaseUrl::Postgres(u) => u.clone(),
        }
    }

    pub async fn store(&self) -> Arc<dyn Store> {
        let store = tally::store::connect(&self.url).await.expect("connect");
        store.migrate().await.expect("migrate");
        store
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((server, name)) = self.postgres.take() {
            // Drop runs inside the test's runtime, which cannot block on itself.
            let _ = std::thread::spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async {
                    use sqlx::Executor;
                    let mut admin = connect_admin(&server).await;
                    let _ = admin
                        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                        .await;
                });
            })
            .join();
        }
    }
}

fn postgres_server_url() -> Option<String> {
    match std::env::var(POSTGRES_URL_VARIABLE) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{POSTGRES_URL_VARIABLE} must be set under CI=true: PostgreSQL tests are never skipped in CI")
        }
        _ => None,
    }
}

async fn connect_admin(server: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(server)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {POSTGRES_URL_VARIABLE}: {e}"))
}

/// The `TALLY_SECRET_KEY` of the tests on PostgreSQL, where it is required:
/// one for all, so that the instances of a test on one database share it.
pub const POSTGRES_SECRET_KEY: &str = "tally-test-secret-key-0123456789abcdef0123456789abcdef";

/// Settings as a test wants them: defaults, a fresh database, any free port,
/// and on PostgreSQL the secret key (SQLite makes its key file).
pub fn test_settings(db: &TestDb) -> Settings {
    let mut settings = Settings::from_lookup(|_| None).expect("default settings");
    settings.database_url = db.url.clone();
    if matches!(db.url, DatabaseUrl::Postgres(_)) {
        settings.secret_key = Some(POSTGRES_SECRET_KEY.to_owned().into());
    }
    settings.listen = "127.0.0.1:0".parse().expect("an address");
    settings
}

/// The real application, serving on a free port of 127.0.0.1.
pub struct TestApp {
    /// e.g. `http://127.0.0.1:41234`
    pub origin: String,
    #[allow(dead_code)]
    pub store: Arc<dyn Store>,
    pub http: reqwest::Client,
    pub db: TestDb,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> Option<Self> {
        Self::spawn_with(backend, |_| {}).await
    }

    pub async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> Option<Self> {
        Self::spawn_with_pages(backend, adjust, |_| {}).await
    }

    /// The real application with `extra` page routes inside the pages' scope.
    pub async fn spawn_with_pages(
        backend: Backend,
        adjust: impl FnOnce(&mut Settings),
        extra: tally::web::ExtraPages,
    ) -> Option<Self> {
        let db = TestDb::new(backend).await?;
        let mut settings = test_settings(&db);
        adjust(&mut settings);
        let store = startup::open_store(&settings)
            .await
            .expect("open the store");
        let app = Application::build_with_extra_pages(settings, store.clone(), extra)
            .await
            .expect("build the application");
        let origin = app.public_origin().to_owned();
        tokio::spawn(app.run_until_stopped());
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        Some(Self {
            origin,
            store,
            http,
            db,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }
}

/// Runs the real `tally` binary against a database and returns its output.
pub struct TallyRun {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl TallyRun {
    /// Stdout parsed as the one JSON object it must be.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {:?}", self.stdout))
    }
}

pub fn tally(db_url: &str, args: &[&str]) -> TallyRun {
    tally_with_env(&[("TALLY_DATABASE_URL", db_url)], args)
}

pub fn tally_with_env(env: &[(&str, &str)], args: &[&str]) -> TallyRun {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tally"));
    command.args(args).env("TALLY_LOG", "warn");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run the tally binary");
    TallyRun {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Declares each listed test once per backend: `sqlite::name` and `postgres::name`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Postgres).await
                }
            )*
        }
    };
}
pub(crate) use on_both_backends;

/// `tally serve` as a child process on a free port, with its log collected.
pub struct ServeProcess {
    pub origin: String,
    child: std::process::Child,
    log: Arc<std::sync::Mutex<String>>,
    stdout: Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl ServeProcess {
    pub fn start(db_url: &str, env: &[(&str, &str)]) -> Self {
        Self::start_command("serve", db_url, env)
    }

    /// `tally serve` or `tally demo` (on PostgreSQL with
    /// [`POSTGRES_SECRET_KEY`] unless `env` sets `TALLY_SECRET_KEY`).
    pub fn start_command(subcommand: &str, db_url: &str, env: &[(&str, &str)]) -> Self {
        use std::io::{BufRead, Read};
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tally"));
        command
            .arg(subcommand)
            .env("TALLY_DATABASE_URL", db_url)
            .env("TALLY_LISTEN", "127.0.0.1:0")
            .env("TALLY_LOG", "info")
            .env("TALLY_LOG_FORMAT", "json")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // Required on PostgreSQL; `env` may unset it with an empty value.
        if db_url.starts_with("postgres") {
            command.env("TALLY_SECRET_KEY", POSTGRES_SECRET_KEY);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start tally serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut child_stdout = child.stdout.take().expect("stdout");
        let stdout = Arc::new(std::sync::Mutex::new(String::new()));
        let stdout_sink = stdout.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = child_stdout.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                stdout_sink
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        let log = Arc::new(std::sync::Mutex::new(String::new()));
        let (origin_tx, origin_rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) {
                    if let Some(origin) = entry["fields"]["public_origin"].as_str() {
                        let _ = origin_tx.send(origin.to_owned());
                    }
                }
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        let origin = origin_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("tally serve did not start: {}", log.lock().unwrap()));
        Self {
            origin,
            child,
            log,
            stdout,
            reader: Some(reader),
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until stdout holds a line containing `needle`, and returns stdout.
    pub fn wait_for_stdout(&self, needle: &str) -> String {
        let started = std::time::Instant::now();
        loop {
            let text = self.stdout.lock().unwrap().clone();
            if text.contains(needle) {
                return text;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "no {needle:?} on stdout: {text}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM: the server stops taking connections and answers what is
    /// in flight.
    pub fn signal_term(&self) {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
    }

    /// Waits, at most `within`, for the process to exit by itself; returns its
    /// exit status and everything it logged.
    pub fn wait_exit(mut self, within: std::time::Duration) -> (std::process::ExitStatus, String) {
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for tally") {
                break status;
            }
            assert!(
                started.elapsed() < within,
                "tally did not exit within {within:?}: {}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let log = self.log.lock().unwrap().clone();
        (status, log)
    }

    /// Stops the server with SIGKILL (as `kill -9`: nothing is flushed or
    /// answered) and returns everything it logged.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let log = self.log.lock().unwrap().clone();
        log
    }
}

/// How much of its server's log a failing test prints.
const LOG_LINES_ON_FAILURE: usize = 300;

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A test that fails shows what its server logged up to the failure,
        // so a rare failure on a loaded machine says why.
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_LINES_ON_FAILURE)..];
            eprintln!("the server's log, its last {} lines:", tail.len());
            for line in tail {
                eprintln!("{line}");
            }
        }
    }
}
