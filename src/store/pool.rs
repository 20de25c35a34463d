//! What both backends' connection handling shares.

/// Counts the revocations, suspensions and secret changes this process has
/// committed, so that what was read before one of them is known to be stale
/// (the introspection cache). Bumped after the commit: a read that started
/// before it may have seen the old rows, and then sees another count.
#[derive(Default)]
pub struct RevocationEpoch(std::sync::atomic::AtomicU64);

impl RevocationEpoch {
    pub fn current(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) fn bump(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A pool size of `per_core` connections for each core, within `min..=max`.
pub(super) fn connections_per_core(per_core: u32, min: u32, max: u32) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    u32::try_from(cores)
        .unwrap_or(u32::MAX)
        .saturating_mul(per_core)
        .clamp(min, max)
}

/// What a backend's `write_batch` runs: one write on the connection it lends.
pub(crate) type BatchFuture<'c, O> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<O, sqlx::Error>> + Send + 'c>>;
