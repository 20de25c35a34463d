use crate::domain::{Audience, Medium, PaymentAction, PaymentKind, PaymentStatus, TargetType};
use std::fmt;

/// An account as stored.
#[derive(Clone, sqlx::FromRow)]
pub struct User {
    pub id: String,
    pub username: String,
    pub first_name: String,
    pub last_name: String,
    pub about: String,
    pub profile_picture_url: Option<String>,
    pub email: Option<String>,
    pub email_verified: bool,
    pub phone: Option<String>,
    pub phone_verified: bool,
    pub password_hash: String,
    pub verified: bool,
    pub suspended: bool,
    pub balance_cents: i64,
    pub date_joined: i64,
    /// When the name was last changed (microseconds); `None` if never.
    pub profile_updated_at: Option<i64>,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A user row with its count of friends (what `/me` shows).
#[derive(sqlx::FromRow)]
pub(crate) struct UserWithFriendsCount {
    #[sqlx(flatten)]
    pub user: User,
    pub friends_count: i64,
}

pub struct NewUser {
    pub id: String,
    pub username: String,
    pub first_name: String,
    pub last_name: String,
    pub about: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub password_hash: String,
    pub verified: bool,
    pub date_joined: i64,
}

/// Flags to change on an account; `None` leaves one as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct UserFlags {
    pub verified: Option<bool>,
    pub suspended: Option<bool>,
}

/// The free-text fields of a profile, already checked.
#[derive(Debug, Clone)]
pub struct ProfileUpdate {
    pub first_name: String,
    pub last_name: String,
    pub about: String,
    /// Now (microseconds): the profile's `updated_at` if the name changes.
    pub at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct App {
    pub client_id: String,
    pub secret_digest: String,
    pub name: String,
    pub description: String,
    pub redirect_url: Option<String>,
    pub site_url: Option<String>,
    pub owner_id: String,
    pub suspended: bool,
    pub created_at: i64,
    /// A resource server: introspection answers it about any app's tokens.
    pub introspect_any: bool,
}

/// The fields of an app its owner may change.
pub struct AppUpdate {
    pub name: String,
    pub description: String,
    pub redirect_url: Option<String>,
    pub site_url: Option<String>,
}

pub struct NewApp {
    pub client_id: String,
    pub secret_digest: String,
    pub name: String,
    pub description: String,
    pub redirect_url: Option<String>,
    pub site_url: Option<String>,
    pub owner_id: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AccountBalance {
    pub user_id: String,
    pub username: String,
    pub balance_cents: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LedgerSum {
    pub account: String,
    pub total_cents: i64,
}

/// The account-level figures the audit compares, read in the same transaction
/// as the payment chunks (see `Store::audit_snapshot`).
#[derive(Debug, Clone)]
pub struct AuditSnapshot {
    pub balances: Vec<AccountBalance>,
    pub ledger_sums: Vec<LedgerSum>,
    /// Movements whose entries do not sum to zero.
    pub unbalanced_movements: Vec<LedgerSum>,
    /// The sum of the amounts of pending pays, which `@held` must hold.
    pub pending_pay_cents: i64,
    /// Payment ids named by ledger entries that no payment has.
    pub entries_without_payment: Vec<String>,
}

/// A run of payments (not refunds) in id order, with their refunds' amounts and
/// targets, and their ledger entries (summed by account or not).
#[derive(Debug, Clone, Default)]
pub struct AuditChunk {
    pub payments: Vec<AuditPayment>,
    pub payment_entries: Vec<PaymentEntrySum>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditPayment {
    pub id: String,
    pub action: PaymentAction,
    pub status: PaymentStatus,
    pub actor_id: Option<String>,
    pub target_user_id: Option<String>,
    pub amount_cents: i64,
    pub refund_amount_cents: Option<i64>,
    pub refund_target_id: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PaymentEntrySum {
    pub payment_id: String,
    pub account: String,
    pub total_cents: i64,
}

/// Rows older than these moments (microseconds) are no longer needed: the
/// retention worker deletes them (SPEC §9).
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Codes (authorization and device codes) that expired or were used before this.
    pub codes_before: i64,
    /// Sign-in failures recorded before this.
    pub signin_failures_before: i64,
    /// Idempotency keys taken before this.
    pub idempotency_keys_before: i64,
    /// Tokens that expired or were revoked before this.
    pub tokens_before: i64,
    /// Ended-session records whose cookie expired before this.
    pub ended_sessions_before: i64,
    /// Verification links that expired before this.
    pub verification_links_before: i64,
    /// Unshown secrets kept since before this.
    pub reveals_before: i64,
    /// Webhook events (delivered or failed) that happened before this, and
    /// attempts made before it.
    pub webhooks_before: i64,
    /// Verification sends made before this.
    pub verification_sends_before: i64,
}

/// A payment's words as database values: stored as their text (bound with
/// `as_str`), and decoded with their `TryFrom<String>`, so a row with any other
/// text fails to load, saying which word it holds.
macro_rules! decoded_from_text {
    ($($word:ty),* $(,)?) => {$(
        impl<DB: sqlx::Database> sqlx::Type<DB> for $word
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $word
        where
            String: sqlx::Decode<'r, DB>,
        {
            fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(Self::try_from(<String as sqlx::Decode<'r, DB>>::decode(value)?)?)
            }
        }
    )*};
}

decoded_from_text!(
    super::DeviceStatus,
    Audience,
    Medium,
    PaymentAction,
    PaymentKind,
    PaymentStatus,
    TargetType
);
