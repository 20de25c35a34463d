//! Argon2id password hashes, computed on a few dedicated threads (not tokio's
//! blocking pool) that run only when nothing else wants the CPU (SCHED_IDLE,
//! see `scheduling`), so sign-in storms cannot starve the API: the async
//! workers never run a hash, and any of them that wakes takes the CPU from
//! one. Each thread keeps its 19 MiB of argon2 memory and reuses it for every
//! hash.
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
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// OWASP's recommended argon2id parameters: 19 MiB, 2 passes, 1 lane.
fn params() -> Params {
    Params::new(19 * 1024, 2, 1, None).unwrap_or_default()
}

/// A real hash of a random password, checked when the user is unknown so that
/// the answer takes as long as for a known user.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        // Made once, on a hashing thread, in memory of its own.
        hash_with(&mut Vec::new(), crate::domain::new_id().as_bytes()).unwrap_or_default()
    })
}

/// Hashes `password` into a PHC string, in `memory` (grown once to the size the
/// parameters need, then reused).
fn hash_with(memory: &mut Vec<Block>, password: &[u8]) -> anyhow::Result<String> {
    let params = params();
    let salt = SaltString::generate(&mut OsRng);
    let mut salt_bytes = [0u8; 64];
    let salt_bytes = salt
        .decode_b64(&mut salt_bytes)
        .map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
    let blocks = blocks(memory, params.block_count());
    let output = Output::init_with(Params::DEFAULT_OUTPUT_LEN, |out| {
        argon2
            .hash_password_into_with_memory(password, salt_bytes, out, &mut *blocks)
            .map_err(|_| argon2::password_hash::Error::Crypto)
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
/// and parameters the string names, in `memory`.
fn verify_with(memory: &mut Vec<Block>, stored: &str, password: &[u8]) -> bool {
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
    let argon2 = Argon2::new(algorithm, version, params.clone());
    let blocks = blocks(memory, params.block_count());
    Output::init_with(expected.len(), |out| {
        argon2
            .hash_password_into_with_memory(password, salt_bytes, out, &mut *blocks)
            .map_err(|_| argon2::password_hash::Error::Crypto)
    })
    // `Output` compares in constant time.
    .is_ok_and(|computed| computed == expected)
}

fn blocks(memory: &mut Vec<Block>, count: usize) -> &mut [Block] {
    if memory.len() < count {
        memory.resize(count, Block::default());
    }
    &mut memory[..count]
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
            let spawned = std::thread::Builder::new()
                .name(format!("tally-argon2-{n}"))
                .spawn(move || run_hashing_thread(&queue, &api));
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

fn run_hashing_thread(queue: &Mutex<mpsc::Receiver<Job>>, api: &ApiActivity) {
    // The API takes the CPU from a hash whenever it wants it.
    crate::scheduling::run_only_when_idle();
    let mut memory = Vec::new();
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
                let _ = answer.send(hash_with(&mut memory, password.as_bytes()));
            }
            Ok(Job::Verify {
                stored,
                candidate,
                answer,
            }) => {
                let stored = stored.as_deref().unwrap_or_else(|| dummy_hash());
                let _ = answer.send(verify_with(&mut memory, stored, candidate.as_bytes()));
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
