//! The database functions Tally calls on PostgreSQL, one file each in
//! `sql/postgres/functions/`: the current definition of each lives there and
//! nowhere else. Migrations keep tables and data; after them, at every start
//! and in `tally migrate`, [`install`] brings the functions to the files'
//! definitions with `CREATE OR REPLACE`, in one transaction under an advisory
//! lock, so instances starting together install them once.
//!
//! An install is skipped when the database already holds these definitions:
//! the setting `database_functions` (in `server_settings`) records the digest
//! of the files installed and the digest of what PostgreSQL then showed of the
//! functions (`pg_get_functiondef`, and an aggregate's parts), and both must
//! still match: a new binary changes the first, a function changed by hand the
//! second (decision 015).

use sha2::{Digest, Sha256};
use sqlx::PgPool;

/// Each function's name and file (`<name>.sql`), installed in this order.
pub(super) const FUNCTIONS: &[(&str, &str)] = &[
    (
        "sum_cents",
        include_str!("../../../sql/postgres/functions/sum_cents.sql"),
    ),
    (
        "user_search_trigrams_of",
        include_str!("../../../sql/postgres/functions/user_search_trigrams_of.sql"),
    ),
    (
        "users_search_sync",
        include_str!("../../../sql/postgres/functions/users_search_sync.sql"),
    ),
    (
        "friendships_count_sync",
        include_str!("../../../sql/postgres/functions/friendships_count_sync.sql"),
    ),
    (
        "users_named_like",
        include_str!("../../../sql/postgres/functions/users_named_like.sql"),
    ),
    (
        "payment_events",
        include_str!("../../../sql/postgres/functions/payment_events.sql"),
    ),
    (
        "settle_pays",
        include_str!("../../../sql/postgres/functions/settle_pays.sql"),
    ),
    (
        "settle_due",
        include_str!("../../../sql/postgres/functions/settle_due.sql"),
    ),
    (
        "settle_batch",
        include_str!("../../../sql/postgres/functions/settle_batch.sql"),
    ),
    (
        "pay_batch",
        include_str!("../../../sql/postgres/functions/pay_batch.sql"),
    ),
];

/// The `server_settings` key of what was installed.
const SETTING: &str = "database_functions";

/// What PostgreSQL shows of the functions named `$1` in the current schema,
/// as one digest: each one's definition, or for an aggregate its parts (it has
/// no definition to show), in a fixed order.
macro_rules! shown_definitions {
    () => {
        "(SELECT md5(string_agg(CASE WHEN p.prokind = 'a' \
             THEN concat_ws(' ', p.oid::regprocedure, a.aggtransfn, a.aggcombinefn, \
                  a.aggtranstype::regtype, a.agginitval, p.proparallel) \
             ELSE pg_get_functiondef(p.oid) END, \
           E'\\n' ORDER BY p.oid::regprocedure::text)) \
         FROM pg_proc p LEFT JOIN pg_aggregate a ON a.aggfnoid = p.oid \
         WHERE p.pronamespace = to_regnamespace(current_schema()) AND p.proname = ANY ($1))"
    };
}

/// Whether the recorded install is of these files (`$2`, the key `$3`) and
/// the functions are still as it left them: true, or false or no row.
const CURRENT: &str = concat!(
    "SELECT value = $2 || ' ' || ",
    shown_definitions!(),
    " FROM server_settings WHERE key = $3"
);

/// Records the install of these files (`$2`, the key `$3`) with what
/// PostgreSQL now shows of the functions.
const RECORD: &str = concat!(
    "INSERT INTO server_settings (key, value) SELECT $3, $2 || ' ' || ",
    shown_definitions!(),
    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
);

/// Taken for the install's transaction: instances starting together would
/// otherwise replace one function at once ("tuple concurrently updated").
/// The two-key form, a space apart from the one-key locks of sqlx's
/// migrations and of the store's `KEY_LOCK`.
const LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtext('tally'), hashtext('database functions'))";

/// Brings the database functions to the files' definitions, unless the
/// database holds them already; whether it installed them.
pub(super) async fn install(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let names: Vec<&'static str> = FUNCTIONS.iter().map(|(name, _)| *name).collect();
    let files = files_digest();
    let mut conn = pool.acquire().await?;
    if is_true(current(&names, &files).fetch_optional(&mut *conn).await?) {
        return Ok(false);
    }
    drop(conn);
    let mut tx = pool.begin().await?;
    sqlx::query(LOCK).execute(&mut *tx).await?;
    // Another instance may have installed them while this one waited.
    if is_true(current(&names, &files).fetch_optional(&mut *tx).await?) {
        tx.commit().await?;
        return Ok(false);
    }
    // As pg_dump restores functions: their bodies are not checked against
    // the functions they call, so the order of the files does not matter.
    sqlx::query("SET LOCAL check_function_bodies = off")
        .execute(&mut *tx)
        .await?;
    for (name, definition) in FUNCTIONS {
        if let Err(error) = sqlx::Executor::execute(&mut *tx, *definition).await {
            tracing::error!(%error, "cannot install the database function {name}");
            return Err(error);
        }
    }
    sqlx::query(RECORD)
        .bind(&names)
        .bind(&files)
        .bind(SETTING)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(functions = FUNCTIONS.len(), "database functions installed");
    Ok(true)
}

/// The statement `CURRENT` with its values bound.
fn current(
    names: &[&'static str],
    files: &str,
) -> sqlx::query::QueryScalar<'static, sqlx::Postgres, Option<bool>, sqlx::postgres::PgArguments> {
    sqlx::query_scalar(CURRENT)
        .bind(names.to_vec())
        .bind(files.to_owned())
        .bind(SETTING)
}

/// Whether the comparison answered true (not false, NULL or no row).
fn is_true(current: Option<Option<bool>>) -> bool {
    current.flatten().unwrap_or(false)
}

/// The SHA-256 digest of every function's name and file, in hex.
fn files_digest() -> String {
    let mut digest = Sha256::new();
    for (name, definition) in FUNCTIONS {
        for part in [name, definition] {
            digest.update(part.len().to_le_bytes());
            digest.update(part.as_bytes());
        }
    }
    hex::encode(digest.finalize())
}

#[cfg(test)]
mod tests {
    use super::FUNCTIONS;

    /// A file added to `sql/postgres/functions/` is installed only once it is
    /// listed, and each file replaces the function it is named after.
    #[test]
    fn every_function_file_is_listed_and_replaces_its_own_function() -> std::io::Result<()> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/postgres/functions");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            files.push(entry?.file_name().to_string_lossy().into_owned());
        }
        files.sort();
        let mut listed: Vec<String> = FUNCTIONS
            .iter()
            .map(|(name, _)| format!("{name}.sql"))
            .collect();
        listed.sort();
        assert_eq!(files, listed);
        for (name, definition) in FUNCTIONS {
            let replaces = [
                format!("CREATE OR REPLACE FUNCTION {name}("),
                format!("CREATE OR REPLACE AGGREGATE {name} ("),
            ];
            assert!(
                replaces.iter().any(|r| definition.contains(r.as_str())),
                "{name}.sql does not replace {name}"
            );
            assert!(
                !definition.contains("CREATE FUNCTION") && !definition.contains("CREATE AGGREGATE"),
                "{name}.sql creates without replacing: its second install would fail"
            );
        }
        Ok(())
    }
}
