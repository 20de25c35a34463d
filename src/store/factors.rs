//! Storage of second factors (SPEC §11): the authenticator app's sealed seed,
//! recovery codes (digests), passkeys, the WebAuthn ceremonies in flight, and
//! the cut that ends a user's other sessions when the password changes.

use super::StoreError;
use async_trait::async_trait;

/// A user's authenticator app, its seed still sealed.
#[derive(Clone, sqlx::FromRow)]
pub struct TotpRow {
    pub secret_sealed: String,
    /// `None` while it is being set up.
    pub confirmed_at: Option<i64>,
    pub last_step: i64,
}

impl std::fmt::Debug for TotpRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TotpRow")
            .field("confirmed_at", &self.confirmed_at)
            .finish_non_exhaustive()
    }
}

/// A passkey or security key as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PasskeyRow {
    pub credential_id: String,
    pub user_id: String,
    pub name: String,
    /// The WebAuthn crate's credential, as JSON.
    pub credential: String,
    pub sign_count: i64,
    pub backup_eligible: bool,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
}

/// Everything a user has as second factors.
#[derive(Debug, Clone, Default)]
pub struct Factors {
    pub totp: Option<TotpRow>,
    pub passkeys: Vec<PasskeyRow>,
    /// Recovery codes not used yet.
    pub recovery_codes_left: i64,
}

impl Factors {
    /// A confirmed authenticator app.
    pub fn has_totp(&self) -> bool {
        self.totp.as_ref().is_some_and(|t| t.confirmed_at.is_some())
    }

    /// How many factors there are (the app counts as one, each passkey one).
    pub fn count(&self) -> usize {
        usize::from(self.has_totp()) + self.passkeys.len()
    }

    /// Whether the user has any second factor.
    pub fn any(&self) -> bool {
        self.count() > 0
    }
}

/// A WebAuthn ceremony between its options and its answer.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Ceremony {
    pub user_id: Option<String>,
    pub kind: String,
    pub state: String,
}

#[async_trait]
pub trait FactorStore: Send + Sync {
    /// The user's factors (an app being set up included, as unconfirmed).
    async fn factors(&self, user_id: &str) -> Result<Factors, StoreError>;

    /// Starts setting up an authenticator app (replacing one not yet
    /// confirmed); `false` when the user already has a confirmed one.
    async fn begin_totp(
        &self,
        user_id: &str,
        secret_sealed: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Confirms the app being set up with the code of `step`, and stores
    /// `recovery_digests` (when given) as the user's recovery codes, in one
    /// transaction. `false` when there was none to confirm.
    async fn confirm_totp(
        &self,
        user_id: &str,
        step: i64,
        now: i64,
        recovery_digests: Option<&[String]>,
    ) -> Result<bool, StoreError>;

    /// Spends the code of `step`: `true` if no code of it or of a later step
    /// was accepted before (one guarded statement, so of two simultaneous
    /// uses of one code one wins).
    async fn use_totp_step(&self, user_id: &str, step: i64) -> Result<bool, StoreError>;

    /// Removes the authenticator app: whether there was one.
    async fn remove_totp(&self, user_id: &str) -> Result<bool, StoreError>;

    /// Spends a recovery code: whether it was the user's and unused.
    async fn use_recovery_code(
        &self,
        user_id: &str,
        digest: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Replaces the user's recovery codes with these.
    async fn replace_recovery_codes(
        &self,
        user_id: &str,
        digests: &[String],
        now: i64,
    ) -> Result<(), StoreError>;

    /// Stores a new passkey (with `recovery_digests` as the user's recovery
    /// codes when given), in one transaction; `false` when its credential id
    /// is already registered.
    async fn insert_passkey(
        &self,
        passkey: &PasskeyRow,
        recovery_digests: Option<&[String]>,
    ) -> Result<bool, StoreError>;

    /// A passkey by its credential id, whoever's.
    async fn find_passkey(&self, credential_id: &str) -> Result<Option<PasskeyRow>, StoreError>;

    /// Records a use: the new credential and sign count, only if the count
    /// grew (or both are 0, an authenticator without a counter), so a
    /// replayed or cloned count is never written back.
    async fn record_passkey_use(
        &self,
        credential_id: &str,
        credential: &str,
        sign_count: i64,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Removes one of the user's passkeys: whether it was there.
    async fn remove_passkey(&self, user_id: &str, credential_id: &str) -> Result<bool, StoreError>;

    /// Removes every factor and recovery code of the user: how many factors
    /// (the app, each passkey) there were.
    async fn reset_factors(&self, user_id: &str) -> Result<u64, StoreError>;

    /// Keeps a ceremony's state until `expires_at`, under `digest`.
    async fn insert_ceremony(
        &self,
        digest: &str,
        ceremony: &Ceremony,
        expires_at: i64,
    ) -> Result<(), StoreError>;

    /// Takes a ceremony's state (it works once), if unexpired at `now`.
    async fn take_ceremony(&self, digest: &str, now: i64) -> Result<Option<Ceremony>, StoreError>;

    /// Changes the user's password hash and ends every session of the user
    /// signed in before `now` (the caller starts its own again).
    async fn change_password(
        &self,
        user_id: &str,
        password_hash: &str,
        now: i64,
    ) -> Result<(), StoreError>;
}
