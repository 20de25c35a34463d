//! Persistence. The only module that knows SQL: one `Store` trait, implemented for
//! SQLite and for PostgreSQL. Every method is one transaction.

mod error;
mod models;
mod oauth;
mod pages;
mod payments;
mod pool;
mod postgres;
mod sql;
mod sqlite;
mod traits;

pub use error::StoreError;
pub use models::{
    accounts, AccountBalance, App, AppUpdate, AuditChunk, AuditPayment, AuditSnapshot, LedgerSum,
    Movement, NewApp, NewUser, PaymentEntrySum, User, UserFlags,
};
pub use oauth::{
    CodeCheck, CodeRecord, CodeUse, Grant, IntrospectingClient, NewCode, NewGrant, NewToken,
    OAuthStore, RefreshUse, SigninDecision, TokenKind, TokenRecord,
};
pub use pages::{
    Channel, ConsentRow, NewVerification, PagesStore, PersonalToken, ProfileUpdate, Retention,
    SendLimits,
};
pub use payments::{
    DuePayment, IdempotencyKey, InsertOutcome, Move, Payment, PaymentFilter, PaymentInsert,
    PaymentStore, Settlement, StoredIdempotencyKey, Transition, TransitionOutcome, UserSearch,
};
pub use postgres::PgStore;
pub use sqlite::{SqliteStore, PAGE_LIMIT_FILE_VARIABLE as SQLITE_PAGE_LIMIT_FILE_VARIABLE};
pub use traits::{Store, UserKey};

use crate::config::DatabaseUrl;
use std::sync::Arc;

/// Opens the database the URL names, creating an SQLite file if missing.
pub async fn connect(url: &DatabaseUrl) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match url {
        DatabaseUrl::Sqlite(url) => Arc::new(SqliteStore::connect(url).await?),
        DatabaseUrl::Postgres(url) => Arc::new(PgStore::connect(url).await?),
    })
}
