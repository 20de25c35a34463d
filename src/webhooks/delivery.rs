//! The delivery worker: on every instance, routes the outbox's payment
//! events into deliveries (one instance at a time), claims due deliveries
//! with a lease (`SKIP LOCKED` on PostgreSQL, SQLite's one writer elsewhere), so
//! each attempt is made by one instance; renders a payment event's body at
//! its first attempt from the state its change committed (and keeps it, so
//! every retry sends the same bytes); signs it (Standard Webhooks 1.0) and
//! posts it through a client that follows no redirect, resolves through the
//! SSRF guard, gives up after 10 seconds and reads at most 1 KiB of the
//! answer; then records the attempt under its claim and schedules the next.

use super::guard::{check_url, Resolver};
use super::{signing, ATTEMPT_TIMEOUT, DISABLE_AFTER, LEASE, MAX_ANSWER_BYTES, RETRY_WAITS};
use crate::api::render::Related;
use crate::auth::password::ApiLoad;
use crate::domain::{format_datetime, micros, new_id, now_micros, EventType, PaymentStatus};
use crate::store::{AttemptOutcome, ClaimedDelivery, Store, StoreError};
use secrecy::SecretString;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// How often each instance looks for due deliveries: a first attempt goes
/// out within a second of its commit.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Most attempts one instance has in flight.
const MAX_IN_FLIGHT: usize = 64;
/// How often the API's requests in flight are read between two polls.
const LOAD_SAMPLE: Duration = Duration::from_millis(10);
/// The API is saturated while the real requests in flight (see
/// `PasswordHasher::api_request`), averaged over a poll's interval, are at
/// least this many per core: they are queueing (for a core, or for the
/// writer), not being answered as they come.
pub const SATURATED_IN_FLIGHT_PER_CORE: i64 = 4;
/// Most attempts in flight while the API is saturated: the deliveries make
/// way for it (decision 019), yet never stop.
const SATURATED_IN_FLIGHT: usize = 4;
/// Outbox rows routed into deliveries a transaction (a row holds the events
/// of one change, or of one group or batch of them): a round routes until
/// the outbox is empty, or [`ROUTE_TRANSACTIONS`] transactions, each short
/// enough for the writes beside it. While the API is saturated, routing
/// makes way as the attempts do: one row, and only in a round after a claim
/// that found fewer due deliveries than it had room for.
const ROUTE_ROWS: i64 = 4;
/// Most routing transactions a round.
const ROUTE_TRANSACTIONS: usize = 16;

/// What the worker needs.
pub struct Deliverer {
    store: Arc<dyn Store>,
    secret_key: SecretString,
    client: reqwest::Client,
    allow_private: bool,
    /// The API's requests in flight, which the worker makes way for.
    api: ApiLoad,
    in_flight: AtomicUsize,
    /// Whether the last claim found fewer due deliveries than it had room
    /// for: while the API is saturated, only then is more routed.
    short_of_deliveries: AtomicBool,
    /// Where attempts leave their outcome for [`record`]…
    outcomes: UnboundedSender<Outcome>,
    /// …which takes them from here (taken when the worker starts).
    recorded: Option<UnboundedReceiver<Outcome>>,
}

/// An attempt's outcome, and the attempt's span for what is logged of it.
type Outcome = (AttemptOutcome, tracing::Span);

/// The body of a payment event: `{"type","timestamp","data"}`.
#[derive(Serialize)]
struct Body<'a, T> {
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: String,
    data: T,
}

impl Deliverer {
    pub fn new(
        store: Arc<dyn Store>,
        secret_key: SecretString,
        allow_private: bool,
        api: ApiLoad,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(ATTEMPT_TIMEOUT)
            .connect_timeout(ATTEMPT_TIMEOUT)
            .dns_resolver(Arc::new(Resolver { allow_private }))
            .user_agent(concat!("Tally-Webhooks/", env!("CARGO_PKG_VERSION")))
            // No connection is kept: the host is resolved, and its address
            // checked, at each attempt (SPEC §12).
            .pool_max_idle_per_host(0)
            .build()?;
        let (outcomes, recorded) = tokio::sync::mpsc::unbounded_channel();
        Ok(Self {
            store,
            secret_key,
            client,
            allow_private,
            api,
            in_flight: AtomicUsize::new(0),
            short_of_deliveries: AtomicBool::new(true),
            outcomes,
            recorded: Some(recorded),
        })
    }

    /// The loop, for ever (the workers run it beside theirs): claims what
    /// is due every [`POLL_INTERVAL`], and records the attempts' outcomes as
    /// they come. While the API is saturated (see
    /// [`SATURATED_IN_FLIGHT_PER_CORE`]) it keeps only
    /// [`SATURATED_IN_FLIGHT`] attempts in flight: the deliveries wait, and
    /// catch up once the API is no longer saturated.
    pub async fn run(mut self) {
        let recorder = self
            .recorded
            .take()
            .map(|outcomes| record(self.store.clone(), outcomes));
        let this = Arc::new(self);
        let cores = std::thread::available_parallelism()
            .map_or(1, |n| i64::try_from(n.get()).unwrap_or(i64::MAX));
        let claims = async move {
            let mut samples = tokio::time::interval(LOAD_SAMPLE);
            samples.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let per_poll =
                i64::try_from(POLL_INTERVAL.as_millis() / LOAD_SAMPLE.as_millis()).unwrap_or(1);
            loop {
                // The requests in flight, read through the interval.
                let mut read = Vec::with_capacity(usize::try_from(per_poll).unwrap_or(0));
                for _ in 0..per_poll {
                    samples.tick().await;
                    read.push(this.api.in_flight());
                }
                if let Err(e) = this.clone().round(most_in_flight(&read, cores)).await {
                    warn_throttled("webhook delivery round", &e);
                }
            }
        };
        match recorder {
            Some(recorder) => tokio::join!(claims, recorder).0,
            None => claims.await,
        }
    }

    /// Routes the outbox's events into deliveries, then claims what is due
    /// (as many as there is room for, with at most `most` attempts in
    /// flight) and starts an attempt for each; how many.
    pub async fn round(self: Arc<Self>, most: usize) -> Result<usize, StoreError> {
        self.route(most <= SATURATED_IN_FLIGHT).await;
        let room = most.saturating_sub(self.in_flight.load(Ordering::Relaxed));
        if room == 0 {
            return Ok(0);
        }
        let now = now_micros();
        let claim = new_id();
        let claimed = self
            .store
            .claim_deliveries(
                now,
                now.saturating_add(micros(LEASE)),
                &claim,
                i64::try_from(room).unwrap_or(i64::MAX),
            )
            .await?;
        let n = claimed.len();
        self.short_of_deliveries.store(n < room, Ordering::Relaxed);
        for delivery in claimed {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            let this = self.clone();
            let claim = claim.clone();
            tokio::spawn(async move {
                this.attempt(delivery, &claim).await;
                this.in_flight.fetch_sub(1, Ordering::Relaxed);
            });
        }
        Ok(n)
    }

    /// Routes the outbox's events into deliveries (see [`ROUTE_ROWS`]).
    async fn route(&self, saturated: bool) {
        if saturated && !self.short_of_deliveries.load(Ordering::Relaxed) {
            return;
        }
        let (rows, transactions) = if saturated {
            (1, 1)
        } else {
            (ROUTE_ROWS, ROUTE_TRANSACTIONS)
        };
        for _ in 0..transactions {
            match self.store.route_events(rows).await {
                Ok(routed) if routed == usize::try_from(rows).unwrap_or(0) => {}
                Ok(_) => return,
                // Nothing is lost: the rows stay for the next round.
                Err(e) => return warn_throttled("webhook routing", &e),
            }
        }
    }

    /// One attempt, recorded whatever it came to.
    #[tracing::instrument(skip_all, fields(delivery = %d.id, attempt = d.attempts))]
    async fn attempt(&self, d: ClaimedDelivery, claim: &str) {
        let mut rendered = None;
        let (answer, error) = match self.send(&d, &mut rendered).await {
            Ok(status) if (200..300).contains(&status) => (Some(status), None),
            Ok(status) => (Some(status), Some(format!("answered {status}"))),
            Err(e) => (None, Some(format!("{e:#}"))),
        };
        let delivered = error.is_none();
        let at = now_micros();
        let retry_at = (!delivered)
            .then(|| retry_wait(d.attempts))
            .flatten()
            .map(|wait| at.saturating_add(micros(wait)));
        let outcome = AttemptOutcome {
            delivery_id: d.id.clone(),
            endpoint_id: d.endpoint_id.clone(),
            claim: claim.to_owned(),
            attempt: d.attempts,
            at,
            answer: answer.map(i64::from),
            error: error.map(|e| e.chars().take(500).collect()),
            delivered,
            retry_at,
            disable_if_failing_since: at.saturating_sub(micros(DISABLE_AFTER)),
            rendered,
        };
        // Recorded with the outcomes of the attempts that end beside it, in
        // one write (see `record`); the claim's lease outlives the wait.
        let _ = self.outcomes.send((outcome, tracing::Span::current()));
    }

    /// Renders (first attempt: into `rendered`, which the attempt's record
    /// keeps), signs and posts the delivery; the answer's status code.
    async fn send(
        &self,
        d: &ClaimedDelivery,
        rendered: &mut Option<String>,
    ) -> anyhow::Result<u16> {
        let body = match &d.body {
            Some(body) => body.clone(),
            None => rendered.insert(self.render(d).await?).clone(),
        };
        let url = url::Url::parse(&d.url)?;
        check_url(&url, self.allow_private)?;
        let mut secrets = vec![signing::open(
            &self.secret_key,
            &d.endpoint_id,
            &d.secret_sealed,
        )?];
        if let (Some(previous), Some(until)) = (&d.previous_secret_sealed, d.previous_until) {
            if until > now_micros() {
                secrets.push(signing::open(&self.secret_key, &d.endpoint_id, previous)?);
            }
        }
        let timestamp = now_micros() / 1_000_000;
        let signature = signing::signature_header(&secrets, &d.event_id, timestamp, &body)?;
        let mut answer = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", &d.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await?;
        let status = answer.status().as_u16();
        // No more than 1 KiB of the answer is read; the rest is dropped with
        // the connection.
        let mut read = 0;
        while read < MAX_ANSWER_BYTES {
            match answer.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        Ok(status)
    }

    /// A payment event's body: the payment as `GET /payments/:id` renders
    /// it, in the state its change committed.
    async fn render(&self, d: &ClaimedDelivery) -> anyhow::Result<String> {
        let payment_id = d
            .payment_id
            .clone()
            .ok_or_else(|| anyhow::anyhow!("the event has neither body nor payment"))?;
        let mut payment = self
            .store
            .find_payments(std::slice::from_ref(&payment_id))
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the event's payment {payment_id} does not exist"))?;
        payment.target_user_id = d.target_user_id.clone();
        if d.kind == EventType::PaymentCreated.as_str() {
            // A payment is made pending, and its creation's event shows it
            // as the POST answered it, even when a pay due at once was
            // settled in the same transaction (its own event says so).
            payment.status = PaymentStatus::Pending;
            payment.date_completed = None;
            payment.refund_payment_id = None;
        } else {
            if let Some(status) = d.status.as_deref().and_then(PaymentStatus::parse) {
                payment.status = status;
            }
            payment.date_completed = d.date_completed;
            payment.refund_payment_id = d.refund_payment_id.clone();
        }
        let related = Related::load(self.store.as_ref(), std::slice::from_ref(&payment)).await?;
        Ok(serde_json::to_string(&Body {
            kind: &d.kind,
            timestamp: format_datetime(d.occurred_at),
            data: related.view(&payment),
        })?)
    }
}

/// The most attempts to keep in flight after a poll's interval in which the
/// API's requests in flight were `read`, on `cores` cores: a few while it
/// was saturated (they averaged [`SATURATED_IN_FLIGHT_PER_CORE`] a core or
/// more), else [`MAX_IN_FLIGHT`].
fn most_in_flight(read: &[i64], cores: i64) -> usize {
    let sum = read.iter().fold(0_i64, |sum, n| sum.saturating_add(*n));
    let samples = i64::try_from(read.len()).unwrap_or(i64::MAX);
    let saturated_at = SATURATED_IN_FLIGHT_PER_CORE
        .saturating_mul(cores.max(1))
        .saturating_mul(samples);
    if samples > 0 && sum >= saturated_at {
        SATURATED_IN_FLIGHT
    } else {
        MAX_IN_FLIGHT
    }
}

/// Records the attempts' outcomes as they come, those that came together in
/// one write: one transaction for many attempts, not one each.
async fn record(store: Arc<dyn Store>, mut outcomes: UnboundedReceiver<Outcome>) {
    let mut batch = Vec::with_capacity(MAX_IN_FLIGHT);
    while outcomes.recv_many(&mut batch, MAX_IN_FLIGHT).await > 0 {
        let (records, spans): (Vec<AttemptOutcome>, Vec<tracing::Span>) = batch.drain(..).unzip();
        match store.finish_attempts(&records).await {
            Ok(held) => {
                for (held, span) in held.into_iter().zip(spans) {
                    if !held {
                        span.in_scope(|| tracing::warn!("a webhook attempt outlived its claim"));
                    }
                }
            }
            // Unrecorded, the deliveries go again when their lease lapses.
            Err(e) => warn_throttled("cannot record webhook attempts", &e),
        }
    }
}

/// Logs a failure of the worker's, once in a while when it repeats.
fn warn_throttled(what: &str, e: &StoreError) {
    let cause = format!("{what}: {e}");
    if let Some(suppressed) = crate::log_throttle::admit(&cause) {
        tracing::warn!(error = %e, suppressed, "{what} failed");
    }
}

/// The wait before the retry that follows failed attempt `attempt` (1 for
/// the first), within ±50% of the schedule's; `None` after the last.
pub fn retry_wait(attempt: i64) -> Option<Duration> {
    let index = usize::try_from(attempt.checked_sub(1)?).ok()?;
    let base = RETRY_WAITS.get(index)?;
    Some(base.mul_f64(rand::random_range(0.5..=1.5)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_make_way_only_while_the_api_requests_queue() {
        // Two cores: saturated from 8 requests in flight on average.
        let quiet = [0, 1, 0, 2, 0];
        let steady = [3, 5, 7, 4, 6];
        let queueing = [30, 28, 31, 0, 32];
        assert_eq!(most_in_flight(&quiet, 2), MAX_IN_FLIGHT);
        assert_eq!(most_in_flight(&steady, 2), MAX_IN_FLIGHT);
        assert_eq!(most_in_flight(&queueing, 2), SATURATED_IN_FLIGHT);
        assert_eq!(most_in_flight(&[8; 25], 2), SATURATED_IN_FLIGHT);
        assert_eq!(most_in_flight(&[7; 25], 2), MAX_IN_FLIGHT);
        // More cores take more requests in flight to saturate.
        assert_eq!(most_in_flight(&queueing, 16), MAX_IN_FLIGHT);
        assert_eq!(most_in_flight(&[], 2), MAX_IN_FLIGHT);
        const { assert!(SATURATED_IN_FLIGHT < MAX_IN_FLIGHT) };
    }

    #[test]
    fn retries_follow_the_schedule_within_half_either_way_then_stop() {
        for (attempt, base) in (1_i64..).zip(RETRY_WAITS.iter()) {
            for _ in 0..50 {
                let wait = retry_wait(attempt);
                assert!(wait.is_some_and(|w| w >= base.mul_f64(0.5) && w <= base.mul_f64(1.5)));
            }
        }
        assert_eq!(retry_wait(8), None);
        assert_eq!(retry_wait(0), None);
    }
}
