//! Runs one `tally admin …` command and prints its answer: a line of text, or
//! under `--json` exactly one JSON object on stdout. A failure is one
//! `tally: …` line on stderr and, under `--json`, `{"error":{message,code}}` on
//! stdout; the exit code is 0 on success, 1 on failure, 2 for a refused start.

use super::operations::{self, AdminError, AppAdd, UserAdd};
use crate::auth::password::PasswordHasher;
use crate::config::Settings;
use crate::ledger::audit::{self, AuditReport};
use crate::startup;
use crate::store::{Store, UserFlags};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// An admin command, as the command line gives it: users by username, apps by
/// client id.
pub enum Command {
    UserAdd(UserAdd),
    /// Marks the account, its e-mail and its phone verified.
    UserVerify(String),
    UserSuspend(String),
    UserUnsuspend(String),
    /// Removes every second factor and recovery code of the user.
    UserResetFactors(String),
    AppAdd(AppAdd),
    AppSuspend(String),
    AppUnsuspend(String),
    /// Changes the settings it names.
    AppSet(super::AppSet),
    Deposit {
        username: String,
        /// Decimal dollars, as typed.
        amount: String,
    },
    FriendAdd(String, String),
    Audit,
    /// Where the copy goes; never an existing file.
    Backup(PathBuf),
    /// A new ID token signing key for the algorithm, or for each.
    KeysRotate {
        alg: Option<String>,
        publish_ahead: Option<String>,
    },
    KeysList,
    /// `app webhook add|list|rotate|remove`.
    Webhook(super::WebhookCommand),
}

/// Runs `command` against the configured database and prints its answer.
pub async fn run(settings: &Settings, json: bool, command: Command) -> ExitCode {
    let store = match startup::open_store(settings).await {
        Ok(store) => store,
        Err(e) => return failure(json, &AdminError::Unavailable(format!("{e:#}"))),
    };
    let store = store.as_ref();
    match command {
        Command::UserAdd(input) => {
            let hasher = PasswordHasher::new(1);
            report(
                json,
                operations::user_add(store, &hasher, input).await,
                |u| format!("created user {} ({})", u.username, u.id),
            )
        }
        Command::UserVerify(username) => user_flags(json, store, &username, Some(true), None).await,
        Command::UserSuspend(username) => {
            user_flags(json, store, &username, None, Some(true)).await
        }
        Command::UserUnsuspend(username) => {
            user_flags(json, store, &username, None, Some(false)).await
        }
        Command::UserResetFactors(username) => {
            let result = operations::reset_factors(store, &username).await;
            if let Ok(reset) = &result {
                // One line naming the user, whatever the output format: an
                // operator's act that took a user's protection away.
                eprintln!(
                    "tally: removed {} second factor(s) and the recovery codes of {}",
                    reset.factors_removed, reset.username
                );
            }
            report(json, result, |r| {
                format!("{}: factors_removed={}", r.username, r.factors_removed)
            })
        }
        Command::AppAdd(input) => report(json, operations::app_add(store, input).await, |a| {
            format!(
                "client_id:     {}\nclient_secret: {}  (shown once; only its digest is kept)",
                a.client_id, a.client_secret
            )
        }),
        Command::AppSuspend(client_id) => app_suspend(json, store, &client_id, true).await,
        Command::AppUnsuspend(client_id) => app_suspend(json, store, &client_id, false).await,
        Command::AppSet(input) => report(json, operations::app_set(store, input).await, |a| {
            format!(
                "{}: introspect_any={} id_token_alg={}",
                a.client_id, a.introspect_any, a.id_token_alg
            )
        }),
        Command::Deposit { username, amount } => report(
            json,
            operations::deposit(store, &username, &amount).await,
            |d| format!("{} now has a balance of {}", d.username, d.balance),
        ),
        Command::FriendAdd(first, second) => report(
            json,
            operations::friend_add(store, &first, &second).await,
            |_| format!("{first} and {second} are friends"),
        ),
        Command::Audit => match audit::run(store).await {
            Ok(report) => {
                answer(json, &report, audit_text);
                if report.ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => failure(json, &e.into()),
        },
        Command::Backup(path) => report(json, operations::backup(store, &path).await, |b| {
            format!("backed up to {} ({} bytes)", b.path, b.bytes)
        }),
        Command::KeysRotate { alg, publish_ahead } => {
            let rotated = match startup::resolve_secret_key(settings, store).await {
                Ok(secret) => {
                    super::keys_rotate(store, &secret, alg.as_deref(), publish_ahead.as_deref())
                        .await
                }
                Err(e) => Err(AdminError::Unexpected(e)),
            };
            report(json, rotated, |r| {
                r.keys
                    .iter()
                    .map(|k| format!("new {} key {}, signing from {}", k.alg, k.kid, k.signs_from))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        }
        Command::Webhook(command) => webhook(json, settings, store, command).await,
        Command::KeysList => report(json, super::keys_list(store).await, |l| {
            l.keys
                .iter()
                .map(|k| {
                    format!(
                        "{} {} published={} signing={}",
                        k.alg, k.kid, k.published, k.signing
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        }),
    }
}

async fn webhook(
    json: bool,
    settings: &Settings,
    store: &dyn Store,
    command: super::WebhookCommand,
) -> ExitCode {
    use super::WebhookCommand;
    match command {
        WebhookCommand::Add {
            client_id,
            url,
            events,
        } => {
            let added = match startup::resolve_secret_key(settings, store).await {
                Ok(secret) => {
                    super::webhook_add(
                        store,
                        &secret,
                        settings.webhook_allow_private,
                        &client_id,
                        &url,
                        events.as_deref(),
                    )
                    .await
                }
                Err(e) => Err(AdminError::Unexpected(e)),
            };
            report(json, added, |a| {
                use secrecy::ExposeSecret;
                format!(
                    "endpoint {} for {} ({})\nsecret: {}  (shown once)",
                    a.id,
                    a.url,
                    a.events.join(","),
                    a.secret.expose_secret()
                )
            })
        }
        WebhookCommand::List { client_id } => {
            report(json, super::webhook_list(store, &client_id).await, |l| {
                l.endpoints
                    .iter()
                    .map(|e| {
                        format!(
                            "{} {} enabled={} events={} deliveries={}",
                            e.id,
                            e.url,
                            e.enabled,
                            e.events.join(","),
                            e.deliveries.len()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        }
        WebhookCommand::Rotate {
            client_id,
            endpoint_id,
        } => {
            let rotated = match startup::resolve_secret_key(settings, store).await {
                Ok(secret) => super::webhook_rotate(store, &secret, &client_id, &endpoint_id).await,
                Err(e) => Err(AdminError::Unexpected(e)),
            };
            report(json, rotated, |r| {
                use secrecy::ExposeSecret;
                format!(
                    "new secret of {}: {}  (shown once; the previous one signs too until {})",
                    r.id,
                    r.secret.expose_secret(),
                    r.previous_signs_until
                )
            })
        }
        WebhookCommand::Remove {
            client_id,
            endpoint_id,
        } => report(
            json,
            super::webhook_remove(store, &client_id, &endpoint_id).await,
            |r| format!("removed endpoint {}", r.id),
        ),
    }
}

async fn user_flags(
    json: bool,
    store: &dyn Store,
    username: &str,
    verified: Option<bool>,
    suspended: Option<bool>,
) -> ExitCode {
    let flags = UserFlags {
        verified,
        suspended,
    };
    report(
        json,
        operations::user_flags(store, username, flags).await,
        |u| {
            format!(
                "{}: verified={} suspended={}",
                u.username, u.verified, u.suspended
            )
        },
    )
}

async fn app_suspend(json: bool, store: &dyn Store, client_id: &str, suspended: bool) -> ExitCode {
    report(
        json,
        operations::app_suspend(store, client_id, suspended).await,
        |a| format!("{}: suspended={}", a.client_id, a.suspended),
    )
}

fn audit_text(report: &AuditReport) -> String {
    let verdict = if report.ok {
        "ledger consistent"
    } else {
        "DISCREPANCIES FOUND"
    };
    let mut text = format!(
        "{} accounts, total balance {}: {verdict}",
        report.accounts, report.total_balance
    );
    for d in &report.discrepancies {
        text.push_str(&format!("\n  {d:?}"));
    }
    text
}

/// Arguments clap refused (any command): clap's message on stderr, exit 2;
/// under `--json` also the failure object, with clap's first paragraph as its
/// message.
pub fn refused_arguments(json: bool, error: &clap::Error) -> ExitCode {
    if json {
        // For a missing subcommand clap renders the help instead of a message.
        let rendered =
            if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                "a subcommand is missing (see --help)".to_owned()
            } else {
                error.to_string()
            };
        let message = rendered
            .lines()
            .map(str::trim)
            .take_while(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let message = message.strip_prefix("error: ").unwrap_or(&message);
        print_failure(message, "invalid_arguments");
    }
    let _ = error.print();
    ExitCode::from(2)
}

/// Settings refused before any command ran (`serve` too): exit 2.
pub fn refused_settings(json: bool, error: &impl std::fmt::Display) -> ExitCode {
    if json {
        print_failure(&error.to_string(), "invalid_setting");
    }
    eprintln!("tally: {error}");
    ExitCode::from(2)
}

/// Prints a command's result as JSON or as text.
fn report<T: Serialize>(
    json: bool,
    result: Result<T, AdminError>,
    text: impl FnOnce(&T) -> String,
) -> ExitCode {
    match result {
        Ok(value) => {
            answer(json, &value, text);
            ExitCode::SUCCESS
        }
        Err(e) => failure(json, &e),
    }
}

fn answer<T: Serialize>(json: bool, value: &T, text: impl FnOnce(&T) -> String) {
    if json {
        print_json(value);
    } else {
        println!("{}", text(value));
    }
}

fn failure(json: bool, error: &AdminError) -> ExitCode {
    if let AdminError::Unexpected(cause) = error {
        tracing::error!(error = ?cause, "admin command failed");
    }
    if json {
        print_failure(&error.to_string(), error.code());
    }
    eprintln!("tally: {error}");
    ExitCode::FAILURE
}

/// `{"error":{"message","code"}}`, the one object a failed `--json` run prints.
fn print_failure(message: &str, code: &str) {
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
