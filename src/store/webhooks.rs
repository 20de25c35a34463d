//! Storage of webhooks (SPEC §12): apps' endpoints with their sealed signing
//! secrets, the outbox of deliveries (one row per event and endpoint, written
//! in the transaction of the change it reports) and each attempt's answer.

use super::StoreError;
use async_trait::async_trait;

/// A new endpoint, its secret already sealed.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    pub id: String,
    pub client_id: String,
    pub url: String,
    /// `EventFilter::stored`.
    pub events: String,
    pub secret_sealed: String,
    pub created_at: i64,
}

/// An endpoint as stored.
#[derive(Clone, sqlx::FromRow)]
pub struct EndpointRow {
    pub id: String,
    pub client_id: String,
    pub url: String,
    pub events: String,
    pub secret_sealed: String,
    pub previous_secret_sealed: Option<String>,
    pub previous_until: Option<i64>,
    pub created_at: i64,
    pub failing_since: Option<i64>,
    pub disabled_at: Option<i64>,
}

impl std::fmt::Debug for EndpointRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointRow")
            .field("id", &self.id)
            .field("client_id", &self.client_id)
            .field("url", &self.url)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// A delivery claimed for an attempt, with its endpoint.
#[derive(Clone, sqlx::FromRow)]
pub struct ClaimedDelivery {
    pub id: String,
    pub endpoint_id: String,
    pub event_id: String,
    pub client_id: String,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub occurred_at: i64,
    pub payment_id: Option<String>,
    pub status: Option<String>,
    pub date_completed: Option<i64>,
    pub target_user_id: Option<String>,
    pub refund_payment_id: Option<String>,
    pub body: Option<String>,
    /// This attempt's number (1 for the first).
    pub attempts: i64,
    pub claim: Option<String>,
    pub url: String,
    pub secret_sealed: String,
    pub previous_secret_sealed: Option<String>,
    pub previous_until: Option<i64>,
}

impl std::fmt::Debug for ClaimedDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedDelivery")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

/// One attempt as the endpoint's list shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AttemptRow {
    pub event_id: String,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub attempt: i64,
    /// The answer's status code; `None` when none came.
    pub answer: Option<i64>,
    pub error: Option<String>,
    pub at: i64,
    /// The delivery's state now: `pending`, `delivered` or `failed`.
    pub state: String,
}

/// What an attempt came to, to record under its claim.
#[derive(Debug, Clone)]
pub struct AttemptOutcome {
    pub delivery_id: String,
    pub endpoint_id: String,
    pub claim: String,
    pub attempt: i64,
    pub at: i64,
    pub answer: Option<i64>,
    pub error: Option<String>,
    pub delivered: bool,
    /// When to try again; `None`: no more attempts (the event failed).
    pub retry_at: Option<i64>,
    /// The endpoint is disabled if it has been failing since before this.
    pub disable_if_failing_since: i64,
    /// The body this attempt rendered (its first), kept for the next ones.
    pub rendered: Option<String>,
}

/// The deliveries of one payment event, written in the transaction of the
/// change: `$1` the payment (read after the change, so its state is the
/// change's), `$2` the event's type, `$3` its time. One row per endpoint that
/// is enabled, wants the type, and whose app the payment is linked to: it was
/// made through the app (`payment_origins`), or one of its parties has a
/// live grant to the app that reads payments (`access_profile` or
/// `access_payment_history`). The event id is `evt_`, the type's last word
/// and the payment id (each payment reaches each state once). Each link is
/// an `EXISTS` on a key (`IN (SELECT …)` made SQLite build a temporary
/// table at every run).
///
/// The rows, as [`DELIVERY_INSERT_SQL`] takes them. SQLite's group writer
/// reads them and inserts each (`sqlite/group_writes.rs`); the store's
/// transactions insert them in one statement ([`PAYMENT_EVENT_SQL`]).
/// PostgreSQL's function `payment_events`
/// (`sql/postgres/functions/payment_events.sql`) is that statement over
/// arrays; a test in `sqlite.rs` holds the two to each other.
macro_rules! payment_event_rows {
    () => {
        "SELECT e.id || '/evt_' || substr($2, 9) || '_' || p.id, e.id, \
      'evt_' || substr($2, 9) || '_' || p.id, e.client_id, $2, $3, \
      p.id, p.status, p.date_completed, p.target_user_id, p.refund_payment_id, $3 \
    FROM payments p JOIN webhook_endpoints e ON e.disabled_at IS NULL \
      AND (e.events = '*' OR e.events LIKE '%,' || $2 || ',%') \
    WHERE p.id = $1 \
      AND (EXISTS (SELECT 1 FROM payment_origins o \
          WHERE o.payment_id = p.id AND o.client_id = e.client_id) \
        OR EXISTS (SELECT 1 FROM oauth_grants g \
          WHERE g.user_id = p.actor_id AND g.client_id = e.client_id AND g.revoked_at IS NULL \
            AND (' ' || g.scopes || ' ' LIKE '% access_profile %' \
              OR ' ' || g.scopes || ' ' LIKE '% access_payment_history %')) \
        OR EXISTS (SELECT 1 FROM oauth_grants g \
          WHERE g.user_id = p.target_user_id AND g.client_id = e.client_id \
            AND g.revoked_at IS NULL \
            AND (' ' || g.scopes || ' ' LIKE '% access_profile %' \
              OR ' ' || g.scopes || ' ' LIKE '% access_payment_history %')))"
    };
}
pub(crate) const PAYMENT_EVENT_ROWS_SQL: &str = payment_event_rows!();

/// The columns of a delivery row that a payment event writes.
macro_rules! delivery_columns {
    () => {
        "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, client_id, type, occurred_at, \
      payment_id, status, date_completed, target_user_id, refund_payment_id, next_attempt_at) "
    };
}

/// One delivery row of [`PAYMENT_EVENT_ROWS_SQL`]. One row, so SQLite keeps
/// no statement journal for it (a statement that may write several rows
/// and fail halfway copies each page it changes first).
pub(crate) const DELIVERY_INSERT_SQL: &str = concat!(
    delivery_columns!(),
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
);

/// A payment event's deliveries in one statement (see
/// [`PAYMENT_EVENT_ROWS_SQL`]).
pub(crate) const PAYMENT_EVENT_SQL: &str = concat!(delivery_columns!(), payment_event_rows!());

/// Whether [`PAYMENT_ORIGIN_SQL`] writes its row: a row of `$1, $2` when it
/// does. SQLite's group writer asks, then inserts the one row
/// ([`PAYMENT_ORIGIN_INSERT_SQL`]).
macro_rules! payment_origin_wanted {
    () => {
        "SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM webhook_endpoints WHERE client_id = $2) \
      AND EXISTS (SELECT 1 FROM payments WHERE id = $1)"
    };
}
pub(crate) const PAYMENT_ORIGIN_WANTED_SQL: &str = payment_origin_wanted!();

/// Records the app a new payment (`$1`) was made through (`$2`), when the app
/// has an endpoint and the payment was written: its later events then reach
/// the app too.
pub(crate) const PAYMENT_ORIGIN_SQL: &str = concat!(
    "INSERT INTO payment_origins (payment_id, client_id) ",
    payment_origin_wanted!(),
    " ON CONFLICT DO NOTHING"
);

/// [`PAYMENT_ORIGIN_SQL`]'s row, once [`PAYMENT_ORIGIN_WANTED_SQL`] has
/// found it wanted: one row, so SQLite keeps no statement journal for it.
pub(crate) const PAYMENT_ORIGIN_INSERT_SQL: &str =
    "INSERT OR IGNORE INTO payment_origins (payment_id, client_id) VALUES (?1, ?2)";

/// The deliveries of a `grant.revoked` event: `$1` the app, `$2` the event
/// id, `$3` the body, `$4` the time.
pub(crate) const GRANT_EVENT_SQL: &str = "\
    INSERT INTO webhook_deliveries (id, endpoint_id, event_id, client_id, type, occurred_at, \
      body, next_attempt_at) \
    SELECT e.id || '/' || $2, e.id, $2, e.client_id, 'grant.revoked', $4, $3, $4 \
    FROM webhook_endpoints e WHERE e.client_id = $1 AND e.disabled_at IS NULL \
      AND (e.events = '*' OR e.events LIKE '%,grant.revoked,%')";

/// The body of a `grant.revoked` event (SPEC §12).
pub(crate) fn grant_revoked_body(user_id: &str, client_id: &str, at: i64) -> String {
    let revoked_at = crate::domain::format_datetime(at);
    serde_json::json!({
        "type": "grant.revoked",
        "timestamp": revoked_at,
        "data": {"user_id": user_id, "client_id": client_id, "revoked_at": revoked_at},
    })
    .to_string()
}

/// Webhook endpoints and their deliveries.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Adds an endpoint unless its app already has `max`; whether it did.
    /// Atomic across instances.
    async fn insert_endpoint(&self, endpoint: &NewEndpoint, max: i64) -> Result<bool, StoreError>;

    /// An app's endpoints, oldest first.
    async fn endpoints_of(&self, client_id: &str) -> Result<Vec<EndpointRow>, StoreError>;

    /// Replaces an endpoint's secret; the one it had keeps signing until
    /// `previous_until`. Whether the app has that endpoint.
    async fn rotate_endpoint_secret(
        &self,
        client_id: &str,
        endpoint_id: &str,
        secret_sealed: &str,
        previous_until: i64,
    ) -> Result<bool, StoreError>;

    /// Deletes an endpoint with its deliveries and attempts; whether the app
    /// had it.
    async fn remove_endpoint(&self, client_id: &str, endpoint_id: &str)
        -> Result<bool, StoreError>;

    /// The endpoint's latest attempts, newest first.
    async fn recent_attempts(
        &self,
        endpoint_id: &str,
        limit: i64,
    ) -> Result<Vec<AttemptRow>, StoreError>;

    /// Claims up to `limit` deliveries due at `now` whose endpoint is enabled,
    /// until `lease_until`, under `claim` (on PostgreSQL passing by those
    /// another instance is claiming: `SKIP LOCKED`), counting the attempt.
    async fn claim_deliveries(
        &self,
        now: i64,
        lease_until: i64,
        claim: &str,
        limit: i64,
    ) -> Result<Vec<ClaimedDelivery>, StoreError>;

    /// Records attempts in one transaction, each if its claim still holds:
    /// the attempt, the delivery's state, next attempt and (after its first)
    /// body, the endpoint's failing time (and its disabling). Whether each
    /// claim held.
    async fn finish_attempts(&self, outcomes: &[AttemptOutcome]) -> Result<Vec<bool>, StoreError>;

    /// Queues a test event for one endpoint of the app; whether it has it.
    async fn queue_test_event(
        &self,
        client_id: &str,
        endpoint_id: &str,
        event_id: &str,
        body: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Makes a delivered or failed event due again for the endpoint (same
    /// id, same body); whether there was one.
    async fn resend_event(
        &self,
        client_id: &str,
        endpoint_id: &str,
        event_id: &str,
        now: i64,
    ) -> Result<bool, StoreError>;
}
