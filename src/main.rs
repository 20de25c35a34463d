//! The `tally` command line: parses the arguments and the settings, then hands
//! the command to the library.

use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;
use tally::admin::cli::{self as admin, Command as Admin};
use tally::admin::{AppAdd, UserAdd, WebhookCommand};
use tally::config::Settings;
use tally::{startup, telemetry};

/// mimalloc instead of the system allocator (see docs/decisions/013-allocator-and-sqlite-build.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Manage the keys that sign ID tokens (OpenID Connect).
    #[command(subcommand)]
    Keys(KeysCommand),
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Make a new signing key: published at once, signing after --publish-ahead.
    Rotate {
        /// Only this algorithm (RS256, ES256 or EdDSA); by default each.
        #[arg(long)]
        alg: Option<String>,
        /// How long the new key is published before it signs, e.g. 1h (the default) or 0s.
        #[arg(long)]
        publish_ahead: Option<String>,
    },
    /// List the signing keys and where each stands.
    List,
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create an account.
    Add(UserAdd),
    /// Mark an account (and its e-mail and phone) verified.
    Verify { username: String },
    /// Suspend an account: its tokens stop working.
    Suspend { username: String },
    /// Lift a suspension.
    Unsuspend { username: String },
    /// Remove all of an account's second factors and recovery codes, for a
    /// user who lost them all (SPEC §11).
    ResetFactors { username: String },
}

#[derive(Subcommand)]
enum AppCommand {
    /// Register an app; prints its client id and secret (shown once).
    Add(AppAdd),
    /// Suspend an app: its tokens stop working.
    Suspend { client_id: String },
    /// Lift an app's suspension.
    Unsuspend { client_id: String },
    /// Change an app's settings (only those named; at least one).
    Set(AppSet),
    /// Manage an app's webhook endpoints.
    #[command(subcommand)]
    Webhook(WebhookCommand),
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("setting").required(true).multiple(true)))]
struct AppSet {
    client_id: String,
    /// Make the app a resource server: introspection answers it about tokens
    /// issued to any app, not only its own.
    #[arg(long, group = "setting", conflicts_with = "no_introspect_any")]
    introspect_any: bool,
    /// Introspection answers the app about its own tokens only (the default).
    #[arg(long, group = "setting")]
    no_introspect_any: bool,
    /// The algorithm of the app's ID tokens: RS256 (the default), ES256 or EdDSA.
    #[arg(long, group = "setting", value_name = "ALG")]
    id_token_alg: Option<String>,
}

impl From<AppSet> for tally::admin::AppSet {
    fn from(set: AppSet) -> Self {
        let introspect_any = match (set.introspect_any, set.no_introspect_any) {
            (true, _) => Some(true),
            (false, true) => Some(false),
            (false, false) => None,
        };
        Self {
            client_id: set.client_id,
            introspect_any,
            id_token_alg: set.id_token_alg,
        }
    }
}

#[derive(Subcommand)]
enum FriendCommand {
    /// Make two users friends (symmetric).
    Add { first: String, second: String },
}

impl From<AdminCommand> for Admin {
    fn from(command: AdminCommand) -> Self {
        match command {
            AdminCommand::User(UserCommand::Add(input)) => Admin::UserAdd(input),
            AdminCommand::User(UserCommand::Verify { username }) => Admin::UserVerify(username),
            AdminCommand::User(UserCommand::Suspend { username }) => Admin::UserSuspend(username),
            AdminCommand::User(UserCommand::Unsuspend { username }) => {
                Admin::UserUnsuspend(username)
            }
            AdminCommand::User(UserCommand::ResetFactors { username }) => {
                Admin::UserResetFactors(username)
            }
            AdminCommand::App(AppCommand::Add(input)) => Admin::AppAdd(input),
            AdminCommand::App(AppCommand::Suspend { client_id }) => Admin::AppSuspend(client_id),
            AdminCommand::App(AppCommand::Unsuspend { client_id }) => {
                Admin::AppUnsuspend(client_id)
            }
            AdminCommand::App(AppCommand::Set(set)) => Admin::AppSet(set.into()),
            AdminCommand::App(AppCommand::Webhook(command)) => Admin::Webhook(command),
            AdminCommand::Deposit { username, amount } => Admin::Deposit { username, amount },
            AdminCommand::Friend(FriendCommand::Add { first, second }) => {
                Admin::FriendAdd(first, second)
            }
            AdminCommand::Audit => Admin::Audit,
            AdminCommand::Backup { path } => Admin::Backup(path),
            AdminCommand::Keys(KeysCommand::Rotate { alg, publish_ahead }) => {
                Admin::KeysRotate { alg, publish_ahead }
            }
            AdminCommand::Keys(KeysCommand::List) => Admin::KeysList,
        }
    }
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
        Err(e) => return admin::refused_arguments(wants_json, &e),
    };
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(e) => return admin::refused_settings(wants_json, &e),
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
        Command::Serve => startup::serve(settings, false).await,
        Command::Demo => startup::serve(settings, true).await,
        Command::Migrate => startup::migrate(&settings).await,
        Command::Admin(args) => return admin::run(&settings, args.json, args.command.into()).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tally: {e:#}");
            ExitCode::FAILURE
        }
    }
}
