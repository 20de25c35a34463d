//! The `tally` command line. Parses arguments and settings, then calls into the
//! library.

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use std::process::ExitCode;
use tally::admin::{self, AdminError};
use tally::auth::password::PasswordHasher;
use tally::config::Settings;
use tally::startup::{self, Application};
use tally::store::{Store, UserFlags};
use tally::{demo, telemetry};

#[derive(Parser)]
#[command(
    name = "tally",
    version,
    about = "Payments and social-graph service with its own OAuth 2.0 server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations and serve HTTP with the background workers.
    Serve,
    /// Like serve, after creating demo users, balances and an app (once).
    Demo,
    /// Apply pending migrations and exit.
    Migrate,
    /// Operator commands.
    Admin(AdminArgs),
}

#[derive(Args)]
struct AdminArgs {
    /// Print exactly one JSON object on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Manage accounts.
    #[command(subcommand)]
    User(UserCommand),
    /// Manage apps.
    #[command(subcommand)]
    App(AppCommand),
    /// Record money arriving from outside (e.g. a bank) into an account.
    Deposit {
        username: String,
        /// Decimal dollars, e.g. 12.50.
        #[arg(allow_hyphen_values = true)]
        amount: String,
    },
    /// Make two users friends of each other.
    #[command(subcommand)]
    Friend(FriendCommand),
    /// Check the ledger; exits 1 on any discrepancy.
    Audit,
    /// Copy the SQLite database to a new file, consistently, while the server
    /// runs (PostgreSQL: use pg_dump). Never overwrites a file.
    Backup { path: std::path::PathBuf },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create an account.
    Add {
        #[arg(long)]
        username: String,
        #[arg(long)]
        password: String,
        #[arg(long)]
        first_name: Option<String>,
        #[arg(long)]
        last_name: Option<String>,
        #[arg(long)]
        email: Option<String>,
        #[arg(long)]
        phone: Option<String>,
        #[arg(long)]
        about: Option<String>,
        /// Mark the account, its e-mail and its phone verified.
        #[arg(long)]
        verified: bool,
    },
    /// Mark an account (and its e-mail and phone) verified.
    Verify { username: String },
    /// Suspend an account: its tokens stop working.
    Suspend { username: String },
    /// Lift a suspension.
    Unsuspend { username: String },
}

#[derive(Subcommand)]
enum AppCommand {
    /// Register an app; prints its client id and secret (shown once).
    Add {
        #[arg(long)]
        owner: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        redirect_url: String,
        #[arg(long)]
        description: Option<String>,
        #[arg(long)]
        site_url: Option<String>,
    },
    /// Suspend an app: its tokens stop working.
    Suspend { client_id: String },
    /// Lift an app's suspension.
    Unsuspend { client_id: String },
}

#[derive(Subcommand)]
enum FriendCommand {
    /// Make two users friends (symmetric).
    Add { first: String, second: String },
}

fn main() -> ExitCode {
    // `admin … --json` promises one JSON object on stdout, even when the
    // arguments or the settings are refused before the command runs.
    let wants_json = {
        let args: Vec<String> = std::env::args().skip(1).collect();
        args.first().is_some_and(|a| a == "admin") && args.iter().any(|a| a == "--json")
    };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help and --version
        Err(e) => {
            if wants_json {
                // clap's first paragraph, without its "error: " and the usage
                // (for a missing subcommand clap renders the help instead).
                let rendered = if e.kind()
                    == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                {
                    "a subcommand is missing (see --help)".to_owned()
                } else {
                    e.to_string()
                };
                let message = rendered
                    .lines()
                    .map(str::trim)
                    .take_while(|line| !line.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                let message = message.strip_prefix("error: ").unwrap_or(&message);
                print_failure_json(message, "invalid_arguments");
            }
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => {
            if wants_json {
                print_failure_json(&e.to_string(), "invalid_setting");
            }
            eprintln!("tally: {e}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(&settings.log_filter, settings.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tally: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli.command, settings))
}

async fn run(command: Command, settings: Settings) -> ExitCode {
    let result = match command {
        Command::Serve => serve(settings, false).await,
        Command::Demo => serve(settings, true).await,
        Command::Migrate => startup::open_store(&settings).await.map(|store| {
            println!("migrations applied ({})", store.backend());
        }),
        Command::Admin(args) => return run_admin(args, settings).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tally: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(settings: Settings, with_demo: bool) -> anyhow::Result<()> {
    let store = startup::open_store(&settings).await?;
    let app = Application::build(settings, store.clone()).await?;
    if with_demo {
        let origin = app.public_origin().to_owned();
        let hasher = PasswordHasher::new(2);
        let demo = demo::seed(store.as_ref(), &hasher, &origin).await?;
        print_demo(&demo, &origin);
    }
    app.run_until_stopped().await?;
    Ok(())
}

fn print_demo(demo: &demo::DemoCredentials, origin: &str) {
    use secrecy::ExposeSecret;
    println!("Tally demo is running at {origin}");
    println!(
        "  users:         {} (password: {})",
        demo.usernames.join(", "),
        demo.password
    );
    println!("  client_id:     {}", demo.client_id);
    println!("  client_secret: {}", demo.client_secret.expose_secret());
    println!("  redirect_url:  {}", demo.redirect_url);
    println!("Open this in a browser to sign in as a demo user and authorize the demo app:");
    println!("  {}", demo.authorize_url);
}

async fn run_admin(args: AdminArgs, settings: Settings) -> ExitCode {
    let store = match startup::open_store(&settings).await {
        Ok(store) => store,
        Err(e) => return admin_failure(args.json, &AdminError::Unavailable(format!("{e:#}"))),
    };
    let store = store.as_ref();
    let json = args.json;
    match args.command {
        AdminCommand::User(command) => user_command(json, store, command).await,
        AdminCommand::App(AppCommand::Add {
            owner,
            name,
            redirect_url,
            description,
            site_url,
        }) => {
            let input = admin::AppAdd {
                owner,
                name,
                redirect_url,
                description,
                site_url,
            };
            report(json, admin::app_add(store, input).await, |a| {
                format!(
                    "client_id:     {}\nclient_secret: {}  (shown once; only its digest is kept)",
                    a.client_id, a.client_secret
                )
            })
        }
        AdminCommand::App(AppCommand::Suspend { client_id }) => {
            app_status(json, store, &client_id, true).await
        }
        AdminCommand::App(AppCommand::Unsuspend { client_id }) => {
            app_status(json, store, &client_id, false).await
        }
        AdminCommand::Deposit { username, amount } => {
            report(json, admin::deposit(store, &username, &amount).await, |d| {
                format!("{} now has a balance of {}", d.username, d.balance)
            })
        }
        AdminCommand::Friend(FriendCommand::Add { first, second }) => report(
            json,
            admin::friend_add(store, &first, &second).await,
            |_| format!("{first} and {second} are friends"),
        ),
        AdminCommand::Audit => audit(json, store).await,
        AdminCommand::Backup { path } => report(json, admin::backup(store, &path).await, |b| {
            format!("backed up to {} ({} bytes)", b.path, b.bytes)
        }),
    }
}

async fn user_command(json: bool, store: &dyn Store, command: UserCommand) -> ExitCode {
    let (username, flags) = match command {
        UserCommand::Add {
            username,
            password,
            first_name,
            last_name,
            email,
            phone,
            about,
            verified,
        } => {
            let input = admin::UserAdd {
                username,
                password,
                first_name,
                last_name,
                email,
                phone,
                about,
                verified,
            };
            let hasher = PasswordHasher::new(1);
            return report(json, admin::user_add(store, &hasher, input).await, |u| {
                format!("created user {} ({})", u.username, u.id)
            });
        }
        UserCommand::Verify { username } => (username, flags(Some(true), None)),
        UserCommand::Suspend { username } => (username, flags(None, Some(true))),
        UserCommand::Unsuspend { username } => (username, flags(None, Some(false))),
    };
    report(
        json,
        admin::user_flags(store, &username, flags).await,
        |u| {
            format!(
                "{}: verified={} suspended={}",
                u.username, u.verified, u.suspended
            )
        },
    )
}

fn flags(verified: Option<bool>, suspended: Option<bool>) -> UserFlags {
    UserFlags {
        verified,
        suspended,
    }
}

async fn app_status(json: bool, store: &dyn Store, client_id: &str, suspend: bool) -> ExitCode {
    report(
        json,
        admin::app_suspend(store, client_id, suspend).await,
        |a| format!("{}: suspended={}", a.client_id, a.suspended),
    )
}

async fn audit(json: bool, store: &dyn Store) -> ExitCode {
    match tally::ledger::audit::run(store).await {
        Ok(report) => {
            if json {
                print_json(&report);
            } else {
                println!(
                    "{} accounts, total balance {}: {}",
                    report.accounts,
                    report.total_balance,
                    if report.ok {
                        "ledger consistent"
                    } else {
                        "DISCREPANCIES FOUND"
                    }
                );
                for d in &report.discrepancies {
                    println!("  {d:?}");
                }
            }
            if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => admin_failure(json, &e.into()),
    }
}

/// Prints a command's result as JSON or as a line of text.
fn report<T: Serialize>(
    json: bool,
    result: Result<T, AdminError>,
    text: impl FnOnce(&T) -> String,
) -> ExitCode {
    match result {
        Ok(value) => {
            if json {
                print_json(&value);
            } else {
                println!("{}", text(&value));
            }
            ExitCode::SUCCESS
        }
        Err(e) => admin_failure(json, &e),
    }
}

fn admin_failure(json: bool, error: &AdminError) -> ExitCode {
    if let AdminError::Unexpected(cause) = error {
        tracing::error!(error = ?cause, "admin command failed");
    }
    if json {
        print_failure_json(&error.to_string(), error.code());
    }
    eprintln!("tally: {error}");
    ExitCode::FAILURE
}

/// `{"error":{"message","code"}}`, the one object a failed `--json` run prints.
fn print_failure_json(message: &str, code: &str) {
    #[derive(Serialize)]
    struct Failure<'a> {
        error: FailureBody<'a>,
    }
    #[derive(Serialize)]
    struct FailureBody<'a> {
        message: &'a str,
        code: &'a str,
    }
    print_json(&Failure {
        error: FailureBody { message, code },
    });
}

fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("tally: cannot write JSON: {e}"),
    }
}
