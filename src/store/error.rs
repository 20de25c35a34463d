#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique value is taken; names what (`username`, `email`, `phone`, …).
    #[error("{0} is already taken")]
    Conflict(&'static str),
    #[error("no such {0}")]
    NotFound(&'static str),
    /// This backend does not do what was asked; names the way that it does
    /// instead (PostgreSQL has no `admin backup`: pg_dump does that).
    #[error("not on this database: {0}")]
    Unsupported(&'static str),
    /// The database cannot serve now but may soon: unreachable, full, locked past
    /// the busy timeout, or the connection was lost. The caller may retry later.
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl StoreError {
    /// A transient condition a client should retry (503), not a bug (500).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// Whether the database cannot serve now, logged here so that every
    /// answer that turns this into a 503 says so in the log the same way.
    pub fn warn_if_unavailable(&self) -> bool {
        let Self::Unavailable(e) = self else {
            return false;
        };
        tracing::warn!(error = %e, "database unavailable");
        true
    }
}

/// SQLite primary result codes that say "not now" rather than "wrong": BUSY,
/// LOCKED, IOERR, FULL, CANTOPEN, PROTOCOL (extended codes keep these in the low
/// byte).
const SQLITE_TRANSIENT: [i64; 6] = [5, 6, 10, 13, 14, 15];

/// PostgreSQL SQLSTATEs of the same kind, by class or by code: connection
/// exceptions (08), insufficient resources (53: disk full, out of memory, too many
/// connections), operator intervention (57P01–57P03: shutdown, cannot connect
/// now), serialization failures and deadlocks (40001, 40P01), lock not available
/// (55P03), a read-only server during fail-over (25006).
fn postgres_transient(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57P0")
        || matches!(code, "40001" | "40P01" | "55P03" | "25006")
}

/// Whether an SQLite (extended) result code says "not now".
pub(crate) fn sqlite_transient(code: impl Into<i64>) -> bool {
    SQLITE_TRANSIENT.contains(&(code.into() & 0xff))
}

/// The unique value a violation's text names (a constraint's name on
/// PostgreSQL, the message on SQLite: both mention the column or the index,
/// which is named after the column).
pub(crate) fn conflicting_field(text: &str) -> &'static str {
    ["username", "email", "phone", "client_id", "id"]
        .into_iter()
        .find(|f| text.contains(f))
        .unwrap_or("value")
}

fn is_transient_database_error(db: &dyn sqlx::error::DatabaseError) -> bool {
    let Some(code) = db.code() else {
        return false;
    };
    if let Ok(number) = code.parse::<i64>() {
        // SQLite reports its (extended) result code as a number.
        return sqlite_transient(number);
    }
    postgres_transient(&code)
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        let mapped = Self::map(error);
        if mapped.is_transient() {
            super::pool::ConnectionTrouble::seen();
        }
        mapped
    }
}

/// Whether `error` says "not now" rather than "wrong": the database may serve
/// again soon, so a client may retry.
pub(crate) fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => is_transient_database_error(db.as_ref()),
        _ => false,
    }
}

impl StoreError {
    fn map(error: sqlx::Error) -> Self {
        match &error {
            _ if is_transient(&error) => Self::Unavailable(error),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Self::Conflict(conflicting_field(&format!(
                    "{} {}",
                    db.constraint().unwrap_or(""),
                    db.message()
                )))
            }
            _ => Self::Unexpected(anyhow::Error::new(error).context("database error")),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        match error {
            sqlx::migrate::MigrateError::Execute(e) => e.into(),
            other => Self::Unexpected(anyhow::Error::new(other).context("migration failed")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_transient_states_are_told_from_bugs() {
        for code in [
            "08006", "08001", "53100", "53300", "57P01", "57P03", "40001", "40P01",
        ] {
            assert!(postgres_transient(code), "{code}");
        }
        for code in ["23505", "42601", "22P02", "42P01", "57014"] {
            assert!(!postgres_transient(code), "{code}");
        }
    }
}
