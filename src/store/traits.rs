//! What the rest of the service asks of a store: the `Store` trait, which both
//! backends implement, and the key a user is looked up by.

use super::{
    App, AuditChunk, AuditSnapshot, Movement, NewApp, NewUser, OAuthStore, PagesStore,
    PaymentStore, StoreError, User, UserFlags,
};
use async_trait::async_trait;

/// How a user is looked up.
#[derive(Debug, Clone, Copy)]
pub enum UserKey<'a> {
    Id(&'a str),
    /// Compared without regard to letter case.
    Username(&'a str),
    Email(&'a str),
    Phone(&'a str),
}

#[async_trait]
/// Everything the service stores. Areas with many methods (OAuth, payments) have
/// a trait of their own in their own file.
pub trait Store: OAuthStore + PaymentStore + PagesStore + Send + Sync + 'static {
    /// Which backend this is, for logs and tests.
    fn backend(&self) -> &'static str;

    /// Applies pending migrations (safe to call from several processes at once).
    async fn migrate(&self) -> Result<(), StoreError>;

    /// Checks that the database answers and, on SQLite, that the writer can
    /// write.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Writes a consistent copy of the whole database to a new file at `path`
    /// while others keep reading and writing. SQLite only: a PostgreSQL store
    /// answers `None` (back it up with pg_dump).
    async fn backup_into(&self, path: &str) -> Result<Option<()>, StoreError>;

    /// Changes whenever this store has committed a revocation of a token or
    /// grant, a suspension or an app secret change.
    fn revocation_epoch(&self) -> u64;

    /// Returns the stored value of a server setting, storing `candidate` first if
    /// there is none yet. Racing callers all get the one value that won.
    async fn server_setting_or_insert(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<String, StoreError>;

    async fn insert_user(&self, user: &NewUser) -> Result<User, StoreError>;
    async fn find_user(&self, key: UserKey<'_>) -> Result<Option<User>, StoreError>;
    /// Sets the account flags; verifying also marks its e-mail and phone verified.
    async fn update_user_flags(
        &self,
        user_id: &str,
        flags: UserFlags,
    ) -> Result<Option<User>, StoreError>;

    /// Makes two users friends of each other. Already being friends is fine.
    async fn add_friendship(&self, a: &str, b: &str, at: i64) -> Result<(), StoreError>;
    async fn are_friends(&self, a: &str, b: &str) -> Result<bool, StoreError>;

    async fn insert_app(&self, app: &NewApp) -> Result<App, StoreError>;
    async fn find_app(&self, client_id: &str) -> Result<Option<App>, StoreError>;
    async fn set_app_suspended(
        &self,
        client_id: &str,
        suspended: bool,
    ) -> Result<Option<App>, StoreError>;

    /// Records money arriving from outside: credits the user and writes both
    /// ledger entries in one transaction. Returns the new balance in cents.
    async fn deposit(&self, movement: &Movement) -> Result<i64, StoreError>;

    /// A consistent snapshot for the audit: the account-level figures, and the
    /// payments that may disagree with their ledger entries or refunds (found in
    /// SQL; see `sql::AUDIT_SUSPECTS`) with their entries, handed to `each` up to
    /// `chunk` payments at a time in id order, all read in one transaction so the
    /// ledger is never held in memory at once.
    async fn audit_snapshot(
        &self,
        chunk: i64,
        each: &mut (dyn FnMut(AuditChunk) + Send),
    ) -> Result<AuditSnapshot, StoreError>;
}
