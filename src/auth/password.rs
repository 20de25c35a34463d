//! Argon2id password hashes, computed on a few dedicated threads (not tokio's
//! blocking pool) that run only when nothing else wants the CPU (SCHED_IDLE,
//! see `scheduling`), so sign-in storms cannot starve the API: the async
//! workers never run a hash, and any of them that wakes takes the CPU from
//! one. Each thread keeps its 19 MiB of argon2 memory and reuses it for every
//! hash.

use crate::domain::Password;
use argon2::password_hash::{rand_core::OsRng, Output, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
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
}

impl PasswordHasher {
    /// Starts `threads` hashing threads; hashes wait in a queue for one. The
    /// threads end when the last clone of the hasher is dropped.
    pub fn new(threads: usize) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for n in 0..threads.max(1) {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("tally-argon2-{n}"))
                .spawn(move || run_hashing_thread(&queue));
            if let Err(error) = spawned {
                tracing::error!(%error, "cannot start a password hashing thread");
            }
        }
        Self { jobs }
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

fn run_hashing_thread(queue: &Mutex<mpsc::Receiver<Job>>) {
    // The API takes the CPU from a hash whenever it wants it.
    crate::scheduling::run_only_when_idle();
    let mut memory = Vec::new();
    loop {
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::PasswordHasher as _;

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
