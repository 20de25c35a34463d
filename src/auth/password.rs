//! Argon2id password hashes, computed on a few dedicated threads (not tokio's
//! blocking pool) whose arithmetic runs only when nothing else wants the CPU
//! (SCHED_IDLE, see `scheduling`), so sign-in storms cannot starve the API:
//! the async workers never run a hash, and any of them that wakes takes the
//! CPU from one. Each thread keeps its 19 MiB of argon2 memory and reuses it
//! for every hash.
//!
//! Only argon2's arithmetic runs at idle priority ([`IdleArgon2`]). An idle
//! thread that is preempted while it holds a lock waits for an idle CPU
//! before it lets go, and under load that is hundreds of milliseconds: when
//! the hashing threads themselves took jobs from the API's channel and woke
//! the API's tasks, an actix worker that queued a sign-in or was handed an
//! answer now and then stalled behind one, with every request on it
//! (`GET /v1/me` on PostgreSQL beside sign-ins: single requests of 250-460 ms,
//! p99 54-204 ms). So each hashing thread runs at normal priority, takes the
//! jobs, answers and rests, and hands the arithmetic to an idle helper of its
//! own, which shares a lock with no one else and neither allocates nor frees.
//!
//! Idle priority alone is not enough on a virtual machine: a core kept busy
//! hashing is charged by the hypervisor all the same, and the API pays for it
//! in stolen time (a spinning SCHED_IDLE thread beside `/v1/me` on one core
//! took its p99 from 50 ms to 250 to 390 ms here). So while API requests are in
//! flight, each thread also rests between hashes ([`Pace`]): hashing then takes
//! at most a tenth of the time, and a sign-in waits at most a second more.

use crate::domain::Password;
use argon2::password_hash::{rand_core::OsRng, Output, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// OWASP's recommended argon2id parameters: 19 MiB, 2 passes, 1 lane.
fn params() -> Params {
    Params::new(19 * 1024, 2, 1, None).unwrap_or_default()
}

/// A real hash of a random password, checked when the user is unknown so that
/// the answer takes as long as for a known user.
fn dummy_hash(idle: &IdleArgon2) -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        // Made once, on the first hashing thread that needs it.
        hash_with(idle, crate::domain::new_id().as_bytes()).unwrap_or_default()
    })
}

/// Hashes `password` into a PHC string, on `idle`.
fn hash_with(idle: &IdleArgon2, password: &[u8]) -> anyhow::Result<String> {
    let params = params();
    let salt = SaltString::generate(&mut OsRng);
    let mut salt_bytes = [0u8; 64];
    let salt_bytes = salt
        .decode_b64(&mut salt_bytes)
        .map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
    let output = Output::init_with(Params::DEFAULT_OUTPUT_LEN, |out| {
        idle.compute(&argon2, password, salt_bytes, out)
    })
    .map_err(|e| anyhow::anyhow!("hashing failed: {e}"))?;
    let hash = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: (&params)
            .try_into()
            .map_err(|e| anyhow::anyhow!("parameters: {e}"))?,
        salt: Some(salt.as_salt()),
        hash: Some(output),
    };
    Ok(hash.to_string())
}

/// Checks `password` against a stored PHC string, with the algorithm, version
/// and parameters the string names, on `idle`.
fn verify_with(idle: &IdleArgon2, stored: &str, password: &[u8]) -> bool {
    let Ok(parsed) = PasswordHash::new(stored) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let Ok(algorithm) = Algorithm::try_from(parsed.algorithm) else {
        return false;
    };
    let Ok(version) = parsed
        .version
        .map_or(Ok(Version::default()), Version::try_from)
    else {
        return false;
    };
    let Ok(params) = Params::try_from(&parsed) else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt_bytes) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let argon2 = Argon2::new(algorithm, version, params);
    Output::init_with(expected.len(), |out| {
        idle.compute(&argon2, password, salt_bytes, out)
    })
    // `Output` compares in constant time.
    .is_ok_and(|computed| computed == expected)
}

/// A hashing thread's helper, which runs argon2 at idle priority (see the
/// module's comment). Its thread ends when this is dropped.
struct IdleArgon2 {
    handoff: Arc<Handoff>,
}

/// What a hashing thread and its helper share, and nothing else does.
#[derive(Default)]
struct Handoff {
    turn: Mutex<Turn>,
    changed: Condvar,
}

/// One computation: set up by the hashing thread, which also allocates and
/// frees everything in it, so that the helper never takes the allocator's
/// locks.
#[derive(Default)]
struct Turn {
    /// The computation asked for; `None` when there is none.
    argon2: Option<Argon2<'static>>,
    password: Vec<u8>,
    salt: Vec<u8>,
    output: Vec<u8>,
    /// Argon2's working memory, grown to what the parameters need, reused.
    memory: Vec<Block>,
    /// The helper's answer to `argon2`.
    outcome: Option<Result<(), argon2::Error>>,
    /// The hashing thread is done with the helper.
    closed: bool,
    /// The helper's thread ended (it panicked).
    helper_gone: bool,
}

impl Handoff {
    fn lock(&self) -> MutexGuard<'_, Turn> {
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, turn: MutexGuard<'a, Turn>) -> MutexGuard<'a, Turn> {
        self.changed
            .wait(turn)
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl IdleArgon2 {
    fn start(name: String) -> std::io::Result<Self> {
        let handoff = Arc::new(Handoff::default());
        let shared = handoff.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || run_idle_helper(&shared))?;
        Ok(Self { handoff })
    }

    /// Runs `argon2` over `password` and `salt` into `out` on the helper,
    /// and waits for it.
    fn compute(
        &self,
        argon2: &Argon2<'static>,
        password: &[u8],
        salt: &[u8],
        out: &mut [u8],
    ) -> Result<(), argon2::password_hash::Error> {
        let handoff = &self.handoff;
        let mut turn = handoff.lock();
        let blocks = argon2.params().block_count();
        if turn.memory.len() < blocks {
            turn.memory.resize(blocks, Block::default());
        }
        turn.password.clear();
        turn.password.extend_from_slice(password);
        turn.salt.clear();
        turn.salt.extend_from_slice(salt);
        turn.output.clear();
        turn.output.resize(out.len(), 0);
        turn.outcome = None;
        turn.argon2 = Some(argon2.clone());
        handoff.changed.notify_all();
        while turn.outcome.is_none() && !turn.helper_gone {
            turn = handoff.wait(turn);
        }
        turn.argon2 = None;
        turn.password.fill(0);
        let outcome = turn.outcome.take();
        match outcome {
            Some(Ok(())) => {
                out.copy_from_slice(&turn.output);
                Ok(())
            }
            _ => Err(argon2::password_hash::Error::Crypto),
        }
    }
}

impl Drop for IdleArgon2 {
    fn drop(&mut self) {
        self.handoff.lock().closed = true;
        self.handoff.changed.notify_all();
    }
}

/// The helper's thread: argon2 whenever its hashing thread asks.
fn run_idle_helper(handoff: &Handoff) {
    /// Tells the hashing thread when the helper is gone, also by a panic.
    struct Gone<'a>(&'a Handoff);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            self.0.lock().helper_gone = true;
            self.0.changed.notify_all();
        }
    }
    let _gone = Gone(handoff);
    crate::scheduling::run_only_when_idle();
    let mut turn = handoff.lock();
    loop {
        if turn.closed {
            return;
        }
        if turn.outcome.is_none() {
            let Turn {
                argon2,
                password,
                salt,
                output,
                memory,
                outcome,
                ..
            } = &mut *turn;
            if let Some(argon2) = argon2 {
                let blocks = argon2.params().block_count();
                *outcome = Some(argon2.hash_password_into_with_memory(
                    password,
                    salt,
                    output,
                    &mut memory[..blocks],
                ));
                handoff.changed.notify_all();
            }
        }
        turn = handoff.wait(turn);
    }
}

enum Job {
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

#[derive(Clone)]
pub struct PasswordHasher {
    jobs: mpsc::Sender<Job>,
    api: Arc<ApiActivity>,
}

/// The API requests in flight, which the hashing threads make way for.
#[derive(Default)]
struct ApiActivity {
    in_flight: AtomicUsize,
}

/// An API request in flight (see [`PasswordHasher::api_request`]); it counts
/// until dropped, also when its request is cancelled.
pub struct ApiRequest(Arc<ApiActivity>);

impl Drop for ApiRequest {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// While API requests are in flight, a hashing thread rests after a hash
/// `REST_PER_HASH` times as long as the hash took (so hashing takes at most a
/// tenth of the time), but never longer than `LONGEST_REST`; it starts at once
/// when the API goes quiet.
const REST_PER_HASH: u32 = 9;
const LONGEST_REST: Duration = Duration::from_secs(1);
/// How often a resting thread looks whether the API went quiet.
const REST_POLL: Duration = Duration::from_millis(5);

/// One hashing thread's rest between hashes (see the module's comment).
#[derive(Default)]
struct Pace {
    rest_until: Option<Instant>,
}

impl Pace {
    fn hashed(&mut self, started: Instant, ended: Instant) {
        let rest = (ended - started)
            .saturating_mul(REST_PER_HASH)
            .min(LONGEST_REST);
        self.rest_until = Some(ended + rest);
    }

    /// How much longer to rest before the next hash: nothing when the API is
    /// quiet or the rest is over.
    fn rest_left(&self, now: Instant, api_busy: bool) -> Option<Duration> {
        let left = self.rest_until?.checked_duration_since(now)?;
        (api_busy && !left.is_zero()).then_some(left)
    }
}

impl PasswordHasher {
    /// Starts `threads` hashing threads; hashes wait in a queue for one. The
    /// threads end when the last clone of the hasher is dropped.
    pub fn new(threads: usize) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let api = Arc::new(ApiActivity::default());
        for n in 0..threads.max(1) {
            let (queue, api) = (queue.clone(), api.clone());
            let spawned = IdleArgon2::start(format!("tally-argon2-{n}i")).and_then(|idle| {
                std::thread::Builder::new()
                    .name(format!("tally-argon2-{n}"))
                    .spawn(move || run_hashing_thread(&queue, &api, &idle))
            });
            if let Err(error) = spawned {
                tracing::error!(%error, "cannot start a password hashing thread");
            }
        }
        Self { jobs, api }
    }

    /// Counts an API request as in flight until the answer is dropped: while
    /// any is, the hashing threads rest between hashes.
    pub fn api_request(&self) -> ApiRequest {
        self.api.in_flight.fetch_add(1, Ordering::Relaxed);
        ApiRequest(self.api.clone())
    }

    /// The hashing threads right for this machine: half its cores, at least one.
    pub fn threads_for_this_machine() -> usize {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
    }

    pub async fn hash(&self, password: &Password) -> anyhow::Result<String> {
        let (answer, answered) = oneshot::channel();
        self.jobs
            .send(Job::Hash {
                password: password.expose().to_owned(),
                answer,
            })
            .map_err(|_| anyhow::anyhow!("the password hashing threads are gone"))?;
        answered
            .await
            .map_err(|_| anyhow::anyhow!("a password hashing thread failed"))?
    }

    /// Checks a password against a stored hash, or against a dummy hash when
    /// there is no account, taking the same time either way.
    pub async fn verify(&self, stored: Option<&str>, candidate: &str) -> bool {
        let known = stored.is_some();
        let (answer, answered) = oneshot::channel();
        let job = Job::Verify {
            stored: stored.map(str::to_owned),
            candidate: candidate.to_owned(),
            answer,
        };
        if self.jobs.send(job).is_err() {
            return false;
        }
        let matched = answered.await.unwrap_or(false);
        known && matched
    }
}

/// A hashing thread: takes jobs, rests ([`Pace`]), has `idle` compute, and
/// answers.
fn run_hashing_thread(queue: &Mutex<mpsc::Receiver<Job>>, api: &ApiActivity, idle: &IdleArgon2) {
    let mut pace = Pace::default();
    loop {
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        while let Some(left) =
            pace.rest_left(Instant::now(), api.in_flight.load(Ordering::Relaxed) > 0)
        {
            std::thread::sleep(left.min(REST_POLL));
        }
        let started = Instant::now();
        match job {
            Err(_) => return,
            Ok(Job::Hash { password, answer }) => {
                // The asker may have gone (a closed connection): nothing to do.
                let _ = answer.send(hash_with(idle, password.as_bytes()));
            }
            Ok(Job::Verify {
                stored,
                candidate,
                answer,
            }) => {
                let stored = stored.as_deref().unwrap_or_else(|| dummy_hash(idle));
                let _ = answer.send(verify_with(idle, stored, candidate.as_bytes()));
            }
        }
        pace.hashed(started, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::PasswordHasher as _;

    #[test]
    fn a_thread_rests_after_a_hash_only_while_the_api_is_busy() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut pace = Pace::default();
        assert_eq!(pace.rest_left(start, true), None, "no hash yet");
        pace.hashed(start, start + ms(40));
        let after = start + ms(40);
        assert_eq!(pace.rest_left(after, true), Some(ms(360)));
        assert_eq!(pace.rest_left(after + ms(300), true), Some(ms(60)));
        assert_eq!(pace.rest_left(after, false), None, "the API is quiet");
        assert_eq!(pace.rest_left(after + ms(360), true), None, "rested");
        // A hash that took long (preempted again and again) rests a second.
        pace.hashed(start, start + ms(500));
        assert_eq!(pace.rest_left(start + ms(500), true), Some(LONGEST_REST));
    }

    #[tokio::test]
    async fn api_requests_count_while_in_flight() {
        let hasher = PasswordHasher::new(1);
        let in_flight = || hasher.api.in_flight.load(Ordering::Relaxed);
        let first = hasher.api_request();
        let second = hasher.api_request();
        assert_eq!(in_flight(), 2);
        drop(first);
        assert_eq!(in_flight(), 1);
        drop(second);
        assert_eq!(in_flight(), 0);
    }

    #[tokio::test]
    async fn a_hash_verifies_only_its_own_password() -> anyhow::Result<()> {
        let hasher = PasswordHasher::new(2);
        let hash = hasher.hash(&Password::parse("correct horse")?).await?;
        assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"));
        assert!(hasher.verify(Some(&hash), "correct horse").await);
        assert!(!hasher.verify(Some(&hash), "wrong horse").await);
        assert!(!hasher.verify(None, "correct horse").await);
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
        assert!(hasher.verify(Some(&stored), "battery staple").await);
        assert!(!hasher.verify(Some(&stored), "battery stapler").await);
        // And ours verify with the crate's own verifier.
        let ours = hasher.hash(&Password::parse("battery staple")?).await?;
        let parsed = PasswordHash::new(&ours).map_err(|e| anyhow::anyhow!("{e}"))?;
        assert!(argon2::PasswordVerifier::verify_password(
            &Argon2::default(),
            b"battery staple",
            &parsed
        )
        .is_ok());
        Ok(())
    }
}
