//! What the rest of the service asks of a store, one trait per domain: users
//! and friends, accounts, OAuth, payments; `Store` is all of them together with
//! what concerns the database itself. Both backends implement every one (see
//! `queries/mod.rs`).

use super::{
    App, AppUpdate, AuditChunk, AuditSnapshot, CodeCheck, CodeUse, Consent, ConsentRow, DuePayment,
    IdempotencyKey, InsertOutcome, IntrospectingClient, Movement, NewApp, NewCode, NewGrant,
    NewReveal, NewToken, NewUser, NewVerification, Payment, PaymentFilter, PaymentInsert,
    PersonalToken, Presented, ProfileUpdate, RefreshUse, Retention, SendCount, Settlement,
    SigninDecision, StoreError, StoredIdempotencyKey, TokenRecord, Transition, TransitionOutcome,
    User, UserFlags, UserSearch,
};
use super::{DeviceDecide, DevicePoll, NewDeviceCode, NewOidcGrant, PendingDeviceCode};
use super::{FactorStore, OidcStore, WebhookStore};
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

/// An account and its addresses that claim pending payments: those verified.
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    pub user_id: &'a str,
    pub email: Option<&'a str>,
    pub phone: Option<&'a str>,
}

/// Everything the service stores, and the database itself.
#[async_trait]
pub trait Store:
    UserStore
    + AccountStore
    + OAuthStore
    + OidcStore
    + DeviceStore
    + FactorStore
    + PaymentStore
    + WebhookStore
    + Send
    + Sync
    + 'static
{
    /// Which backend this is, for logs and tests.
    fn backend(&self) -> &'static str;

    /// Applies pending migrations (safe to call from several processes at once).
    async fn migrate(&self) -> Result<(), StoreError>;

    /// Checks that the database answers and, on SQLite, that the writer can
    /// write.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Opens every pooled connection now, from the caller's runtime (the
    /// server's main one), so that none belongs to a worker thread's runtime
    /// that stops before the others at shutdown.
    async fn open_all_connections(&self) -> Result<(), StoreError>;

    /// Writes a consistent copy of the whole database to a new file at `path`
    /// while others keep reading and writing. SQLite only: a PostgreSQL store
    /// answers `Unsupported` (back it up with pg_dump).
    async fn backup_into(&self, path: &str) -> Result<(), StoreError>;

    /// Changes whenever this store has committed a revocation of a token or
    /// grant, a suspension or an app secret change.
    fn revocation_epoch(&self) -> u64;

    /// Returns the stored value of a server setting, storing `candidate` first if
    /// there is none yet. Racing callers all get the one value that won. Never
    /// for a secret: a copy of the database must yield no usable credential.
    async fn server_setting_or_insert(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<String, StoreError>;

    /// The stored value of a server setting, if any.
    async fn server_setting(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// Deletes a server setting and then, when there was one, erases what the
    /// deleted row leaves in the database's files, so that a copy of the
    /// database made afterwards holds no trace of it: SQLite rebuilds the
    /// database file (`VACUUM`, the time of a full copy) and empties its WAL;
    /// PostgreSQL rewrites the table (`VACUUM FULL server_settings`, skipped
    /// with a warning by PostgreSQL when the role does not own it; the server's
    /// own write-ahead log is out of reach). Whether there was one.
    async fn forget_server_setting(&self, key: &str) -> Result<bool, StoreError>;

    /// Deletes every row the retention rules no longer need; how many.
    async fn purge(&self, retention: &Retention) -> Result<u64, StoreError>;
}

/// Users and their friendships.
#[async_trait]
pub trait UserStore: Send + Sync {
    async fn insert_user(&self, user: &NewUser) -> Result<User, StoreError>;

    async fn find_user(&self, key: UserKey<'_>) -> Result<Option<User>, StoreError>;

    async fn find_users(&self, ids: &[String]) -> Result<Vec<User>, StoreError>;

    async fn search_users(&self, search: &UserSearch) -> Result<Vec<User>, StoreError>;

    /// Sets the account flags; verifying also marks its e-mail and phone verified.
    async fn update_user_flags(
        &self,
        user_id: &str,
        flags: UserFlags,
    ) -> Result<Option<User>, StoreError>;

    async fn update_profile(
        &self,
        user_id: &str,
        profile: &ProfileUpdate,
    ) -> Result<Option<User>, StoreError>;

    /// Sets the account's e-mail and phone. An address that changes starts
    /// unverified (a verification link proves it); one that stays keeps its
    /// state. `Conflict("email" | "phone")` when another account has it.
    async fn update_contacts(
        &self,
        user_id: &str,
        email: &str,
        phone: Option<&str>,
    ) -> Result<Option<User>, StoreError>;

    /// Makes two users friends of each other. Already being friends is fine.
    async fn add_friendship(&self, a: &str, b: &str, at: i64) -> Result<(), StoreError>;

    async fn are_friends(&self, a: &str, b: &str) -> Result<bool, StoreError>;

    /// A user's friends ordered by id, after the id `after`.
    async fn list_friends(
        &self,
        user_id: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<User>, StoreError>;

    /// A user by id with the count of its friends, in one statement (`/me`
    /// when its token's check is remembered).
    async fn find_user_with_friends_count(
        &self,
        user_id: &str,
    ) -> Result<Option<(User, i64)>, StoreError>;
}

/// What an account goes through besides its row: verification of its
/// addresses, the sign-in throttle, ended browser sessions.
#[async_trait]
pub trait AccountStore: Send + Sync {
    async fn insert_verification(&self, link: &NewVerification) -> Result<(), StoreError>;

    /// Spends a verification link at `now` and marks its address and the account
    /// verified, in one transaction. `None` when the link is unknown, spent,
    /// expired, or its address is no longer the account's.
    async fn use_verification(&self, digest: &str, now: i64) -> Result<Option<User>, StoreError>;

    /// Records a verification send at `now` under each of `counts` if every
    /// one's limits allow it; otherwise records nothing and answers
    /// `Err(moment)`, the latest of the refusing keys' first moments a send is
    /// allowed again. Atomic across instances: racing callers cannot both
    /// pass a limit.
    async fn reserve_verification_send(
        &self,
        counts: &[SendCount<'_>],
        now: i64,
    ) -> Result<Result<(), i64>, StoreError>;

    /// Admits a sign-in attempt: with each key locked (so parallel attempts
    /// are decided one after another, on every instance), reads each key's
    /// failures since `since` (count, latest) and asks `decide`; when it
    /// admits, records the attempt as a failure under every key at `now`
    /// (failures before `since` are forgotten). A right password takes the
    /// record back with `forget_signin_attempt`.
    async fn admit_signin(
        &self,
        keys: &[String],
        since: i64,
        now: i64,
        decide: SigninDecision<'_>,
    ) -> Result<Result<(), std::time::Duration>, StoreError>;

    /// Forgets every failure of `clear_key`, and the one failure recorded
    /// under each of `attempt_keys` at `at`.
    async fn forget_signin_attempt(
        &self,
        clear_key: &str,
        attempt_keys: &[String],
        at: i64,
    ) -> Result<(), StoreError>;

    /// Records that a browser session was signed out; it stays refused until
    /// `expires_at`, when its cookie has expired anyway (older records go).
    async fn end_session(
        &self,
        session_id: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<(), StoreError>;

    /// Whether the session `session_id` of `user_id`, signed in at `since`,
    /// has ended: signed out, or cut by a password change after `since`.
    async fn session_ended(
        &self,
        session_id: &str,
        user_id: &str,
        since: i64,
    ) -> Result<bool, StoreError>;
}

/// The authorization server: apps, consents, grants, tokens and codes, and
/// the one-time showing of a secret.
#[async_trait]
pub trait OAuthStore: Send + Sync {
    async fn insert_app(&self, app: &NewApp) -> Result<App, StoreError>;

    async fn find_app(&self, client_id: &str) -> Result<Option<App>, StoreError>;

    async fn set_app_suspended(
        &self,
        client_id: &str,
        suspended: bool,
    ) -> Result<Option<App>, StoreError>;

    /// Makes an app a resource server that may introspect any app's tokens,
    /// or not; `None` for an unknown app.
    async fn set_app_introspect_any(
        &self,
        client_id: &str,
        introspect_any: bool,
    ) -> Result<Option<App>, StoreError>;

    async fn apps_of_owner(&self, owner_id: &str) -> Result<Vec<App>, StoreError>;

    /// Changes an app's details if `owner_id` owns it.
    async fn update_own_app(
        &self,
        owner_id: &str,
        client_id: &str,
        update: &AppUpdate,
    ) -> Result<Option<App>, StoreError>;

    /// Replaces an app's secret digest if `owner_id` owns it; whether it did.
    async fn replace_app_secret(
        &self,
        owner_id: &str,
        client_id: &str,
        digest: &str,
    ) -> Result<bool, StoreError>;

    /// Keeps a sealed secret for its single showing.
    async fn insert_reveal(&self, reveal: &NewReveal) -> Result<(), StoreError>;

    /// Takes the sealed secret out (it is deleted: a second call finds nothing),
    /// if it is `user_id`'s and was kept at or after `not_before`.
    async fn take_reveal(
        &self,
        id: &str,
        user_id: &str,
        not_before: i64,
    ) -> Result<Option<String>, StoreError>;

    /// Whether the user gave this consent (these exact scopes, this response
    /// type).
    async fn has_consent(&self, consent: Consent<'_>) -> Result<bool, StoreError>;

    async fn insert_consent(&self, consent: Consent<'_>, at: i64) -> Result<(), StoreError>;

    /// The user's remembered consents with their apps, newest first.
    async fn consents_of_user(&self, user_id: &str) -> Result<Vec<ConsentRow>, StoreError>;

    /// Forgets the user's consents to the app and revokes every grant (and so
    /// every token) the app holds for the user. Returns whether there was any.
    async fn revoke_app_for_user(
        &self,
        user_id: &str,
        client_id: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Stores a grant and its first tokens together.
    async fn insert_grant_with_tokens(
        &self,
        grant: &NewGrant,
        tokens: &[NewToken],
    ) -> Result<(), StoreError>;

    /// Stores a grant and the code that will later yield its tokens.
    async fn insert_grant_with_code(
        &self,
        grant: &NewGrant,
        code: &NewCode,
    ) -> Result<(), StoreError>;

    /// Spends a code of the presenting app and, if `check` passes and its
    /// grant is still live, stores `tokens` under that grant: one transaction,
    /// so of simultaneous exchanges exactly one is first. A replay revokes the
    /// grant.
    async fn exchange_code(
        &self,
        code: Presented<'_>,
        check: CodeCheck<'_>,
        tokens: &[NewToken],
    ) -> Result<CodeUse, StoreError>;

    /// Spends a refresh token of the presenting app and stores its successors,
    /// in one transaction. A replay of a spent refresh token revokes its family.
    async fn rotate_refresh_token(
        &self,
        token: Presented<'_>,
        successors: &[NewToken],
    ) -> Result<RefreshUse, StoreError>;

    /// The scopes of the grant behind a refresh token that `rotate_refresh_token`
    /// would spend (of the presenting app, unspent, unrevoked, unexpired, its
    /// grant live); `None` for any other token, so nothing is learnt of those.
    async fn live_refresh_token_scopes(
        &self,
        token: Presented<'_>,
    ) -> Result<Option<String>, StoreError>;

    async fn find_token(&self, digest: &str) -> Result<Option<TokenRecord>, StoreError>;

    /// `find_token` with the count of the user's friends, in the same statement.
    async fn find_token_with_friends_count(
        &self,
        digest: &str,
    ) -> Result<Option<TokenRecord>, StoreError>;

    /// The calling app and the token it asks about, in one statement: `None`
    /// when there is no such app; the token is `None` when unknown.
    async fn find_client_and_token(
        &self,
        client_id: &str,
        digest: &str,
    ) -> Result<Option<(IntrospectingClient, Option<TokenRecord>)>, StoreError>;

    /// Revokes one token; a refresh token takes its whole family with it. When
    /// `client_id` is given, only a token of that client is revoked. Returns
    /// whether a live token was found.
    async fn revoke_token(
        &self,
        digest: &str,
        client_id: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError>;

    async fn revoke_grant(&self, grant_id: &str, now: i64) -> Result<(), StoreError>;

    async fn personal_tokens(
        &self,
        user_id: &str,
        now: i64,
    ) -> Result<Vec<PersonalToken>, StoreError>;

    /// Revokes one of the user's personal access tokens; whether it was live.
    async fn revoke_personal_token(
        &self,
        user_id: &str,
        grant_id: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Records that a grant was used, unless it was recorded after `stale_before`.
    async fn touch_grant(
        &self,
        grant_id: &str,
        now: i64,
        stale_before: i64,
    ) -> Result<(), StoreError>;
}

/// The device authorization grant (RFC 8628): a device's request, the
/// person's answer at `/device`, and the poll that spends it.
#[async_trait]
pub trait DeviceStore: Send + Sync {
    /// Stores a device's request; `false` (nothing stored) when its user code
    /// is taken.
    async fn insert_device_code(&self, code: &NewDeviceCode) -> Result<bool, StoreError>;

    /// The request a user code names, with its app, if it is pending and
    /// unexpired at `now`.
    async fn pending_device_code(
        &self,
        user_code_digest: &str,
        now: i64,
    ) -> Result<Option<PendingDeviceCode>, StoreError>;

    /// The person allowed: stores `grant` (with `oidc`, the sign-in behind
    /// it, when given), the consent, and the request's answer, in one
    /// transaction, if the request is still pending and unexpired at the
    /// grant's creation and asks for the grant's app and scopes (what the
    /// person was shown). Whether it was.
    async fn allow_device_code(
        &self,
        user_code_digest: &str,
        grant: &NewGrant,
        oidc: Option<&NewOidcGrant>,
    ) -> Result<bool, StoreError>;

    /// The person denied: whether the request was pending and unexpired.
    async fn deny_device_code(&self, user_code_digest: &str, now: i64) -> Result<bool, StoreError>;

    /// A poll by the presenting app: reads its device code, asks `decide`
    /// what to do and does it (spending the code and storing `tokens` under
    /// its grant when it is `Issue`), in one transaction, so of simultaneous
    /// polls exactly one gets the tokens.
    async fn poll_device_code(
        &self,
        code: Presented<'_>,
        decide: DeviceDecide<'_>,
        tokens: &[NewToken],
    ) -> Result<DevicePoll, StoreError>;
}

/// Payments, their refunds and idempotency keys, and the money around them:
/// deposits and the audit's snapshot.
#[async_trait]
pub trait PaymentStore: Send + Sync {
    /// Inserts a payment; for a pay, moves the amount from the actor to `@held`
    /// with a guarded debit. With a key, records it or replays its first result.
    async fn insert_payment(&self, insert: &PaymentInsert) -> Result<InsertOutcome, StoreError>;

    /// Moves a pending payment to a new status with its money, in one transaction.
    async fn apply_transition(
        &self,
        transition: &Transition,
    ) -> Result<TransitionOutcome, StoreError>;

    /// Settles pending pays, all in one transaction: each one still pending,
    /// held by no other worker (PostgreSQL `SKIP LOCKED`) and whose target
    /// account is not suspended as the database has it then, becomes settled
    /// with its `settle` movement from `@held`; the others stay as they are.
    /// Returns the ids of those settled.
    async fn settle_payments(
        &self,
        settlements: &[Settlement],
        at: i64,
    ) -> Result<Vec<String>, StoreError>;

    /// Settles, as `settle_payments` does, the oldest `limit` of the
    /// pending pays that reached an account at or before `settle_by` whose
    /// owner is not suspended, each with a movement id of its own. Returns
    /// how many were settled. Each pay is settled all or nothing; SQLite
    /// commits a round in slices, so the writes queued behind wait less.
    async fn settle_due(&self, settle_by: i64, at: i64, limit: i64) -> Result<usize, StoreError>;

    async fn find_payments(&self, ids: &[String]) -> Result<Vec<Payment>, StoreError>;

    /// What was stored under the owner's key, unless the key was created
    /// before its `expired_before`.
    async fn find_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<StoredIdempotencyKey>, StoreError>;

    async fn list_payments(&self, filter: &PaymentFilter) -> Result<Vec<Payment>, StoreError>;

    /// Pending pays that reached an account at or before `settle_by`, and
    /// pending payments to unclaimed addresses made at or before `expire_by`.
    async fn due_payments(
        &self,
        settle_by: i64,
        expire_by: i64,
        limit: i64,
    ) -> Result<Vec<DuePayment>, StoreError>;

    /// Points pending payments to the claimant's e-mail or phone at the user
    /// (unless the user made them), as of `now`. Returns how many were claimed.
    async fn claim_payments(&self, claimant: Claimant<'_>, now: i64) -> Result<u64, StoreError>;

    /// Records money arriving from outside: credits the user and writes both
    /// ledger entries in one transaction. Returns the new balance in cents.
    async fn deposit(&self, movement: &Movement) -> Result<i64, StoreError>;

    /// A consistent snapshot for the audit: the account-level figures, and the
    /// payments that may disagree with their ledger entries or refunds (found in
    /// SQL on PostgreSQL, `postgres/audit.rs`; by one walk on SQLite) with their entries, handed to `each` up to
    /// `chunk` payments at a time in id order, all read in one transaction so the
    /// ledger is never held in memory at once.
    async fn audit_snapshot(
        &self,
        chunk: i64,
        each: &mut (dyn FnMut(AuditChunk) + Send),
    ) -> Result<AuditSnapshot, StoreError>;
}
