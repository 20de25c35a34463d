//! Argon2id password hashes (SPEC §9), computed on a few threads of their own,
//! never on the async workers, through the `argon2` crate's own API (its PHC
//! parsing and its constant-time comparison).
//!
//! Hashing is fair and cannot be starved:
//! - Its queue is bounded ([`PasswordHasher::reserve`]): past it a sign-in or
//!   sign-up is answered at once ([`Busy`]) instead of waiting behind a flood.
//! - A job whose requester has gone (a closed connection, see [`Requester`])
//!   is dropped, not computed.
//! - It always gets a share of the CPU. The threads run at normal priority, so
//!   anything else on the machine (other processes included) shares the CPU
//!   with them fairly. While the API is busy with real requests
//!   (authenticated, their body arrived: see [`PasswordHasher::api_request`]),
//!   each thread rests after a hash [`REST_PER_HASH`] times the CPU time the
//!   hash took, so the API keeps most of the CPU and hashing still goes on at
//!   a steady pace. Anonymous clients, and requests whose body is still
//!   arriving, cannot slow it. The choice and its measurements:
//!   docs/decisions/006-password-hashing-threads.md.

use crate::domain::Password;
use argon2::password_hash::{rand_core::OsRng, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Params, PasswordHasher as _, PasswordVerifier as _, Version};
use prometheus::{IntCounter, IntGauge, Registry};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// OWASP's recommended argon2id parameters: 19 MiB, 2 passes, 1 lane.
fn params() -> Params {
    Params::new(19 * 1024, 2, 1, None).unwrap_or_default()
}

fn argon2() -> Argon2<'static> {
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params())
}

/// A real hash of a random password, checked when the user is unknown so that
/// the answer takes as long as for a known user.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        // Made once, on the first hashing thread that needs it.
        hash_phc(crate::domain::new_id().as_bytes()).unwrap_or_default()
    })
}

/// Hashes `password` into a PHC string.
fn hash_phc(password: &[u8]) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(argon2()
        .hash_password(password, &salt)
        .map_err(|e| anyhow::anyhow!("hashing failed: {e}"))?
        .to_string())
}

/// Checks `password` against a stored PHC string, with the algorithm, version
/// and parameters the string names.
fn verify_phc(stored: &str, password: &[u8]) -> bool {
    PasswordHash::new(stored)
        .is_ok_and(|parsed| Argon2::default().verify_password(password, &parsed).is_ok())
}

/// The hashing queue is full: try again in a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many passwords are being checked right now; try again in a few seconds")]
pub struct Busy;

impl Busy {
    /// What a busy answer tells the client to wait (`Retry-After`).
    pub const RETRY_AFTER_SECS: u64 = 2;
}

#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error(transparent)]
    Busy(#[from] Busy),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

/// The connection a request came on, kept with the connection's data for as
/// long as the connection lasts (see `web::remember_connection`).
pub struct Connection(Arc<OwnedFd>);

impl Connection {
    pub fn new(socket: OwnedFd) -> Self {
        Self(Arc::new(socket))
    }

    /// The one waiting on this connection for a password job.
    pub fn requester(&self) -> Requester {
        Requester {
            connection: Some(Arc::downgrade(&self.0)),
        }
    }
}

/// Who waits for a password job. Before the job is hashed its connection is
/// looked at: one that ended or that the client closed means nobody waits any
/// more, and the job is dropped (SPEC §9). The HTTP server does not cancel a
/// request whose client left, so the queue has to look for itself.
#[derive(Clone, Default)]
pub struct Requester {
    /// `None`: an operator's command, which never leaves.
    connection: Option<Weak<OwnedFd>>,
}

impl Requester {
    fn gone(&self) -> bool {
        let Some(connection) = &self.connection else {
            return false;
        };
        let Some(socket) = connection.upgrade() else {
            return true;
        };
        // A peek that reads nothing at once: the client closed its side
        // (nothing more will come, and it has stopped waiting); no data yet
        // means it is still there.
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        match rustix::net::recv(&*socket, &mut [0u8; 1][..], flags) {
            Ok((0, _)) => true,
            Ok(_) => false,
            Err(error) => error != rustix::io::Errno::AGAIN && error != rustix::io::Errno::INTR,
        }
    }
}

enum Work {
    Hash {
        password: String,
        answer: oneshot::Sender<anyhow::Result<String>>,
    },
    Verify {
        /// `None`: no such account, check the dummy hash.
        stored: Option<String>,
        candidate: String,
        answer: oneshot::Sender<bool>,
    },
}

impl Work {
    /// The requester is gone: nobody would read the answer.
    fn abandoned(&self) -> bool {
        match self {
            Self::Hash { answer, .. } => answer.is_closed(),
            Self::Verify { answer, .. } => answer.is_closed(),
        }
    }
}

/// A job in the queue, holding its place until it is done or dropped.
struct Job {
    work: Work,
    requester: Requester,
    /// When it joined the queue: it waits for a hashing thread's rest only
    /// until [`JOB_WAIT_TARGET`] after this.
    queued_at: Instant,
    /// Given back when the job is done or dropped.
    _place: Place,
}

/// Jobs queued or being hashed, and how many may be.
struct Queue {
    taken: AtomicUsize,
    capacity: usize,
    metrics: HashingMetrics,
}

/// What the hashing did, for `/metrics`.
#[derive(Clone)]
struct HashingMetrics {
    /// Hashes computed (hashes made and passwords checked).
    computed: IntCounter,
    /// Jobs dropped unhashed because their requester had gone.
    abandoned: IntCounter,
    /// Jobs refused because the queue was full.
    refused: IntCounter,
    /// Real API requests in flight (see [`PasswordHasher::api_request`]).
    api_in_flight: IntGauge,
}

impl HashingMetrics {
    // The names are constants that prometheus accepts: it refuses only
    // malformed names.
    #[allow(clippy::expect_used)]
    fn new() -> Self {
        let counter = |name: &str, help: &str| {
            IntCounter::new(name, help).expect("a well-formed metric name")
        };
        Self {
            computed: counter("tally_password_hashes_total", "Password hashes computed"),
            abandoned: counter(
                "tally_password_jobs_abandoned_total",
                "Password jobs dropped unhashed because their requester had gone",
            ),
            refused: counter(
                "tally_password_jobs_refused_total",
                "Password jobs refused because the hashing queue was full",
            ),
            api_in_flight: IntGauge::new(
                "tally_api_requests_in_flight",
                "Authenticated API requests whose body has arrived, not yet answered",
            )
            .expect("a well-formed metric name"),
        }
    }
}

/// One place in the queue, given back when dropped.
struct Place(Arc<Queue>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A place in the hashing queue, taken before the work that needs a hash
/// starts (a sign-in's throttle counts the attempt only once it holds one).
pub struct Reservation {
    place: Place,
    jobs: mpsc::Sender<Job>,
}

impl Reservation {
    fn send(self, requester: &Requester, work: Work) -> anyhow::Result<()> {
        self.jobs
            .send(Job {
                work,
                requester: requester.clone(),
                queued_at: Instant::now(),
                _place: self.place,
            })
            .map_err(|_| anyhow::anyhow!("the password hashing threads are gone"))
    }

    pub async fn hash(self, requester: &Requester, password: &Password) -> anyhow::Result<String> {
        let (answer, answered) = oneshot::channel();
        self.send(
            requester,
            Work::Hash {
                password: password.expose().to_owned(),
                answer,
            },
        )?;
        answered
            .await
            .map_err(|_| anyhow::anyhow!("a password hashing thread failed"))?
    }

    /// Checks a password against a stored hash, or against a dummy hash when
    /// there is no account, taking the same time either way.
    pub async fn verify(
        self,
        requester: &Requester,
        stored: Option<&str>,
        candidate: &str,
    ) -> bool {
        let known = stored.is_some();
        let (answer, answered) = oneshot::channel();
        let work = Work::Verify {
            stored: stored.map(str::to_owned),
            candidate: candidate.to_owned(),
            answer,
        };
        if self.send(requester, work).is_err() {
            return false;
        }
        let matched = answered.await.unwrap_or(false);
        known && matched
    }
}

#[derive(Clone)]
pub struct PasswordHasher {
    jobs: mpsc::Sender<Job>,
    queue: Arc<Queue>,
    api: Arc<ApiActivity>,
}

/// The real API requests, which the hashing threads make way for.
struct ApiActivity {
    /// Those in flight (also a gauge of `/metrics`).
    in_flight: IntGauge,
    /// When the last one ended, in microseconds since `epoch`.
    last_ended: AtomicU64,
    epoch: Instant,
}

impl ApiActivity {
    /// The API is busy while a real request is in flight, and for a moment
    /// after one ended: a loaded API is idle between two requests now and then,
    /// and a rest cut short at each such moment is no rest.
    fn busy(&self, now: Instant) -> bool {
        if self.in_flight.get() > 0 {
            return true;
        }
        let last_ended = Duration::from_micros(self.last_ended.load(Ordering::Relaxed));
        now.saturating_duration_since(self.epoch + last_ended) < API_QUIET_AFTER
    }
}

/// The real API requests in flight in this process (see
/// [`PasswordHasher::api_request`]), whichever instance answers them, as
/// other work that makes way for the API reads them. One process is one
/// instance in production; where one process runs several (the bench, the
/// tests), they share the cores, and make way together.
#[derive(Clone)]
pub struct ApiLoad(());

/// [`ApiLoad`]'s count.
static PROCESS_API_IN_FLIGHT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

impl ApiLoad {
    /// How many real API requests are in flight in this process now.
    pub fn in_flight(&self) -> i64 {
        PROCESS_API_IN_FLIGHT.load(Ordering::Relaxed)
    }
}

/// How long after its last real request the API counts as quiet.
const API_QUIET_AFTER: Duration = Duration::from_millis(50);

/// A real API request in flight (see [`PasswordHasher::api_request`]); it
/// counts until dropped, also when its request is cancelled.
pub struct ApiRequest(Arc<ApiActivity>);

impl Drop for ApiRequest {
    fn drop(&mut self) {
        let activity = &self.0;
        let since_epoch = activity.epoch.elapsed().as_micros();
        activity.last_ended.store(
            u64::try_from(since_epoch).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        activity.in_flight.dec();
        PROCESS_API_IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// While the API is busy with real requests, a hashing thread rests after a
/// hash before the next one: `REST_PER_HASH` times the CPU time the hash took
/// (never longer than `LONGEST_REST`) while the job it holds is young, but only
/// until that job has waited [`JOB_WAIT_TARGET`], and always at least
/// `SHORTEST_REST_PER_HASH` times the hash's CPU time. So under steady
/// sign-ins hashing goes as slowly as the wait target allows (the API keeps
/// the most CPU a prompt sign-in leaves it), and under a flood of them it
/// takes at most an eleventh of a core. It starts again as soon as the API goes
/// quiet. The choice, by measurement:
/// docs/decisions/006-password-hashing-threads.md.
pub const REST_PER_HASH: u32 = 16;
const SHORTEST_REST_PER_HASH: u32 = 10;
const LONGEST_REST: Duration = Duration::from_secs(1);
/// How long a job may wait for a thread's rest: with the hash itself and the
/// two page loads, a sign-in under a saturated API answers within a second.
pub const JOB_WAIT_TARGET: Duration = Duration::from_millis(450);
/// How often a resting thread looks whether the API went quiet.
const REST_POLL: Duration = Duration::from_millis(5);
/// Jobs that may wait for each hashing thread. At a few tens of milliseconds a
/// hash, the last of them is answered within a second or two.
pub const QUEUE_PER_THREAD: usize = 16;

/// One hashing thread's rest between hashes (see [`REST_PER_HASH`]).
#[derive(Default)]
struct Pace {
    last_hash: Option<LastHash>,
}

#[derive(Clone, Copy)]
struct LastHash {
    /// The thread CPU time it took (not the time it waited for a CPU: that was
    /// the API's already).
    cpu: Duration,
    ended: Instant,
}

impl Pace {
    /// A hash ended at `ended`, having taken `cpu` of this thread's CPU time.
    fn hashed(&mut self, cpu: Duration, ended: Instant) {
        self.last_hash = Some(LastHash { cpu, ended });
    }

    /// How much longer to rest before hashing a job queued at `queued_at`:
    /// nothing when the API is quiet or the rest is over.
    fn rest_left(&self, now: Instant, api_busy: bool, queued_at: Instant) -> Option<Duration> {
        let LastHash { cpu, ended } = self.last_hash?;
        let shortest = ended + cpu.saturating_mul(SHORTEST_REST_PER_HASH).min(LONGEST_REST);
        let longest = ended + cpu.saturating_mul(REST_PER_HASH).min(LONGEST_REST);
        let until = longest.min(queued_at + JOB_WAIT_TARGET).max(shortest);
        let left = until.checked_duration_since(now)?;
        (api_busy && !left.is_zero()).then_some(left)
    }
}

impl PasswordHasher {
    /// Starts `threads` hashing threads, with [`QUEUE_PER_THREAD`] places each
    /// in the queue. The threads end when the last clone of the hasher is
    /// dropped.
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        Self::with_queue(threads, threads * QUEUE_PER_THREAD)
    }

    /// Starts `threads` hashing threads, with a queue of `capacity` jobs
    /// (queued or being hashed).
    pub fn with_queue(threads: usize, capacity: usize) -> Self {
        let (jobs, received) = mpsc::channel::<Job>();
        let received = Arc::new(Mutex::new(received));
        let metrics = HashingMetrics::new();
        let api = Arc::new(ApiActivity {
            in_flight: metrics.api_in_flight.clone(),
            last_ended: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        for n in 0..threads.max(1) {
            let (received, api, metrics) = (received.clone(), api.clone(), metrics.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("tally-argon2-{n}"))
                .spawn(move || run_hashing_thread(&received, &api, &metrics));
            if let Err(error) = spawned {
                tracing::error!(%error, "cannot start a password hashing thread");
            }
        }
        let queue = Arc::new(Queue {
            taken: AtomicUsize::new(0),
            capacity: capacity.max(1),
            metrics,
        });
        Self { jobs, queue, api }
    }

    /// The hashing threads right for this machine: half its cores, at least one.
    pub fn threads_for_this_machine() -> usize {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
    }

    /// Takes a place in the queue, or says it is full.
    pub fn reserve(&self) -> Result<Reservation, Busy> {
        let taken = self.queue.taken.fetch_add(1, Ordering::AcqRel);
        let place = Place(self.queue.clone());
        if taken >= self.queue.capacity {
            self.queue.metrics.refused.inc();
            return Err(Busy);
        }
        Ok(Reservation {
            place,
            jobs: self.jobs.clone(),
        })
    }

    pub async fn hash(
        &self,
        requester: &Requester,
        password: &Password,
    ) -> Result<String, HashError> {
        Ok(self.reserve()?.hash(requester, password).await?)
    }

    /// Counts a real API request (authenticated, its body arrived) as in
    /// flight until the answer is dropped: while any is, the hashing threads
    /// rest between hashes.
    pub fn api_request(&self) -> ApiRequest {
        self.api.in_flight.inc();
        PROCESS_API_IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        ApiRequest(self.api.clone())
    }

    /// The real API requests in flight, for other work that makes way for
    /// the API (the webhook delivery worker).
    pub fn api_load(&self) -> ApiLoad {
        ApiLoad(())
    }

    /// Jobs dropped unhashed so far because their requester had gone.
    pub fn abandoned_jobs(&self) -> u64 {
        self.queue.metrics.abandoned.get()
    }

    /// Adds the hashing's counters to `/metrics`.
    pub fn register_metrics(&self, registry: &Registry) -> prometheus::Result<()> {
        let metrics = &self.queue.metrics;
        for counter in [&metrics.computed, &metrics.abandoned, &metrics.refused] {
            registry.register(Box::new(counter.clone()))?;
        }
        registry.register(Box::new(metrics.api_in_flight.clone()))
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let spent = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(spent.tv_sec).unwrap_or(0),
        u32::try_from(spent.tv_nsec).unwrap_or(0),
    )
}

/// A hashing thread: takes jobs, rests ([`Pace`]), hashes, and answers.
fn run_hashing_thread(
    received: &Mutex<mpsc::Receiver<Job>>,
    api: &ApiActivity,
    metrics: &HashingMetrics,
) {
    let mut pace = Pace::default();
    loop {
        let job = match received.lock() {
            Ok(received) => received.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        while let Some(left) = {
            let now = Instant::now();
            pace.rest_left(now, api.busy(now), job.queued_at)
        } {
            std::thread::sleep(left.min(REST_POLL));
        }
        let Job {
            work,
            requester,
            _place: place,
            ..
        } = job;
        if work.abandoned() || requester.gone() {
            metrics.abandoned.inc();
            continue;
        }
        metrics.computed.inc();
        let started = thread_cpu_time();
        // The place is given back before the answer goes out, so that the
        // requester's next job finds it free.
        match work {
            Work::Hash { password, answer } => {
                let hashed = hash_phc(password.as_bytes());
                drop(place);
                // The asker may have gone since: nothing to do.
                let _ = answer.send(hashed);
            }
            Work::Verify {
                stored,
                candidate,
                answer,
            } => {
                let stored = stored.as_deref().unwrap_or_else(|| dummy_hash());
                let matched = verify_phc(stored, candidate.as_bytes());
                drop(place);
                let _ = answer.send(matched);
            }
        }
        pace.hashed(thread_cpu_time().saturating_sub(started), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_rests_after_a_hash_only_while_the_api_is_busy() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut pace = Pace::default();
        assert_eq!(pace.rest_left(start, true, start), None, "no hash yet");
        pace.hashed(ms(20), start + ms(20));
        let after = start + ms(20);
        let rest = ms(20) * REST_PER_HASH;
        assert!(rest < JOB_WAIT_TARGET);
        assert_eq!(pace.rest_left(after, true, after), Some(rest));
        assert_eq!(
            pace.rest_left(after + rest - ms(5), true, after),
            Some(ms(5))
        );
        assert_eq!(
            pace.rest_left(after, false, after),
            None,
            "the API is quiet"
        );
        assert_eq!(pace.rest_left(after + rest, true, after), None, "rested");
    }

    #[test]
    fn a_job_waits_for_a_rest_until_its_wait_target_but_the_rest_has_a_floor() {
        let start = Instant::now() + Duration::from_secs(5);
        let ms = Duration::from_millis;
        let mut pace = Pace::default();
        // The rest follows the CPU time a hash took, not the time it waited
        // for a CPU (which the API had).
        pace.hashed(ms(30), start);
        assert!(ms(30) * REST_PER_HASH > JOB_WAIT_TARGET);
        let queued_before = start - ms(100);
        assert_eq!(
            pace.rest_left(start, true, queued_before),
            Some(JOB_WAIT_TARGET - ms(100)),
            "a job that has waited 100 ms rests until its target"
        );
        assert_eq!(
            pace.rest_left(start, true, start - ms(2000)),
            Some(ms(30) * SHORTEST_REST_PER_HASH),
            "a job past its target still lets the API have the shortest rest"
        );
        // A rest is at most a second.
        pace.hashed(ms(400), start);
        assert_eq!(
            pace.rest_left(start, true, start - ms(2000)),
            Some(LONGEST_REST)
        );
    }

    #[tokio::test]
    async fn api_requests_count_while_in_flight() {
        let hasher = PasswordHasher::new(1);
        let in_flight = || hasher.api.in_flight.get();
        let first = hasher.api_request();
        let second = hasher.api_request();
        assert_eq!(in_flight(), 2);
        drop(first);
        assert_eq!(in_flight(), 1);
        drop(second);
        assert_eq!(in_flight(), 0);
        // Busy for a moment after the last one ended, then quiet.
        let ended = Instant::now();
        assert!(hasher.api.busy(ended));
        assert!(!hasher
            .api
            .busy(ended + API_QUIET_AFTER + Duration::from_millis(5)));
    }

    #[tokio::test]
    async fn a_hash_verifies_only_its_own_password() -> anyhow::Result<()> {
        let hasher = PasswordHasher::new(2);
        let nobody = Requester::default();
        let hash = hasher
            .hash(&nobody, &Password::parse("correct horse")?)
            .await?;
        assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"));
        let verify = |stored: Option<&str>, candidate: &'static str| {
            let reservation = hasher.reserve();
            let stored = stored.map(str::to_owned);
            async move {
                match reservation {
                    Ok(r) => {
                        r.verify(&Requester::default(), stored.as_deref(), candidate)
                            .await
                    }
                    Err(Busy) => false,
                }
            }
        };
        assert!(verify(Some(&hash), "correct horse").await);
        assert!(!verify(Some(&hash), "wrong horse").await);
        assert!(!verify(None, "correct horse").await);
        assert!(!verify(Some("$argon2id$not a hash"), "correct horse").await);
        Ok(())
    }

    #[tokio::test]
    async fn hashes_made_by_the_argon2_crate_with_other_parameters_verify() -> anyhow::Result<()> {
        let salt = SaltString::generate(&mut OsRng);
        let params = Params::new(8 * 1024, 3, 1, None).unwrap_or_default();
        let stored = Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password(b"battery staple", &salt)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .to_string();
        let hasher = PasswordHasher::new(1);
        let nobody = Requester::default();
        for (candidate, right) in [("battery staple", true), ("battery stapler", false)] {
            let reservation = hasher.reserve()?;
            assert_eq!(
                reservation.verify(&nobody, Some(&stored), candidate).await,
                right
            );
        }
        Ok(())
    }

    #[tokio::test]
    async fn past_its_capacity_the_queue_refuses_until_a_place_is_free() {
        let hasher = PasswordHasher::with_queue(1, 2);
        let first = hasher.reserve();
        let second = hasher.reserve();
        assert!(first.is_ok() && second.is_ok());
        assert!(matches!(hasher.reserve(), Err(Busy)));
        drop(first);
        assert!(hasher.reserve().is_ok(), "a place was given back");
    }

    #[tokio::test]
    async fn a_job_whose_requester_has_gone_is_not_hashed() -> anyhow::Result<()> {
        let hasher = PasswordHasher::with_queue(1, 8);
        // Keep the one thread busy, then queue verifications and abandon them.
        let password = Password::parse("correct horse")?;
        let nobody = Requester::default();
        let busy = hasher.reserve()?.hash(&nobody, &password);
        let abandoned: Vec<_> = (0..3)
            .map(|_| {
                let reservation = hasher.reserve();
                async move {
                    if let Ok(r) = reservation {
                        r.verify(&Requester::default(), None, "x").await;
                    }
                }
            })
            .collect();
        let (hashed, _) = tokio::join!(busy, async {
            // Each is polled once (so it is queued), then dropped.
            for job in abandoned {
                let _ = tokio::time::timeout(Duration::ZERO, job).await;
            }
        });
        hashed?;
        // A last job goes through the queue after the abandoned ones.
        hasher.hash(&nobody, &password).await?;
        assert_eq!(hasher.abandoned_jobs(), 3);
        Ok(())
    }
}
