//! Webhook endpoints, the outbox, deliveries and their attempts. A payment
//! event is written to the outbox by the change's own transaction
//! (`payment_events`); the delivery worker routes the outbox's rows into
//! deliveries (`route_events`), claims due deliveries with a lease (`SKIP
//! LOCKED` on PostgreSQL) and records each attempt under its claim.

use super::{
    Backend, Db, ThisStore, KEY_LOCK, KEY_LOCK_SHARED, PAYMENT_EVENTS_SQL, ROUTE_DELIVERIES_SQL,
    ROUTE_ORIGINS_SQL, SKIP_LOCKED,
};
use crate::store::webhooks::{
    AttemptOutcome, AttemptRow, ClaimedDelivery, EndpointRow, NewEndpoint, WebhookStore,
    GRANT_EVENT_SQL, PAYMENT_ORIGIN_SQL,
};
use crate::store::StoreError;

/// The key of the lock an endpoint's addition or removal takes alone, and
/// every change writing payment events shares on PostgreSQL (the function
/// `payment_events` and its callers say why).
const ENDPOINTS_LOCK: &str = "webhook endpoints";

/// The key of the lock a routing of the outbox takes alone, so that one
/// instance routes at a time (see `route_events`).
const ROUTER_LOCK: &str = "webhook router";

const ENDPOINT_COLUMNS: &str = "id, client_id, url, events, secret_sealed, \
    previous_secret_sealed, previous_until, created_at, failing_since, disabled_at";

impl ThisStore {
    /// Records one attempt in `tx` (see `WebhookStore::finish_attempts`);
    /// whether its claim held (when not, nothing is written).
    async fn finish_attempt(
        tx: &mut sqlx::Transaction<'static, Db>,
        o: &AttemptOutcome,
    ) -> Result<bool, StoreError> {
        let state = match (o.delivered, o.retry_at) {
            (true, _) => "delivered",
            (false, Some(_)) => "pending",
            (false, None) => "failed",
        };
        let held = sqlx::query(
            "UPDATE webhook_deliveries SET state = $3, next_attempt_at = $4, claim = NULL, \
               body = COALESCE(body, $5) \
             WHERE id = $1 AND claim = $2",
        )
        .bind(&o.delivery_id)
        .bind(&o.claim)
        .bind(state)
        .bind(o.retry_at.unwrap_or(o.at))
        .bind(&o.rendered)
        .execute(&mut **tx)
        .await?
        .rows_affected()
            == 1;
        if !held {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO webhook_attempts (delivery_id, attempt, endpoint_id, at, answer, error) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(&o.delivery_id)
        .bind(o.attempt)
        .bind(&o.endpoint_id)
        .bind(o.at)
        .bind(o.answer)
        .bind(&o.error)
        .execute(&mut **tx)
        .await?;
        if o.delivered {
            sqlx::query(
                "UPDATE webhook_endpoints SET failing_since = NULL \
                 WHERE id = $1 AND failing_since IS NOT NULL",
            )
            .bind(&o.endpoint_id)
            .execute(&mut **tx)
            .await?;
        } else {
            sqlx::query(
                "UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, $2), \
                 disabled_at = CASE WHEN COALESCE(failing_since, $2) <= $3 \
                   THEN COALESCE(disabled_at, $2) ELSE disabled_at END \
                 WHERE id = $1",
            )
            .bind(&o.endpoint_id)
            .bind(o.at)
            .bind(o.disable_if_failing_since)
            .execute(&mut **tx)
            .await?;
        }
        Ok(true)
    }

    /// Writes a payment event to the outbox in the change's transaction (see
    /// `PAYMENT_EVENTS_SQL`); first, for a new payment made through an app,
    /// that app (`origin`), for its later events.
    pub(crate) async fn payment_events(
        tx: &mut sqlx::Transaction<'static, Db>,
        payment_id: &str,
        kind: crate::domain::EventType,
        at: i64,
        origin: Option<&str>,
    ) -> Result<(), StoreError> {
        if let Some(client_id) = origin {
            sqlx::query(PAYMENT_ORIGIN_SQL)
                .bind(payment_id)
                .bind(client_id)
                .execute(&mut **tx)
                .await?;
        }
        sqlx::query(PAYMENT_EVENTS_SQL)
            .bind(payment_id)
            .bind(kind.as_str())
            .bind(at)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// A new payment's `payment.created` event, in the transaction that wrote it.
    pub(crate) async fn created_event(
        tx: &mut sqlx::Transaction<'static, Db>,
        insert: &crate::store::PaymentInsert,
    ) -> Result<(), StoreError> {
        let p = &insert.payment;
        let kind = crate::domain::EventType::PaymentCreated;
        Self::payment_events(tx, &p.id, kind, p.date_created, insert.origin.as_deref()).await
    }

    /// Writes a `grant.revoked` event's deliveries in the revocation's
    /// transaction.
    pub(crate) async fn grant_revoked_event(
        tx: &mut sqlx::Transaction<'static, Db>,
        user_id: &str,
        client_id: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        // Shared, as `payment_events` takes it: an endpoint added while this
        // revocation commits either sees it commit first or is seen by it.
        sqlx::query(KEY_LOCK_SHARED)
            .bind(ENDPOINTS_LOCK)
            .execute(&mut **tx)
            .await?;
        let event_id = format!("evt_revoked_{}", crate::domain::new_id());
        sqlx::query(GRANT_EVENT_SQL)
            .bind(client_id)
            .bind(event_id)
            .bind(crate::store::webhooks::grant_revoked_body(
                user_id, client_id, at,
            ))
            .bind(at)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl WebhookStore for ThisStore {
    #[tracing::instrument(skip_all, fields(client_id = %endpoint.client_id))]
    async fn insert_endpoint(&self, endpoint: &NewEndpoint, max: i64) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        // Alone (PostgreSQL): the changes writing their events now commit
        // first, those after wait, and see the endpoint (`payment_events`).
        // And two adds for one app are decided one after the other.
        sqlx::query(KEY_LOCK)
            .bind(ENDPOINTS_LOCK)
            .execute(&mut *tx)
            .await?;
        let added = sqlx::query(
            "INSERT INTO webhook_endpoints \
             (id, client_id, url, events, secret_sealed, created_at) \
             SELECT $1, $2, $3, $4, $5, $6 \
             WHERE (SELECT count(*) FROM webhook_endpoints WHERE client_id = $2) < $7",
        )
        .bind(&endpoint.id)
        .bind(&endpoint.client_id)
        .bind(&endpoint.url)
        .bind(&endpoint.events)
        .bind(&endpoint.secret_sealed)
        .bind(endpoint.created_at)
        .bind(max)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        tx.commit().await?;
        Ok(added)
    }

    async fn endpoints_of(&self, client_id: &str) -> Result<Vec<EndpointRow>, StoreError> {
        self.read_all(
            sqlx::query_as(&format!(
                "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE client_id = $1 \
                 ORDER BY created_at, id"
            ))
            .bind(client_id),
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(endpoint_id))]
    async fn rotate_endpoint_secret(
        &self,
        client_id: &str,
        endpoint_id: &str,
        secret_sealed: &str,
        previous_until: i64,
    ) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "UPDATE webhook_endpoints SET previous_secret_sealed = secret_sealed, \
                 previous_until = $4, secret_sealed = $3 WHERE id = $2 AND client_id = $1",
            )
            .bind(client_id)
            .bind(endpoint_id)
            .bind(secret_sealed)
            .bind(previous_until),
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(endpoint_id))]
    async fn remove_endpoint(
        &self,
        client_id: &str,
        endpoint_id: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        // Alone, as an addition: no change writes a delivery for the
        // endpoint after its deliveries are deleted.
        sqlx::query(KEY_LOCK)
            .bind(ENDPOINTS_LOCK)
            .execute(&mut *tx)
            .await?;
        let removed = sqlx::query("DELETE FROM webhook_endpoints WHERE id = $2 AND client_id = $1")
            .bind(client_id)
            .bind(endpoint_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if removed {
            // A delivery's id is its endpoint's and a slash, then the
            // event's: the endpoint's deliveries are a range of the key.
            for sql in [
                "DELETE FROM webhook_attempts WHERE endpoint_id = $1",
                "DELETE FROM webhook_deliveries WHERE id >= $1 || '/' AND id < $1 || '0'",
            ] {
                sqlx::query(sql).bind(endpoint_id).execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        Ok(removed)
    }

    async fn recent_attempts(
        &self,
        endpoint_id: &str,
        limit: i64,
    ) -> Result<Vec<AttemptRow>, StoreError> {
        self.read_all(
            sqlx::query_as(
                "SELECT d.event_id, d.type, a.attempt, a.answer, a.error, a.at, d.state \
                 FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id \
                 WHERE a.endpoint_id = $1 ORDER BY a.at DESC, a.attempt DESC LIMIT $2",
            )
            .bind(endpoint_id)
            .bind(limit),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn route_events(&self, rows: i64) -> Result<usize, StoreError> {
        // Most rounds find the outbox empty: a read, not a write, says so.
        let waiting: Option<i64> = self
            .read_value(sqlx::query_scalar("SELECT seq FROM webhook_outbox LIMIT 1"))
            .await?;
        if waiting.is_none() {
            return Ok(0);
        }
        let mut tx = self.write().await?;
        // One instance at a time, oldest row first: a new payment's row (its
        // `payment.created`, with the origin it carries) is routed before a
        // later row's event of the same payment looks for that origin.
        sqlx::query(KEY_LOCK)
            .bind(ROUTER_LOCK)
            .execute(&mut *tx)
            .await?;
        // Shared, as the changes take it: an endpoint's removal (which
        // takes it alone) and a routing do not cross.
        sqlx::query(KEY_LOCK_SHARED)
            .bind(ENDPOINTS_LOCK)
            .execute(&mut *tx)
            .await?;
        let outbox: Vec<(i64, String)> =
            sqlx::query_as("SELECT seq, events FROM webhook_outbox ORDER BY seq LIMIT $1")
                .bind(rows)
                .fetch_all(&mut *tx)
                .await?;
        for (seq, events) in &outbox {
            for statement in [ROUTE_ORIGINS_SQL, ROUTE_DELIVERIES_SQL] {
                sqlx::query(statement)
                    .bind(events)
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("DELETE FROM webhook_outbox WHERE seq = $1")
                .bind(seq)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(outbox.len())
    }

    #[tracing::instrument(skip_all)]
    async fn claim_deliveries(
        &self,
        now: i64,
        lease_until: i64,
        claim: &str,
        limit: i64,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        // The due rows are locked as they are read (and those another
        // instance holds passed by); the endpoint is checked in a subquery,
        // so its row is not locked.
        static CLAIM: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "UPDATE webhook_deliveries SET next_attempt_at = $2, attempts = attempts + 1, \
                   claim = $3 \
                 WHERE id IN (SELECT d.id FROM webhook_deliveries d \
                   WHERE d.state = 'pending' AND d.next_attempt_at <= $1 \
                     AND NOT EXISTS (SELECT 1 FROM webhook_endpoints e \
                       WHERE e.id = d.endpoint_id AND e.disabled_at IS NOT NULL) \
                   ORDER BY d.next_attempt_at LIMIT $4{SKIP_LOCKED}) \
                 RETURNING id"
            )
        });
        let mut tx = self.write().await?;
        let ids: Vec<String> = sqlx::query_scalar(&CLAIM)
            .bind(now)
            .bind(lease_until)
            .bind(claim)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.fetch_in(
            "SELECT d.id, d.endpoint_id, d.event_id, d.client_id, d.type, d.occurred_at, \
               d.payment_id, d.status, d.date_completed, d.target_user_id, \
               d.refund_payment_id, d.body, d.attempts, d.claim, e.url, e.secret_sealed, \
               e.previous_secret_sealed, e.previous_until \
             FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id \
             WHERE d.id IN ("
                .to_owned(),
            &ids,
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(attempts = outcomes.len()))]
    async fn finish_attempts(&self, outcomes: &[AttemptOutcome]) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.write().await?;
        let mut held = Vec::with_capacity(outcomes.len());
        for o in outcomes {
            held.push(Self::finish_attempt(&mut tx, o).await?);
        }
        tx.commit().await?;
        Ok(held)
    }

    #[tracing::instrument(skip_all, fields(endpoint_id))]
    async fn queue_test_event(
        &self,
        client_id: &str,
        endpoint_id: &str,
        event_id: &str,
        body: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, client_id, type, \
                   occurred_at, body, next_attempt_at) \
                 SELECT e.id || '/' || $3, e.id, $3, e.client_id, $4, $5, $6, $5 \
                 FROM webhook_endpoints e WHERE e.id = $2 AND e.client_id = $1",
            )
            .bind(client_id)
            .bind(endpoint_id)
            .bind(event_id)
            .bind(crate::domain::TEST_EVENT)
            .bind(now)
            .bind(body),
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(endpoint_id, event_id))]
    async fn resend_event(
        &self,
        client_id: &str,
        endpoint_id: &str,
        event_id: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = $4 \
                 WHERE id = $2 || '/' || $3 AND client_id = $1 \
                   AND (state <> 'pending' OR claim IS NULL)",
            )
            .bind(client_id)
            .bind(endpoint_id)
            .bind(event_id)
            .bind(now),
        )
        .await
    }
}
