#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique value is taken; names what (`username`, `email`, `phone`, …).
    #[error("{0} is already taken")]
    Conflict(&'static str),
    #[error("no such {0}")]
    NotFound(&'static str),
    /// The database cannot be reached; the caller may retry later.
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Self::Unavailable(error),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                // Constraint names on PostgreSQL, messages on SQLite: both mention
                // the column or index, which is named after the column.
                let text = format!("{} {}", db.constraint().unwrap_or(""), db.message());
                let field = ["username", "email", "phone", "client_id", "id"]
                    .into_iter()
                    .find(|f| text.contains(f))
                    .unwrap_or("value");
                Self::Conflict(field)
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
