//! Persistence. The only module that knows SQL: the `Store` traits (one per
//! domain, in `traits.rs`), implemented once in `queries/` and compiled for
//! SQLite and for PostgreSQL. Every method is one transaction.

mod batch_queue;
mod device;
mod error;
mod factors;
mod models;
mod oauth;
mod oidc;
mod pay_batcher;
mod payments;
mod pool;
mod postgres;
mod sql;
mod sqlite;
mod traits;
pub(crate) mod user_reads;
mod verification;
pub(crate) mod webhooks;

pub use crate::domain::{accounts, EntryKind, Move, Movement};
pub use device::{
    DeviceCodeRow, DeviceDecide, DevicePoll, DeviceRefusal, DeviceStatus, DeviceStep,
    NewDeviceCode, PendingDeviceCode,
};
pub use error::StoreError;
pub use factors::{Ceremony, FactorStore, Factors, PasskeyRow, TotpRow};
pub use models::{
    AccountBalance, App, AppUpdate, AuditChunk, AuditPayment, AuditSnapshot, LedgerSum, NewApp,
    NewUser, PaymentEntrySum, ProfileUpdate, Retention, User, UserFlags,
};
pub use oauth::{
    CodeCheck, CodeRecord, CodeUse, Consent, ConsentRow, IntrospectingClient, NewCode, NewGrant,
    NewReveal, NewToken, PersonalToken, Presented, RefreshUse, RotatedGrant, SigninDecision,
    TokenKind, TokenRecord,
};
pub use oidc::{NewOidcGrant, OidcGrant, OidcStore, SigningKeyRow};
pub use payments::{
    DuePayment, IdempotencyKey, InsertOutcome, Payment, PaymentFilter, PaymentInsert,
    RecordedToAccount, Settlement, StoredIdempotencyKey, Transition, TransitionOutcome, UserSearch,
};
pub use postgres::PgStore;
pub use sqlite::{SqliteStore, PAGE_LIMIT_FILE_VARIABLE as SQLITE_PAGE_LIMIT_FILE_VARIABLE};
pub use traits::{
    AccountStore, Claimant, DeviceStore, OAuthStore, PaymentStore, Store, UserKey, UserStore,
};
pub use verification::{Channel, NewVerification, SendCount, SendLimits};
pub use webhooks::{
    AttemptOutcome, AttemptRow, ClaimedDelivery, EndpointRow, NewEndpoint, WebhookStore,
};

use crate::config::DatabaseUrl;
use std::sync::Arc;

/// Opens the database the URL names, creating an SQLite file if missing.
pub async fn connect(url: &DatabaseUrl) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match url {
        DatabaseUrl::Sqlite(url) => Arc::new(SqliteStore::connect(url).await?),
        DatabaseUrl::Postgres(url) => Arc::new(PgStore::connect(url).await?),
    })
}
