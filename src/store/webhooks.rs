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

/// A payment event as the outbox keeps it until it is routed (see
/// [`WebhookStore::route_events`]): the payment, the event's type and time,
/// the app the payment was made through when the change knows it (a new
/// payment on SQLite's group writer; elsewhere the change writes
/// `payment_origins` itself), and what a change can alter of a payment, as
/// the change left it (the rest of a payment never changes). An outbox row
/// holds a JSON array of these; a field left out reads as NULL.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutboxEvent {
    pub payment_id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub date_completed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refund_payment_id: Option<String>,
}

/// The deliveries of the payment events of one outbox row (`$1`, its JSON
/// array), each backend's statement being this, its `outbox_events!` (the
/// array read as a table `c` of [`OutboxEvent`]'s fields) and its links
/// (`sqlite_links!`, `postgres_links!`, which join the payment): one row
/// per event and endpoint that is enabled, wants the type, and whose app the
/// payment is linked to: it was made through the app (`payment_origins`,
/// which `route_origins!` fills from the events first), or one of its
/// parties has a live grant to the app that reads payments (`access_profile`
/// or `access_payment_history`). The event id is `evt_`, the type's last
/// word and the payment id (each payment reaches each state once), so an
/// event routed twice has its deliveries once.
macro_rules! route_deliveries {
    () => {
        "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, client_id, type, \
           occurred_at, payment_id, status, date_completed, target_user_id, \
           refund_payment_id, next_attempt_at) \
         SELECT e.id || '/evt_' || substr(c.type, 9) || '_' || p.id, e.id, \
           'evt_' || substr(c.type, 9) || '_' || p.id, e.client_id, c.type, c.at, \
           p.id, c.status, c.date_completed, c.target_user_id, c.refund_payment_id, c.at \
         FROM "
    };
}
pub(crate) use route_deliveries;

/// The endpoints of an event's linked apps, SQLite's way: `EXISTS` on a key
/// for each link (`IN (SELECT …)` made SQLite build a temporary table at
/// every run).
macro_rules! sqlite_links {
    () => {
        " JOIN payments p ON p.id = c.payment_id \
        JOIN webhook_endpoints e ON e.disabled_at IS NULL \
          AND (e.events = '*' OR e.events LIKE '%,' || c.type || ',%') \
        WHERE EXISTS (SELECT 1 FROM payment_origins o \
              WHERE o.payment_id = p.id AND o.client_id = e.client_id) \
            OR EXISTS (SELECT 1 FROM oauth_grants g \
              WHERE g.user_id = p.actor_id AND g.client_id = e.client_id \
                AND g.revoked_at IS NULL \
                AND (' ' || g.scopes || ' ' LIKE '% access_profile %' \
                  OR ' ' || g.scopes || ' ' LIKE '% access_payment_history %')) \
            OR EXISTS (SELECT 1 FROM oauth_grants g \
              WHERE g.user_id = p.target_user_id AND g.client_id = e.client_id \
                AND g.revoked_at IS NULL \
                AND (' ' || g.scopes || ' ' LIKE '% access_profile %' \
                  OR ' ' || g.scopes || ' ' LIKE '% access_payment_history %')) \
        ON CONFLICT DO NOTHING"
    };
}
pub(crate) use sqlite_links;

/// The same links, PostgreSQL's way: a LATERAL union read by key for each
/// event (with `OR`ed `EXISTS`, PostgreSQL hashed the whole of
/// `payment_origins` at every run, decision 019).
macro_rules! postgres_links {
    () => {
        " JOIN payments p ON p.id = c.payment_id \
        CROSS JOIN LATERAL ( \
            SELECT o.client_id FROM payment_origins o WHERE o.payment_id = p.id \
            UNION \
            SELECT g.client_id FROM oauth_grants g \
              WHERE g.user_id IN (p.actor_id, p.target_user_id) AND g.revoked_at IS NULL \
                AND (' ' || g.scopes || ' ' LIKE '% access_profile %' \
                  OR ' ' || g.scopes || ' ' LIKE '% access_payment_history %') \
        ) AS linked (client_id) \
        JOIN webhook_endpoints e ON e.client_id = linked.client_id AND e.disabled_at IS NULL \
          AND (e.events = '*' OR e.events LIKE '%,' || c.type || ',%') \
        ON CONFLICT DO NOTHING"
    };
}
pub(crate) use postgres_links;

/// The apps the new payments of one outbox row were made through, where
/// the change put them in the events (SQLite's group writer), for their
/// later events: those that have an endpoint. Each backend's statement is
/// this, its `outbox_events!` and `route_origins_where!`.
macro_rules! route_origins {
    () => {
        "INSERT INTO payment_origins (payment_id, client_id) SELECT c.payment_id, c.origin FROM "
    };
}
pub(crate) use route_origins;

/// See `route_origins!`.
macro_rules! route_origins_where {
    () => {
        " WHERE c.origin IS NOT NULL \
           AND EXISTS (SELECT 1 FROM webhook_endpoints WHERE client_id = c.origin) \
           AND EXISTS (SELECT 1 FROM payments WHERE id = c.payment_id) \
         ON CONFLICT DO NOTHING"
    };
}
pub(crate) use route_origins_where;

/// Records the app a new payment (`$1`) was made through (`$2`), when the app
/// has an endpoint and the payment was written: its later events then reach
/// the app too.
pub(crate) const PAYMENT_ORIGIN_SQL: &str = "INSERT INTO payment_origins (payment_id, client_id) \
     SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM webhook_endpoints WHERE client_id = $2) \
       AND EXISTS (SELECT 1 FROM payments WHERE id = $1) \
     ON CONFLICT DO NOTHING";

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

    /// Routes the payment events of up to `rows` outbox rows, oldest first,
    /// into their deliveries, and deletes the rows, in one transaction (one
    /// instance at a time); how many rows.
    async fn route_events(&self, rows: i64) -> Result<usize, StoreError>;

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

#[cfg(test)]
mod tests {
    /// An event reaches the same endpoints on both backends: their links,
    /// written each backend's way (`EXISTS` on SQLite, a LATERAL union on
    /// PostgreSQL), name the same endpoints, the same origin and the same
    /// grants.
    #[test]
    fn both_backends_route_an_event_by_the_same_links() -> anyhow::Result<()> {
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let sqlite = words(sqlite_links!());
        let postgres = words(postgres_links!());
        let between = |text: &str, from: &str, to: &str| -> anyhow::Result<String> {
            let missing = || anyhow::anyhow!("{from} … {to} is not in {text}");
            let start = text.find(from).ok_or_else(missing)?;
            let end = text[start..].find(to).ok_or_else(missing)? + start + to.len();
            Ok(text[start..end].to_owned())
        };
        let endpoint = between(&sqlite, "e.disabled_at IS NULL", "|| ',%')")?;
        let grant = between(
            &sqlite,
            "g.revoked_at IS NULL",
            "access_payment_history %')",
        )?;
        for part in [&endpoint, &grant, "o.payment_id = p.id"] {
            assert!(postgres.contains(part), "{part}\nis not in\n{postgres}");
        }
        assert!(postgres.contains("g.user_id IN (p.actor_id, p.target_user_id)"));
        for link in [
            "o.client_id = e.client_id",
            "g.user_id = p.actor_id AND g.client_id = e.client_id",
            "g.user_id = p.target_user_id AND g.client_id = e.client_id",
        ] {
            assert!(sqlite.contains(link), "{link}\nis not in\n{sqlite}");
        }
        Ok(())
    }
}
